/* W3C traceparent / tracestate parsing and formatting (io/traceparent.h). */
#include <string.h>

#include "io/traceparent.h"
#include "base/util.h"
#include "t.h"

#define TID "4bf92f3577b34da6a3ce929d0e0e4736"
#define SID "00f067aa0ba902b7"

static const struct {
	const char *in;
	int rc;
	const char *out; /* formatted back (version 00) when valid */
} parse_cases[] = {
	{"00-" TID "-" SID "-01", 0, "00-" TID "-" SID "-01"},
	{"00-" TID "-" SID "-00", 0, "00-" TID "-" SID "-00"},
	{"00-" TID "-" SID "-09", 0, "00-" TID "-" SID "-09"}, /* unknown flags kept in 00 */
	/* A later version: its first 55 bytes as 00, more only after '-'. */
	{"01-" TID "-" SID "-01", 0, "00-" TID "-" SID "-01"},
	{"cc-" TID "-" SID "-03-what-the-future-holds", 0, "00-" TID "-" SID "-01"},
	{"cc-" TID "-" SID "-01x", -1, NULL},
	{"ff-" TID "-" SID "-01", -1, NULL},		/* version ff is invalid */
	{"00-" TID "-" SID "-01-", -1, NULL},		/* 00 is exactly 55 bytes */
	{"00-" TID "-" SID "-1", -1, NULL},		/* short */
	{"00-4BF92F3577B34DA6A3CE929D0E0E4736-" SID "-01", -1, NULL}, /* upper case */
	{"00-" TID "-00F067AA0BA902B7-01", -1, NULL},
	{"00-00000000000000000000000000000000-" SID "-01", -1, NULL}, /* zero trace-id */
	{"00-" TID "-0000000000000000-01", -1, NULL},		      /* zero parent-id */
	{"00_" TID "-" SID "-01", -1, NULL},
	{"00-" TID "_" SID "-01", -1, NULL},
	{"00-" TID "-" SID "_01", -1, NULL},
	{"00-" TID "-" SID "-0g", -1, NULL},
	{"0g-" TID "-" SID "-01", -1, NULL},
	{"", -1, NULL},
	{"00-" TID "-" SID "-01\n", -1, NULL},
};

TEST(parse_table)
{
	for (size_t i = 0; i < ARRAY_LEN(parse_cases); i++) {
		struct traceparent tp;
		int rc = traceparent_parse(parse_cases[i].in, strlen(parse_cases[i].in), &tp);
		CHECK_INT(rc, parse_cases[i].rc);
		if (rc == 0) {
			char out[TRACEPARENT_LEN + 1];
			CHECK_STR(traceparent_format(&tp, out), parse_cases[i].out);
		} else {
			static const struct traceparent zero;
			CHECK(memcmp(&tp, &zero, sizeof zero) == 0);
		}
	}
}

TEST(parse_respects_length)
{
	/* Bytes past n are not read: a valid header cut short is invalid. */
	const char *s = "00-" TID "-" SID "-01";
	struct traceparent tp;
	CHECK_INT(traceparent_parse(s, 54, &tp), -1);
	CHECK_INT(traceparent_parse(s, 55, &tp), 0);
}

TEST(state_bounds)
{
	CHECK(traceparent_state_valid("congo=t61rcWkgMzE", 17));
	CHECK(traceparent_state_valid("a=1,b=2", 7));
	CHECK(!traceparent_state_valid("", 0));
	CHECK(!traceparent_state_valid("a=1\nb=2", 7));
	CHECK(!traceparent_state_valid("a=\x01", 3));
	CHECK(!traceparent_state_valid("a=\xc3\xa9", 4));
	char big[TRACEPARENT_STATE_MAX + 2];
	memset(big, 'a', sizeof big);
	CHECK(traceparent_state_valid(big, TRACEPARENT_STATE_MAX));
	CHECK(!traceparent_state_valid(big, TRACEPARENT_STATE_MAX + 1));
	/* 32 members pass, 33 do not. */
	struct buf list;
	buf_init(&list, 1024);
	for (int i = 0; i < 33; i++)
		buf_appendf(&list, i ? ",k=v" : "k=v");
	CHECK(!traceparent_state_valid(list.data, list.len));
	CHECK(traceparent_state_valid(list.data, list.len - 4));
	buf_free(&list);
}

TEST(new_ids_random_and_valid)
{
	struct traceparent a, b;
	traceparent_new(&a, TRACEPARENT_FLAG_SAMPLED);
	traceparent_new(&b, 0);
	CHECK(memcmp(a.trace_id, b.trace_id, 16) != 0);
	CHECK(memcmp(a.span_id, b.span_id, 8) != 0);
	char out[TRACEPARENT_LEN + 1];
	struct traceparent back;
	CHECK_INT(traceparent_parse(traceparent_format(&a, out), TRACEPARENT_LEN, &back), 0);
	CHECK(memcmp(&a, &back, sizeof a) == 0);
	CHECK_INT(out[54], '1');
	/* Many draws: never all zero, and the per-thread pool refills. */
	for (int i = 0; i < 1000; i++) {
		uint8_t id[8];
		static const uint8_t zero[8];
		traceparent_random(id, sizeof id);
		CHECK(memcmp(id, zero, 8) != 0);
	}
}

T_MAIN(T_CASE(parse_table), T_CASE(parse_respects_length), T_CASE(state_bounds),
       T_CASE(new_ids_random_and_valid))
