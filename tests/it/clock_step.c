/*
 * A step of the wall clock, against a private
 * redis-server. Why these are in-process tests with an injected "clock"
 * rather than a black-box run under a shifted clock: docs/operations.md,
 * "Clock steps".
 *
 *  - Running markers: a worker whose clock jumped forward by an hour finds
 *    every running marker expired by its own clock; TryStart checks the
 *    marker's deadline against Redis's clock (TIME) and refuses, so no
 *    invocation runs twice at once. A deadline within the clock-skew
 *    tolerance, or really past, is claimed as before.
 *  - Schedules: a scheduler whose first evaluation is an hour after the
 *    instant it started from (what a forward step looks like to it) skips
 *    the hour of missed occurrences in one stretch and publishes none of
 *    them (the spec's catch-up policy: missed occurrences are not run).
 */
#include <fcntl.h>
#include <inttypes.h>

#include "base/duration.h"
#include "model/function.h"
#include "engine/invocation.h"
#include "itlib.h"
#include "base/log.h"
#include "engine/metrics.h"
#include "engine/registry.h"
#include "base/rfc3339.h"
#include "engine/runner.h"
#include "engine/scheduler.h"
#include "t.h"
#include "tfiles.h"

static struct itredis R;
static char fdir[64];
static char logpath[96];

static struct redis *clean_conn(void)
{
	struct redis *r = it_conn(&R);
	if (!r)
		return NULL;
	redisReply *rep = redis_command(r, "FLUSHDB");
	if (rep)
		freeReplyObject(rep);
	return r;
}

/* A message read by the group (pending), its key in *key. */
static char *pending_message(struct redis *r, char **key)
{
	if (it_ensure_group(r, "cs", "g") != 0)
		return NULL;
	redisReply *rep = redis_command(r, "XADD cs * event {}");
	char *id = rep && rep->type == REDIS_REPLY_STRING ? xstrdup(rep->str) : NULL;
	if (rep)
		freeReplyObject(rep);
	rep = redis_command(r, "XREADGROUP GROUP g w COUNT 1 STREAMS cs >");
	if (rep)
		freeReplyObject(rep);
	*key = id ? invocation_key("cs", "g", id) : NULL;
	return id;
}

/* Writes field = value in the key, then TryStart from value to next. */
static int claim_over(struct redis *r, const char *key, const char *id, const char *value,
		      const char *next)
{
	redisReply *rep = redis_command(r, "HSET %s f/h %s", key, value);
	if (rep)
		freeReplyObject(rep);
	return invocation_try_start(r, key, "f/h", value, next, "cs", "g", id, NULL);
}

static char *field_value(struct redis *r, const char *key)
{
	redisReply *rep = redis_command(r, "HGET %s f/h", key);
	char *v = rep && rep->type == REDIS_REPLY_STRING ? xstrdup(rep->str) : NULL;
	if (rep)
		freeReplyObject(rep);
	return v;
}

TEST(a_forward_step_does_not_expire_running_markers)
{
	struct redis *r = clean_conn();
	REQUIRE(r);
	char *key = NULL, *id = pending_message(r, &key);
	REQUIRE(id && key);
	int64_t now = now_wall_ns();
	char running[64], next[64], due[64], past[64], backoff[64];
	/* Claimed by another worker 10 s ago, deadline 2 minutes ahead. */
	struct marker m = {MARK_RUNNING, now + 2 * NS_PER_MIN, 1};
	invocation_marker_format(&m, running, sizeof running);
	/* This worker's clock reads an hour ahead: by it the marker is long
	 * expired, and it would claim attempt 2 with an hour-later deadline. */
	int64_t stepped = now + 3600 * NS_PER_SEC;
	CHECK(invocation_marker_eligible(&m, stepped));
	struct marker n2 = {MARK_RUNNING, invocation_running_deadline(stepped, 0), 2};
	invocation_marker_format(&n2, next, sizeof next);
	CHECK_INT(claim_over(r, key, id, running, next), 0);
	char *v = field_value(r, key);
	CHECK_STR(v ? v : "", running);
	free(v);
	/* Within the clock-skew tolerance of Redis's clock: claimed, as
	 * between workers whose clocks differ by a little. */
	struct marker soon = {MARK_RUNNING, now + (RUNNER_CLOCK_SKEW_MS - 2000) * NS_PER_MS, 1};
	invocation_marker_format(&soon, due, sizeof due);
	CHECK_INT(claim_over(r, key, id, due, next), 1);
	/* Really past: claimed. */
	struct marker old = {MARK_RUNNING, now - NS_PER_SEC, 1};
	invocation_marker_format(&old, past, sizeof past);
	CHECK_INT(claim_over(r, key, id, past, next), 1);
	/* A backoff an hour's step would end early: refused as well. */
	struct marker bo = {MARK_NEXT_ATTEMPT, now + 5 * NS_PER_MIN, 1};
	invocation_marker_format(&bo, backoff, sizeof backoff);
	CHECK_INT(claim_over(r, key, id, backoff, next), 0);
	/* Other markers and absent ones are untouched by the check. */
	CHECK_INT(invocation_try_start(r, key, "f/other", NULL, next, "cs", "g", id, NULL), 1);
	free(id);
	free(key);
	redis_free(r);
}

/* Publishes a snapshot of every function under fdir. */
static void publish_dir(struct registry *reg)
{
	struct function_scan scan;
	char *err = NULL;
	struct fn_version **fvs = NULL;
	size_t n = 0;
	if (function_scan_dir(fdir, &scan, &err) == 0) {
		fvs = xcalloc(scan.n + 1, sizeof *fvs);
		for (size_t i = 0; i < scan.n; i++)
			if (scan.v[i].fn) {
				fvs[n++] = registry_fn_version_new(scan.v[i].fn, NULL, NULL);
				scan.v[i].fn = NULL;
			}
		function_scan_free(&scan);
	} else {
		printf("  cannot scan %s: %s\n", fdir, err ? err : "");
		free(err);
		fvs = xcalloc(1, sizeof *fvs);
	}
	registry_publish(reg, fvs, n);
}

static long long xlen(struct redis *r, const char *stream)
{
	return it_xlen(r, stream);
}

TEST(a_forward_step_of_an_hour_publishes_none_of_the_missed_occurrences)
{
	metrics_reset_for_tests();
	struct registry *reg = registry_new();
	publish_dir(reg);
	struct redis *r = clean_conn();
	REQUIRE(r);
	/* Every second, and the first evaluation an hour after the start: 3,600
	 * missed occurrences. */
	int64_t t0 = now_wall_ns();
	struct scheduler_config cfg = {.uri = &R.uri,
				       .stream = "step",
				       .registry = reg,
				       .poll_ns = 100 * NS_PER_MS,
				       .start_ns = t0 - 3600 * NS_PER_SEC};
	struct scheduler *s = scheduler_start(&cfg);
	REQUIRE(s);
	/* It goes on with the present: 2 s later, at most the occurrences of
	 * the grace (2 s) plus those 2 s, never an hour's. */
	usleep(2000 * 1000);
	scheduler_stop(s);
	long long n = xlen(r, "step");
	CHECK(n >= 1);
	CHECK(n <= 5);
	CHECK(metrics_counter_value(METRIC_SCHEDULE_PUBLISHED) == (uint64_t)n);
	/* One skipped stretch, one line, however many occurrences it held. */
	CHECK_INT(t_count_lines_with(logpath, "schedule occurrence skipped"), 1);
	/* Every published one is at most the grace before the start of the
	 * evaluation, none from the missed hour. */
	redisReply *rep = redis_command(r, "XRANGE step - +");
	REQUIRE(rep && rep->type == REDIS_REPLY_ARRAY);
	for (size_t i = 0; i < rep->elements; i++) {
		redisReply *e = rep->element[i]->element[1];
		const char *ev = e->element[1]->str;
		const char *at = strstr(ev, "\"scheduled_at\":\"");
		REQUIRE(at);
		int64_t sec;
		int32_t nsec;
		REQUIRE(rfc3339_parse(at + 16, 20, &sec, &nsec) == 0);
		CHECK(sec >= t0 / NS_PER_SEC - 3);
	}
	freeReplyObject(rep);
	redis_free(r);
	registry_free(reg);
}

int main(int argc, char **argv)
{
	log_set_level(LOG_WARN);
	snprintf_(fdir, sizeof fdir, "/tmp/relay-itclock.XXXXXX");
	if (!mkdtemp(fdir) || it_redis_start(&R, NULL) < 0) {
		printf("FAIL clock_step/setup (redis-server)\n");
		return 1;
	}
	char *d = xasprintf("%s/tick", fdir);
	mkdir(d, 0755);
	char *p = xasprintf("%s/template.yaml", d);
	FILE *f = fopen(p, "w");
	if (f) {
		fputs("runtime: python3.14\nschedules:\n  - handler: jobs.tick\n    cron: \"* * * "
		      "* * "
		      "*\"\n",
		      f);
		fclose(f);
	}
	free(p);
	free(d);
	snprintf_(logpath, sizeof logpath, "%s/relay.log", fdir);
	int logfd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
	log_set_fd(logfd);
	log_set_level(LOG_DEBUG);
	static const struct t_case cases[] = {
		T_CASE(a_forward_step_does_not_expire_running_markers),
		T_CASE(a_forward_step_of_an_hour_publishes_none_of_the_missed_occurrences),
	};
	int rc = t_run_(__FILE__, cases, sizeof cases / sizeof cases[0], argc, argv);
	log_set_fd(2);
	close(logfd);
	it_redis_cleanup(&R);
	t_rmtree(fdir);
	return rc;
}
