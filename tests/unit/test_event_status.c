/* The pure renderings behind relay event status (src/cmd/event.c) and the
 * --json documents of the state views (src/cmd/render.c). */
#include <stdlib.h>
#include <string.h>

#include "cmd/event_status.h"
#include "cmd/render.h"
#include "io/event.h"
#include "t.h"
#include "base/util.h"

TEST(marker_texts)
{
	char out[128];
	CHECK_STR(event_status_marker_text(NULL, out, sizeof out), "not started");
	CHECK_STR(event_status_marker_text("ok", out, sizeof out), "ok");
	/* 2026-12-01T22:41:05Z, with a fraction that is truncated. */
	CHECK_STR(event_status_marker_text("next_attempt_at:1796164865123456789#2", out, sizeof out),
		  "waiting until 2026-12-01T22:41:05Z after attempt 2");
	CHECK_STR(event_status_marker_text("running:1796164865000000000#1", out, sizeof out),
		  "running until 2026-12-01T22:41:05Z attempt 1");
	CHECK_STR(event_status_marker_text("exhausted:1", out, sizeof out), "exhausted after 1 attempt");
	CHECK_STR(event_status_marker_text("exhausted:5", out, sizeof out), "exhausted after 5 attempts");
	CHECK_STR(event_status_marker_text("running:17", out, sizeof out), "unreadable marker (eligible)");
}

static char *render(const struct event_status *st)
{
	struct buf b;
	buf_init(&b, 1 << 20);
	event_status_render(&b, st);
	buf_append(&b, "", 1);
	return buf_steal(&b);
}

TEST(pending_lists_matches_then_leftover_markers)
{
	char *fields[] = {"old/x.y", "fa/h.handler"};
	char *values[] = {"ok", "next_attempt_at:1796164865000000000#1"};
	struct cmd_match m[] = {{"fa", "h.handler"}, {"fb", "main.handler"}};
	struct event_status st = {.id = "1-0",
				  .stream = "s",
				  .group = "g",
				  .state = EVST_PENDING,
				  .in_stream = true,
				  .event_known = true,
				  .consumer = "w",
				  .idle_ms = 12999,
				  .deliveries = 3,
				  .inv_fields = fields,
				  .inv_values = values,
				  .ninv = 2,
				  .matched = true,
				  .matches = m,
				  .nmatches = 2};
	char *s = render(&st);
	CHECK_STR(s, "Message:           1-0\n"
		     "Stream:            s\n"
		     "Group:             g\n"
		     "State:             pending\n"
		     "Consumer:          w\n"
		     "Idle:              12s\n"
		     "Deliveries:        3\n"
		     "\n"
		     "Invocations:\n"
		     "  fa/h.handler      waiting until 2026-12-01T22:41:05Z after attempt 1\n"
		     "  fb/main.handler   not started\n"
		     "  old/x.y           ok (matches nothing now)\n");
	free(s);
	json_t *j = event_status_json(&st);
	CHECK_STR(json_string_value(json_object_get(j, "state")), "pending");
	json_t *inv = json_object_get(j, "invocations");
	CHECK_INT(json_array_size(inv), 3);
	CHECK_STR(json_string_value(json_object_get(json_array_get(inv, 0), "until")),
		  "2026-12-01T22:41:05Z");
	CHECK_STR(json_string_value(json_object_get(json_array_get(inv, 2), "function")), "old");
	CHECK(json_is_false(json_object_get(json_array_get(inv, 2), "matches_now")));
	CHECK_INT(
		json_integer_value(json_object_get(json_object_get(j, "pending"), "idle_seconds")),
		12);
	json_decref(j);
}

TEST(dead_lettered_shows_the_entry_safely)
{
	char *fields[] = {"reason", "attempts", "timestamp"};
	char *values[] = {"bad\nline", "0", "2026-12-01T22:00:00Z"};
	struct event_status st = {.id = "1-0",
				  .stream = "s",
				  .group = "g",
				  .state = EVST_DEAD_LETTERED,
				  .in_stream = false,
				  .event_known = true,
				  .event_err = EVENT_ERR_NOT_OBJECT,
				  .dlq_id = "2-0",
				  .dlq_fields = fields,
				  .dlq_values = values,
				  .ndlq = 3};
	char *s = render(&st);
	CHECK_STR(s, "Message:           1-0\n"
		     "Stream:            s\n"
		     "Group:             g\n"
		     "State:             dead-lettered\n"
		     "DLQ entry:         2-0\n"
		     "Reason:            bad\\nline\n"
		     "Attempts:          0\n"
		     "Dead-lettered at:  2026-12-01T22:00:00Z\n"
		     "Event:             malformed (not_object)\n");
	free(s);
	json_t *j = event_status_json(&st);
	json_t *d = json_object_get(j, "dead_letter");
	CHECK_STR(json_string_value(json_object_get(d, "reason")), "bad\nline");
	CHECK_INT(json_integer_value(json_object_get(d, "attempts")), 0);
	CHECK(json_is_null(json_object_get(d, "function")));
	CHECK_STR(json_string_value(json_object_get(j, "event")), "not_object");
	json_decref(j);
}

TEST(state_json_times_are_rfc3339_utc)
{
	/* SQLite's datetime() text and an offset both come out as UTC "Z". */
	struct state_function_info fs[] = {
		{.name = "a",
		 .runtime = "node24",
		 .status = "ready",
		 .updated_at = "2026-08-01 10:00:00"},
		{.name = "b",
		 .runtime = "node24",
		 .status = "ready",
		 .prepared_at = "2026-08-01T12:00:00+02:00",
		 .updated_at = "x"},
		{.name = "c", .runtime = "node24", .status = "pending", .updated_at = "not a time"},
	};
	json_t *j = render_state_json_ls(fs, 3);
	CHECK_STR(json_string_value(json_object_get(json_array_get(j, 0), "updated_at")),
		  "2026-08-01T10:00:00Z");
	CHECK_STR(json_string_value(json_object_get(json_array_get(j, 1), "updated_at")),
		  "2026-08-01T10:00:00Z");
	CHECK_STR(json_string_value(json_object_get(json_array_get(j, 2), "updated_at")),
		  "not a time");
	json_decref(j);
	struct state_handler_info h[] = {{"x.y", "1.5s"}, {"x.z", "bogus"}};
	struct state_function_info f = {
		.name = "a", .runtime = "node24", .status = "ready", .handlers = h, .nhandlers = 2};
	j = render_state_json_inspect(&f, NULL);
	json_t *ev = json_object_get(j, "events");
	CHECK(json_real_value(json_object_get(json_array_get(ev, 0), "timeout_seconds")) == 1.5);
	CHECK(json_is_null(json_object_get(json_array_get(ev, 1), "timeout_seconds")));
	CHECK(json_is_null(json_object_get(j, "last_reconcile")));
	json_decref(j);
}

T_MAIN(T_CASE(marker_texts), T_CASE(pending_lists_matches_then_leftover_markers),
       T_CASE(dead_lettered_shows_the_entry_safely), T_CASE(state_json_times_are_rfc3339_utc))
