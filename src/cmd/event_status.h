/*
 * relay event status MESSAGE-ID: where one stream message is, gathered from
 * Redis by event.c into a struct event_status and rendered here (pure:
 * these functions format, they never touch Redis), as text or as one JSON
 * document (docs/json.md).
 *
 * States, decided in this order: pending (XPENDING of the group lists it),
 * dead-lettered (an entry of relay:<stream>:dlq has original_id = the
 * message), acknowledged (in the stream, at or before the group's last
 * delivered id, no longer pending), not delivered (in the stream, after the
 * group's last delivered id, or the group does not exist), not found.
 */
#ifndef RELAY_CMD_EVENT_STATUS_H
#define RELAY_CMD_EVENT_STATUS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cmd/match.h"
#include "base/util.h"

enum event_state {
	EVST_NOT_FOUND,
	EVST_NOT_DELIVERED,
	EVST_PENDING,
	EVST_ACKNOWLEDGED,
	EVST_DEAD_LETTERED,
};

/* The JSON name of a state: "not_found", "not_delivered", "pending",
 * "acknowledged", "dead_lettered". */
const char *event_status_state_name(enum event_state s);

struct event_status {
	const char *id, *stream, *group;
	enum event_state state;
	bool in_stream;
	/* The event as far as known (the stream's copy, else the DLQ's):
	 * event_known false when neither has it; else event_err is EVENT_OK
	 * or why it is malformed (event.h). */
	bool event_known;
	int event_err;
	/* pending */
	char *consumer;
	int64_t idle_ms, deliveries;
	/* dead-lettered: the DLQ entry's id and fields (the event left out) */
	char *dlq_id;
	char **dlq_fields, **dlq_values;
	size_t ndlq;
	/* pending, waiting for its key (key_concurrency): "waiting for key
	 * <value> (behind <id>)", else NULL */
	char *key_wait;
	/* pending: the invocation hash (fields "<function>/<handler>") */
	char **inv_fields, **inv_values;
	size_t ninv;
	/* The handlers the event matches now: matched false when not
	 * evaluated (no event, malformed, or match_err: the functions
	 * directory could not be read). */
	bool matched;
	struct cmd_match *matches;
	size_t nmatches;
	char *match_err;
	/* The trace id (32 hex digits), "" when none is known: from the
	 * invocation state (pending), the DLQ entry (dead-lettered) or the
	 * stream entry's own traceparent (trace.h). */
	char trace_id[33];
};

/*
 * One marker as event status shows it: "ok", "running until <RFC 3339>
 * attempt <n>", "waiting until <RFC 3339> after attempt <n>", "exhausted
 * after <n> attempt(s)", "not started" (raw NULL) or "unreadable marker
 * (eligible)". Writes into out (at least 96 bytes); returns out.
 */
char *event_status_marker_text(const char *raw, char *out, size_t outlen);

/* The exact text output, appended to b. */
void event_status_render(struct buf *b, const struct event_status *st);
/* The --json document (new reference). */
json_t *event_status_json(const struct event_status *st);

#endif
