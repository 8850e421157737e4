/*
 * The evaluation behind `relay function match`: which functions and
 * handlers an event matches now, against a functions directory, in the
 * order relay start would run them (functions by name, rules in file
 * order). Shared by the commands that show it (function match, event
 * status).
 */
#ifndef RELAY_CMD_MATCH_H
#define RELAY_CMD_MATCH_H

#include <stddef.h>
#include <stdint.h>

#include "event.h"

struct cmd_match {
	char *function;
	char *handler;
};

/*
 * Scans dir and evaluates ev at now (Unix ns, for now() patterns). Each
 * invalid function is skipped with one line on stderr, "relay <words>:
 * skipping invalid function <name>: <error>". Returns 0 with *out (*n
 * entries, free with cmd_matches_free), or -1 with *err (malloc'd) when dir
 * cannot be scanned.
 */
int cmd_match_event(const char *words, const char *dir, const struct event *ev, int64_t now,
		    struct cmd_match **out, size_t *n, char **err);
void cmd_matches_free(struct cmd_match *m, size_t n);

#endif
