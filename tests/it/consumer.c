/*
 * The consumer against a real redis-server, in process, with the fixed
 * intervals shortened (the config struct's zero fields are the production
 * defaults). The executor here is scripted by handler name instead of
 * running containers: these cases assert the delivery protocol — what is in
 * Redis (PEL, invocation hashes, DLQ) and how often each handler ran. The
 * Docker-backed paths are covered by the engine and black-box tests.
 *
 * Handlers: ok.* succeed, fail.* fail, slow.* sleep 150 ms then succeed,
 * flaky.* fail until attempt 3. Each call's start and end (wall clock) are
 * recorded, so timing checks are bounded by observed instants.
 *
 * "Acknowledged" is always the group's state (it_group_done): last-delivered-id
 * is the newest entry, lag 0 and nothing pending — pending 0 alone also holds
 * for a message nobody has read.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "consumer.h"
#include "duration.h"
#include "function.h"
#include "invocation.h"
#include "itlib.h"
#include "log.h"
#include "metrics.h"
#include "t.h"

static struct itredis R;
static char fdir[64];

struct calls {
	pthread_mutex_t lock;
	char *names[4096];
	int64_t started[4096], ended[4096]; /* wall clock, ns */
	int n;
	atomic_int running, max_running;
	atomic_int fn_running[8], fn_max[8];
};
static struct calls calls = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void calls_reset(void)
{
	pthread_mutex_lock(&calls.lock);
	for (int i = 0; i < calls.n; i++)
		free(calls.names[i]);
	calls.n = 0;
	pthread_mutex_unlock(&calls.lock);
	atomic_store(&calls.max_running, 0);
	for (int i = 0; i < 8; i++)
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
	if (idx < 0 || idx >= 8)
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
			fvs[n++] = fn_version_new(scan.v[i].fn, NULL, NULL);
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
static struct consumer *start_backoff(struct registry *reg, const char *stream, int buffered,
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
		.slot_wait_ns = 2 * NS_PER_SEC,
		.backoff_ns = {first_backoff_ns, 300 * NS_PER_MS, 300 * NS_PER_MS, 300 * NS_PER_MS},
		.block_ms = 100,
		.sample_interval_ns = 100 * NS_PER_MS,
		.registry = reg,
		.invoke = invoke,
	};
	struct redis *r = it_conn(&R);
	char err[256];
	consumer_ensure_group(r, stream, "g", err, sizeof err);
	redis_free(r);
	return consumer_start(&cfg);
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

static long long pending(struct redis *r, const char *stream)
{
	redisReply *rep = redis_command(r, "XPENDING %s g", stream);
	long long n = rep && rep->type == REDIS_REPLY_ARRAY && rep->elements > 0
			      ? rep->element[0]->integer
			      : -1;
	if (rep)
		freeReplyObject(rep);
	return n;
}

static long long xlen(struct redis *r, const char *stream)
{
	redisReply *rep = redis_command(r, "XLEN %s", stream);
	long long n = rep && rep->type == REDIS_REPLY_INTEGER ? rep->integer : -1;
	if (rep)
		freeReplyObject(rep);
	return n;
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
	return pending(p->r, p->stream) == p->want;
}
struct len_arg {
	struct redis *r;
	const char *key;
	long long want;
};
static bool len_is(void *a)
{
	struct len_arg *p = a;
	return xlen(p->r, p->key) == p->want;
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
	return it_group_done(p->r, p->stream, "g", p->id) && pending(p->r, p->stream) == 0;
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
	CHECK_INT(pending(r, "s2"), 1);
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
	REQUIRE(f->elements == 16);
	static const char *const names[] = {"original_stream", "original_id", "group",
					    "consumer",	       "event",	      "reason",
					    "attempts",	       "timestamp"};
	for (size_t i = 0; i < 8; i++)
		CHECK_STR(f->element[2 * i]->str, names[i]);
	CHECK_STR(f->element[1]->str, "s2");
	CHECK_STR(f->element[3]->str, id);
	CHECK_STR(f->element[5]->str, "g");
	CHECK_STR(f->element[7]->str, "worker-1");
	CHECK_STR(f->element[9]->str, ev);
	CHECK(strstr(f->element[11]->str, "c-fail/fail.mid exhausted after 3 attempt(s)") != NULL);
	CHECK(strstr(f->element[11]->str, "exited with status 1") != NULL);
	CHECK_STR(f->element[13]->str, "3");
	CHECK(strlen(f->element[15]->str) == 20 && f->element[15]->str[19] == 'Z');
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
	char err[128];
	consumer_ensure_group(r, "s4", "g", err, sizeof err);
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
	CHECK_INT(pending(r, "s4"), 2);
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
	CHECK_INT(pending(r, "s6"), 1);
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
	volatile int stop;
};
static void *watch_buffer(void *a)
{
	struct max_arg *m = a;
	while (!m->stop) {
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
	char err[128];
	consumer_ensure_group(r, "s7", "g", err, sizeof err);
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
		long long p = pending(r, "s7");
		if (p > max_pel)
			max_pel = p;
		if (calls_count("") >= 200)
			break;
		usleep(20000);
	}
	struct count_arg ca = {"", 200};
	CHECK(wait_until(20000, count_is, &ca));
	ma.stop = 1;
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
	char err[128];
	REQUIRE(consumer_ensure_group(r, "s11", "g", err, sizeof err) == 0);
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
	char err[128];
	consumer_ensure_group(r, "s8", "g", err, sizeof err);
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
	char err[128];
	REQUIRE(consumer_ensure_group(r, "s9", "g", err, sizeof err) == 0);
	char *id = xadd(r, "s9", "{\"kind\":\"none\"}");
	REQUIRE(id);
	redisReply *rep = redis_command(r, "XREADGROUP GROUP g w COUNT 1 STREAMS s9 >");
	freeReplyObject(rep);
	char *key = invocation_key("s9", "g", id);
	CHECK_INT(invocation_try_start(r, key, "f/h.a", NULL, "running:1#1", "s9", "g", id), 1);
	CHECK_INT(invocation_try_start(r, key, "f/h.a", NULL, "running:2#1", "s9", "g", id), 0);
	rep = redis_command(r, "XACK s9 g %s", id);
	freeReplyObject(rep);
	rep = redis_command(r, "DEL %s", key);
	freeReplyObject(rep);
	CHECK_INT(invocation_try_start(r, key, "f/h.a", NULL, "running:3#1", "s9", "g", id), 2);
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
	char err[256] = "";
	REQUIRE(consumer_ensure_group(r, "s10", "g", err, sizeof err) == 0);
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
	CHECK_INT(invocation_dead_letter(r, "s10", "g", "s10:dlq", id, entry, lens, 4, err,
					 sizeof err),
		  -1);
	CHECK(strstr(err, "WRONGTYPE") != NULL);
	CHECK_INT(pending(r, "s10"), 1);
	rep = redis_command(r, "DEL s10:dlq");
	freeReplyObject(rep);
	CHECK_INT(invocation_dead_letter(r, "s10", "g", "s10:dlq", id, entry, lens, 4, err,
					 sizeof err),
		  1);
	CHECK_INT(pending(r, "s10"), 0);
	rep = redis_command(r, "EXISTS %s", key);
	CHECK(rep && rep->type == REDIS_REPLY_INTEGER && rep->integer == 0);
	freeReplyObject(rep);
	rep = redis_command(r, "XRANGE s10:dlq - +");
	REQUIRE(rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 1);
	const redisReply *f = rep->element[0]->element[1];
	REQUIRE(f->elements == 4);
	CHECK(f->element[1]->len == 3 && memcmp(f->element[1]->str, "a\0b", 3) == 0);
	freeReplyObject(rep);
	CHECK_INT(invocation_dead_letter(r, "s10", "g", "s10:dlq", id, entry, lens, 4, err,
					 sizeof err),
		  0);
	rep = redis_command(r, "XLEN s10:dlq");
	CHECK(rep && rep->type == REDIS_REPLY_INTEGER && rep->integer == 1);
	freeReplyObject(rep);
	redis_free(r);
	free(key);
	free(id);
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
	write_fn("h-wideb", "runtime: node24\nconcurrency: 8\nevents:\n  - handler: slow.w\n    "
			    "pattern: {kind: [wideb]}\n");
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
	};
	int rc = t_run_(__FILE__, cases, sizeof cases / sizeof cases[0], argc, argv);
	calls_reset();
	it_redis_cleanup(&R);
	char *cmd = xasprintf("rm -rf '%s'", fdir);
	if (system(cmd) != 0)
		rc = 1;
	free(cmd);
	return rc;
}
