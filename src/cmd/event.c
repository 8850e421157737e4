/*
 * relay event status MESSAGE-ID [--json]: see event_status.h. Reads Redis
 * only (REDIS_URI, REDIS_STREAM, REDIS_GROUP validated like relay start)
 * and the functions directory for "matches now"; never Docker, never the
 * state database. The DLQ is scanned newest first, in pages of
 * DLQ_PAGE entries by a script that answers only the matching entry, at
 * most DLQ_SCAN_MAX entries in all. The reads are not one snapshot: a
 * message settled between two of them shows the state of the later read.
 * Exit status: 0, 1 when the message is not found or Redis fails, 2 on a
 * usage error.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cmd.h"
#include "cmd/event_status.h"
#include "cmd/render.h"
#include "io/event.h"
#include "engine/invocation.h"
#include "engine/keyorder.h"
#include "io/redis.h"
#include "io/traceparent.h"
#include "base/rfc3339.h"
#include "base/util.h"

#define DLQ_PAGE 100
#define DLQ_SCAN_MAX 100000

const char *event_status_state_name(enum event_state s)
{
	switch (s) {
	case EVST_NOT_FOUND: return "not_found";
	case EVST_NOT_DELIVERED: return "not_delivered";
	case EVST_PENDING: return "pending";
	case EVST_ACKNOWLEDGED: return "acknowledged";
	case EVST_DEAD_LETTERED: return "dead_lettered";
	}
	return "?";
}

static const char *state_text(enum event_state s)
{
	switch (s) {
	case EVST_NOT_FOUND: return "not found (not in the stream, not pending, not in the DLQ)";
	case EVST_NOT_DELIVERED: return "not delivered yet (the group has not read it)";
	case EVST_PENDING: return "pending";
	case EVST_ACKNOWLEDGED: return "acknowledged";
	case EVST_DEAD_LETTERED: return "dead-lettered";
	}
	return "?";
}

/* The marker's JSON name: "ok", "running", "waiting", "exhausted",
 * "not_started" or "unreadable". */
static const char *marker_name(const char *raw, struct marker *m)
{
	*m = (struct marker){MARK_ABSENT, 0, 0};
	if (!raw)
		return "not_started";
	*m = invocation_marker_parse(raw, strlen(raw));
	switch (m->kind) {
	case MARK_OK: return "ok";
	case MARK_RUNNING: return "running";
	case MARK_NEXT_ATTEMPT: return "waiting";
	case MARK_EXHAUSTED: return "exhausted";
	case MARK_ABSENT: break;
	}
	return "unreadable";
}

char *event_status_marker_text(const char *raw, char *out, size_t outlen)
{
	struct marker m;
	const char *name = marker_name(raw, &m);
	char t[RFC3339_STR_MAX];
	switch (m.kind) {
	case MARK_OK: snprintf_(out, outlen, "ok"); break;
	case MARK_RUNNING:
		snprintf_(out, outlen, "running until %s attempt %d",
			  rfc3339_format_utc(m.deadline_ns, t), m.attempts);
		break;
	case MARK_NEXT_ATTEMPT:
		snprintf_(out, outlen, "waiting until %s after attempt %d",
			  rfc3339_format_utc(m.deadline_ns, t), m.attempts);
		break;
	case MARK_EXHAUSTED:
		snprintf_(out, outlen, "exhausted after %d attempt%s", m.attempts,
			  m.attempts == 1 ? "" : "s");
		break;
	case MARK_ABSENT:
		snprintf_(out, outlen, "%s",
			  strcmp(name, "not_started") == 0 ? "not started"
							   : "unreadable marker (eligible)");
		break;
	}
	return out;
}

static const char *dlq_field(const struct event_status *st, const char *name)
{
	const char *v = NULL;
	for (size_t i = 0; i < st->ndlq; i++)
		if (strcmp(st->dlq_fields[i], name) == 0)
			v = st->dlq_values[i];
	return v;
}

/* The invocation hash's marker for function/handler, NULL when absent. */
static const char *inv_marker(const struct event_status *st, const char *fn, const char *handler)
{
	size_t fl = strlen(fn);
	for (size_t i = 0; i < st->ninv; i++) {
		const char *f = st->inv_fields[i];
		if (strncmp(f, fn, fl) == 0 && f[fl] == '/' && strcmp(f + fl + 1, handler) == 0)
			return st->inv_values[i];
	}
	return NULL;
}

static bool inv_matches_now(const struct event_status *st, const char *field_)
{
	for (size_t i = 0; st->matched && i < st->nmatches; i++) {
		size_t fl = strlen(st->matches[i].function);
		if (strncmp(field_, st->matches[i].function, fl) == 0 && field_[fl] == '/' &&
		    strcmp(field_ + fl + 1, st->matches[i].handler) == 0)
			return true;
	}
	return false;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The invocation hash fields that match nothing now, sorted (borrowed). */
static const char **leftover_fields(const struct event_status *st, size_t *n)
{
	const char **v = xcalloc(st->ninv + 1, sizeof *v);
	*n = 0;
	for (size_t i = 0; i < st->ninv; i++)
		if (!inv_matches_now(st, st->inv_fields[i]) &&
		    strcmp(st->inv_fields[i], INVOCATION_TRACE_FIELD) != 0)
			v[(*n)++] = st->inv_fields[i];
	qsort(v, *n, sizeof *v, cmp_str);
	return v;
}

static const char *event_text(const struct event_status *st)
{
	if (!st->event_known)
		return st->state == EVST_NOT_FOUND ? NULL
						   : "not in the stream (deleted or trimmed)";
	return st->event_err == EVENT_OK ? NULL : event_err_name(st->event_err);
}

/* pending: each matching invocation with its marker, then the markers of
 * invocations that match nothing now. */
static void render_invocations(struct buf *b, const struct event_status *st)
{
	size_t nleft;
	const char **left = leftover_fields(st, &nleft);
	size_t w = 0, nm = st->matched ? st->nmatches : 0;
	for (size_t i = 0; i < nm; i++) {
		size_t l = render_cols(st->matches[i].function) + 1 +
			   render_cols(st->matches[i].handler);
		if (l > w)
			w = l;
	}
	for (size_t i = 0; i < nleft; i++)
		if (render_cols(left[i]) > w)
			w = render_cols(left[i]);
	buf_appendf(b, "\nInvocations:\n");
	if (!nm && !nleft)
		buf_appendf(b, "  (none)\n");
	char text[128];
	for (size_t i = 0; i < nm; i++) {
		const struct cmd_match *m = &st->matches[i];
		char *name = xasprintf("%s/%s", m->function, m->handler);
		buf_append(b, "  ", 2);
		render_pad(b, name, w + 3);
		buf_appendf(b, "%s\n",
			    event_status_marker_text(inv_marker(st, m->function, m->handler), text,
					      sizeof text));
		free(name);
	}
	for (size_t i = 0; i < nleft; i++) {
		size_t k = 0;
		while (st->inv_fields[k] != left[i])
			k++;
		buf_append(b, "  ", 2);
		render_pad(b, left[i], w + 3);
		buf_appendf(b, "%s%s\n", event_status_marker_text(st->inv_values[k], text, sizeof text),
			    st->matched ? " (matches nothing now)" : "");
	}
	free(left);
}

void event_status_render(struct buf *b, const struct event_status *st)
{
	render_field(b, "Message:", st->id);
	render_field(b, "Stream:", st->stream);
	render_field(b, "Group:", st->group);
	render_field(b, "State:", state_text(st->state));
	if (st->trace_id[0])
		render_field(b, "Trace:", st->trace_id);
	if (st->state == EVST_PENDING) {
		char d[64];
		snprintf_(d, sizeof d, "%" PRId64 "s", st->idle_ms / 1000);
		render_field(b, "Consumer:", st->consumer ? st->consumer : "?");
		render_field(b, "Idle:", d);
		snprintf_(d, sizeof d, "%" PRId64, st->deliveries);
		render_field(b, "Deliveries:", d);
		if (st->key_wait)
			render_field(b, "Key:", st->key_wait);
	}
	if (st->state == EVST_DEAD_LETTERED) {
		static const struct {
			const char *label, *name;
		} shown[] = {{"DLQ entry:", NULL},
			     {"Reason:", "reason"},
			     {"Attempts:", "attempts"},
			     {"Dead-lettered at:", "timestamp"}};
		for (size_t i = 0; i < ARRAY_LEN(shown); i++) {
			const char *v = shown[i].name ? dlq_field(st, shown[i].name) : st->dlq_id;
			render_field_cut(b, shown[i].label, v ? v : "-", 4096);
		}
	}
	const char *ev = event_text(st);
	if (ev) {
		char *v = st->event_known ? xasprintf("malformed (%s)", ev) : xstrdup(ev);
		render_field(b, "Event:", v);
		free(v);
	}
	if (st->match_err) {
		char *v = xasprintf("unknown: %s", st->match_err);
		render_field(b, "Matches now:", v);
		free(v);
	}
	if (st->state == EVST_PENDING) {
		render_invocations(b, st);
	} else if (st->matched) {
		buf_appendf(b, "\nMatches now:\n");
		if (!st->nmatches)
			buf_appendf(b, "  (none)\n");
		for (size_t i = 0; i < st->nmatches; i++) {
			char *name =
				xasprintf("%s/%s", st->matches[i].function, st->matches[i].handler);
			buf_append(b, "  ", 2);
			render_pad(b, name, 0);
			buf_append(b, "\n", 1);
			free(name);
		}
	}
}

/* A text from Redis or a template as JSON: a string when valid UTF-8
 * (cmd_print_json escapes what a terminal must not see), else escaped
 * (text_escape); null for NULL. */
static json_t *str_or_null(const char *v)
{
	if (!v)
		return json_null();
	json_t *j = json_string(v);
	if (j)
		return j;
	char *safe = text_escaped(v, strlen(v), 0, 0);
	j = json_string(safe);
	free(safe);
	return j;
}

static json_t *invocation_json(const char *fn, const char *handler, const char *raw,
			       bool matches_now)
{
	struct marker m;
	const char *name = marker_name(raw, &m);
	char t[RFC3339_STR_MAX];
	json_t *o = json_object();
	json_object_set_new(o, "function", str_or_null(fn));
	json_object_set_new(o, "handler", str_or_null(handler));
	json_object_set_new(o, "marker", json_string(name));
	json_object_set_new(o, "until",
			    m.kind == MARK_RUNNING || m.kind == MARK_NEXT_ATTEMPT
				    ? json_string(rfc3339_format_utc(m.deadline_ns, t))
				    : json_null());
	json_object_set_new(o, "attempts", json_integer(m.attempts));
	json_object_set_new(o, "matches_now", json_boolean(matches_now));
	return o;
}

json_t *event_status_json(const struct event_status *st)
{
	json_t *o = json_object();
	json_object_set_new(o, "message_id", json_string(st->id));
	json_object_set_new(o, "stream", json_string(st->stream));
	json_object_set_new(o, "group", json_string(st->group));
	json_object_set_new(o, "state", json_string(event_status_state_name(st->state)));
	json_object_set_new(o, "in_stream", json_boolean(st->in_stream));
	json_object_set_new(o, "event",
			    !st->event_known ? json_null()
			    : st->event_err == EVENT_OK
				    ? json_string("ok")
				    : json_string(event_err_name(st->event_err)));
	json_t *p = json_null();
	if (st->state == EVST_PENDING) {
		p = json_object();
		json_object_set_new(p, "consumer", str_or_null(st->consumer));
		json_object_set_new(p, "idle_seconds", json_integer(st->idle_ms / 1000));
		json_object_set_new(p, "deliveries", json_integer(st->deliveries));
	}
	json_object_set_new(o, "pending", p);
	json_t *d = json_null();
	if (st->state == EVST_DEAD_LETTERED) {
		d = json_object();
		json_object_set_new(d, "id", json_string(st->dlq_id));
		json_object_set_new(d, "reason", str_or_null(dlq_field(st, "reason")));
		const char *a = dlq_field(st, "attempts");
		int64_t n;
		json_object_set_new(d, "attempts",
				    a && parse_int64(a, &n) == 0 ? json_integer(n) : json_null());
		json_object_set_new(d, "timestamp", str_or_null(dlq_field(st, "timestamp")));
		const char *fn = dlq_field(st, "function"), *h = dlq_field(st, "handler");
		json_object_set_new(d, "function", fn && *fn ? str_or_null(fn) : json_null());
		json_object_set_new(d, "handler", h && *h ? str_or_null(h) : json_null());
	}
	json_object_set_new(o, "dead_letter", d);
	json_t *inv = json_array();
	if (st->state == EVST_PENDING) {
		for (size_t i = 0; st->matched && i < st->nmatches; i++) {
			const struct cmd_match *m = &st->matches[i];
			json_array_append_new(
				inv,
				invocation_json(m->function, m->handler,
						inv_marker(st, m->function, m->handler), true));
		}
		size_t nleft;
		const char **left = leftover_fields(st, &nleft);
		for (size_t i = 0; i < nleft; i++) {
			size_t k = 0;
			while (st->inv_fields[k] != left[i])
				k++;
			char *fn = xstrdup(left[i]), *slash = strchr(fn, '/');
			if (slash)
				*slash = '\0';
			json_array_append_new(inv, invocation_json(fn, slash ? slash + 1 : "",
								   st->inv_values[k], false));
			free(fn);
		}
		free(left);
	}
	json_object_set_new(o, "invocations", inv);
	json_t *mn = json_null();
	if (st->matched) {
		mn = json_array();
		for (size_t i = 0; i < st->nmatches; i++) {
			json_t *m = json_object();
			json_object_set_new(m, "function", str_or_null(st->matches[i].function));
			json_object_set_new(m, "handler", str_or_null(st->matches[i].handler));
			json_array_append_new(mn, m);
		}
	}
	json_object_set_new(o, "matches_now", mn);
	json_object_set_new(o, "matches_error", str_or_null(st->match_err));
	json_object_set_new(o, "trace_id", st->trace_id[0] ? json_string(st->trace_id) : json_null());
	json_object_set_new(o, "key_wait", str_or_null(st->key_wait));
	return o;
}

/* ---- gathering --------------------------------------------------------- */

/* A complete stream id "<ms>-<seq>", both decimal. */
static bool parse_stream_id(const char *s, uint64_t *ms, uint64_t *seq)
{
	char *end;
	if (*s < '0' || *s > '9')
		return false;
	*ms = strtoull(s, &end, 10);
	if (*end != '-' || end[1] < '0' || end[1] > '9')
		return false;
	*seq = strtoull(end + 1, &end, 10);
	return *end == '\0' && strlen(s) <= 41;
}

/* KEYS[1] stream; ARGV[1] id, ARGV[2] the largest event returned. Answers
 * {0} (no such entry), {1} (no event field), or {1, event or '', length}. */
static const char stream_lua[] =
	"local e = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])[1]\n"
	"if not e then return {0} end\n"
	"local v = false\n"
	"local f = e[2]\n"
	"local tp = ''\n"
	"for i = 1, #f - 1, 2 do\n"
	"  if f[i] == 'event' then v = f[i + 1] end\n"
	"  if f[i] == 'traceparent' then tp = f[i + 1] end\n"
	"end\n"
	"if v == false then return {1} end\n"
	"if #v > tonumber(ARGV[2]) then return {1, '', #v, tp} end\n"
	"return {1, v, #v, tp}\n";

/* KEYS[1] dlq; ARGV[1] where to start (newest first: '+' or '(<id>'),
 * ARGV[2] the original id, ARGV[3] the page size. Answers {id, fields
 * without the event, event} for the entry found, else {'', last id read}
 * ({'', ''} at the end). The event is left out when over ARGV[4] bytes. */
static const char dlq_lua[] =
	"local e = redis.call('XREVRANGE', KEYS[1], ARGV[1], '-', 'COUNT', ARGV[3])\n"
	"for _, x in ipairs(e) do\n"
	"  local f = x[2]\n"
	"  local hit = false\n"
	"  for j = 1, #f - 1, 2 do\n"
	"    if f[j] == 'original_id' and f[j + 1] == ARGV[2] then hit = true end\n"
	"  end\n"
	"  if hit then\n"
	"    local out, ev = {}, false\n"
	"    for k = 1, #f - 1, 2 do\n"
	"      if f[k] == 'event' then\n"
	"        if #f[k + 1] <= tonumber(ARGV[4]) then ev = f[k + 1] end\n"
	"      else\n"
	"        out[#out + 1] = f[k]\n"
	"        out[#out + 1] = f[k + 1]\n"
	"      end\n"
	"    end\n"
	"    return {x[1], out, ev}\n"
	"  end\n"
	"end\n"
	"if #e == 0 then return {'', ''} end\n"
	"return {'', e[#e][1]}\n";

static redisReply *eval(struct redis *r, const char *script, const char *key, const char *const *av,
			int nav)
{
	const char *argv[8] = {"EVAL", script, "1", key};
	for (int i = 0; i < nav; i++)
		argv[4 + i] = av[i];
	return redis_command_argv(r, 4 + nav, argv, NULL);
}

static int redis_failed(const struct cmd *self, struct redis *r, redisReply *rep)
{
	int rc = cmd_fail("%s: Redis: %s", self->words,
			  !rep				   ? redis_errmsg(r)
			  : rep->type == REDIS_REPLY_ERROR ? rep->str
							   : "unexpected reply");
	if (rep)
		freeReplyObject(rep);
	return rc;
}

/* Decodes the event text (to learn whether it is malformed) and matches it. */
static void evaluate(const struct cmd *self, const struct config *cfg, struct event_status *st,
		     const char *text, size_t len, bool too_large, bool missing)
{
	st->event_known = true;
	struct event *ev = NULL;
	char *why = NULL;
	if (missing)
		st->event_err = EVENT_ERR_MISSING;
	else if (too_large)
		st->event_err = EVENT_ERR_TOO_LARGE;
	else
		st->event_err = event_parse_json(text, len, &ev, &why);
	free(why);
	if (st->event_err != EVENT_OK)
		return;
	char *err = NULL;
	if (cmd_match_event(self->words, cfg->functions_dir, ev, now_wall_ns(), &st->matches,
			    &st->nmatches, &err) < 0)
		st->match_err = err;
	else
		st->matched = true;
	event_free(ev);
}

/* The trace id of a valid traceparent tp (NULL is none) into st, replacing
 * one found before: the invocation state and the DLQ entry know the
 * context Relay used, the stream entry only what its producer sent. */
static void status_trace(struct event_status *st, const char *tp)
{
	struct traceparent p;
	if (!tp || traceparent_parse(tp, strlen(tp), &p) < 0)
		return;
	hex_encode(p.trace_id, sizeof p.trace_id, st->trace_id);
}

/* What gather reads with: the command, the configuration, the connection,
 * the status it fills and EVENT_MAX_BYTES as a script argument. */
struct gather {
	const struct cmd *self;
	const struct config *cfg;
	struct redis *r;
	struct event_status *st;
	char max[24];
};

/* The stream's copy of the message: in_stream, and its event evaluated.
 * 0, or 1 after one line. */
static int gather_stream(struct gather *g)
{
	struct event_status *st = g->st;
	const char *sav[] = {st->id, g->max};
	redisReply *rep = eval(g->r, stream_lua, g->cfg->redis_stream, sav, 2);
	if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements < 1)
		return redis_failed(g->self, g->r, rep);
	st->in_stream = rep->element[0]->integer == 1;
	if (rep->elements >= 4 && rep->element[3]->type == REDIS_REPLY_STRING)
		status_trace(st, rep->element[3]->str);
	if (st->in_stream) {
		if (rep->elements < 3)
			evaluate(g->self, g->cfg, st, NULL, 0, false, true);
		else
			evaluate(g->self, g->cfg, st, rep->element[1]->str, rep->element[1]->len,
				 rep->element[2]->integer > EVENT_MAX_BYTES, false);
	}
	freeReplyObject(rep);
	return 0;
}

/* Pending? (no group: nothing is) EVST_PENDING with its consumer, idle
 * time, deliveries and invocation hash. 0, or 1 after one line. */
static int gather_pending(struct gather *g)
{
	struct event_status *st = g->st;
	const char *stream = g->cfg->redis_stream, *group = g->cfg->redis_group;
	redisReply *rep =
		redis_command(g->r, "XPENDING %s %s %s %s 1", stream, group, st->id, st->id);
	if (rep && rep->type == REDIS_REPLY_ERROR && strstr(rep->str, "NOGROUP")) {
		freeReplyObject(rep);
		rep = NULL;
	} else if (!rep || rep->type != REDIS_REPLY_ARRAY) {
		return redis_failed(g->self, g->r, rep);
	}
	if (rep && rep->elements == 1 && rep->element[0]->type == REDIS_REPLY_ARRAY &&
	    rep->element[0]->elements == 4) {
		redisReply **e = rep->element[0]->element;
		st->state = EVST_PENDING;
		st->consumer = xstrndup(e[1]->str, e[1]->len);
		st->idle_ms = e[2]->integer;
		st->deliveries = e[3]->integer;
	}
	if (rep)
		freeReplyObject(rep);
	if (st->state != EVST_PENDING)
		return 0;
	char *key = invocation_key(stream, group, st->id);
	struct invocation_state inv;
	int rc = invocation_state_load(g->r, key, &inv);
	free(key);
	if (rc < 0)
		return redis_failed(g->self, g->r, NULL);
	status_trace(st, invocation_state_trace(&inv));
	struct keyorder *ko = keyorder_new(stream, group);
	st->key_wait = keyorder_status(ko, g->r, st->id);
	keyorder_free(ko);
	st->inv_fields = inv.fields;
	st->inv_values = inv.values;
	st->ninv = inv.n;
	return 0;
}

/* Takes the DLQ entry dlq_lua found (rep: {id, fields, event}): the state
 * EVST_DEAD_LETTERED, its fields, and its event evaluated when the stream
 * no longer has one. */
static void take_dlq_entry(struct gather *g, redisReply *rep)
{
	struct event_status *st = g->st;
	redisReply **e = rep->element;
	st->state = EVST_DEAD_LETTERED;
	st->dlq_id = xstrndup(e[0]->str, e[0]->len);
	size_t n = e[1]->elements / 2;
	st->dlq_fields = xcalloc(n + 1, sizeof(char *));
	st->dlq_values = xcalloc(n + 1, sizeof(char *));
	for (size_t i = 0; i < n; i++) {
		st->dlq_fields[i] = xstrndup(e[1]->element[2 * i]->str, e[1]->element[2 * i]->len);
		st->dlq_values[i] =
			xstrndup(e[1]->element[2 * i + 1]->str, e[1]->element[2 * i + 1]->len);
	}
	st->ndlq = n;
	status_trace(st, dlq_field(st, "traceparent"));
	if (!st->in_stream && rep->elements >= 3 && e[2]->type == REDIS_REPLY_STRING)
		evaluate(g->self, g->cfg, st, e[2]->str, e[2]->len, false, false);
}

/* Dead-lettered? The DLQ newest first, bounded. 0, or 1 after one line. */
static int gather_dlq(struct gather *g)
{
	char *dlq = xasprintf("relay:%s:dlq", g->cfg->redis_stream), *from = xstrdup("+");
	char page[16];
	snprintf_(page, sizeof page, "%d", DLQ_PAGE);
	for (int scanned = 0; scanned < DLQ_SCAN_MAX; scanned += DLQ_PAGE) {
		const char *dav[] = {from, g->st->id, page, g->max};
		redisReply *rep = eval(g->r, dlq_lua, dlq, dav, 4);
		if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements < 2) {
			free(dlq);
			free(from);
			return redis_failed(g->self, g->r, rep);
		}
		redisReply **e = rep->element;
		if (e[0]->type == REDIS_REPLY_STRING && e[0]->len) {
			take_dlq_entry(g, rep);
			freeReplyObject(rep);
			break;
		}
		bool end = e[1]->type != REDIS_REPLY_STRING || e[1]->len == 0;
		free(from);
		from = end ? NULL : xasprintf("(%.*s", (int)e[1]->len, e[1]->str);
		freeReplyObject(rep);
		if (end)
			break;
	}
	free(dlq);
	free(from);
	return 0;
}

/* In the stream: read by the group yet? EVST_ACKNOWLEDGED when the group's
 * last-delivered-id is at or past id_ms-id_seq, else EVST_NOT_DELIVERED. 0,
 * or 1 after one line. */
static int gather_delivered(struct gather *g, uint64_t id_ms, uint64_t id_seq)
{
	struct event_status *st = g->st;
	st->state = EVST_NOT_DELIVERED;
	redisReply *rep = redis_command(g->r, "XINFO GROUPS %s", g->cfg->redis_stream);
	if (!rep || rep->type != REDIS_REPLY_ARRAY)
		return redis_failed(g->self, g->r, rep);
	for (size_t i = 0; i < rep->elements; i++) {
		redisReply *gi = rep->element[i];
		const char *name = NULL, *last = NULL;
		for (size_t k = 0; gi->type == REDIS_REPLY_ARRAY && k + 1 < gi->elements; k += 2) {
			redisReply *kk = gi->element[k], *vv = gi->element[k + 1];
			if (kk->type != REDIS_REPLY_STRING || vv->type != REDIS_REPLY_STRING)
				continue;
			if (strcmp(kk->str, "name") == 0)
				name = vv->str;
			else if (strcmp(kk->str, "last-delivered-id") == 0)
				last = vv->str;
		}
		uint64_t lms, lseq;
		if (name && last && strcmp(name, g->cfg->redis_group) == 0 &&
		    parse_stream_id(last, &lms, &lseq) &&
		    (id_ms < lms || (id_ms == lms && id_seq <= lseq)))
			st->state = EVST_ACKNOWLEDGED;
	}
	freeReplyObject(rep);
	return 0;
}

/* Fills st from Redis: the stream's copy, then pending, dead-lettered, or
 * read by the group or not. 0, or 1 after one line. */
static int gather(const struct cmd *self, const struct config *cfg, struct redis *r,
		  struct event_status *st, uint64_t id_ms, uint64_t id_seq)
{
	struct gather g = {.self = self, .cfg = cfg, .r = r, .st = st};
	snprintf_(g.max, sizeof g.max, "%d", EVENT_MAX_BYTES);
	int rc = gather_stream(&g);
	if (rc == 0)
		rc = gather_pending(&g);
	if (rc || st->state == EVST_PENDING)
		return rc;
	rc = gather_dlq(&g);
	if (rc || st->state == EVST_DEAD_LETTERED || !st->in_stream)
		return rc;
	return gather_delivered(&g, id_ms, id_seq);
}

static void status_free(struct event_status *st)
{
	free(st->consumer);
	free(st->key_wait);
	free(st->dlq_id);
	for (size_t i = 0; i < st->ndlq; i++) {
		free(st->dlq_fields[i]);
		free(st->dlq_values[i]);
	}
	free(st->dlq_fields);
	free(st->dlq_values);
	struct invocation_state inv = {st->inv_fields, st->inv_values, st->ninv};
	invocation_state_free(&inv);
	cmd_match_free(st->matches, st->nmatches);
	free(st->match_err);
}

static int status_exec(const struct cmd *self, const struct cmd_args *args,
		       const struct config *cfg)
{
	uint64_t ms, seq;
	if (!parse_stream_id(args->pos[0], &ms, &seq)) {
		char *shown = text_escaped(args->pos[0], strlen(args->pos[0]), 64, 0);
		fprintf(stderr,
			"relay %s: '%s' is not a stream message id (<milliseconds>-<sequence>, "
			"e.g. 1764621000000-0)\n",
			self->words, shown);
		free(shown);
		return 2;
	}
	struct redis *r;
	if (cmd_redis_connect(self, cfg, &r) < 0)
		return 1;
	struct event_status st = {.id = args->pos[0],
				  .stream = cfg->redis_stream,
				  .group = cfg->redis_group,
				  .state = EVST_NOT_FOUND};
	int rc = gather(self, cfg, r, &st, ms, seq);
	redis_free(r);
	if (rc == 0) {
		if (cmd_flag(args, "--json")) {
			rc = cmd_print_json(self, event_status_json(&st));
		} else {
			struct buf b;
			buf_init(&b, 64u << 20);
			event_status_render(&b, &st);
			if (fwrite(b.data, 1, b.len, stdout) != b.len || fflush(stdout) != 0)
				rc = cmd_fail("%s: write: output error", self->words);
			buf_free(&b);
		}
		if (rc == 0 && st.state == EVST_NOT_FOUND)
			rc = 1;
	}
	status_free(&st);
	return rc;
}

const struct cmd cmd_event_status = {
	.words = "event status",
	.args = "MESSAGE-ID [--json]",
	.summary = "show where one stream message is",
	.opts = (const struct cmd_opt[]){{"--json", NULL, false}, {NULL}},
	.minpos = 1,
	.maxpos = 1,
	.help = "MESSAGE-ID is the stream entry's id (as XADD returned it). Prints its state:\n"
		"pending (consumer, idle time, deliveries, and each matching invocation's marker:\n"
		"ok, running until T attempt n, waiting until T after attempt n, exhausted),\n"
		"dead-lettered (the DLQ entry, found among the newest 100000), acknowledged,\n"
		"not delivered yet, or not found, and the handlers the event matches now in the\n"
		"functions directory. --json prints one JSON document (docs/json.md).\n"
		"Exit 0, 1 when the message is not found or Redis cannot be read.\n",
	.touches = CMD_REDIS | CMD_STREAM | CMD_FUNCTIONS_READ,
	.exec = status_exec,
};
