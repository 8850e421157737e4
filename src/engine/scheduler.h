/*
 * The cron scheduler of `relay start` (docs/schedules.md): one thread
 * per worker evaluates every served function's schedules locally and, when
 * an occurrence is due, publishes it into the event stream at most once
 * cluster-wide. It never runs a handler: the published entry is an ordinary
 * stream message that the consumer group hands to one worker, which routes
 * it to exactly that schedule's handler (delivery.c).
 *
 * Evaluation. The thread reads the current registry snapshot (registry.h) on
 * every pass. While it sleeps it re-checks the snapshot pointer at least
 * every poll interval (1 s), so adding, changing or removing schedules
 * through the reconciler replaces this worker's cron jobs in place: a job
 * whose (function, handler, cron, timezone) is unchanged keeps its next due
 * time, any other job is recomputed from the instant up to which
 * occurrences were already handled. Each job's next occurrence is
 * cron_next() on its zone's wall clock (cron.h), whole seconds; the thread
 * sleeps until the earliest due instant or the next poll, whichever comes
 * first.
 *
 * Publication, wire format, dedup key and its TTL, and the proof a worker
 * asks of an entry claiming to be an occurrence: schedule.h. The thread
 * publishes each due occurrence with schedule_publish.
 *
 * Catch-up policy. A worker publishes only occurrences strictly after the
 * instant its scheduler started (for a schedule that appears later, after
 * the instant it was first seen), and only while they are at most
 * SCHEDULER_GRACE_NS (2 s) late when evaluated. A worker that was down at
 * the due time therefore never publishes missed past occurrences on
 * startup, and one that stalls (clock jump, suspended process, a slow
 * Redis round trip) skips the occurrences it reaches more than 2 s late,
 * logging one DEBUG line per skipped run; the other workers of the fleet
 * still publish them.
 *
 * Counters (metrics.h): schedule_occurrences_published_total,
 * schedule_occurrences_duplicate_total, schedule_publish_failures_total.
 * A publish failure is logged (WARN) and only loses this worker's attempt
 * at that occurrence: it is not retried, the fleet still publishes it.
 *
 * Thread-safety: scheduler_start/scheduler_stop from one thread (main).
 */
#ifndef RELAY_SCHEDULER_H
#define RELAY_SCHEDULER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/redis.h"
#include "engine/registry.h"
/* The occurrence's wire format, publication and proof (schedule.h): what
 * the scheduler publishes, included for the callers that reach them
 * through this header (relay event send, relay invoke, the tests). */
#include "engine/schedule.h"

/* Fixed defaults. */
#define SCHEDULER_GRACE_NS (2LL * 1000000000LL)
#define SCHEDULER_POLL_NS (1LL * 1000000000LL)

struct scheduler_config {
	const struct redis_uri *uri; /* copied */
	const char *stream;	     /* copied */
	struct registry *registry;   /* borrowed; must outlive the scheduler */
	/* Zero fields fall back to the fixed defaults. */
	int64_t grace_ns;
	int64_t poll_ns;
	/* Tests only: the instant (Unix ns) evaluation starts from; 0 = now.
	 * An instant in the past simulates a stall at startup. */
	int64_t start_ns;
};

struct scheduler;

/* Starts the scheduler thread (signals blocked, own Redis connection).
 * Logs INFO "Cron scheduler started with N schedule job(s)" with the start
 * instant. Never NULL. */
struct scheduler *scheduler_start(const struct scheduler_config *cfg);
/* Stops the thread (promptly: at most one Redis command in flight),
 * joins it and frees everything. NULL is fine. */
void scheduler_stop(struct scheduler *s);

#endif
