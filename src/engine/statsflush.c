/*
 * The stats flush (statsflush.h). The thread sleeps on a condition
 * variable with a deadline, so stopping wakes it at once; the final flush
 * runs on the thread itself, and statsflush_stop waits for it with a
 * timeout, which is what bounds shutdown.
 *
 * The standby counter (statsflush_set_standby) is read and called under
 * standby_lock, held only while counting (memory), never across the
 * database write: clearing it waits at most one count, so the pool can be
 * freed right after.
 */
#include "engine/statsflush.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "engine/metrics.h"
#include "engine/standby.h"
#include "base/util.h"

/* Where a flush takes the standby counts: count and ctx are read under
 * lock when there is one (the thread's setter), else they are the
 * caller's own (statsflush_once). */
struct standby_src {
	pthread_mutex_t *lock;
	statsflush_standby_fn count; /* NULL: standby off */
	void *ctx;
};

struct statsflush {
	struct state *st;
	struct registry *reg;
	pthread_mutex_t standby_lock;
	struct standby_src standby; /* count and ctx guarded by standby_lock */
	int64_t interval_ns;
	pthread_t thread;
	bool started;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop;	 /* guarded by lock */
	bool done;	 /* guarded by lock */
	bool failing;	 /* the thread's own */
	char *fail_kind; /* the thread's own: what the last failure said */
};

static int64_t gauge_int(double v)
{
	if (!(v > 0) || isnan(v))
		return 0;
	if (v > 9e18)
		return INT64_MAX;
	return (int64_t)v;
}

static int64_t counter_int(uint64_t v)
{
	return v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v;
}

static void debug_line(const struct metrics_global_snapshot *g, size_t nfunctions)
{
	if (!log_enabled(LOG_DEBUG))
		return;
	char v[11][32];
	snprintf_(v[0], sizeof v[0], "%llu", (unsigned long long)g->events_received);
	snprintf_(v[1], sizeof v[1], "%llu", (unsigned long long)g->events_processed);
	snprintf_(v[2], sizeof v[2], "%llu", (unsigned long long)g->handler_successes);
	snprintf_(v[3], sizeof v[3], "%llu", (unsigned long long)g->handler_failures);
	snprintf_(v[4], sizeof v[4], "%llu", (unsigned long long)g->retries);
	snprintf_(v[5], sizeof v[5], "%llu", (unsigned long long)g->dlq_entries);
	snprintf_(v[6], sizeof v[6], "%lld", (long long)gauge_int(g->pending_entries));
	snprintf_(v[7], sizeof v[7], "%lld", (long long)gauge_int(g->pending_oldest_age_seconds));
	snprintf_(v[8], sizeof v[8], "%lld", (long long)gauge_int(g->buffered_events));
	snprintf_(v[9], sizeof v[9], "%lld", (long long)gauge_int(g->in_flight_invocations));
	snprintf_(v[10], sizeof v[10], "%zu", nfunctions);
	log_debug(LOG_ATTRS("events_received", v[0], "events_processed", v[1], "handler_successes",
			    v[2], "handler_failures", v[3], "retries", v[4], "dlq_entries", v[5],
			    "pending_entries", v[6], "pending_oldest_age_seconds", v[7],
			    "buffered_events", v[8], "in_flight_invocations", v[9], "functions",
			    v[10]),
		  "periodic metrics snapshot");
}

int statsflush_standby_count(void *standby, const char *function, const char *handler)
{
	return standby_count(standby, function, handler);
}

struct standby_rows {
	struct state_standby *v;
	size_t n, cap;
};

/* Appends a row for each distinct handler of fv's function: its event
 * rules' handlers in template order, then its schedules' not yet listed.
 * The strings are borrowed from fv. */
static void add_standby_rows(struct standby_rows *r, const struct fn_version *fv,
			     statsflush_standby_fn count, void *ctx)
{
	const struct template *t = fv->fn ? fv->fn->tpl : NULL;
	if (!t)
		return;
	size_t first = r->n;
	for (size_t i = 0; i < t->nrules + t->nschedules; i++) {
		const char *h =
			i < t->nrules ? t->rules[i].handler : t->schedules[i - t->nrules].handler;
		bool seen = false;
		for (size_t k = first; k < r->n && !seen; k++)
			seen = strcmp(r->v[k].handler, h) == 0;
		if (seen)
			continue;
		if (r->n == r->cap) {
			r->cap = r->cap ? 2 * r->cap : 16;
			r->v = xrealloc(r->v, r->cap * sizeof *r->v);
		}
		int c = count(ctx, fv->fn->name, h);
		r->v[r->n++] = (struct state_standby){fv->fn->name, h, c > 0 ? c : 0};
	}
}

/* The standby rows of every function of snap (none without a snapshot or
 * with standby off). */
static void standby_rows(struct standby_rows *r, const struct snapshot *snap,
			 struct standby_src *src)
{
	if (src->lock)
		pthread_mutex_lock(src->lock);
	if (snap && src->count)
		for (size_t i = 0; i < snap->nfns; i++)
			add_standby_rows(r, snap->fns[i], src->count, src->ctx);
	if (src->lock)
		pthread_mutex_unlock(src->lock);
}

/* Takes the snapshot, logs the DEBUG line and, when st is set, writes it. */
static int flush(struct state *st, struct registry *reg, struct standby_src *src, char **err)
{
	struct metrics_global_snapshot g;
	struct metrics_function_snapshot *fs = NULL;
	size_t n = 0;
	metrics_snapshot(&g, &fs, &n);
	debug_line(&g, n);
	int rc = 0;
	if (st) {
		struct state_stats s = {
			.events_received = counter_int(g.events_received),
			.events_processed = counter_int(g.events_processed),
			.handler_success = counter_int(g.handler_successes),
			.handler_failure = counter_int(g.handler_failures),
			.retries = counter_int(g.retries),
			.dlq_entries = counter_int(g.dlq_entries),
			.pending_entries = gauge_int(g.pending_entries),
			.oldest_pending_age_seconds = gauge_int(g.pending_oldest_age_seconds),
		};
		struct state_function_stats *rows = xcalloc(n + 1, sizeof *rows);
		struct snapshot *snap = reg ? registry_acquire(reg) : NULL;
		size_t nrows = 0;
		for (size_t i = 0; i < n; i++)
			if (!snap || registry_snapshot_find(snap, fs[i].function))
				rows[nrows++] = (struct state_function_stats){
					fs[i].function,
					{counter_int(fs[i].events), counter_int(fs[i].successes),
					 counter_int(fs[i].failures), counter_int(fs[i].retries),
					 counter_int(fs[i].dlq_entries)},
				};
		struct standby_rows sb = {0};
		standby_rows(&sb, snap, src);
		rc = state_write_stats(st, &s, rows, nrows, sb.v, sb.n, time(NULL), err);
		if (snap) /* after the write: the standby rows borrow its names */
			registry_release(reg, snap);
		free(sb.v);
		free(rows);
	}
	metrics_snapshot_free(fs, n);
	return rc;
}

int statsflush_once(struct state *st, struct registry *reg, statsflush_standby_fn count, void *ctx,
		    char **err)
{
	struct standby_src src = {NULL, count, ctx};
	return flush(st, reg, &src, err);
}

void statsflush_set_standby(struct statsflush *sf, statsflush_standby_fn count, void *ctx)
{
	if (!sf)
		return;
	pthread_mutex_lock(&sf->standby_lock);
	sf->standby.count = count;
	sf->standby.ctx = count ? ctx : NULL;
	pthread_mutex_unlock(&sf->standby_lock);
}

/* The kind of a failure: the error's last part (SQLite's message, "database
 * or disk is full"), without the path and step before it. */
static const char *fail_kind(const char *err)
{
	const char *k = strrchr(err, ':');
	return k ? k + 1 : err;
}

/* One WARN when the writes start failing and one more each time the kind
 * of failure changes, not one per flush; one INFO when they succeed
 * again. */
static void flush_logged(struct statsflush *sf)
{
	char *err = NULL;
	if (flush(sf->st, sf->reg, &sf->standby, &err) < 0) {
		const char *kind = fail_kind(err ? err : "");
		if (!sf->failing || !sf->fail_kind || strcmp(sf->fail_kind, kind) != 0)
			log_warn(LOG_ATTRS("error", err ? err : ""),
				 "state database: cannot write the stats snapshot; retrying every "
				 "5s");
		free(sf->fail_kind);
		sf->fail_kind = xstrdup(kind);
		sf->failing = true;
		free(err);
	} else if (sf->failing) {
		sf->failing = false;
		free(sf->fail_kind);
		sf->fail_kind = NULL;
		log_info(NULL, "state database: stats snapshot written again");
	}
}

static void deadline_in(struct timespec *ts, int64_t ns)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ns += ts->tv_nsec;
	ts->tv_sec += (time_t)(ns / 1000000000LL);
	ts->tv_nsec = (long)(ns % 1000000000LL);
}

static void *flush_main(void *arg)
{
	struct statsflush *sf = arg;
	pthread_mutex_lock(&sf->lock);
	/* The final flush happens even when stop came before this thread
	 * first took the lock. */
	for (bool last = false; !last;) {
		struct timespec until;
		deadline_in(&until, sf->interval_ns);
		while (!sf->stop &&
		       pthread_cond_timedwait(&sf->cond, &sf->lock, &until) != ETIMEDOUT)
			;
		last = sf->stop;
		pthread_mutex_unlock(&sf->lock);
		flush_logged(sf); /* periodic, or the final one after stop */
		pthread_mutex_lock(&sf->lock);
	}
	sf->done = true;
	pthread_cond_broadcast(&sf->cond);
	pthread_mutex_unlock(&sf->lock);
	return NULL;
}

struct statsflush *statsflush_start(struct state *st, struct registry *reg, int64_t interval_ns)
{
	struct statsflush *sf = xcalloc(1, sizeof *sf);
	sf->st = st;
	sf->reg = reg;
	sf->interval_ns = interval_ns > 0 ? interval_ns : STATSFLUSH_INTERVAL_NS;
	pthread_mutex_init(&sf->standby_lock, NULL);
	sf->standby.lock = &sf->standby_lock;
	pthread_mutex_init(&sf->lock, NULL);
	cond_init_monotonic(&sf->cond);
	int e = thread_start(&sf->thread, "statsflush", flush_main, sf);
	if (e != 0) {
		log_warn(LOG_ATTRS("error", strerror(e)), "cannot start the stats flush thread");
		return sf;
	}
	sf->started = true;
	return sf;
}

int statsflush_stop(struct statsflush *sf, int64_t timeout_ms)
{
	if (!sf || !sf->started)
		return 0;
	struct timespec until;
	deadline_in(&until, timeout_ms * 1000000LL);
	pthread_mutex_lock(&sf->lock);
	sf->stop = true;
	pthread_cond_broadcast(&sf->cond);
	while (!sf->done)
		if (pthread_cond_timedwait(&sf->cond, &sf->lock, &until) == ETIMEDOUT)
			break;
	bool done = sf->done;
	pthread_mutex_unlock(&sf->lock);
	if (!done) {
		log_warn(NULL, "state database: final stats flush did not finish in time; exiting "
			       "without it");
		return -1;
	}
	pthread_join(sf->thread, NULL);
	sf->started = false;
	return 0;
}

void statsflush_free(struct statsflush *sf)
{
	if (!sf)
		return;
	pthread_mutex_destroy(&sf->lock);
	pthread_mutex_destroy(&sf->standby_lock);
	pthread_cond_destroy(&sf->cond);
	free(sf->fail_kind);
	free(sf);
}
