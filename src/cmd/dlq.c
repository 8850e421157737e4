/*
 * relay dlq ls|show|replay|rm: the dead-letter stream relay:<stream>:dlq
 * (consumer.c writes it), for operators.
 *
 * They read REDIS_URI, REDIS_STREAM and REDIS_GROUP like relay start
 * (CMD_STREAM), connect once (cmd_redis_connect: one line and exit 1 when
 * Redis is unreachable), never touch Docker or the state database; show
 * also reads the functions directory.
 *
 * Reads are bounded: ls, replay --all and rm --all scan the DLQ newest
 * first with scan_lua, which filters inside Redis and answers at most
 * DLQ_PAGE matching entries a call, each with only the fields ls shows
 * (never the event), every value cut to DLQ_FIELD_MAX bytes, or with its
 * id alone; one call looks at most DLQ_LOOK_MAX entries (Redis is not held
 * long on a large DLQ). ls stops after --limit matches and at the first
 * entry older than --since, and holds one page at a time: its table is
 * scanned twice (the column widths, then the rows printed as read, over
 * the same ids), --json prints each entry as it is read. replay and rm
 * --all hold the ids of at most DLQ_ALL_MAX entries (the newest; exit 1
 * says more are left); replay takes them oldest first (stream order).
 * show and replay read one entry whole (an event, bounded by
 * REDIS_REPLY_MAX).
 *
 * Only complete stream ids (MS-SEQ) are taken: Redis reads "MS" alone as
 * a range of that whole millisecond in XRANGE and as MS-0 in XDEL.
 *
 * Every text from the DLQ is printed through text_escape (util.h), JSON
 * through text_escape_json.
 *
 * replay runs replay_lua once per entry: it reads the entry, refuses when
 * it is gone or was replayed DLQ_REPLAY_MAX times (unless --force), XADDs
 * the original event to the original stream with relay_replay_of and
 * relay_replays, and XDELs the entry, all in one script: atomic, so two
 * replays of one entry publish it once and the second finds it gone.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "cmd/cmd.h"
#include "cmd/dlq_view.h"
#include "cmd/match.h"
#include "cmd/render.h"
#include "base/duration.h"
#include "io/event.h"
#include "io/redis.h"
#include "io/traceparent.h"
#include "base/rfc3339.h"
#include "base/util.h"

#define DLQ_PAGE 16	/* matching entries a scan_lua call answers */
#define DLQ_LOOK_MAX 32 /* entries a scan_lua call looks at */
#define DLQ_STR_(x) #x
#define DLQ_STR(x) DLQ_STR_(x)
#define DLQ_LS_DEFAULT 50      /* ls without --limit */
#define DLQ_REPLAY_MAX 10      /* replays of one event before --force is needed */
#define DLQ_OUT_MAX (1u << 26) /* bytes of one rendered table */

/* The options and state a dlq command works with. */
struct dlq_ctx {
	const struct cmd *self;
	struct redis *r;
	char *key; /* relay:<stream>:dlq */
	const char *stream;
	struct dlq_filter filter;
};

static void entries_free(struct dlq_entry **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dlq_view_entry_free(v[i]);
	free(v);
}

/* An entry of an XRANGE or scan_lua reply ({id, {field, value, ...}}),
 * or NULL. */
static struct dlq_entry *entry_from_reply(const redisReply *e)
{
	if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 ||
	    e->element[0]->type != REDIS_REPLY_STRING || e->element[1]->type != REDIS_REPLY_ARRAY)
		return NULL;
	const redisReply *f = e->element[1];
	struct dlq_entry *d = dlq_view_entry_new(e->element[0]->str, e->element[0]->len);
	for (size_t i = 0; i + 1 < f->elements; i += 2)
		if (f->element[i]->type == REDIS_REPLY_STRING &&
		    f->element[i + 1]->type == REDIS_REPLY_STRING)
			dlq_view_entry_add(d, f->element[i]->str, f->element[i]->len,
				      f->element[i + 1]->str, f->element[i + 1]->len);
	return d;
}

static int redis_fail(struct dlq_ctx *c, const redisReply *rep)
{
	if (!rep)
		return cmd_fail("%s: cannot reach Redis: %s", c->self->words, redis_errmsg(c->r));
	return cmd_fail("%s: Redis: %s", c->self->words,
			rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
}

/*
 * KEYS[1] the DLQ. ARGV[1] where to start, newest first: "+", an id, or
 * "(" and an id (after it); ARGV[2] the oldest id to look at ("-": all);
 * ARGV[3] matching entries to answer at most; ARGV[4] --since in ms ("0":
 * none): the scan ends at the first entry older; ARGV[5] "1" with
 * --reason ARGV[6] (kept when its reason contains it, bytes, case
 * matters); ARGV[7] "1" with --function ARGV[8] (kept when its function
 * equals it: an entry written before Relay recorded the function has none
 * and never matches); ARGV[9] "1": ids alone, else the fields ls shows
 * (the last of each, in a fixed order), each cut to ARGV[10] bytes plus
 * one (the reader marks the cut). Answers {next, {{id, fields}...}}:
 * next is where the next call starts, "" when the scan is over.
 */
static const char scan_lua[] =
	"local from, want, since = ARGV[1], tonumber(ARGV[3]), tonumber(ARGV[4])\n"
	"local cut = tonumber(ARGV[10]) + 1\n"
	"local SHOWN = {'original_stream', 'original_id', 'attempts', 'function', 'handler',\n"
	"  'reason', 'relay_replays'}\n"
	"local out, looked, over = {}, 0, false\n"
	"while not over and #out < want and looked < " DLQ_STR(
		DLQ_LOOK_MAX) " do\n"
			      "  local page = redis.call('XREVRANGE', KEYS[1], from, ARGV[2], "
			      "'COUNT', 16)\n"
			      "  if #page < 16 then over = true end\n"
			      "  for _, e in ipairs(page) do\n"
			      "    if #out >= want then over = false break end\n"
			      "    looked = looked + 1\n"
			      "    from = '(' .. e[1]\n"
			      "    if since > 0 and tonumber(string.match(e[1], '^%d+')) < since "
			      "then\n"
			      "      over = true break\n"
			      "    end\n"
			      "    local m, f = {}, e[2]\n"
			      "    for i = 1, #f - 1, 2 do m[f[i]] = f[i + 1] end\n"
			      "    if (ARGV[5] ~= '1' or (m.reason and string.find(m.reason, "
			      "ARGV[6], 1, true))) and\n"
			      "       (ARGV[7] ~= '1' or m['function'] == ARGV[8]) then\n"
			      "      local keep = {}\n"
			      "      if ARGV[9] ~= '1' then\n"
			      "        for _, k in ipairs(SHOWN) do\n"
			      "          if m[k] then keep[#keep + 1] = k; keep[#keep + 1] = "
			      "string.sub(m[k], 1, cut) end\n"
			      "        end\n"
			      "      end\n"
			      "      out[#out + 1] = {e[1], keep}\n"
			      "    end\n"
			      "  end\n"
			      "end\n"
			      "return {over and '' or from, out}\n";

static struct redis_script scan_script;

/* A scan in progress: newest first from `from`, down to `lowest`. */
struct dlq_scan {
	char from[64];	 /* "+", an id, or "(" and an id */
	char lowest[64]; /* "-" or an id */
	bool ids_only, over;
};

/* Cuts a value longer than DLQ_FIELD_MAX (scan_lua answers one byte more)
 * at a UTF-8 boundary and marks it with "...". */
static void cut_fields(struct dlq_entry *e)
{
	for (size_t i = 0; i < e->nf; i++) {
		if (e->vlen[i] <= DLQ_FIELD_MAX)
			continue;
		size_t n = DLQ_FIELD_MAX;
		while (n > 0 && ((unsigned char)e->val[i][n] & 0xc0) == 0x80)
			n--;
		e->val[i] = xrealloc(e->val[i], n + 4);
		memcpy(e->val[i] + n, "...", 4);
		e->vlen[i] = n + 3;
	}
}

/*
 * The next page of s: at most want entries matching c->filter (newest
 * first) into *out (*n of them; the caller frees them). 0, or -1 after
 * printing the error. *n is 0 and s->over true at the end.
 */
static int scan_page(struct dlq_ctx *c, struct dlq_scan *s, size_t want, struct dlq_entry ***out,
		     size_t *n)
{
	*out = NULL;
	*n = 0;
	while (!s->over && *n == 0) {
		char count[24], since[24], cut[24];
		snprintf_(count, sizeof count, "%zu", want < DLQ_PAGE ? want : DLQ_PAGE);
		snprintf_(since, sizeof since, "%lld", (long long)c->filter.since_ms);
		snprintf_(cut, sizeof cut, "%d", DLQ_FIELD_MAX);
		const char *argv[] = {"1",
				      c->key,
				      s->from,
				      s->lowest,
				      count,
				      since,
				      c->filter.reason ? "1" : "0",
				      c->filter.reason ? c->filter.reason : "",
				      c->filter.function ? "1" : "0",
				      c->filter.function ? c->filter.function : "",
				      s->ids_only ? "1" : "0",
				      cut};
		size_t lens[ARRAY_LEN(argv)];
		for (size_t i = 0; i < ARRAY_LEN(argv); i++)
			lens[i] = strlen(argv[i]);
		redisReply *rep =
			redis_script_run(c->r, &scan_script, (int)ARRAY_LEN(argv), argv, lens);
		if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
		    rep->element[0]->type != REDIS_REPLY_STRING ||
		    rep->element[0]->len >= sizeof s->from ||
		    rep->element[1]->type != REDIS_REPLY_ARRAY) {
			redis_fail(c, rep);
			if (rep)
				freeReplyObject(rep);
			return -1;
		}
		const redisReply *v = rep->element[1];
		if (rep->element[0]->len == 0)
			s->over = true;
		else
			snprintf_(s->from, sizeof s->from, "%s", rep->element[0]->str);
		*out = xcalloc(v->elements + 1, sizeof **out);
		for (size_t i = 0; i < v->elements; i++) {
			struct dlq_entry *e = entry_from_reply(v->element[i]);
			if (!e)
				continue;
			cut_fields(e);
			(*out)[(*n)++] = e;
		}
		freeReplyObject(rep);
		if (*n == 0) {
			free(*out);
			*out = NULL;
		}
	}
	return 0;
}

/* Starts s at from (NULL: the newest entry) down to lowest (NULL: all). */
static void scan_start(struct dlq_scan *s, const char *from, const char *lowest, bool ids_only)
{
	*s = (struct dlq_scan){.ids_only = ids_only};
	snprintf_(s->from, sizeof s->from, "%s", from ? from : "+");
	snprintf_(s->lowest, sizeof s->lowest, "%s", lowest ? lowest : "-");
}

/* One entry by id: 1 with *out, 0 when there is none, -1 after an error. */
static int read_one(struct dlq_ctx *c, const char *id, struct dlq_entry **out)
{
	*out = NULL;
	redisReply *rep = redis_command(c->r, "XRANGE %s %s %s", c->key, id, id);
	if (!rep || rep->type != REDIS_REPLY_ARRAY) {
		redis_fail(c, rep);
		if (rep)
			freeReplyObject(rep);
		return -1;
	}
	if (rep->elements >= 1)
		*out = entry_from_reply(rep->element[0]);
	freeReplyObject(rep);
	return *out ? 1 : 0;
}

/* Opens c: filters from the options the command has, then Redis. Returns
 * 0, 2 (usage: printed) or 1 (printed). */
static int ctx_open(struct dlq_ctx *c, const struct cmd *self, const struct cmd_args *args,
		    const struct config *cfg, bool filters)
{
	*c = (struct dlq_ctx){.self = self, .stream = cfg->redis_stream};
	if (filters) {
		const char *since = cmd_opt(args, "--since");
		int64_t d;
		if (since) {
			if (duration_parse(since, &d) < 0 || d <= 0) {
				char *shown = text_escaped(since, strlen(since), 0, 0);
				fprintf(stderr,
					"relay %s: --since %s is not a positive duration (e.g. "
					"90m, 24h)\n",
					self->words, shown);
				free(shown);
				return 2;
			}
			c->filter.since_ms = (now_wall_ns() - d) / NS_PER_MS;
			if (c->filter.since_ms < 1)
				c->filter.since_ms = 1;
		}
		c->filter.reason = cmd_opt(args, "--reason");
		c->filter.function = cmd_opt(args, "--function");
	}
	for (int i = 0; i < args->npos; i++)
		if (!dlq_view_id_valid(args->pos[i])) {
			char *shown = text_escaped(args->pos[i], strlen(args->pos[i]), 64, 0);
			fprintf(stderr,
				"relay %s: '%s' is not a complete stream id (MS-SEQ, like "
				"1764629249000-0)\n",
				self->words, shown);
			free(shown);
			return 2;
		}
	if (cmd_redis_connect(self, cfg, &c->r) < 0)
		return 1;
	c->key = xasprintf("relay:%s:dlq", cfg->redis_stream);
	return 0;
}

static void ctx_close(struct dlq_ctx *c)
{
	redis_free(c->r);
	free(c->key);
}

/* A JSON string of v (n bytes): itself when valid UTF-8 (printed with
 * text_escape_json), else escaped. */
static json_t *jstr(const char *v, size_t n)
{
	json_t *j = json_stringn(v, n);
	if (j)
		return j;
	char *e = text_escaped(v, n, 0, 0);
	j = json_string(e);
	free(e);
	return j;
}

/* doc as cmd_print_json prints it (indent 2, escaped by
 * text_escape_json), each line after the first indented by `indent`
 * more spaces, appended to b; steals doc. */
static void json_append(struct buf *b, json_t *doc, size_t indent)
{
	char *text = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
	json_decref(doc);
	if (!text)
		abort(); /* jansson fails on out-of-memory only */
	struct buf esc;
	size_t n = strlen(text);
	buf_init(&esc, 6 * n + 16);
	text_escape_json(&esc, text, n);
	free(text);
	for (size_t i = 0; i < esc.len; i++) {
		buf_append(b, &esc.data[i], 1);
		if (esc.data[i] == '\n')
			for (size_t k = 0; k < indent; k++)
				buf_append(b, " ", 1);
	}
	buf_free(&esc);
}

/* A field as JSON: its string, null when missing. */
static json_t *jfield(const struct dlq_entry *e, const char *name)
{
	size_t n = 0;
	const char *v = dlq_view_entry_get(e, name, &n);
	return v ? jstr(v, n) : json_null();
}

/* A field holding a count: its integer, null when missing or not one. */
static json_t *jcount(const struct dlq_entry *e, const char *name)
{
	const char *v = dlq_view_entry_get(e, name, NULL);
	int64_t i;
	return v && parse_int64(v, &i) == 0 ? json_integer(i) : json_null();
}

/* The keys ls --json and show --json share. */
static json_t *entry_json(const struct dlq_entry *e, int64_t now_ms)
{
	char ts[RFC3339_STR_MAX];
	json_t *o = json_object();
	json_object_set_new(o, "id", json_string(e->id));
	json_object_set_new(o, "dead_lettered_at",
			    json_string(rfc3339_format_utc(e->ms * NS_PER_MS, ts)));
	json_object_set_new(o, "age_seconds",
			    json_integer(now_ms > e->ms ? (now_ms - e->ms) / 1000 : 0));
	json_object_set_new(o, "original_stream", jfield(e, "original_stream"));
	json_object_set_new(o, "original_id", jfield(e, "original_id"));
	json_object_set_new(o, "attempts", jcount(e, "attempts"));
	json_object_set_new(o, "function", jfield(e, "function"));
	json_object_set_new(o, "handler", jfield(e, "handler"));
	json_object_set_new(o, "reason", jfield(e, "reason"));
	json_t *rp = jcount(e, "relay_replays");
	json_object_set_new(o, "replays", json_is_null(rp) ? json_integer(0) : rp);
	if (!json_is_integer(rp))
		json_decref(rp);
	return o;
}

/* The terminal's width: COLUMNS when it is a positive number, else the
 * width of the terminal on stdout, else 0 (not a terminal: never cut). */
static size_t term_width(void)
{
	const char *cols = getenv("COLUMNS");
	int64_t n;
	if (cols && parse_int64(cols, &n) == 0 && n > 0 && n < 100000)
		return (size_t)n;
	struct winsize ws;
	if (isatty(1) && ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
		return ws.ws_col;
	return 0;
}

static int write_out(const struct cmd *self, const char *p, size_t n)
{
	if (fwrite(p, 1, n, stdout) != n || fflush(stdout) != 0)
		return cmd_fail("%s: write: output error", self->words);
	return 0;
}

/* ls --json: the array printed as its entries are read. */
static int ls_json(struct dlq_ctx *c, size_t limit)
{
	int64_t now_ms = now_wall_ns() / NS_PER_MS;
	struct dlq_scan s;
	scan_start(&s, NULL, NULL, false);
	size_t shown = 0;
	int rc = 0;
	while (rc == 0 && shown < limit) {
		struct dlq_entry **v;
		size_t n;
		if (scan_page(c, &s, limit - shown, &v, &n) < 0)
			return 1;
		if (n == 0)
			break;
		struct buf b;
		buf_init(&b, DLQ_OUT_MAX);
		for (size_t i = 0; i < n; i++, shown++) {
			buf_append(&b, shown ? ",\n  " : "[\n  ", 4);
			json_append(&b, entry_json(v[i], now_ms), 2);
		}
		entries_free(v, n);
		rc = write_out(c->self, b.data, b.len);
		buf_free(&b);
	}
	if (rc == 0)
		rc = write_out(c->self, shown ? "\n]\n" : "[]\n", shown ? 3 : 3);
	return rc;
}

/*
 * ls's table in two scans over the same entries: the first takes the
 * column widths and the ids it went from and to, the second prints the
 * rows as it reads them (an entry removed meanwhile is left out; one
 * added is not in that range).
 */
static int ls_table(struct dlq_ctx *c, size_t limit, size_t width)
{
	int64_t now_s = now_wall_ns() / NS_PER_SEC;
	struct dlq_ls_widths w;
	dlq_view_ls_widths_init(&w);
	char first[64] = "", last[64] = "";
	struct dlq_scan s;
	scan_start(&s, NULL, NULL, false);
	size_t seen = 0;
	while (seen < limit) {
		struct dlq_entry **v;
		size_t n;
		if (scan_page(c, &s, limit - seen, &v, &n) < 0)
			return 1;
		if (n == 0)
			break;
		for (size_t i = 0; i < n; i++)
			dlq_view_ls_widths_add(&w, v[i], now_s);
		if (!seen)
			snprintf_(first, sizeof first, "%s", v[0]->id);
		snprintf_(last, sizeof last, "%s", v[n - 1]->id);
		seen += n;
		entries_free(v, n);
	}
	struct buf b;
	buf_init(&b, DLQ_OUT_MAX);
	dlq_view_render_ls_head(&b, &w);
	int rc = write_out(c->self, b.data, b.len);
	buf_free(&b);
	if (!seen || rc)
		return rc;
	scan_start(&s, first, last, false);
	size_t printed = 0;
	while (rc == 0 && printed < seen) {
		struct dlq_entry **v;
		size_t n;
		if (scan_page(c, &s, seen - printed, &v, &n) < 0)
			return 1;
		if (n == 0)
			break;
		buf_init(&b, DLQ_OUT_MAX);
		dlq_view_render_ls_rows(&b, &w, v, n, now_s, width);
		printed += n;
		entries_free(v, n);
		rc = write_out(c->self, b.data, b.len);
		buf_free(&b);
	}
	return rc;
}

static int ls_exec(const struct cmd *self, const struct cmd_args *args, const struct config *cfg)
{
	int64_t limit = DLQ_LS_DEFAULT;
	const char *lim = cmd_opt(args, "--limit");
	if (lim && (parse_int64(lim, &limit) < 0 || limit < 1 || limit > 100000)) {
		char *shown = text_escaped(lim, strlen(lim), 64, 0);
		fprintf(stderr, "relay dlq ls: --limit %s is not a number from 1 to 100000\n",
			shown);
		free(shown);
		return 2;
	}
	struct dlq_ctx c;
	int rc = ctx_open(&c, self, args, cfg, true);
	if (rc)
		return rc;
	redis_script_init(&scan_script, scan_lua);
	if (cmd_flag(args, "--json"))
		rc = ls_json(&c, (size_t)limit);
	else
		rc = ls_table(&c, (size_t)limit, cmd_flag(args, "--wide") ? 0 : term_width());
	ctx_close(&c);
	return rc;
}

/* The event pretty-printed (jansson, indent 2, text_escape_json), or NULL
 * when it is not JSON jansson reads. */
static char *pretty_json(const char *v, size_t n)
{
	json_error_t jerr;
	json_t *j = json_loadb(v, n, JSON_DECODE_ANY, &jerr);
	if (!j)
		return NULL;
	struct buf b;
	buf_init(&b, DLQ_OUT_MAX);
	json_append(&b, j, 0);
	return buf_steal(&b);
}

/* What show prints about one entry. */
struct show {
	struct dlq_entry *e;
	const char *ev_text; /* the entry's event field, NULL when absent */
	size_t elen;
	char *pretty;	     /* ev_text pretty-printed, NULL when not JSON */
	struct cmd_match *m; /* what it matches now */
	size_t nm;
	bool matched; /* false: not evaluated (no decodable event, or scan_err) */
	char *why, *scan_err;
	int64_t now_ms;
};

/* What the entry's event matches now: a decodable event only. */
static void show_evaluate(const struct cmd *self, const struct config *cfg, struct show *sh)
{
	sh->ev_text = dlq_view_entry_get(sh->e, "event", &sh->elen);
	struct event *ev = NULL;
	if (sh->ev_text && event_parse_json(sh->ev_text, sh->elen, &ev, &sh->why) == EVENT_OK) {
		sh->matched = cmd_match_event(self->words, cfg->functions_dir, ev, now_wall_ns(),
					      &sh->m, &sh->nm, &sh->scan_err) == 0;
		event_free(ev);
	}
	sh->now_ms = now_wall_ns() / NS_PER_MS;
	sh->pretty = sh->ev_text ? pretty_json(sh->ev_text, sh->elen) : NULL;
}

/* show --json: the entry as ls --json has it, with its fields, its event
 * and what it matches now. */
static int show_json(const struct cmd *self, const struct show *sh)
{
	const struct dlq_entry *e = sh->e;
	json_t *o = entry_json(e, sh->now_ms);
	json_t *fields = json_object();
	for (size_t i = 0; i < e->nf; i++)
		json_object_set_new(fields, e->name[i], jstr(e->val[i], e->vlen[i]));
	json_object_set_new(o, "fields", fields);
	json_error_t jerr;
	json_t *evj = sh->pretty && sh->ev_text
			      ? json_loadb(sh->ev_text, sh->elen, JSON_DECODE_ANY, &jerr)
			      : NULL;
	json_object_set_new(o, "event", evj ? evj : json_null());
	json_t *ma = json_array();
	for (size_t i = 0; i < sh->nm; i++) {
		json_t *x = json_object();
		json_object_set_new(x, "function", json_string(sh->m[i].function));
		json_object_set_new(x, "handler", json_string(sh->m[i].handler));
		json_array_append_new(ma, x);
	}
	if (sh->matched)
		json_object_set_new(o, "matches", ma);
	else {
		json_decref(ma);
		json_object_set_new(o, "matches", json_null());
	}
	return cmd_print_json(self, o);
}

/* The ID, Dead-lettered and field lines (all but the event), the names
 * escaped and aligned. */
static void show_text_fields(struct buf *b, const struct show *sh)
{
	const struct dlq_entry *e = sh->e;
	char ts[RFC3339_STR_MAX];
	size_t w = strlen("Dead-lettered");
	char **names = xcalloc(e->nf + 1, sizeof *names);
	for (size_t i = 0; i < e->nf; i++) {
		names[i] = text_escaped(e->name[i], strlen(e->name[i]), 0, 0);
		if (text_cols(names[i]) > w)
			w = text_cols(names[i]);
	}
	buf_appendf(b, "%-*s  %s\n", (int)w + 1, "ID:", e->id);
	char age[RENDER_AGE_MAX];
	render_age(e->ms / 1000, sh->now_ms / 1000, age);
	/* The age when it reads "... ago"; from 30 days on it is the date. */
	bool ago = strstr(age, " ago") != NULL;
	buf_appendf(b, "%-*s  %s%s%s%s\n", (int)w + 1,
		    "Dead-lettered:", rfc3339_format_utc(e->ms * NS_PER_MS, ts), ago ? " (" : "",
		    ago ? age : "", ago ? ")" : "");
	for (size_t i = 0; i < e->nf; i++) {
		if (strcmp(e->name[i], "event") == 0)
			continue;
		char *val =
			e->vlen[i] ? text_escaped(e->val[i], e->vlen[i], 0, 0) : xstrdup("(empty)");
		buf_appendf(b, "%s:%*s  %s\n", names[i], (int)(w - text_cols(names[i])), "", val);
		free(val);
	}
	for (size_t i = 0; i < e->nf; i++)
		free(names[i]);
	free(names);
}

/* The Event section: pretty JSON, the text escaped, or (none). */
static void show_text_event(struct buf *b, const struct show *sh)
{
	if (!sh->ev_text || sh->elen == 0) {
		buf_appendf(b, "\nEvent: (none)\n");
	} else if (sh->pretty) {
		buf_appendf(b, "\nEvent:\n%s\n", sh->pretty);
	} else {
		char *esc = text_escaped(sh->ev_text, sh->elen, 0, 0);
		buf_appendf(b, "\nEvent (not JSON, escaped):\n%s\n", esc);
		free(esc);
	}
}

/* The Matches now section: function<TAB>handler lines, or why there are
 * none. */
static void show_text_matches(struct buf *b, const struct show *sh)
{
	buf_appendf(b, "\nMatches now:\n");
	if (!sh->matched) {
		const char *why_not = sh->scan_err
					      ? sh->scan_err
					      : "no decodable event; a replay would be refused";
		buf_appendf(b, "  (not evaluated: ");
		text_escape(b, why_not, strlen(why_not), 0, TEXT_VERBATIM);
		buf_appendf(b, ")\n");
	} else if (sh->nm == 0) {
		buf_appendf(b, "  (none: a replay would run no handler)\n");
	}
	for (size_t i = 0; i < sh->nm; i++) {
		buf_append(b, "  ", 2);
		text_escape(b, sh->m[i].function, strlen(sh->m[i].function), 0, 0);
		buf_append(b, "\t", 1);
		text_escape(b, sh->m[i].handler, strlen(sh->m[i].handler), 0, 0);
		buf_append(b, "\n", 1);
	}
}

/* show without --json: the fields, the event, what it matches now. */
static int show_text(const struct cmd *self, const struct show *sh)
{
	struct buf b;
	buf_init(&b, DLQ_OUT_MAX);
	show_text_fields(&b, sh);
	show_text_event(&b, sh);
	show_text_matches(&b, sh);
	int rc = write_out(self, b.data ? b.data : "", b.len);
	buf_free(&b);
	return rc;
}

static int show_exec(const struct cmd *self, const struct cmd_args *args, const struct config *cfg)
{
	struct dlq_ctx c;
	int rc = ctx_open(&c, self, args, cfg, false);
	if (rc)
		return rc;
	const char *id = args->pos[0];
	struct show sh = {0};
	int got = read_one(&c, id, &sh.e);
	ctx_close(&c);
	if (got <= 0)
		return got < 0 ? 1 : cmd_fail("dlq show: %s: no such entry", id);
	show_evaluate(self, cfg, &sh);
	rc = cmd_flag(args, "--json") ? show_json(self, &sh) : show_text(self, &sh);
	if (rc == 0 && sh.scan_err)
		rc = cmd_fail("dlq show: %s", sh.scan_err);
	free(sh.pretty);
	free(sh.why);
	free(sh.scan_err);
	cmd_match_free(sh.m, sh.nm);
	dlq_view_entry_free(sh.e);
	return rc;
}

/*
 * KEYS[1] the DLQ, KEYS[2] the stream to replay to, KEYS[3] its replays
 * hash (relay:<stream>:replays: the ids replays published, which relay
 * start takes off as it reads them to count dlq_replayed_total; at most
 * ARGV[5] ids, past that a replay goes uncounted); ARGV[1] the entry id,
 * ARGV[2] DLQ_REPLAY_MAX, ARGV[3] "1" to replay past it (--force), ARGV[4]
 * "1" for a dry run (check, write nothing). Answers {"gone"},
 * {"malformed", reason}, {"limit", n}, {"dry", n + 1} or {"ok", new id,
 * n + 1}, where n is the entry's relay_replays (0 when absent; anything not a
 * count below 1e9, "x", "inf" or "-1" say, as 1e9: it needs --force).
 * ARGV[6] a new parent-id (16 hex), ARGV[7] a new traceparent: the replayed
 * entry's `traceparent` continues the trace of the DLQ entry's own (same
 * trace-id and flags, the new parent-id; its tracestate kept), or is the new
 * one when the entry has none in version-00 form (docs/dlq.md).
 */
static const char replay_lua[] =
	"local e = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])[1]\n"
	"if not e then return {'gone'} end\n"
	"local m = {}\n"
	"for i = 1, #e[2] - 1, 2 do m[e[2][i]] = e[2][i + 1] end\n"
	"if not m.event or m.event == '' then return {'malformed', m.reason or ''} end\n"
	"local n = tonumber(m.relay_replays or '0')\n"
	"if not (n and n >= 0 and n < 1e9) then n = 1e9 end\n"
	"n = math.floor(n)\n"
	"if n >= tonumber(ARGV[2]) and ARGV[3] ~= '1' then\n"
	"  return {'limit', string.format('%d', n)}\n"
	"end\n"
	"local next = string.format('%d', n + 1)\n"
	"if ARGV[4] == '1' then return {'dry', next} end\n"
	"local hex = '^00%-(' .. string.rep('[0-9a-f]', 32) .. ')%-' ..\n"
	"  string.rep('[0-9a-f]', 16) .. '%-([0-9a-f][0-9a-f])$'\n"
	"local tid, fl = string.match(m.traceparent or '', hex)\n"
	"local tp = tid and ('00-' .. tid .. '-' .. ARGV[6] .. '-' .. fl) or ARGV[7]\n"
	"local f = {'event', m.event, 'relay_replay_of', ARGV[1], 'relay_replays', next,\n"
	"  'traceparent', tp}\n"
	"if tid and m.tracestate then f[#f + 1] = 'tracestate'; f[#f + 1] = m.tracestate end\n"
	"local id = redis.call('XADD', KEYS[2], '*', unpack(f))\n"
	"if redis.call('HLEN', KEYS[3]) < tonumber(ARGV[5]) then\n"
	"  redis.call('HSET', KEYS[3], id, ARGV[1])\n"
	"end\n"
	"redis.call('XDEL', KEYS[1], ARGV[1])\n"
	"return {'ok', id, next}\n";

static struct redis_script replay_script;

/* The replay script's ARGV[6] and ARGV[7]: a new parent-id (16 hex) and a
 * new sampled traceparent for an entry without a trace of its own. */
static void replay_trace(char span[17], char tp[TRACEPARENT_LEN + 1])
{
	struct traceparent fresh;
	traceparent_new(&fresh, TRACEPARENT_FLAG_SAMPLED);
	hex_encode(fresh.span_id, sizeof fresh.span_id, span);
	traceparent_format(&fresh, tp);
}

static void ids_free(char **ids, size_t n)
{
	for (size_t i = 0; ids && i < n; i++)
		free(ids[i]);
	free(ids);
}

/* The ids a replay or rm works on: the arguments, or with --all the
 * entries matching the filters (the newest DLQ_ALL_MAX, oldest first). NULL after an error
 * (printed) with *rc set. */
static char **targets(struct dlq_ctx *c, const struct cmd_args *args, size_t *n, int *rc)
{
	*n = 0;
	char **ids = NULL;
	if (!cmd_flag(args, "--all")) {
		ids = xcalloc((size_t)args->npos + 1, sizeof *ids);
		for (int i = 0; i < args->npos; i++)
			ids[(*n)++] = xstrdup(args->pos[i]);
		return ids;
	}
	redis_script_init(&scan_script, scan_lua);
	struct dlq_scan s;
	scan_start(&s, NULL, NULL, true);
	size_t k = 0, cap = 0;
	for (;;) {
		struct dlq_entry **v;
		size_t got;
		if (scan_page(c, &s, DLQ_ALL_MAX + 1 - k, &v, &got) < 0) {
			ids_free(ids, k);
			*rc = 1;
			return NULL;
		}
		if (got == 0)
			break;
		if (k + got > cap) {
			cap = cap ? 2 * cap : 64;
			while (cap < k + got)
				cap *= 2;
			ids = xrealloc(ids, (cap + 1) * sizeof *ids);
		}
		for (size_t i = 0; i < got; i++) {
			ids[k++] = v[i]->id;
			v[i]->id = NULL;
		}
		entries_free(v, got);
		if (k > DLQ_ALL_MAX)
			break;
	}
	if (k > DLQ_ALL_MAX) {
		free(ids[--k]);
		*rc = cmd_fail("%s: more than %d entries match; taking the newest %d (run it again "
			       "for the rest)",
			       args->cmd->words, DLQ_ALL_MAX, DLQ_ALL_MAX);
	}
	/* Newest first as scanned; taken in stream order. */
	for (size_t i = 0; i < k / 2; i++) {
		char *t = ids[i];
		ids[i] = ids[k - 1 - i];
		ids[k - 1 - i] = t;
	}
	*n = k;
	if (!ids)
		ids = xcalloc(1, sizeof *ids);
	return ids;
}

/* The arguments: IDs, or --all with optional filters; never both. 0 or 2. */
static int check_selection(const struct cmd *self, const struct cmd_args *args)
{
	bool all = cmd_flag(args, "--all");
	bool filters = cmd_opt(args, "--since") || cmd_opt(args, "--reason") ||
		       cmd_opt(args, "--function");
	const char *why = all && args->npos	? "give entry IDs or --all, not both"
			  : !all && !args->npos ? "give entry IDs, or --all"
			  : !all && filters	? "--since, --reason and --function go with --all"
						: NULL;
	if (!why)
		return 0;
	fprintf(stderr, "relay %s: %s\n", self->words, why);
	cmd_usage(self, stderr);
	return 2;
}

/* The stream entry id is replayed to (malloc'd into *stream): 0, or 1
 * after printing why it is not replayed (gone, or no decodable event:
 * refused before the script). */
static int replay_target(struct dlq_ctx *c, const char *id, char **stream)
{
	struct dlq_entry *e = NULL;
	int got = read_one(c, id, &e);
	if (got < 0)
		return 1;
	if (got == 0)
		return cmd_fail("dlq replay: %s: gone (replayed or removed meanwhile)", id);
	size_t elen = 0;
	const char *ev_text = dlq_view_entry_get(e, "event", &elen);
	struct event *ev = NULL;
	char *why = NULL;
	if (!ev_text || elen == 0 || event_parse_json(ev_text, elen, &ev, &why) != EVENT_OK) {
		const char *reason = dlq_view_entry_get(e, "reason", NULL);
		int rc = cmd_fail("dlq replay: %s: refused: no decodable event (%s)", id,
				  reason ? reason : (why ? why : "no event"));
		free(why);
		dlq_view_entry_free(e);
		return rc;
	}
	event_free(ev);
	const char *os = dlq_view_entry_get(e, "original_stream", NULL);
	*stream = xstrdup(os && *os ? os : c->stream);
	dlq_view_entry_free(e);
	return 0;
}

/* What the replay script answered for id, printed: 0 when replayed (or,
 * dry, would be), else 1. */
static int replay_report(struct dlq_ctx *c, const char *id, const char *stream,
			 redisReply *rep)
{
	const char *what = rep && rep->type == REDIS_REPLY_ARRAY && rep->elements >= 1 &&
					   rep->element[0]->type == REDIS_REPLY_STRING
				   ? rep->element[0]->str
				   : NULL;
	const char *a1 = what && rep->elements >= 2 ? rep->element[1]->str : "";
	const char *a2 = what && rep->elements >= 3 ? rep->element[2]->str : "";
	if (!what)
		return redis_fail(c, rep);
	if (strcmp(what, "gone") == 0)
		return cmd_fail("dlq replay: %s: gone (replayed or removed meanwhile)", id);
	if (strcmp(what, "malformed") == 0)
		return cmd_fail("dlq replay: %s: refused: no decodable event (%s)", id, a1);
	if (strcmp(what, "limit") == 0)
		return cmd_fail("dlq replay: %s: refused: already replayed %s times (--force "
				"replays it anyway)",
				id, a1);
	bool dry = strcmp(what, "dry") == 0;
	if (!dry && strcmp(what, "ok") != 0)
		return redis_fail(c, NULL);
	char *shown = text_escaped(stream, strlen(stream), 0, 0);
	if (dry)
		printf("%s would be replayed to %s (replay %s)\n", id, shown, a1);
	else
		printf("%s replayed as %s on %s (replay %s)\n", id, a1, shown, a2);
	free(shown);
	return 0;
}

/* Replays one entry: 0, or 1 after printing why it was not. */
static int replay_one(struct dlq_ctx *c, const char *id, bool force, bool dry)
{
	char *stream = NULL;
	if (replay_target(c, id, &stream))
		return 1;
	char max[16];
	snprintf_(max, sizeof max, "%d", DLQ_REPLAY_MAX);
	char *replays = xasprintf("relay:%s:replays", stream);
	char span[17], tp[TRACEPARENT_LEN + 1];
	replay_trace(span, tp);
	const char *argv[] = {"3",
			      c->key,
			      stream,
			      replays,
			      id,
			      max,
			      force ? "1" : "0",
			      dry ? "1" : "0",
			      DLQ_STR(DLQ_REPLAYS_MAX),
			      span,
			      tp};
	size_t lens[ARRAY_LEN(argv)];
	for (size_t i = 0; i < ARRAY_LEN(argv); i++)
		lens[i] = strlen(argv[i]);
	redisReply *rep = redis_script_run(c->r, &replay_script, (int)ARRAY_LEN(argv), argv, lens);
	int rc = replay_report(c, id, stream, rep);
	if (rep)
		freeReplyObject(rep);
	free(replays);
	free(stream);
	return rc;
}

static int replay_exec(const struct cmd *self, const struct cmd_args *args,
		       const struct config *cfg)
{
	int rc = check_selection(self, args);
	if (rc)
		return rc;
	struct dlq_ctx c;
	if ((rc = ctx_open(&c, self, args, cfg, true)) != 0)
		return rc;
	redis_script_init(&replay_script, replay_lua);
	size_t n = 0;
	char **ids = targets(&c, args, &n, &rc);
	if (ids && n == 0 && cmd_flag(args, "--all"))
		printf("no matching entries\n");
	for (size_t i = 0; ids && i < n; i++)
		if (replay_one(&c, ids[i], cmd_flag(args, "--force"), cmd_flag(args, "--dry-run")))
			rc = 1;
	fflush(stdout);
	ids_free(ids, n);
	ctx_close(&c);
	return rc;
}

/* Asks "Delete N entries? [y/N] " on the terminal: whether the answer was yes. */
static bool confirm(size_t n)
{
	printf("Delete %zu %s? [y/N] ", n, n == 1 ? "entry" : "entries");
	fflush(stdout);
	char line[64];
	if (!fgets(line, sizeof line, stdin))
		return false;
	str_trim(line);
	return strcmp(line, "y") == 0 || strcmp(line, "Y") == 0 || strcmp(line, "yes") == 0;
}

static int rm_exec(const struct cmd *self, const struct cmd_args *args, const struct config *cfg)
{
	int rc = check_selection(self, args);
	if (rc)
		return rc;
	struct dlq_ctx c;
	if ((rc = ctx_open(&c, self, args, cfg, true)) != 0)
		return rc;
	size_t n = 0;
	char **ids = targets(&c, args, &n, &rc);
	if (!ids)
		goto out;
	if (n == 0) {
		printf("no matching entries\n");
		goto out;
	}
	if (!cmd_flag(args, "--yes")) {
		if (!isatty(0) || !isatty(1)) {
			rc = cmd_fail("dlq rm: not deleting %zu %s without a terminal to ask on: "
				      "pass --yes",
				      n, n == 1 ? "entry" : "entries");
			goto out;
		}
		if (!confirm(n)) {
			rc = cmd_fail("dlq rm: nothing deleted");
			goto out;
		}
	}
	size_t deleted = 0;
	for (size_t i = 0; i < n; i++) {
		redisReply *rep = redis_command(c.r, "XDEL %s %s", c.key, ids[i]);
		if (!rep || rep->type != REDIS_REPLY_INTEGER) {
			rc = redis_fail(&c, rep);
			if (rep)
				freeReplyObject(rep);
			break;
		}
		if (rep->integer == 1)
			deleted++;
		else
			rc = cmd_fail("dlq rm: %s: no such entry", ids[i]);
		freeReplyObject(rep);
	}
	printf("deleted %zu %s\n", deleted, deleted == 1 ? "entry" : "entries");
out:
	fflush(stdout);
	ids_free(ids, n);
	ctx_close(&c);
	return rc;
}

#define FILTER_OPTS                                        \
	{"--since", NULL, true}, {"--reason", NULL, true}, \
	{                                                  \
		"--function", NULL, true                   \
	}
#define FILTER_HELP                                                                          \
	"Filters: --since DURATION keeps entries dead-lettered within it (90m, 24h),\n"      \
	"--reason TEXT those whose reason contains TEXT, --function NAME those whose\n"      \
	"exhausted invocation was of function NAME (entries written before Relay recorded\n" \
	"the function never match it).\n"

const struct cmd cmd_dlq_ls = {
	.words = "dlq ls",
	.args = "[--limit N] [--since DURATION] [--reason TEXT] [--function NAME] [--wide] "
		"[--json]",
	.summary = "list dead-lettered events, newest first",
	.opts = (const struct cmd_opt[]){{"--limit", NULL, true},
					 FILTER_OPTS,
					 {"--wide", NULL, false},
					 {"--json", NULL, false},
					 {NULL}},
	.help = "Columns: ID (of the DLQ entry), AGE, ORIGINAL (the message's stream id),\n"
		"ATTEMPTS, FUNCTION (the invocation that exhausted; - for a malformed event or\n"
		"an entry written before Relay recorded it) and REASON, cut to the terminal\n"
		"width (COLUMNS, else the terminal's; never cut when stdout is not a terminal)\n"
		"and shown whole with --wide. At most --limit entries (default 50).\n" FILTER_HELP
		"--json prints an array of objects (docs/dlq.md).\n",
	.touches = CMD_REDIS | CMD_STREAM,
	.exec = ls_exec,
};
const struct cmd cmd_dlq_show = {
	.words = "dlq show",
	.args = "[--json] ID",
	.summary = "show one dead-lettered event and what it matches now",
	.opts = (const struct cmd_opt[]){{"--json", NULL, false}, {NULL}},
	.minpos = 1,
	.maxpos = 1,
	.help = "Prints every field of the entry, the event (pretty-printed when it is JSON,\n"
		"escaped when not), then the functions and handlers it matches now in the\n"
		"functions directory: what a replay would run (as relay function match).\n",
	.touches = CMD_REDIS | CMD_STREAM | CMD_FUNCTIONS_READ,
	.exec = show_exec,
};
const struct cmd cmd_dlq_replay = {
	.words = "dlq replay",
	.args = "ID... | --all [filters] [--dry-run] [--force]",
	.summary = "put dead-lettered events back on their stream",
	.opts = (const struct cmd_opt[]){{"--all", NULL, false},
					 FILTER_OPTS,
					 {"--dry-run", NULL, false},
					 {"--force", NULL, false},
					 {NULL}},
	.maxpos = CMD_POS_MAX,
	.help = "Each entry is XADDed back to its original stream (its event, plus\n"
		"relay_replay_of=<DLQ id> and relay_replays=<n>) and removed from the DLQ in one\n"
		"atomic step; prints \"<id> replayed as <new id> on <stream> (replay <n>)\".\n"
		"A replay re-runs EVERY handler the event matches now, including those that\n"
		"had already succeeded: the original's invocation state was cleared when it was\n"
		"dead-lettered. An entry gone meanwhile, one without a decodable event, or one\n"
		"already replayed 10 times (unless --force) is refused with one line and exit 1;\n"
		"the others are still replayed. --dry-run checks and prints, writing nothing.\n"
		"Filters (with --all only): as relay dlq ls.\n",
	.touches = CMD_REDIS | CMD_STREAM,
	.exec = replay_exec,
};
const struct cmd cmd_dlq_rm = {
	.words = "dlq rm",
	.args = "ID... | --all [filters] [--yes]",
	.summary = "delete dead-lettered events",
	.opts =
		(const struct cmd_opt[]){
			{"--all", NULL, false}, FILTER_OPTS, {"--yes", NULL, false}, {NULL}},
	.maxpos = CMD_POS_MAX,
	.help = "Without --yes it asks \"Delete N entries? [y/N]\" when stdin and stdout are a\n"
		"terminal, and refuses (exit 1) when they are not. Filters (with --all only): as\n"
		"relay dlq ls.\n",
	.touches = CMD_REDIS | CMD_STREAM,
	.exec = rm_exec,
};
