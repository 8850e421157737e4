/* RFC 3339 as Go's time.Parse(time.RFC3339, s) accepts it. */
#include "base/rfc3339.h"
#include "t.h"
#include "base/util.h"

struct row {
	const char *s;
	int ok;
	long long sec; /* Unix seconds when ok */
	int nsec;
};

/* clang-format off */
static const struct row rows[] = {
	{"1970-01-01T00:00:00Z", 1, 0, 0},
	{"2026-09-13T22:47:41+02:00", 1, 1789332461, 0},
	{"2026-09-13T20:47:41Z", 1, 1789332461, 0},
	{"2026-09-13T16:47:41-04:00", 1, 1789332461, 0},
	{"2026-09-13T20:47:41-00:00", 1, 1789332461, 0},
	{"2026-09-14T02:17:41+05:30", 1, 1789332461, 0},
	{"2026-09-13T20:47:41.5Z", 1, 1789332461, 500000000},
	{"2026-09-13T20:47:41,5Z", 1, 1789332461, 500000000},
	{"2026-09-13T20:47:41.123456789Z", 1, 1789332461, 123456789},
	{"2026-09-13T20:47:41.1234567899Z", 1, 1789332461, 123456789},
	{"2026-09-13T20:47:41.000000001+00:00", 1, 1789332461, 1},
	{"1969-12-31T23:59:59.999999999Z", 1, -1, 999999999},
	{"2024-02-29T12:00:00Z", 1, 1709208000, 0},
	{"2000-02-29T00:00:00Z", 1, 951782400, 0},
	{"2026-01-01T9:00:00Z", 1, 1767258000, 0},
	{"2026-01-01T00:00:00+24:00", 1, 1767139200, 0},
	{"2026-01-01T00:00:00+23:60", 1, 1767139200, 0},
	{"0000-01-01T00:00:00Z", 1, -62167219200, 0},
	{"9999-12-31T23:59:59Z", 1, 253402300799, 0},
	{"2026-02-30T00:00:00Z", 0, 0, 0},
	{"2025-02-29T00:00:00Z", 0, 0, 0},
	{"1900-02-29T00:00:00Z", 0, 0, 0},
	{"2026-04-31T00:00:00Z", 0, 0, 0},
	{"2026-13-01T00:00:00Z", 0, 0, 0},
	{"2026-00-10T00:00:00Z", 0, 0, 0},
	{"2026-01-00T00:00:00Z", 0, 0, 0},
	{"2026-01-01T24:00:00Z", 0, 0, 0},
	{"2026-01-01T00:60:00Z", 0, 0, 0},
	{"2026-01-01T00:00:60Z", 0, 0, 0},
	{"2026-01-01T00:00:00", 0, 0, 0},
	{"2026-01-01t00:00:00Z", 0, 0, 0},
	{"2026-01-01T00:00:00z", 0, 0, 0},
	{"2026-01-01 00:00:00Z", 0, 0, 0},
	{"2026-01-01", 0, 0, 0},
	{"", 0, 0, 0},
	{"2026-1-01T00:00:00Z", 0, 0, 0},
	{"2026-01-1T00:00:00Z", 0, 0, 0},
	{"2026-01-01T00:0:00Z", 0, 0, 0},
	{"2026-01-01T00:00:0Z", 0, 0, 0},
	{"2026-01-01T000:00:00Z", 0, 0, 0},
	{"+2026-01-01T00:00:00Z", 0, 0, 0},
	{"12026-01-01T00:00:00Z", 0, 0, 0},
	{"226-01-01T00:00:00Z", 0, 0, 0},
	{"2026-01-01T00:00:00.Z", 0, 0, 0},
	{"2026-01-01T00:00:00.", 0, 0, 0},
	{"2026-01-01T00:00:00+0200", 0, 0, 0},
	{"2026-01-01T00:00:00+02", 0, 0, 0},
	{"2026-01-01T00:00:00+25:00", 0, 0, 0},
	{"2026-01-01T00:00:00+02:61", 0, 0, 0},
	{"2026-01-01T00:00:00 +02:00", 0, 0, 0},
	{"2026-01-01T00:00:00+02:00 ", 0, 0, 0},
	{"2026-01-01T00:00:00ZZ", 0, 0, 0},
	{"2026-01-01T00:00:00UTC", 0, 0, 0},
	{"2026-01-01T00:00:00*02:00", 0, 0, 0},
	{"2026-01-01T00:00:00+2:00", 0, 0, 0},
	{"2026/01/01T00:00:00Z", 0, 0, 0},
	{"2026-01-01T00.00.00Z", 0, 0, 0},
	{"1700000000", 0, 0, 0},
};
/* clang-format on */

TEST(table)
{
	for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
		int64_t sec = 0;
		int32_t nsec = 0;
		int rc = rfc3339_parse(rows[i].s, strlen(rows[i].s), &sec, &nsec);
		if ((rc == 0) != rows[i].ok)
			T_FAIL_("%s: rc %d", rows[i].s, rc);
		else if (rows[i].ok && (sec != rows[i].sec || nsec != rows[i].nsec))
			T_FAIL_("%s: got %lld.%09d, want %lld.%09d", rows[i].s, (long long)sec,
				(int)nsec, rows[i].sec, rows[i].nsec);
	}
}

TEST(length_is_honoured)
{
	int64_t sec;
	int32_t nsec;
	const char *s = "2026-01-01T00:00:00Zgarbage";
	CHECK_INT(rfc3339_parse(s, 20, &sec, &nsec), 0);
	CHECK_INT(rfc3339_parse(s, 19, &sec, &nsec), -1);
	CHECK_INT(rfc3339_parse(s, strlen(s), &sec, &nsec), -1);
	for (size_t n = 0; n < 20; n++) /* every truncation is rejected */
		CHECK_INT(rfc3339_parse(s, n, &sec, &nsec), -1);
	CHECK_INT(rfc3339_parse(NULL, 0, &sec, &nsec), -1);
}

TEST(nanoseconds)
{
	int64_t ns;
	const char *a = "2026-09-13T20:47:41.123456789Z";
	CHECK_INT(rfc3339_parse_ns(a, strlen(a), &ns), 0);
	CHECK(ns == 1789332461123456789LL);
	const char *b = "1969-12-31T23:59:59.5Z";
	CHECK_INT(rfc3339_parse_ns(b, strlen(b), &ns), 0);
	CHECK(ns == -500000000LL);
	const char *hi = "2262-04-11T23:47:16.854775807Z";
	CHECK_INT(rfc3339_parse_ns(hi, strlen(hi), &ns), 0);
	CHECK(ns == INT64_MAX);
	const char *over = "2262-04-11T23:47:16.854775808Z";
	CHECK_INT(rfc3339_parse_ns(over, strlen(over), &ns), -1);
	const char *lo = "1677-09-21T00:12:43.145224192Z";
	CHECK_INT(rfc3339_parse_ns(lo, strlen(lo), &ns), 0);
	CHECK(ns == INT64_MIN);
	const char *under = "1677-09-21T00:12:43.145224191Z";
	CHECK_INT(rfc3339_parse_ns(under, strlen(under), &ns), -1);
	const char *far = "9999-01-01T00:00:00Z";
	CHECK_INT(rfc3339_parse_ns(far, strlen(far), &ns), -1);
	CHECK_INT(rfc3339_parse_ns("x", 1, &ns), -1);
}

TEST(format_utc)
{
	char out[RFC3339_STR_MAX];
	CHECK_STR(rfc3339_format_utc(0, out), "1970-01-01T00:00:00Z");
	CHECK_STR(rfc3339_format_utc(1789332461123456789LL, out), "2026-09-13T20:47:41Z");
	CHECK_STR(rfc3339_format_utc(-1, out), "1969-12-31T23:59:59Z");
	CHECK_STR(rfc3339_format_utc(1709208000LL * 1000000000, out), "2024-02-29T12:00:00Z");
	CHECK_STR(rfc3339_format_utc(INT64_MAX, out), "2262-04-11T23:47:16Z");
	CHECK_STR(rfc3339_format_utc(INT64_MIN, out), "1677-09-21T00:12:43Z");
	/* round trip over a range of days, leap years included */
	for (int64_t s = -4000000000LL; s < 9000000000LL; s += 86399 * 37) {
		rfc3339_format_utc(s * 1000000000, out);
		int64_t back;
		int32_t nsec;
		if (rfc3339_parse(out, strlen(out), &back, &nsec) != 0 || back != s)
			T_FAIL_("round trip %lld -> %s", (long long)s, out);
	}
}

T_MAIN(T_CASE(table), T_CASE(length_is_honoured), T_CASE(nanoseconds), T_CASE(format_utc))
