/*
 * Warm containers (template.yaml `warm:`, docs/template.md "Warm
 * containers"): one container serving many invocations of one function
 * version and handler, one at a time, through the bootstrap's warm loop
 * (runner.h's runner_warm_*, docs/warm-protocol.md).
 *
 * The pool keeps, per (function, handler), the idle warm containers. A
 * worker that runs an invocation of a warm function (warm_invoke) takes an
 * idle one that is current, or starts a new one, runs the invocation in it
 * and puts it back idle, or retires it. So containers are bounded by the
 * function's concurrency and MAX_CONCURRENCY: each serves one invocation at
 * a time, and every invocation holds a concurrency slot (the consumer takes
 * it around the executor call); an idle one holds none. At most the
 * function's concurrency stay idle per handler ("excess" beyond that).
 *
 * Never stale. A container is current while the registry's version of its
 * function has its image (the tag is the fingerprint of the whole function
 * directory, template.yaml included) and the stamps of the secrets the
 * function references (secret_stamp: identity and times of the secret,
 * never its value) equal those taken just before it was created. The
 * worker checks both at take, so no invocation after a reload or a
 * rotation runs in an old container; the reaper checks them every tick, so
 * none stays behind. A function whose secrets cannot be stamped runs fresh.
 *
 * Retirement reasons (warm_retired_total{reason}, one DEBUG line each with
 * function, handler, container, reason): "version", "secret", "idle" (no
 * invocation for the template's warm.idle), "max_uses" (served
 * warm.max_uses invocations), "excess", "exited" (the process exited:
 * sys.exit, a crash, OOM; also while idle), "timeout", "error" (the attach
 * broke, a protocol error, a cancellation, a refused CPU bound),
 * "shutdown".
 *
 * CPU: an idle container is bounded to RUNNER_PARKED_NANO_CPUS (0.05 CPU,
 * as a parked standby container) once idle for WARM_BOUND_AFTER_NS; the
 * invocation lifts it (runner_warm_invoke). A worker that wants a
 * container while the reaper's bound call on it runs waits for that call
 * (at most WARM_BOUND_TIMEOUT_MS) instead of starting a second one.
 *
 * The reaper thread (its own Docker connection) wakes every WARM_TICK_MS or
 * when poked and removes what must go, then bounds what is due. Removals
 * decided by a worker are handed to it too, so an invocation's result is
 * not held up by a removal. warm_stop removes everything within
 * WARM_STOP_TIMEOUT_MS ("shutdown"); what escapes (a kill -9) carries the
 * relay.* labels and the next start's orphan sweep removes it.
 *
 * Thread-safety: one mutex guards the pool; it is never held across an
 * Engine API call. warm_invoke is called by any worker with that worker's
 * own Docker connection.
 */
#ifndef RELAY_WARM_H
#define RELAY_WARM_H

#include <stdint.h>

#include "engine/registry.h"
#include "engine/runner.h"
#include "model/secret.h"

#define WARM_TICK_MS 1000
#define WARM_BOUND_AFTER_NS (1LL * 1000000000LL)
#define WARM_BOUND_TIMEOUT_MS 5000L
#define WARM_STOP_TIMEOUT_MS 10000L

struct warm_config {
	struct registry *registry;
	const struct secret_provider *provider;
	const char *hostname; /* the relay.hostname label; NULL: runner_hostname() */
};

struct warm;

/* Starts the reaper thread. */
struct warm *warm_start(const struct warm_config *cfg);
/* Stops the reaper and removes every warm container, idle or handed back
 * (bounded by WARM_STOP_TIMEOUT_MS); call once no worker invokes any more.
 * Frees w (NULL is fine). */
void warm_stop(struct warm *w);

/* Runs the invocation in (fv's function, handler) in a warm container of
 * fv: an idle current one, else a new one (runner_warm_start with the
 * template's env and secrets, and in->hostname). Fills *out as
 * runner_warm_invoke does; a container that cannot be started is
 * RUNNER_ERROR with not_run (nothing ran). Returns 0 on RUNNER_SUCCESS.
 * fv->fn->tpl->warm must be set. */
int warm_invoke(struct warm *w, struct docker *d, const struct fn_version *fv, const char *handler,
		const struct runner_request *in, struct runner_result *out);

/* Warm containers of function now, idle or busy. */
int warm_count(struct warm *w, const char *function);

/* Wakes the reaper (a version or a secret may have changed). */
void warm_poke(struct warm *w);

#endif
