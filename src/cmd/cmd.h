/*
 * The relay command line: a single table (cmd.c) maps command words to
 * handlers, one source file per command family (tmux's cmd-*.c, git's
 * commands[]). Each entry declares its options and positional arguments
 * and what it touches; cmd_main parses the arguments against that spec and
 * loads the settings the entry's flags call for before the handler runs,
 * so the rules of the spec ("administrative commands never start the
 * runtime") live in the table rather than in scattered checks.
 *
 * Settings come from config (config.h) for every command: relay start all
 * of them, relay health the same with only REDIS_URI required, every other
 * command only
 * RELAY_DATA_DIR and RELAY_FUNCTIONS_DIR (config_load_dirs), so that an
 * administrative command never fails over a variable it does not use.
 */
#ifndef RELAY_CMD_H
#define RELAY_CMD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "model/config.h"

/*
 * What a command touches: flags, each true of the command. --help shows
 * one sentence per combination (cmd.c); CMD_ENGINE and CMD_REDIS decide
 * which settings cmd_main loads. 0: nothing but the arguments given.
 */
enum cmd_touches {
	CMD_ENGINE = 1 << 0,	      /* runs the engine (src/engine/): consumers, reconciler, servers */
	CMD_REDIS = 1 << 1,	      /* connects to Redis (REDIS_URI) */
	CMD_DOCKER = 1 << 2,	      /* connects to the Docker daemon */
	CMD_STATE_READ = 1 << 3,      /* reads the state database */
	CMD_STATE_WRITE = 1 << 4,     /* writes the state database */
	CMD_DATA_FILES = 1 << 5,      /* reads/writes files under the data directory */
	CMD_FUNCTIONS_READ = 1 << 6,  /* reads the functions directory */
	CMD_FUNCTIONS_WRITE = 1 << 7, /* creates or replaces function directories in it */
	CMD_NETWORK = 1 << 8,	      /* other hosts: a git remote, HTTP listeners */
	CMD_STREAM = 1 << 9,	      /* the event stream and group: REDIS_STREAM and
					 REDIS_GROUP required, validated like relay start */
};

/*
 * One option of a command. Accepted as "--name value", "--name=value",
 * "-x value" for an alias, and as a flag without a value when !has_arg.
 */
struct cmd_opt {
	const char *name;  /* "--dir" */
	const char *alias; /* "-d" or NULL */
	bool has_arg;
};

/* Bounds on an entry's spec (checked by tests/unit/test_cmd.c). */
#define CMD_OPTS_MAX 8
#define CMD_POS_MAX 100 /* relay dlq replay|rm ID... */

struct cmd;

/* A command's parsed arguments, borrowed from argv. */
struct cmd_args {
	const struct cmd *cmd;
	const char *opt[CMD_OPTS_MAX]; /* by index in cmd->opts: the value (a flag:
					  its word), NULL when absent */
	const char *pos[CMD_POS_MAX];  /* positional arguments */
	int npos;
};

struct cmd {
	const char *words;   /* "function inspect" */
	const char *args;    /* "<name>" */
	const char *summary; /* one line */
	const char *help;    /* extra help text, may be NULL */
	/* The options, ended by an entry with name NULL; NULL: none. The
	 * last of a repeated option wins. "--" ends the options. */
	const struct cmd_opt *opts;
	int minpos, maxpos; /* positional arguments accepted */
	unsigned touches;   /* enum cmd_touches */
	/* An option (a flag in opts) that, when given, makes the command touch
	 * the functions directory only ("--dry-run"): the settings are then
	 * loaded as for CMD_FUNCTIONS_READ. NULL: none. */
	const char *local_opt;
	/* Runs with the arguments parsed and the settings loaded (cfg).
	 * Returns the exit status. */
	int (*exec)(const struct cmd *self, const struct cmd_args *args, const struct config *cfg);
};

int cmd_main(int argc, char **argv);

/* Prints "usage: relay <words> <args>" + help + what it touches to f. */
void cmd_usage(const struct cmd *c, FILE *f);

/* The value of option name ("--dir"), NULL when absent; cmd_flag: whether
 * the flag was given. name must be in the command's spec (else abort). */
const char *cmd_opt(const struct cmd_args *a, const char *name);
bool cmd_flag(const struct cmd_args *a, const char *name);

/* Prints "relay: <msg>" to stderr, msg through text_escape (TEXT_VERBATIM:
 * one line, no control character; it may quote anything from outside);
 * returns 1. */
int cmd_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints one line to f: the text formatted from fmt through text_escape
 * (TEXT_VERBATIM: normal text unchanged, tabs kept, no control character
 * or newline), then a newline. For lines that quote outside text. */
void cmd_print_line(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * For commands that touch CMD_REDIS: one connection to REDIS_URI, one
 * attempt with the usual timeouts (redis.h). Returns 0 with *out, or
 * prints one line to stderr, "relay: <words>: cannot reach Redis: <why>"
 * (the password never shown), and returns -1.
 */
struct redis;
int cmd_redis_connect(const struct cmd *self, const struct config *cfg, struct redis **out);

/* --json output: doc (consumed) as one JSON document on stdout, indented
 * by 2, keys in insertion order, then a newline; through text_escape_json,
 * so strings holding DEL, C1 or bidi controls print them \u-escaped. 0, or
 * 1 after an output error (printed). */
struct json_t;
int cmd_print_json(const struct cmd *self, struct json_t *doc);

/* The one sentence --help shows for a combination of enum cmd_touches;
 * NULL for a combination no command has. */
const char *cmd_touches_text(unsigned touches);

/* The table, in the order --help lists it (for tests). */
extern const struct cmd *const cmd_table[];
extern const size_t cmd_table_len;

/* Entries, defined by the family files. */
extern const struct cmd cmd_start, cmd_health, cmd_stats;
extern const struct cmd cmd_function_ls, cmd_function_inspect, cmd_function_validate,
	cmd_function_match, cmd_function_invoke, cmd_function_new;
extern const struct cmd cmd_secret_ls, cmd_secret_set, cmd_secret_rm;
extern const struct cmd cmd_git_keygen, cmd_git_set, cmd_git_sync, cmd_git_status, cmd_git_remove;
extern const struct cmd cmd_schedule_next;
extern const struct cmd cmd_event_status, cmd_event_send;
extern const struct cmd cmd_dlq_ls, cmd_dlq_show, cmd_dlq_replay, cmd_dlq_rm;

#endif
