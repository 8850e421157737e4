/*
 * Which functions and handlers an event matches, evaluated as relay start
 * evaluates it: every function of a functions directory scanned now,
 * functions by name and rules in file order (execution order). Shared by
 * relay function match and relay dlq show.
 */
#ifndef RELAY_CMD_MATCH_H
#define RELAY_CMD_MATCH_H

#include <stddef.h>
#include <stdint.h>

struct event;

struct cmd_match {
	char *function;
	char *handler;
};

/*
 * Scans dir and matches ev at instant now (ns): *out holds *n matches in
 * execution order (free with cmd_match_free). An invalid function is
 * skipped with one line on stderr, "relay <words>: skipping invalid
 * function <name>: <error>". Returns 0, or -1 with *err (malloc'd) when
 * dir cannot be scanned.
 */
int cmd_match_event(const char *words, const char *dir, const struct event *ev, int64_t now,
		    struct cmd_match **out, size_t *n, char **err);
void cmd_match_free(struct cmd_match *m, size_t n);

/*
 * Reads an EVENT argument: JSON text as given, "@file", or "-" for stdin,
 * at most EVENT_MAX_BYTES. Returns 0 with *text (malloc'd) and *len, or -1
 * with *why (malloc'd: "cannot open F: ...", "cannot read F: not a regular
 * file" for a FIFO, device or directory, "event larger than N bytes",
 * "read error on F"). Shared by relay function match, invoke and event
 * send.
 */
int cmd_read_event(const char *arg, char **text, size_t *len, char **why);

#endif
