/*
 * Concurrency slots: a global limit (MAX_CONCURRENCY) intersected with a
 * per-function limit (the template's concurrency). A slot pair is acquired
 * both-or-neither under one mutex: without waiting (slots_try_acquire, what
 * the consumer uses: a worker that gets no slot parks the invocation and
 * comes back to it when a release calls slots_on_release's callback), or
 * with a bounded wait (slots_acquire). Per-function limits are created first-wins by name and never
 * resized while running (the spec: a changed concurrency needs a restart).
 * Thread-safe.
 */
#ifndef RELAY_SLOTS_H
#define RELAY_SLOTS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct slots;

struct slots *slots_new(int global_limit);
void slots_free(struct slots *s);

/*
 * Acquires one global slot and one slot of `function` (limit used only the
 * first time the name is seen), waiting at most wait_ns. Returns 0 when
 * acquired, -1 on timeout or when *stop becomes true. *waited is set when
 * the call had to block (for concurrency_waits_total).
 */
int slots_acquire(struct slots *s, const char *function, int function_limit, int64_t wait_ns,
		  const atomic_int *stop, bool *waited);
void slots_release(struct slots *s, const char *function);

/* Both-or-neither without waiting: 0 when taken, -1 when either limit is
 * reached. */
int slots_try_acquire(struct slots *s, const char *function, int function_limit);
/*
 * The consumer's parked invocations of function (delta +1 when one is
 * parked, -1 when it takes its slot or is dropped). Those whose function
 * has room wait on the global limit alone: they count as waiting for
 * slots_try_acquire_spare.
 */
void slots_defer(struct slots *s, const char *function, int function_limit, int delta);
/* fn(ctx) is called after every slots_release and slots_release_spare,
 * outside the slot lock, so it may take a lock under which the caller
 * calls slots_try_acquire (one callback; NULL clears it; once this
 * returns the previous one is neither running nor called again). */
void slots_on_release(struct slots *s, void (*fn)(void *ctx), void *ctx);

/*
 * Lower-priority admission (standby container starts): one global slot,
 * only when one is free and nobody waits for one (no slots_acquire
 * blocked, no parked invocation whose function has room: slots_defer),
 * never blocking.
 * Returns 0 when taken (give it back with slots_release_spare), -1 when
 * not.
 */
int slots_try_acquire_spare(struct slots *s);
void slots_release_spare(struct slots *s);

/* Current use, for tests and gauges. */
int slots_in_use(struct slots *s);
int slots_function_in_use(struct slots *s, const char *function);
/* Wakes waiters (e.g. at shutdown so they notice *stop). */
void slots_wake(struct slots *s);

#endif
