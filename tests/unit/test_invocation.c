/* Invocation state's pure parts (invocation.h): the marker format, its
 * parse and eligibility, the retry backoff, the running deadline and the
 * bounds it must outlive, the key and its percent-encoding, and looking a
 * field up in loaded state. What goes through Redis (TryStart, dead
 * letter, restore) is tested in tests/it/consumer.c. */
#include <limits.h>

#include "base/duration.h"
#include "base/util.h"
#include "engine/invocation.h"
#include "engine/keys.h"
#include "engine/runner.h"
#include "io/docker.h"
#include "t.h"

static struct marker parse(const char *s)
{
	return invocation_marker_parse(s, strlen(s));
}

TEST(marker_parse_forms)
{
	static const struct {
		const char *in;
		enum marker_kind kind;
		int64_t deadline;
		int attempts;
	} cases[] = {
		{"ok", MARK_OK, 0, 0},
		{"running:1700000000123456789#1", MARK_RUNNING, 1700000000123456789LL, 1},
		{"next_attempt_at:5#3", MARK_NEXT_ATTEMPT, 5, 3},
		{"running:0#1", MARK_RUNNING, 0, 1},
		{"running:9223372036854775807#1000000", MARK_RUNNING, INT64_MAX, 1000000},
		{"exhausted:3", MARK_EXHAUSTED, 0, 3},
		{"exhausted:1000000", MARK_EXHAUSTED, 0, 1000000},
		/* malformed: absent, so eligible (fail open) */
		{"", MARK_ABSENT, 0, 0},
		{"OK", MARK_ABSENT, 0, 0},
		{"ok ", MARK_ABSENT, 0, 0},
		{"okay", MARK_ABSENT, 0, 0},
		{"o", MARK_ABSENT, 0, 0},
		{"Running:1#1", MARK_ABSENT, 0, 0},
		{"running:", MARK_ABSENT, 0, 0},
		{"running:123", MARK_ABSENT, 0, 0}, /* no #<attempts> */
		{"running:123#", MARK_ABSENT, 0, 0},
		{"running:#1", MARK_ABSENT, 0, 0},
		{"running:12a#1", MARK_ABSENT, 0, 0},
		{"running:-1#1", MARK_ABSENT, 0, 0},
		{"running:+1#1", MARK_ABSENT, 0, 0},
		{"running: 1#1", MARK_ABSENT, 0, 0},
		{"running:1#0", MARK_ABSENT, 0, 0},
		{"running:1#-1", MARK_ABSENT, 0, 0},
		{"running:1#+1", MARK_ABSENT, 0, 0},
		{"running:1#1000001", MARK_ABSENT, 0, 0},
		{"running:1#1\n", MARK_ABSENT, 0, 0},
		{"running:9223372036854775808#1", MARK_ABSENT, 0, 0},  /* past INT64_MAX */
		{"running:00000000000000000001#1", MARK_ABSENT, 0, 0}, /* 20 digits */
		{"next_attempt_at:1#2#3", MARK_ABSENT, 0, 0},
		{"next_attempt_at:1", MARK_ABSENT, 0, 0},
		{"next_attempt:1#1", MARK_ABSENT, 0, 0},
		{"exhausted:", MARK_ABSENT, 0, 0},
		{"exhausted:x", MARK_ABSENT, 0, 0},
		{"exhausted:-1", MARK_ABSENT, 0, 0},
		{"exhausted:3 ", MARK_ABSENT, 0, 0},
		{"exhausted:1000001", MARK_ABSENT, 0, 0},
		{"exhausted", MARK_ABSENT, 0, 0},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		struct marker m = parse(cases[i].in);
		if (m.kind != cases[i].kind || m.deadline_ns != cases[i].deadline ||
		    m.attempts != cases[i].attempts)
			T_FAIL_("\"%s\": kind %d deadline %" PRId64 " attempts %d, want %d %" PRId64
				" %d",
				cases[i].in, m.kind, m.deadline_ns, m.attempts, cases[i].kind,
				cases[i].deadline, cases[i].attempts);
	}
}

/* The value is s[0..len): what follows is not read, a NUL inside is data. */
TEST(marker_parse_reads_len_bytes)
{
	CHECK_INT(invocation_marker_parse("okay", 2).kind, MARK_OK);
	CHECK_INT(invocation_marker_parse("ok", 1).kind, MARK_ABSENT);
	CHECK_INT(invocation_marker_parse("ok\0", 3).kind, MARK_ABSENT);
	struct marker m = invocation_marker_parse("running:5#12", 11);
	CHECK_INT(m.kind, MARK_RUNNING);
	CHECK_INT(m.attempts, 1);
	m = invocation_marker_parse("exhausted:42", 11);
	CHECK_INT(m.kind, MARK_EXHAUSTED);
	CHECK_INT(m.attempts, 4);
	CHECK_INT(invocation_marker_parse("running:5\0#1", 12).kind, MARK_ABSENT);
}

TEST(marker_format_and_round_trip)
{
	static const struct {
		struct marker m;
		const char *text;
	} cases[] = {
		{{MARK_OK, 0, 0}, "ok"},
		{{MARK_RUNNING, 1700000000123456789LL, 1}, "running:1700000000123456789#1"},
		{{MARK_NEXT_ATTEMPT, 42, 3}, "next_attempt_at:42#3"},
		{{MARK_EXHAUSTED, 0, 4}, "exhausted:4"},
		{{MARK_ABSENT, 0, 0}, ""},
		/* the longest there is fits the 64 bytes the header asks for */
		{{MARK_NEXT_ATTEMPT, INT64_MAX, 1000000},
		 "next_attempt_at:9223372036854775807#1000000"},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		char out[64];
		memset(out, 'x', sizeof out);
		invocation_marker_format(&cases[i].m, out, sizeof out);
		CHECK_STR(out, cases[i].text);
		struct marker back = parse(out);
		CHECK_INT(back.kind, cases[i].m.kind);
		CHECK_INT(back.deadline_ns, cases[i].m.deadline_ns);
		CHECK_INT(back.attempts, cases[i].m.attempts);
	}
}

TEST(marker_eligibility)
{
	const int64_t d = 1700000000LL * NS_PER_SEC;
	struct marker absent = {MARK_ABSENT, 0, 0}, ok = {MARK_OK, 0, 0},
		      exhausted = {MARK_EXHAUSTED, 0, 3};
	CHECK(invocation_marker_eligible(&absent, 0));
	CHECK(invocation_marker_eligible(&absent, d));
	CHECK(!invocation_marker_eligible(&ok, d));
	CHECK(!invocation_marker_eligible(&ok, INT64_MAX));
	CHECK(!invocation_marker_eligible(&exhausted, INT64_MAX));
	/* running (a crashed worker's claim expires) and backoff alike: eligible
	 * from the deadline on, not a nanosecond before */
	static const enum marker_kind timed[] = {MARK_RUNNING, MARK_NEXT_ATTEMPT};
	for (size_t i = 0; i < ARRAY_LEN(timed); i++) {
		struct marker m = {timed[i], d, 2};
		CHECK(!invocation_marker_eligible(&m, 0));
		CHECK(!invocation_marker_eligible(&m, d - 1));
		CHECK(invocation_marker_eligible(&m, d));
		CHECK(invocation_marker_eligible(&m, d + 1));
	}
	/* a parsed malformed value is absent, hence eligible */
	struct marker junk = parse("running:soon#1");
	CHECK(invocation_marker_eligible(&junk, 0));
}

TEST(running_deadline_defaults)
{
	const int64_t claim = 1700000000LL * NS_PER_SEC;
	int64_t dflt = invocation_running_deadline(claim, TEMPLATE_DEFAULT_TIMEOUT_NS);
	CHECK_INT(invocation_running_deadline(claim, 0), dflt);
	CHECK_INT(invocation_running_deadline(claim, -1), dflt);
	/* longer rules, later deadlines, up to the maximum timeout */
	CHECK(invocation_running_deadline(claim, 20 * NS_PER_SEC) > dflt);
	CHECK_INT(invocation_running_deadline(claim, 20 * NS_PER_SEC) - dflt,
		  20 * NS_PER_SEC - TEMPLATE_DEFAULT_TIMEOUT_NS);
	CHECK_INT(invocation_running_deadline(claim, INT64_MAX),
		  invocation_running_deadline(claim, TEMPLATE_MAX_TIMEOUT_NS));
	/* always later than the handler's own timeout */
	CHECK(invocation_running_deadline(claim, 1) > claim + TEMPLATE_DEFAULT_TIMEOUT_NS);
}

/*
 * The running marker must outlive every path of the invocation.
 * Each path below is a sequence of phases, each taking its whole bound (a
 * daemon answering every call at the last moment). It ends no later than
 * the marker deadline minus the clock skew another worker may have, for
 * every timeout a rule can have. (A deadline of claim + timeout alone
 * fails every path through the handler phase.)
 */
TEST(marker_outlives_every_path)
{
	enum { CLAIM, CONNECT, SETUP, HANDLER, TEARDOWN, RECORD, NPHASES };
	static const struct {
		const char *name;
		int phases[NPHASES + 1]; /* -1 terminated */
	} paths[] = {
		{"create answer lost, removal by name",
		 {CLAIM, CONNECT, SETUP, TEARDOWN, RECORD, -1}},
		{"attach or wait refused", {CLAIM, CONNECT, SETUP, TEARDOWN, RECORD, -1}},
		{"start hangs", {CLAIM, CONNECT, SETUP, HANDLER, TEARDOWN, RECORD, -1}},
		{"handler times out", {CLAIM, CONNECT, SETUP, HANDLER, TEARDOWN, RECORD, -1}},
		{"handler exits at its timeout", {CLAIM, CONNECT, SETUP, HANDLER, RECORD, -1}},
		{"shutdown cancels it", {CLAIM, CONNECT, SETUP, HANDLER, TEARDOWN, RECORD, -1}},
		{"wait answer unreadable", {CLAIM, CONNECT, SETUP, HANDLER, TEARDOWN, RECORD, -1}},
	};
	const int64_t timeouts[] = {0,
				    1,
				    NS_PER_MS,
				    NS_PER_SEC,
				    TEMPLATE_DEFAULT_TIMEOUT_NS,
				    20 * NS_PER_SEC,
				    TEMPLATE_MAX_TIMEOUT_NS,
				    TEMPLATE_MAX_TIMEOUT_NS + 1};
	const int64_t claim = 1700000000LL * NS_PER_SEC;
	for (size_t t = 0; t < ARRAY_LEN(timeouts); t++) {
		int64_t bound[NPHASES] = {
			[CLAIM] = RUNNER_CLAIM_TIMEOUT_MS * NS_PER_MS,
			[CONNECT] = DOCKER_OPEN_TIMEOUT_MS * NS_PER_MS,
			[SETUP] = RUNNER_SETUP_TIMEOUT_MS * NS_PER_MS,
			[HANDLER] = runner_timeout_ns(timeouts[t]),
			[TEARDOWN] = RUNNER_TEARDOWN_TIMEOUT_MS * NS_PER_MS,
			[RECORD] = RUNNER_RECORD_TIMEOUT_MS * NS_PER_MS,
		};
		int64_t deadline = invocation_running_deadline(claim, timeouts[t]);
		/* Another worker whose clock runs ahead sees it expire early. */
		int64_t seen_expiring = deadline - RUNNER_CLOCK_SKEW_MS * NS_PER_MS;
		for (size_t p = 0; p < ARRAY_LEN(paths); p++) {
			int64_t end = claim;
			for (const int *ph = paths[p].phases; *ph >= 0; ph++)
				end += bound[*ph];
			/* Work between bounded calls. */
			end += RUNNER_LOCAL_SLACK_MS * NS_PER_MS;
			if (end > seen_expiring)
				T_FAIL_("timeout %" PRId64 " path \"%s\": ends %" PRId64
					" ns after the marker expires",
					timeouts[t], paths[p].name, end - seen_expiring);
		}
		/* Each phase counts: the runner's part is exactly its worst case. */
		struct runner_request in = {.timeout_ns = timeouts[t]};
		CHECK_INT(runner_worst_case_ns(&in), bound[SETUP] + bound[HANDLER] +
							     bound[TEARDOWN] +
							     RUNNER_LOCAL_SLACK_MS * NS_PER_MS);
		int64_t sum = 0;
		for (int ph = 0; ph < NPHASES; ph++)
			sum += bound[ph];
		CHECK_INT(deadline - claim,
			  sum + (RUNNER_LOCAL_SLACK_MS + RUNNER_CLOCK_SKEW_MS) * NS_PER_MS);
	}
	/* Marker and runner agree on the timeout: a later claim, a later
	 * deadline, by exactly as much. */
	CHECK_INT(invocation_running_deadline(claim + 7, NS_PER_SEC) -
			  invocation_running_deadline(claim, NS_PER_SEC),
		  7);
}

TEST(key_and_percent_encoding)
{
	static const struct {
		const char *in, *want;
	} cases[] = {
		{"", ""},
		{"user-events", "user-events"},
		{"AZaz09._~-", "AZaz09._~-"},
		{"a b", "a%20b"},
		{"user:events", "user%3Aevents"},
		{"a/b%c", "a%2Fb%25c"},
		{"#*?", "%23%2A%3F"},
		{"caf\xc3\xa9", "caf%C3%A9"},
		{"\x01\x7f\xff", "%01%7F%FF"},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		char *got = keys_pct_encode(cases[i].in);
		CHECK_STR(got, cases[i].want);
		free(got);
	}
	char *k = invocation_key("user-events", "relay", "1700000000000-0");
	CHECK_STR(k, "relay:invocation:user-events:relay:1700000000000-0");
	free(k);
	/* a ':' in a stream or group name cannot shift the key's parts */
	k = invocation_key("a:b", "c d", "1-2");
	CHECK_STR(k, "relay:invocation:a%3Ab:c%20d:1-2");
	free(k);
	char *k1 = invocation_key("a:b", "c", "1-0"), *k2 = invocation_key("a", "b:c", "1-0");
	CHECK(strcmp(k1, k2) != 0);
	free(k1);
	free(k2);
}

/* On Redis Cluster a key naming the stream keeps its hash tag (invocation.h);
 * elsewhere every name is the single server's. */
TEST(cluster_keys_keep_the_stream_tag)
{
	char *k = invocation_key("{events}", "relay", "1-0");
	CHECK_STR(k, "relay:invocation:%7Bevents%7D:relay:1-0");
	free(k);
	k = invocation_retry_key("{events}", "re lay");
	CHECK_STR(k, "relay:retry:%7Bevents%7D:re%20lay");
	free(k);
	keys_set_cluster(true);
	/* the retry index lives in the stream's hash slot too */
	k = invocation_retry_key("{events}", "re{lay}");
	CHECK_STR(k, "relay:retry:{events}:re%7Blay%7D");
	free(k);
	k = invocation_key("{events}", "re{lay}", "1-0");
	CHECK_STR(k, "relay:invocation:{events}:re%7Blay%7D:1-0");
	free(k);
	k = invocation_key("orders{relay}", "g", "1-0");
	CHECK_STR(k, "relay:invocation:orders{relay}:g:1-0");
	free(k);
	k = keys_encode("a:b{c}");
	CHECK_STR(k, "a%3Ab{c}");
	free(k);
	/* the group's braces stay encoded: only the stream's tag counts */
	k = keys_pct_encode("{g}");
	CHECK_STR(k, "%7Bg%7D");
	free(k);
	keys_set_cluster(false);
}

TEST(state_lookup)
{
	struct invocation_state st = {0};
	CHECK_INT(invocation_state_get(&st, "fn/h.main").kind, MARK_ABSENT);
	static const char *const fields[] = {"fn/h.main", "fn/h.main2", "other/x.y", "bad/v.w"};
	static const char *const values[] = {"ok", "running:77#2", "exhausted:5", "running:"};
	st.n = ARRAY_LEN(fields);
	st.fields = xcalloc(st.n, sizeof *st.fields);
	st.values = xcalloc(st.n, sizeof *st.values);
	for (size_t i = 0; i < st.n; i++) {
		st.fields[i] = xstrdup(fields[i]);
		st.values[i] = xstrdup(values[i]);
	}
	CHECK_INT(invocation_state_get(&st, "fn/h.main").kind, MARK_OK);
	struct marker m = invocation_state_get(&st, "fn/h.main2");
	CHECK_INT(m.kind, MARK_RUNNING);
	CHECK_INT(m.deadline_ns, 77);
	CHECK_INT(m.attempts, 2);
	CHECK_INT(invocation_state_get(&st, "other/x.y").attempts, 5);
	CHECK_INT(invocation_state_get(&st, "bad/v.w").kind, MARK_ABSENT);
	/* fields match whole */
	CHECK_INT(invocation_state_get(&st, "fn/h").kind, MARK_ABSENT);
	CHECK_INT(invocation_state_get(&st, "fn/h.main ").kind, MARK_ABSENT);
	CHECK_INT(invocation_state_get(&st, "").kind, MARK_ABSENT);
	invocation_state_free(&st);
	CHECK_INT(st.n, 0);
	CHECK(st.fields == NULL && st.values == NULL);
	invocation_state_free(&st); /* twice is harmless */
}

T_MAIN(T_CASE(marker_parse_forms), T_CASE(marker_parse_reads_len_bytes),
       T_CASE(marker_format_and_round_trip), T_CASE(marker_eligibility),
       T_CASE(running_deadline_defaults), T_CASE(marker_outlives_every_path),
       T_CASE(key_and_percent_encoding), T_CASE(cluster_keys_keep_the_stream_tag),
       T_CASE(state_lookup))
