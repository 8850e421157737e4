/*
 * Standby containers: each invocation still gets a fresh, single-use
 * container, but one that was started before its event arrived.
 *
 * The pool keeps, per (function version, handler) with recent demand,
 * containers parked by runner_park (runner.h): created with every setting
 * an on-demand invocation gets plus the label relay.standby=true, attached,
 * waited on and started; the bootstrap has imported the handler's module
 * and waits in its read of stdin. A worker takes one (standby_take) and
 * runs its invocation in it (runner_dispatch); a container is never given
 * a second event. When there is none ready the invocation runs on demand,
 * exactly as with standby off.
 *
 * Sizing. Demand is counted per (function, handler) by the workers
 * (standby_begin / standby_end around every invocation, standby or not):
 * the number running now, its peak over the current and the previous
 * STANDBY_PEAK_WINDOW_NS window, and the time of the last invocation. The
 * target of a handler is that peak (so a handler that ran 3 at once lately
 * keeps 3 ready), or, when larger, what a steady stream of its events uses
 * up while one container starts (standby_rate_need: its arrival rate over
 * the last STANDBY_RATE_SPAN_NS times the handler's smoothed start time,
 * so events 0.5 s apart with 1 s starts keep 2 ready), 0 once it has had
 * no invocation for idle_ns. The sum over
 * every handler never exceeds max (STANDBY_MAX); when targets add up to
 * more, the most recently used handlers come first. Containers above a
 * target are removed ("excess", or "idle" when the target fell to 0).
 *
 * Admission. Up to STANDBY_STARTERS containers start at once, each on a
 * starter thread with a Docker connection of its own, and each only after
 * the pool thread took a spare global concurrency slot for it
 * (slots_try_acquire_spare: free, and no invocation waiting for one:
 * slots.h), held while it starts and given back once it is parked: a
 * replacement never takes a slot an invocation is waiting for, a parked
 * container holds none, and refills run in parallel only while slots are
 * spare.
 *
 * Never stale. A parked container is removed ("version") once the
 * registry's current version of its function has another image (an edit, a
 * git sync, a removal; the image tag is the fingerprint of the whole
 * function directory, template.yaml included); ("secret") once the stamp of
 * a secret its function references (secret_stamp: the secret file's
 * identity and times, never its value) differs from the stamp taken just
 * before the container was created. Both are checked by the worker at take,
 * so no invocation after a swap or a rotation runs in an old container,
 * and by the pool thread every tick, so none stays behind. A container
 * that exits before dispatch (an import error, OOM) or whose connection
 * breaks is removed ("exited", "lost"), and that (version, handler) gets
 * no standby for STANDBY_RETRY_NS: its events run on demand, so an import
 * error is reported with the event exactly as without standby. Functions
 * whose secrets the provider cannot stamp get none.
 *
 * Age: a container parked for STANDBY_MAX_AGE_NS is removed ("age") and,
 * the demand still there, replaced by a fresh one.
 *
 * CPU: parked at 1 CPU, bounded to 0.05 CPU STANDBY_IMPORT_NS after its
 * start, lifted again at dispatch (below, at STANDBY_IMPORT_NS).
 *
 * Shutdown: standby_stop() stops the thread, then removes every parked
 * container within STANDBY_STOP_TIMEOUT_MS ("shutdown"); whatever escapes
 * (a kill -9) loses its attach connection, so Docker closes its stdin
 * (StdinOnce) and the bootstrap exits without calling the handler (an
 * empty event is not JSON); one that cannot notice carries the relay.*
 * labels and the next start's orphan sweep removes it.
 *
 * Observability: the gauge standby_containers{function,handler}, the
 * counters standby_dispatches_total, standby_misses_total and
 * standby_discarded_total{reason}; one DEBUG line per start and per
 * removal.
 *
 * Thread-safety: one mutex guards the pool and the demand table; it is
 * never held across an Engine API call. standby_take/begin/end are called
 * by any worker; the pool thread and each starter own a Docker connection.
 */
#ifndef RELAY_STANDBY_H
#define RELAY_STANDBY_H

#include <stdint.h>

#include "engine/registry.h"
#include "engine/runner.h"
#include "model/secret.h"
#include "engine/slots.h"

#define STANDBY_PEAK_WINDOW_NS (120LL * 1000000000LL)
#define STANDBY_RETRY_NS (60LL * 1000000000LL)
/* A container parked this long is replaced ("age"): idle connections
 * through a socket proxy are cut after 10 minutes (tecnativa's haproxy
 * "timeout server 10m"), and what the module computed at import should
 * not grow old either. */
#define STANDBY_MAX_AGE_NS (5LL * 60 * 1000000000LL)
#define STANDBY_STOP_TIMEOUT_MS 10000L
/* CPU. A container is parked at the 1 CPU every container gets, so that
 * its runtime starts and its module imports at full speed, and
 * STANDBY_IMPORT_NS after its start the pool thread puts it under the
 * parking CPU bound, 0.05 CPU (RUNNER_PARKED_NANO_CPUS, runner.h), until a
 * worker lifts it at dispatch. A module that loops at import costs at most
 * 1 CPU for that second per container start, then 0.05 CPU per parked
 * container (STANDBY_MAX times that in all), outside MAX_CONCURRENCY. One
 * the daemon refuses to bound is removed ("lost"): none stays parked
 * unbounded. One whose bound a worker cannot lift is handed back
 * (standby_discard) and removed ("lost") while its event runs on demand. */
#define STANDBY_IMPORT_NS (1LL * 1000000000LL)
/* Bound on one such update (an update answers within tens of ms). */
#define STANDBY_BOUND_TIMEOUT_MS 5000L
#define STANDBY_TICK_MS 1000
/* Starts in flight at most (each also holds a spare slot). */
#define STANDBY_STARTERS 2
/* The arrival rate is taken over the latest STANDBY_RATE_SAMPLES begins of
 * a handler within STANDBY_RATE_SPAN_NS; the rate's share of a target is
 * at most STANDBY_RATE_SAMPLES. */
#define STANDBY_RATE_SAMPLES 16
#define STANDBY_RATE_SPAN_NS (10LL * 1000000000LL)

struct standby_config {
	int max;	 /* STANDBY_MAX: at most this many parked at once; > 0 */
	int64_t idle_ns; /* STANDBY_IDLE */
	struct registry *registry;
	struct slots *slots;
	const struct secret_provider *provider;
	const char *hostname; /* the relay.hostname label; NULL: runner_hostname() */
};

struct standby;

/* Starts the pool thread (its Docker connection is opened there, and again
 * after a failure). cfg->max must be > 0: with STANDBY_MAX=0 there is no
 * pool at all and every caller passes NULL. */
struct standby *standby_start(const struct standby_config *cfg);
/* Stops the thread and removes every parked container (bounded); frees sb
 * (NULL is fine). */
void standby_stop(struct standby *sb);

/* Around every invocation of (fv, handler), standby or on demand. */
void standby_begin(struct standby *sb, const struct fn_version *fv, const char *handler);
void standby_end(struct standby *sb, const struct fn_version *fv, const char *handler);

/* A parked container for (fv, handler) that is current (same image, same
 * secret stamps, still waiting), removed from the pool: the caller
 * dispatches it (runner_dispatch). NULL when there is none (a miss; sb NULL
 * too). */
struct runner_parked *standby_take(struct standby *sb, const struct fn_version *fv,
				   const char *handler);

/* A container standby_take gave out for (fv, handler) that runner_dispatch
 * did not dispatch (its CPU bound could not be lifted): removed by the
 * pool thread as "lost", that version of the handler backing off like an
 * early exit. sb is the pool it came from. */
void standby_discard(struct standby *sb, const struct fn_version *fv, const char *handler,
		     struct runner_parked *p);

/* Parked containers of (function, handler) right now. */
int standby_count(struct standby *sb, const char *function, const char *handler);

/* What a steady stream uses up during one start: the rate of the begins
 * in arrivals (a ring of STANDBY_RATE_SAMPLES; narrivals recorded ever)
 * within STANDBY_RATE_SPAN_NS of now, at least 3 spanning at least a
 * second, times start_ns (1 s when 0), rounded up; 0 without such a
 * stream. Pure; exposed for its unit test. */
int standby_rate_need(const int64_t *arrivals, unsigned narrivals, int64_t start_ns, int64_t now);

/* Wakes the pool thread (a version or a secret may have changed). */
void standby_poke(struct standby *sb);

#endif
