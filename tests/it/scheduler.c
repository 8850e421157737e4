/*
 * The cron scheduler and the consumer's schedule routing against a real
 * redis-server, in process (scheduler.h, consumer.c). Time is real: the
 * schedules here fire every second, so each case runs for a second or
 * three. The executor is scripted by handler name as in consumer.c: ok.*
 * succeed, fail.* fail.
 *
 * Cases: the publish-if-new script (fields, dedup, TTL; a wrong-type
 * stream refused before the dedup key is set; the dedup key rolled back
 * when the XADD fails after it); the catch-up policy (a start in the past publishes
 * only what is within the 2 s grace; a fresh start only what is strictly
 * after it); two schedulers on one stream publish each occurrence once;
 * live changes through new registry snapshots; the consumer routing an
 * occurrence to exactly its schedule handler without moving the event
 * counters, with retries and DLQ; obsolete occurrences (fresh, and pending
 * then reclaimed) ACKed with an INFO line.
 */
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>

#include "engine/consumer.h"
#include "base/duration.h"
#include "model/function.h"
#include "itlib.h"
#include "base/log.h"
#include "engine/metrics.h"
#include "base/rfc3339.h"
#include "engine/scheduler.h"
#include "t.h"
#include "tfiles.h"

static struct itredis R;
static char fdir[64];
static char logpath[96];
static int logfd = -1;

/* ---- fixtures ----------------------------------------------------------- */

static void write_fn(const char *dir, const char *name, const char *tpl)
{
	char *d = xasprintf("%s/%s", dir, name);
	mkdir(dir, 0755);
	mkdir(d, 0755);
	char *p = xasprintf("%s/template.yaml", d);
	FILE *f = fopen(p, "w");
	fputs(tpl, f);
	fclose(f);
	free(p);
	free(d);
}

/* Publishes a snapshot of every function under fdir/<sub>. */
static void publish_dir(struct registry *reg, const char *sub)
{
	char *dir = xasprintf("%s/%s", fdir, sub);
	struct function_scan scan;
	char *err = NULL;
	struct fn_version **fvs = NULL;
	size_t n = 0;
	if (function_scan_dir(dir, &scan, &err) == 0) {
		fvs = xcalloc(scan.n + 1, sizeof *fvs);
		for (size_t i = 0; i < scan.n; i++) {
			if (scan.v[i].fn) {
				fvs[n++] = registry_fn_version_new(scan.v[i].fn, NULL, NULL);
				scan.v[i].fn = NULL;
			} else if (scan.v[i].status == FUNCTION_INVALID) {
				printf("  invalid fixture %s: %s\n", scan.v[i].name,
				       scan.v[i].errors.v[0]);
			}
		}
		function_scan_free(&scan);
	} else {
		printf("  cannot scan %s: %s\n", dir, err ? err : "");
		free(err);
		fvs = xcalloc(1, sizeof *fvs);
	}
	registry_publish(reg, fvs, n);
	free(dir);
}

static struct scheduler *sched(struct registry *reg, const char *stream, int64_t start_ns)
{
	struct scheduler_config cfg = {.uri = &R.uri,
				       .stream = stream,
				       .registry = reg,
				       .poll_ns = 100 * NS_PER_MS,
				       .start_ns = start_ns};
	return scheduler_start(&cfg);
}

/* Log lines go to a file the cases grep. */
static void log_to_file(void)
{
	snprintf_(logpath, sizeof logpath, "%s/relay.log", fdir);
	logfd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
	log_set_fd(logfd);
}

static int log_count(const char *needle)
{
	int n = t_count_lines_with(logpath, needle);
	return n < 0 ? 0 : n; /* no log yet: nothing logged */
}

/* A connection to an empty database: each case sets up every key it
 * reads. Occurrences of the same function and second share one dedup key
 * whatever the stream, so a case must not see an earlier case's keys. */
static struct redis *clean_conn(void)
{
	struct redis *r = it_conn(&R);
	if (!r)
		return NULL;
	redisReply *rep = redis_command(r, "FLUSHDB");
	bool ok = rep && rep->type == REDIS_REPLY_STATUS;
	if (rep)
		freeReplyObject(rep);
	if (!ok) {
		redis_free(r);
		return NULL;
	}
	return r;
}

/* ---- the stream as published ------------------------------------------- */

struct occ {
	char id[64];
	char event[512];
	char function[64];
	char handler[64];
	char occurrence[160];
	int64_t at; /* scheduled_at, Unix seconds */
	int nfields;
};

/* Reads every entry of stream (at most max) into out; returns how many. */
static int read_stream(struct redis *r, const char *stream, struct occ *out, int max)
{
	redisReply *rep = redis_command(r, "XRANGE %s - +", stream);
	int n = 0;
	for (size_t i = 0; rep && rep->type == REDIS_REPLY_ARRAY && i < rep->elements && n < max;
	     i++) {
		const redisReply *e = rep->element[i];
		struct occ *o = &out[n++];
		memset(o, 0, sizeof *o);
		o->at = -1;
		snprintf_(o->id, sizeof o->id, "%s", e->element[0]->str);
		const redisReply *f = e->element[1];
		o->nfields = (int)f->elements;
		for (size_t k = 0; k + 1 < f->elements; k += 2)
			if (strcmp(f->element[k]->str, "event") == 0)
				snprintf_(o->event, sizeof o->event, "%s", f->element[k + 1]->str);
		/* The routing keys live in the event (the original's format). */
		json_t *j = json_loads(o->event, 0, NULL);
		snprintf_(o->function, sizeof o->function, "%s",
			  json_string_value(json_object_get(j, "function")) ?: "");
		snprintf_(o->handler, sizeof o->handler, "%s",
			  json_string_value(json_object_get(j, "handler")) ?: "");
		snprintf_(o->occurrence, sizeof o->occurrence, "%s",
			  json_string_value(json_object_get(j, "occurrence_id")) ?: "");
		json_decref(j);
		const char *p = strstr(o->event, "\"scheduled_at\":\"");
		int32_t ns;
		if (p && rfc3339_parse(p + 16, 20, &o->at, &ns) < 0)
			o->at = -1;
	}
	if (rep)
		freeReplyObject(rep);
	return n;
}

static long long integer(struct redis *r, const char *fmt, const char *arg)
{
	redisReply *rep = redis_command(r, fmt, arg);
	long long n = rep && rep->type == REDIS_REPLY_INTEGER ? rep->integer : -999;
	if (rep)
		freeReplyObject(rep);
	return n;
}

/* Checks that the occurrences of (function, handler) in o[0..n) are
 * distinct and every step seconds apart; returns how many there are and
 * their first/last instants. */
static int check_series(const struct occ *o, int n, const char *function, const char *handler,
			int step, int64_t *first, int64_t *last)
{
	int k = 0;
	int64_t prev = -1;
	*first = *last = -1;
	for (int i = 0; i < n; i++) {
		if (strcmp(o[i].function, function) != 0 || strcmp(o[i].handler, handler) != 0)
			continue;
		if (prev >= 0 && o[i].at != prev + step) {
			T_FAIL_("%s/%s: occurrence %" PRId64 " follows %" PRId64 " (want +%d s)",
				function, handler, o[i].at, prev, step);
		}
		if (*first < 0)
			*first = o[i].at;
		*last = prev = o[i].at;
		k++;
	}
	return k;
}

/* ---- cases: publication ------------------------------------------------- */

TEST(publish_script_deduplicates_and_writes_the_documented_fields)
{
	struct redis *r = clean_conn();
	REQUIRE(r);
	char id[64] = "";
	char *err = NULL;
	const int64_t at = 1774746000; /* 2026-03-29T01:00:00Z */
	CHECK_INT(schedule_publish(r, "pub", "fn-a", "jobs.h", at, id, sizeof id, &err),
		  SCHEDULE_PUBLISHED);
	CHECK(id[0] != '\0');
	CHECK_INT(schedule_publish(r, "pub", "fn-a", "jobs.h", at, NULL, 0, &err),
		  SCHEDULE_DUPLICATE);
	CHECK_INT(schedule_publish(r, "pub", "fn-a", "jobs.h", at + 1, NULL, 0, &err),
		  SCHEDULE_PUBLISHED);
	struct occ o[4];
	REQUIRE(read_stream(r, "pub", o, 4) == 2);
	CHECK_STR(o[0].id, id);
	CHECK_INT(o[0].nfields, 2); /* one field, event */
	CHECK_STR(o[0].event,
		  "{\"function\":\"fn-a\",\"handler\":\"jobs.h\",\"occurrence_id\":\"schedule:fn-a:"
		  "jobs.h:2026-03-29T01:00:00Z\",\"scheduled_at\":\"2026-03-29T01:00:00Z\","
		  "\"source\":"
		  "\"relay.schedule\"}");
	CHECK_STR(o[0].function, "fn-a");
	CHECK_STR(o[0].handler, "jobs.h");
	CHECK_STR(o[0].occurrence, "schedule:fn-a:jobs.h:2026-03-29T01:00:00Z");
	CHECK_STR(o[1].occurrence, "schedule:fn-a:jobs.h:2026-03-29T01:00:01Z");
	long long ttl =
		integer(r, "PTTL %s", "relay:schedule:schedule:fn-a:jobs.h:2026-03-29T01:00:00Z");
	CHECK(ttl > 604700000 && ttl <= 604800000);
	/* The key holds the occurrence id, as the original writes it. */
	redisReply *rep = redis_command(r, "GET %s",
					"relay:schedule:schedule:fn-a:jobs.h:2026-03-29T01:00:00Z");
	CHECK(rep && rep->type == REDIS_REPLY_STRING &&
	      strcmp(rep->str, "schedule:fn-a:jobs.h:2026-03-29T01:00:00Z") == 0);
	if (rep)
		freeReplyObject(rep);
	redis_free(r);
	free(err);
}

/* Never a dedup key without its entry: a stream key of the wrong type
 * fails the publish and leaves no dedup key. */
TEST(a_wrong_type_stream_fails_the_publish_and_leaves_no_dedup_key)
{
	struct redis *r = clean_conn();
	REQUIRE(r);
	redisReply *rep = redis_command(r, "SET notastream x");
	freeReplyObject(rep);
	char *err = NULL;
	CHECK_INT(schedule_publish(r, "notastream", "fn-b", "jobs.h", 1774746000, NULL, 0, &err),
		  SCHEDULE_PUBLISH_FAILED);
	CHECK(strstr(err, "WRONGTYPE") != NULL);
	CHECK_INT(
		integer(r, "EXISTS %s", "relay:schedule:schedule:fn-b:jobs.h:2026-03-29T01:00:00Z"),
		0);
	redis_free(r);
	free(err);
}

/* The rollback: the dedup key is set, then the XADD fails (a stream whose
 * last id is the largest possible one cannot take a new entry), and the
 * script deletes the key again, so a later publish of the same occurrence
 * still goes through. */
TEST(a_failed_xadd_rolls_the_dedup_key_back)
{
	struct redis *r = clean_conn();
	REQUIRE(r);
	const char *key = "relay:schedule:schedule:fn-c:jobs.h:2026-03-29T01:00:00Z";
	redisReply *rep = redis_command(r, "DEL fullstream %s", key);
	freeReplyObject(rep);
	rep = redis_command(r, "XADD fullstream 18446744073709551615-18446744073709551615 k v");
	REQUIRE(rep && rep->type == REDIS_REPLY_STRING);
	freeReplyObject(rep);
	char *err = NULL;
	CHECK_INT(schedule_publish(r, "fullstream", "fn-c", "jobs.h", 1774746000, NULL, 0, &err),
		  SCHEDULE_PUBLISH_FAILED);
	CHECK(strstr(err, "exhausted the last possible ID") != NULL);
	free(err);
	err = NULL;
	CHECK_INT(integer(r, "EXISTS %s", key), 0);
	CHECK_INT(it_xlen(r, "fullstream"), 1);
	/* Once the stream can take entries again the occurrence is published,
	 * not reported as a duplicate. */
	rep = redis_command(r, "DEL fullstream");
	freeReplyObject(rep);
	CHECK_INT(schedule_publish(r, "fullstream", "fn-c", "jobs.h", 1774746000, NULL, 0, &err),
		  SCHEDULE_PUBLISHED);
	CHECK_INT(integer(r, "EXISTS %s", key), 1);
	CHECK_INT(it_xlen(r, "fullstream"), 1);
	redis_free(r);
	free(err);
}

/* Polls until stream has at least want entries (at most ms). */
static bool wait_xlen(struct redis *r, const char *stream, long long want, int ms)
{
	for (int i = 0; i < ms / 20; i++) {
		if (it_xlen(r, stream) >= want)
			return true;
		usleep(20000);
	}
	return it_xlen(r, stream) >= want;
}

/* The wall-clock instant (ns) of an auto-generated entry id "<ms>-<seq>",
 * rounded up to the end of its millisecond; -1 when unparsable. */
static int64_t id_time_ns_ceil(const char *id)
{
	char *end = NULL;
	long long ms = strtoll(id, &end, 10);
	if (!end || *end != '-')
		return -1;
	return ((int64_t)ms + 1) * NS_PER_MS;
}

static int64_t ceil_s(int64_t ns)
{
	return ns >= 0 ? (ns + NS_PER_SEC - 1) / NS_PER_SEC : -((-ns) / NS_PER_SEC);
}

TEST(catch_up_publishes_only_occurrences_within_the_grace)
{
	metrics_reset_for_tests();
	log_set_level(LOG_DEBUG);
	struct registry *reg = registry_new();
	publish_dir(reg, "tick");
	struct redis *r = clean_conn();
	REQUIRE(r);
	/* Started "10 s ago": as if the worker had stalled since then. */
	int64_t t0 = now_wall_ns();
	struct scheduler *s = sched(reg, "catchup", t0 - 10 * NS_PER_SEC);
	CHECK(wait_xlen(r, "catchup", 3, 10000));
	scheduler_stop(s);
	int64_t t1 = now_wall_ns();
	log_set_level(LOG_INFO);
	struct occ o[64];
	int n = read_stream(r, "catchup", o, 64);
	REQUIRE(n >= 3);
	int64_t first, last;
	CHECK_INT(check_series(o, n, "tick", "jobs.tick", 1, &first, &last), n);
	/* The first evaluation ran at some instant e between t0 and the first
	 * entry's XADD, and published exactly the occurrences at most 2 s late
	 * at e: the first one is ceil(e - 2 s), none of the 8 older ones. */
	int64_t pub_ns = id_time_ns_ceil(o[0].id);
	CHECK(first >= ceil_s(t0 - SCHEDULER_GRACE_NS));
	CHECK(first <= ceil_s(pub_ns - SCHEDULER_GRACE_NS));
	CHECK(last <= t1 / NS_PER_SEC);
	CHECK_INT(metrics_counter_value(METRIC_SCHEDULE_PUBLISHED), n);
	CHECK(log_count("schedule occurrence skipped") >= 1);
	redis_free(r);
	registry_free(reg);
}

TEST(a_fresh_start_publishes_only_occurrences_after_it)
{
	struct registry *reg = registry_new();
	publish_dir(reg, "tick");
	struct redis *r = clean_conn();
	REQUIRE(r);
	int64_t t0 = now_wall_ns();
	struct scheduler *s = sched(reg, "fresh", 0);
	int64_t t0b = now_wall_ns();
	CHECK(wait_xlen(r, "fresh", 2, 10000));
	scheduler_stop(s);
	struct occ o[64];
	int n = read_stream(r, "fresh", o, 64);
	int64_t first, last;
	CHECK_INT(check_series(o, n, "tick", "jobs.tick", 1, &first, &last), n);
	CHECK(n >= 2);
	/* The start instant is between t0 and t0b; the first occurrence is the
	 * first whole second after it. */
	CHECK(first >= t0 / NS_PER_SEC + 1);
	CHECK(first <= t0b / NS_PER_SEC + 1);
	redis_free(r);
	registry_free(reg);
}

TEST(two_workers_publish_each_occurrence_once)
{
	metrics_reset_for_tests();
	struct registry *reg = registry_new();
	publish_dir(reg, "tick");
	struct redis *r = clean_conn();
	REQUIRE(r);
	struct scheduler *a = sched(reg, "pair", 0), *b = sched(reg, "pair", 0);
	CHECK(wait_xlen(r, "pair", 3, 10000));
	scheduler_stop(a);
	scheduler_stop(b);
	struct occ o[64];
	int n = read_stream(r, "pair", o, 64);
	int64_t first, last;
	CHECK_INT(check_series(o, n, "tick", "jobs.tick", 1, &first, &last), n);
	CHECK(n >= 3);
	uint64_t pub = metrics_counter_value(METRIC_SCHEDULE_PUBLISHED);
	uint64_t dup = metrics_counter_value(METRIC_SCHEDULE_DUPLICATE);
	CHECK_INT(pub, n);
	CHECK(dup + 2 >= pub && dup <= pub);
	CHECK_INT(metrics_counter_value(METRIC_SCHEDULE_PUBLISH_FAILURE), 0);
	redis_free(r);
	registry_free(reg);
}

/* Waits (at most ms) until stream holds want entries of (function, handler). */
struct series_arg {
	struct redis *r;
	const char *stream, *function, *handler;
	int want;
};
static bool wait_series(const struct series_arg *a, int ms)
{
	struct occ o[64];
	for (int i = 0; i <= ms / 50; i++) {
		int n = read_stream(a->r, a->stream, o, 64), k = 0;
		for (int j = 0; j < n; j++)
			if (strcmp(o[j].function, a->function) == 0 &&
			    strcmp(o[j].handler, a->handler) == 0)
				k++;
		if (k >= a->want)
			return true;
		usleep(50000);
	}
	return false;
}

TEST(live_changes_replace_the_jobs_in_place)
{
	struct redis *r = clean_conn();
	REQUIRE(r);
	struct registry *reg = registry_new();
	publish_dir(reg, "live1");
	struct scheduler *s = sched(reg, "live", 0);
	struct series_arg sa = {r, "live", "lv", "jobs.a", 1};
	CHECK(wait_series(&sa, 10000));
	int64_t swap = now_wall_ns() / NS_PER_SEC;
	publish_dir(reg, "live2"); /* jobs.a -> jobs.b, new function lw */
	struct series_arg sb = {r, "live", "lv", "jobs.b", 2}, sc = {r, "live", "lw", "jobs.c", 1};
	CHECK(wait_series(&sb, 10000));
	CHECK(wait_series(&sc, 10000));
	int64_t removed = now_wall_ns() / NS_PER_SEC;
	publish_dir(reg, "live3"); /* no schedules any more */
	/* Two more whole seconds: occurrences removed + 2 and + 3 would have
	 * been due had the jobs survived the change. */
	while (now_wall_ns() < (removed + 3) * NS_PER_SEC + 300 * NS_PER_MS)
		usleep(50000);
	scheduler_stop(s);
	struct occ o[64];
	int n = read_stream(r, "live", o, 64);
	int64_t fa, la, fb, lb, fc, lc;
	int na = check_series(o, n, "lv", "jobs.a", 1, &fa, &la);
	int nb = check_series(o, n, "lv", "jobs.b", 1, &fb, &lb);
	int nc = check_series(o, n, "lw", "jobs.c", 2, &fc, &lc);
	CHECK_INT(na + nb + nc, n);
	CHECK(na >= 1 && la <= swap + 1);
	CHECK(nb >= 2 && fb >= swap && lb <= removed + 1);
	CHECK(nc >= 1 && fc % 2 == 0 && lc <= removed + 1);
	/* jobs.b picks up right where jobs.a stopped: no second lost. */
	CHECK(fb <= la + 1);
	redis_free(r);
	registry_free(reg);
}

/* ---- cases: the consumer ---------------------------------------------- */

struct calls {
	pthread_mutex_t lock;
	char *names[256];
	char *payloads[256];
	int64_t timeouts[256];
	int n;
};
static struct calls calls = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void calls_reset(void)
{
	pthread_mutex_lock(&calls.lock);
	for (int i = 0; i < calls.n; i++) {
		free(calls.names[i]);
		free(calls.payloads[i]);
	}
	calls.n = 0;
	pthread_mutex_unlock(&calls.lock);
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
	pthread_mutex_lock(&calls.lock);
	if (calls.n < 256) {
		calls.names[calls.n] =
			xasprintf("%s/%s#%d", req->fv->fn->name, req->handler, req->attempt);
		calls.payloads[calls.n] = xstrndup(req->payload, req->payload_len);
		calls.timeouts[calls.n] = req->timeout_ns;
		calls.n++;
	}
	pthread_mutex_unlock(&calls.lock);
	res->exit_code = 0;
	res->outcome = INVOKE_OK;
	if (strncmp(req->handler, "fail.", 5) == 0) {
		res->outcome = INVOKE_FAILED;
		res->exit_code = 1;
		snprintf_(res->error, sizeof res->error,
			  "function %s handler %s exited with status 1", req->fv->fn->name,
			  req->handler);
	}
}

static struct consumer *consumer(struct registry *reg, const char *stream)
{
	struct consumer_config cfg = {
		.uri = &R.uri,
		.stream = stream,
		.group = "g",
		.consumer = "worker-1",
		.max_buffered = 8,
		.max_concurrency = 2,
		.reclaim_interval_ns = 200 * NS_PER_MS,
		.min_pending_idle_ns = 300 * NS_PER_MS,
		.backoff_ns = {300 * NS_PER_MS, 300 * NS_PER_MS, 300 * NS_PER_MS, 300 * NS_PER_MS},
		.block_ms = 100,
		.registry = reg,
		.invoke = invoke,
	};
	struct redis *r = it_conn(&R);
	it_ensure_group(r, stream, "g");
	redis_free(r);
	return consumer_start(&cfg);
}

static bool settled(struct redis *r, const char *stream, long long dlq_want)
{
	char *dlq = xasprintf("relay:%s:dlq", stream);
	for (int i = 0; i < 400; i++) {
		redisReply *rep = redis_command(r, "XINFO GROUPS %s", stream);
		long long lag = -1;
		for (size_t k = 0; rep && rep->type == REDIS_REPLY_ARRAY && k < rep->elements;
		     k++) {
			const redisReply *g = rep->element[k];
			for (size_t j = 0; j + 1 < g->elements; j += 2)
				if (strcmp(g->element[j]->str, "lag") == 0 &&
				    g->element[j + 1]->type == REDIS_REPLY_INTEGER)
					lag = g->element[j + 1]->integer;
		}
		if (rep)
			freeReplyObject(rep);
		if (lag == 0 && it_pending(r, stream) == 0 && it_xlen(r, dlq) == dlq_want) {
			free(dlq);
			return true;
		}
		usleep(20000);
	}
	free(dlq);
	return false;
}

TEST(consumer_routes_an_occurrence_to_exactly_its_schedule_handler)
{
	metrics_reset_for_tests();
	calls_reset();
	struct registry *reg = registry_new();
	publish_dir(reg, "route");
	struct redis *r = clean_conn();
	REQUIRE(r);
	char *err = NULL;
	const int64_t at = 1774746000;
	/* The function also has a rule matching every event: an occurrence
	 * must never reach it. */
	CHECK_INT(schedule_publish(r, "rt", "ra", "ok.tick", at, NULL, 0, &err),
		  SCHEDULE_PUBLISHED);
	CHECK_INT(schedule_publish(r, "rt", "ra", "fail.tick", at, NULL, 0, &err),
		  SCHEDULE_PUBLISHED);
	CHECK_INT(schedule_publish(r, "rt", "ra", "gone.tick", at, NULL, 0, &err),
		  SCHEDULE_PUBLISHED);
	CHECK_INT(schedule_publish(r, "rt", "nofn", "ok.tick", at, NULL, 0, &err),
		  SCHEDULE_PUBLISHED);
	struct consumer *c = consumer(reg, "rt");
	CHECK(settled(r, "rt", 1));
	CHECK_INT(calls_count("ra/ok.tick#1"), 1);
	CHECK_INT(calls_count("ra/fail.tick#1"), 1);
	CHECK_INT(calls_count("ra/fail.tick#2"), 1); /* retries: 1 */
	CHECK_INT(calls_count("ra/ok.any"), 0);
	CHECK_INT(calls.n, 3);
	char *want = schedule_payload(at);
	for (int i = 0; i < calls.n; i++)
		CHECK_STR(calls.payloads[i], want);
	free(want);
	for (int i = 0; i < calls.n; i++)
		if (strncmp(calls.names[i], "ra/ok.tick", 10) == 0)
			CHECK_INT(calls.timeouts[i], 9 * NS_PER_SEC);
	CHECK_INT(log_count("scheduled occurrence obsolete"), 2);
	CHECK_INT(log_count("scheduled occurrence obsolete: its function or schedule handler no "
			    "longer exists; "
			    "acknowledging\" function=nofn"),
		  1);

	/* Not events: no event counter moved; handler metrics did. */
	CHECK_INT(metrics_counter_value(METRIC_EVENTS_RECEIVED), 0);
	CHECK_INT(metrics_counter_value(METRIC_EVENTS_PROCESSED), 0);
	CHECK_INT(metrics_counter_value(METRIC_HANDLER_SUCCESS), 1);
	CHECK_INT(metrics_counter_value(METRIC_HANDLER_FAILURE), 2);
	CHECK_INT(metrics_counter_value(METRIC_DLQ_ENTRIES), 1);
	struct metrics_global_snapshot g;
	struct metrics_function_snapshot *fs = NULL;
	size_t nfs = 0;
	metrics_snapshot(&g, &fs, &nfs);
	for (size_t i = 0; i < nfs; i++)
		if (strcmp(fs[i].function, "ra") == 0) {
			CHECK_INT(fs[i].events, 0);
			CHECK_INT(fs[i].successes, 1);
			CHECK_INT(fs[i].dlq_entries, 1);
		}
	metrics_snapshot_free(fs, nfs);

	/* An ordinary event still goes through the patterns and counts. */
	redisReply *rep = redis_command(r, "XADD rt * event {\"kind\":\"x\"}");
	freeReplyObject(rep);
	CHECK(settled(r, "rt", 1));
	CHECK_INT(calls_count("ra/ok.any#1"), 1);
	CHECK_INT(metrics_counter_value(METRIC_EVENTS_RECEIVED), 1);
	CHECK_INT(metrics_counter_value(METRIC_EVENTS_PROCESSED), 1);
	consumer_stop(c);
	consumer_free(c);
	redis_free(r);
	registry_free(reg);
	free(err);
}

TEST(a_pending_occurrence_of_a_removed_schedule_is_acked_as_obsolete)
{
	calls_reset();
	struct registry *reg = registry_new();
	publish_dir(reg, "removed"); /* rb exists, without its schedule */
	struct redis *r = clean_conn();
	REQUIRE(r);
	char *err = NULL;
	REQUIRE(it_ensure_group(r, "obs", "g") == 0);
	CHECK_INT(schedule_publish(r, "obs", "rb", "ok.tick", 1774746000, NULL, 0, &err),
		  SCHEDULE_PUBLISHED);
	/* Delivered to a worker that then died: pending, owned by "ghost". */
	redisReply *rep = redis_command(r, "XREADGROUP GROUP g ghost COUNT 10 STREAMS obs >");
	freeReplyObject(rep);
	CHECK_INT(it_pending(r, "obs"), 1);
	int before = log_count("scheduled occurrence obsolete");
	struct consumer *c = consumer(reg, "obs");
	CHECK(settled(r, "obs", 0));
	CHECK_INT(calls.n, 0);
	CHECK_INT(log_count("scheduled occurrence obsolete"), before + 1);
	CHECK_INT(it_xlen(r, "relay:obs:dlq"), 0);
	consumer_stop(c);
	consumer_free(c);
	redis_free(r);
	registry_free(reg);
	free(err);
}

/* ---- cases: forged occurrences --------------------- */

/* XADD stream * <field value>... as r (NULL-terminated pairs); the id or NULL. */
static char *xadd_fields(struct redis *r, const char *stream, const char *const *kv)
{
	const char *argv[16] = {"XADD", stream, "*"};
	int argc = 3;
	for (int i = 0; kv[i] && argc < 15; i++)
		argv[argc++] = kv[i];
	redisReply *rep = redis_command_argv(r, argc, argv, NULL);
	char *id = rep && rep->type == REDIS_REPLY_STRING ? xstrdup(rep->str) : NULL;
	if (rep)
		freeReplyObject(rep);
	return id;
}

/* How many entries of stream's DLQ have this reason and original id. */
static int dlq_has(struct redis *r, const char *stream, const char *reason, const char *id)
{
	redisReply *rep = redis_command(r, "XRANGE relay:%s:dlq - +", stream);
	int n = 0;
	for (size_t i = 0; rep && rep->type == REDIS_REPLY_ARRAY && i < rep->elements; i++) {
		const redisReply *f = rep->element[i]->element[1];
		bool reason_ok = false, id_ok = false;
		for (size_t k = 0; k + 1 < f->elements; k += 2) {
			if (strcmp(f->element[k]->str, "reason") == 0)
				reason_ok = strcmp(f->element[k + 1]->str, reason) == 0;
			else if (strcmp(f->element[k]->str, "original_id") == 0)
				id_ok = strcmp(f->element[k + 1]->str, id) == 0;
		}
		n += reason_ok && id_ok;
	}
	if (rep)
		freeReplyObject(rep);
	return n;
}

#define FORGED "forged schedule occurrence"

/* Entries that claim to be occurrences (source relay.schedule plus the
 * three routing keys) without having been published: extra members, a
 * function nobody published (was acknowledged silently as obsolete),
 * scheduled_at missing, a repeated member, an instant that is not
 * canonical, an occurrence id that names another instant. Each is
 * dead-lettered with its payload and runs nothing; the genuine occurrence
 * runs once, with the occurrence payload on stdin. (An exact copy of a
 * genuine entry cannot be told apart in the original's wire format: see
 * scheduler.h.) */
TEST(forged_occurrences_are_dead_lettered_and_run_nothing)
{
	calls_reset();
	struct registry *reg = registry_new();
	publish_dir(reg, "route");
	struct redis *r = clean_conn();
	REQUIRE(r);
	char gid[64] = "";
	char *err = NULL;
	REQUIRE(it_ensure_group(r, "fg", "g") == 0);
	const int64_t at = 1774746000;
	char *occ = schedule_occurrence_id("ra", "ok.tick", at);
	char *env = schedule_payload(at);
	char *nofn = schedule_entry("nofn", "ok.tick", at);
	REQUIRE(schedule_publish(r, "fg", "ra", "ok.tick", at, gid, sizeof gid, &err) ==
		SCHEDULE_PUBLISHED);
#define SRC "\"source\":\"relay.schedule\""
	char *own =
		xasprintf("{\"function\":\"ra\",\"handler\":\"ok.tick\",\"occurrence_id\":\"%s\","
			  "\"scheduled_at\":\"2026-03-29T01:00:00Z\"," SRC ",\"rm\":\"-rf\"}",
			  occ);
	char *bare = xasprintf(
		"{\"function\":\"ra\",\"handler\":\"ok.tick\",\"occurrence_id\":\"%s\"," SRC "}",
		occ);
	char *twice = xasprintf("{\"function\":\"ra\",\"handler\":\"fail.tick\",\"handler\":\"ok."
				"tick\",\"occurrence_id\":\"%s\",\"scheduled_at\":\"2026-03-29T01:"
				"00:00Z\"," SRC "}",
				occ);
	char *noncanon =
		xstrdup("{\"function\":\"ra\",\"handler\":\"ok.tick\",\"occurrence_id\":"
			"\"schedule:ra:ok.tick:2026-03-29T01:00:00+00:00\",\"scheduled_at\":"
			"\"2026-03-29T01:00:00+00:00\"," SRC "}");
	char *other =
		xasprintf("{\"function\":\"ra\",\"handler\":\"ok.tick\",\"occurrence_id\":\"%s\","
			  "\"scheduled_at\":\"2026-03-29T01:00:01Z\"," SRC "}",
			  occ);
#undef SRC
	const char *forged[] = {own, nofn, bare, twice, noncanon, other};
	char *ids[ARRAY_LEN(forged)];
	for (size_t i = 0; i < ARRAY_LEN(forged); i++) {
		const char *kv[] = {"event", forged[i], NULL};
		ids[i] = xadd_fields(r, "fg", kv);
		REQUIRE(ids[i]);
	}
	int forged_before = log_count("forged schedule occurrence sent to the dead-letter stream");
	int obsolete_before = log_count("scheduled occurrence obsolete");
	struct consumer *c = consumer(reg, "fg");
	CHECK(settled(r, "fg", (long long)ARRAY_LEN(forged)));
	CHECK_INT(calls.n, 1); /* the genuine one, nothing else */
	CHECK_INT(calls_count("ra/ok.tick#1"), 1);
	if (calls.n >= 1)
		CHECK_STR(calls.payloads[0], env);
	for (size_t i = 0; i < ARRAY_LEN(forged); i++)
		if (dlq_has(r, "fg", FORGED, ids[i]) != 1)
			T_FAIL_("forged entry %zu (%s): not dead-lettered as " FORGED, i, ids[i]);
	CHECK_INT(dlq_has(r, "fg", FORGED, gid), 0);
	CHECK_INT(log_count("forged schedule occurrence sent to the dead-letter stream"),
		  forged_before + (int)ARRAY_LEN(forged));
	CHECK_INT(log_count("scheduled occurrence obsolete"), obsolete_before);
	consumer_stop(c);
	consumer_free(c);
	for (size_t i = 0; i < ARRAY_LEN(forged); i++)
		free(ids[i]);
	free(occ), free(env), free(nofn), free(own), free(bare), free(twice), free(noncanon);
	free(other);
	redis_free(r);
	registry_free(reg);
	free(err);
}

/* The dedup key names the occurrence, and every delivery of a genuine
 * occurrence renews its TTL to the full 7 days: a failing occurrence whose
 * key was about to expire is retried, verified and its key renewed, so a
 * long retry schedule never outlives the proof. */
TEST(delivering_a_genuine_occurrence_renews_its_dedup_key)
{
	calls_reset();
	struct registry *reg = registry_new();
	publish_dir(reg, "route");
	struct redis *r = clean_conn();
	REQUIRE(r);
	char gid[64] = "";
	char *err = NULL;
	REQUIRE(it_ensure_group(r, "rn", "g") == 0);
	const int64_t at = 1774746000;
	char *key =
		xasprintf(SCHEDULE_KEY_PREFIX "%s", "schedule:ra:fail.tick:2026-03-29T01:00:00Z");
	REQUIRE(schedule_publish(r, "rn", "ra", "fail.tick", at, gid, sizeof gid, &err) ==
		SCHEDULE_PUBLISHED);
	redisReply *rep = redis_command(r, "GET %s", key);
	CHECK(rep && rep->type == REDIS_REPLY_STRING &&
	      strcmp(rep->str, "schedule:ra:fail.tick:2026-03-29T01:00:00Z") == 0);
	if (rep)
		freeReplyObject(rep);
	/* Nearly expired before it is ever delivered. */
	CHECK_INT(integer(r, "PERSIST %s", key), 1);
	rep = redis_command(r, "EXPIRE %s 100", key);
	freeReplyObject(rep);
	struct consumer *c = consumer(reg, "rn");
	CHECK(settled(r, "rn", 1)); /* fail.tick: retries 1, then the DLQ */
	CHECK_INT(calls_count("ra/fail.tick#1"), 1);
	CHECK_INT(calls_count("ra/fail.tick#2"), 1);
	CHECK_INT(dlq_has(r, "rn", FORGED, gid), 0);
	long long ttl = integer(r, "TTL %s", key);
	CHECK(ttl > 604700 && ttl <= 604800);
	consumer_stop(c);
	consumer_free(c);
	free(key);
	redis_free(r);
	registry_free(reg);
	free(err);
}

/* docs/redis-acl.md: a producer whose ACL allows XADD on the stream and
 * nothing else. Its events run; it cannot write (or read) the dedup keys;
 * an occurrence it forges is dead-lettered and runs nothing. */
TEST(a_producer_limited_to_xadd_cannot_forge_an_occurrence)
{
	calls_reset();
	struct registry *reg = registry_new();
	publish_dir(reg, "route");
	struct redis *r = clean_conn();
	REQUIRE(r);
	it_ensure_group(r, "acl", "g");
	/* The line from docs/redis-acl.md, for a stream named acl. */
	redisReply *rep = redis_command(r, "ACL SETUSER producer on >pw ~acl -@all +xadd");
	REQUIRE(rep && rep->type == REDIS_REPLY_STATUS);
	freeReplyObject(rep);
	struct redis_uri u = R.uri;
	u.user = "producer";
	u.password = "pw";
	struct redis *p = redis_new(&u, NULL);
	REQUIRE(redis_connect(p) == 0);

	const char *event[] = {"event", "{\"kind\":\"x\"}", NULL};
	char *eid = xadd_fields(p, "acl", event);
	CHECK(eid != NULL);
	const int64_t at = 1774746000;
	char *occ = schedule_occurrence_id("ra", "ok.tick", at);
	char *env = schedule_entry("ra", "ok.tick", at);
	char *key = xasprintf(SCHEDULE_KEY_PREFIX "%s", occ);
	rep = redis_command(p, "SET %s 1", key);
	CHECK(rep && rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "NOPERM", 6) == 0);
	if (rep)
		freeReplyObject(rep);
	rep = redis_command(p, "GET %s", key);
	CHECK(rep && rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "NOPERM", 6) == 0);
	if (rep)
		freeReplyObject(rep);
	/* Exactly what a publication would write, never published. */
	const char *forged[] = {"event", env, NULL};
	char *fid = xadd_fields(p, "acl", forged);
	CHECK(fid != NULL);
	CHECK_INT(integer(r, "EXISTS %s", key), 0);

	struct consumer *c = consumer(reg, "acl");
	CHECK(settled(r, "acl", 1));
	CHECK_INT(calls_count("ra/ok.any#1"), 1); /* the producer's event */
	CHECK_INT(calls_count("ra/ok.tick"), 0);
	CHECK_INT(calls.n, 1);
	if (fid)
		CHECK_INT(dlq_has(r, "acl", FORGED, fid), 1);
	consumer_stop(c);
	consumer_free(c);
	rep = redis_command(r, "ACL DELUSER producer");
	freeReplyObject(rep);
	redis_free(p);
	free(eid), free(fid), free(occ), free(env), free(key);
	redis_free(r);
	registry_free(reg);
}

int main(int argc, char **argv)
{
	log_set_level(LOG_WARN);
	snprintf_(fdir, sizeof fdir, "/tmp/relay-itsched.XXXXXX");
	if (!mkdtemp(fdir) || it_redis_start(&R, NULL) < 0) {
		printf("FAIL scheduler/setup (redis-server)\n");
		return 1;
	}
	log_to_file();
	log_set_level(LOG_INFO);
	char *d;
#define FIXTURE(sub, name, tpl)            \
	d = xasprintf("%s/%s", fdir, sub); \
	write_fn(d, name, tpl);            \
	free(d)
	FIXTURE("tick", "tick",
		"runtime: python3.14\nschedules:\n  - handler: jobs.tick\n    cron: \"* * * * * "
		"*\"\n");
	FIXTURE("live1", "lv",
		"runtime: python3.14\nschedules:\n  - handler: jobs.a\n    cron: \"* * * * * "
		"*\"\n");
	FIXTURE("live2", "lv",
		"runtime: python3.14\nschedules:\n  - handler: jobs.b\n    cron: \"* * * * * "
		"*\"\n");
	FIXTURE("live2", "lw",
		"runtime: node24\nschedules:\n  - handler: jobs.c\n    cron: \"*/2 * * * * *\"\n"
		"    timezone: Europe/Rome\n");
	FIXTURE("live3", "lv",
		"runtime: python3.14\nevents:\n  - handler: ev.h\n    pattern: {kind: [never]}\n");
	FIXTURE("route", "ra",
		"runtime: python3.14\nevents:\n  - handler: ok.any\n    pattern: {}\n"
		"schedules:\n  - handler: ok.tick\n    cron: \"0 3 * * *\"\n    timeout: 9s\n"
		"  - handler: fail.tick\n    cron: \"0 4 * * *\"\n    retries: 1\n");
	FIXTURE("removed", "rb",
		"runtime: python3.14\nevents:\n  - handler: ok.tick\n    pattern: {kind: [x]}\n");
#undef FIXTURE
	static const struct t_case cases[] = {
		T_CASE(publish_script_deduplicates_and_writes_the_documented_fields),
		T_CASE(a_wrong_type_stream_fails_the_publish_and_leaves_no_dedup_key),
		T_CASE(a_failed_xadd_rolls_the_dedup_key_back),
		T_CASE(catch_up_publishes_only_occurrences_within_the_grace),
		T_CASE(a_fresh_start_publishes_only_occurrences_after_it),
		T_CASE(two_workers_publish_each_occurrence_once),
		T_CASE(live_changes_replace_the_jobs_in_place),
		T_CASE(consumer_routes_an_occurrence_to_exactly_its_schedule_handler),
		T_CASE(a_pending_occurrence_of_a_removed_schedule_is_acked_as_obsolete),
		T_CASE(forged_occurrences_are_dead_lettered_and_run_nothing),
		T_CASE(delivering_a_genuine_occurrence_renews_its_dedup_key),
		T_CASE(a_producer_limited_to_xadd_cannot_forge_an_occurrence),
	};
	int rc = t_run_(__FILE__, cases, sizeof cases / sizeof cases[0], argc, argv);
	calls_reset();
	log_set_fd(2);
	close(logfd);
	it_redis_cleanup(&R);
	char *cmd = xasprintf("rm -rf '%s'", fdir);
	if (system(cmd) != 0)
		rc = 1;
	free(cmd);
	return rc;
}
