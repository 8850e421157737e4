/*
 * The relay command line: a single table (cmd.c) maps command words to
 * handlers, one source file per command family (tmux's cmd-*.c, git's
 * commands[]). Each entry says what the command may touch, so the rules of
 * the spec ("administrative commands never start the runtime") live in the
 * table rather than in scattered checks.
 */
#ifndef RELAY_CMD_H
#define RELAY_CMD_H

#include <stdbool.h>
#include <stdio.h>

/* What a command touches; documentation in the table, shown by --help. */
enum cmd_touches {
	CMD_RUNTIME = 1 << 0,  /* starts the runtime (Redis, Docker, functions) */
	CMD_PING = 1 << 1,     /* connects to Redis and Docker, starts nothing */
	CMD_STATE_RO = 1 << 2, /* reads the state database only */
	CMD_FILES = 1 << 3,    /* reads/writes files under the data directory */
	CMD_PURE = 1 << 4,     /* touches nothing but its arguments/files given */
};

struct cmd {
	const char *words;   /* "function inspect" */
	const char *args;    /* "<name>" */
	const char *summary; /* one line */
	const char *help;    /* extra help text, may be NULL */
	unsigned touches;
	/* argv[0] is the full command name; options not yet parsed. Returns
	 * the exit status. */
	int (*exec)(const struct cmd *self, int argc, char **argv);
};

int cmd_main(int argc, char **argv);

/* Prints "usage: relay <words> <args>" + help to f. */
void cmd_usage(const struct cmd *c, FILE *f);

/*
 * Small option parser shared by the commands. opts is terminated by an
 * entry with name NULL. Accepts "--name value", "--name=value", "-x value"
 * for short names, flags without values, and "--" to end options.
 * "-h"/"--help" print usage to stdout (returns 1: caller exits 0). An
 * unknown option or a missing value prints usage to stderr (returns 2:
 * caller exits 2). Positional arguments are collected into pos/npos
 * (at most maxpos; more is a usage error). Returns 0 on success.
 */
struct cmd_opt {
	const char *name;  /* "--dir" */
	const char *alias; /* "-d" or NULL */
	bool has_arg;
	const char **value; /* set for options with an argument */
	bool *flag;	    /* set for flags */
};
int cmd_parse(const struct cmd *c, int argc, char **argv, const struct cmd_opt *opts,
	      const char **pos, int minpos, int maxpos, int *npos);

/* Wrapper: parse, and on help/usage error return through *status. */
#define CMD_PARSE_OR_RETURN(c, argc, argv, opts, pos, minpos, maxpos, npos)         \
	do {                                                                        \
		int r_ = cmd_parse(c, argc, argv, opts, pos, minpos, maxpos, npos); \
		if (r_ == 1)                                                        \
			return 0;                                                   \
		if (r_ == 2)                                                        \
			return 2;                                                   \
	} while (0)

/* Prints "relay: <msg>" to stderr; returns 1. */
int cmd_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Entries, defined by the family files. */
extern const struct cmd cmd_start, cmd_health, cmd_stats;
extern const struct cmd cmd_function_ls, cmd_function_inspect, cmd_function_validate,
	cmd_function_match;
extern const struct cmd cmd_secret_ls, cmd_secret_set, cmd_secret_rm;
extern const struct cmd cmd_git_keygen, cmd_git_set, cmd_git_sync, cmd_git_status, cmd_git_remove;
extern const struct cmd cmd_schedule_next;

/* For commands whose issue has not landed yet: says so, exits 1. */
int cmd_not_implemented(const struct cmd *self, int argc, char **argv);

#endif
