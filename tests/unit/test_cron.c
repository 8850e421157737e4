/*
 * Unit tests for src/model/cron.c: the parser's accept/reject table, next
 * occurrences (month ends, leap years, day-of-month/day-of-week OR, seconds,
 * descriptors, DST gaps and overlaps in both directions) and descriptions.
 * Expected instants were worked out by hand and checked with
 * `TZ=Zone date -d @N` / `zdump -v Zone`, never with this code.
 */
#include "model/cron.h"

#include <stdlib.h>

#include "t.h"
#include "base/util.h"

/* "2024-03-31T01:00:00Z" -> Unix seconds. */
static int64_t ts(const char *s)
{
	int y, mo, d, h, mi, sec;
	if (sscanf(s, "%d-%d-%dT%d:%d:%dZ", &y, &mo, &d, &h, &mi, &sec) != 6)
		abort();
	return tz_days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec;
}

static void iso(int64_t t, char out[32])
{
	if (t == -1) {
		snprintf_(out, 32, "none");
		return;
	}
	struct tz_tm tm;
	tz_localtime(tz_utc(), t, &tm);
	snprintf_(out, 32, "%04lld-%02d-%02dT%02d:%02d:%02dZ", (long long)tm.year, tm.mon, tm.mday,
		  tm.hour, tm.min, tm.sec);
}

TEST(parse_table)
{
	static const struct {
		const char *expr;
		const char *err; /* NULL: accepted */
	} cases[] = {
		/* accepted */
		{"* * * * *", NULL},
		{"0 3 * * *", NULL},
		{"0 8 * * 1-5", NULL},
		{"*/15 * * * *", NULL},
		{"1-30/5 * * * *", NULL},
		{"5/10 * * * *", NULL},
		{"0,15,30,45 * * * *", NULL},
		{"0 0 1 JAN,jul *", NULL},
		{"0 0 * * mon-FRI", NULL},
		{"0 0 * * MON-SUN", NULL},
		{"0 0 * * 7", NULL},
		{"0 0 * * 0", NULL},
		{"0 0 ? * MON", NULL},
		{"0 0 1 * ?", NULL},
		{"* * * * * *", NULL},
		{"30 * * * * *", NULL},
		{"*/10 0 9 * * 1-5", NULL},
		{"0 0 29 2 *", NULL},
		{"0 0 31 1-12 *", NULL},
		{"0 0 30 2 1", NULL}, /* day 30 never comes, Mondays do (OR) */
		{"  0   3\t* *  *  ", NULL},
		{"@yearly", NULL},
		{"@annually", NULL},
		{"@monthly", NULL},
		{"@weekly", NULL},
		{"@daily", NULL},
		{"@midnight", NULL},
		{"@hourly", NULL},
		{"@Daily", NULL},
		{"59 23 31 12 *", NULL},
		{"*/60 * * * *", NULL},
		/* rejected */
		{"61 * * * *", "cron \"61 * * * *\": minute 61 out of range 0-59"},
		{"60 * * * * *", "cron \"60 * * * * *\": second 60 out of range 0-59"},
		{"0 24 * * *", "cron \"0 24 * * *\": hour 24 out of range 0-23"},
		{"0 0 0 * *", "cron \"0 0 0 * *\": day-of-month 0 out of range 1-31"},
		{"0 0 32 * *", "cron \"0 0 32 * *\": day-of-month 32 out of range 1-31"},
		{"0 0 * 13 *", "cron \"0 0 * 13 *\": month 13 out of range 1-12"},
		{"0 0 * 0 *", "cron \"0 0 * 0 *\": month 0 out of range 1-12"},
		{"0 0 * * 8", "cron \"0 0 * * 8\": day-of-week 8 out of range 0-7"},
		{"99999999999999999999 * * * *", "cron \"99999999999999999999 * * * *\": minute "
						 "99999999999999999999 out of range 0-59"},
		{"", "cron \"\": empty expression"},
		{"   ", "cron \"   \": empty expression"},
		{"* * *", "cron \"* * *\": expected 5 or 6 fields, found 3"},
		{"* * * *", "cron \"* * * *\": expected 5 or 6 fields, found 4"},
		{"* * * * * * *", "cron \"* * * * * * *\": expected 5 or 6 fields, found 7"},
		{"*/0 * * * *", "cron \"*/0 * * * *\": minute step 0 out of range 1-60"},
		{"1-30/0 * * * *", "cron \"1-30/0 * * * *\": minute step 0 out of range 1-60"},
		{"5/0 * * * *", "cron \"5/0 * * * *\": minute step 0 out of range 1-60"},
		{"*/61 * * * *", "cron \"*/61 * * * *\": minute step 61 out of range 1-60"},
		{"*/ * * * *", "cron \"*/ * * * *\": minute: missing step after '/'"},
		{"*/x * * * *", "cron \"*/x * * * *\": minute: step \"x\" is not a number"},
		{"5-1 * * * *", "cron \"5-1 * * * *\": minute range 5-1 is reversed"},
		{"0 0 * * FRI-MON",
		 "cron \"0 0 * * FRI-MON\": day-of-week range FRI-MON is reversed"},
		{"* * * * 7-1", "cron \"* * * * 7-1\": day-of-week range 7-1 is reversed"},
		{"-1 * * * *", "cron \"-1 * * * *\": minute: range \"-1\" is missing an end"},
		{"1- * * * *", "cron \"1- * * * *\": minute: range \"1-\" is missing an end"},
		{"1-2-3 * * * *", "cron \"1-2-3 * * * *\": minute: \"2-3\" is not a number"},
		{"1,,2 * * * *", "cron \"1,,2 * * * *\": minute: empty list item"},
		{"1, * * * *", "cron \"1, * * * *\": minute: empty list item"},
		{"a * * * *", "cron \"a * * * *\": minute: \"a\" is not a number"},
		{"0 0 * FOO *",
		 "cron \"0 0 * FOO *\": month: \"FOO\" is not a number or a month name"},
		{"0 0 * * MONDAY", "cron \"0 0 * * MONDAY\": day-of-week: \"MONDAY\" is not a "
				   "number or a weekday name"},
		{"0 0 MON * *", "cron \"0 0 MON * *\": day-of-month: \"MON\" is not a number"},
		{"0 0 L * *", "cron \"0 0 L * *\": day-of-month: \"L\" is not a number"},
		{"? * * * *", "cron \"? * * * *\": minute: '?' is only allowed for day-of-month "
			      "and day-of-week"},
		{"TZ=Europe/Rome 0 3 * * *",
		 "cron \"TZ=Europe/Rome 0 3 * * *\": a time zone prefix "
		 "is not allowed (set the schedule's timezone)"},
		{"CRON_TZ=UTC 0 3 * * *",
		 "cron \"CRON_TZ=UTC 0 3 * * *\": a time zone prefix is not "
		 "allowed (set the schedule's timezone)"},
		{"0 0 30 2 *",
		 "cron \"0 0 30 2 *\": never fires: the selected days of the month do "
		 "not occur in the selected months"},
		{"0 0 31 4,6 *",
		 "cron \"0 0 31 4,6 *\": never fires: the selected days of the month "
		 "do not occur in the selected months"},
		{"0 0 0 31 2,4,6,9,11 *",
		 "cron \"0 0 0 31 2,4,6,9,11 *\": never fires: the selected "
		 "days of the month do not occur in the selected months"},
		{"@every 5m", "cron \"@every 5m\": unknown descriptor \"@every\""},
		{"@reboot", "cron \"@reboot\": unknown descriptor \"@reboot\""},
		{"@daily 0", "cron \"@daily 0\": descriptor @daily takes no fields"},
		{"0 0 * * *\x01", "cron \"0 0 * * *\\x01\": day-of-week: \"*\\x01\" is not a "
				  "number or a weekday name"},
	};
	int accepted = 0, rejected = 0;
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		struct cron *c = NULL;
		char *err = NULL;
		int rc = cron_parse(cases[i].expr, &c, &err);
		if (!cases[i].err) {
			if (rc != 0)
				T_FAIL_("cron_parse(\"%s\") failed: %s", cases[i].expr, err);
			CHECK(c != NULL && err == NULL);
			accepted++;
		} else {
			if (rc != -1)
				T_FAIL_("cron_parse(\"%s\") accepted", cases[i].expr);
			CHECK(c == NULL);
			CHECK_STR(err, cases[i].err);
			rejected++;
		}
		cron_free(c);
		free(err);
	}
	CHECK(accepted + rejected >= 40);
}

TEST(parse_limits)
{
	struct cron *c;
	char *err;
	char *big = xmalloc(CRON_EXPR_MAX + 2);
	memset(big, '1', CRON_EXPR_MAX + 1);
	big[CRON_EXPR_MAX + 1] = '\0';
	CHECK_INT(cron_parse(big, &c, &err), -1);
	CHECK_STR(err, "cron expression longer than 1024 bytes");
	free(err);
	free(big);
	REQUIRE(cron_parse("0 0 * * *", &c, &err) == 0);
	CHECK(!cron_has_seconds(c));
	cron_free(c);
	REQUIRE(cron_parse("0 0 0 * * *", &c, &err) == 0);
	CHECK(cron_has_seconds(c));
	cron_free(c);
}

struct next_case {
	const char *zone; /* NULL: UTC */
	const char *expr;
	const char *after;
	const char *want[5]; /* consecutive occurrences, NULL-terminated */
};

static void run_next(const struct next_case *cases, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const struct next_case *k = &cases[i];
		const struct tz *z = NULL;
		struct cron *c;
		char *err;
		if (k->zone && tz_load(k->zone, &z, &err) != 0) {
			T_FAIL_("%s: %s", k->zone, err);
			free(err);
			continue;
		}
		if (cron_parse(k->expr, &c, &err) != 0) {
			T_FAIL_("%s", err);
			free(err);
			continue;
		}
		int64_t t = ts(k->after);
		for (int j = 0; j < 5 && k->want[j]; j++) {
			t = cron_next(c, z, t);
			char got[32];
			iso(t, got);
			if (strcmp(got, k->want[j]) != 0) {
				T_FAIL_("%s \"%s\" after %s, #%d: got %s, want %s",
					k->zone ? k->zone : "UTC", k->expr, k->after, j + 1, got,
					k->want[j]);
				break;
			}
		}
		cron_free(c);
	}
}

TEST(next_calendar)
{
	static const struct next_case cases[] = {
		{NULL,
		 "0 3 * * *",
		 "2024-01-01T00:00:00Z",
		 {"2024-01-01T03:00:00Z", "2024-01-02T03:00:00Z"}},
		{NULL,
		 "0 3 * * *",
		 "2024-01-01T03:00:00Z",
		 {"2024-01-02T03:00:00Z"}}, /* strictly after */
		{NULL, "0 3 * * *", "2024-01-01T02:59:59Z", {"2024-01-01T03:00:00Z"}},
		/* month ends and year end */
		{NULL,
		 "0 0 31 * *",
		 "2024-01-31T00:00:00Z",
		 {"2024-03-31T00:00:00Z", "2024-05-31T00:00:00Z", "2024-07-31T00:00:00Z",
		  "2024-08-31T00:00:00Z", "2024-10-31T00:00:00Z"}},
		{NULL,
		 "59 23 31 12 *",
		 "2024-06-01T00:00:00Z",
		 {"2024-12-31T23:59:00Z", "2025-12-31T23:59:00Z"}},
		{NULL,
		 "0 0 1 * *",
		 "2024-12-15T00:00:00Z",
		 {"2025-01-01T00:00:00Z", "2025-02-01T00:00:00Z"}},
		{NULL,
		 "30 12 30 * *",
		 "2024-01-30T12:30:00Z",
		 {"2024-03-30T12:30:00Z", "2024-04-30T12:30:00Z"}},
		/* leap years: 2100 is not one, so 2096 -> 2104 */
		{NULL,
		 "0 0 29 2 *",
		 "2023-01-01T00:00:00Z",
		 {"2024-02-29T00:00:00Z", "2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"}},
		{NULL, "0 0 29 2 *", "2096-03-01T00:00:00Z", {"2104-02-29T00:00:00Z"}},
		{NULL,
		 "0 0 28-31 2 *",
		 "2023-02-27T00:00:00Z",
		 {"2023-02-28T00:00:00Z", "2024-02-28T00:00:00Z", "2024-02-29T00:00:00Z",
		  "2025-02-28T00:00:00Z"}},
		/* day-of-month OR day-of-week when both are restricted:
		 * 2024-03-01 is a Friday; Mondays are 4, 11, 18, 25 */
		{NULL,
		 "0 0 13 * 1",
		 "2024-03-01T00:00:00Z",
		 {"2024-03-04T00:00:00Z", "2024-03-11T00:00:00Z", "2024-03-13T00:00:00Z",
		  "2024-03-18T00:00:00Z", "2024-03-25T00:00:00Z"}},
		/* ...but AND-like (day-of-week only) when day-of-month is "*" or "?" */
		{NULL,
		 "0 0 * * 1",
		 "2024-03-01T00:00:00Z",
		 {"2024-03-04T00:00:00Z", "2024-03-11T00:00:00Z"}},
		{NULL,
		 "0 0 ? * MON",
		 "2024-03-01T00:00:00Z",
		 {"2024-03-04T00:00:00Z", "2024-03-11T00:00:00Z"}},
		{NULL,
		 "0 0 13 * ?",
		 "2024-03-01T00:00:00Z",
		 {"2024-03-13T00:00:00Z", "2024-04-13T00:00:00Z"}},
		/* Friday the 13th is not an AND in Vixie cron */
		{NULL,
		 "0 0 13 * 5",
		 "2024-09-01T00:00:00Z",
		 {"2024-09-06T00:00:00Z", "2024-09-13T00:00:00Z", "2024-09-20T00:00:00Z",
		  "2024-09-27T00:00:00Z", "2024-10-04T00:00:00Z"}},
		/* Sunday as 0 and 7; 2024-03-03 is a Sunday */
		{NULL,
		 "0 12 * * 7",
		 "2024-03-01T00:00:00Z",
		 {"2024-03-03T12:00:00Z", "2024-03-10T12:00:00Z"}},
		{NULL, "0 12 * * SUN", "2024-03-01T00:00:00Z", {"2024-03-03T12:00:00Z"}},
		{NULL,
		 "0 12 * * FRI-SUN",
		 "2024-03-01T12:00:00Z",
		 {"2024-03-02T12:00:00Z", "2024-03-03T12:00:00Z", "2024-03-08T12:00:00Z"}},
		/* steps */
		{NULL,
		 "*/15 * * * *",
		 "2024-01-01T00:07:00Z",
		 {"2024-01-01T00:15:00Z", "2024-01-01T00:30:00Z", "2024-01-01T00:45:00Z",
		  "2024-01-01T01:00:00Z"}},
		{NULL,
		 "1-30/10 * * * *",
		 "2024-01-01T00:00:00Z",
		 {"2024-01-01T00:01:00Z", "2024-01-01T00:11:00Z", "2024-01-01T00:21:00Z",
		  "2024-01-01T01:01:00Z"}},
		{NULL,
		 "5/20 * * * *",
		 "2024-01-01T00:00:00Z",
		 {"2024-01-01T00:05:00Z", "2024-01-01T00:25:00Z", "2024-01-01T00:45:00Z",
		  "2024-01-01T01:05:00Z"}},
		{NULL,
		 "0 0 1 */5 *",
		 "2024-01-15T00:00:00Z",
		 {"2024-06-01T00:00:00Z", "2024-11-01T00:00:00Z", "2025-01-01T00:00:00Z"}},
		/* seconds field */
		{NULL,
		 "* * * * * *",
		 "2024-01-01T00:00:00Z",
		 {"2024-01-01T00:00:01Z", "2024-01-01T00:00:02Z"}},
		{NULL,
		 "*/10 * * * * *",
		 "2024-01-01T00:00:55Z",
		 {"2024-01-01T00:01:00Z", "2024-01-01T00:01:10Z", "2024-01-01T00:01:20Z"}},
		{NULL,
		 "30 * * * * *",
		 "2024-01-01T00:00:30Z",
		 {"2024-01-01T00:01:30Z", "2024-01-01T00:02:30Z"}},
		{NULL, "15 30 8 * * *", "2024-01-01T09:00:00Z", {"2024-01-02T08:30:15Z"}},
		{NULL,
		 "59 59 23 31 12 *",
		 "2024-12-31T23:59:58Z",
		 {"2024-12-31T23:59:59Z", "2025-12-31T23:59:59Z"}},
		{NULL, "0 0 * * *", "2024-01-01T00:00:00Z", {"2024-01-02T00:00:00Z"}},
		/* descriptors */
		{NULL,
		 "@yearly",
		 "2024-05-05T00:00:00Z",
		 {"2025-01-01T00:00:00Z", "2026-01-01T00:00:00Z"}},
		{NULL, "@annually", "2024-05-05T00:00:00Z", {"2025-01-01T00:00:00Z"}},
		{NULL,
		 "@monthly",
		 "2024-01-31T10:00:00Z",
		 {"2024-02-01T00:00:00Z", "2024-03-01T00:00:00Z"}},
		{NULL,
		 "@weekly",
		 "2024-03-01T00:00:00Z",
		 {"2024-03-03T00:00:00Z", "2024-03-10T00:00:00Z"}},
		{NULL,
		 "@daily",
		 "2024-02-28T23:59:59Z",
		 {"2024-02-29T00:00:00Z", "2024-03-01T00:00:00Z"}},
		{NULL, "@midnight", "2024-02-28T23:59:59Z", {"2024-02-29T00:00:00Z"}},
		{NULL,
		 "@hourly",
		 "2024-02-28T23:59:59Z",
		 {"2024-02-29T00:00:00Z", "2024-02-29T01:00:00Z"}},
		/* the first and the last years of the domain */
		{NULL, "0 0 1 1 *", "1970-01-01T00:00:00Z", {"1971-01-01T00:00:00Z"}},
		{NULL, "0 0 1 1 *", "9998-06-01T00:00:00Z", {"9999-01-01T00:00:00Z", "none"}},
		/* a zone without DST */
		{"Asia/Kolkata",
		 "0 9 * * *",
		 "2024-01-01T00:00:00Z",
		 {"2024-01-01T03:30:00Z", "2024-01-02T03:30:00Z"}},
		{"Asia/Kathmandu", "0 0 * * *", "2024-01-01T00:00:00Z", {"2024-01-01T18:15:00Z"}},
	};
	run_next(cases, ARRAY_LEN(cases));
}

TEST(next_dst)
{
	static const struct next_case cases[] = {
		/* Europe/Rome: 2024-03-31 02:00 CET -> 03:00 CEST at 01:00Z */
		{"Europe/Rome",
		 "30 2 * * *",
		 "2024-03-30T00:00:00Z",
		 {"2024-03-30T01:30:00Z", "2024-03-31T01:00:00Z", "2024-04-01T00:30:00Z"}},
		{"Europe/Rome",
		 "*/30 * * * *",
		 "2024-03-31T00:15:00Z",
		 {"2024-03-31T00:30:00Z", "2024-03-31T01:00:00Z", "2024-03-31T01:30:00Z"}},
		{"Europe/Rome",
		 "0 3 * * *",
		 "2024-03-30T12:00:00Z",
		 {"2024-03-31T01:00:00Z", "2024-04-01T01:00:00Z"}},
		{"Europe/Rome", "0 8 * * 1-5", "2024-03-29T12:00:00Z", {"2024-04-01T06:00:00Z"}},
		/* Europe/Rome: 2024-10-27 03:00 CEST -> 02:00 CET at 01:00Z */
		{"Europe/Rome",
		 "30 2 * * *",
		 "2024-10-26T12:00:00Z",
		 {"2024-10-27T00:30:00Z", "2024-10-28T01:30:00Z"}},
		{"Europe/Rome",
		 "0 * * * *",
		 "2024-10-26T23:30:00Z",
		 {"2024-10-27T00:00:00Z", "2024-10-27T02:00:00Z", "2024-10-27T03:00:00Z"}},
		/* after lies in the second pass of the overlap: 02:30 already fired */
		{"Europe/Rome", "30 2 * * *", "2024-10-27T01:10:00Z", {"2024-10-28T01:30:00Z"}},
		{"Europe/Rome", "0 3 * * *", "2024-10-27T01:10:00Z", {"2024-10-27T02:00:00Z"}},
		/* the footer rule, decades ahead: 2090-03-26 and 2090-10-29 */
		{"Europe/Rome",
		 "30 2 * * *",
		 "2090-03-25T12:00:00Z",
		 {"2090-03-26T01:00:00Z", "2090-03-27T00:30:00Z"}},
		{"Europe/Rome",
		 "30 2 * * *",
		 "2090-10-28T12:00:00Z",
		 {"2090-10-29T00:30:00Z", "2090-10-30T01:30:00Z"}},
		/* America/New_York: 2024-03-10 02:00 EST -> 03:00 EDT at 07:00Z */
		{"America/New_York",
		 "30 2 * * *",
		 "2024-03-09T12:00:00Z",
		 {"2024-03-10T07:00:00Z", "2024-03-11T06:30:00Z"}},
		{"America/New_York",
		 "*/20 2-3 * * *",
		 "2024-03-10T06:00:00Z",
		 {"2024-03-10T07:00:00Z", "2024-03-10T07:20:00Z", "2024-03-10T07:40:00Z",
		  "2024-03-11T06:00:00Z"}},
		{"America/New_York",
		 "0 0 2 * * *",
		 "2024-03-10T06:59:59Z",
		 {"2024-03-10T07:00:00Z"}},
		/* 2024-11-03 02:00 EDT -> 01:00 EST at 06:00Z */
		{"America/New_York",
		 "30 1 * * *",
		 "2024-11-02T12:00:00Z",
		 {"2024-11-03T05:30:00Z", "2024-11-04T06:30:00Z"}},
		{"America/New_York",
		 "30 1 * * *",
		 "2024-11-03T06:10:00Z",
		 {"2024-11-04T06:30:00Z"}},
		{"America/New_York",
		 "*/20 * * * *",
		 "2024-11-03T05:30:00Z",
		 {"2024-11-03T05:40:00Z", "2024-11-03T07:00:00Z", "2024-11-03T07:20:00Z"}},
		{"America/New_York", "0 2 * * *", "2024-11-03T06:10:00Z", {"2024-11-03T07:00:00Z"}},
		/* America/Sao_Paulo 2018: midnight gap on 2018-11-04 (00:00 -> 01:00 at 03:00Z) */
		{"America/Sao_Paulo",
		 "0 0 * * *",
		 "2018-11-02T12:00:00Z",
		 {"2018-11-03T03:00:00Z", "2018-11-04T03:00:00Z", "2018-11-05T02:00:00Z"}},
		{"America/Sao_Paulo",
		 "30 0 * * *",
		 "2018-11-03T12:00:00Z",
		 {"2018-11-04T03:00:00Z", "2018-11-05T02:30:00Z"}},
		{"America/Sao_Paulo",
		 "0 0 4 11 *",
		 "2018-01-01T00:00:00Z",
		 {"2018-11-04T03:00:00Z"}},
		/* 2018-02-18 00:00 -02 -> 2018-02-17 23:00 -03 at 02:00Z */
		{"America/Sao_Paulo",
		 "0 0 * * *",
		 "2018-02-17T12:00:00Z",
		 {"2018-02-18T03:00:00Z", "2018-02-19T03:00:00Z"}},
		{"America/Sao_Paulo",
		 "30 23 * * *",
		 "2018-02-17T12:00:00Z",
		 {"2018-02-18T01:30:00Z", "2018-02-19T02:30:00Z"}},
		/* 2019: the last fall-back (2019-02-17 at 02:00Z), then no DST at all */
		{"America/Sao_Paulo",
		 "0 0 * * *",
		 "2019-02-16T12:00:00Z",
		 {"2019-02-17T03:00:00Z", "2019-02-18T03:00:00Z"}},
		{"America/Sao_Paulo",
		 "30 23 * * *",
		 "2019-02-16T12:00:00Z",
		 {"2019-02-17T01:30:00Z", "2019-02-18T02:30:00Z"}},
		{"America/Sao_Paulo",
		 "0 0 * * *",
		 "2019-11-02T12:00:00Z",
		 {"2019-11-03T03:00:00Z", "2019-11-04T03:00:00Z"}},
		/* Africa/Cairo: 2024-04-26 00:00 -> 01:00 at 2024-04-25T22:00Z */
		{"Africa/Cairo",
		 "0 0 * * *",
		 "2024-04-25T12:00:00Z",
		 {"2024-04-25T22:00:00Z", "2024-04-26T21:00:00Z"}},
		{"Africa/Cairo",
		 "30 0 * * 5",
		 "2024-04-20T00:00:00Z",
		 {"2024-04-25T22:00:00Z", "2024-05-02T21:30:00Z"}},
		/* 2024-10-31 24:00 EEST -> 23:00 EET at 21:00Z: 23:xx repeats */
		{"Africa/Cairo",
		 "30 23 * * *",
		 "2024-10-31T12:00:00Z",
		 {"2024-10-31T20:30:00Z", "2024-11-01T21:30:00Z"}},
		{"Africa/Cairo",
		 "0 0 * * *",
		 "2024-10-31T12:00:00Z",
		 {"2024-10-31T22:00:00Z", "2024-11-01T22:00:00Z"}},
		/* the footer rule M4.5.5/0,M10.5.4/24 in 2090 */
		{"Africa/Cairo",
		 "0 0 * * *",
		 "2090-04-27T12:00:00Z",
		 {"2090-04-27T22:00:00Z", "2090-04-28T21:00:00Z"}},
		{"Africa/Cairo", "0 0 * * *", "2090-10-26T12:00:00Z", {"2090-10-26T22:00:00Z"}},
		/* 30-minute DST (Lord Howe, 2024-10-06 02:00 -> 02:30 at 15:30Z) */
		{"Australia/Lord_Howe",
		 "15 2 * * *",
		 "2024-10-05T00:00:00Z",
		 {"2024-10-05T15:30:00Z", "2024-10-06T15:15:00Z"}},
		/* seconds inside a gap fire once */
		{"Europe/Rome",
		 "*/20 * 2 * * *",
		 "2024-03-31T00:59:30Z",
		 {"2024-03-31T01:00:00Z", "2024-04-01T00:00:00Z", "2024-04-01T00:00:20Z"}},
	};
	run_next(cases, ARRAY_LEN(cases));
}

/* Each occurrence is strictly later than the previous, across many DST years. */
TEST(next_monotonic)
{
	static const char *const zones[] = {"Europe/Rome", "America/New_York", "America/Sao_Paulo",
					    "Africa/Cairo", "Australia/Lord_Howe"};
	static const char *const exprs[] = {"*/30 * * * *", "0 0 * * *", "30 2 * * *", "0 1 * * 0"};
	for (size_t zi = 0; zi < ARRAY_LEN(zones); zi++) {
		const struct tz *z;
		char *err;
		if (tz_load(zones[zi], &z, &err) != 0) {
			T_FAIL_("%s", err);
			free(err);
			continue;
		}
		for (size_t ei = 0; ei < ARRAY_LEN(exprs); ei++) {
			struct cron *c;
			REQUIRE(cron_parse(exprs[ei], &c, &err) == 0);
			int64_t t = ts("2015-01-01T00:00:00Z"), end = ts("2026-01-01T00:00:00Z");
			long steps = 0;
			while (t < end) {
				int64_t n = cron_next(c, z, t);
				if (n <= t) {
					T_FAIL_("%s %s: %lld -> %lld", zones[zi], exprs[ei],
						(long long)t, (long long)n);
					break;
				}
				/* every second in between really is before the next occurrence */
				t = n;
				steps++;
			}
			CHECK(steps > 0);
			cron_free(c);
		}
	}
}

TEST(next_bounds)
{
	struct cron *c;
	char *err;
	REQUIRE(cron_parse("* * * * *", &c, &err) == 0);
	CHECK_INT(cron_next(c, NULL, INT64_MAX), -1);
	CHECK_INT(cron_next(c, NULL, INT64_MIN), -1);
	CHECK_INT(cron_next(c, tz_utc(), 0), 60);
	CHECK_INT(cron_next(c, NULL, -1), -1); /* before 1970: outside the domain */
	CHECK_INT(cron_next(c, NULL, 0), 60);
	CHECK_INT(cron_next(c, NULL, ts("9999-12-31T23:58:59Z")), ts("9999-12-31T23:59:00Z"));
	CHECK_INT(cron_next(c, NULL, ts("9999-12-31T23:59:00Z")), -1);
	cron_free(c);
	/* Wall times before 1970 in a zone west of UTC are not "none". */
	const struct tz *z;
	REQUIRE(tz_load("America/New_York", &z, &err) == 0);
	REQUIRE(cron_parse("0 * * * *", &c, &err) == 0);
	CHECK_INT(cron_next(c, z, 0), ts("1970-01-01T01:00:00Z"));
	cron_free(c);
}

TEST(describe_table)
{
	static const struct {
		const char *expr, *want; /* want NULL: no description */
	} cases[] = {
		{"0 3 * * *", "At 03:00"},
		{"0 8 * * 1-5", "At 08:00, Monday through Friday"},
		{"*/15 * * * *", "Every 15 minutes"},
		{"* * * * *", "Every minute"},
		{"* * * * * *", "Every second"},
		{"30 * * * * *", "At 30 seconds past the minute"},
		{"*/10 * * * * *", "Every 10 seconds"},
		{"0-10 * * * * *", "Seconds 0 through 10 past the minute"},
		{"15 30 8 * * *", "At 08:30:15"},
		{"0 0 1 * *", "At 00:00, on day 1 of the month"},
		{"30 8 * 1 *", "At 08:30, only in January"},
		{"0 0 1 1,7 *", "At 00:00, on day 1 of the month, only in January and July"},
		{"0 0 1 JAN-MAR *", "At 00:00, on day 1 of the month, January through March"},
		{"0 0 1 */3 *", "At 00:00, on day 1 of the month, every 3 months"},
		{"0 0 1,15 * *", "At 00:00, on days 1 and 15 of the month"},
		{"0 0 */2 * *", "At 00:00, every 2 days"},
		{"0 0 1-7 * 1", "At 00:00, between day 1 and 7 of the month or on Monday"},
		{"0 12 * * MON,WED,FRI", "At 12:00, only on Monday, Wednesday and Friday"},
		{"0 0 * * 5-7", "At 00:00, Friday through Sunday"},
		{"0 0 * * SUN-TUE", "At 00:00, Sunday through Tuesday"},
		{"0 0 ? * MON", "At 00:00, only on Monday"},
		{"0 0 * * 1-7", "At 00:00"},
		{"0 */2 * * *", "Every 2 hours"},
		{"0 0 */6 * * *", "Every 6 hours"},
		{"30 */2 * * *", "At 30 minutes past the hour, every 2 hours"},
		{"1 * * * *", "At 1 minute past the hour"},
		{"0 8,17 * * *", "At 08:00 and 17:00"},
		{"0,30 9 * * *", "At 09:00 and 09:30"},
		{"0 9-17 * * *", "Every hour, between 09:00 and 17:59"},
		{"* 9 * * *", "Every minute, between 09:00 and 09:59"},
		{"*/5 9-17 * * 1-5",
		 "Every 5 minutes, between 09:00 and 17:59, Monday through Friday"},
		{"15 */5 * * * *", "At 15 seconds past the minute, every 5 minutes"},
		{"5/10 * * * *", "Every 10 minutes, starting at 5 minutes past the hour"},
		{"@yearly", "At 00:00, on day 1 of the month, only in January"},
		{"@monthly", "At 00:00, on day 1 of the month"},
		{"@weekly", "At 00:00, only on Sunday"},
		{"@daily", "At 00:00"},
		{"@hourly", "Every hour"},
		{"1,3,7,12,20,22,40,50,55 * * * *", NULL},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		struct cron *c;
		char *err;
		if (cron_parse(cases[i].expr, &c, &err) != 0) {
			T_FAIL_("%s", err);
			free(err);
			continue;
		}
		char *d = cron_describe(c);
		if (cases[i].want)
			CHECK_STR(d, cases[i].want);
		else if (d)
			T_FAIL_("\"%s\": expected no description, got \"%s\"", cases[i].expr, d);
		free(d);
		cron_free(c);
	}
}

T_MAIN(T_CASE(parse_table), T_CASE(parse_limits), T_CASE(next_calendar), T_CASE(next_dst),
       T_CASE(next_monotonic), T_CASE(next_bounds), T_CASE(describe_table))
