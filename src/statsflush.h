/*
 * The stats flush: every STATSFLUSH_INTERVAL_NS (5 s, fixed) one thread,
 * named "statsflush", copies the metrics registry's absolute values
 * (metrics_snapshot) into the state database's stats and function_stats
 * rows, and logs the DEBUG "periodic metrics snapshot" line. Stopping it
 * performs one final flush, bounded: statsflush_stop waits at most its
 * timeout (the database's own busy timeout is 2 s).
 *
 * The flush never touches Redis or the event path: a slow or broken
 * database delays only this thread. A write failure is logged once (WARN)
 * until a write succeeds again (INFO), never fatal.
 *
 * Thread-safety: start/stop/free from one thread (main). The state handle
 * is borrowed (shared with the reconciler; state.h serializes writers).
 */
#ifndef RELAY_STATSFLUSH_H
#define RELAY_STATSFLUSH_H

#include <stdint.h>

#include "registry.h"
#include "state.h"

#define STATSFLUSH_INTERVAL_NS (5LL * 1000000000LL)

struct statsflush;

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

/* Frees a stopped handle. NULL is fine. */
void statsflush_free(struct statsflush *sf);

/* One flush now, on the calling thread, as the thread does it: 0, or -1
 * with a malloc'd *err (exposed for tests). */
int statsflush_once(struct state *st, struct registry *reg, char **err);

#endif
