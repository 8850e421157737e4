/* relay function ls, relay function inspect: see function_state.h. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cmd/cmd.h"
#include "cmd/function_state.h"
#include "cmd/render.h"
#include "cron.h"
#include "state.h"
#include "util.h"

#define OUTPUT_MAX (64u << 20)

/* The cron description inspect shows in parentheses; NULL (the raw
 * expression alone) when the expression does not parse or is too irregular
 * to describe. Display only: it never fails the command. */
static char *describe_cron(const char *expr)
{
	struct cron *c = NULL;
	char *err = NULL;
	if (cron_parse(expr, &c, &err) < 0) {
		free(err);
		return NULL;
	}
	char *d = cron_describe(c);
	cron_free(c);
	return d;
}

/* Writes b to stdout; 0, or 1 after reporting a write error. */
static int emit(const struct cmd *self, struct buf *b)
{
	if (b->len && fwrite(b->data, 1, b->len, stdout) != b->len)
		return cmd_fail("%s: write: output error", self->words);
	if (fflush(stdout) != 0)
		return cmd_fail("%s: write: output error", self->words);
	return 0;
}

int function_ls_exec(const struct cmd *self, const struct cmd_args *args, const struct config *cfg)
{
	struct state *s = NULL;
	struct state_function_info *fs = NULL;
	size_t n = 0;
	char *err = NULL;
	struct buf b;
	buf_init(&b, OUTPUT_MAX);
	int rc = 1;
	if (state_open_readonly(cfg->data_dir, &s, &err) < 0 ||
	    state_list_functions(s, &fs, &n, &err) < 0) {
		cmd_fail("%s: %s", self->words, err);
		goto out;
	}
	if (cmd_flag(args, "--json")) {
		rc = cmd_print_json(self, state_json_ls(fs, n));
		goto out;
	}
	state_render_ls(&b, fs, n, (int64_t)time(NULL));
	rc = emit(self, &b);
out:
	state_function_infos_free(fs, n);
	state_close(s);
	buf_free(&b);
	free(err);
	return rc;
}

int function_inspect_exec(const struct cmd *self, const struct cmd_args *args,
			  const struct config *cfg)
{
	const char *name = args->pos[0];
	struct state *s = NULL;
	struct state_function_info *f = NULL;
	char *err = NULL;
	struct buf b;
	buf_init(&b, OUTPUT_MAX);
	int rc = 1;
	if (state_open_readonly(cfg->data_dir, &s, &err) < 0 ||
	    state_get_function(s, name, &f, &err) < 0) {
		cmd_fail("%s: %s", self->words, err);
		goto out;
	}
	if (!f) {
		cmd_fail("%s: no function named \"%s\"", self->words, name);
		goto out;
	}
	if (cmd_flag(args, "--json")) {
		rc = cmd_print_json(self, state_json_inspect(f, describe_cron));
		goto out;
	}
	state_render_inspect(&b, f, (int64_t)time(NULL), describe_cron);
	rc = emit(self, &b);
out:
	state_function_info_free(f);
	state_close(s);
	buf_free(&b);
	free(err);
	return rc;
}
