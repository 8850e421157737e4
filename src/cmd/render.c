/* The CLI's views of the state database: see render.h. */
#include "cmd/render.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/duration.h"
#include "base/rfc3339.h"
#include "model/template.h"

char *render_age(int64_t then, int64_t now, char out[RENDER_AGE_MAX])
{
	const int64_t day = 86400, limit = 30 * day;
	int64_t d = now - then;
	if (d >= limit || d <= -limit) {
		time_t tt = (time_t)then;
		struct tm tm;
		if (!gmtime_r(&tt, &tm) || strftime(out, RENDER_AGE_MAX, "%Y-%m-%d", &tm) == 0)
			snprintf_(out, RENDER_AGE_MAX, "%s", "?");
		return out;
	}
	if (d < 0)
		d = 0;
	if (d < 60)
		snprintf_(out, RENDER_AGE_MAX, "%llds ago", (long long)d);
	else if (d < 3600)
		snprintf_(out, RENDER_AGE_MAX, "%lldm ago", (long long)(d / 60));
	else if (d < day)
		snprintf_(out, RENDER_AGE_MAX, "%lldh ago", (long long)(d / 3600));
	else
		snprintf_(out, RENDER_AGE_MAX, "%lldd ago", (long long)(d / day));
	return out;
}

/* Column widths of `relay function ls`: the spec's example, growing like
 * Go's tabwriter (padding 3) for longer cells. */
static const size_t ls_min_width[] = {22, 13, 10, 11};

void render_pad(struct buf *b, const char *s, size_t width)
{
	size_t from = b->len;
	s = s ? s : "";
	text_escape(b, s, strlen(s), 0, 0);
	for (size_t n = text_cols(b->data + from); n < width; n++)
		buf_append(b, " ", 1);
}

size_t render_cols(const char *s)
{
	char *e = text_escaped(s ? s : "", s ? strlen(s) : 0, 0, 0);
	size_t n = text_cols(e);
	free(e);
	return n;
}

/* "<age>" of an RFC3339 text; the text itself when it does not parse. */
static const char *age_of(const char *ts, int64_t now, char out[RENDER_AGE_MAX])
{
	int64_t t;
	if (!ts || !*ts)
		return "-";
	if (state_parse_time(ts, &t) < 0)
		return printable_copy(ts, out, RENDER_AGE_MAX, RENDER_AGE_MAX - 1);
	return render_age(t, now, out);
}

void render_state_ls(struct buf *b, const struct state_function_info *fs, size_t n, int64_t now)
{
	static const char *const head[] = {"NAME", "RUNTIME", "STATUS", "HANDLERS", "UPDATED"};
	size_t width[4];
	char(*count)[24] = xcalloc(n ? n : 1, sizeof *count);
	for (size_t c = 0; c < 4; c++)
		width[c] = strlen(head[c]) + 3;
	for (size_t i = 0; i < n; i++) {
		snprintf_(count[i], sizeof count[i], "%zu", fs[i].nhandlers);
		const char *cells[4] = {fs[i].name, fs[i].runtime, fs[i].status, count[i]};
		for (size_t c = 0; c < 4; c++)
			if (render_cols(cells[c]) + 3 > width[c])
				width[c] = render_cols(cells[c]) + 3;
	}
	for (size_t c = 0; c < 4; c++)
		if (width[c] < ls_min_width[c])
			width[c] = ls_min_width[c];
	for (size_t c = 0; c < 4; c++)
		render_pad(b, head[c], width[c]);
	buf_appendf(b, "%s\n", head[4]);
	for (size_t i = 0; i < n; i++) {
		char age[RENDER_AGE_MAX];
		const char *cells[4] = {fs[i].name, fs[i].runtime, fs[i].status, count[i]};
		for (size_t c = 0; c < 4; c++)
			render_pad(b, cells[c], width[c]);
		const char *ts = fs[i].prepared_at && *fs[i].prepared_at ? fs[i].prepared_at
									 : fs[i].updated_at;
		buf_appendf(b, "%s\n", age_of(ts, now, age));
	}
	free(count);
}

void render_field(struct buf *b, const char *label, const char *value)
{
	render_field_cut(b, label, value, 0);
}

void render_field_cut(struct buf *b, const char *label, const char *value, size_t max_cols)
{
	render_pad(b, label, 19);
	value = value ? value : "";
	text_escape(b, value, strlen(value), max_cols, 0);
	buf_append(b, "\n", 1);
}

/* A stored Go duration normalised through duration_format; raw when invalid. */
static const char *timeout_text(const char *stored, char out[DURATION_STR_MAX], int64_t *ns)
{
	*ns = -1;
	if (!stored)
		return "?";
	if (duration_parse(stored, ns) < 0) {
		*ns = -1;
		return stored;
	}
	return duration_format(*ns, out);
}

/* Appends s quoted as Go's %q would for printable text. */
static void append_quoted(struct buf *b, const char *s)
{
	buf_append(b, "\"", 1);
	text_escape(b, s, strlen(s), 0, TEXT_QUOTE);
	buf_append(b, "\"", 1);
}

/* s escaped (text_escape) after a fixed text. */
static void append_escaped(struct buf *b, const char *before, const char *s)
{
	buf_appendf(b, "%s", before);
	text_escape(b, s, strlen(s), 0, 0);
}

/* inspect's "Events:" section: one line a handler, timeouts aligned. */
static void render_events(struct buf *b, const struct state_function_info *f)
{
	if (!f->nhandlers)
		return;
	size_t w = 0;
	for (size_t i = 0; i < f->nhandlers; i++)
		if (render_cols(f->handlers[i].handler) > w)
			w = render_cols(f->handlers[i].handler);
	buf_appendf(b, "\nEvents:\n");
	for (size_t i = 0; i < f->nhandlers; i++) {
		char d[DURATION_STR_MAX];
		int64_t ns;
		buf_append(b, "  ", 2);
		render_pad(b, f->handlers[i].handler, w + 3);
		append_escaped(b, "timeout=", timeout_text(f->handlers[i].timeout, d, &ns));
		buf_append(b, "\n", 1);
	}
}

/* inspect's "Schedules:" section: handler, quoted cron (described when
 * describe can), zone, and the timeout when it is not the default. */
static void render_schedules(struct buf *b, const struct state_function_info *f,
			     render_cron_describe_fn describe)
{
	if (!f->nschedules)
		return;
	size_t w = 38; /* the spec's example: cron= at column 41 */
	for (size_t i = 0; i < f->nschedules; i++)
		if (render_cols(f->schedules[i].handler) + 3 > w)
			w = render_cols(f->schedules[i].handler) + 3;
	buf_appendf(b, "\nSchedules:\n");
	for (size_t i = 0; i < f->nschedules; i++) {
		const struct state_schedule_info *sc = &f->schedules[i];
		buf_append(b, "  ", 2);
		render_pad(b, sc->handler, w);
		buf_append(b, "cron=", 5);
		append_quoted(b, sc->cron);
		char *desc = describe ? describe(sc->cron) : NULL;
		if (desc && *desc) {
			append_escaped(b, " (", desc);
			buf_append(b, ")", 1);
		}
		free(desc);
		append_escaped(b, " timezone=", sc->timezone);
		char d[DURATION_STR_MAX];
		int64_t ns;
		const char *t = timeout_text(sc->timeout, d, &ns);
		if (ns != TEMPLATE_DEFAULT_TIMEOUT_NS)
			append_escaped(b, " timeout=", t);
		buf_append(b, "\n", 1);
	}
}

/* inspect's "Standby:" section: the standby containers of each handler at
 * the last stats flush, aligned as Events; absent without rows (standby
 * off, never flushed, an older database), so the spec's example holds. */
static void render_standby(struct buf *b, const struct state_function_info *f)
{
	if (!f->nstandby)
		return;
	size_t w = 0;
	for (size_t i = 0; i < f->nstandby; i++)
		if (render_cols(f->standby[i].handler) > w)
			w = render_cols(f->standby[i].handler);
	buf_appendf(b, "\nStandby:\n");
	for (size_t i = 0; i < f->nstandby; i++) {
		buf_append(b, "  ", 2);
		render_pad(b, f->standby[i].handler, w + 3);
		buf_appendf(b, "%lld\n", (long long)f->standby[i].containers);
	}
}

void render_state_inspect(struct buf *b, const struct state_function_info *f, int64_t now,
			  render_cron_describe_fn describe)
{
	char age[RENDER_AGE_MAX];
	render_field(b, "Name:", f->name);
	render_field(b, "Runtime:", f->runtime);
	render_field(b, "Status:", f->status);
	if (strcmp(f->status, "pending") != 0) {
		if (f->image)
			render_field(b, "Image:", f->image);
		if (f->fingerprint)
			render_field(b, "Fingerprint:", f->fingerprint);
		if (f->prepared_at) {
			char *v = xasprintf("%s (%s)", f->prepared_at,
					    age_of(f->prepared_at, now, age));
			render_field(b, "Prepared:", v);
			free(v);
		}
	}
	if (f->last_reconcile_status && *f->last_reconcile_status) {
		char *v = f->last_reconcile_at && *f->last_reconcile_at
				  ? xasprintf("%s (%s)", f->last_reconcile_status,
					      age_of(f->last_reconcile_at, now, age))
				  : xstrdup(f->last_reconcile_status);
		render_field(b, "Last reconcile:", v);
		free(v);
	} else {
		render_field(b, "Last reconcile:", "never");
	}
	if (f->last_error && *f->last_error)
		render_field(b, "Last error:", f->last_error);
	/* match_arrays: shown only when it is not the default */
	if (f->match_arrays_elements)
		render_field(b, "Match arrays:", "elements");

	render_events(b, f);
	render_schedules(b, f, describe);
	render_standby(b, f);
	buf_appendf(b,
		    "\nStats:\n"
		    "  Events processed:    %lld\n"
		    "  Handler successes:   %lld\n"
		    "  Handler failures:    %lld\n"
		    "  Retries:             %lld\n"
		    "  DLQ entries:         %lld\n",
		    (long long)f->stats.events, (long long)f->stats.successes,
		    (long long)f->stats.failures, (long long)f->stats.retries,
		    (long long)f->stats.dlq_entries);
	if (f->nenv) {
		buf_appendf(b, "\nEnvironment:\n");
		for (size_t i = 0; i < f->nenv; i++) {
			append_escaped(b, "  ", f->env[i].name);
			append_escaped(b, "=", f->env[i].value);
			buf_append(b, "\n", 1);
		}
	}
	if (f->nsecrets) {
		buf_appendf(b, "\nSecrets:\n");
		for (size_t i = 0; i < f->nsecrets; i++) {
			append_escaped(b, "  ", f->secrets[i].name);
			append_escaped(b, "=", f->secrets[i].value);
			buf_append(b, "\n", 1);
		}
	}
}

void render_state_stats(struct buf *b, const struct state_stats *st, int64_t now)
{
	char age[RENDER_AGE_MAX], d[DURATION_STR_MAX];
	int64_t secs = st->oldest_pending_age_seconds;
	if (secs < 0)
		secs = 0;
	if (secs > INT64_MAX / NS_PER_SEC)
		secs = INT64_MAX / NS_PER_SEC;
	buf_appendf(b,
		    "Events processed:    %lld\n"
		    "Handler successes:   %lld\n"
		    "Handler failures:    %lld\n"
		    "Retries:             %lld\n"
		    "DLQ entries:         %lld\n"
		    "Pending entries:     %lld\n"
		    "Oldest pending age:  %s\n"
		    "Updated:             %s\n",
		    (long long)st->events_processed, (long long)st->handler_success,
		    (long long)st->handler_failure, (long long)st->retries,
		    (long long)st->dlq_entries, (long long)st->pending_entries,
		    duration_format(secs * NS_PER_SEC, d),
		    st->updated_at[0] ? age_of(st->updated_at, now, age) : "never");
}

/* ---- --json ------------------------------------------------------------ */

/* A stored time as RFC 3339 UTC; null when empty, the text when it does
 * not parse. */
static json_t *time_json(const char *ts)
{
	int64_t t;
	char out[RFC3339_STR_MAX];
	if (!ts || !*ts)
		return json_null();
	if (state_parse_time(ts, &t) < 0 || t > INT64_MAX / NS_PER_SEC ||
	    t < INT64_MIN / NS_PER_SEC)
		return json_string(ts);
	return json_string(rfc3339_format_utc(t * NS_PER_SEC, out));
}

static json_t *str_json(const char *s)
{
	return s ? json_string(s) : json_null();
}

/* A stored Go duration in seconds: an integer when whole; null when invalid. */
static json_t *seconds_json(const char *stored)
{
	int64_t ns;
	if (!stored || duration_parse(stored, &ns) < 0)
		return json_null();
	if (ns % NS_PER_SEC == 0)
		return json_integer(ns / NS_PER_SEC);
	return json_real((double)ns / (double)NS_PER_SEC);
}

json_t *render_state_json_ls(const struct state_function_info *fs, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; i < n; i++) {
		const struct state_function_info *f = &fs[i];
		json_t *o = json_object();
		json_object_set_new(o, "name", json_string(f->name));
		json_object_set_new(o, "runtime", json_string(f->runtime));
		json_object_set_new(o, "status", json_string(f->status));
		json_object_set_new(o, "handlers", json_integer((json_int_t)f->nhandlers));
		json_object_set_new(o, "updated_at",
				    time_json(f->prepared_at && *f->prepared_at ? f->prepared_at
										: f->updated_at));
		json_array_append_new(a, o);
	}
	return a;
}

static json_t *pairs_json(const struct state_pair_info *p, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; i < n; i++) {
		json_t *o = json_object();
		json_object_set_new(o, "name", json_string(p[i].name));
		json_object_set_new(o, "value", json_string(p[i].value));
		json_array_append_new(a, o);
	}
	return a;
}

json_t *render_state_json_inspect(const struct state_function_info *f,
				  render_cron_describe_fn describe)
{
	json_t *o = json_object();
	bool pending = strcmp(f->status, "pending") == 0;
	json_object_set_new(o, "name", json_string(f->name));
	json_object_set_new(o, "runtime", json_string(f->runtime));
	json_object_set_new(o, "status", json_string(f->status));
	json_object_set_new(o, "image", pending ? json_null() : str_json(f->image));
	json_object_set_new(o, "fingerprint", pending ? json_null() : str_json(f->fingerprint));
	json_object_set_new(o, "prepared_at", pending ? json_null() : time_json(f->prepared_at));
	json_t *lr = json_null();
	if (f->last_reconcile_status && *f->last_reconcile_status) {
		lr = json_object();
		json_object_set_new(lr, "status", json_string(f->last_reconcile_status));
		json_object_set_new(lr, "at", time_json(f->last_reconcile_at));
	}
	json_object_set_new(o, "last_reconcile", lr);
	json_object_set_new(o, "last_error",
			    f->last_error && *f->last_error ? json_string(f->last_error)
							    : json_null());
	json_object_set_new(o, "match_arrays",
			    json_string(f->match_arrays_elements ? "elements" : "values"));
	json_t *ev = json_array();
	for (size_t i = 0; i < f->nhandlers; i++) {
		json_t *h = json_object();
		json_object_set_new(h, "handler", json_string(f->handlers[i].handler));
		json_object_set_new(h, "timeout_seconds", seconds_json(f->handlers[i].timeout));
		json_array_append_new(ev, h);
	}
	json_object_set_new(o, "events", ev);
	json_t *sc = json_array();
	for (size_t i = 0; i < f->nschedules; i++) {
		const struct state_schedule_info *s = &f->schedules[i];
		json_t *h = json_object();
		char *desc = describe ? describe(s->cron) : NULL;
		json_object_set_new(h, "handler", json_string(s->handler));
		json_object_set_new(h, "cron", json_string(s->cron));
		json_object_set_new(h, "description",
				    desc && *desc ? json_string(desc) : json_null());
		json_object_set_new(h, "timezone", json_string(s->timezone));
		json_object_set_new(h, "timeout_seconds", seconds_json(s->timeout));
		free(desc);
		json_array_append_new(sc, h);
	}
	json_object_set_new(o, "schedules", sc);
	json_t *sb = json_array();
	for (size_t i = 0; i < f->nstandby; i++) {
		json_t *h = json_object();
		json_object_set_new(h, "handler", json_string(f->standby[i].handler));
		json_object_set_new(h, "containers", json_integer(f->standby[i].containers));
		json_array_append_new(sb, h);
	}
	json_object_set_new(o, "standby", sb);
	json_t *st = json_object();
	json_object_set_new(st, "events_processed", json_integer(f->stats.events));
	json_object_set_new(st, "handler_successes", json_integer(f->stats.successes));
	json_object_set_new(st, "handler_failures", json_integer(f->stats.failures));
	json_object_set_new(st, "retries", json_integer(f->stats.retries));
	json_object_set_new(st, "dlq_entries", json_integer(f->stats.dlq_entries));
	json_object_set_new(o, "stats", st);
	json_object_set_new(o, "environment", pairs_json(f->env, f->nenv));
	json_object_set_new(o, "secrets", pairs_json(f->secrets, f->nsecrets));
	return o;
}

json_t *render_state_json_stats(const struct state_stats *st)
{
	json_t *o = json_object();
	json_object_set_new(o, "events_processed", json_integer(st->events_processed));
	json_object_set_new(o, "handler_successes", json_integer(st->handler_success));
	json_object_set_new(o, "handler_failures", json_integer(st->handler_failure));
	json_object_set_new(o, "retries", json_integer(st->retries));
	json_object_set_new(o, "dlq_entries", json_integer(st->dlq_entries));
	json_object_set_new(o, "pending_entries", json_integer(st->pending_entries));
	json_object_set_new(o, "oldest_pending_age_seconds",
			    json_integer(st->oldest_pending_age_seconds < 0
						 ? 0
						 : st->oldest_pending_age_seconds));
	json_object_set_new(o, "updated_at", time_json(st->updated_at));
	return o;
}
