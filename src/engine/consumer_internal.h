/*
 * The consumer's insides, shared by its files: consumer.c (the buffer,
 * holds, reclaim, retrier, sampler, acker, workers and lifecycle) and
 * consumer_read.c (the reader: reads, matching, per-key registration,
 * recovery of refused reads). Nothing outside src/engine/consumer*.c
 * includes this; the contract is consumer.h.
 */
#ifndef RELAY_CONSUMER_INTERNAL_H
#define RELAY_CONSUMER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/rfc3339.h"
#include "engine/consumer.h"
#include "engine/delivery.h"
#include "io/redis.h"


struct ack {
	char *id;
	char *key;  /* invocation-state key to delete, or NULL */
	bool keyed; /* leaves its per-key queues first (keyorder.h) */
};

struct consumer {
	struct consumer_config cfg;
	struct redis_uri uri;
	char *stream, *group, *name, *dlq;
	size_t budget; /* bytes per read reply (CONSUMER_READ_BUDGET) */

	pthread_mutex_t lock;
	pthread_cond_t work;  /* a message was queued / stop */
	pthread_cond_t space; /* buffer room / stop */
	struct delivery_msg *head, *tail;
	int buffered;
	/* Buffer room the reader leaves to the retrier and the reclaim while
	 * they wait for some, so that sustained traffic cannot starve them. */
	int reserved;
	char **held; /* ids held locally, for reclaim dedup */
	size_t nheld, capheld;
	/* What happens to each message a worker takes, with the plans parked
	 * for a concurrency slot (under lock: delivery.h). */
	struct delivery *delivery;

	pthread_mutex_t ack_lock;
	pthread_cond_t ack_cond;
	struct ack *acks;
	size_t nacks, capacks;
	int ack_stop;

	atomic_int stop;
	struct slots *slots;

	/* Holds (consumer_hold): the bits in force, since when each started
	 * (monotonic), and whose turn it is to probe the daemon. */
	pthread_mutex_t gate_lock;
	pthread_cond_t gate_cond;
	unsigned hold;
	int64_t hold_since[2];

	/* The retrier (retry index, invocation.h): when it looks next (wall
	 * ms), under lock; retry_cond wakes it early. */
	char *retry_key;
	int64_t retry_wake_ms;
	pthread_cond_t retry_cond;
	char reclaim_cursor[64]; /* where the next reclaim pass goes on */
	struct keyorder *keys;	 /* per-key order's Redis keys (keyorder.h) */

	pthread_t reader, reclaimer, retrier, acker, sampler, prober;
	pthread_t *workers;
	int nworkers;
};


/* The arguments the scripts share (after "2", the number of keys). */
struct consumer_read_args {
	char count[16], emax[24], ts[RFC3339_STR_MAX];
};

/* pthread_cond_timedwait for ns from now (monotonic). */
void consumer_timed_wait(pthread_cond_t *cv, pthread_mutex_t *m, int64_t ns);
/* Whether this process holds message id (buffered or running); lock held. */
bool consumer_held_locked(struct consumer *c, const char *id);
/* Counts a message in the local buffer until released; lock held. */
void consumer_hold_locked(struct consumer *c, const char *id);
/* Queues a message for the workers (takes ownership); lock held. */
void consumer_enqueue_locked(struct consumer *c, struct delivery_msg *m);
/* Releases the buffer slots of n messages (one lock, one wake-up). */
void consumer_release_ids(struct consumer *c, const char *const *ids, size_t n);
/* A stream entry {id, fields} as a message (its *cost in reply bytes), or
 * NULL when malformed. */
struct delivery_msg *consumer_msg_from_entry(const redisReply *e, size_t *cost);
/* A connection to the consumer's Redis, not yet connected. */
struct redis *consumer_conn_new(struct consumer *c, int command_timeout_ms);
/* Connects r when it is not: 0, or -1 after a short pause. */
int consumer_ensure_conn(struct consumer *c, struct redis *r);
/* Queues XACK of ids on r. */
int consumer_append_xack(const struct consumer *c, struct redis *r, const char *const *ids,
			 size_t n);
/* How many entries one read may ask for with room in the buffer. */
int consumer_read_count(const struct consumer *c, int room);
void consumer_read_args_fill(int n, struct consumer_read_args *a);
/* Entries a read script dead-lettered as too large: logged and counted. */
void consumer_report_too_large(struct consumer *c, const redisReply *big, bool fresh);
/* Whether a hold of mask is in force. */
bool consumer_holding(struct consumer *c, unsigned mask);
/* The reader's gate: returns once no hold is in force (or at stop). */
void consumer_gate_pass(struct consumer *c);
/* Pending messages whose stream entry is gone: acknowledged, state dropped. */
void consumer_drop_gone(struct consumer *c, struct redis *r, const redisReply *gone);
/* The reader thread (consumer_read.c). */
void *consumer_reader_main(void *arg);

#endif
