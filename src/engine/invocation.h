/*
 * Per-message invocation state in Redis (docs/execution.md:
 * recovery and retries): a hash relay:invocation:<stream>:<group>:<msgID> (stream and
 * group percent-encoded) with one field per "<function>/<handler>" whose
 * value is a marker:
 *
 *   ok                                  completed on an earlier delivery
 *   running:<unix-nano deadline>#<n>    attempt n is (or was) executing
 *   next_attempt_at:<unix-nano>#<n>     attempt n failed, waiting out backoff
 *   exhausted:<n>                       terminal after n attempts
 *   (absent / unparseable)              eligible
 *
 * and one field `trace` (no '/': never a "<function>/<handler>") holding
 * the W3C traceparent the message's deliveries continue (trace.h): written
 * with the first claim (HSETNX in the same script, no extra round trip),
 * so that a retry of a message that came without a traceparent stays in
 * the trace its first delivery started.
 *
 * Every write refreshes a 7-day TTL. TryStart is a compare-and-set in one
 * Lua script so two workers can never both claim an invocation. The
 * scripts go by SHA (redis_script_run: EVALSHA, EVAL once on NOSCRIPT).
 * Bookkeeping failures fail open: the caller treats an unreadable state as
 * absent and runs the invocation (at-least-once is never given up).
 */
#ifndef RELAY_INVOCATION_H
#define RELAY_INVOCATION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/redis.h"

#define INVOCATION_TTL_SECONDS (7 * 24 * 3600)

enum marker_kind {
	MARK_ABSENT,
	MARK_OK,
	MARK_RUNNING,
	MARK_NEXT_ATTEMPT,
	MARK_EXHAUSTED,
};

struct marker {
	enum marker_kind kind;
	int64_t deadline_ns; /* running / next_attempt_at */
	int attempts;	     /* attempts made so far (0 when absent) */
};

/* Parses a marker value; anything malformed is MARK_ABSENT. */
struct marker invocation_marker_parse(const char *s, size_t len);
/* Formats m into out (at least 64 bytes). */
void invocation_marker_format(const struct marker *m, char *out, size_t outlen);

/*
 * The deadline of the running marker written when an invocation is claimed
 * at claim_wall_ns (now_wall_ns(), taken just before TryStart) for a rule
 * whose timeout is timeout_ns (<= 0: the default). It is the claim instant
 * plus every phase bound of the path that follows, so the marker outlives
 * the container on any path; the bounds and where each is enforced are
 * listed in one place, "Time bounds" in runner.h. The only place the
 * running deadline is computed.
 */
int64_t invocation_running_deadline(int64_t claim_wall_ns, int64_t timeout_ns);

/* Whether an invocation with marker m may run at now_ns. */
bool invocation_marker_eligible(const struct marker *m, int64_t now_ns);

/* relay:invocation:<keys_encode(stream)>:<keys_pct_encode(group)>:<id>
 * (malloc'd). */
char *invocation_key(const char *stream, const char *group, const char *msg_id);

/*
 * Reads all markers of a message: on success returns 0 and fills *fields /
 * *values (parallel arrays of malloc'd strings, *n entries; free with
 * invocation_state_free). -1 on a Redis error.
 */
struct invocation_state {
	char **fields;
	char **values;
	size_t n;
};
int invocation_state_load(struct redis *r, const char *key, struct invocation_state *out);
void invocation_state_free(struct invocation_state *st);
/* The marker for field (absent when not present). */
struct marker invocation_state_get(const struct invocation_state *st, const char *field);
/* The stored `trace` field (borrowed), or NULL. */
#define INVOCATION_TRACE_FIELD "trace"
const char *invocation_state_trace(const struct invocation_state *st);

/*
 * TryStart: writes `next` into field only if the message msg_id is still
 * pending in group of stream and the field's current value is `expected`
 * (NULL = absent), and the current marker is due by Redis's own clock
 * (TIME): a running or next_attempt_at marker whose deadline is more than
 * RUNNER_CLOCK_SKEW_MS (runner.h) ahead of it is refused whatever this
 * worker's clock says, so a worker whose clock jumped forward never finds
 * every running marker expired at once. With the write, trace (NULL or
 * "": none) is stored in the `trace` field unless one is there already.
 * Returns 1 when written, 0 when someone else changed it (or it is not
 * due), 2 when the message is no longer pending (acknowledged meanwhile),
 * -1 on a Redis error.
 */
int invocation_try_start(struct redis *r, const char *key, const char *field, const char *expected,
			 const char *next, const char *stream, const char *group,
			 const char *msg_id, const char *trace);
/*
 * Dead-letters message msg_id in one script, only while it is still pending
 * in group of stream: XADD dlq * <entry>, then XACK, then DEL of its
 * invocation hash. A copy fetched by a reclaim just before another delivery
 * finished can therefore never write a second entry. entry holds nentry
 * field/value strings with their lengths (binary-safe). Returns 0 with
 * *written true when written and acknowledged, false when the message was
 * no longer pending (nothing written); -1 with *err (malloc'd) on an error
 * (nothing acknowledged).
 */
int invocation_dead_letter(struct redis *r, const char *stream, const char *group, const char *dlq,
			   const char *msg_id, const char *const *entry, const size_t *lens,
			   size_t nentry, bool *written, char **err);
/* Writes prev back into field, or deletes the field when prev is NULL. */
int invocation_restore(struct redis *r, const char *key, const char *field, const char *prev);
/* Unconditional write (MarkComplete / RecordFailure / MarkExhausted). */
int invocation_set(struct redis *r, const char *key, const char *field, const char *value);

/*
 * The retry index: a sorted set relay:retry:<keys_encode(stream)>:<pct(group)>
 * (malloc'd name) of the messages waiting out a backoff, scored by the
 * unix milliseconds their next attempt is due. Whoever records a
 * next_attempt_at marker adds the message (invocation_set_retry); every
 * worker's retrier claims what is due (consumer.c), so a retry starts on
 * time on any worker, whatever its backoff, and no message is looked at
 * before it is due. Members are removed when claimed, so the set holds the
 * waiting retries only (a member whose message is no longer pending is
 * dropped when it falls due).
 */
char *invocation_retry_key(const char *stream, const char *group);
/* invocation_set, and with retry_key also ZADD retry_key due_ms msg_id, in
 * one round trip. */
int invocation_set_retry(struct redis *r, const char *key, const char *field, const char *value,
			 const char *retry_key, int64_t due_ms, const char *msg_id);

#endif
