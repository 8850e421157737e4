/*
 * The stream consumer (relay-spec "Concurrency and backpressure",
 * "Acknowledgment semantics", "Recovery and retries").
 *
 * Threads, each with its own Redis connection:
 *   reader    XREADGROUP ... COUNT <free buffer slots> BLOCK, only while the
 *             local buffer (MAX_BUFFERED_EVENTS) has room;
 *   workers   MAX_CONCURRENCY of them: decode, match, run each matching
 *             invocation in order under the invocation-state protocol,
 *             then ACK / leave pending / dead-letter;
 *   acker     batches XACKs (and the DEL of invocation-state keys) into one
 *             round trip; a message's buffer slot is released once its ACK
 *             is confirmed, it is dead-lettered, or it is left pending;
 *   reclaim   XAUTOCLAIM every reclaim interval for messages idle longer
 *             than min_pending_idle, buffer-aware;
 *   sampler   XPENDING every 15 s for the pending_entries and
 *             pending_oldest_age_seconds gauges.
 *
 * The consumer never runs containers itself: it calls cfg.invoke, which the
 * runtime wires to the Docker runner (and tests may wire to anything).
 */
#ifndef RELAY_CONSUMER_H
#define RELAY_CONSUMER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "redis.h"
#include "registry.h"

/* Fixed defaults (spec: not configurable through the environment). */
#define CONSUMER_RECLAIM_INTERVAL_NS (60LL * 1000000000LL)
#define CONSUMER_MIN_PENDING_IDLE_NS (60LL * 1000000000LL)
#define CONSUMER_SLOT_WAIT_NS (10LL * 1000000000LL)
#define CONSUMER_BLOCK_MS 2000
#define CONSUMER_SAMPLE_INTERVAL_NS (15LL * 1000000000LL)

/* One invocation handed to the executor. Borrowed for the call only. */
struct invoke_request {
	const struct fn_version *fv; /* function, template, image */
	const char *handler;
	int64_t timeout_ns;
	const char *payload; /* the event JSON text as received */
	size_t payload_len;
	const char *message_id;
	const char *event_id;	/* may be NULL */
	const char *event_name; /* may be NULL */
	int attempt;		/* 1-based */
	int worker;		/* worker index, for per-thread resources */
};

enum invoke_outcome {
	INVOKE_OK,
	INVOKE_FAILED,	  /* non-zero exit or a failure to run */
	INVOKE_TIMEOUT,	  /* killed at its timeout */
	INVOKE_CANCELLED, /* did not run to an outcome (shutdown, daemon unreachable):
			     not charged as an attempt; the message stays pending */
};

struct invoke_result {
	enum invoke_outcome outcome;
	int exit_code;	 /* -1 when none */
	char error[512]; /* why it failed, naming function and handler */
};

typedef void (*consumer_invoke_fn)(void *ctx, const struct invoke_request *req,
				   struct invoke_result *res);

struct consumer_config {
	const struct redis_uri *uri;
	const char *stream;
	const char *group;
	const char *consumer; /* the hostname */
	int max_buffered;
	int max_concurrency;
	/* Zero fields fall back to the fixed defaults. */
	int64_t reclaim_interval_ns;
	int64_t min_pending_idle_ns;
	int64_t slot_wait_ns;
	int64_t backoff_ns[4];
	int block_ms;
	int64_t sample_interval_ns; /* backlog gauges (XPENDING) */
	struct registry *registry;
	consumer_invoke_fn invoke;
	void *invoke_ctx;
};

struct consumer;

/* Creates the consumer group (XGROUP CREATE <stream> <group> 0 MKSTREAM;
 * BUSYGROUP is fine). Returns 0, or -1 with a message in err. */
int consumer_ensure_group(struct redis *r, const char *stream, const char *group, char *err,
			  size_t errlen);

/* Starts every thread. Returns NULL only on a programming error. */
struct consumer *consumer_start(const struct consumer_config *cfg);
/* Stops reading, lets in-flight invocations finish (bounded by their
 * timeouts), leaves buffered-but-unstarted messages pending, joins. */
void consumer_stop(struct consumer *c);
/* Asks running invocations to cancel (a second signal). */
void consumer_cancel(struct consumer *c);
/* True once consumer_cancel was called: executors poll it. */
bool consumer_cancelled(const struct consumer *c);
void consumer_free(struct consumer *c);

/* Messages currently held locally (for tests). */
int consumer_buffered(struct consumer *c);

#endif
