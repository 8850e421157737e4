/*
 * Cron scheduler. See scheduler.h for the contract; the notes that matter
 * when changing this file:
 *
 * - `done_s` is the evaluation horizon: every occurrence at or before it
 *   (Unix seconds) has been handled by this worker (published, found
 *   duplicate, failed or skipped as too late). Jobs are therefore rebuilt
 *   from scratch on every snapshot change as cron_next(done_s): for an
 *   unchanged schedule that is exactly the next due time it already had,
 *   for a new or changed one it is its first occurrence not yet handled.
 *   No identity matching between old and new jobs is needed.
 * - A job borrows its struct cron and zone from the snapshot the scheduler
 *   holds a reference to, so the objects stay valid until the next swap.
 * - Everything in the loop is bounded: one cron_next per occurrence
 *   published, and one per skipped stretch however long it is (the skip
 *   jumps straight to the first occurrence still inside the grace).
 */
#include "engine/scheduler.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "model/cron.h"
#include "base/duration.h"
#include "model/function.h"
#include "base/log.h"
#include "engine/metrics.h"
#include "base/rfc3339.h"
#include "model/template.h"
#include "base/util.h"

struct job {
	const char *function; /* borrowed from the held snapshot */
	const struct schedule *sched;
	int64_t next; /* Unix seconds; -1 when it never fires again */
};

struct scheduler {
	struct redis_uri uri;
	char *stream;
	struct registry *registry;
	int64_t grace_ns, poll_ns, start_ns;
	atomic_int stop;
	pthread_t thread;
	bool started; /* thread_start succeeded: stop joins it */

	struct snapshot *snap; /* held reference the jobs borrow from */
	struct job *jobs;
	size_t njobs;
	int64_t done_s;
	bool failing; /* last publish failed: log recovery once */
};
static int64_t floor_div(int64_t a, int64_t b)
{
	int64_t q = a / b;
	return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

/* ---- the thread --------------------------------------------------------- */

/* Rebuilds the job list from s->snap (see the note on done_s above). */
static void jobs_rebuild(struct scheduler *s)
{
	free(s->jobs);
	s->jobs = NULL;
	s->njobs = 0;
	size_t n = 0;
	for (size_t i = 0; i < s->snap->nfns; i++)
		n += s->snap->fns[i]->fn->tpl->nschedules;
	s->jobs = xcalloc(n + 1, sizeof *s->jobs);
	for (size_t i = 0; i < s->snap->nfns; i++) {
		const struct function *fn = s->snap->fns[i]->fn;
		for (size_t j = 0; j < fn->tpl->nschedules; j++) {
			const struct schedule *sc = &fn->tpl->schedules[j];
			if (!sc->cron)
				continue;
			struct job *jb = &s->jobs[s->njobs++];
			jb->function = fn->name;
			jb->sched = sc;
			jb->next = cron_next(sc->cron, sc->tz, s->done_s);
		}
	}
}

static void publish_one(struct scheduler *s, struct redis *r, const struct job *jb, int64_t at_s,
			int64_t late_ns)
{
	char ts[RFC3339_STR_MAX], late[DURATION_STR_MAX], id[64] = "";
	char *err = NULL;
	rfc3339_format_utc(at_s * NS_PER_SEC, ts);
	duration_format(late_ns / NS_PER_MS * NS_PER_MS, late);
	char *occ = schedule_occurrence_id(jb->function, jb->sched->handler, at_s);
	enum schedule_publish_result res = SCHEDULE_PUBLISH_FAILED;
	if (!redis_is_connected(r) && redis_connect(r) < 0)
		err = xstrdup(redis_errmsg(r));
	else
		res = schedule_publish(r, s->stream, jb->function, jb->sched->handler, at_s, id,
				       sizeof id, &err);
	const char *const attrs[] = {
		"function",	 jb->function, "handler", jb->sched->handler, "scheduled_at", ts,
		"occurrence_id", occ,	       NULL};
	switch (res) {
	case SCHEDULE_PUBLISHED:
		metrics_inc(METRIC_SCHEDULE_PUBLISHED);
		log_info(LOG_ATTRS("function", jb->function, "handler", jb->sched->handler,
				   "scheduled_at", ts, "occurrence_id", occ, "message_id", id,
				   "late", late),
			 "Schedule: occurrence published");
		break;
	case SCHEDULE_DUPLICATE:
		metrics_inc(METRIC_SCHEDULE_DUPLICATE);
		log_debug(attrs, "Schedule: occurrence already published");
		break;
	case SCHEDULE_PUBLISH_FAILED:
		metrics_inc(METRIC_SCHEDULE_PUBLISH_FAILURE);
		/* One WARN when publishing starts failing, DEBUG while it goes
		 * on (an every-second schedule would flood the log otherwise);
		 * the other workers may still publish the occurrence. */
		log_record(s->failing ? LOG_DEBUG : LOG_WARN,
			   LOG_ATTRS("function", jb->function, "handler", jb->sched->handler,
				     "scheduled_at", ts, "occurrence_id", occ, "reason", err),
			   "Schedule: publish failed");
		s->failing = true;
		free(err);
		free(occ);
		return;
	}
	if (s->failing) {
		s->failing = false;
		log_info(attrs, "Schedule: publishing recovered");
	}
	free(occ);
}

/* Handles every occurrence of jb due at or before now. */
static void run_job(struct scheduler *s, struct redis *r, struct job *jb, int64_t now_ns)
{
	int64_t now_s = floor_div(now_ns, NS_PER_SEC);
	while (jb->next >= 0 && jb->next <= now_s && !atomic_load(&s->stop)) {
		int64_t late = now_ns - jb->next * NS_PER_SEC;
		if (late > s->grace_ns) {
			/* Skip the whole stretch at once: the first occurrence still
			 * inside the grace is the first one >= ceil(now - grace). */
			int64_t min_s =
				floor_div(now_ns - s->grace_ns + NS_PER_SEC - 1, NS_PER_SEC);
			char ts[RFC3339_STR_MAX], ls[DURATION_STR_MAX], gs[DURATION_STR_MAX];
			rfc3339_format_utc(jb->next * NS_PER_SEC, ts);
			log_debug(LOG_ATTRS("function", jb->function, "handler", jb->sched->handler,
					    "scheduled_at", ts, "late",
					    duration_format(late / NS_PER_MS * NS_PER_MS, ls),
					    "grace", duration_format(s->grace_ns, gs)),
				  "schedule occurrence skipped: due while this worker was not "
				  "evaluating");
			jb->next = cron_next(jb->sched->cron, jb->sched->tz, min_s - 1);
			continue;
		}
		publish_one(s, r, jb, jb->next, late);
		jb->next = cron_next(jb->sched->cron, jb->sched->tz, jb->next);
	}
}

static void *scheduler_main(void *arg)
{
	struct scheduler *s = arg;
	struct redis_opts o = {.connect_timeout_ms = 1000, .command_timeout_ms = 2000};
	struct redis *r = redis_new(&s->uri, &o);

	while (!atomic_load(&s->stop)) {
		struct snapshot *cur = registry_acquire(s->registry);
		if (cur != s->snap) {
			registry_release(s->registry, s->snap);
			s->snap = cur;
			jobs_rebuild(s);
			char n[24];
			snprintf_(n, sizeof n, "%zu", s->njobs);
			log_debug(LOG_ATTRS("schedules", n),
				  "schedules reloaded from the function registry");
		} else {
			registry_release(s->registry, cur);
		}

		int64_t now_ns = now_wall_ns();
		for (size_t i = 0; i < s->njobs && !atomic_load(&s->stop); i++)
			run_job(s, r, &s->jobs[i], now_ns);
		int64_t now_s = floor_div(now_ns, NS_PER_SEC);
		if (now_s > s->done_s)
			s->done_s = now_s;

		/* Sleep until the earliest due instant or the next snapshot poll. */
		int64_t wake = now_wall_ns() + s->poll_ns;
		for (size_t i = 0; i < s->njobs; i++)
			if (s->jobs[i].next >= 0 && s->jobs[i].next * NS_PER_SEC < wake)
				wake = s->jobs[i].next * NS_PER_SEC;
		int64_t left = wake - now_wall_ns();
		if (left > 0)
			sleep_ms_interruptible((left + NS_PER_MS - 1) / NS_PER_MS, &s->stop);
	}
	redis_free(r);
	return NULL;
}

struct scheduler *scheduler_start(const struct scheduler_config *cfg)
{
	struct scheduler *s = xcalloc(1, sizeof *s);
	redis_uri_copy(&s->uri, cfg->uri);
	s->stream = xstrdup(cfg->stream);
	s->registry = cfg->registry;
	s->grace_ns = cfg->grace_ns > 0 ? cfg->grace_ns : SCHEDULER_GRACE_NS;
	s->poll_ns = cfg->poll_ns > 0 ? cfg->poll_ns : SCHEDULER_POLL_NS;
	s->start_ns = cfg->start_ns > 0 ? cfg->start_ns : now_wall_ns();
	/* Only occurrences strictly after the start instant: cron_next(floor). */
	s->done_s = floor_div(s->start_ns, NS_PER_SEC);
	s->snap = registry_acquire(s->registry);
	jobs_rebuild(s);

	char start[RFC3339_STR_MAX], grace[DURATION_STR_MAX];
	rfc3339_format_utc(s->start_ns, start);
	log_info(LOG_ATTRS("start", start, "grace", duration_format(s->grace_ns, grace)),
		 "Cron scheduler started with %zu schedule job(s)", s->njobs);
	int e = thread_start(&s->thread, "scheduler", scheduler_main, s);
	if (e != 0)
		log_warn(LOG_ATTRS("error", strerror(e)), "cannot start the cron scheduler thread");
	s->started = e == 0;
	return s;
}

void scheduler_stop(struct scheduler *s)
{
	if (!s)
		return;
	atomic_store(&s->stop, 1);
	if (s->started)
		pthread_join(s->thread, NULL);
	free(s->jobs);
	registry_release(s->registry, s->snap);
	redis_uri_free(&s->uri);
	free(s->stream);
	free(s);
	log_info(NULL, "Cron scheduler stopped");
}
