/*
 * Unit tests for src/base/tz.c. Expected offsets were taken independently from
 * `zdump -v Zone` and `TZ=Zone date -d @N` (glibc), not from this code.
 */
#include "base/tz.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "t.h"
#include "base/util.h"

/* "2024-03-31T01:00:00Z" or a local "2024-03-31T02:30:00" -> seconds. */
static int64_t ts(const char *s)
{
	int y, mo, d, h, mi, sec;
	if (sscanf(s, "%d-%d-%dT%d:%d:%d", &y, &mo, &d, &h, &mi, &sec) != 6)
		abort();
	return tz_days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec;
}

/* The zone named name, or NULL once the running test is failed with the
 * reason. */
static const struct tz *load_or_fail(const char *name)
{
	const struct tz *z;
	char *err;
	if (tz_load(name, &z, &err) != 0) {
		T_FAIL_("%s: %s", name, err);
		free(err);
		return NULL;
	}
	return z;
}

TEST(calendar)
{
	CHECK_INT(tz_days_from_civil(1970, 1, 1), 0);
	CHECK_INT(tz_days_from_civil(2000, 3, 1), 11017);
	CHECK_INT(tz_days_from_civil(1, 1, 1), -719162);
	CHECK_INT(ts("2024-03-31T01:00:00Z"), 1711846800); /* date -u -d ... +%s */
	CHECK_INT(ts("1900-01-01T00:00:00Z"), -2208988800LL);
	int64_t y;
	int m, d;
	tz_civil_from_days(19782, &y, &m, &d);
	CHECK(y == 2024 && m == 2 && d == 29);
	tz_civil_from_days(-1, &y, &m, &d);
	CHECK(y == 1969 && m == 12 && d == 31);
	CHECK(tz_is_leap(2000) && tz_is_leap(2024) && !tz_is_leap(1900) && !tz_is_leap(2100));
	CHECK_INT(tz_days_in_month(2024, 2), 29);
	CHECK_INT(tz_days_in_month(2023, 2), 28);
	CHECK_INT(tz_days_in_month(2023, 4), 30);
	CHECK_INT(tz_days_in_month(2023, 13), 0);
}

TEST(load_names)
{
	static const struct {
		const char *name;
		const char *err; /* NULL: loads */
	} cases[] = {
		{"UTC", NULL},
		{"", NULL},
		{"Europe/Rome", NULL},
		{"America/Sao_Paulo", NULL},
		{"Etc/GMT+5", NULL},
		{"America/Argentina/Buenos_Aires", NULL},
		{"right/Europe/Rome", NULL},
		{"Local", "time zone Local is not allowed: name an IANA zone such as Europe/Rome"},
		{"Europe/Nowhere", "unknown time zone Europe/Nowhere"},
		{"Europe", "unknown time zone Europe"},
		{"utc", "unknown time zone utc"},
		{"zone.tab", "time zone zone.tab: malformed tz data (not a TZif file)"},
		{"../etc/passwd", "invalid time zone name \"../etc/passwd\""},
		{"Europe/../Europe/Rome", "invalid time zone name \"Europe/../Europe/Rome\""},
		{"/etc/localtime", "invalid time zone name \"/etc/localtime\""},
		{"Europe//Rome", "invalid time zone name \"Europe//Rome\""},
		{"Europe/Rome/", "invalid time zone name \"Europe/Rome/\""},
		{"./UTC", "invalid time zone name \"./UTC\""},
		{"Europe/Rome\n", "invalid time zone name \"Europe/Rome\\x0a\""},
		{"Europe Rome", "invalid time zone name \"Europe Rome\""},
		{"Europe\\Rome", "invalid time zone name \"Europe\\x5cRome\""},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		const struct tz *z = NULL;
		char *err = NULL;
		int rc = tz_load(cases[i].name, &z, &err);
		if (!cases[i].err) {
			if (rc != 0)
				T_FAIL_("tz_load(\"%s\") failed: %s", cases[i].name, err);
			CHECK(z != NULL);
		} else {
			CHECK_INT(rc, -1);
			CHECK_STR(err, cases[i].err);
		}
		free(err);
	}
}

TEST(names_and_cache)
{
	const struct tz *a, *b, *u;
	char *err;
	REQUIRE(tz_load("Europe/Rome", &a, &err) == 0);
	REQUIRE(tz_load("Europe/Rome", &b, &err) == 0);
	CHECK(a == b); /* read once, shared */
	CHECK_STR(tz_name(a), "Europe/Rome");
	REQUIRE(tz_load("", &u, &err) == 0);
	CHECK(u == tz_utc());
	CHECK_STR(tz_name(u), "UTC");
	CHECK_INT(tz_offset(u, 1711846800), 0);
}

struct off_case {
	const char *zone;
	const char *at; /* UTC instant */
	long offset;
	int isdst;
	const char *abbr;
};

TEST(offsets)
{
	static const struct off_case cases[] = {
		/* zdump -v -c 2024,2025 Europe/Rome */
		{"Europe/Rome", "2024-03-31T00:59:59Z", 3600, 0, "CET"},
		{"Europe/Rome", "2024-03-31T01:00:00Z", 7200, 1, "CEST"},
		{"Europe/Rome", "2024-10-27T00:59:59Z", 7200, 1, "CEST"},
		{"Europe/Rome", "2024-10-27T01:00:00Z", 3600, 0, "CET"},
		/* beyond the table: the footer rule CET-1CEST,M3.5.0,M10.5.0/3 */
		{"Europe/Rome", "2090-03-26T00:59:59Z", 3600, 0, "CET"},
		{"Europe/Rome", "2090-03-26T01:00:00Z", 7200, 1, "CEST"},
		{"Europe/Rome", "2090-10-29T00:59:59Z", 7200, 1, "CEST"},
		{"Europe/Rome", "2090-10-29T01:00:00Z", 3600, 0, "CET"},
		{"Europe/Rome", "2500-07-01T00:00:00Z", 7200, 1, "CEST"},
		/* Italy observed DST in 1970 (zdump) */
		{"Europe/Rome", "1970-07-01T00:00:00Z", 7200, 1, "CEST"},
		{"America/New_York", "2024-03-10T06:59:59Z", -18000, 0, "EST"},
		{"America/New_York", "2024-03-10T07:00:00Z", -14400, 1, "EDT"},
		{"America/New_York", "2024-11-03T05:59:59Z", -14400, 1, "EDT"},
		{"America/New_York", "2024-11-03T06:00:00Z", -18000, 0, "EST"},
		/* before the first transition: LMT -4:56:02 */
		{"America/New_York", "1800-01-01T00:00:00Z", -17762, 0, "LMT"},
		{"America/Sao_Paulo", "2018-02-18T01:59:59Z", -7200, 1, "-02"},
		{"America/Sao_Paulo", "2018-02-18T02:00:00Z", -10800, 0, "-03"},
		{"America/Sao_Paulo", "2018-11-04T02:59:59Z", -10800, 0, "-03"},
		{"America/Sao_Paulo", "2018-11-04T03:00:00Z", -7200, 1, "-02"},
		{"America/Sao_Paulo", "2019-02-17T01:59:59Z", -7200, 1, "-02"},
		{"America/Sao_Paulo", "2019-02-17T02:00:00Z", -10800, 0, "-03"},
		{"America/Sao_Paulo", "2019-12-01T00:00:00Z", -10800, 0, "-03"},
		{"America/Sao_Paulo", "2060-12-01T00:00:00Z", -10800, 0, "-03"},
		{"Africa/Cairo", "2024-04-25T21:59:59Z", 7200, 0, "EET"},
		{"Africa/Cairo", "2024-04-25T22:00:00Z", 10800, 1, "EEST"},
		{"Africa/Cairo", "2024-10-31T20:59:59Z", 10800, 1, "EEST"},
		{"Africa/Cairo", "2024-10-31T21:00:00Z", 7200, 0, "EET"},
		/* footer EET-2EEST,M4.5.5/0,M10.5.4/24: 2090-04-28 and 2090-10-26 */
		{"Africa/Cairo", "2090-04-27T21:59:59Z", 7200, 0, "EET"},
		{"Africa/Cairo", "2090-04-27T22:00:00Z", 10800, 1, "EEST"},
		{"Africa/Cairo", "2090-10-26T20:59:59Z", 10800, 1, "EEST"},
		{"Africa/Cairo", "2090-10-26T21:00:00Z", 7200, 0, "EET"},
		/* negative DST: IST-1GMT0,M10.5.0,M3.5.0/1 */
		{"Europe/Dublin", "2024-07-01T00:00:00Z", 3600, 0, "IST"},
		{"Europe/Dublin", "2024-12-01T00:00:00Z", 0, 1, "GMT"},
		{"Europe/Dublin", "2090-07-01T00:00:00Z", 3600, 0, "IST"},
		{"Europe/Dublin", "2090-12-01T00:00:00Z", 0, 1, "GMT"},
		/* half- and quarter-hour zones, 30-minute DST, 2-hour DST */
		{"Asia/Kolkata", "2024-01-01T00:00:00Z", 19800, 0, "IST"},
		{"Asia/Kathmandu", "2024-01-01T00:00:00Z", 20700, 0, "+0545"},
		{"Australia/Lord_Howe", "2024-01-01T00:00:00Z", 39600, 1, "+11"},
		{"Australia/Lord_Howe", "2024-07-01T00:00:00Z", 37800, 0, "+1030"},
		{"Australia/Lord_Howe", "2090-01-01T00:00:00Z", 39600, 1, "+11"},
		{"Antarctica/Troll", "2024-07-01T00:00:00Z", 7200, 1, "+02"},
		{"Antarctica/Troll", "2024-12-01T00:00:00Z", 0, 0, "+00"},
		{"Etc/GMT+5", "2024-07-01T00:00:00Z", -18000, 0, "-05"},
		{"right/Europe/Rome", "2024-07-01T00:00:00Z", 7200, 1, "CEST"},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		const struct off_case *c = &cases[i];
		const struct tz *z = load_or_fail(c->zone);
		if (!z)
			continue;
		struct tz_tm tm;
		tz_localtime(z, ts(c->at), &tm);
		if (tm.offset != c->offset || tm.isdst != c->isdst || strcmp(tm.abbr, c->abbr) != 0)
			T_FAIL_("%s at %s: got %ld isdst=%d %s, want %ld isdst=%d %s", c->zone,
				c->at, tm.offset, tm.isdst, tm.abbr, c->offset, c->isdst, c->abbr);
		CHECK_INT(tz_offset(z, ts(c->at)), c->offset);
	}
}

TEST(localtime_fields)
{
	const struct tz *z;
	char *err;
	REQUIRE(tz_load("America/Sao_Paulo", &z, &err) == 0);
	struct tz_tm tm;
	/* TZ=America/Sao_Paulo date -d @1550368800: Sat Feb 16 23:00:00 -03 2019 */
	tz_localtime(z, 1550368800, &tm);
	CHECK(tm.year == 2019 && tm.mon == 2 && tm.mday == 16 && tm.hour == 23 && tm.min == 0 &&
	      tm.sec == 0 && tm.wday == 6 && tm.yday == 46);
	tz_localtime(tz_utc(), -1, &tm);
	CHECK(tm.year == 1969 && tm.mon == 12 && tm.mday == 31 && tm.hour == 23 && tm.min == 59 &&
	      tm.sec == 59 && tm.wday == 3);
	/* Absurd instants are clamped, not undefined behaviour. */
	tz_localtime(z, INT64_MAX, &tm);
	tz_localtime(z, INT64_MIN, &tm);
	CHECK(tz_offset(z, INT64_MAX) == -10800);
}

struct resolve_case {
	const char *zone;
	const char *wall;
	int n;
	const char *first, *second; /* UTC; for n == 0 first is the transition */
};

TEST(local_resolve)
{
	static const struct resolve_case cases[] = {
		{"Europe/Rome", "2024-07-01T12:00:00", 1, "2024-07-01T10:00:00Z", NULL},
		{"Europe/Rome", "2024-03-31T01:59:59", 1, "2024-03-31T00:59:59Z", NULL},
		{"Europe/Rome", "2024-03-31T02:00:00", 0, "2024-03-31T01:00:00Z", NULL},
		{"Europe/Rome", "2024-03-31T02:30:00", 0, "2024-03-31T01:00:00Z", NULL},
		{"Europe/Rome", "2024-03-31T03:00:00", 1, "2024-03-31T01:00:00Z", NULL},
		{"Europe/Rome", "2024-10-27T01:59:59", 1, "2024-10-26T23:59:59Z", NULL},
		{"Europe/Rome", "2024-10-27T02:00:00", 2, "2024-10-27T00:00:00Z",
		 "2024-10-27T01:00:00Z"},
		{"Europe/Rome", "2024-10-27T02:59:59", 2, "2024-10-27T00:59:59Z",
		 "2024-10-27T01:59:59Z"},
		{"Europe/Rome", "2024-10-27T03:00:00", 1, "2024-10-27T02:00:00Z", NULL},
		{"Europe/Rome", "2090-03-26T02:15:00", 0, "2090-03-26T01:00:00Z", NULL},
		{"Europe/Rome", "2090-10-29T02:15:00", 2, "2090-10-29T00:15:00Z",
		 "2090-10-29T01:15:00Z"},
		{"America/New_York", "2024-03-10T02:30:00", 0, "2024-03-10T07:00:00Z", NULL},
		{"America/New_York", "2024-11-03T01:30:00", 2, "2024-11-03T05:30:00Z",
		 "2024-11-03T06:30:00Z"},
		{"America/Sao_Paulo", "2018-11-04T00:00:00", 0, "2018-11-04T03:00:00Z", NULL},
		{"America/Sao_Paulo", "2018-11-04T00:59:59", 0, "2018-11-04T03:00:00Z", NULL},
		{"America/Sao_Paulo", "2018-11-04T01:00:00", 1, "2018-11-04T03:00:00Z", NULL},
		{"America/Sao_Paulo", "2019-02-16T23:30:00", 2, "2019-02-17T01:30:00Z",
		 "2019-02-17T02:30:00Z"},
		{"America/Sao_Paulo", "2019-02-17T00:00:00", 1, "2019-02-17T03:00:00Z", NULL},
		{"America/Sao_Paulo", "2019-11-03T00:00:00", 1, "2019-11-03T03:00:00Z", NULL},
		{"Africa/Cairo", "2024-04-26T00:00:00", 0, "2024-04-25T22:00:00Z", NULL},
		{"Africa/Cairo", "2024-10-31T23:00:00", 2, "2024-10-31T20:00:00Z",
		 "2024-10-31T21:00:00Z"},
		{"Africa/Cairo", "2024-11-01T00:00:00", 1, "2024-10-31T22:00:00Z", NULL},
		{"Australia/Lord_Howe", "2024-10-06T02:15:00", 0, "2024-10-05T15:30:00Z", NULL},
		{"UTC", "2024-03-31T02:30:00", 1, "2024-03-31T02:30:00Z", NULL},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		const struct resolve_case *c = &cases[i];
		const struct tz *z = load_or_fail(c->zone);
		if (!z)
			continue;
		int64_t out[2] = {0, 0};
		int n = tz_local_resolve(z, ts(c->wall), out);
		if (n != c->n || out[0] != ts(c->first) || (c->second && out[1] != ts(c->second)))
			T_FAIL_("%s %s: got n=%d %lld %lld, want n=%d %s %s", c->zone, c->wall, n,
				(long long)out[0], (long long)out[1], c->n, c->first,
				c->second ? c->second : "");
		CHECK_INT(tz_local_first(z, ts(c->wall)), ts(c->first));
	}
}

TEST(wall_reached)
{
	const struct tz *z;
	char *err;
	REQUIRE(tz_load("America/New_York", &z, &err) == 0);
	/* Ordinary instant: its own wall time. */
	CHECK_INT(tz_wall_reached(z, ts("2024-07-01T12:00:00Z")), ts("2024-07-01T08:00:00"));
	/* Second pass of the 2024-11-03 overlap: the clock already showed 01:59:59. */
	CHECK_INT(tz_wall_reached(z, ts("2024-11-03T06:10:00Z")), ts("2024-11-03T01:59:59"));
	CHECK_INT(tz_wall_reached(z, ts("2024-11-03T06:59:59Z")), ts("2024-11-03T01:59:59"));
	CHECK_INT(tz_wall_reached(z, ts("2024-11-03T07:00:00Z")), ts("2024-11-03T02:00:00"));
	/* Just before a gap, and at it. */
	CHECK_INT(tz_wall_reached(z, ts("2024-03-10T06:59:59Z")), ts("2024-03-10T01:59:59"));
	CHECK_INT(tz_wall_reached(z, ts("2024-03-10T07:00:00Z")), ts("2024-03-10T03:00:00"));
}

/* Writes a minimal TZif v2 file: no transitions, one type, the given footer. */
static void write_tzif(const char *path, int32_t utoff, const char *footer)
{
	struct buf b;
	buf_init(&b, 4096);
	for (int part = 0; part < 2; part++) {
		unsigned char hdr[44] = {'T', 'Z', 'i', 'f', '2'};
		hdr[39] = 1; /* typecnt */
		hdr[43] = 4; /* charcnt */
		buf_append(&b, hdr, sizeof hdr);
		unsigned char type[6] = {(unsigned char)((uint32_t)utoff >> 24),
					 (unsigned char)((uint32_t)utoff >> 16),
					 (unsigned char)((uint32_t)utoff >> 8),
					 (unsigned char)utoff,
					 0,
					 0};
		buf_append(&b, type, sizeof type);
		buf_append(&b, "XXX", 4);
	}
	buf_appendf(&b, "\n%s\n", footer);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || write(fd, b.data, b.len) != (ssize_t)b.len)
		abort();
	close(fd);
	buf_free(&b);
}

TEST(posix_rules)
{
	/* Expectations from glibc: TZ='<rule>' date -d @N '+%z'. */
	static const struct {
		const char *name, *footer, *at;
		long offset;
	} cases[] = {
		/* Jn never counts Feb 29: J60 is March 1 every year */
		{"J", "XXX3YYY,J60/2,J300/2", "2024-02-29T05:00:00Z", -10800},
		{"J", "XXX3YYY,J60/2,J300/2", "2023-03-01T04:59:59Z", -10800},
		{"J", "XXX3YYY,J60/2,J300/2", "2023-03-01T05:00:00Z", -7200},
		{"J", "XXX3YYY,J60/2,J300/2", "2024-12-31T12:00:00Z", -10800},
		/* n counts from 0 and includes Feb 29: 59 is Feb 29 in 2024 */
		{"N", "XXX3YYY,59/2,299/2", "2024-02-29T04:59:59Z", -10800},
		{"N", "XXX3YYY,59/2,299/2", "2024-02-29T05:00:00Z", -7200},
		{"N", "XXX3YYY,59/2,299/2", "2023-03-01T05:00:00Z", -7200},
		/* DST all year (RFC 8536 example) */
		{"AllYear", "EST5EDT,0/0,J365/25", "2024-03-10T04:00:00Z", -14400},
		{"AllYear", "EST5EDT,0/0,J365/25", "2024-12-31T12:00:00Z", -14400},
		{"AllYear", "EST5EDT,0/0,J365/25", "2025-01-01T04:30:00Z", -14400},
		/* negative transition hour: the day before at 23:00 */
		{"Neg", "XXX3YYY,M3.2.0/-1,M11.1.0/-1", "2024-03-10T01:59:59Z", -10800},
		{"Neg", "XXX3YYY,M3.2.0/-1,M11.1.0/-1", "2024-03-10T02:00:00Z", -7200},
		/* DST without a rule: the US default M3.2.0,M11.1.0 */
		{"Default", "XXX3YYY", "2024-03-10T04:59:59Z", -10800},
		{"Default", "XXX3YYY", "2024-03-10T05:00:00Z", -7200},
		/* angle-bracket names and minutes */
		{"Angle", "<+0330>-3:30<+0430>,J79/24,J263/24", "2024-01-01T00:00:00Z", 12600},
		{"Angle", "<+0330>-3:30<+0430>,J79/24,J263/24", "2024-07-01T00:00:00Z", 16200},
	};
	char dir[] = "/tmp/relay-tz-test-XXXXXX";
	REQUIRE(mkdtemp(dir) != NULL);
	char *sub = xasprintf("%s/Test", dir);
	mkdir(sub, 0755);
	tz_set_root_for_tests(dir);
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		char *name = xasprintf("Test/%s", cases[i].name);
		char *path = xasprintf("%s/%s", dir, name);
		write_tzif(path, 0, cases[i].footer);
		const struct tz *z;
		char *err;
		if (tz_load(name, &z, &err) != 0) {
			T_FAIL_("%s: %s", cases[i].footer, err);
			free(err);
		} else if (tz_offset(z, ts(cases[i].at)) != cases[i].offset) {
			T_FAIL_("%s at %s: got %ld want %ld", cases[i].footer, cases[i].at,
				tz_offset(z, ts(cases[i].at)), cases[i].offset);
		}
		free(name);
		free(path);
	}
	/* Malformed files are errors naming the zone. */
	char *bad = xasprintf("%s/Test/BadFooter", dir);
	write_tzif(bad, 0, "XXX3YYY,M13.1.0,M11.1.0");
	const struct tz *z;
	char *err = NULL;
	CHECK_INT(tz_load("Test/BadFooter", &z, &err), -1);
	CHECK_STR(err, "time zone Test/BadFooter: malformed tz data (bad TZ footer)");
	free(err);
	char *trunc = xasprintf("%s/Test/Truncated", dir);
	int fd = open(trunc, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	REQUIRE(fd >= 0);
	CHECK(write(fd, "TZif2\0\0\0", 8) == 8);
	close(fd);
	err = NULL;
	CHECK_INT(tz_load("Test/Truncated", &z, &err), -1);
	CHECK_STR(err, "time zone Test/Truncated: malformed tz data (not a TZif file)");
	free(err);
	/* The override is a test hook only; the real database comes back. */
	tz_set_root_for_tests(NULL);
	err = NULL;
	CHECK_INT(tz_load("Test/J", &z, &err), -1);
	free(err);
	CHECK_INT(tz_load("Europe/Rome", &z, &err), 0);
	unlink(bad);
	unlink(trunc);
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		char *path = xasprintf("%s/Test/%s", dir, cases[i].name);
		unlink(path);
		free(path);
	}
	rmdir(sub);
	rmdir(dir);
	free(bad);
	free(trunc);
	free(sub);
}

/* A TZif v1 image: n transitions gap seconds apart from base, alternating
 * between UTC+1 (type 0) and UTC-1 (type 1), zero-padded to at least pad
 * bytes (a v1 reader ignores what follows the data block). */
static void tzif_v1(struct buf *b, int n, int64_t base, int64_t gap, size_t pad)
{
	unsigned char hdr[44] = {'T', 'Z', 'i', 'f'};
	hdr[34] = (unsigned char)(n >> 8);
	hdr[35] = (unsigned char)n; /* timecnt */
	hdr[39] = 2;		    /* typecnt */
	hdr[43] = 8;		    /* charcnt */
	buf_append(b, hdr, sizeof hdr);
	for (int i = 0; i < n; i++) {
		uint32_t t = (uint32_t)(base + i * gap);
		unsigned char be[4] = {t >> 24, t >> 16, t >> 8, t};
		buf_append(b, be, 4);
	}
	for (int i = 0; i < n; i++) {
		unsigned char idx = (unsigned char)(i % 2);
		buf_append(b, &idx, 1);
	}
	static const unsigned char types[12] = {0,    0,    0x0e, 0x10, 0, 0,
						0xff, 0xff, 0xf1, 0xf0, 1, 4};
	buf_append(b, types, sizeof types);
	buf_append(b, "AAA\0BBB\0", 8);
	while (b->len < pad)
		buf_append(b, "\0", 1);
}

static void write_file(const char *path, const struct buf *b)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || write(fd, b->data, b->len) != (ssize_t)b->len)
		abort();
	close(fd);
}

TEST(file_size_bound)
{
	/* TZ_FILE_MAX bytes load; one more is refused as too large, not as an
	 * unknown zone. */
	char dir[] = "/tmp/relay-tz-test-XXXXXX";
	REQUIRE(mkdtemp(dir) != NULL);
	char *sub = xasprintf("%s/Test", dir);
	mkdir(sub, 0755);
	tz_set_root_for_tests(dir);
	struct buf b;
	buf_init(&b, TZ_FILE_MAX + 1);
	tzif_v1(&b, 2, 1700000000, 86400 * 30, TZ_FILE_MAX);
	char *at = xasprintf("%s/AtBound", sub), *over = xasprintf("%s/OverBound", sub);
	write_file(at, &b);
	buf_append(&b, "\0", 1);
	write_file(over, &b);
	const struct tz *z;
	char *err = NULL;
	CHECK_INT(tz_load("Test/AtBound", &z, &err), 0);
	if (err)
		T_FAIL_("%s", err);
	free(err);
	err = NULL;
	CHECK_INT(tz_load("Test/OverBound", &z, &err), -1);
	CHECK_STR(err, "time zone Test/OverBound: tz data larger than 1048576 bytes");
	free(err);
	/* The same bound on a buffer. */
	struct tz *pz = tz_parse(b.data, b.len, "Test/Buffer", &err);
	CHECK(pz == NULL);
	CHECK_STR(err, "time zone Test/Buffer: tz data larger than 1048576 bytes");
	free(err);
	pz = tz_parse(b.data, TZ_FILE_MAX, "Test/Buffer", &err);
	REQUIRE(pz != NULL);
	CHECK(err == NULL);
	CHECK_STR(tz_name(pz), "Test/Buffer");
	CHECK_INT(tz_offset(pz, 1700000000 + 86400 * 30 - 1), 3600);
	CHECK_INT(tz_offset(pz, 1700000000 + 86400 * 30), -3600);
	tz_free(pz);
	tz_set_root_for_tests(NULL);
	unlink(at);
	unlink(over);
	rmdir(sub);
	rmdir(dir);
	free(at);
	free(over);
	free(sub);
	buf_free(&b);
}

TEST(dense_transitions)
{
	/* The wall-time walks visit each period within 26 h of a wall time; a
	 * file with more than TZ_WINDOW_TRANS (16) transitions in 52 h is
	 * refused (300 of them 100 s apart made tz_local_resolve report a gap
	 * and an instant showing an earlier wall time). */
	struct buf b;
	char *err = NULL;
	buf_init(&b, 1 << 20);
	tzif_v1(&b, 300, 1700000000, 100, 0);
	struct tz *dense = tz_parse(b.data, b.len, "Test/Dense", &err);
	CHECK(dense == NULL);
	tz_free(dense);
	CHECK_STR(err, "time zone Test/Dense: malformed tz data (more than 16 transitions within "
		       "52 hours)");
	free(err);
	buf_reset(&b);
	tzif_v1(&b, 17, 1700000000, (2 * 26 * 3600 + 2) / 16, 0);
	dense = tz_parse(b.data, b.len, "Test/Dense", &err);
	CHECK(dense == NULL);
	tz_free(dense);
	free(err);

	/* 17 transitions spread one second wider, and 16 only 100 s apart, are
	 * accepted, and every wall-time answer around them is exact. */
	buf_reset(&b);
	tzif_v1(&b, 17, 1700000000, (2 * 26 * 3600 + 2) / 16 + 1, 0);
	struct tz *wide = tz_parse(b.data, b.len, "Test/Wide", &err);
	CHECK(wide != NULL);
	tz_free(wide);
	free(err);
	buf_reset(&b);
	tzif_v1(&b, 16, 1700000000, 100, 0);
	struct tz *z = tz_parse(b.data, b.len, "Test/Dense16", &err);
	REQUIRE(z != NULL);
	int64_t prev = INT64_MIN;
	for (int64_t w = 1700000000 - 4 * 3600; w < 1700000000 + 4 * 3600; w += 7) {
		int64_t f = tz_local_first(z, w), out[2];
		/* The first instant showing w or later: it does, the one before not. */
		if (f + tz_offset(z, f) < w || f - 1 + tz_offset(z, f - 1) >= w || f < prev)
			T_FAIL_("tz_local_first(%lld) = %lld", (long long)w, (long long)f);
		prev = f;
		int n = tz_local_resolve(z, w, out);
		for (int i = 0; i < n; i++)
			if (out[i] + tz_offset(z, out[i]) != w)
				T_FAIL_("tz_local_resolve(%lld)[%d] = %lld", (long long)w, i,
					(long long)out[i]);
		if (n == 0 && out[0] != f)
			T_FAIL_("tz_local_resolve(%lld) gap answer %lld", (long long)w,
				(long long)out[0]);
		int64_t t = w - 3600;
		int64_t r = tz_wall_reached(z, t);
		if (tz_local_first(z, r) > t || tz_local_first(z, r + 1) <= t)
			T_FAIL_("tz_wall_reached(%lld) = %lld", (long long)t, (long long)r);
	}
	tz_free(z);
	buf_free(&b);
}

static void *load_many(void *arg)
{
	static const char *const zones[] = {"Europe/Paris", "Asia/Tokyo", "America/Chicago",
					    "Australia/Sydney", "Pacific/Auckland"};
	long bad = 0;
	for (int i = 0; i < 200; i++) {
		const struct tz *z;
		char *err;
		if (tz_load(zones[i % 5], &z, &err) != 0) {
			free(err);
			bad++;
			continue;
		}
		if (tz_offset(z, 1719792000) == 12345)
			bad++;
	}
	return (void *)bad;
}

TEST(threads)
{
	pthread_t th[8];
	for (int i = 0; i < 8; i++)
		REQUIRE(pthread_create(&th[i], NULL, load_many, NULL) == 0);
	for (int i = 0; i < 8; i++) {
		void *r;
		pthread_join(th[i], &r);
		CHECK(r == NULL);
	}
	const struct tz *a, *b;
	char *err;
	REQUIRE(tz_load("Asia/Tokyo", &a, &err) == 0);
	REQUIRE(tz_load("Asia/Tokyo", &b, &err) == 0);
	CHECK(a == b);
	CHECK_INT(tz_offset(a, 1719792000), 32400);
}

T_MAIN(T_CASE(calendar), T_CASE(load_names), T_CASE(names_and_cache), T_CASE(offsets),
       T_CASE(localtime_fields), T_CASE(local_resolve), T_CASE(wall_reached), T_CASE(posix_rules),
       T_CASE(threads), T_CASE(file_size_bound), T_CASE(dense_transitions))
