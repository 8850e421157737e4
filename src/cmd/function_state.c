/* relay function ls, relay function inspect: see function_state.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd/cmd.h"
#include "cmd/function_state.h"
#include "cmd/render.h"
#include "model/cron.h"
#include "model/function.h"
#include "model/retry.h"
#include "model/template.h"
#include "io/docker.h"
#include "engine/state.h"
#include "base/util.h"

#define OUTPUT_MAX (64u << 20)

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

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

int function_state_ls_exec(const struct cmd *self, const struct cmd_args *args, const struct config *cfg)
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
		rc = cmd_print_json(self, render_state_json_ls(fs, n));
		goto out;
	}
	render_state_ls(&b, fs, n, (int64_t)time(NULL));
	rc = emit(self, &b);
out:
	state_function_infos_free(fs, n);
	state_close(s);
	buf_free(&b);
	free(err);
	return rc;
}

/* Warm containers running for function, per handler (the relay.handler
 * label), from the Docker daemon (relay.warm=true, relay.function=name):
 * a JSON array of {"handler", "containers"} sorted by handler, or NULL when
 * there is none or the daemon cannot be asked within 2 s (display only). */
static json_t *warm_containers(const char *function)
{
	struct docker *d = NULL;
	char *err = NULL;
	if (docker_open(&d, &err) < 0) {
		free(err);
		return NULL;
	}
	json_t *f =
		json_pack("{s:[s, s+]}", "label", "relay.warm=true", "relay.function=", function);
	char *filters = f ? json_dumps(f, JSON_COMPACT) : NULL;
	json_decref(f);
	char *enc = filters ? docker_query_encode(filters) : NULL;
	char *path = enc ? xasprintf("/containers/json?filters=%s", enc) : NULL;
	struct docker_response r = {0};
	json_t *out = NULL, *counts = json_object();
	if (path && docker_request(d, "GET", path, NULL, 0, NULL, 2000, &r) == 0 &&
	    r.status == 200) {
		json_t *list = json_loadb(r.body, r.len, 0, NULL);
		size_t i;
		json_t *c;
		json_array_foreach(list, i, c)
		{
			json_t *labels = json_object_get(c, "Labels");
			const char *fn =
				json_string_value(json_object_get(labels, "relay.function"));
			const char *h = json_string_value(json_object_get(labels, "relay.handler"));
			const char *w = json_string_value(json_object_get(labels, "relay.warm"));
			/* The filter is the daemon's; the rule is ours. */
			if (!fn || !h || !w || strcmp(fn, function) != 0 || strcmp(w, "true") != 0)
				continue;
			json_object_set_new(
				counts, h,
				json_integer(json_integer_value(json_object_get(counts, h)) + 1));
		}
		json_decref(list);
	}
	if (json_object_size(counts)) {
		out = json_array();
		const char *k;
		json_t *v;
		/* jansson keeps insertion order; sort by handler for a stable view. */
		size_t n = json_object_size(counts), i = 0;
		const char **keys = xcalloc(n, sizeof *keys);
		json_object_foreach(counts, k, v) keys[i++] = k;
		qsort(keys, n, sizeof *keys, cmp_str);
		for (i = 0; i < n; i++)
			json_array_append_new(
				out,
				json_pack("{s:s, s:I}", "handler", keys[i], "containers",
					  json_integer_value(json_object_get(counts, keys[i]))));
		free(keys);
	}
	json_decref(counts);
	docker_response_free(&r);
	free(path);
	free(enc);
	free(filters);
	docker_close(d);
	return out;
}

/* The widest "handler" of rows, for a section's alignment. */
static size_t handler_cols(const json_t *rows)
{
	size_t w = 0, i;
	json_t *row;
	json_array_foreach(rows, i, row)
	{
		size_t c = render_cols(json_string_value(json_object_get(row, "handler")));
		if (c > w)
			w = c;
	}
	return w;
}

/* inspect's "Warm:" section, aligned as Standby; nothing when warm is NULL. */
static void render_warm(struct buf *b, const json_t *warm)
{
	if (!warm)
		return;
	size_t w = handler_cols(warm), i;
	json_t *row;
	buf_appendf(b, "\nWarm:\n");
	json_array_foreach(warm, i, row)
	{
		buf_append(b, "  ", 2);
		render_pad(b, json_string_value(json_object_get(row, "handler")), w + 3);
		buf_appendf(b, "%lld\n",
			    (long long)json_integer_value(json_object_get(row, "containers")));
	}
}

/* The function as its template.yaml in the functions directory says now
 * (the version loaded, unless an edit is pending); NULL when it cannot be
 * read or is invalid. */
static struct function *template_now(const struct config *cfg, const char *name)
{
	struct function *fn = NULL;
	struct strlist errors = {0}, warnings = {0};
	enum function_status st = cfg->functions_dir
					  ? function_load(cfg->functions_dir, name, &fn, &errors,
							  &warnings)
					  : FUNCTION_NO_TEMPLATE;
	strlist_free(&errors);
	strlist_free(&warnings);
	if (st != FUNCTION_OK) {
		function_free(fn);
		return NULL;
	}
	return fn;
}

/* key_concurrency as the template says now: {key, limit}, or NULL. */
static json_t *key_policy(const struct function *fn)
{
	if (!fn || !fn->tpl->key.path)
		return NULL;
	return json_pack("{s:s, s:i}", "key", fn->tpl->key.path, "limit", fn->tpl->key.limit);
}

/* inspect's "Key concurrency:" section; nothing when key is NULL. */
static void render_key(struct buf *b, const json_t *key)
{
	if (!key)
		return;
	const char *path = json_string_value(json_object_get(key, "key"));
	char *safe = text_escaped(path, strlen(path), 0, 0);
	buf_appendf(b, "\nKey concurrency:\n  key %s, limit %lld\n", safe,
		    (long long)json_integer_value(json_object_get(key, "limit")));
	free(safe);
}

/* The effective retry policy of each rule and schedule of fn: a JSON
 * array of {handler, kind, retries, policy}; NULL when fn is NULL or sets
 * no retry: at all (so inspect shows what it always showed). */
static json_t *retry_policies(const struct function *fn)
{
	if (!fn)
		return NULL;
	struct retry_policy base, eff;
	retry_policy_default(&base, NULL);
	const struct template *t = fn->tpl;
	bool set = t->retry.has_backoff || t->retry.has_max_age || t->retry.has_no_retry;
	for (size_t i = 0; i < t->nrules && !set; i++)
		set = t->rules[i].retry.has_backoff || t->rules[i].retry.has_max_age ||
		      t->rules[i].retry.has_no_retry;
	for (size_t i = 0; i < t->nschedules && !set; i++)
		set = t->schedules[i].retry.has_backoff || t->schedules[i].retry.has_max_age ||
		      t->schedules[i].retry.has_no_retry;
	if (!set)
		return NULL;
	json_t *out = json_array();
	for (size_t i = 0; i < t->nrules + t->nschedules; i++) {
		bool rule = i < t->nrules;
		const char *h = rule ? t->rules[i].handler : t->schedules[i - t->nrules].handler;
		int retries = rule ? t->rules[i].retries : t->schedules[i - t->nrules].retries;
		retry_policy_merge(&eff, &base, NULL,
				   rule ? &t->rules[i].retry : &t->schedules[i - t->nrules].retry);
		char *d = retry_policy_describe(&eff);
		json_array_append_new(out, json_pack("{s:s, s:s, s:i, s:s}", "handler", h, "kind",
						     rule ? "rule" : "schedule", "retries", retries,
						     "policy", d));
		free(d);
	}
	return out;
}

/* inspect's "Retries:" section: per rule and schedule, its retries and
 * effective policy, aligned as Events; nothing when retry is NULL. */
static void render_retries(struct buf *b, const json_t *retry)
{
	if (!retry || !json_array_size(retry))
		return;
	size_t w = handler_cols(retry), i;
	json_t *row;
	buf_appendf(b, "\nRetries:\n");
	json_array_foreach(retry, i, row)
	{
		buf_append(b, "  ", 2);
		render_pad(b, json_string_value(json_object_get(row, "handler")), w + 3);
		buf_appendf(b, "retries=%lld ",
			    (long long)json_integer_value(json_object_get(row, "retries")));
		/* Relay's own text: durations, numbers, key names. */
		buf_appendf(b, "%s\n", json_string_value(json_object_get(row, "policy")));
	}
}

int function_state_inspect_exec(const struct cmd *self, const struct cmd_args *args,
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
	struct function *fn = template_now(cfg, name);
	json_t *warm = warm_containers(name), *retry = retry_policies(fn), *key = key_policy(fn);
	function_free(fn);
	if (cmd_flag(args, "--json")) {
		json_t *o = render_state_json_inspect(f, describe_cron);
		if (warm && json_is_object(o))
			json_object_set(o, "warm", warm);
		if (retry && json_is_object(o))
			json_object_set(o, "retry", retry);
		if (key && json_is_object(o))
			json_object_set(o, "key_concurrency", key);
		json_decref(warm);
		json_decref(retry);
		json_decref(key);
		rc = cmd_print_json(self, o);
		goto out;
	}
	render_state_inspect(&b, f, (int64_t)time(NULL), describe_cron);
	render_warm(&b, warm);
	render_retries(&b, retry);
	render_key(&b, key);
	json_decref(warm);
	json_decref(retry);
	json_decref(key);
	rc = emit(self, &b);
out:
	state_function_info_free(f);
	state_close(s);
	buf_free(&b);
	free(err);
	return rc;
}
