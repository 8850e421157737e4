/*
 * The consumer against a real redis-server, in process, with the fixed
 * intervals shortened (the config struct's zero fields are the production
 * defaults). The executor here is scripted by handler name instead of
 * running containers: these cases assert the delivery protocol — what is in
 * Redis (PEL, invocation hashes, DLQ) and how often each handler ran. The
 * Docker-backed paths are covered by the engine and black-box tests.
 *
 * Handlers: ok.* succeed, fail.* fail, slow.* sleep 150 ms then succeed,
 * flaky.* fail until attempt 3, nap.* sleep 400 ms then succeed, mark.*
 * record their invocation marker as Redis holds it while they run, flush.*
 * run SCRIPT FLUSH (flush.fail.* then fail). Each call's start and end (wall clock) are
 * recorded, so timing checks are bounded by observed instants.
 *
 * "Acknowledged" is always the group's state (it_group_done): last-delivered-id
 * is the newest entry, lag 0 and nothing pending — pending 0 alone also holds
 * for a message nobody has read.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "engine/consumer.h"
#include "base/duration.h"
#include "model/function.h"
#include "engine/invocation.h"
#include "engine/liveness.h"
#include "engine/runner.h"
#include "itlib.h"
#include "base/log.h"
#include "engine/metrics.h"
#include "t.h"

static struct itredis R;
static char fdir[64];

struct calls {
	pthread_mutex_t lock;
	char *names[4096];
	int64_t started[4096], ended[4096]; /* wall clock, ns */
	int n;
	atomic_int running, max_running;
	atomic_int fn_running[16], fn_max[16];
};
static struct calls calls = {.lock = PTHREAD_MUTEX_INITIALIZER};
static char *mark_seen; /* what the last mark.* handler saw (calls.lock) */

static void calls_reset(void)
{
	pthread_mutex_lock(&calls.lock);
	for (int i = 0; i < calls.n; i++)
		free(calls.names[i]);
	calls.n = 0;
	pthread_mutex_unlock(&calls.lock);
	atomic_store(&calls.max_running, 0);
	for (int i = 0; i < 16; i++)
		atomic_store(&calls.fn_max[i], 0);
}

static int calls_count(const char *prefix)
{
	int k = 0;
	pthread_mutex_lock(&calls.lock);
	for (int i = 0; i < calls.n; i++)
		if (strncmp(calls.names[i], prefix, strlen(prefix)) == 0)
			k++;
	pthread_mutex_unlock(&calls.lock);
	return k;
}

/* Calls named exactly name ("fn/handler#attempt@id"): a prefix would also
 * count the ids that extend this one ("...-1" and "...-10"). */
static int calls_exact(const char *name)
{
	int k = 0;
	pthread_mutex_lock(&calls.lock);
	for (int i = 0; i < calls.n; i++)
		if (strcmp(calls.names[i], name) == 0)
			k++;
	pthread_mutex_unlock(&calls.lock);
	return k;
}

static void invoke(void *ctx, const struct invoke_request *req, struct invoke_result *res)
{
	(void)ctx;
	int slot = -1;
	pthread_mutex_lock(&calls.lock);
	if (calls.n < 4096) {
		slot = calls.n++;
		calls.names[slot] = xasprintf("%s/%s#%d@%s", req->fv->fn->name, req->handler,
					      req->attempt, req->message_id);
		calls.started[slot] = now_wall_ns();
		calls.ended[slot] = 0;
	}
	pthread_mutex_unlock(&calls.lock);
	int idx = req->fv->fn->name[0] - 'a';
	if (idx < 0 || idx >= 16)
		idx = 0;
	int now = atomic_fetch_add(&calls.running, 1) + 1;
	int fnow = atomic_fetch_add(&calls.fn_running[idx], 1) + 1;
	int m;
	while (now > (m = atomic_load(&calls.max_running)) &&
	       !atomic_compare_exchange_weak(&calls.max_running, &m, now))
		;
	while (fnow > (m = atomic_load(&calls.fn_max[idx])) &&
	       !atomic_compare_exchange_weak(&calls.fn_max[idx], &m, fnow))
		;
	res->exit_code = 0;
	res->outcome = INVOKE_OK;
	if (strncmp(req->handler, "fail.", 5) == 0) {
		res->outcome = INVOKE_FAILED;
		res->exit_code = 1;
		snprintf_(res->error, sizeof res->error,
			  "function %s handler %s exited with status 1", req->fv->fn->name,
			  req->handler);
	} else if (strncmp(req->handler, "slow.", 5) == 0) {
		usleep(150000);
	} else if (strncmp(req->handler, "nap.", 4) == 0) {
		usleep(400000);
	} else if (strncmp(req->handler, "mark.", 5) == 0) {
		struct redis *mr = it_conn(&R);
		char *key = invocation_key(req->fv->fn->name[0] == 'm' ? "s-mark" : "?", "g",
					   req->message_id);
		char *field = xasprintf("%s/%s", req->fv->fn->name, req->handler);
		redisReply *rep = mr ? redis_command(mr, "HGET %s %s", key, field) : NULL;
		pthread_mutex_lock(&calls.lock);
		free(mark_seen);
		mark_seen = rep && rep->type == REDIS_REPLY_STRING ? xstrdup(rep->str) : NULL;
		pthread_mutex_unlock(&calls.lock);
		if (rep)
			freeReplyObject(rep);
		redis_free(mr);
		free(key), free(field);
	} else if (strncmp(req->handler, "flush.", 6) == 0) {
		struct redis *fr = it_conn(&R);
		redisReply *rep = fr ? redis_command(fr, "SCRIPT FLUSH") : NULL;
		if (rep)
			freeReplyObject(rep);
		redis_free(fr);
		if (strncmp(req->handler, "flush.fail", 10) == 0) {
			res->outcome = INVOKE_FAILED;
			res->exit_code = 1;
			snprintf_(res->error, sizeof res->error, "flushed and failed");
		}
	} else if (strncmp(req->handler, "flaky.", 6) == 0) {
		if (req->attempt < 3) {
			res->outcome = INVOKE_FAILED;
			res->exit_code = 2;
			snprintf_(res->error, sizeof res->error, "flaky attempt %d", req->attempt);
		}
	}
	atomic_fetch_sub(&calls.fn_running[idx], 1);
	atomic_fetch_sub(&calls.running, 1);
	if (slot >= 0) {
		pthread_mutex_lock(&calls.lock);
		calls.ended[slot] = now_wall_ns();
		pthread_mutex_unlock(&calls.lock);
	}
}

/* The first call whose name starts with prefix: its start and end. */
static bool call_times(const char *prefix, int64_t *started, int64_t *ended)
{
	bool found = false;
	pthread_mutex_lock(&calls.lock);
	for (int i = 0; i < calls.n && !found; i++)
		if (strncmp(calls.names[i], prefix, strlen(prefix)) == 0) {
			*started = calls.started[i];
			*ended = calls.ended[i];
			found = true;
		}
	pthread_mutex_unlock(&calls.lock);
	return found;
}

static void write_fn(const char *name, const char *tpl)
{
	char *d = xasprintf("%s/%s", fdir, name);
	mkdir(d, 0755);
	char *p = xasprintf("%s/template.yaml", d);
	FILE *f = fopen(p, "w");
	fputs(tpl, f);
	fclose(f);
	free(p);
	free(d);
}

static struct registry *load_registry(void)
{
	struct registry *reg = registry_new();
	struct function_scan scan;
	char *err = NULL;
	if (function_scan_dir(fdir, &scan, &err) < 0)
		return reg;
	struct fn_version **fvs = xcalloc(scan.n + 1, sizeof *fvs);
	size_t n = 0;
	for (size_t i = 0; i < scan.n; i++) {
		if (scan.v[i].fn) {
			fvs[n++] = registry_fn_version_new(scan.v[i].fn, NULL, NULL);
			scan.v[i].fn = NULL;
		} else if (scan.v[i].status == FUNCTION_INVALID) {
			printf("  invalid fixture %s: %s\n", scan.v[i].name, scan.v[i].errors.v[0]);
		}
	}
	function_scan_free(&scan);
	registry_publish(reg, fvs, n);
	return reg;
}

/* first_backoff_ns: the delay after a failed attempt 1 (later ones: 300 ms). */
static struct consumer_config base_cfg(struct registry *reg, const char *stream, int buffered,
				       int conc, int64_t first_backoff_ns)
{
	struct consumer_config cfg = {
		.uri = &R.uri,
		.stream = stream,
		.group = "g",
		.consumer = "worker-1",
		.max_buffered = buffered,
		.max_concurrency = conc,
		.reclaim_interval_ns = 200 * NS_PER_MS,
		.min_pending_idle_ns = 300 * NS_PER_MS,
		.backoff_ns = {first_backoff_ns, 300 * NS_PER_MS, 300 * NS_PER_MS, 300 * NS_PER_MS},
		.block_ms = 100,
		.sample_interval_ns = 100 * NS_PER_MS,
		.registry = reg,
		.invoke = invoke,
	};
	return cfg;
}

static struct consumer *start_cfg(const struct consumer_config *cfg)
{
	struct redis *r = it_conn(&R);
	it_ensure_group(r, cfg->stream, "g");
	redis_free(r);
	return consumer_start(cfg);
}

static struct consumer *start_backoff(struct registry *reg, const char *stream, int buffered,
				      int conc, int64_t first_backoff_ns)
{
	struct consumer_config cfg = base_cfg(reg, stream, buffered, conc, first_backoff_ns);
	return start_cfg(&cfg);
}

static struct consumer *start(struct registry *reg, const char *stream, int buffered, int conc)
{
	return start_backoff(reg, stream, buffered, conc, 300 * NS_PER_MS);
}

static char *xadd(struct redis *r, const char *stream, const char *event)
{
	redisReply *rep = redis_command(r, "XADD %s * event %s", stream, event);
	char *id = rep && rep->type == REDIS_REPLY_STRING ? xstrdup(rep->str) : NULL;
	if (rep)
		freeReplyObject(rep);
	return id;
}

static long long exists(struct redis *r, const char *key)
{
	redisReply *rep = redis_command(r, "EXISTS %s", key);
	long long n = rep && rep->type == REDIS_REPLY_INTEGER ? rep->integer : -999;
	if (rep)
		freeReplyObject(rep);
	return n;
}

static char *hget(struct redis *r, const char *key, const char *field)
{
	redisReply *rep = redis_command(r, "HGET %s %s", key, field);
	char *v = rep && rep->type == REDIS_REPLY_STRING ? xstrdup(rep->str) : NULL;
	if (rep)
		freeReplyObject(rep);
	return v;
}

static bool wait_until(int ms, bool (*cond)(void *), void *arg)
{
	for (int i = 0; i < ms / 20; i++) {
		if (cond(arg))
			return true;
		usleep(20000);
	}
	return cond(arg);
}

struct pend_arg {
	struct redis *r;
	const char *stream;
	long long want;
};
static bool pend_is(void *a)
{
	struct pend_arg *p = a;
	return it_pending(p->r, p->stream) == p->want;
}
struct len_arg {
	struct redis *r;
	const char *key;
	long long want;
};
static bool len_is(void *a)
{
	struct len_arg *p = a;
	return it_xlen(p->r, p->key) == p->want;
}
struct count_arg {
	const char *prefix;
	int want;
};
static bool count_is(void *a)
{
	struct count_arg *p = a;
	return calls_count(p->prefix) >= p->want;
}

/* Acknowledged: the group read up to id (the newest entry) and nothing is
 * pending, by XINFO GROUPS and XPENDING both. */
struct done_arg {
	struct redis *r;
	const char *stream;
	const char *id;
};
static bool done_is(void *a)
{
	struct done_arg *p = a;
	return it_group_done(p->r, p->stream, "g", p->id) && it_pending(p->r, p->stream) == 0;
}

/* The group has read the stream up to id (its last-delivered-id). */
struct read_arg {
	struct redis *r;
	const char *stream;
	const char *id;
};
static bool read_up_to(void *a)
{
	struct read_arg *p = a;
	return strcmp(it_group_info(p->r, p->stream, "g").last_id, p->id) == 0;
}

/* How many times the group delivered id (XPENDING's delivery counter; each
 * reclaim adds one); -1 when id is not pending. */
static long long deliveries(struct redis *r, const char *stream, const char *id)
{
	redisReply *rep = redis_command(r, "XPENDING %s g %s %s 1", stream, id, id);
	long long n = -1;
	if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 1 &&
	    rep->element[0]->type == REDIS_REPLY_ARRAY && rep->element[0]->elements == 4 &&
	    rep->element[0]->element[3]->type == REDIS_REPLY_INTEGER)
		n = rep->element[0]->element[3]->integer;
	if (rep)
		freeReplyObject(rep);
	return n;
}
struct deliv_arg {
	struct redis *r;
	const char *stream;
	const char *id;
	long long want;
};
static bool deliveries_at_least(void *a)
{
	struct deliv_arg *p = a;
	return deliveries(p->r, p->stream, p->id) >= p->want;
}

/* A backoff marker: field of key holds "next_attempt_at:<deadline ns>#<attempt>"
 * for this attempt; deadline_ns is filled in. */
struct marker_arg {
	struct redis *r;
	const char *key, *field;
	int attempt;
	long long deadline_ns;
};
static bool backoff_marker_is(void *a)
{
	struct marker_arg *p = a;
	char *v = hget(p->r, p->key, p->field);
	bool ok = false;
	if (v && strncmp(v, "next_attempt_at:", 16) == 0) {
		char *end = NULL, *end2 = NULL;
		long long d = strtoll(v + 16, &end, 10);
		if (end && *end == '#' && strtol(end + 1, &end2, 10) == p->attempt &&
		    *end2 == '\0') {
			p->deadline_ns = d;
			ok = true;
		}
	}
	free(v);
	return ok;
}

#define EV "{\"event_id\":\"e1\",\"event_name\":\"INSERT\",\"kind\":\"%s\"}"

TEST(ack_only_after_all_matches_succeed)
{
	calls_reset();
	struct registry *reg = load_registry();
	struct consumer *c = start(reg, "s1", 16, 4);
	struct redis *r = it_conn(&R);
	char *ev = xasprintf(EV, "good");
	char *id = xadd(r, "s1", ev);
	struct done_arg da = {r, "s1", id};
	struct count_arg ca = {"a-first/ok.one#1@", 1};
	REQUIRE(wait_until(10000, count_is, &ca));
	CHECK(wait_until(10000, done_is, &da));
	/* both functions ran, in name order, once each */
	CHECK_INT(calls_count("a-first/ok.one#1@"), 1);
	CHECK_INT(calls_count("b-second/ok.two#1@"), 1);
	pthread_mutex_lock(&calls.lock);
	CHECK(calls.n == 2 && strncmp(calls.names[0], "a-first/", 8) == 0);
	pthread_mutex_unlock(&calls.lock);
	/* the invocation-state key is cleared on ACK */
	char *key = invocation_key("s1", "g", id);
	redisReply *rep = redis_command(r, "EXISTS %s", key);
	CHECK(rep && rep->integer == 0);
	freeReplyObject(rep);
	/* an event that matches nothing is acknowledged too */
	free(id);
	id = xadd(r, "s1", "{\"kind\":\"nothing\"}");
	REQUIRE(id);
	da.id = id;
	CHECK(wait_until(10000, done_is, &da));
	CHECK_INT(calls.n, 2);
	consumer_stop(c);
	consumer_free(c);
	registry_free(reg);
	redis_free(r);
	free(key);
	free(id);
	free(ev);
}

TEST(failure_leaves_pending_and_stops_later_rules_then_retries_and_dlq)
{
	calls_reset();
	struct registry *reg = load_registry();
	/* 1 s after attempt 1, 300 ms after attempt 2 */
	struct consumer *c = start_backoff(reg, "s2", 16, 4, NS_PER_SEC);
	struct redis *r = it_conn(&R);
	char *ev = xasprintf(EV, "bad");
	char *id = xadd(r, "s2", ev);
	char *key = invocation_key("s2", "g", id);
	/* c-fail: ok.before, fail.mid (retries 2), ok.after */
	struct count_arg ca = {"c-fail/fail.mid#1@", 1};
	REQUIRE(wait_until(10000, count_is, &ca));
	/* Attempt 1 failed: a next_attempt_at marker one backoff after its end,
	 * the message still pending, the later rule not run. */
	struct marker_arg m1 = {r, key, "c-fail/fail.mid", 1, 0};
	REQUIRE(wait_until(5000, backoff_marker_is, &m1));
	int64_t seen = now_wall_ns();
	CHECK_INT(it_pending(r, "s2"), 1);
	CHECK_INT(calls_count("c-fail/ok.after"), 0);
	int64_t s1, e1, s2, e2, s3, e3;
	REQUIRE(call_times("c-fail/fail.mid#1@", &s1, &e1));
	CHECK(e1 > 0 && m1.deadline_ns >= e1 + NS_PER_SEC);
	CHECK(m1.deadline_ns <= seen + NS_PER_SEC);
	char *mk = hget(r, key, "c-fail/ok.before");
	CHECK_STR(mk, "ok");
	free(mk);
	/* exactly 3 attempts, then the DLQ with every field, then ACK */
	struct len_arg la = {r, "relay:s2:dlq", 1};
	REQUIRE(wait_until(15000, len_is, &la));
	struct done_arg da = {r, "s2", id};
	CHECK(wait_until(10000, done_is, &da));
	CHECK_INT(calls_count("c-fail/fail.mid#"), 3);
	/* no retry before its backoff had passed */
	REQUIRE(call_times("c-fail/fail.mid#2@", &s2, &e2));
	REQUIRE(call_times("c-fail/fail.mid#3@", &s3, &e3));
	CHECK(s2 >= m1.deadline_ns);
	CHECK(s3 >= e2 + 300 * NS_PER_MS);
	CHECK_INT(calls_count("c-fail/fail.mid#3@"), 1);
	CHECK_INT(calls_count("c-fail/ok.before#"), 1); /* never re-run */
	CHECK_INT(calls_count("c-fail/ok.after"), 0);
	redisReply *rep = redis_command(r, "XRANGE relay:s2:dlq - +");
	REQUIRE(rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 1);
	redisReply *f = rep->element[0]->element[1];
	REQUIRE(f->elements == 22);
	static const char *const names[] = {
		"original_stream", "original_id", "group",     "consumer", "event",	  "reason",
		"attempts",	   "timestamp",	  "function",  "handler",  "traceparent"};
	for (size_t i = 0; i < 11; i++)
		CHECK_STR(f->element[2 * i]->str, names[i]);
	/* The trace the deliveries were in (docs/operations.md, "Tracing"). */
	CHECK(strlen(f->element[21]->str) == 55 && strncmp(f->element[21]->str, "00-", 3) == 0);
	CHECK_STR(f->element[1]->str, "s2");
	CHECK_STR(f->element[3]->str, id);
	CHECK_STR(f->element[5]->str, "g");
	CHECK_STR(f->element[7]->str, "worker-1");
	CHECK_STR(f->element[9]->str, ev);
	CHECK(strstr(f->element[11]->str, "c-fail/fail.mid exhausted after 3 attempt(s)") != NULL);
	CHECK(strstr(f->element[11]->str, "exited with status 1") != NULL);
	CHECK_STR(f->element[13]->str, "3");
	CHECK(strlen(f->element[15]->str) == 20 && f->element[15]->str[19] == 'Z');
	CHECK_STR(f->element[17]->str, "c-fail");
	CHECK_STR(f->element[19]->str, "fail.mid");
	freeReplyObject(rep);
	rep = redis_command(r, "EXISTS %s", key);
	CHECK(rep && rep->integer == 0);
	freeReplyObject(rep);
	consumer_stop(c);
	consumer_free(c);
	registry_free(reg);
	redis_free(r);
	free(key);
	free(id);
	free(ev);
}

TEST(retries_zero_goes_to_dlq_on_first_failure)
{
	calls_reset();
	struct registry *reg = load_registry();
	struct consumer *c = start(reg, "s3", 16, 4);
	struct redis *r = it_conn(&R);
	char *ev = xasprintf(EV, "once");
	char *id = xadd(r, "s3", ev);
	struct len_arg la = {r, "relay:s3:dlq", 1};
	REQUIRE(wait_until(10000, len_is, &la));
	struct done_arg da = {r, "s3", id};
	CHECK(wait_until(10000, done_is, &da));
	CHECK_INT(calls_count("d-once/fail.zero#"), 1);
	consumer_stop(c);
	consumer_free(c);
	registry_free(reg);
	redis_free(r);
	free(id);
	free(ev);
}

TEST(redelivery_skips_ok_and_respects_markers)
{
	calls_reset();
	struct registry *reg = load_registry();
	struct redis *r = it_conn(&R);
	REQUIRE(it_ensure_group(r, "s4", "g") == 0);
	char *ev = xasprintf(EV, "good");
	char *id1 = xadd(r, "s4", ev), *id2 = xadd(r, "s4", ev), *id3 = xadd(r, "s4", ev);
	char *k1 = invocation_key("s4", "g", id1), *k2 = invocation_key("s4", "g", id2),
	     *k3 = invocation_key("s4", "g", id3);
	int64_t far = now_wall_ns() + 3600 * NS_PER_SEC;
	char *running = xasprintf("running:%lld#1", (long long)far);
	char *backoff = xasprintf("next_attempt_at:%lld#2", (long long)far);
	/* 1: a-first already ok → only b-second runs. 2: a live running marker
	 * on a-first → nothing runs, stays pending. 3: backing off → same. */
	redisReply *rep = redis_command(r, "HSET %s a-first/ok.one ok", k1);
	freeReplyObject(rep);
	rep = redis_command(r, "HSET %s a-first/ok.one %s", k2, running);
	freeReplyObject(rep);
	rep = redis_command(r, "HSET %s a-first/ok.one %s", k3, backoff);
	freeReplyObject(rep);
	struct consumer *c = start(reg, "s4", 16, 4);
	struct count_arg ca = {"b-second/ok.two#1@", 1};
	REQUIRE(wait_until(10000, count_is, &ca));
	/* Read once, then reclaimed at least three times: every copy was
	 * looked at and left alone. */
	struct deliv_arg d2 = {r, "s4", id2, 4}, d3 = {r, "s4", id3, 4};
	REQUIRE(wait_until(10000, deliveries_at_least, &d2));
	REQUIRE(wait_until(10000, deliveries_at_least, &d3));
	CHECK_INT(calls_count("a-first/"), 0);
	CHECK_INT(calls_count("b-second/"), 1);
	CHECK_INT(it_pending(r, "s4"), 2);
	/* an expired running marker (crashed worker) is eligible: attempt 2 */
	char *expired = xasprintf("running:%lld#1", (long long)(now_wall_ns() - NS_PER_SEC));
	rep = redis_command(r, "HSET %s a-first/ok.one %s", k2, expired);
	freeReplyObject(rep);
	struct count_arg cb = {"a-first/ok.one#2@", 1};
	CHECK(wait_until(10000, count_is, &cb));
	struct pend_arg pa = {r, "s4", 1};
	CHECK(wait_until(10000, pend_is, &pa));
	consumer_stop(c);
	consumer_free(c);
	registry_free(reg);
	redis_free(r);
	free(k1), free(k2), free(k3), free(id1), free(id2), free(id3);
	free(running), free(backoff), free(expired), free(ev);
}

/* The whole log written while fn runs: reads the capture file. */
static char *read_all(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return xstrdup("");
	struct buf b;
	buf_init(&b, 1 << 24);
	char chunk[4096];
	size_t n;
	while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
		buf_append(&b, chunk, n);
	fclose(f);
	return buf_steal(&b);
}

/* The lines of all that name message id ("<id>"), in order. */
static char *lines_for(const char *all, const char *id)
{
	char *q = xasprintf("\"%s\"", id);
	struct buf b;
	buf_init(&b, 1 << 24);
	for (const char *p = all; *p;) {
		const char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) + 1 : strlen(p);
		char *line = xstrndup(p, len);
		if (strstr(line, q))
			buf_append(&b, line, len);
		free(line);
		p += len;
	}
	free(q);
	return buf_steal(&b);
}

struct log_arg {
	const char *path, *want;
};

static bool log_has(void *a)
{
	struct log_arg *p = a;
	char *all = read_all(p->path);
	bool ok = strstr(all, p->want) != NULL;
	free(all);
	return ok;
}

/*
 * The spec's Try-it family of plain lines, at LOG_LEVEL=ERROR (they are
 * written whatever the level): one "matched" line per target considered,
 * then what became of it, each naming the message. The per-invocation
 * slog records are DEBUG, so ERROR shows nothing else about them.
 */
TEST(outcome_lines_name_the_message_whatever_the_level)
{
	calls_reset();
	char path[] = "/tmp/relay-consumer-log-XXXXXX";
	int fd = mkstemp(path);
	REQUIRE(fd >= 0);
	log_set_fd(fd);
	log_set_level(LOG_ERROR);
	struct registry *reg = load_registry();
	struct redis *r = it_conn(&R);
	REQUIRE(it_ensure_group(r, "s-lines", "g") == 0);
	char *good = xasprintf(EV, "good"), *once = xasprintf(EV, "once");
	char *id1 = xadd(r, "s-lines", good), *id2 = xadd(r, "s-lines", good),
	     *id3 = xadd(r, "s-lines", good), *id4 = xadd(r, "s-lines", once);
	char *k1 = invocation_key("s-lines", "g", id1), *k2 = invocation_key("s-lines", "g", id2),
	     *k3 = invocation_key("s-lines", "g", id3);
	/* 1: a-first already ok. 2: a-first running for another hour.
	 * 3: a-first exhausted. 4: d-once fails (retries 0). */
	/* "eligible in" rounds up to whole seconds: 1h0m25s right now, 1h0m2Xs
	 * for the first few seconds. */
	int64_t far = now_wall_ns() + 3625 * NS_PER_SEC;
	redisReply *rep = redis_command(r, "HSET %s a-first/ok.one ok", k1);
	freeReplyObject(rep);
	rep = redis_command(r, "HSET %s a-first/ok.one running:%lld#1", k2, (long long)far);
	freeReplyObject(rep);
	rep = redis_command(r, "HSET %s a-first/ok.one exhausted:1", k3);
	freeReplyObject(rep);
	struct consumer *c = start(reg, "s-lines", 16, 4);
	struct pend_arg p1 = {r, "s-lines", 1}; /* only id2 */
	struct len_arg la = {r, "relay:s-lines:dlq", 2};
	REQUIRE(wait_until(10000, len_is, &la));
	char *skip2 = xasprintf("relay: function \"a-first\" handler \"ok.one\" not eligible for "
				"event \"%s\" (running or waiting for retry; eligible in 1h0m2",
				id2);
	struct log_arg l2 = {path, skip2};
	CHECK(wait_until(10000, log_has, &l2));
	CHECK(wait_until(10000, pend_is, &p1));
	consumer_stop(c);
	consumer_free(c);
	log_set_fd(2);
	log_set_level(LOG_INFO);
	char *all = read_all(path);
	char *want1 =
		xasprintf("relay: function \"a-first\" rule \"ok.one\" matched event \"%s\"\n"
			  "relay: function \"a-first\" handler \"ok.one\" already succeeded for "
			  "event \"%s\"; skipping\n"
			  "relay: function \"b-second\" rule \"ok.two\" matched event \"%s\"\n"
			  "relay: function \"b-second\" handler \"ok.two\" executed for event "
			  "\"%s\"\n",
			  id1, id1, id1, id1);
	char *want2 = xasprintf("relay: function \"a-first\" rule \"ok.one\" matched event "
				"\"%s\"\n%s",
				id2, skip2);
	char *want3 =
		xasprintf("relay: function \"a-first\" rule \"ok.one\" matched event \"%s\"\n"
			  "relay: function \"a-first\" handler \"ok.one\" exhausted for event "
			  "\"%s\"; skipping\n",
			  id3, id3);
	char *want4 =
		xasprintf("relay: function \"d-once\" rule \"fail.zero\" matched event \"%s\"\n"
			  "relay: function \"d-once\" handler \"fail.zero\" execution failed for "
			  "event \"%s\": function d-once handler fail.zero exited with status 1\n",
			  id4, id4);
	/* Messages run concurrently: their lines interleave, so each
	 * message's lines are compared on their own (the forwarded output,
	 * which names no message, is not part of this scripted executor). */
	char *got1 = lines_for(all, id1), *got2 = lines_for(all, id2), *got3 = lines_for(all, id3),
	     *got4 = lines_for(all, id4);
	CHECK_STR(got1, want1);
	CHECK(strncmp(got2, want2, strlen(want2)) == 0);
	CHECK_STR(got3, want3);
	CHECK_STR(got4, want4);
	/* Nothing after an exhausted or ineligible one, nothing twice. */
	char *b3 = xasprintf("rule \"ok.two\" matched event \"%s\"", id3);
	CHECK(strstr(all, b3) == NULL);
	char *b2 = xasprintf("rule \"ok.two\" matched event \"%s\"", id2);
	CHECK(strstr(all, b2) == NULL);
	/* At ERROR only the DLQ records besides them: no per-invocation slog. */
	CHECK(strstr(all, "msg=\"rule matched\"") == NULL);
	CHECK(strstr(all, "msg=\"handler executed\"") == NULL);
	CHECK(strstr(all, "level=INFO") == NULL);
	if (t_failed_)
		printf("  log:\n%s\n", all);
	unlink(path);
	close(fd);
	registry_free(reg);
	redis_free(r);
	free(all), free(want1), free(want2), free(want3), free(want4), free(skip2), free(b3);
	free(got1), free(got2), free(got3), free(got4), free(b2);
	free(k1), free(k2), free(k3), free(id1), free(id2), free(id3), free(id4);
	free(good), free(once);
}

TEST(malformed_events_go_to_dlq_without_running_anything)
{
	calls_reset();
	struct registry *reg = load_registry();
	struct consumer *c = start(reg, "s5", 16, 4);
	struct redis *r = it_conn(&R);
	redisReply *rep;
	rep = redis_command(r, "XADD s5 * other x");
	freeReplyObject(rep);
	rep = redis_command(r, "XADD s5 * event %b", "\xff\xfe", (size_t)2);
	freeReplyObject(rep);
	rep = redis_command(r, "XADD s5 * event %s", "{not json");
	freeReplyObject(rep);
	rep = redis_command(r, "XADD s5 * event %s", "[1,2]");
	REQUIRE(rep && rep->type == REDIS_REPLY_STRING);
	char *last = xstrdup(rep->str);
	freeReplyObject(rep);
	struct len_arg la = {r, "relay:s5:dlq", 4};
	REQUIRE(wait_until(10000, len_is, &la));
	struct done_arg da = {r, "s5", last};
	CHECK(wait_until(10000, done_is, &da));
	free(last);
	CHECK_INT(calls.n, 0);
	rep = redis_command(r, "XRANGE relay:s5:dlq - +");
	REQUIRE(rep && rep->elements == 4);
	/* Workers run in parallel: the DLQ order is not the stream order. */
	static const char *const want[] = {"(missing)", "(not_text)", "(invalid_json)",
					   "(not_object)"};
	for (size_t w = 0; w < 4; w++) {
		int found = 0;
		for (size_t i = 0; i < 4; i++) {
			redisReply *f = rep->element[i]->element[1];
			if (strstr(f->element[11]->str, want[w]))
				found++;
		}
		if (found != 1)
			T_FAIL_("DLQ entries with reason %s: %d, want 1", want[w], found);
	}
	for (size_t i = 0; i < 4; i++)
		CHECK_STR(rep->element[i]->element[1]->element[13]->str, "0");
	freeReplyObject(rep);
	consumer_stop(c);
	consumer_free(c);
	registry_free(reg);
	redis_free(r);
}

TEST(dlq_write_failure_keeps_message_pending_until_fixed)
{
	calls_reset();
	struct registry *reg = load_registry();
	struct redis *r = it_conn(&R);
	redisReply *rep = redis_command(r, "SET relay:s6:dlq not-a-stream");
	freeReplyObject(rep);
	struct consumer *c = start(reg, "s6", 16, 4);
	char *ev = xasprintf(EV, "once");
	char *id = xadd(r, "s6", ev);
	struct count_arg ca = {"d-once/fail.zero#1@", 1};
	REQUIRE(wait_until(10000, count_is, &ca));
	/* The DLQ write failed on the first delivery and on two reclaims. */
	struct deliv_arg dv = {r, "s6", id, 3};
	REQUIRE(wait_until(10000, deliveries_at_least, &dv));
	CHECK_INT(it_pending(r, "s6"), 1);
	CHECK_INT(exists(r, "relay:s6:dlq"), 1); /* still the string */
	rep = redis_command(r, "DEL relay:s6:dlq");
	freeReplyObject(rep);
	struct len_arg la = {r, "relay:s6:dlq", 1};
	CHECK(wait_until(10000, len_is, &la));
	struct done_arg da = {r, "s6", id};
	CHECK(wait_until(10000, done_is, &da));
	CHECK_INT(calls_count("d-once/fail.zero#"), 1); /* the handler is not re-run */
	consumer_stop(c);
	consumer_free(c);
	registry_free(reg);
	redis_free(r);
	free(id);
	free(ev);
}

struct max_arg {
	struct consumer *c;
	int max;
	atomic_int stop;
};
static void *watch_buffer(void *a)
{
	struct max_arg *m = a;
	while (!atomic_load(&m->stop)) {
		int b = consumer_buffered(m->c);
		if (b > m->max)
			m->max = b;
		usleep(2000);
	}
	return NULL;
}

/* Per-function limits 1 + 2 under a global 4: the per-function ones bind. */
TEST(backpressure_bounds_buffer_and_per_function_concurrency)
{
	calls_reset();
	struct registry *reg = load_registry();
	struct redis *r = it_conn(&R);
	REQUIRE(it_ensure_group(r, "s7", "g") == 0);
	char *last = NULL;
	for (int i = 0; i < 200; i++) {
		free(last);
		last = xadd(r, "s7", i % 2 ? "{\"kind\":\"slow\"}" : "{\"kind\":\"slowb\"}");
	}
	REQUIRE(last);
	struct consumer *c = start(reg, "s7", 6, 4);
	struct max_arg ma = {c, 0, 0};
	pthread_t t;
	pthread_create(&t, NULL, watch_buffer, &ma);
	long long max_pel = 0;
	for (int i = 0; i < 400; i++) {
		long long p = it_pending(r, "s7");
		if (p > max_pel)
			max_pel = p;
		if (calls_count("") >= 200)
			break;
		usleep(20000);
	}
	struct count_arg ca = {"", 200};
	CHECK(wait_until(20000, count_is, &ca));
	atomic_store(&ma.stop, 1);
	pthread_join(t, NULL);
	struct done_arg da = {r, "s7", last};
	CHECK(wait_until(10000, done_is, &da));
	CHECK(ma.max <= 6);
	CHECK(max_pel <= 6);
	CHECK(max_pel >= 4);
	/* e-slow has concurrency 1, f-slowb concurrency 2: never more than 3
	 * at once although the global limit is 4 */
	CHECK_INT(atomic_load(&calls.fn_max['e' - 'a']), 1);
	CHECK(atomic_load(&calls.fn_max['f' - 'a']) <= 2);
	CHECK(atomic_load(&calls.max_running) <= 3);
	CHECK(atomic_load(&calls.max_running) >= 2);
	CHECK_INT(calls_count("e-slow/"), 100);
	CHECK_INT(calls_count("f-slowb/"), 100);
	consumer_stop(c);
	consumer_free(c);
	registry_free(reg);
	redis_free(r);
	free(last);
}

/* Per-function limits 8 and 8 above a global 3, a buffer of 8: only the
 * global limit can hold the peak at 3, and the peak reaches it. */
TEST(global_concurrency_bound_binds_above_per_function_limits)
{
	calls_reset();
	struct registry *reg = load_registry();
	struct redis *r = it_conn(&R);
	REQUIRE(it_ensure_group(r, "s11", "g") == 0);
	char *last = NULL;
	for (int i = 0; i < 60; i++) {
		free(last);
		last = xadd(r, "s11", i % 2 ? "{\"kind\":\"wide\"}" : "{\"kind\":\"wideb\"}");
	}
	REQUIRE(last);
	struct consumer *c = start(reg, "s11", 8, 3);
	struct count_arg ca = {"", 60};
	CHECK(wait_until(20000, count_is, &ca));
	struct done_arg da = {r, "s11", last};
	CHECK(wait_until(10000, done_is, &da));
	CHECK_INT(atomic_load(&calls.max_running), 3);
	CHECK(atomic_load(&calls.fn_max['g' - 'a']) <= 3);
	CHECK(atomic_load(&calls.fn_max['h' - 'a']) <= 3);
	CHECK_INT(calls_count("g-wide/slow.w#1@"), 30);
	CHECK_INT(calls_count("h-wideb/slow.w#1@"), 30);
	consumer_stop(c);
	consumer_free(c);
	registry_free(reg);
	redis_free(r);
	free(last);
}

struct gauge_arg {
	enum metric_gauge g;
	double min;
};
static bool gauge_at_least(void *a)
{
	struct gauge_arg *p = a;
	return metrics_gauge_value(p->g) >= p->min;
}

TEST(backlog_gauges_sampled_from_xpending)
{
	calls_reset();
	struct registry *reg = load_registry();
	struct redis *r = it_conn(&R);
	REQUIRE(it_ensure_group(r, "s8", "g") == 0);
	/* An entry 30 s old whose invocation is "running" elsewhere: it stays
	 * pending, and the sampler must report it. */
	long long old_ms = (long long)(now_wall_ns() / NS_PER_MS) - 30000;
	redisReply *rep =
		redis_command(r, "XADD s8 %lld-0 event %s", old_ms, "{\"kind\":\"good\"}");
	REQUIRE(rep && rep->type == REDIS_REPLY_STRING);
	char *key = invocation_key("s8", "g", rep->str);
	freeReplyObject(rep);
	char *running = xasprintf("running:%lld#1", (long long)(now_wall_ns() + 3600 * NS_PER_SEC));
	rep = redis_command(r, "HSET %s a-first/ok.one %s", key, running);
	freeReplyObject(rep);
	struct consumer *c = start(reg, "s8", 16, 4);
	/* The two gauges are set one after the other: wait for the second. */
	struct gauge_arg ga = {METRIC_PENDING_OLDEST_AGE, 29.0};
	CHECK(wait_until(10000, gauge_at_least, &ga));
	CHECK(metrics_gauge_value(METRIC_PENDING_ENTRIES) == 1);
	CHECK(metrics_gauge_value(METRIC_PENDING_OLDEST_AGE) >= 29.0);
	CHECK(metrics_gauge_value(METRIC_PENDING_OLDEST_AGE) < 60.0);
	consumer_stop(c);
	consumer_free(c);
	registry_free(reg);
	redis_free(r);
	free(key);
	free(running);
}

/* TryStart claims only for a message still pending in the group: a copy
 * fetched by a reclaim just before the owner's XACK + DEL must not run the
 * handlers again once the markers are gone. */
TEST(try_start_refuses_an_acknowledged_message)
{
	struct redis *r = it_conn(&R);
	REQUIRE(it_ensure_group(r, "s9", "g") == 0);
	char *id = xadd(r, "s9", "{\"kind\":\"none\"}");
	REQUIRE(id);
	redisReply *rep = redis_command(r, "XREADGROUP GROUP g w COUNT 1 STREAMS s9 >");
	freeReplyObject(rep);
	char *key = invocation_key("s9", "g", id);
	CHECK_INT(invocation_try_start(r, key, "f/h.a", NULL, "running:1#1", "s9", "g", id, NULL), 1);
	CHECK_INT(invocation_try_start(r, key, "f/h.a", NULL, "running:2#1", "s9", "g", id, NULL), 0);
	rep = redis_command(r, "XACK s9 g %s", id);
	freeReplyObject(rep);
	rep = redis_command(r, "DEL %s", key);
	freeReplyObject(rep);
	CHECK_INT(invocation_try_start(r, key, "f/h.a", NULL, "running:3#1", "s9", "g", id, NULL), 2);
	rep = redis_command(r, "EXISTS %s", key);
	CHECK(rep && rep->type == REDIS_REPLY_INTEGER && rep->integer == 0);
	freeReplyObject(rep);
	redis_free(r);
	free(key);
	free(id);
}

/* The DLQ write and the ACK are one script that runs only while the
 * message is pending: a second delivery of the same message never writes
 * a second entry, and a failed write acknowledges nothing. */
TEST(dead_letter_only_while_pending)
{
	struct redis *r = it_conn(&R);
	char *err = NULL;
	bool written = true;
	REQUIRE(it_ensure_group(r, "s10", "g") == 0);
	char *id = xadd(r, "s10", "{\"kind\":\"none\"}");
	REQUIRE(id);
	redisReply *rep = redis_command(r, "XREADGROUP GROUP g w COUNT 1 STREAMS s10 >");
	freeReplyObject(rep);
	char *key = invocation_key("s10", "g", id);
	rep = redis_command(r, "HSET %s f/h.a exhausted:1", key);
	freeReplyObject(rep);
	const char *entry[] = {"event", "a\0b", "reason", "r"};
	const size_t lens[] = {5, 3, 6, 1};
	rep = redis_command(r, "SET s10:dlq not-a-stream");
	freeReplyObject(rep);
	CHECK_INT(invocation_dead_letter(r, "s10", "g", "s10:dlq", id, entry, lens, 4, &written,
					 &err),
		  -1);
	CHECK(err && strstr(err, "WRONGTYPE") != NULL);
	free(err);
	err = NULL;
	CHECK_INT(it_pending(r, "s10"), 1);
	rep = redis_command(r, "DEL s10:dlq");
	freeReplyObject(rep);
	CHECK_INT(invocation_dead_letter(r, "s10", "g", "s10:dlq", id, entry, lens, 4, &written,
					 &err),
		  0);
	CHECK(written);
	CHECK_INT(it_pending(r, "s10"), 0);
	rep = redis_command(r, "EXISTS %s", key);
	CHECK(rep && rep->type == REDIS_REPLY_INTEGER && rep->integer == 0);
	freeReplyObject(rep);
	rep = redis_command(r, "XRANGE s10:dlq - +");
	REQUIRE(rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 1);
	const redisReply *f = rep->element[0]->element[1];
	REQUIRE(f->elements == 4);
	CHECK(f->element[1]->len == 3 && memcmp(f->element[1]->str, "a\0b", 3) == 0);
	freeReplyObject(rep);
	CHECK_INT(invocation_dead_letter(r, "s10", "g", "s10:dlq", id, entry, lens, 4, &written,
					 &err),
		  0);
	CHECK(!written);
	rep = redis_command(r, "XLEN s10:dlq");
	CHECK(rep && rep->type == REDIS_REPLY_INTEGER && rep->integer == 1);
	freeReplyObject(rep);
	redis_free(r);
	free(key);
	free(id);
	free(err);
}

/* ---- hostile entries ------------------------------------------ */

/* The reader's decode hook holds the reader inside a decode until opened. */
struct gate {
	pthread_mutex_t m;
	pthread_cond_t cv;
	int arrived, open;
};
static struct gate gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};

static void gate_hook(void *ctx)
{
	struct gate *g = ctx;
	pthread_mutex_lock(&g->m);
	g->arrived++;
	while (!g->open)
		pthread_cond_wait(&g->cv, &g->m);
	pthread_mutex_unlock(&g->m);
}

static bool gate_arrived(void *a)
{
	struct gate *g = a;
	pthread_mutex_lock(&g->m);
	bool r = g->arrived > 0;
	pthread_mutex_unlock(&g->m);
	return r;
}

static void gate_open(struct gate *g)
{
	pthread_mutex_lock(&g->m);
	g->open = 1;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->m);
}

struct peek {
	struct consumer *c;
	atomic_int done;
};
static void *peek_buffered(void *a)
{
	struct peek *p = a;
	consumer_buffered(p->c); /* takes the consumer lock */
	atomic_store(&p->done, 1);
	return NULL;
}
static bool peek_done(void *a)
{
	return atomic_load(&((struct peek *)a)->done) != 0;
}

/* A slow decode (a hash-flooding event can take seconds) must not hold the lock the workers, the acker and the reclaim
 * loop need. The decode is held open by the hook; the lock is taken from
 * another thread meanwhile. */
TEST(the_reader_decodes_outside_the_consumer_lock)
{
	calls_reset();
	struct registry *reg = load_registry();
	struct consumer_config cfg = base_cfg(reg, "lk1", 16, 4, 300 * NS_PER_MS);
	cfg.test_before_decode = gate_hook;
	cfg.test_ctx = &gate;
	struct consumer *c = start_cfg(&cfg);
	struct redis *r = it_conn(&R);
	char *ev = xasprintf(EV, "good");
	char *id = xadd(r, "lk1", ev);
	REQUIRE(wait_until(10000, gate_arrived, &gate));
	struct peek p = {c, 0};
	pthread_t t;
	pthread_create(&t, NULL, peek_buffered, &p);
	bool free_while_decoding = wait_until(5000, peek_done, &p);
	gate_open(&gate);
	pthread_join(t, NULL);
	CHECK(free_while_decoding);
	struct done_arg da = {r, "lk1", id};
	CHECK(wait_until(10000, done_is, &da));
	CHECK_INT(calls_count("a-first/ok.one#1@"), 1);
	consumer_stop(c);
	consumer_free(c);
	registry_free(reg);
	redis_free(r);
	free(id);
	free(ev);
}

/* XADD <stream> * event <prefix + pad x 'x' + suffix> [<extra> <n x 'y'>],
 * built inside Redis: an entry this size must not travel over the test's
 * own connection either (its replies are capped like Relay's). */
static char *xadd_padded(struct redis *r, const char *stream, const char *prefix, long long pad,
			 const char *suffix, const char *extra, long long extra_len)
{
	static const char lua[] =
		"local ev = ARGV[1] .. string.rep('x', tonumber(ARGV[2])) .. ARGV[3]\n"
		"if ARGV[4] ~= '' then\n"
		"  return redis.call('XADD', KEYS[1], '*', 'event', ev, ARGV[4],\n"
		"    string.rep('y', tonumber(ARGV[5])))\n"
		"end\n"
		"return redis.call('XADD', KEYS[1], '*', 'event', ev)\n";
	char n[24], m[24];
	snprintf_(n, sizeof n, "%lld", pad);
	snprintf_(m, sizeof m, "%lld", extra_len);
	const char *argv[] = {"EVAL", lua, "1", stream, prefix, n, suffix, extra ? extra : "", m};
	redisReply *rep = redis_command_argv(r, 9, argv, NULL);
	char *id = rep && rep->type == REDIS_REPLY_STRING ? xstrdup(rep->str) : NULL;
	if (!id)
		printf("  xadd_padded: %s\n",
		       rep && rep->type == REDIS_REPLY_ERROR ? rep->str : redis_errmsg(r));
	if (rep)
		freeReplyObject(rep);
	return id;
}

/* A legal event of exactly `bytes` bytes: {"kind":"<kind>","pad":"xxx…"}. */
static char *xadd_sized(struct redis *r, const char *stream, const char *kind, long long bytes)
{
	char *prefix = xasprintf("{\"kind\":\"%s\",\"pad\":\"", kind);
	long long pad = bytes - (long long)strlen(prefix) - 2;
	char *id = xadd_padded(r, stream, prefix, pad, "\"}", NULL, 0);
	free(prefix);
	return id;
}

/* Delivers every new entry of stream to consumer "ghost" of group g inside
 * Redis (a worker that read them and died); returns how many. */
static long long deliver_to_ghost(struct redis *r, const char *stream)
{
	static const char lua[] =
		"local got = redis.call('XREADGROUP', 'GROUP', 'g', 'ghost', 'COUNT', 100000,\n"
		"  'STREAMS', KEYS[1], '>')\n"
		"if not got then return 0 end\n"
		"return #got[1][2]\n";
	const char *argv[] = {"EVAL", lua, "1", stream};
	redisReply *rep = redis_command_argv(r, 4, argv, NULL);
	long long n = rep && rep->type == REDIS_REPLY_INTEGER ? rep->integer : -1;
	if (rep)
		freeReplyObject(rep);
	return n;
}

/* Field `name` of DLQ entry i (0-based) of stream's DLQ (malloc'd), or NULL. */
static char *dlq_field(struct redis *r, const char *stream, size_t i, const char *name)
{
	redisReply *rep = redis_command(r, "XRANGE relay:%s:dlq - +", stream);
	char *v = NULL;
	if (rep && rep->type == REDIS_REPLY_ARRAY && i < rep->elements) {
		const redisReply *f = rep->element[i]->element[1];
		for (size_t k = 0; k + 1 < f->elements; k += 2)
			if (strcmp(f->element[k]->str, name) == 0)
				v = xstrndup(f->element[k + 1]->str, f->element[k + 1]->len);
	}
	if (rep)
		freeReplyObject(rep);
	return v;
}

/* Checks DLQ entry i: every spec field, reason "event too large", its size
 * and no event body. */
static void check_too_large_entry(struct redis *r, const char *stream, size_t i, const char *id,
				  long long size)
{
	static const char *const names[] = {"original_stream", "original_id", "group",
					    "consumer",	       "event",	      "reason",
					    "attempts",	       "timestamp",   "size"};
	char *v[ARRAY_LEN(names)];
	for (size_t k = 0; k < ARRAY_LEN(names); k++) {
		v[k] = dlq_field(r, stream, i, names[k]);
		if (!v[k])
			T_FAIL_("DLQ entry %zu has no %s field", i, names[k]);
	}
	char want_size[24];
	snprintf_(want_size, sizeof want_size, "%lld", size);
	if (v[0] && v[1] && v[2] && v[3] && v[4] && v[5] && v[6] && v[7] && v[8]) {
		CHECK_STR(v[0], stream);
		CHECK_STR(v[1], id);
		CHECK_STR(v[2], "g");
		CHECK_STR(v[3], "worker-1");
		CHECK_STR(v[4], "");
		CHECK_STR(v[5], "event too large");
		CHECK_STR(v[6], "0");
		CHECK(strlen(v[7]) == 20 && v[7][19] == 'Z');
		CHECK_STR(v[8], want_size);
	}
	for (size_t k = 0; k < ARRAY_LEN(names); k++)
		free(v[k]);
}

/* The entry limit (CONSUMER_ENTRY_MAX: what Relay reads of an
 * entry, names and values of `event` and the routing fields, counted with
 * their framing as CONSUMER_ENTRY_COST). One byte over: dead-lettered
 * inside Redis, without its body, and acknowledged.
 * Exactly at the limit: read (and, its event being over EVENT_MAX_BYTES,
 * dead-lettered as malformed, with its body). A small event next to a big
 * field Relay never reads runs. Reading goes on after all of them. */
TEST(an_entry_over_the_entry_limit_is_dead_lettered_without_reading_it)
{
	calls_reset();
	struct registry *reg = load_registry();
	struct redis *r = it_conn(&R);
	REQUIRE(it_ensure_group(r, "big1", "g") == 0);
	/* An event-only entry: "event" (5 bytes) and the value, 2 strings. */
	const long long framing = CONSUMER_ENTRY_COST(5, 2);
	const long long over = CONSUMER_ENTRY_MAX + 1 - framing, at = CONSUMER_ENTRY_MAX - framing;
	char *big = xadd_sized(r, "big1", "good", over);
	char *edge = xadd_sized(r, "big1", "good", at);
	char *side = xadd_padded(r, "big1", "{\"kind\":\"good\"}", 0, "", "attachment",
				 3LL * CONSUMER_ENTRY_MAX);
	char *ev = xasprintf(EV, "good");
	char *last = xadd(r, "big1", ev);
	REQUIRE(big && edge && side && last);
	struct consumer *c = start(reg, "big1", 16, 4);
	struct done_arg da = {r, "big1", last};
	CHECK(wait_until(20000, done_is, &da));
	CHECK_INT(it_xlen(r, "relay:big1:dlq"), 2);
	CHECK_INT(calls_count("a-first/ok.one#1@"), 2); /* side and last */
	char *why = dlq_field(r, "big1", 0, "reason");
	if (why && strcmp(why, "event too large") == 0) {
		check_too_large_entry(r, "big1", 0, big, 5 + over);
		char *edge_reason = dlq_field(r, "big1", 1, "reason");
		char *edge_id = dlq_field(r, "big1", 1, "original_id");
		CHECK(edge_reason && strstr(edge_reason, "malformed event (too_large)"));
		CHECK_STR(edge_id ? edge_id : "", edge);
		free(edge_reason);
		free(edge_id);
	} else {
		T_FAIL_("first DLQ entry's reason: %s, want \"event too large\"",
			why ? why : "(none)");
	}
	free(why);
	CHECK_INT(it_pending(r, "big1"), 0);
	consumer_stop(c);
	consumer_free(c);
	registry_free(reg);
	redis_free(r);
	free(big), free(edge), free(side), free(last), free(ev);
}

/* One entry over the 64 MiB reply cap between two events, one of which
 * fails twice before it succeeds: the oversized entry is dead-lettered and
 * the read and the reclaim go past it, so the flaky event is retried (a
 * read that failed on it would leave everything pending, and each reclaim
 * pass from 0-0 would fail on it again). */
TEST(an_entry_over_the_reply_cap_neither_stops_reading_nor_retries)
{
	calls_reset();
	struct registry *reg = load_registry();
	struct redis *r = it_conn(&R);
	REQUIRE(it_ensure_group(r, "big2", "g") == 0);
	char *flaky = xadd(r, "big2", "{\"kind\":\"flaky\"}");
	const long long huge = (long long)REDIS_REPLY_MAX + 1024 * 1024; /* 65 MiB */
	char *big = xadd_sized(r, "big2", "good", huge);
	char *ev = xasprintf(EV, "good");
	char *last = xadd(r, "big2", ev);
	REQUIRE(flaky && big && last);
	struct consumer *c = start(reg, "big2", 16, 4);
	struct done_arg da = {r, "big2", last};
	CHECK(wait_until(30000, done_is, &da));
	CHECK_INT(calls_count("i-flaky/flaky.x#3@"), 1); /* retried past it */
	CHECK_INT(calls_count("a-first/ok.one#1@"), 1);
	CHECK_INT(it_xlen(r, "relay:big2:dlq"), 1);
	check_too_large_entry(r, "big2", 0, big, huge + 5);
	CHECK_INT(it_pending(r, "big2"), 0);
	consumer_stop(c);
	consumer_free(c);
	registry_free(reg);
	redis_free(r);
	free(flaky), free(big), free(last), free(ev);
}

/* The reclaim path: a dead worker left an entry over the reply cap pending
 * between two events. XAUTOCLAIM used to fail on it on every pass. */
TEST(reclaim_goes_past_a_pending_entry_over_the_reply_cap)
{
	calls_reset();
	struct registry *reg = load_registry();
	struct redis *r = it_conn(&R);
	REQUIRE(it_ensure_group(r, "big3", "g") == 0);
	char *ev = xasprintf(EV, "good");
	char *first = xadd(r, "big3", ev);
	const long long huge = (long long)REDIS_REPLY_MAX + 1024 * 1024;
	char *big = xadd_sized(r, "big3", "good", huge);
	char *last = xadd(r, "big3", ev);
	REQUIRE(first && big && last);
	REQUIRE(deliver_to_ghost(r, "big3") == 3);
	struct consumer *c = start(reg, "big3", 16, 4);
	struct done_arg da = {r, "big3", last};
	CHECK(wait_until(30000, done_is, &da));
	CHECK_INT(calls_count("a-first/ok.one#1@"), 2);
	CHECK_INT(it_xlen(r, "relay:big3:dlq"), 1);
	check_too_large_entry(r, "big3", 0, big, huge + 5);
	consumer_stop(c);
	consumer_free(c);
	registry_free(reg);
	redis_free(r);
	free(first), free(big), free(last), free(ev);
}

/* A too-large entry whose DLQ write fails (the DLQ key holds a string)
 * stays pending, is reported, and does not stop the entries after it; the
 * reclaim writes it once the DLQ can take it. */
TEST(a_too_large_entry_whose_dlq_write_fails_stays_pending_until_it_can)
{
	calls_reset();
	struct registry *reg = load_registry();
	struct redis *r = it_conn(&R);
	REQUIRE(it_ensure_group(r, "big6", "g") == 0);
	redisReply *rep = redis_command(r, "SET relay:big6:dlq not-a-stream");
	freeReplyObject(rep);
	char *big = xadd_sized(r, "big6", "good", 2LL * CONSUMER_ENTRY_MAX);
	char *ev = xasprintf(EV, "good");
	char *last = xadd(r, "big6", ev);
	REQUIRE(big && last);
	struct consumer *c = start(reg, "big6", 16, 4);
	struct count_arg ca = {"a-first/ok.one#1@", 1};
	REQUIRE(wait_until(10000, count_is, &ca));
	/* The DLQ write failed on the read and on two reclaims since. */
	struct deliv_arg dv = {r, "big6", big, 3};
	REQUIRE(wait_until(10000, deliveries_at_least, &dv));
	CHECK_INT(it_pending(r, "big6"), 1);
	rep = redis_command(r, "DEL relay:big6:dlq");
	freeReplyObject(rep);
	struct done_arg da = {r, "big6", last};
	CHECK(wait_until(10000, done_is, &da));
	CHECK_INT(it_xlen(r, "relay:big6:dlq"), 1);
	check_too_large_entry(r, "big6", 0, big, 5 + 2LL * CONSUMER_ENTRY_MAX);
	consumer_stop(c);
	consumer_free(c);
	registry_free(reg);
	redis_free(r);
	free(big), free(last), free(ev);
}

/* How often Redis ran cmd since the last CONFIG RESETSTAT (calls from
 * scripts included). */
static long long cmd_calls(struct redis *r, const char *cmd)
{
	redisReply *rep = redis_command(r, "INFO commandstats");
	long long n = -1;
	char *needle = xasprintf("cmdstat_%s:calls=", cmd);
	const char *p = rep && rep->type == REDIS_REPLY_STRING ? strstr(rep->str, needle) : NULL;
	n = p ? strtoll(p + strlen(needle), NULL, 10) : 0;
	free(needle);
	if (rep)
		freeReplyObject(rep);
	return n;
}

/* Pending entries idle at least ms (XPENDING IDLE), at most 1000. */
static long long idle_pending(struct redis *r, const char *stream, int ms)
{
	redisReply *rep = redis_command(r, "XPENDING %s g IDLE %d - + 1000", stream, ms);
	long long n = rep && rep->type == REDIS_REPLY_ARRAY ? (long long)rep->elements : -1;
	if (rep)
		freeReplyObject(rep);
	return n;
}
struct idle_arg {
	struct redis *r;
	const char *stream;
	int ms;
	long long want;
};
static bool idle_is(void *a)
{
	struct idle_arg *p = a;
	return idle_pending(p->r, p->stream, p->ms) == p->want;
}

/* The batch: 70 legal events of about 1 MiB, 70 MiB together,
 * with room for all of them in the buffer; once fresh, once left pending
 * by a dead worker (all idle). One XREADGROUP or XAUTOCLAIM for all of
 * them would be a reply over the cap (the reclaim of the pending ones
 * would fail on every pass): each is read in parts below the cap and
 * every event runs. */
TEST(a_batch_over_the_reply_cap_is_read_in_parts)
{
	calls_reset();
	struct registry *reg = load_registry();
	struct redis *r = it_conn(&R);
	const int n = 70;
	static const char *const streams[] = {"big4", "big5"};
	for (size_t s = 0; s < 2; s++) {
		const char *st = streams[s];
		REQUIRE(it_ensure_group(r, st, "g") == 0);
		for (int i = 0; i < n; i++) {
			char *id = xadd_sized(r, st, "good", EVENT_MAX_BYTES - 64);
			REQUIRE(id);
			free(id);
		}
		char *ev = xasprintf(EV, "good");
		char *last = xadd(r, st, ev);
		if (s == 1) {
			REQUIRE(deliver_to_ghost(r, st) == n + 1);
			struct idle_arg ia = {r, st, 300, n + 1};
			REQUIRE(wait_until(10000, idle_is, &ia));
		}
		redisReply *rep = redis_command(r, "CONFIG RESETSTAT");
		freeReplyObject(rep);
		struct consumer *c = start(reg, st, 100, 4);
		struct done_arg da = {r, st, last};
		CHECK(wait_until(60000, done_is, &da));
		CHECK_INT(calls_count("a-first/ok.one#1@"), (int)(s + 1) * (n + 1));
		CHECK_INT(calls_count("b-second/ok.two#1@"), (int)(s + 1) * (n + 1));
		CHECK_INT(it_xlen(r, s ? "relay:big5:dlq" : "relay:big4:dlq"), 0);
		CHECK(cmd_calls(r, s ? "xclaim" : "xreadgroup") >= (s ? n + 1 : 2));
		consumer_stop(c);
		consumer_free(c);
		rep = redis_command(r, "DEL %s", st);
		freeReplyObject(rep);
		free(last), free(ev);
	}
	registry_free(reg);
	redis_free(r);
}

/* The same split with a smaller budget (an internal setting), on both
 * paths: room for 3 entries per call, 20 events read fresh and 20 reclaimed
 * from a dead worker (the reclaim goes on from its cursor round after
 * round). */
TEST(reads_and_reclaims_stay_within_the_byte_budget)
{
	calls_reset();
	struct registry *reg = load_registry();
	struct redis *r = it_conn(&R);
	REQUIRE(it_ensure_group(r, "bud1", "g") == 0);
	REQUIRE(it_ensure_group(r, "bud2", "g") == 0);
	char *last1 = NULL, *last2 = NULL;
	for (int i = 0; i < 20; i++) {
		free(last1);
		free(last2);
		last1 = xadd_sized(r, "bud1", "good", 3 * 1024);
		last2 = xadd_sized(r, "bud2", "good", 3 * 1024);
	}
	REQUIRE(last1 && last2);
	REQUIRE(deliver_to_ghost(r, "bud2") == 20);
	redisReply *rep = redis_command(r, "CONFIG RESETSTAT");
	freeReplyObject(rep);
	struct consumer_config cfg = base_cfg(reg, "bud1", 16, 4, 300 * NS_PER_MS);
	cfg.read_budget = 3 * CONSUMER_ENTRY_MAX + 1;
	struct consumer *c1 = start_cfg(&cfg);
	struct done_arg da = {r, "bud1", last1};
	CHECK(wait_until(20000, done_is, &da));
	CHECK(cmd_calls(r, "xreadgroup") >= 7);
	cfg.stream = "bud2";
	struct consumer *c2 = start_cfg(&cfg);
	struct done_arg db = {r, "bud2", last2};
	CHECK(wait_until(20000, done_is, &db));
	CHECK(cmd_calls(r, "xpending") >= 7);
	CHECK_INT(calls_count("a-first/ok.one#1@"), 40);
	consumer_stop(c1);
	consumer_free(c1);
	consumer_stop(c2);
	consumer_free(c2);
	registry_free(reg);
	redis_free(r);
	free(last1), free(last2);
}

/* Blocked clients on the server (INFO clients). */
static long long blocked_clients(struct redis *r)
{
	redisReply *rep = redis_command(r, "INFO clients");
	const char *p = rep && rep->type == REDIS_REPLY_STRING
				? strstr(rep->str, "blocked_clients:")
				: NULL;
	long long n = p ? strtoll(p + strlen("blocked_clients:"), NULL, 10) : -1;
	if (rep)
		freeReplyObject(rep);
	return n;
}
static bool a_client_blocks(void *a)
{
	return blocked_clients(a) >= 1;
}

/* An idle reader blocks in XREADGROUP ... BLOCK block_ms. With block_ms at
 * 10 minutes, an event added to an idle stream still runs at once, for a
 * reader whose Redis user may not use CLIENT or SUBSCRIBE too (nothing but
 * the read is needed), and the consumer stops without waiting the block
 * out (else this test takes 20 minutes). */
TEST(an_idle_reader_wakes_when_an_entry_arrives)
{
	calls_reset();
	struct registry *reg = load_registry();
	struct redis *r = it_conn(&R);
	redisReply *rep = redis_command(r, "ACL SETUSER nonotify on >pw ~* &* +@all -client "
					   "-subscribe");
	REQUIRE(rep && rep->type == REDIS_REPLY_STATUS);
	freeReplyObject(rep);
	struct redis_uri limited = R.uri;
	limited.user = "nonotify";
	limited.password = "pw";
	static const char *const streams[] = {"wake1", "wake2"};
	for (size_t i = 0; i < 2; i++) {
		struct consumer_config cfg = base_cfg(reg, streams[i], 16, 4, 300 * NS_PER_MS);
		cfg.block_ms = 600000;
		cfg.reclaim_interval_ns = 3600 * NS_PER_SEC; /* no reclaim: only the reader */
		if (i == 1)
			cfg.uri = &limited;
		struct consumer *c = start_cfg(&cfg);
		/* The reader found the stream empty: it blocks from now on. */
		REQUIRE(wait_until(10000, a_client_blocks, r));
		char *ev = xasprintf(EV, "good");
		char *id = xadd(r, streams[i], ev);
		struct done_arg da = {r, streams[i], id};
		if (!wait_until(20000, done_is, &da))
			T_FAIL_("%s: the event added to the idle stream did not run",
				i ? "reader without CLIENT or SUBSCRIBE" : "reader");
		REQUIRE(wait_until(10000, a_client_blocks, r));
		consumer_stop(c);
		consumer_free(c);
		free(id);
		free(ev);
	}
	CHECK_INT(calls_count("a-first/ok.one#1@"), 2);
	rep = redis_command(r, "ACL DELUSER nonotify");
	freeReplyObject(rep);
	registry_free(reg);
	redis_free(r);
}

/* An entry whose fields Relay reads are legal but which carries another
 * field of 3 MiB, in the middle of a batch: the read is refused by the
 * reply guard at that field's header, and the batch is read again from
 * its first entry through the recover script, which leaves the other field
 * in Redis. Every entry runs once, nothing is dead-lettered. The reclaim
 * is off, so only the recover script reads entries with XRANGE: once per
 * entry of the batch. */
TEST(a_legal_entry_with_a_large_foreign_field_is_recovered_and_runs)
{
	calls_reset();
	struct registry *reg = load_registry();
	struct redis *r = it_conn(&R);
	REQUIRE(it_ensure_group(r, "junk1", "g") == 0);
	char *ev = xasprintf(EV, "good");
	char *first = xadd(r, "junk1", ev);
	char *side = xadd_padded(r, "junk1", "{\"kind\":\"good\"}", 0, "", "attachment",
				 3LL * CONSUMER_ENTRY_MAX);
	char *third = xadd(r, "junk1", ev);
	char *last = xadd(r, "junk1", ev);
	REQUIRE(first && side && third && last);
	redisReply *rep = redis_command(r, "CONFIG RESETSTAT");
	freeReplyObject(rep);
	struct consumer_config cfg = base_cfg(reg, "junk1", 16, 4, 300 * NS_PER_MS);
	cfg.reclaim_interval_ns = 3600 * NS_PER_SEC;
	struct consumer *c = start_cfg(&cfg);
	struct done_arg da = {r, "junk1", last};
	CHECK(wait_until(20000, done_is, &da));
	CHECK_INT(calls_count("a-first/ok.one#1@"), 4);
	CHECK_INT(calls_count("b-second/ok.two#1@"), 4);
	char *want = xasprintf("a-first/ok.one#1@%s", side);
	CHECK_INT(calls_exact(want), 1);
	CHECK_INT(cmd_calls(r, "xrange"), 4);
	CHECK_INT(it_xlen(r, "relay:junk1:dlq"), 0);
	CHECK_INT(it_pending(r, "junk1"), 0);
	consumer_stop(c);
	consumer_free(c);
	registry_free(reg);
	redis_free(r);
	free(want);
	free(first), free(side), free(third), free(last), free(ev);
}

/*
 * An entry of many small fields (100 `event` fields, the last one the
 * event, and 100 foreign ones): past the guard's element bound
 * (CONSUMER_ENTRY_SENT_ELEMENTS), so its batch is recovered through the
 * script, which keeps only the last of each field. The event Relay runs is
 * the last `event`, as from a plain read: a-first runs it and c-fail, which
 * the other 99 would match, never runs.
 */
TEST(an_entry_of_many_small_fields_is_recovered_and_runs_its_last_event)
{
	calls_reset();
	struct registry *reg = load_registry();
	struct redis *r = it_conn(&R);
	REQUIRE(it_ensure_group(r, "many1", "g") == 0);
	char *ev = xasprintf(EV, "good"), *bad = xasprintf(EV, "bad");
	char *first = xadd(r, "many1", ev);
	const char *argv[3 + 400];
	int argc = 0;
	argv[argc++] = "XADD";
	argv[argc++] = "many1";
	argv[argc++] = "*";
	for (int i = 0; i < 100; i++) {
		argv[argc++] = "f";
		argv[argc++] = "x";
		argv[argc++] = "event";
		argv[argc++] = i < 99 ? bad : ev;
	}
	redisReply *rep = redis_command_argv(r, argc, argv, NULL);
	char *many = rep && rep->type == REDIS_REPLY_STRING ? xstrdup(rep->str) : NULL;
	freeReplyObject(rep);
	char *last = xadd(r, "many1", ev);
	REQUIRE(first && many && last);
	rep = redis_command(r, "CONFIG RESETSTAT");
	freeReplyObject(rep);
	struct consumer_config cfg = base_cfg(reg, "many1", 16, 4, 300 * NS_PER_MS);
	cfg.reclaim_interval_ns = 3600 * NS_PER_SEC;
	struct consumer *c = start_cfg(&cfg);
	struct done_arg da = {r, "many1", last};
	CHECK(wait_until(20000, done_is, &da));
	char *want = xasprintf("a-first/ok.one#1@%s", many);
	CHECK_INT(calls_exact(want), 1);
	CHECK_INT(calls_count("a-first/ok.one#1@"), 3);
	CHECK_INT(calls_count("c-fail/"), 0);
	CHECK_INT(cmd_calls(r, "xrange"), 3); /* the batch, from its first id */
	CHECK_INT(it_xlen(r, "relay:many1:dlq"), 0);
	CHECK_INT(it_pending(r, "many1"), 0);
	consumer_stop(c);
	consumer_free(c);
	registry_free(reg);
	redis_free(r);
	free(want);
	free(first), free(many), free(last), free(ev), free(bad);
}

/* ---- slots without waiting, fewer round trips ---------------------------- */

static bool all_done_of(struct redis *r, const char *stream, const char *last)
{
	return it_group_done(r, stream, "g", last) && it_pending(r, stream) == 0;
}

/* The n calls of prefix, each once: their earliest start and latest end. */
static int64_t last_start(const char *prefix)
{
	int64_t t = 0;
	pthread_mutex_lock(&calls.lock);
	for (int i = 0; i < calls.n; i++)
		if (strncmp(calls.names[i], prefix, strlen(prefix)) == 0 &&
		    calls.started[i] > t)
			t = calls.started[i];
	pthread_mutex_unlock(&calls.lock);
	return t;
}

static int calls_span(const char *prefix, int64_t *first, int64_t *last)
{
	int k = 0;
	*first = INT64_MAX, *last = 0;
	pthread_mutex_lock(&calls.lock);
	for (int i = 0; i < calls.n; i++)
		if (strncmp(calls.names[i], prefix, strlen(prefix)) == 0) {
			k++;
			if (calls.started[i] < *first)
				*first = calls.started[i];
			if (calls.ended[i] > *last)
				*last = calls.ended[i];
		}
	pthread_mutex_unlock(&calls.lock);
	return k;
}

/*
 * 16 events of a 400 ms handler at concurrency 2 with 8 workers: no worker
 * blocks on the two slots, the plans wait locally and resume as slots free
 * (the reclaim is off: it cannot be what finishes them), within 1.4x the
 * ideal 8 rounds plus 8 s (the goal for bursts; the nap is real
 * sleep, so a loaded machine adds little), never more than 2 at once, each
 * once at attempt 1; an event of another function XADDed behind them runs
 * while the burst is still running, not after it.
 */
TEST(a_burst_for_one_function_waits_locally_and_leaves_other_functions_alone)
{
	calls_reset();
	struct registry *reg = load_registry();
	struct redis *r = it_conn(&R);
	REQUIRE(it_ensure_group(r, "s-hot", "g") == 0);
	struct consumer_config cfg = base_cfg(reg, "s-hot", 32, 8, 300 * NS_PER_MS);
	cfg.reclaim_interval_ns = 3600 * NS_PER_SEC;
	cfg.min_pending_idle_ns = 3600 * NS_PER_SEC;
	uint64_t waits0 = metrics_counter_value(METRIC_CONCURRENCY_WAITS);
	struct consumer *c = start_cfg(&cfg);
	char *ids[16];
	int64_t t0 = now_wall_ns();
	for (int i = 0; i < 16; i++)
		ids[i] = xadd(r, "s-hot", "{\"kind\":\"hot\"}");
	int64_t other_added = now_wall_ns();
	char *other = xadd(r, "s-hot", "{\"kind\":\"other\"}");
	struct count_arg ca = {"k-other/ok.k#1@", 1};
	CHECK(wait_until(10000, count_is, &ca));
	struct count_arg all = {"j-hot/nap.j#", 16};
	CHECK(wait_until(30000, count_is, &all));
	struct done_arg da = {r, "s-hot", other};
	CHECK(wait_until(10000, done_is, &da));
	int64_t first, last;
	CHECK_INT(calls_span("j-hot/", &first, &last), 16);
	double secs = (double)(last - t0) / 1e9;
	printf("  16 x 0.4 s at concurrency 2: %.2f s (ideal 3.2 s, bound 1.4x + 8 s = 12.48 s)\n",
	       secs);
	CHECK(secs <= 1.4 * 3.2 + 8.0);
	for (int i = 0; i < 16; i++) {
		char *once = xasprintf("j-hot/nap.j#1@%s", ids[i]);
		CHECK_INT(calls_exact(once), 1);
		free(once);
	}
	CHECK_INT(atomic_load(&calls.fn_max['j' - 'a']), 2);
	/* the other function's event did not queue behind the burst: it
	 * started after the burst's first call and before its last one began */
	int64_t os, oe;
	REQUIRE(call_times("k-other/", &os, &oe));
	printf("  another function's event: ran %.3f s after its XADD\n",
	       (double)(os - other_added) / 1e9);
	CHECK(first < os);
	CHECK(os < last_start("j-hot/"));
	/* 14 had to wait, each counted once (the others may have too) */
	CHECK(metrics_counter_value(METRIC_CONCURRENCY_WAITS) - waits0 >= 14);
	CHECK(metrics_counter_value(METRIC_CONCURRENCY_WAITS) - waits0 <= 17);
	CHECK(all_done_of(r, "s-hot", other));
	consumer_stop(c);
	consumer_free(c);
	registry_free(reg);
	redis_free(r);
	for (int i = 0; i < 16; i++)
		free(ids[i]);
	free(other);
}

/* Shutdown with plans waiting for a slot: they stay pending, nothing
 * charged (no invocation state), and run at attempt 1 once restarted. */
TEST(shutdown_leaves_waiting_plans_pending_uncharged)
{
	calls_reset();
	struct registry *reg = load_registry();
	struct redis *r = it_conn(&R);
	REQUIRE(it_ensure_group(r, "s-hotstop", "g") == 0);
	struct consumer_config cfg = base_cfg(reg, "s-hotstop", 32, 8, 300 * NS_PER_MS);
	cfg.reclaim_interval_ns = 3600 * NS_PER_SEC;
	cfg.min_pending_idle_ns = 3600 * NS_PER_SEC;
	struct consumer *c = start_cfg(&cfg);
	char *ids[8];
	for (int i = 0; i < 8; i++)
		ids[i] = xadd(r, "s-hotstop", "{\"kind\":\"hot\"}");
	struct count_arg two = {"j-hot/", 2};
	REQUIRE(wait_until(10000, count_is, &two));
	/* all eight read (a loaded machine reads them in several batches), so
	 * the ones not running are waiting plans, not unread entries */
	struct read_arg all_read = {r, "s-hotstop", ids[7]};
	REQUIRE(wait_until(10000, read_up_to, &all_read));
	consumer_stop(c); /* the two running finish; six wait for a slot */
	consumer_free(c);
	int ran = calls_count("j-hot/");
	CHECK(ran >= 2 && ran < 8);
	CHECK_INT(it_pending(r, "s-hotstop"), 8 - ran);
	int uncharged = 0;
	for (int i = 0; i < 8; i++) {
		char *k = invocation_key("s-hotstop", "g", ids[i]);
		redisReply *rep = redis_command(r, "EXISTS %s", k);
		uncharged += rep && rep->type == REDIS_REPLY_INTEGER && rep->integer == 0;
		if (rep)
			freeReplyObject(rep);
		free(k);
	}
	CHECK_INT(uncharged, 8); /* the done ones' state went with the ACK */
	cfg.consumer = "worker-2";
	cfg.min_pending_idle_ns = 1;
	cfg.reclaim_interval_ns = 200 * NS_PER_MS;
	c = start_cfg(&cfg);
	struct done_arg da = {r, "s-hotstop", ids[7]};
	CHECK(wait_until(20000, done_is, &da));
	CHECK_INT(calls_count("j-hot/nap.j#1@"), 8);
	CHECK_INT(calls_count("j-hot/"), 8);
	consumer_stop(c);
	consumer_free(c);
	registry_free(reg);
	redis_free(r);
	for (int i = 0; i < 8; i++)
		free(ids[i]);
}

/*
 * A first-attempt success of a fresh message: no HGETALL, the claim once by
 * SHA (EVALSHA, no EVAL), then the outcome's HSET+EXPIRE (pipelined: one
 * round trip; the script's own HSET and EXPIRE count too), then the
 * batched XACK+DEL. The running marker is in Redis while the handler runs.
 */
TEST(a_fresh_first_attempt_success_is_one_claim_and_one_record)
{
	calls_reset();
	struct registry *reg = load_registry();
	struct redis *r = it_conn(&R);
	REQUIRE(it_ensure_group(r, "s-mark", "g") == 0);
	struct consumer_config cfg = base_cfg(reg, "s-mark", 16, 4, 300 * NS_PER_MS);
	cfg.reclaim_interval_ns = 3600 * NS_PER_SEC;
	struct consumer *c = start_cfg(&cfg);
	/* warm: the script cached, the worker's connection up */
	char *w = xadd(r, "s-mark", "{\"kind\":\"mark\"}");
	struct done_arg dw = {r, "s-mark", w};
	REQUIRE(wait_until(10000, done_is, &dw));
	redisReply *rep = redis_command(r, "CONFIG RESETSTAT");
	freeReplyObject(rep);
	char *id = xadd(r, "s-mark", "{\"kind\":\"mark\"}");
	struct done_arg da = {r, "s-mark", id};
	REQUIRE(wait_until(10000, done_is, &da));
	long long hgetall = cmd_calls(r, "hgetall"), evalsha = cmd_calls(r, "evalsha"),
		  eval = cmd_calls(r, "eval"), hset = cmd_calls(r, "hset"),
		  expire = cmd_calls(r, "expire"), xack = cmd_calls(r, "xack"),
		  del = cmd_calls(r, "del");
	printf("  fresh first-attempt success: hgetall=%lld evalsha=%lld eval=%lld hset=%lld "
	       "expire=%lld xack=%lld del=%lld\n",
	       hgetall, evalsha, eval, hset, expire, xack, del);
	CHECK_INT(hgetall, 0);
	CHECK_INT(evalsha, 1);
	CHECK_INT(eval, 0);
	CHECK_INT(hset, 2);   /* the claim script's, the outcome's */
	CHECK_INT(expire, 2); /* the same */
	CHECK_INT(xack, 1);
	CHECK_INT(del, 1);
	pthread_mutex_lock(&calls.lock);
	char *seen = mark_seen ? xstrdup(mark_seen) : NULL;
	pthread_mutex_unlock(&calls.lock);
	/* mid-run, a crash would leave this: the running marker of attempt 1 */
	CHECK(seen && strncmp(seen, "running:", 8) == 0);
	CHECK(seen && strlen(seen) > 2 && strcmp(seen + strlen(seen) - 2, "#1") == 0);
	CHECK_INT(calls_count("m-mark/mark.m#1@"), 2);
	consumer_stop(c);
	consumer_free(c);
	registry_free(reg);
	redis_free(r);
	free(seen), free(id), free(w);
}

/* A state key left from an earlier life of the group on a fresh message:
 * the fast path's claim loses, the state is loaded at once (not by the
 * reclaim, off here), the handler recorded ok is skipped, the message is
 * acknowledged. */
TEST(a_stale_state_key_on_a_fresh_message_is_loaded_and_never_reruns)
{
	calls_reset();
	struct registry *reg = load_registry();
	struct redis *r = it_conn(&R);
	REQUIRE(it_ensure_group(r, "s-stale", "g") == 0);
	char *k = invocation_key("s-stale", "g", "5-1");
	redisReply *rep = redis_command(r, "HSET %s m-mark/mark.m ok", k);
	freeReplyObject(rep);
	struct consumer_config cfg = base_cfg(reg, "s-stale", 16, 4, 300 * NS_PER_MS);
	cfg.reclaim_interval_ns = 3600 * NS_PER_SEC;
	cfg.min_pending_idle_ns = 3600 * NS_PER_SEC;
	rep = redis_command(r, "CONFIG RESETSTAT");
	freeReplyObject(rep);
	struct consumer *c = start_cfg(&cfg);
	rep = redis_command(r, "XADD s-stale 5-1 event {\"kind\":\"mark\"}");
	freeReplyObject(rep);
	struct done_arg da = {r, "s-stale", "5-1"};
	CHECK(wait_until(10000, done_is, &da));
	CHECK_INT(calls_count("m-mark/"), 0);
	CHECK_INT(cmd_calls(r, "hgetall"), 1);
	CHECK_INT(it_xlen(r, "relay:s-stale:dlq"), 0);
	consumer_stop(c);
	consumer_free(c);
	registry_free(reg);
	redis_free(r);
	free(k);
}

/* SCRIPT FLUSH while a handler runs: the next claim, its outcome and a
 * dead-lettering all go through (EVALSHA answered NOSCRIPT, EVAL once). */
/*
 * A retry waiting out its backoff is in the retry index and nobody touches
 * it before it is due: the reclaim (every 200 ms here, for entries idle
 * 300 ms) used to claim and release it on every pass (one more delivery
 * each). Then the retrier starts it on time: attempt 2 no earlier than its
 * due time and, on an idle machine, well within 1.5 s of it.
 */
TEST(a_waiting_retry_is_left_alone_until_due_then_started_on_time)
{
	calls_reset();
	struct registry *reg = load_registry();
	struct redis *r = it_conn(&R);
	REQUIRE(it_ensure_group(r, "s-due", "g") == 0);
	char *ev = xasprintf(EV, "flaky");
	char *id = xadd(r, "s-due", ev);
	REQUIRE(id);
	struct consumer *c = start_backoff(reg, "s-due", 16, 4, 3 * NS_PER_SEC);
	struct count_arg ca = {"i-flaky/flaky.x#1@", 1};
	REQUIRE(wait_until(10000, count_is, &ca));
	int64_t s1, e1;
	REQUIRE(call_times("i-flaky/flaky.x#1@", &s1, &e1));
	char *key = invocation_retry_key("s-due", "g");
	redisReply *rep = NULL;
	/* The index holds it as soon as the failure is recorded. */
	for (int i = 0; i < 100; i++) {
		freeReplyObject(rep);
		rep = redis_command(r, "ZSCORE %s %s", key, id);
		if (rep && rep->type == REDIS_REPLY_STRING)
			break;
		usleep(20000);
	}
	REQUIRE(rep && rep->type == REDIS_REPLY_STRING);
	int64_t due_ms = strtoll(rep->str, NULL, 10);
	freeReplyObject(rep);
	/* 2 s: ten reclaim passes over an entry idle for long enough. */
	usleep(2000000);
	CHECK_INT(deliveries(r, "s-due", id), 1);
	CHECK_INT(calls_count("i-flaky/flaky.x#2@"), 0);
	struct done_arg da = {r, "s-due", id};
	REQUIRE(wait_until(15000, done_is, &da));
	int64_t s2, e2;
	REQUIRE(call_times("i-flaky/flaky.x#2@", &s2, &e2));
	CHECK(s2 >= due_ms * NS_PER_MS - RUNNER_CLOCK_SKEW_MS * NS_PER_MS);
	if (s2 - due_ms * NS_PER_MS > 1500 * NS_PER_MS)
		T_FAIL_("attempt 2 started %lld ms after it was due",
			(long long)((s2 - due_ms * NS_PER_MS) / NS_PER_MS));
	CHECK_INT(calls_count("i-flaky/flaky.x#3@"), 1);
	rep = redis_command(r, "ZCARD %s", key);
	CHECK(rep && rep->type == REDIS_REPLY_INTEGER && rep->integer == 0);
	freeReplyObject(rep);
	consumer_stop(c);
	consumer_free(c);
	registry_free(reg);
	redis_free(r);
	free(key), free(ev), free(id);
}

/* consumers_prune's premise helper: XREADGROUP of everything new as
 * consumer name (then, with ack, XACK of what it got). */
static void read_as(struct redis *r, const char *stream, const char *name, bool ack)
{
	redisReply *rep = redis_command(r, "XREADGROUP GROUP g %s COUNT 100 STREAMS %s >", name,
					stream);
	if (ack && rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 1) {
		redisReply *es = rep->element[0]->element[1];
		for (size_t i = 0; i < es->elements; i++) {
			redisReply *a = redis_command(r, "XACK %s g %s", stream,
						      es->element[i]->element[0]->str);
			freeReplyObject(a);
		}
	}
	freeReplyObject(rep);
}

static bool has_consumer(struct redis *r, const char *stream, const char *name)
{
	redisReply *rep = redis_command(r, "XINFO CONSUMERS %s g", stream);
	bool found = false;
	for (size_t i = 0; rep && rep->type == REDIS_REPLY_ARRAY && i < rep->elements; i++) {
		redisReply *e = rep->element[i];
		for (size_t k = 0; k + 1 < e->elements; k += 2)
			if (strcmp(e->element[k]->str, "name") == 0 &&
			    strcmp(e->element[k + 1]->str, name) == 0)
				found = true;
	}
	freeReplyObject(rep);
	return found;
}

struct gone_arg {
	struct redis *r;
	const char *stream, *name;
};

static bool consumer_gone(void *a)
{
	struct gone_arg *g = a;
	return !has_consumer(g->r, g->stream, g->name);
}

/*
 * After a reclaim pass, the consumer of a gone worker (no pending entry,
 * no liveness record) is deleted; one that still owns an entry (a retry
 * waiting in the index, which the reclaim leaves alone) and one whose
 * liveness record is alive are kept.
 */
TEST(consumers_of_gone_workers_are_deleted_and_no_other)
{
	calls_reset();
	metrics_reset_for_tests();
	struct registry *reg = load_registry();
	struct redis *r = it_conn(&R);
	REQUIRE(it_ensure_group(r, "s-gone", "g") == 0);
	char *ev = xasprintf(EV, "nomatch-at-all");
	char *a = xadd(r, "s-gone", ev);
	read_as(r, "s-gone", "gone-empty", true);
	char *b = xadd(r, "s-gone", ev);
	read_as(r, "s-gone", "alive-empty", true);
	char *d = xadd(r, "s-gone", ev);
	read_as(r, "s-gone", "gone-pending", false);
	REQUIRE(a && b && d);
	char *key = invocation_retry_key("s-gone", "g");
	redisReply *rep = redis_command(r, "ZADD %s 99999999999999 %s", key, d);
	freeReplyObject(rep);
	char *live = liveness_key("s-gone", "g", "alive-empty");
	rep = redis_command(r, "SET %s instance=x PX 60000", live);
	freeReplyObject(rep);
	/* The premise: three consumers, one of them owning an entry. */
	REQUIRE(has_consumer(r, "s-gone", "gone-empty") && has_consumer(r, "s-gone", "alive-empty") &&
		has_consumer(r, "s-gone", "gone-pending"));
	struct consumer *c = start(reg, "s-gone", 16, 4);
	struct gone_arg ga = {r, "s-gone", "gone-empty"};
	CHECK(wait_until(10000, consumer_gone, &ga));
	/* Five more passes (200 ms each) leave the others. */
	usleep(1000000);
	CHECK(has_consumer(r, "s-gone", "alive-empty"));
	CHECK(has_consumer(r, "s-gone", "gone-pending"));
	CHECK_INT(metrics_counter_value(METRIC_CONSUMERS_DELETED), 1);
	consumer_stop(c);
	consumer_free(c);
	registry_free(reg);
	redis_free(r);
	free(key), free(live), free(ev), free(a), free(b), free(d);
}

TEST(scripts_flushed_mid_run_are_reloaded)
{
	calls_reset();
	struct registry *reg = load_registry();
	struct redis *r = it_conn(&R);
	REQUIRE(it_ensure_group(r, "s-flush", "g") == 0);
	struct consumer_config cfg = base_cfg(reg, "s-flush", 16, 1, 300 * NS_PER_MS);
	cfg.reclaim_interval_ns = 3600 * NS_PER_SEC;
	struct consumer *c = start_cfg(&cfg);
	char *a = xadd(r, "s-flush", "{\"kind\":\"flush\"}");
	struct done_arg da = {r, "s-flush", a};
	REQUIRE(wait_until(10000, done_is, &da));
	/* flushed again: the DLQ script after it */
	char *b = xadd(r, "s-flush", "{\"kind\":\"flushfail\"}");
	struct done_arg db = {r, "s-flush", b};
	CHECK(wait_until(10000, done_is, &db));
	CHECK_INT(it_xlen(r, "relay:s-flush:dlq"), 1);
	redisReply *rep = redis_command(r, "CONFIG RESETSTAT");
	freeReplyObject(rep);
	rep = redis_command(r, "SCRIPT FLUSH");
	freeReplyObject(rep);
	char *d = xadd(r, "s-flush", "{\"kind\":\"mark\"}");
	struct done_arg dd = {r, "s-flush", d};
	CHECK(wait_until(10000, done_is, &dd));
	CHECK_INT(cmd_calls(r, "eval"), 1); /* the claim, reloaded once */
	CHECK_INT(calls_count("n-flush/flush.n#1@"), 1);
	CHECK_INT(calls_count("n-flush/flush.fail#1@"), 1);
	CHECK_INT(calls_count("n-flush/"), 2);
	consumer_stop(c);
	consumer_free(c);
	registry_free(reg);
	redis_free(r);
	free(a), free(b), free(d);
}

/*
 * The crash window of the fast path: the handler succeeded, its ok marker
 * is written, the XACK never happens (a Redis user that may not XACK or
 * DEL stands for a crash right there). Another consumer reclaims the
 * message, finds ok and acknowledges it: the handler never runs again.
 */
TEST(success_before_the_ack_never_reruns_the_handler)
{
	calls_reset();
	struct registry *reg = load_registry();
	struct redis *r = it_conn(&R);
	REQUIRE(it_ensure_group(r, "s-noack", "g") == 0);
	redisReply *rep = redis_command(r, "ACL SETUSER noack on >pw ~* &* +@all -xack -del");
	REQUIRE(rep && rep->type == REDIS_REPLY_STATUS);
	freeReplyObject(rep);
	struct redis_uri uri;
	char *why = NULL;
	char *u = xasprintf("redis://noack:pw@127.0.0.1:%d", R.port);
	REQUIRE(redis_uri_parse(u, &uri, &why) == 0);
	struct consumer_config cfg = base_cfg(reg, "s-noack", 16, 2, 300 * NS_PER_MS);
	cfg.uri = &uri;
	cfg.reclaim_interval_ns = 3600 * NS_PER_SEC;
	cfg.min_pending_idle_ns = 3600 * NS_PER_SEC;
	struct consumer *c = start_cfg(&cfg);
	char *id = xadd(r, "s-noack", "{\"kind\":\"mark\"}");
	struct count_arg ca = {"m-mark/mark.m#1@", 1};
	REQUIRE(wait_until(10000, count_is, &ca));
	char *k = invocation_key("s-noack", "g", id);
	for (int i = 0; i < 250; i++) {
		char *v = hget(r, k, "m-mark/mark.m");
		bool ok = v && strcmp(v, "ok") == 0;
		free(v);
		if (ok)
			break;
		usleep(20000);
	}
	char *v = hget(r, k, "m-mark/mark.m");
	CHECK(v && strcmp(v, "ok") == 0);
	free(v);
	consumer_stop(c);
	consumer_free(c);
	CHECK_INT(it_pending(r, "s-noack"), 1);
	struct consumer_config cfg2 = base_cfg(reg, "s-noack", 16, 2, 300 * NS_PER_MS);
	cfg2.consumer = "worker-2";
	cfg2.min_pending_idle_ns = 1;
	c = start_cfg(&cfg2);
	struct done_arg da = {r, "s-noack", id};
	CHECK(wait_until(10000, done_is, &da));
	CHECK_INT(calls_count("m-mark/"), 1);
	consumer_stop(c);
	consumer_free(c);
	redis_uri_free(&uri);
	registry_free(reg);
	redis_free(r);
	free(u), free(k), free(id);
}

int main(int argc, char **argv)
{
	log_set_level(LOG_WARN);
	snprintf_(fdir, sizeof fdir, "/tmp/relay-itfn.XXXXXX");
	if (!mkdtemp(fdir) || it_redis_start(&R, NULL) < 0) {
		printf("FAIL consumer/setup (redis-server)\n");
		return 1;
	}
	write_fn(
		"a-first",
		"runtime: python3.14\nevents:\n  - handler: ok.one\n    pattern: {kind: [good]}\n");
	write_fn("b-second",
		 "runtime: node24\nevents:\n  - handler: ok.two\n    pattern: {kind: [good]}\n");
	write_fn("c-fail", "runtime: python3.14\nevents:\n"
			   "  - handler: ok.before\n    pattern: {kind: [bad]}\n"
			   "  - handler: fail.mid\n    pattern: {kind: [bad]}\n    retries: 2\n"
			   "  - handler: ok.after\n    pattern: {kind: [bad]}\n");
	write_fn("d-once", "runtime: python3.14\nevents:\n  - handler: fail.zero\n    pattern: "
			   "{kind: [once]}\n    retries: 0\n");
	write_fn("e-slow", "runtime: python3.14\nconcurrency: 1\nevents:\n  - handler: slow.a\n    "
			   "pattern: {kind: [slow]}\n");
	write_fn("f-slowb", "runtime: python3.14\nconcurrency: 2\nevents:\n  - handler: slow.b\n   "
			    " pattern: {kind: [slowb]}\n");
	write_fn("g-wide", "runtime: python3.14\nconcurrency: 8\nevents:\n  - handler: slow.w\n    "
			   "pattern: {kind: [wide]}\n");
	write_fn("i-flaky", "runtime: python3.14\nevents:\n  - handler: flaky.x\n    pattern: "
			    "{kind: [flaky]}\n");
	write_fn("h-wideb", "runtime: node24\nconcurrency: 8\nevents:\n  - handler: slow.w\n    "
			    "pattern: {kind: [wideb]}\n");
	write_fn("j-hot", "runtime: python3.14\nconcurrency: 2\nevents:\n  - handler: nap.j\n    "
			  "pattern: {kind: [hot]}\n");
	write_fn("k-other", "runtime: python3.14\nevents:\n  - handler: ok.k\n    "
			    "pattern: {kind: [other]}\n");
	write_fn("m-mark", "runtime: python3.14\nevents:\n  - handler: mark.m\n    "
			   "pattern: {kind: [mark]}\n");
	write_fn("n-flush", "runtime: python3.14\nevents:\n  - handler: flush.n\n    "
			    "pattern: {kind: [flush]}\n  - handler: flush.fail\n    "
			    "pattern: {kind: [flushfail]}\n    retries: 0\n");
	static const struct t_case cases[] = {
		T_CASE(ack_only_after_all_matches_succeed),
		T_CASE(failure_leaves_pending_and_stops_later_rules_then_retries_and_dlq),
		T_CASE(retries_zero_goes_to_dlq_on_first_failure),
		T_CASE(redelivery_skips_ok_and_respects_markers),
		T_CASE(malformed_events_go_to_dlq_without_running_anything),
		T_CASE(dlq_write_failure_keeps_message_pending_until_fixed),
		T_CASE(backpressure_bounds_buffer_and_per_function_concurrency),
		T_CASE(global_concurrency_bound_binds_above_per_function_limits),
		T_CASE(backlog_gauges_sampled_from_xpending),
		T_CASE(try_start_refuses_an_acknowledged_message),
		T_CASE(dead_letter_only_while_pending),
		T_CASE(the_reader_decodes_outside_the_consumer_lock),
		T_CASE(an_entry_over_the_entry_limit_is_dead_lettered_without_reading_it),
		T_CASE(an_entry_over_the_reply_cap_neither_stops_reading_nor_retries),
		T_CASE(reclaim_goes_past_a_pending_entry_over_the_reply_cap),
		T_CASE(a_too_large_entry_whose_dlq_write_fails_stays_pending_until_it_can),
		T_CASE(a_batch_over_the_reply_cap_is_read_in_parts),
		T_CASE(reads_and_reclaims_stay_within_the_byte_budget),
		T_CASE(an_idle_reader_wakes_when_an_entry_arrives),
		T_CASE(a_legal_entry_with_a_large_foreign_field_is_recovered_and_runs),
		T_CASE(an_entry_of_many_small_fields_is_recovered_and_runs_its_last_event),
		T_CASE(outcome_lines_name_the_message_whatever_the_level),
		T_CASE(a_burst_for_one_function_waits_locally_and_leaves_other_functions_alone),
		T_CASE(shutdown_leaves_waiting_plans_pending_uncharged),
		T_CASE(a_fresh_first_attempt_success_is_one_claim_and_one_record),
		T_CASE(a_stale_state_key_on_a_fresh_message_is_loaded_and_never_reruns),
		T_CASE(scripts_flushed_mid_run_are_reloaded),
		T_CASE(success_before_the_ack_never_reruns_the_handler),
		T_CASE(a_waiting_retry_is_left_alone_until_due_then_started_on_time),
		T_CASE(consumers_of_gone_workers_are_deleted_and_no_other),
	};
	int rc = t_run_(__FILE__, cases, sizeof cases / sizeof cases[0], argc, argv);
	calls_reset();
	free(mark_seen);
	it_redis_cleanup(&R);
	char *cmd = xasprintf("rm -rf '%s'", fdir);
	if (system(cmd) != 0)
		rc = 1;
	free(cmd);
	return rc;
}
