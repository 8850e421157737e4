/*
 * relay stats: renders the global snapshot from the state database (the
 * counters the running worker flushes every 5 s). Reads only
 * <data dir>/db.sqlite3, opened read-only: no Redis, Docker or functions
 * directory, and RELAY_DATA_DIR is the only setting it uses. A fresh
 * (missing) database renders zeroes and "Updated: never"; nothing is created.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cmd/cmd.h"
#include "cmd/render.h"
#include "engine/state.h"
#include "base/util.h"

static int stats_exec(const struct cmd *self, const struct cmd_args *args, const struct config *cfg)
{
	struct state *s = NULL;
	struct state_stats st;
	char *err = NULL;
	int rc = 1;
	if (state_open_readonly(cfg->data_dir, &s, &err) < 0 ||
	    state_read_stats(s, &st, &err) < 0) {
		cmd_fail("stats: %s", err);
		goto out;
	}
	if (cmd_flag(args, "--json")) {
		rc = cmd_print_json(self, render_state_json_stats(&st));
		goto out;
	}
	struct buf b;
	buf_init(&b, 1u << 16);
	render_state_stats(&b, &st, (int64_t)time(NULL));
	if (fwrite(b.data, 1, b.len, stdout) != b.len || fflush(stdout) != 0)
		cmd_fail("stats: write: output error");
	else
		rc = 0;
	buf_free(&b);
out:
	state_close(s);
	free(err);
	return rc;
}

const struct cmd cmd_stats = {
	.words = "stats",
	.args = "[--json]",
	.summary = "show current operational statistics",
	.opts = (const struct cmd_opt[]){{"--json", NULL, false}, {NULL}},
	.help = "Prints the global counters the running worker last wrote to the state database\n"
		"(<data dir>/db.sqlite3, refreshed every 5 s): events processed, handler "
		"successes\n"
		"and failures, retries, DLQ entries and the consumer-group backlog.\n"
		"A fresh database shows zeroes and \"Updated: never\". --json prints one JSON "
		"document\n"
		"(docs/json.md).\n",
	.touches = CMD_STATE_READ,
	.exec = stats_exec,
};
