#include "engine/invocation.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/duration.h"
#include "base/util.h"
#include "engine/keys.h"
#include "engine/runner.h"
#include "io/docker.h"

static int parse_u64(const char *s, size_t n, int64_t *out)
{
	if (n == 0 || n > 19)
		return -1;
	int64_t v = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		if (v > (INT64_MAX - (s[i] - '0')) / 10)
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	*out = v;
	return 0;
}

struct marker invocation_marker_parse(const char *s, size_t len)
{
	struct marker m = {MARK_ABSENT, 0, 0};
	int64_t a, d;
	if (len == 2 && memcmp(s, "ok", 2) == 0) {
		m.kind = MARK_OK;
		return m;
	}
	if (len > 10 && memcmp(s, "exhausted:", 10) == 0) {
		if (parse_u64(s + 10, len - 10, &a) == 0 && a <= 1000000) {
			m.kind = MARK_EXHAUSTED;
			m.attempts = (int)a;
		}
		return m;
	}
	static const struct {
		const char *prefix;
		enum marker_kind kind;
	} timed[] = {{"running:", MARK_RUNNING}, {"next_attempt_at:", MARK_NEXT_ATTEMPT}};
	for (size_t i = 0; i < 2; i++) {
		size_t pl = strlen(timed[i].prefix);
		if (len <= pl || memcmp(s, timed[i].prefix, pl) != 0)
			continue;
		const char *rest = s + pl;
		size_t rl = len - pl;
		const char *hash = memchr(rest, '#', rl);
		/* A deadline without #<attempts> does not parse: absent. */
		if (!hash)
			return m;
		if (parse_u64(rest, (size_t)(hash - rest), &d) < 0 ||
		    parse_u64(hash + 1, rl - (size_t)(hash - rest) - 1, &a) < 0 || a < 1 ||
		    a > 1000000)
			return m;
		m.kind = timed[i].kind;
		m.deadline_ns = d;
		m.attempts = (int)a;
	}
	return m;
}

void invocation_marker_format(const struct marker *m, char *out, size_t outlen)
{
	switch (m->kind) {
	case MARK_OK: snprintf_(out, outlen, "ok"); break;
	case MARK_RUNNING:
		snprintf_(out, outlen, "running:%" PRId64 "#%d", m->deadline_ns, m->attempts);
		break;
	case MARK_NEXT_ATTEMPT:
		snprintf_(out, outlen, "next_attempt_at:%" PRId64 "#%d", m->deadline_ns,
			  m->attempts);
		break;
	case MARK_EXHAUSTED: snprintf_(out, outlen, "exhausted:%d", m->attempts); break;
	case MARK_ABSENT: snprintf_(out, outlen, "%s", ""); break;
	}
}

int64_t invocation_running_deadline(int64_t claim_wall_ns, int64_t timeout_ns)
{
	struct runner_request in = {.timeout_ns = timeout_ns};
	return claim_wall_ns + RUNNER_CLAIM_TIMEOUT_MS * NS_PER_MS +
	       DOCKER_OPEN_TIMEOUT_MS * NS_PER_MS + runner_worst_case_ns(&in) +
	       RUNNER_RECORD_TIMEOUT_MS * NS_PER_MS + RUNNER_CLOCK_SKEW_MS * NS_PER_MS;
}

bool invocation_marker_eligible(const struct marker *m, int64_t now_ns)
{
	switch (m->kind) {
	case MARK_ABSENT: return true;
	case MARK_OK:
	case MARK_EXHAUSTED: return false;
	case MARK_RUNNING:
	case MARK_NEXT_ATTEMPT: return now_ns >= m->deadline_ns;
	}
	return true;
}

char *invocation_key(const char *stream, const char *group, const char *msg_id)
{
	char *s = keys_encode(stream), *g = keys_pct_encode(group);
	char *k = xasprintf("relay:invocation:%s:%s:%s", s, g, msg_id);
	free(s);
	free(g);
	return k;
}

int invocation_state_load(struct redis *r, const char *key, struct invocation_state *out)
{
	memset(out, 0, sizeof *out);
	redisReply *rep = redis_command(r, "HGETALL %s", key);
	if (!rep)
		return -1;
	int rc = -1;
	if (rep->type == REDIS_REPLY_ARRAY && rep->elements % 2 == 0) {
		size_t n = rep->elements / 2;
		out->fields = xcalloc(n + 1, sizeof(char *));
		out->values = xcalloc(n + 1, sizeof(char *));
		for (size_t i = 0; i < n; i++) {
			redisReply *f = rep->element[2 * i], *v = rep->element[2 * i + 1];
			if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
				continue;
			out->fields[out->n] = xstrndup(f->str, f->len);
			out->values[out->n] = xstrndup(v->str, v->len);
			out->n++;
		}
		rc = 0;
	}
	freeReplyObject(rep);
	return rc;
}

void invocation_state_free(struct invocation_state *st)
{
	for (size_t i = 0; i < st->n; i++) {
		free(st->fields[i]);
		free(st->values[i]);
	}
	free(st->fields);
	free(st->values);
	memset(st, 0, sizeof *st);
}

struct marker invocation_state_get(const struct invocation_state *st, const char *field)
{
	for (size_t i = 0; i < st->n; i++)
		if (strcmp(st->fields[i], field) == 0)
			return invocation_marker_parse(st->values[i], strlen(st->values[i]));
	struct marker m = {MARK_ABSENT, 0, 0};
	return m;
}

const char *invocation_state_trace(const struct invocation_state *st)
{
	for (size_t i = 0; i < st->n; i++)
		if (strcmp(st->fields[i], INVOCATION_TRACE_FIELD) == 0)
			return st->values[i];
	return NULL;
}

/* KEYS[1] hash, KEYS[2] stream; ARGV[1] field, ARGV[2] expected ("" =
 * absent), ARGV[3] new value, ARGV[4] TTL seconds, ARGV[5] group, ARGV[6]
 * message id, ARGV[8] the trace context to keep ("" = none). The pending check closes a race: a reclaim can fetch a
 * message just before its owner's XACK + DEL land, and would then find the
 * markers gone and run every handler again. XACK precedes the DEL of the
 * hash, so a message still pending here still has its markers. */
/* ARGV[7] is the tolerance in microseconds: a running or next_attempt_at
 * marker whose deadline is later than Redis's own clock (TIME) plus that
 * is not yet due, whatever the caller's clock says, and the claim is
 * refused (0). A worker whose wall clock jumped forward (an NTP step, a
 * resumed VM) would otherwise find every running marker expired at once
 * and run those invocations a second time while they still run. Compared
 * in microseconds: nanosecond Unix times do not fit a Lua number. */
static const char cas_script[] =
	"if redis.replicate_commands then redis.replicate_commands() end\n"
	"if #redis.call('XPENDING', KEYS[2], ARGV[5], ARGV[6], ARGV[6], 1) == 0 then\n"
	"  return 2\n"
	"end\n"
	"local cur = redis.call('HGET', KEYS[1], ARGV[1])\n"
	"if cur == false then cur = '' end\n"
	"if cur ~= ARGV[2] then return 0 end\n"
	"local d = string.match(cur, '^running:(%d+)#') or string.match(cur, "
	"'^next_attempt_at:(%d+)#')\n"
	"if d and #d > 3 then\n"
	"  local t = redis.call('TIME')\n"
	"  local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"
	"  if tonumber(string.sub(d, 1, -4)) > now_us + tonumber(ARGV[7]) then return 0 end\n"
	"end\n"
	"redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])\n"
	"if ARGV[8] ~= '' then redis.call('HSETNX', KEYS[1], '" INVOCATION_TRACE_FIELD "', ARGV[8]) end\n"
	"redis.call('EXPIRE', KEYS[1], ARGV[4])\n"
	"return 1\n";

/* Both scripts go by SHA (EVALSHA, EVAL once on NOSCRIPT: redis.h). */
static struct redis_script cas_sha, dlq_sha;
static pthread_once_t scripts_once = PTHREAD_ONCE_INIT;
static void scripts_init(void);

int invocation_try_start(struct redis *r, const char *key, const char *field, const char *expected,
			 const char *next, const char *stream, const char *group,
			 const char *msg_id, const char *trace)
{
	pthread_once(&scripts_once, scripts_init);
	char ttl[24], tolerance[24];
	snprintf_(ttl, sizeof ttl, "%d", INVOCATION_TTL_SECONDS);
	snprintf_(tolerance, sizeof tolerance, "%ld", RUNNER_CLOCK_SKEW_MS * 1000L);
	const char *argv[] = {"2",  key, stream, field,	 expected ? expected : "",
			      next, ttl, group,	 msg_id, tolerance, trace ? trace : ""};
	redisReply *rep = redis_script_run(r, &cas_sha, (int)ARRAY_LEN(argv), argv, NULL);
	if (!rep)
		return -1;
	int rc = rep->type == REDIS_REPLY_INTEGER ? (int)rep->integer : -1;
	freeReplyObject(rep);
	return rc;
}

int invocation_set(struct redis *r, const char *key, const char *field, const char *value)
{
	return invocation_set_retry(r, key, field, value, NULL, 0, NULL);
}

char *invocation_retry_key(const char *stream, const char *group)
{
	char *s = keys_encode(stream), *g = keys_pct_encode(group);
	char *k = xasprintf("relay:retry:%s:%s", s, g);
	free(s);
	free(g);
	return k;
}

int invocation_set_retry(struct redis *r, const char *key, const char *field, const char *value,
			 const char *retry_key, int64_t due_ms, const char *msg_id)
{
	int n = 2;
	if (redis_append(r, "HSET %s %s %s", key, field, value) < 0 ||
	    redis_append(r, "EXPIRE %s %d", key, INVOCATION_TTL_SECONDS) < 0)
		return -1;
	if (retry_key) {
		char score[24];
		snprintf_(score, sizeof score, "%" PRId64, due_ms);
		if (redis_append(r, "ZADD %s %s %s", retry_key, score, msg_id) < 0)
			return -1;
		n++;
	}
	int rc = 0;
	for (int i = 0; i < n; i++) {
		redisReply *rep = redis_get_reply(r, -1);
		if (!rep)
			return -1;
		if (rep->type == REDIS_REPLY_ERROR)
			rc = -1;
		freeReplyObject(rep);
	}
	return rc;
}

int invocation_restore(struct redis *r, const char *key, const char *field, const char *prev)
{
	if (prev)
		return invocation_set(r, key, field, prev);
	redisReply *rep = redis_command(r, "HDEL %s %s", key, field);
	if (!rep)
		return -1;
	int rc = rep->type == REDIS_REPLY_ERROR ? -1 : 0;
	freeReplyObject(rep);
	return rc;
}

/* KEYS: stream, dlq, invocation hash; ARGV: group, id, then the entry's
 * field/value pairs. XACK precedes the DEL, as in the acker. */
static const char dlq_script[] =
	"if #redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1) == 0 then\n"
	"  return 0\n"
	"end\n"
	"redis.call('XADD', KEYS[2], '*', unpack(ARGV, 3))\n"
	"redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])\n"
	"redis.call('DEL', KEYS[3])\n"
	"return 1\n";

static void scripts_init(void)
{
	redis_script_init(&cas_sha, cas_script);
	redis_script_init(&dlq_sha, dlq_script);
}

int invocation_dead_letter(struct redis *r, const char *stream, const char *group, const char *dlq,
			   const char *msg_id, const char *const *entry, const size_t *lens,
			   size_t nentry, bool *written, char **err)
{
	char *key = invocation_key(stream, group, msg_id);
	pthread_once(&scripts_once, scripts_init);
	enum { HEAD = 6 };
	size_t argc = HEAD + nentry;
	const char **argv = xcalloc(argc, sizeof *argv);
	size_t *alens = xcalloc(argc, sizeof *alens);
	const char *head[HEAD] = {"3", stream, dlq, key, group, msg_id};
	for (size_t i = 0; i < HEAD; i++) {
		argv[i] = head[i];
		alens[i] = strlen(head[i]);
	}
	for (size_t i = 0; i < nentry; i++) {
		argv[HEAD + i] = entry[i];
		alens[HEAD + i] = lens[i];
	}
	int rc = -1;
	*written = false;
	redisReply *rep = redis_script_run(r, &dlq_sha, (int)argc, argv, alens);
	if (!rep) {
		*err = xstrdup(redis_errmsg(r));
	} else if (rep->type == REDIS_REPLY_INTEGER) {
		*written = rep->integer == 1;
		rc = 0;
	} else {
		*err = xstrdup(rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
	}
	if (rep)
		freeReplyObject(rep);
	free(argv);
	free(alens);
	free(key);
	return rc;
}
