/*
 * Relay's Prometheus registry: one per process, the single source of truth
 * for operational statistics. GET /metrics renders it (metrics_render), the
 * 5-second SQLite flush copies its absolute values (metrics_snapshot).
 *
 * Families (names, labels and types as docs/operations.md lists
 * them; rendered in this order):
 *
 *   counter   events_received_total                 messages read from the stream
 *   counter   events_processed_total                messages finished (ACKed or DLQ'd)
 *   counter   handler_success_total                 handler invocations that succeeded
 *   counter   handler_failure_total                 handler invocations that failed or timed out
 *   counter   retries_total                         retries scheduled
 *   counter   dlq_entries_total                     entries written to the DLQ
 *   counter   dlq_replayed_total                    messages read that relay dlq replay published
 *   counter   handler_invocations_total{function,handler,outcome}
 *   counter   build_failures_total{function}
 *   counter   function_events_total{function}       events processed per function
 *   counter   function_successes_total{function}    handler successes per function
 *   counter   function_failures_total{function}     handler failures per function
 *   counter   function_retries_total{function}      retries per function
 *   counter   function_dlq_entries_total{function}  DLQ entries per function
 *   counter   key_waits_total{function}             invocations that waited for their key
 *   histogram handler_duration_seconds{function,handler}
 *             buckets .005 .01 .025 .05 .1 .25 .5 1 2.5 5 10 30 60 120 300
 *   histogram function_build_seconds{function}
 *             buckets 0.5 1 2 5 10 30 60 120 300 600
 *   gauge     pending_entries                       consumer-group XPENDING count (sampled)
 *   gauge     pending_oldest_age_seconds            age of the oldest pending entry (from its id)
 *   gauge     buffered_events                       local buffer occupancy
 *   gauge     in_flight_invocations                 invocations executing in this worker
 *   counter   concurrency_waits_total               slot acquisitions that had to block
 *   counter   schedule_occurrences_published_total
 *   counter   schedule_occurrences_duplicate_total
 *   counter   schedule_publish_failures_total
 *   gauge     standby_containers{function,handler}  standby containers ready or starting
 *   counter   standby_dispatches_total              invocations given to a standby container
 *   counter   standby_misses_total                  invocations that found none ready
 *   counter   standby_discarded_total{reason}       standby containers removed unused
 *   gauge     warm_containers{function}             warm containers running (idle or busy)
 *   counter   warm_invocations_total                invocations run in a warm container
 *   counter   warm_retired_total{reason}            warm containers removed, by reason
 *   gauge     retries_scheduled                     retries waiting in the retry index (sampled)
 *   counter   consumers_deleted_total               group consumers of gone workers deleted
 *   counter   otel_spans_dropped_total              spans dropped (queue full, export failed)
 *   counter   otel_export_failures_total            span export requests that failed
 *
 * Labels are only function, handler, outcome and reason; outcome is one of
 * "success", "failure", "timeout" (enum metric_outcome), reason one of
 * enum metric_standby_reason's names. A timeout is a failure for
 * handler_failure_total and function_failures_total. Label names are
 * rendered in alphabetical order, as the official Go client does.
 *
 * Series. A label set comes into existence on its first update (or through
 * metrics_function_register) and then lives until the process exits: every
 * family over that label set is rendered from then on, zeros included (all
 * three outcomes of handler_invocations_total; an empty build histogram;
 * standby_containers at 0), so rate() never misses a first increment. The
 * eight standby_discarded_total reasons are always rendered, zeros included. At most METRICS_MAX_SERIES label
 * sets (functions plus function/handler pairs together) exist; updates for a
 * new label set beyond that are dropped and one WARN is logged per process.
 *
 * Thread-safety and cost. Every function here is safe from any thread.
 * Unlabelled counters and gauges are single relaxed atomics, each on its own
 * cache line. Labelled series are found in a fixed-size hash table whose
 * chains are only ever prepended under one creation mutex and published with
 * release stores, so a lookup of an existing series takes no lock at all
 * (acquire loads and a string compare). Callers on a very hot path may still
 * cache a series handle (metrics_handler_get): handles stay valid until
 * process exit (or metrics_reset_for_tests).
 *
 * Reads (render, snapshot) take no lock on the values: each value is read
 * atomically but a scrape is not a consistent cut across series, exactly as
 * with the Go client. A histogram's _count is the sum of its buckets, so
 * _count always equals the +Inf bucket.
 */
#ifndef RELAY_METRICS_H
#define RELAY_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/util.h"

/* Maximum number of label sets (functions + function/handler pairs). */
#define METRICS_MAX_SERIES 10000

/* Unlabelled counters. */
enum metric_counter {
	METRIC_EVENTS_RECEIVED,	   /* events_received_total */
	METRIC_EVENTS_PROCESSED,   /* events_processed_total */
	METRIC_HANDLER_SUCCESS,	   /* handler_success_total (prefer metrics_handler_invocation) */
	METRIC_HANDLER_FAILURE,	   /* handler_failure_total (prefer metrics_handler_invocation) */
	METRIC_RETRIES,		   /* retries_total (prefer metrics_function_retry) */
	METRIC_DLQ_ENTRIES,	   /* dlq_entries_total (prefer metrics_function_dlq) */
	METRIC_CONCURRENCY_WAITS,  /* concurrency_waits_total */
	METRIC_SCHEDULE_PUBLISHED, /* schedule_occurrences_published_total */
	METRIC_SCHEDULE_DUPLICATE, /* schedule_occurrences_duplicate_total */
	METRIC_SCHEDULE_PUBLISH_FAILURE, /* schedule_publish_failures_total */
	METRIC_STANDBY_DISPATCHES,	 /* standby_dispatches_total */
	METRIC_STANDBY_MISSES,		 /* standby_misses_total (only while standby is on) */
	METRIC_WARM_INVOCATIONS,	 /* warm_invocations_total */
	METRIC_DLQ_REPLAYED,		 /* dlq_replayed_total */
	METRIC_CONSUMERS_DELETED,	 /* consumers_deleted_total */
	METRIC_COUNTER_COUNT
};

/* Unlabelled gauges. */
enum metric_gauge {
	METRIC_PENDING_ENTRIES,	   /* pending_entries */
	METRIC_PENDING_OLDEST_AGE, /* pending_oldest_age_seconds */
	METRIC_BUFFERED_EVENTS,	   /* buffered_events */
	METRIC_IN_FLIGHT,	   /* in_flight_invocations */
	METRIC_RETRIES_SCHEDULED,  /* retries_scheduled */
	METRIC_GAUGE_COUNT
};

/* The outcome label of handler_invocations_total. */
enum metric_outcome {
	METRIC_OUTCOME_SUCCESS, /* "success": the handler exited 0 */
	METRIC_OUTCOME_FAILURE, /* "failure": non-zero exit, crash, container or runtime error */
	METRIC_OUTCOME_TIMEOUT, /* "timeout": killed at its timeout (counts as a failure too) */
	METRIC_OUTCOME_COUNT
};

/* Returns the label value of an outcome ("success", ...). */
const char *metrics_outcome_name(enum metric_outcome outcome);

/* The reason label of standby_discarded_total: why a standby container was
 * removed without being given an event. */
enum metric_standby_reason {
	METRIC_STANDBY_VERSION,	 /* "version": its function's version changed or it was removed */
	METRIC_STANDBY_SECRET,	 /* "secret": a secret it references changed */
	METRIC_STANDBY_IDLE,	 /* "idle": no demand for STANDBY_IDLE */
	METRIC_STANDBY_EXCESS,	 /* "excess": more than the target or STANDBY_MAX */
	METRIC_STANDBY_EXITED,	 /* "exited": the container exited before dispatch (import
				    error, OOM) */
	METRIC_STANDBY_LOST,	 /* "lost": attach or wait broke, or its CPU quota not set */
	METRIC_STANDBY_SHUTDOWN, /* "shutdown": Relay is stopping */
	METRIC_STANDBY_AGE,	 /* "age": parked for STANDBY_MAX_AGE_NS, replaced */
	METRIC_STANDBY_REASON_COUNT
};

/* Returns the label value of a reason ("version", ...), or "unknown" for a
 * value outside the enum; a static string, for log lines too. */
const char *metrics_standby_reason_name(enum metric_standby_reason r);

/* The reason label of warm_retired_total: why a warm container was removed
 * (warm.h). Every reason is always rendered, zeros included. */
enum metric_warm_reason {
	METRIC_WARM_VERSION,  /* "version": its function's version changed or it was removed */
	METRIC_WARM_SECRET,   /* "secret": a secret it references changed */
	METRIC_WARM_IDLE,     /* "idle": no invocation for the template's warm.idle */
	METRIC_WARM_MAX_USES, /* "max_uses": served warm.max_uses invocations */
	METRIC_WARM_EXCESS,   /* "excess": more idle than the function's concurrency */
	METRIC_WARM_EXITED,   /* "exited": its process exited (sys.exit, crash, OOM) */
	METRIC_WARM_TIMEOUT,  /* "timeout": an invocation timed out (container killed) */
	METRIC_WARM_ERROR, /* "error": attach broke, protocol error, cancelled, CPU bound refused */
	METRIC_WARM_SHUTDOWN, /* "shutdown": Relay is stopping */
	METRIC_WARM_REASON_COUNT
};
const char *metrics_warm_reason_name(enum metric_warm_reason r);

/* ---- switches --------------------------------------------------------- */

/* Enabled by default. When disabled every update below is a no-op (one
 * relaxed atomic load), for benchmark comparisons; reads still work. */
void metrics_set_enabled(bool enabled);
bool metrics_enabled(void);

/* Zeroes every value, frees every labelled series, re-enables updates and
 * re-arms the one-time WARN. Tests only: no other thread may be using the
 * registry, and cached handles become invalid. */
void metrics_reset_for_tests(void);

/* ---- unlabelled updates ---------------------------------------------- */

void metrics_inc(enum metric_counter c);
void metrics_add(enum metric_counter c, uint64_t n);

/* Gauges hold a double. _add accepts negative deltas (in_flight +1/-1). */
void metrics_gauge_set(enum metric_gauge g, double value);
void metrics_gauge_add(enum metric_gauge g, double delta);

/* ---- labelled updates ------------------------------------------------ */

/* One finished handler invocation (event-driven or scheduled). Updates, at
 * once: handler_invocations_total{function,handler,outcome},
 * handler_duration_seconds{function,handler} (negative or NaN durations are
 * recorded as 0), handler_success_total or handler_failure_total, and
 * function_successes_total or function_failures_total{function}. It never
 * touches the event counters: scheduled invocations are not events. */
void metrics_handler_invocation(const char *function, const char *handler,
				enum metric_outcome outcome, double duration_seconds);

/* Cached form of the above. The handle is borrowed from the registry and
 * stays valid until process exit; NULL when the series bound is reached (and
 * metrics_handler_observe(NULL, ...) is then a no-op). */
struct metrics_handler;
struct metrics_handler *metrics_handler_get(const char *function, const char *handler);
void metrics_handler_observe(struct metrics_handler *h, enum metric_outcome outcome,
			     double duration_seconds);

/* function_events_total{function} += 1. Call once per (event, matched
 * function) when the event's invocations of that function are finished. Not
 * for scheduled invocations. events_processed_total is counted separately,
 * once per message, with metrics_inc(METRIC_EVENTS_PROCESSED). */
void metrics_function_event(const char *function);

/* retries_total and function_retries_total{function} += 1. function may be
 * NULL when no function is to blame: only the global counter moves. */
void metrics_function_retry(const char *function);

/* key_waits_total{function} += 1: a message found its key's place taken
 * (key_concurrency, keyorder.h) and waits. */
void metrics_function_key_wait(const char *function);

/* dlq_entries_total and function_dlq_entries_total{function} += 1. function
 * may be NULL (e.g. a malformed event no function matched). */
void metrics_function_dlq(const char *function);

/* One finished image build: function_build_seconds{function} observes its
 * duration whatever the result; build_failures_total{function} += 1 when
 * ok is false. */
void metrics_build(const char *function, bool ok, double duration_seconds);

/* Creates the function's series (all zero) so GET /metrics and the SQLite
 * snapshot list it before its first event; idempotent. Returns 0, or -1 when
 * the series bound is reached. Works even when updates are disabled. */
int metrics_function_register(const char *function);

/* standby_containers{function,handler} += delta (+1 when a standby
 * container is started for the handler, -1 when it is dispatched or
 * discarded). Creates the handler's series like metrics_handler_get (and
 * drops the update past the series bound). */
void metrics_standby_containers(const char *function, const char *handler, int64_t delta);

/* standby_discarded_total{reason} += 1; a reason outside the enum is
 * ignored. */
void metrics_standby_discarded(enum metric_standby_reason r);

/* warm_containers{function} += delta (+1 when a warm container is started,
 * -1 when it is retired); creates the function's series like the other
 * per-function families. */
void metrics_warm_containers(const char *function, int64_t delta);
/* warm_retired_total{reason} += 1; a reason outside the enum is ignored. */
void metrics_warm_retired(enum metric_warm_reason r);
uint64_t metrics_warm_retired_value(enum metric_warm_reason r);
/* 0 when the series does not exist (never creates it). */
int64_t metrics_warm_containers_value(const char *function);

/* ---- reads ----------------------------------------------------------- */

/* Appends the whole registry in the Prometheus text exposition format 0.0.4:
 * "# HELP" and "# TYPE" per family, families in the order listed above,
 * series sorted by function then handler (bytewise), outcomes and standby
 * reasons in enum order.
 * Returns 0, or -1 if out's cap was reached (out then holds a prefix). */
int metrics_render(struct buf *out);

/* Absolute values for the SQLite stats row. The schedule and standby
 * families are Prometheus-only: no snapshot field holds them. */
struct metrics_global_snapshot {
	uint64_t events_received;
	uint64_t events_processed;
	uint64_t handler_successes;
	uint64_t handler_failures;
	uint64_t retries;
	uint64_t dlq_entries;
	double pending_entries;		   /* gauge as last sampled */
	double pending_oldest_age_seconds; /* gauge as last sampled */
	double buffered_events;
	double in_flight_invocations;
};

/* Absolute values for one function_stats row. */
struct metrics_function_snapshot {
	char *function; /* owned by the array; freed by metrics_snapshot_free */
	uint64_t events;
	uint64_t successes;
	uint64_t failures;
	uint64_t retries;
	uint64_t dlq_entries;
	uint64_t build_failures;
};

/* Fills *global and returns in *functions a new array of *nfunctions entries,
 * one per known function, sorted by name (NULL and 0 when there are none).
 * The caller owns the array and frees it with metrics_snapshot_free.
 * functions/nfunctions may both be NULL to read the global values only. */
void metrics_snapshot(struct metrics_global_snapshot *global,
		      struct metrics_function_snapshot **functions, size_t *nfunctions);
void metrics_snapshot_free(struct metrics_function_snapshot *functions, size_t n);

/* Value of one unlabelled counter/gauge (tests, the DEBUG snapshot line). */
uint64_t metrics_counter_value(enum metric_counter c);
double metrics_gauge_value(enum metric_gauge g);

/* standby_discarded_total{reason} (0 for a reason outside the enum), and
 * standby_containers{function,handler} (0 when that series does not exist;
 * never creates it). For tests and `relay function inspect`-style reads. */
uint64_t metrics_standby_discarded_value(enum metric_standby_reason r);
int64_t metrics_standby_containers_value(const char *function, const char *handler);

/* ---- the /metrics server --------------------------------------------- */

/* Serves GET (and HEAD) /metrics on listen_addr (":9090",
 * "127.0.0.1:9090", "[::1]:9090", "host:9090") from libmicrohttpd's own
 * threads: Content-Type "text/plain; version=0.0.4; charset=utf-8"; any
 * other path is 404, any other method on /metrics 405 with "Allow: GET,
 * HEAD". If the address cannot be bound (or resolved) now, one WARN is
 * logged and a background thread retries every 2 seconds until it binds or
 * the server is stopped; binding logs INFO "Metrics http server listening
 * on <addr>". Returns 0 (serving or retrying), or -1 if listen_addr is
 * malformed or a server is already running. Call from one thread (main). */
int metrics_server_start(const char *listen_addr);

/* The bound TCP port, or 0 while not (yet) listening. */
int metrics_server_port(void);

/* Stops retrying or serving: in-flight scrapes finish, open connections are
 * closed; returns once every server thread is gone. No-op when not started. */
void metrics_server_stop(void);

#endif
