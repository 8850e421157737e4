/*
 * relay function ls|inspect|validate|match.
 *
 * validate and match read only the functions directory and their
 * arguments, so an author can run them anywhere: no Redis, Docker or state database.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd/cmd.h"
#include "cmd/function_state.h"
#include "cmd/match.h"
#include "io/event.h"
#include "model/function.h"
#include "model/pattern.h"
#include "base/rfc3339.h"
#include "base/util.h"

/* DIR, else the functions directory (RELAY_FUNCTIONS_DIR, else /functions). */
static int validate_exec(const struct cmd *self, const struct cmd_args *args,
			 const struct config *cfg)
{
	const char *dir = args->npos ? args->pos[0] : cfg->functions_dir;

	struct function_scan scan;
	char *err = NULL;
	if (function_scan_dir(dir, &scan, &err) < 0) {
		int rc = cmd_fail("function validate: %s", err);
		free(err);
		return rc;
	}
	int bad = 0, seen = 0;
	for (size_t i = 0; i < scan.n; i++) {
		struct function_entry *e = &scan.v[i];
		if (e->status == FUNCTION_NO_TEMPLATE)
			continue;
		seen++;
		for (size_t k = 0; k < e->warnings.n; k++)
			cmd_print_line(stdout, "%s: warning: %s", e->name, e->warnings.v[k]);
		if (e->status == FUNCTION_OK) {
			cmd_print_line(stdout, "%s: ok", e->name);
		} else {
			bad++;
			for (size_t k = 0; k < e->errors.n; k++)
				cmd_print_line(stdout, "%s: %s", e->name, e->errors.v[k]);
		}
	}
	function_scan_free(&scan);
	if (!seen)
		fprintf(stderr,
			"relay: function validate: no function directories with a template.yaml in "
			"%s\n",
			dir);
	return bad ? 1 : 0;
}

/* --dir, else the functions directory (RELAY_FUNCTIONS_DIR, else /functions). */
static int match_exec(const struct cmd *self, const struct cmd_args *args, const struct config *cfg)
{
	const char *dir_opt = cmd_opt(args, "--dir"), *now_opt = cmd_opt(args, "--now");
	int64_t now = now_wall_ns();
	if (now_opt && rfc3339_parse_ns(now_opt, strlen(now_opt), &now) < 0) {
		fprintf(stderr,
			"relay function match: --now %s is not an RFC 3339 time (e.g. "
			"2026-09-13T22:47:41Z)\n",
			now_opt);
		return 2;
	}
	char *text = NULL, *why = NULL;
	size_t len = 0;
	if (cmd_read_event(args->pos[0], &text, &len, &why) < 0) {
		cmd_print_line(stderr, "relay function match: %s", why);
		free(why);
		return 2;
	}
	struct event *ev = NULL;
	if (event_parse_json(text, len, &ev, &why) != EVENT_OK) {
		cmd_print_line(stderr, "relay function match: invalid event: %s",
			       why ? why : "invalid");
		free(why);
		free(text);
		return 2;
	}
	free(text);

	const char *dir = dir_opt ? dir_opt : cfg->functions_dir;
	struct cmd_match *m = NULL;
	size_t n = 0;
	char *err = NULL;
	int rc = cmd_match_event(self->words, dir, ev, now, &m, &n, &err);
	event_free(ev);
	if (rc < 0) {
		rc = cmd_fail("function match: %s", err);
		free(err);
		return rc;
	}
	for (size_t i = 0; i < n; i++)
		cmd_print_line(stdout, "%s\t%s", m[i].function, m[i].handler);
	cmd_match_free(m, n);
	return 0;
}

const struct cmd cmd_function_ls = {
	.words = "function ls",
	.args = "[--json]",
	.summary = "list functions",
	.opts = (const struct cmd_opt[]){{"--json", NULL, false}, {NULL}},
	.help = "Lists the functions in the state database: runtime, status, number of event "
		"handlers,\n"
		"and when each was last prepared or updated. --json prints one JSON document "
		"(docs/json.md).\n",
	.touches = CMD_STATE_READ,
	.exec = function_state_ls_exec,
};
const struct cmd cmd_function_inspect = {
	.words = "function inspect",
	.args = "<name> [--json]",
	.summary = "show one function",
	.opts = (const struct cmd_opt[]){{"--json", NULL, false}, {NULL}},
	.help = "--json prints one JSON document (docs/json.md).\n",
	.minpos = 1,
	.maxpos = 1,
	.touches = CMD_STATE_READ,
	.exec = function_state_inspect_exec,
};
const struct cmd cmd_function_validate = {
	.words = "function validate",
	.args = "[DIR]",
	.summary = "validate every function directory under DIR",
	.help = "Prints one line per function: \"<name>: ok\", or one \"<name>: <error>\" line per "
		"problem\n"
		"(and \"<name>: warning: ...\" lines for unknown keys). DIR defaults to the "
		"functions\n"
		"directory (RELAY_FUNCTIONS_DIR, else /functions). Exit 0 when every function is "
		"valid.\n",
	.maxpos = 1,
	.touches = CMD_FUNCTIONS_READ,
	.exec = validate_exec,
};
const struct cmd cmd_function_match = {
	.words = "function match",
	.args = "[--dir DIR] [--now RFC3339] EVENT",
	.summary = "print the handlers an event would run, in order",
	.opts = (const struct cmd_opt[]){{"--dir", NULL, true}, {"--now", NULL, true}, {NULL}},
	.minpos = 1,
	.maxpos = 1,
	.help = "EVENT is JSON text, @file, or - for stdin. Prints \"<function>\\t<handler>\" for "
		"each\n"
		"matching rule in the order relay start would run them. --now fixes the instant "
		"used by\n"
		"now() patterns. Exit 0 whether or not anything matched, 2 for an invalid event.\n",
	.touches = CMD_FUNCTIONS_READ,
	.exec = match_exec,
};
