/*
 * The stats flush: every STATSFLUSH_INTERVAL_NS (5 s, fixed) one thread,
 * named "statsflush", copies the metrics registry's absolute values
 * (metrics_snapshot) into the state database's stats and function_stats
 * rows, and, while standby is enabled (statsflush_set_standby), each served
 * handler's count of standby containers into the standby rows; and logs the
 * DEBUG "periodic metrics snapshot" line. Stopping it
 * performs one final flush, bounded: statsflush_stop waits at most its
 * timeout (the database's own busy timeout is 2 s).
 *
 * The flush never touches Redis or the event path: a slow or broken
 * database delays only this thread. A write failure is logged once (WARN)
 * until a write succeeds again (INFO), never fatal.
 *
 * Thread-safety: start/stop/free from one thread (main);
 * statsflush_set_standby from any thread. The state handle is borrowed
 * (shared with the reconciler; state.h serializes writers).
 */
#ifndef RELAY_STATSFLUSH_H
#define RELAY_STATSFLUSH_H

#include <stdint.h>

#include "engine/registry.h"
#include "engine/state.h"

#define STATSFLUSH_INTERVAL_NS (5LL * 1000000000LL)

struct statsflush;

/*
 * How many standby containers (function, handler) has parked right now;
 * ctx is the one given with it. Called on the flush thread (or
 * statsflush_once's caller) and must not block: it only reads memory.
 */
typedef int (*statsflush_standby_fn)(void *ctx, const char *function, const char *handler);

/* A statsflush_standby_fn over a struct standby * (standby.h's
 * standby_count). */
int statsflush_standby_count(void *standby, const char *function, const char *handler);

/*
 * Starts the thread. st may be NULL (no state database): only the DEBUG
 * line is produced. function_stats rows are written for the functions of
 * reg's current snapshot only (a removed function's series lives on in the
 * metrics registry, but its row would outlive its functions row); reg NULL
 * writes every known function. Both are borrowed. interval_ns 0 means
 * STATSFLUSH_INTERVAL_NS. Never NULL.
 */
struct statsflush *statsflush_start(struct state *st, struct registry *reg, int64_t interval_ns);

/*
 * Stops the thread after one final flush, waiting at most timeout_ms.
 * Returns 0 when the thread is gone; -1 when it is still writing: the
 * handle (and the state database) must then be left alone (the process is
 * about to exit). NULL is fine.
 */
int statsflush_stop(struct statsflush *sf, int64_t timeout_ms);

/*
 * From the next flush on, writes the standby rows with count(ctx, ...): one
 * per distinct handler of each function of the registry's current snapshot
 * (its event rules' handlers in template order, then its schedules' handlers
 * not already listed); none when the flush has no registry. count NULL:
 * standby off, the rows are emptied (the state at start). Thread-safe; once
 * it returns no flush calls the previous count any more, so its ctx may be
 * freed (runtime_stop clears it before standby_stop). sf NULL is fine.
 */
void statsflush_set_standby(struct statsflush *sf, statsflush_standby_fn count, void *ctx);

/* Frees a stopped handle. NULL is fine. */
void statsflush_free(struct statsflush *sf);

/* One flush now, on the calling thread, as the thread does it with
 * count/ctx set (count NULL: standby off): 0, or -1 with a malloc'd *err (exposed for
 * tests). */
int statsflush_once(struct state *st, struct registry *reg, statsflush_standby_fn count, void *ctx,
		    char **err);

#endif
