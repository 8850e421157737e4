/* The scheduler's pure pieces: occurrence ids, payloads, and how the
 * consumer recognises and resolves a scheduled entry. */
#include "engine/scheduler.h"

#include "base/util.h"
#include "engine/invocation.h"
#include "engine/keys.h"
#include "io/event.h"
#include "model/function.h"
#include "model/template.h"
#include "t.h"

TEST(occurrence_ids_payloads_and_entries_are_utc_whole_seconds)
{
	static const struct {
		const char *function, *handler;
		int64_t at;
		const char *id, *payload, *entry;
	} cases[] = {
		{"user-events", "jobs.cleanup.handler", 1774746000,
		 "schedule:user-events:jobs.cleanup.handler:2026-03-29T01:00:00Z",
		 "{\"scheduled_at\":\"2026-03-29T01:00:00Z\",\"source\":\"relay.schedule\"}",
		 "{\"function\":\"user-events\",\"handler\":\"jobs.cleanup.handler\","
		 "\"occurrence_id\":\"schedule:user-events:jobs.cleanup.handler:2026-03-29T01:00:"
		 "00Z\","
		 "\"scheduled_at\":\"2026-03-29T01:00:00Z\",\"source\":\"relay.schedule\"}"},
		{"a", "m.f", 1774746007, "schedule:a:m.f:2026-03-29T01:00:07Z",
		 "{\"scheduled_at\":\"2026-03-29T01:00:07Z\",\"source\":\"relay.schedule\"}",
		 "{\"function\":\"a\",\"handler\":\"m.f\",\"occurrence_id\":\"schedule:a:m.f:2026-"
		 "03-"
		 "29T01:00:07Z\",\"scheduled_at\":\"2026-03-29T01:00:07Z\",\"source\":\"relay."
		 "schedule\"}"},
		/* a handler that needs escaping in JSON */
		{"jobs-v2", "x\"y.z", 0, "schedule:jobs-v2:x\"y.z:1970-01-01T00:00:00Z",
		 "{\"scheduled_at\":\"1970-01-01T00:00:00Z\",\"source\":\"relay.schedule\"}",
		 "{\"function\":\"jobs-v2\",\"handler\":\"x\\\"y.z\",\"occurrence_id\":\"schedule:"
		 "jobs-v2:x\\\"y.z:1970-01-01T00:00:00Z\",\"scheduled_at\":\"1970-01-01T00:00:"
		 "00Z\","
		 "\"source\":\"relay.schedule\"}"},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		char *id = schedule_occurrence_id(cases[i].function, cases[i].handler, cases[i].at);
		char *p = schedule_payload(cases[i].at);
		char *e = schedule_entry(cases[i].function, cases[i].handler, cases[i].at);
		CHECK_STR(id, cases[i].id);
		CHECK_STR(p, cases[i].payload);
		CHECK_STR(e, cases[i].entry);
		free(id);
		free(p);
		free(e);
	}
}

/* The event of a message whose only field is event = text (NULL when it
 * does not decode). */
static struct event *decode(const char *text)
{
	const char *fields[] = {"event", text};
	size_t lens[] = {5, strlen(text)};
	struct event *ev = NULL;
	if (event_decode(fields, lens, 2, &ev, NULL) != EVENT_OK)
		return NULL;
	return ev;
}

static bool claimed(const char *text)
{
	struct event *ev = decode(text);
	bool r = ev && schedule_claimed(ev);
	event_free(ev);
	return r;
}

/* source = relay.schedule plus the three routing keys, whatever their
 * values: anything less is an ordinary event. */
TEST(claimed_by_source_and_the_three_routing_keys)
{
	CHECK(claimed("{\"source\":\"relay.schedule\",\"function\":1,\"handler\":null,"
		      "\"occurrence_id\":\"x\"}"));
	CHECK(claimed("{\"function\":\"f\",\"handler\":\"m.h\",\"occurrence_id\":\"o\","
		      "\"scheduled_at\":\"x\",\"source\":\"relay.schedule\"}"));
	CHECK(!claimed(
		"{\"source\":\"relay.schedule\",\"scheduled_at\":\"2026-03-29T01:00:00Z\"}"));
	CHECK(!claimed("{\"source\":\"relay.schedule\",\"function\":\"f\",\"handler\":\"m.h\"}"));
	CHECK(!claimed("{\"source\":\"relay.schedul\",\"function\":\"f\",\"handler\":\"m.h\","
		       "\"occurrence_id\":\"o\"}"));
	CHECK(!claimed("{\"source\":[\"relay.schedule\"],\"function\":\"f\",\"handler\":\"m.h\","
		       "\"occurrence_id\":\"o\"}"));
	CHECK(!claimed("{\"event_id\":\"evt_123\",\"event_name\":\"INSERT\"}"));
	CHECK(!schedule_claimed(NULL));
}

TEST(find_returns_the_first_schedule_with_the_handler)
{
	const char *yaml =
		"runtime: python3.14\n"
		"events:\n  - handler: jobs.a.h\n    pattern: {}\n"
		"schedules:\n  - handler: jobs.b.h\n    cron: \"0 3 * * *\"\n    timeout: 20s\n"
		"  - handler: jobs.b.h\n    cron: \"0 4 * * *\"\n"
		"  - handler: jobs.c.h\n    cron: \"@hourly\"\n    retries: 0\n";
	struct template *t = NULL;
	struct strlist errs = {0}, warns = {0};
	REQUIRE(template_parse(yaml, strlen(yaml), &t, &errs, &warns) == 0);
	struct function fn = {.name = "f", .dir = "f", .tpl = t};
	struct fn_version fv = {.fn = &fn};
	const struct schedule *s = schedule_find(&fv, "jobs.b.h");
	REQUIRE(s);
	CHECK_INT(s->index, 0);
	CHECK_INT(s->timeout_ns, 20LL * 1000000000LL);
	s = schedule_find(&fv, "jobs.c.h");
	REQUIRE(s);
	CHECK_INT(s->retries, 0);
	CHECK(schedule_find(&fv, "jobs.a.h") == NULL); /* an event rule is not a schedule */
	CHECK(schedule_find(&fv, "") == NULL);
	CHECK(schedule_find(NULL, "jobs.b.h") == NULL);
	template_free(t);
	strlist_free(&errs);
	strlist_free(&warns);
}

/* schedule_envelope_check on the JSON text; the route's strings are
 * copied into the statics below before the event is freed. */
static char route_fn[64], route_h[64], route_occ[128];
static enum schedule_verdict envelope(const char *text, struct schedule_route *out, char **why)
{
	struct event *ev = decode(text);
	if (!ev) {
		*why = xstrdup("does not decode");
		return SCHEDULE_VERIFY_FAILED; /* what the check itself never answers */
	}
	struct schedule_route r = {0};
	enum schedule_verdict rc = schedule_envelope_check(ev, &r, why);
	if (rc == SCHEDULE_GENUINE && out) {
		snprintf_(route_fn, sizeof route_fn, "%s", r.function);
		snprintf_(route_h, sizeof route_h, "%s", r.handler);
		snprintf_(route_occ, sizeof route_occ, "%s", r.occurrence_id);
		*out = (struct schedule_route){route_fn, route_h, route_occ, r.at_s};
	}
	event_free(ev);
	return rc;
}

#define OCC "schedule:fn:m.h:2026-03-29T01:00:00Z"
#define AT "2026-03-29T01:00:00Z"
#define ENTRY(f, h, o, at, src)                                                              \
	"{\"function\":" f ",\"handler\":" h ",\"occurrence_id\":" o ",\"scheduled_at\":" at \
	",\"source\":" src "}"
#define OK_ENTRY ENTRY("\"fn\"", "\"m.h\"", "\"" OCC "\"", "\"" AT "\"", "\"relay.schedule\"")

/* The local half of the genuineness proof: exactly what a publication
 * writes, nothing more or less. Each row changes one thing. */
TEST(envelope_check_accepts_exactly_what_publication_writes)
{
	static const struct {
		const char *text;
		enum schedule_verdict want;
		const char *why; /* part of the reason */
	} cases[] = {
		{OK_ENTRY, SCHEDULE_GENUINE, ""},
		/* member order is free (a JSON object), as in the original */
		{"{\"source\":\"relay.schedule\",\"scheduled_at\":\"" AT
		 "\",\"occurrence_id\":\"" OCC "\",\"handler\":\"m.h\",\"function\":\"fn\"}",
		 SCHEDULE_GENUINE, ""},
		{ENTRY("\"other\"", "\"m.h\"", "\"" OCC "\"", "\"" AT "\"", "\"relay.schedule\""),
		 SCHEDULE_FORGED, "occurrence_id does not name"},
		{ENTRY("\"fn\"", "\"x.y\"", "\"" OCC "\"", "\"" AT "\"", "\"relay.schedule\""),
		 SCHEDULE_FORGED, "occurrence_id does not name"},
		{ENTRY("\"fn\"", "\"m.h\"", "\"" OCC "\"", "\"2026-03-29T01:00:01Z\"",
		       "\"relay.schedule\""),
		 SCHEDULE_FORGED, "occurrence_id does not name"},
		{ENTRY("\"fn\"", "\"m.h\"", "\"schedule:fn:m.h:2026-03-29T01:00:00+00:00\"",
		       "\"2026-03-29T01:00:00+00:00\"", "\"relay.schedule\""),
		 SCHEDULE_FORGED, "scheduled_at is not"},
		{ENTRY("\"fn\"", "\"m.h\"", "\"schedule:fn:m.h:2026-03-29T01:00:00.5Z\"",
		       "\"2026-03-29T01:00:00.5Z\"", "\"relay.schedule\""),
		 SCHEDULE_FORGED, "scheduled_at is not"},
		{ENTRY("\"fn\"", "\"m.h\"", "\"schedule:fn:m.h:2026-02-30T01:00:00Z\"",
		       "\"2026-02-30T01:00:00Z\"", "\"relay.schedule\""),
		 SCHEDULE_FORGED, "scheduled_at is not"},
		{ENTRY("\"fn\"", "\"m.h\"", "\"" OCC "\"", "1774746000", "\"relay.schedule\""),
		 SCHEDULE_FORGED, "scheduled_at not a string"},
		{ENTRY("7", "\"m.h\"", "\"" OCC "\"", "\"" AT "\"", "\"relay.schedule\""),
		 SCHEDULE_FORGED, "function not a string"},
		{ENTRY("\"\"", "\"m.h\"", "\"" OCC "\"", "\"" AT "\"", "\"relay.schedule\""),
		 SCHEDULE_FORGED, "function empty or not text"},
		{ENTRY("\"f\\u0000n\"", "\"m.h\"", "\"" OCC "\"", "\"" AT "\"",
		       "\"relay.schedule\""),
		 SCHEDULE_FORGED, "function empty or not text"},
		{"{\"function\":\"fn\",\"handler\":\"m.h\",\"occurrence_id\":\"" OCC
		 "\",\"source\":\"relay.schedule\"}",
		 SCHEDULE_FORGED, "scheduled_at missing"},
		{"{\"function\":\"fn\",\"handler\":\"m.h\",\"occurrence_id\":\"" OCC
		 "\",\"scheduled_at\":\"" AT "\",\"source\":\"relay.schedule\",\"extra\":1}",
		 SCHEDULE_FORGED, "members other than"},
		/* a repeated member: the last one wins, but it is not what was written */
		{"{\"function\":\"fn\",\"function\":\"fn\",\"handler\":\"m.h\",\"occurrence_id\":"
		 "\"" OCC "\",\"scheduled_at\":\"" AT "\",\"source\":\"relay.schedule\"}",
		 SCHEDULE_FORGED, "members other than"},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		char *why = NULL;
		enum schedule_verdict got = envelope(cases[i].text, NULL, &why);
		if (got != cases[i].want ||
		    (cases[i].want == SCHEDULE_FORGED && !strstr(why, cases[i].why)))
			T_FAIL_("case %zu: got %d (%s), want %d (%s)", i, got, why ? why : "",
				cases[i].want, cases[i].why);
		free(why);
	}
}

/* A genuine publication's entry, as schedule_publish writes it, passes and
 * routes to its function, handler and instant. */
TEST(envelope_check_accepts_every_published_occurrence)
{
	static const struct {
		const char *function, *handler;
		int64_t at;
	} occ[] = {{"user-events", "jobs.cleanup.handler", 1774746000},
		   {"jobs-v2", "x.y.z", 0},
		   {"a", "m..f", 4102444799},
		   {"a", "we\"ird\\.f", 1}};
	for (size_t i = 0; i < ARRAY_LEN(occ); i++) {
		char *id = schedule_occurrence_id(occ[i].function, occ[i].handler, occ[i].at);
		char *e = schedule_entry(occ[i].function, occ[i].handler, occ[i].at);
		char *why = NULL;
		struct schedule_route r;
		if (envelope(e, &r, &why) != SCHEDULE_GENUINE) {
			T_FAIL_("%s: %s", id, why);
		} else {
			CHECK_STR(r.function, occ[i].function);
			CHECK_STR(r.handler, occ[i].handler);
			CHECK_STR(r.occurrence_id, id);
			CHECK_INT(r.at_s, occ[i].at);
		}
		free(id);
		free(e);
	}
}

/* The dedup key lives in the stream's slot on Redis Cluster: the publish
 * script touches it and the stream together. */
TEST(dedup_key_carries_the_stream_tag_on_a_cluster)
{
	const char *occ = "schedule:fn:jobs.run:2026-12-02T03:00:00Z";
	char *k = schedule_dedup_key("{events}", occ);
	CHECK_STR(k, "relay:schedule:schedule:fn:jobs.run:2026-12-02T03:00:00Z");
	free(k);
	keys_set_cluster(true);
	k = schedule_dedup_key("{events}", occ);
	CHECK_STR(k, "relay:schedule:{events}:schedule:fn:jobs.run:2026-12-02T03:00:00Z");
	free(k);
	k = schedule_dedup_key("orders{relay}x", occ);
	CHECK_STR(k, "relay:schedule:{relay}:schedule:fn:jobs.run:2026-12-02T03:00:00Z");
	free(k);
	keys_set_cluster(false);
}

T_MAIN(T_CASE(occurrence_ids_payloads_and_entries_are_utc_whole_seconds),
       T_CASE(claimed_by_source_and_the_three_routing_keys),
       T_CASE(find_returns_the_first_schedule_with_the_handler),
       T_CASE(envelope_check_accepts_exactly_what_publication_writes),
       T_CASE(envelope_check_accepts_every_published_occurrence),
       T_CASE(dedup_key_carries_the_stream_tag_on_a_cluster))
