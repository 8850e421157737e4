/*
 * A scheduled occurrence as it travels through the event stream: the
 * entry the scheduler publishes (scheduler.h: when) and the proof a worker
 * asks of an entry that claims to be one before it runs it (delivery.c).
 * Both sides use only this module, so the wire format lives in one place.
 * Thread-safety: every function is pure or uses only the connection
 * passed in.
 *
 * Publication. One Lua script, in one atomic step:
 *
 *     SET relay:schedule:<occurrence_id> <occurrence_id> NX PX 604800000
 *     only if it was set:  XADD <stream> * event <entry>
 *
 * (on Redis Cluster the key is relay:schedule:{tag}:<occurrence_id>, in the
 * stream's slot: schedule_dedup_key)
 *
 * and answers published (the new entry id) or duplicate. The script first
 * checks that <stream> is a stream (or absent), and if the XADD fails it
 * deletes the key it just set, so the dedup key never exists without its
 * stream entry. Dedup keys are never deleted otherwise: they expire by
 * their TTL only. Occurrence id:
 *
 *     schedule:<function>:<handler>:<scheduled_at>
 *
 * with scheduled_at the occurrence's absolute instant in RFC 3339 UTC,
 * whole seconds ("2026-03-29T01:00:00Z"); 6-field schedules carry their own
 * second. The time zone decides when a schedule fires, never the identity.
 *
 * Wire format: the original's, so workers of either implementation can
 * share one stream during a migration. The entry has the single field
 * `event` holding (keys in this order, compact JSON)
 *
 *     {"function":"<f>","handler":"<h>","occurrence_id":"<id>",
 *      "scheduled_at":"<RFC3339 UTC>","source":"relay.schedule"}
 *
 * and the handler reads {"scheduled_at":"<RFC3339 UTC>","source":"relay.schedule"}
 * on stdin (schedule_payload), never the entry itself.
 *
 * An event whose source is "relay.schedule" and that has function, handler
 * and occurrence_id claims to be a scheduled occurrence (schedule_claimed):
 * the consumer never pattern-matches it and it does not count as an event.
 * Anyone who can XADD to the stream can write such an entry, so the
 * consumer runs it only once it is checked (schedule_envelope_check, then
 * schedule_verify): exactly those five members, all text; scheduled_at a
 * canonical instant; the occurrence id recomputed from function, handler
 * and scheduled_at; and the dedup key existing and holding that occurrence
 * id, which only a publication writes. Anything else is dead-lettered as
 * "forged schedule occurrence" and runs nothing. What this cannot tell: a
 * producer that copies a genuine entry (the key then exists) gets that
 * occurrence run once more, which at-least-once handlers must tolerate
 * anyway (the original's wire format has no per-entry proof;
 * docs/differences.md). Against a producer that can also write
 * relay:schedule:* keys nothing in Redis can tell the difference: the
 * deployment that makes this airtight gives producers an ACL limited to
 * XADD on the stream (docs/redis-acl.md).
 *
 * Dedup key TTL (SCHEDULE_DEDUP_TTL_MS, 7 days). A genuine occurrence must
 * never be taken for a forged one because its key expired while it was
 * still pending. Every delivery that verifies it renews the TTL to the
 * full 7 days (in the same script), so the key outlives the occurrence as
 * long as a worker keeps delivering it. A pending message is delivered
 * again by every reclaim once it has been idle for MinPendingIdle (1 min),
 * backing off or not (a delivery during the backoff only skips the
 * handler), so two deliveries are at most one delivery's own processing
 * (the slot wait, 10 s, plus one invocation, bounded by its running marker:
 * the rule's timeout, at most 5 min, plus 1m37s, runner.h) + MinPendingIdle
 * + one reclaim interval (1 min) apart: under 10 minutes, against 7 days.
 * A fixed TTL alone would not do: 1 + 1000 retries with the capped backoff
 * keep an occurrence pending for up to about 11 days. The key can only run
 * out when no worker delivered the occurrence for 7 days (fleet down, or
 * the group that far behind); it is then dead-lettered with its payload
 * (reason "forged schedule occurrence", the log line saying its dedup key
 * does not exist) rather than run a week late.
 * */
#ifndef RELAY_SCHEDULE_H
#define RELAY_SCHEDULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/event.h"
#include "io/redis.h"
#include "engine/registry.h"

/* The entry's and the payload's source, the dedup key prefix and TTL. */
#define SCHEDULE_SOURCE "relay.schedule"
#define SCHEDULE_KEY_PREFIX "relay:schedule:"
#define SCHEDULE_DEDUP_TTL_MS (7LL * 24 * 3600 * 1000)

/* "schedule:<function>:<handler>:<RFC3339 UTC of at_s>" (malloc'd). */
char *schedule_occurrence_id(const char *function, const char *handler, int64_t at_s);
/* The occurrence's dedup key (malloc'd): relay:schedule:<occurrence id>, or
 * on Redis Cluster (keys_cluster(), invocation.h)
 * relay:schedule:{tag}:<occurrence id> with the stream's hash tag, so the key
 * lives in the stream's slot as the publish script needs. */
char *schedule_dedup_key(const char *stream, const char *occurrence_id);
/* The handler's stdin for the occurrence at at_s (malloc'd JSON text):
 * {"scheduled_at":"<RFC3339 UTC>","source":"relay.schedule"}. */
char *schedule_payload(int64_t at_s);
/* The stream entry's `event` field for the occurrence (malloc'd JSON):
 * {"function":…,"handler":…,"occurrence_id":…,"scheduled_at":…,"source":…}. */
char *schedule_entry(const char *function, const char *handler, int64_t at_s);

enum schedule_publish_result {
	SCHEDULE_PUBLISHED = 1,
	SCHEDULE_DUPLICATE = 0,
	SCHEDULE_PUBLISH_FAILED = -1,
};

/*
 * Runs the publish-if-new script for one occurrence on r (connected by the
 * caller). On SCHEDULE_PUBLISHED and entry_id non-NULL, the new stream
 * entry id is copied into entry_id[0..idlen) (64 bytes hold any). On
 * SCHEDULE_PUBLISH_FAILED *err (malloc'd) holds the reason. Does not touch
 * the counters.
 */
enum schedule_publish_result schedule_publish(struct redis *r, const char *stream,
					      const char *function, const char *handler,
					      int64_t at_s, char *entry_id, size_t idlen,
					      char **err);

/* A checked scheduled occurrence; the strings are borrowed from its event. */
struct schedule_route {
	const char *function;
	const char *handler;
	const char *occurrence_id;
	int64_t at_s; /* scheduled_at, Unix seconds */
};

/* True when the decoded event claims to be a scheduled occurrence: source
 * is "relay.schedule" and it has function, handler and occurrence_id. */
bool schedule_claimed(const struct event *ev);

/* What the proof that an occurrence is genuine found (the two halves
 * below). On FORGED and VERIFY_FAILED *why (malloc'd) says why. */
enum schedule_verdict {
	SCHEDULE_GENUINE,	/* what a publication wrote: run it */
	SCHEDULE_FORGED,	/* anything else: never run */
	SCHEDULE_VERIFY_FAILED, /* a Redis error: the caller leaves the message
				   pending, it is never run unverified */
};

/* Local half of the proof: GENUINE when ev is exactly what a publication
 * writes (the five members, all non-empty text, scheduled_at canonical,
 * the occurrence id recomputed from function, handler and scheduled_at),
 * with *out filled (if non-NULL); else FORGED with *why. Pure. */
enum schedule_verdict schedule_envelope_check(const struct event *ev, struct schedule_route *out,
					      char **why);

/*
 * The Redis half: one script on r (connected by the caller) that checks
 * that the occurrence's dedup key holds its occurrence id and renews its
 * TTL when it does. GENUINE, FORGED (*why says what is wrong) or
 * VERIFY_FAILED (*why holds the Redis error).
 */
enum schedule_verdict schedule_verify(struct redis *r, const char *stream,
				      const struct schedule_route *route, char **why);

/* The first schedule of fv's template with this handler, or NULL. */
const struct schedule *schedule_find(const struct fn_version *fv, const char *handler);

#endif
