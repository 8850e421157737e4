/* The scheduler's pure pieces: occurrence ids, payloads, and how the
 * consumer recognises and resolves a scheduled entry. */
#include "scheduler.h"

#include "function.h"
#include "t.h"
#include "template.h"
#include "util.h"

TEST(occurrence_ids_and_payloads_are_utc_whole_seconds)
{
	static const struct {
		const char *function, *handler;
		int64_t at;
		const char *id, *payload;
	} cases[] = {
		{"user-events", "jobs.cleanup.handler", 1774746000,
		 "schedule:user-events:jobs.cleanup.handler:2026-03-29T01:00:00Z",
		 "{\"source\":\"relay.schedule\",\"scheduled_at\":\"2026-03-29T01:00:00Z\"}"},
		{"a", "m.f", 1774746007, "schedule:a:m.f:2026-03-29T01:00:07Z",
		 "{\"source\":\"relay.schedule\",\"scheduled_at\":\"2026-03-29T01:00:07Z\"}"},
		{"jobs.v2", "x.y.z", 0, "schedule:jobs.v2:x.y.z:1970-01-01T00:00:00Z",
		 "{\"source\":\"relay.schedule\",\"scheduled_at\":\"1970-01-01T00:00:00Z\"}"},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		char *id = schedule_occurrence_id(cases[i].function, cases[i].handler, cases[i].at);
		char *p = schedule_payload(cases[i].at);
		CHECK_STR(id, cases[i].id);
		CHECK_STR(p, cases[i].payload);
		free(id);
		free(p);
	}
}

static bool route(const char *const *kv, size_t n, struct schedule_route *out)
{
	char *fields[16] = {0};
	size_t lens[16] = {0};
	for (size_t i = 0; i < n; i++) {
		fields[i] = kv[i] ? xstrdup(kv[i]) : NULL;
		lens[i] = kv[i] ? strlen(kv[i]) : 0;
	}
	bool r = schedule_route_of(fields, lens, n, out);
	/* out borrows from fields: copy before freeing */
	static char f[64], h[64], o[128];
	if (r) {
		snprintf_(f, sizeof f, "%s", out->function);
		snprintf_(h, sizeof h, "%s", out->handler);
		snprintf_(o, sizeof o, "%s", out->occurrence_id ? out->occurrence_id : "(null)");
		out->function = f;
		out->handler = h;
		out->occurrence_id = o;
	}
	for (size_t i = 0; i < n; i++)
		free(fields[i]);
	return r;
}

TEST(route_of_recognises_scheduled_entries_only)
{
	struct schedule_route r;
	const char *ev[] = {"event", "{\"a\":1}"};
	CHECK(!route(ev, 2, &r));
	const char *sc[] = {"event",
			    "{}",
			    "relay_schedule_function",
			    "fn",
			    "relay_schedule_handler",
			    "m.h",
			    "relay_occurrence_id",
			    "schedule:fn:m.h:2026-03-29T01:00:00Z"};
	REQUIRE(route(sc, 8, &r));
	CHECK_STR(r.function, "fn");
	CHECK_STR(r.handler, "m.h");
	CHECK_STR(r.occurrence_id, "schedule:fn:m.h:2026-03-29T01:00:00Z");
	/* no handler field: routed (and then found obsolete), handler "" */
	const char *nohandler[] = {"relay_schedule_function", "fn", "event", "{}"};
	REQUIRE(route(nohandler, 4, &r));
	CHECK_STR(r.handler, "");
	CHECK_STR(r.occurrence_id, "(null)");
	/* a field name as a value does not count */
	const char *asvalue[] = {"event", "relay_schedule_function"};
	CHECK(!route(asvalue, 2, &r));
	CHECK(!schedule_route_of(NULL, NULL, 0, NULL));
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

/* schedule_envelope_check on kv (NULL-terminated; "\x01" stands for a
 * value with a NUL byte inside). */
static int envelope(const char *const *kv, char *why, size_t whylen)
{
	char *fields[24] = {0};
	size_t lens[24] = {0}, n = 0;
	for (; kv[n] && n < 24; n++) {
		fields[n] = xstrdup(kv[n]);
		lens[n] = strlen(kv[n]);
		if (strcmp(kv[n], "\x01") == 0)
			fields[n][0] = '\0';
	}
	int rc = schedule_envelope_check(fields, lens, n, why, whylen);
	for (size_t i = 0; i < n; i++)
		free(fields[i]);
	return rc;
}

#define ENV_OK "{\"source\":\"relay.schedule\",\"scheduled_at\":\"2026-03-29T01:00:00Z\"}"
#define OCC_OK "schedule:fn:m.h:2026-03-29T01:00:00Z"
#define F SCHEDULE_FIELD_FUNCTION
#define H SCHEDULE_FIELD_HANDLER
#define O SCHEDULE_FIELD_OCCURRENCE

/* The local half of the genuineness proof: exactly what the publish script
 * writes, nothing more or less. Each row changes one thing. */
TEST(envelope_check_accepts_exactly_what_publication_writes)
{
	static const struct {
		const char *kv[14];
		int want;
		const char *why; /* part of the reason */
	} cases[] = {
		{{"event", ENV_OK, F, "fn", H, "m.h", O, OCC_OK}, 1, ""},
		{{O, OCC_OK, H, "m.h", F, "fn", "event", ENV_OK}, 1, ""}, /* order free */
		{{"event", "{\"x\":1}", F, "fn", H, "m.h", O, OCC_OK}, 0, "envelope"},
		{{"event", ENV_OK " ", F, "fn", H, "m.h", O, OCC_OK}, 0, "envelope"},
		{{"event",
		  "{\"source\":\"relay.schedule\",\"scheduled_at\":\"2026-03-29T01:00:01Z\"}", F,
		  "fn", H, "m.h", O, OCC_OK},
		 0,
		 "envelope"},
		{{"event", ENV_OK, F, "fn", H, "m.h"}, 0, O " missing"},
		{{"event", ENV_OK, H, "m.h", O, OCC_OK}, 0, F " missing"},
		{{F, "fn", H, "m.h", O, OCC_OK}, 0, "event missing"},
		{{"event", ENV_OK, F, "fn", H, "m.h", H, "m.h", O, OCC_OK}, 0, H " repeated"},
		{{"event", ENV_OK, "event", ENV_OK, F, "fn", H, "m.h", O, OCC_OK},
		 0,
		 "event repeated"},
		{{"event", ENV_OK, F, "fn", H, "m.h", O, OCC_OK, "extra", "x"}, 0, "other than"},
		{{"event", ENV_OK, F, "other", H, "m.h", O, OCC_OK}, 0, "does not name"},
		{{"event", ENV_OK, F, "fn", H, "x.y", O, OCC_OK}, 0, "does not name"},
		{{"event", ENV_OK, F, "fn", H, "m.h", O,
		  "schedule:fn:m.h:2026-03-29T01:00:00+00:00"},
		 0,
		 "does not name"},
		{{"event", ENV_OK, F, "fn", H, "m.h", O, "schedule:fn:m.h:2026-03-29T01:00:00.5Z"},
		 0,
		 "does not name"},
		{{"event", ENV_OK, F, "fn", H, "m.h", O, "schedule:fn:m.h:2026-02-30T01:00:00Z"},
		 0,
		 "does not name"},
		{{"event", ENV_OK, F, "fn", H, "m.h", O, "schedule:fn:m.h:"}, 0, "does not name"},
		{{"event", ENV_OK, F, "\x01", H, "m.h", O, OCC_OK}, 0, F " not text"},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		char why[256] = "";
		int got = envelope(cases[i].kv, why, sizeof why);
		if (got != cases[i].want || (cases[i].want == 0 && !strstr(why, cases[i].why)))
			T_FAIL_("case %zu: got %d (%s), want %d (%s)", i, got, why, cases[i].want,
				cases[i].why);
	}
}

/* A genuine publication's fields, as schedule_publish writes them, pass. */
TEST(envelope_check_accepts_every_published_occurrence)
{
	static const struct {
		const char *function, *handler;
		int64_t at;
	} occ[] = {{"user-events", "jobs.cleanup.handler", 1774746000},
		   {"jobs.v2", "x.y.z", 0},
		   {"a", "m.f", 4102444799}};
	for (size_t i = 0; i < ARRAY_LEN(occ); i++) {
		char *id = schedule_occurrence_id(occ[i].function, occ[i].handler, occ[i].at);
		char *p = schedule_payload(occ[i].at);
		const char *kv[] = {"event", p, F, occ[i].function, H, occ[i].handler, O, id, NULL};
		char why[256] = "";
		if (envelope(kv, why, sizeof why) != 1)
			T_FAIL_("%s: %s", id, why);
		free(id);
		free(p);
	}
}

T_MAIN(T_CASE(occurrence_ids_and_payloads_are_utc_whole_seconds),
       T_CASE(route_of_recognises_scheduled_entries_only),
       T_CASE(find_returns_the_first_schedule_with_the_handler),
       T_CASE(envelope_check_accepts_exactly_what_publication_writes),
       T_CASE(envelope_check_accepts_every_published_occurrence))
