/*
 * What happens to one message of the stream, from the entry a worker took
 * to the decision on its acknowledgment (docs/execution.md:
 * acknowledgment, recovery and retries).
 *
 * The walk of a message: the consumer (consumer.h) reads it, buffers it
 * and hands it to a worker thread, which calls delivery_process here:
 * decode (a malformed event is dead-lettered; a scheduled occurrence must
 * be proven genuine, schedule.h), resolve what it runs (a scheduled
 * occurrence its schedule's handler, an event its matching rules), load
 * its invocation state and run each target in order under the
 * invocation-state protocol (invocation.h: claim, invoke through the
 * executor hook, record), retrying and dead-lettering as the rule says;
 * then the answer tells the consumer to acknowledge it (its acker batches
 * the XACK), to let its buffer slot go (dead-lettered or left pending), or
 * that it is parked for a concurrency slot and resumed later
 * (delivery_take_locked, delivery_resume).
 *
 * Thread-safety: delivery_process and delivery_resume run on any worker
 * thread at once, each with its own Redis connection. The deferred list is
 * guarded by the consumer's lock (cfg.lock), which the worker holds for
 * delivery_take_locked and delivery_parked_locked; the lock order is that
 * lock, then the slots' lock (slots.h).
 */
#ifndef RELAY_DELIVERY_H
#define RELAY_DELIVERY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/event.h"
#include "io/redis.h"
#include "engine/consumer.h"
#include "engine/registry.h"

struct slots;
struct keyorder;

/* A message as the consumer holds it (consumer.c reads and buffers it). */
struct delivery_msg {
	char *id;
	char **fields; /* alternating names and values (copies; NULL = not a string) */
	size_t *lens;
	size_t nfields;
	struct event *ev; /* decoded by the reader, or NULL: the worker decodes */
	/* First delivered by a plain XREADGROUP ">" (not recovered, not
	 * reclaimed): it can have no invocation state, so plan_load skips the
	 * HGETALL and every claim compares against "absent". A state key left
	 * by an earlier life of the group (a recreated group delivering an id
	 * again) only makes that claim lose its compare-and-set: the message
	 * stays pending and the reclaim, which loads the state, settles it. */
	bool fresh;
	/* Claimed by the retrier, due by Redis's clock (TIME): a retry whose
	 * marker this worker's clock sees due within RUNNER_CLOCK_SKEW_MS is
	 * run now, not left pending for the reclaim. */
	bool retry_due;
	/* Registered by its reader with the queues of its keyed functions and
	 * found within their limits (keyorder.h): it runs without asking. */
	bool keys_acquired;
	/* Registered with some (keys_acquired or not): it leaves them when it
	 * is acknowledged, even when nothing keyed runs it any more. */
	bool keys_registered;
	struct delivery_msg *next; /* the consumer's queue */
};

/* Frees a message and everything it owns; NULL is fine. */
void delivery_msg_free(struct delivery_msg *m);
/* The last field `name` of a message (borrowed, *len bytes), or NULL. */
const char *delivery_msg_field(const struct delivery_msg *m, const char *name, size_t *len);

/* What the consumer gets from a delivery: all borrowed, outliving it. */
struct delivery_config {
	const char *stream, *group, *consumer, *dlq;
	struct registry *registry;
	struct slots *slots;
	consumer_invoke_fn invoke; /* the executor hook (consumer_config.invoke) */
	void *invoke_ctx;
	int64_t backoff_ns[4]; /* copied: the default backoff list, for tests (retry.h) */
	const atomic_int *stop; /* the consumer's stop flag */
	pthread_mutex_t *lock;	/* the consumer's lock: guards the deferred list */
	/* An invocation found the Docker daemon unreachable: sets the hold
	 * (CONSUMER_HOLD_DOCKER) and waits until it lifts; false at stop.
	 * NULL (no cfg.ready): the invocation is only left pending, like a
	 * cancelled one. Called with ctx. */
	bool (*docker_wait)(void *ctx);
	/* A retry of a message was recorded, due at due_ms (unix ms) in the
	 * retry index retry_key (invocation.h): the retrier claims it then.
	 * Called with ctx; NULL: none (the index still holds it). */
	void (*retry_scheduled)(void *ctx, int64_t due_ms);
	const char *retry_key;
	const struct keyorder *keys; /* per-key order (keyorder.h) */
	void *ctx;
};

/* How a delivery ended: what the consumer does with the message. */
enum delivery_verdict {
	DELIVERY_RELEASE, /* dead-lettered, or left pending: its buffer slot goes */
	DELIVERY_ACK,	  /* done: acknowledge it (and delete key, when set) */
	DELIVERY_PARKED,  /* waits for a concurrency slot: still held, nothing to do */
};

struct delivery_end {
	enum delivery_verdict verdict;
	char *id;  /* the message id (malloc'd), NULL when parked */
	char *key; /* with DELIVERY_ACK: the invocation-state key to delete, or NULL */
	/* With DELIVERY_ACK: it has places in per-key queues, released with
	 * its acknowledgement (keyorder_release). */
	bool keyed;
};

struct delivery;
/* A message's work, parked on the deferred list. */
struct delivery_plan;

/* Never NULL. */
struct delivery *delivery_new(const struct delivery_config *cfg);
/* Frees d; the deferred list must be empty (delivery_drop_deferred). */
void delivery_free(struct delivery *d);

/* Delivers m (owned from here on) on r, into *out (the caller frees its
 * strings). */
void delivery_process(struct delivery *d, struct redis *r, struct delivery_msg *m,
		      struct delivery_end *out);

/* Whether any plan is parked. Lock (cfg.lock) held. */
bool delivery_parked_locked(const struct delivery *d);
/* The oldest parked plan whose function can take a slot now, unlinked,
 * holding that slot; NULL when none can. Lock (cfg.lock) held. */
struct delivery_plan *delivery_take_locked(struct delivery *d);
/* Goes on with a plan delivery_take_locked gave, like delivery_process. */
void delivery_resume(struct delivery *d, struct redis *r, struct delivery_plan *p,
		     struct delivery_end *out);
/* At shutdown, once no worker runs: drops the parked plans, never
 * claimed, so their messages stay pending and nothing is charged. */
void delivery_drop_deferred(struct delivery *d);

#endif
