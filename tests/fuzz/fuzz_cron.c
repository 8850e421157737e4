/*
 * libFuzzer target: arbitrary bytes as a cron expression. Valid expressions
 * are described and evaluated a few times in UTC and in a DST zone, from an
 * instant taken from the input, so the search and the zone arithmetic see
 * arbitrary starting points too.
 *
 * The answers are checked against a slow reference written here from the
 * grammar in cron.h: its own parser (which must accept exactly what
 * cron_parse accepts) and a matcher that tests one wall-clock time against
 * the fields. Stepping second by second (6 fields) or minute by minute (5
 * fields) over a small window after the starting instant, every matching
 * time must be exactly the chain cron_next returns, in UTC and in
 * Asia/Kolkata (a fixed +05:30 since 1945, so wall = instant + 19800).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "check.h"
#include "model/cron.h"
#include "base/util.h"

/* ---- the reference -------------------------------------------------- */

struct ref {
	uint64_t set[6]; /* second, minute, hour, day-of-month, month, day-of-week */
	int dom_any, dow_any;
};

static const struct {
	int min, max, top;
	const char *names; /* three letters each, value = index + base */
	int base;
} spec[6] = {
	{0, 59, 59, NULL, 0},
	{0, 59, 59, NULL, 0},
	{0, 23, 23, NULL, 0},
	{1, 31, 31, NULL, 0},
	{1, 12, 12, "JANFEBMARAPRMAYJUNJULAUGSEPOCTNOVDEC", 1},
	{0, 7, 6, "SUNMONTUEWEDTHUFRISAT", 0},
};

static int space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* A value: decimal digits, or a three-letter name. *named says which. */
static int ref_value(int f, const char *s, size_t n, int *out, int *named)
{
	*named = 0;
	if (n == 0)
		return -1;
	if (s[0] >= '0' && s[0] <= '9') {
		long v = 0;
		for (size_t i = 0; i < n; i++) {
			if (s[i] < '0' || s[i] > '9')
				return -1;
			v = v > 1000 ? v : v * 10 + (s[i] - '0');
		}
		if (v < spec[f].min || v > spec[f].max)
			return -1;
		*out = (int)v;
		return 0;
	}
	if (!spec[f].names || n != 3)
		return -1;
	for (int i = 0; spec[f].names[3 * i]; i++)
		if (strncasecmp(s, spec[f].names + 3 * i, 3) == 0) {
			*out = i + spec[f].base;
			*named = 1;
			return 0;
		}
	return -1;
}

/* One item: "*" or "?" (day fields), a value or "a-b", optionally "/step". */
static int ref_item(int f, const char *s, size_t n, uint64_t *set, int *wild)
{
	size_t rn = n;
	int step = 1;
	const char *slash = memchr(s, '/', n);
	if (slash) {
		rn = (size_t)(slash - s);
		size_t sn = n - rn - 1;
		long v = 0;
		if (sn == 0)
			return -1;
		for (size_t i = 0; i < sn; i++) {
			if (slash[1 + i] < '0' || slash[1 + i] > '9')
				return -1;
			v = v > 1000 ? v : v * 10 + (slash[1 + i] - '0');
		}
		if (v < 1 || v > spec[f].top - spec[f].min + 1)
			return -1;
		step = (int)v;
	}
	int lo, hi, named;
	*wild = 0;
	if (rn == 1 && (s[0] == '*' || (s[0] == '?' && (f == 3 || f == 5)))) {
		lo = spec[f].min;
		hi = spec[f].top;
		*wild = step == 1;
	} else {
		const char *dash = memchr(s, '-', rn);
		size_t ln = dash ? (size_t)(dash - s) : rn;
		if (ref_value(f, s, ln, &lo, &named) < 0)
			return -1;
		if (dash) {
			if (ref_value(f, dash + 1, rn - ln - 1, &hi, &named) < 0)
				return -1;
			if (f == 5 && named && hi == 0)
				hi = 7; /* "...-SUN" ends the week */
			if (hi < lo)
				return -1;
		} else {
			hi = slash ? spec[f].top : lo;
			if (hi < lo)
				hi = lo;
		}
	}
	for (int v = lo; v <= hi; v += step)
		*set |= (uint64_t)1 << (f == 5 && v == 7 ? 0 : v);
	return 0;
}

static int ref_field(int f, const char *s, size_t n, struct ref *r)
{
	int items = 0, wild = 0;
	for (size_t i = 0;;) {
		size_t j = i;
		while (j < n && s[j] != ',')
			j++;
		if (j == i || ref_item(f, s + i, j - i, &r->set[f], &wild) < 0)
			return -1;
		items++;
		if (j == n)
			break;
		i = j + 1;
	}
	if (f == 3)
		r->dom_any = items == 1 && wild;
	if (f == 5)
		r->dow_any = items == 1 && wild;
	return 0;
}

static int ref_parse(const char *expr, struct ref *r)
{
	static const char *const desc[][2] = {
		{"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"},
		{"@weekly", "0 0 * * 0"}, {"@daily", "0 0 * * *"},    {"@midnight", "0 0 * * *"},
		{"@hourly", "0 * * * *"},
	};
	memset(r, 0, sizeof *r);
	if (strlen(expr) > CRON_EXPR_MAX)
		return -1;
	while (space(*expr))
		expr++;
	size_t n = strlen(expr);
	while (n && space(expr[n - 1]))
		n--;
	if (n && expr[0] == '@') {
		for (size_t i = 0; i < sizeof desc / sizeof desc[0]; i++)
			if (strlen(desc[i][0]) == n && strncasecmp(expr, desc[i][0], n) == 0)
				return ref_parse(desc[i][1], r);
		return -1;
	}
	const char *tok[7];
	size_t len[7];
	int nf = 0;
	for (size_t i = 0; i < n;) {
		while (i < n && space(expr[i]))
			i++;
		size_t b = i;
		while (i < n && !space(expr[i]))
			i++;
		if (nf == 7)
			return -1;
		tok[nf] = expr + b;
		len[nf++] = i - b;
	}
	if (nf != 5 && nf != 6)
		return -1;
	if (nf == 5)
		r->set[0] = 1; /* second 0 */
	for (int k = 0; k < nf; k++)
		if (ref_field(k + 6 - nf, tok[k], len[k], r) < 0)
			return -1;
	/* Rejected when it can never fire: restricted days that no selected
	 * month has (29 February counts). */
	if (!r->dom_any && r->dow_any) {
		static const int mdays[13] = {0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
		int some = 0;
		for (int m = 1; m <= 12; m++)
			if (r->set[4] >> m & 1)
				for (int d = 1; d <= mdays[m]; d++)
					some |= (int)(r->set[3] >> d & 1);
		if (!some)
			return -1;
	}
	return 0;
}

/* Does the wall-clock time w (seconds, read like Unix time) match? */
static int ref_match(const struct ref *r, int64_t w)
{
	time_t tt = (time_t)w;
	struct tm tm;
	gmtime_r(&tt, &tm);
	if (!(r->set[0] >> tm.tm_sec & 1) || !(r->set[1] >> tm.tm_min & 1) ||
	    !(r->set[2] >> tm.tm_hour & 1) || !(r->set[4] >> (tm.tm_mon + 1) & 1))
		return 0;
	int dom = (int)(r->set[3] >> tm.tm_mday & 1), dow = (int)(r->set[5] >> tm.tm_wday & 1);
	return r->dom_any || r->dow_any ? dom && dow : dom || dow;
}

/* Walks (after, after + steps * unit] on the wall clock of a zone offset
 * `off` seconds from UTC, and checks cron_next's chain hits exactly the
 * matching instants. */
static void ref_compare(const struct cron *c, const struct ref *r, const struct tz *z, long off,
			int64_t after, int unit, int steps, const char *expr)
{
	int64_t t = after - (after + off) % unit + unit; /* first candidate */
	int64_t want_from = after;
	int64_t got = cron_next(c, z, after);
	for (int i = 0; i < steps; i++, t += unit) {
		if (!ref_match(r, t + off))
			continue;
		CHECK(got == t,
		      "cron %s in %s after %lld: next is %lld, the reference says %lld "
		      "(%d-s steps)",
		      expr, z ? tz_name(z) : "UTC", (long long)want_from, (long long)got,
		      (long long)t, unit);
		want_from = t;
		got = cron_next(c, z, t);
	}
	CHECK(got == -1 || got >= t,
	      "cron %s in %s after %lld: next is %lld, the reference finds nothing before %lld",
	      expr, z ? tz_name(z) : "UTC", (long long)want_from, (long long)got, (long long)t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const zones[] = {"Europe/Rome", "America/Sao_Paulo", "Africa/Cairo",
					    "Australia/Lord_Howe"};
	if (size > 2 * CRON_EXPR_MAX)
		return 0;
	/* The first 8 bytes, when present, pick the starting instant. */
	uint64_t seed = 0;
	if (size > 8) {
		memcpy(&seed, data, 8);
		data += 8;
		size -= 8;
	}
	char *expr = xstrndup((const char *)data, size);
	struct cron *c = NULL;
	char *err = NULL;
	struct ref r;
	int ref_ok = ref_parse(expr, &r) == 0;
	if (cron_parse(expr, &c, &err) != 0) {
		CHECK(err && strncmp(err, "cron ", 5) == 0, "cron_parse failed without a message");
		CHECK(!ref_ok, "cron_parse rejects what the grammar allows: %s", err);
		free(err);
		free(expr);
		return 0;
	}
	CHECK(!err, "cron_parse succeeded with a message: %s", err);
	CHECK(ref_ok, "cron_parse accepts \"%s\", which the grammar does not allow", expr);
	char *d = cron_describe(c);
	free(d);

	const struct tz *z;
	char *zerr;
	CHECK(tz_load(zones[seed % 4], &z, &zerr) == 0, "cannot load %s", zones[seed % 4]);
	/* 1970 .. ~2230, plus the edges of the domain. */
	int64_t starts[] = {(int64_t)(seed % 8200000000ULL), 0, 253402300799 - 86400};
	for (size_t s = 0; s < 3; s++) {
		int64_t tu = starts[s], tzt = starts[s];
		for (int i = 0; i < 4; i++) {
			int64_t nu = cron_next(c, NULL, tu);
			int64_t nz = cron_next(c, z, tzt);
			/* A parsed expression always fires within the search window,
			 * except when the window runs past year 9999. */
			CHECK((nu == -1 || nu > tu) && (nz == -1 || nz > tzt),
			      "cron %s: next is not after the start", expr);
			CHECK(!((nu == -1 || nz == -1) && s == 0 && tu < 4102444800),
			      "cron %s: no next occurrence after %lld", expr, (long long)tu);
			if (nu == -1 || nz == -1)
				break;
			tu = nu;
			tzt = nz;
		}
	}

	/* Against the reference, on a window of 2 hours of seconds or 3 days of
	 * minutes; the start is rounded off by the seed's top bits sometimes so
	 * exact boundaries are seen too. */
	const struct tz *kolkata;
	CHECK(tz_load("Asia/Kolkata", &kolkata, &zerr) == 0, "cannot load Asia/Kolkata");
	int64_t start = (int64_t)(seed % 4102444800ULL); /* 1970 .. 2100 */
	if (seed >> 62 == 0)
		start -= start % 3600;
	int unit = cron_has_seconds(c) ? 1 : 60, steps = cron_has_seconds(c) ? 7200 : 4320;
	ref_compare(c, &r, NULL, 0, start, unit, steps, expr);
	if (start > 86400)
		ref_compare(c, &r, kolkata, 19800, start, unit, steps, expr);

	cron_free(c);
	free(expr);
	return 0;
}
