/*
 * The stream consumer (docs/execution.md: concurrency
 * and backpressure, acknowledgment, recovery and retries).
 *
 * Threads, each with its own Redis connection, started with thread_start
 * (every signal blocked) under these names (workers: worker-1 .. worker-N),
 * and stopped through one atomic stop flag:
 *   reader    reads new messages (XREADGROUP ... BLOCK block_ms, through the
 *             reply guard: see the cost model below) for at most the free
 *             buffer slots, only while the local buffer
 *             (MAX_BUFFERED_EVENTS) has room;
 *   workers   MAX_CONCURRENCY of them: each hands a message to the
 *             delivery (delivery.h: decode, match, run each matching
 *             invocation in order under the invocation-state protocol),
 *             then ACKs / leaves pending / dead-letters as it answers. A
 *             worker never waits for a concurrency slot: a message whose
 *             invocation gets none is parked locally (still held, counted
 *             in the buffer, nothing charged) and resumed by whichever
 *             worker finds a slot for it first after a release, before new
 *             messages (delivery.c);
 *   acker     batches XACKs (and the DEL of invocation-state keys) into one
 *             round trip; a message's buffer slot is released once its ACK
 *             is confirmed, it is dead-lettered, or it is left pending;
 *   reclaim   every reclaim interval, claims messages idle longer than
 *             min_pending_idle (a script doing what XAUTOCLAIM does, with
 *             the same measuring), buffer-aware;
 *   sampler   XPENDING every 15 s for the pending_entries and
 *             pending_oldest_age_seconds gauges;
 *   prober    (with cfg.ready) watches the Docker daemon: see the holds
 *             below (consumer_hold).
 *
 * The consumer never runs containers itself: it calls cfg.invoke, which the
 * relay start wires to the Docker runner (and tests may wire to anything).
 *
 * Cost model of a stream entry (anyone who can XADD writes them):
 *   bytes    Relay keeps only the fields it uses (`event`, and
 *            `traceparent` and `tracestate`: trace.h; a scheduled
 *            occurrence is an event too, schedule.h), at most
 *            CONSUMER_ENTRY_MAX bytes per
 *            entry counted as CONSUMER_ENTRY_COST (their names and values
 *            plus a bound on their RESP framing). New messages are read
 *            with a plain XREADGROUP on a connection whose reply guard
 *            (redis.h) bounds every entry as sent at CONSUMER_ENTRY_SENT_MAX,
 *            the most a legal entry takes (fields Relay does not read
 *            within that bound are transferred, then dropped): a larger one
 *            is refused at the header of the string that would take it
 *            over and the connection closed, so nothing of that string
 *            reaches hiredis (at most one 16 KiB socket read of it is
 *            received, and dropped). The refused read's batch, pending for
 *            this consumer but unread,
 *            is then read through a Lua script that measures every entry
 *            inside Redis first (recover): a too-large entry is
 *            dead-lettered there (reason "event too large", its size, no
 *            body) and acknowledged, so it is never transferred and never
 *            stops the reads after it; a legal entry that was only over the
 *            bound because of fields Relay does not read comes back
 *            without them and runs. An entry within the bound as sent whose
 *            fields still cost more than the limit (the framing allowance
 *            unused) is read, at most CONSUMER_ENTRY_SENT_MAX bytes, and
 *            dead-lettered the same way through that script. The reclaim
 *            path runs a script of the same kind for every entry it looks
 *            at, so fields Relay does not read are never transferred there.
 *   replies  one read or script call asks for at most CONSUMER_READ_BUDGET /
 *            CONSUMER_ENTRY_MAX entries (62), so a reply stays within
 *            CONSUMER_READ_BUDGET, below the transport's REDIS_REPLY_MAX: a
 *            backlog whose sum is larger is read over several calls, and a
 *            legal entry always fits.
 *   redis    an XREADGROUP reply is built whole in Redis's output buffer
 *            (a refused one too, until Relay closes the connection); the
 *            recover and reclaim scripts hold one entry at a time as Lua
 *            strings while they measure it.
 *   memory   at most MAX_BUFFERED_EVENTS messages held locally, each at
 *            most CONSUMER_ENTRY_MAX bytes (plus its decoded event, see
 *            event.h).
 *   time     decoding happens outside the consumer lock (the reader decodes
 *            a batch, then takes the lock once to queue it), so a slow
 *            decode never stops the workers or the acker. A refused read
 *            costs a reconnect and one recover call over its batch.
 */
#ifndef RELAY_CONSUMER_H
#define RELAY_CONSUMER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/event.h"
#include "io/redis.h"
#include "engine/registry.h"

struct slots;

/* Fixed defaults (spec: not configurable through the environment). */
#define CONSUMER_RECLAIM_INTERVAL_NS (60LL * 1000000000LL)
#define CONSUMER_MIN_PENDING_IDLE_NS (60LL * 1000000000LL)
/* The retrier looks at the retry index at least this often (ms): a retry
 * another worker scheduled starts at most this late (1.5 s is the bound
 * promised, docs/execution.md). */
#define CONSUMER_RETRY_POLL_MS 1000
/* Consumers of gone workers deleted per reclaim pass at most. */
#define CONSUMER_PRUNE_MAX 100
#define CONSUMER_BLOCK_MS 2000
#define CONSUMER_SAMPLE_INTERVAL_NS (15LL * 1000000000LL)

/* Stream entry bounds (see the cost model above). An entry costs the bytes
 * of the fields Relay reads (names and values) plus CONSUMER_ENTRY_FRAMING
 * and CONSUMER_STRING_FRAMING per name or value: more than RESP needs to
 * carry them. An event-only entry of EVENT_MAX_BYTES costs
 * EVENT_MAX_BYTES + 101, well within CONSUMER_ENTRY_MAX. */
#define CONSUMER_ENTRY_MAX (EVENT_MAX_BYTES + 1024)
#define CONSUMER_ENTRY_FRAMING 64
#define CONSUMER_STRING_FRAMING 16
#define CONSUMER_ENTRY_COST(bytes, nstrings) \
	((bytes) + CONSUMER_ENTRY_FRAMING + CONSUMER_STRING_FRAMING * (nstrings))
/*
 * The most bytes a legal entry (fields Relay reads only, costing at most
 * CONSUMER_ENTRY_MAX) takes in an XREADGROUP reply (RESP2), the bound the
 * reader's guard puts on every entry. As sent, an entry is "*2\r\n" (4
 * bytes), its id "$<len>\r\n<id>\r\n" (an id is two 64-bit numbers and a
 * '-', at most 41 bytes: 48), its fields' array header "*<N>\r\n" (3 +
 * digits(N)) and N strings "$<len>\r\n<bytes>\r\n" (5 + digits(len) +
 * len each): sent = 55 + digits(N) + B + sum(5 + digits(len)), where B is
 * the bytes of the names and values, against cost = B + 64 + 16 N. In a
 * legal entry every string is under 10^7 bytes (7 digits), so each one's
 * framing is at most 12, 4 under its 16, and cost - sent >= 9 - digits(N)
 * + 4 N, which is at least 16 for N >= 2 (N is even; an entry with none of
 * Relay's fields takes 56 bytes). So sent <= CONSUMER_ENTRY_MAX - 16.
 */
#define CONSUMER_ENTRY_SENT_MAX (CONSUMER_ENTRY_MAX - 16)
/*
 * And in elements (the entry, its id, its field array, each name and
 * value): an entry of more than 32 fields is not parsed from a plain read,
 * since hiredis spends some 80 bytes per element (an entry of 1 MiB in
 * one-byte fields would take 12 MiB, a read of 62 of them 750 MiB). Such an
 * entry is read through the recover script, which keeps the last of each
 * field Relay reads (the value Relay uses), at most 8 strings.
 */
#define CONSUMER_ENTRY_SENT_ELEMENTS (3 + 2 * 32)
_Static_assert(CONSUMER_ENTRY_MAX < 10000000, "CONSUMER_ENTRY_SENT_MAX: lengths of 7 digits");
_Static_assert(CONSUMER_ENTRY_FRAMING == 64 && CONSUMER_STRING_FRAMING == 16,
	       "CONSUMER_ENTRY_SENT_MAX: framing allowances");
#define CONSUMER_READ_BUDGET ((size_t)REDIS_REPLY_MAX - 1024 * 1024)

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
	/* The handler's TRACEPARENT and TRACESTATE (trace.h); NULL: none. */
	const char *traceparent;
	const char *tracestate;
};

enum invoke_outcome {
	INVOKE_OK,
	INVOKE_FAILED,	    /* non-zero exit or a failure to run */
	INVOKE_TIMEOUT,	    /* killed at its timeout */
	INVOKE_CANCELLED,   /* did not run to an outcome (shutdown): not charged as an
			     attempt; the message stays pending */
	INVOKE_UNAVAILABLE, /* not run: the Docker daemon could not be reached before the
			       handler started. Not an attempt: the consumer holds
			       (CONSUMER_HOLD_DOCKER) and runs it again once cfg.ready says
			       so. */
};

struct invoke_result {
	enum invoke_outcome outcome;
	int exit_code;	 /* -1 when none */
	char error[512]; /* why it failed, naming function and handler */
	/* How its container started: "on_demand", "standby", "warm" (a
	 * static string), or NULL when unknown. */
	const char *start_mode;
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
	int64_t backoff_ns[4];
	int block_ms;
	int64_t sample_interval_ns; /* backlog gauges (XPENDING) */
	struct registry *registry;
	consumer_invoke_fn invoke;
	void *invoke_ctx;
	/* Whether invocations can run (the daemon answers a ping), asked
	 * with invoke_ctx by the "prober" thread every CONSUMER_WATCH_NS, and
	 * every CONSUMER_PROBE_NS while CONSUMER_HOLD_DOCKER is set: false
	 * sets that hold, true lifts it. NULL: no prober (tests), and an
	 * unavailable invocation is only left pending, like a cancelled one. */
	bool (*ready)(void *ctx);
	/* Holds in force from the start (consumer_hold), e.g.
	 * CONSUMER_HOLD_FUNCTIONS when the functions directory could not be
	 * read at startup. */
	unsigned hold;
	/* The concurrency slots (slots.h), when shared with the standby pool
	 * (owned by the caller, limit max_concurrency); NULL: the consumer's
	 * own. */
	struct slots *slots;
	/* Tests only: the byte budget of one read (0: CONSUMER_READ_BUDGET);
	 * a read asks for at most read_budget / CONSUMER_ENTRY_MAX entries
	 * (at least one). */
	size_t read_budget;
	/* Tests only: called by the reader thread just before it decodes a
	 * freshly read message. */
	void (*test_before_decode)(void *ctx);
	void *test_ctx;
};

struct consumer;

/* Creates the consumer group (XGROUP CREATE <stream> <group> 0 MKSTREAM;
 * BUSYGROUP is fine). Returns 0, or -1 with *err (malloc'd). */
int consumer_ensure_group(struct redis *r, const char *stream, const char *group, char **err);

/* Starts every thread (one that cannot be started is logged and aborts
 * the process). Returns NULL only on a programming error. */
struct consumer *consumer_start(const struct consumer_config *cfg);
/* Stops reading, lets in-flight invocations finish (bounded by their
 * timeouts), leaves buffered-but-unstarted messages pending, joins. */
void consumer_stop(struct consumer *c);
void consumer_free(struct consumer *c);

/*
 * Holds: while any is set the consumer reads nothing new (neither
 * XREADGROUP nor the reclaim); what it holds already runs, except that an
 * invocation that found the daemon unreachable waits (not charged, its
 * marker put back) and runs again once CONSUMER_HOLD_DOCKER lifts. Each
 * hold is logged when it starts (WARN) and when it lifts (INFO, with how
 * long it lasted).
 */
enum {
	CONSUMER_HOLD_DOCKER = 1u,    /* set and lifted by the consumer (cfg.ready) */
	CONSUMER_HOLD_FUNCTIONS = 2u, /* the functions directory cannot be read */
};
#define CONSUMER_PROBE_NS (1LL * 1000000000LL)
#define CONSUMER_WATCH_NS (5LL * 1000000000LL)
/* Sets (on) or lifts one hold. Thread-safe; NULL c is ignored. */
void consumer_hold(struct consumer *c, unsigned hold, bool on);

/* Messages currently held locally (for tests). */
int consumer_buffered(struct consumer *c);

#endif
