/*
 * libFuzzer target: the TZif reader and the POSIX TZ rule parser (tz.c).
 *
 * An input that starts with "TZif" is a whole zone file (tz_parse, the
 * function tz_load hands a file's bytes to). Any other input is a POSIX TZ
 * footer ("CET-1CEST,M3.5.0,M10.5.0/3"), wrapped here in a minimal v2 file
 * with no transitions, so the rule alone answers every query.
 *
 * Besides crashes, leaks and UB, a zone that parses must answer every query
 * sanely at instants from the far past to the far future, at and around its
 * own transitions and at instants taken from the input:
 *
 * - offsets stay within RFC 8536's bound (-89999..93599 s, so within 26 h);
 * - tz_localtime's fields are in range and agree with tz_offset;
 * - tz_local_resolve reports at most two instants, ascending, each showing
 *   the asked wall time (or, for a gap, tz_local_first's answer);
 * - tz_local_first(w) is the first instant whose wall time is >= w: that
 *   instant shows w or later, the one before it shows less, and it never
 *   decreases as w grows;
 * - tz_local_first(w) > t exactly when w > tz_wall_reached(t) (tz.h).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "base/tz.h"
#include "base/util.h"

/* RFC 8536 3.2: UT offsets lie in -89999..93599 seconds. */
#define OFF_MIN (-89999)
#define OFF_MAX 93599
/* Queries stay inside the domain tz.c promises exact answers for (it clamps
 * to about +-100,000 years); wall times are kept a day further in. */
#define T_LIMIT ((int64_t)3155760000000)
#define W_LIMIT (T_LIMIT - 2 * 86400)

/* A v2 file with no transitions, one type (UTC, "UTC") and footer f[0..n). */
static void wrap_footer(const uint8_t *f, size_t n, struct buf *b)
{
	for (int part = 0; part < 2; part++) {
		unsigned char hdr[44] = {'T', 'Z', 'i', 'f', '2'};
		hdr[39] = 1; /* typecnt */
		hdr[43] = 4; /* charcnt */
		buf_append(b, hdr, sizeof hdr);
		static const unsigned char type[6] = {0, 0, 0, 0, 0, 0};
		buf_append(b, type, sizeof type);
		buf_append(b, "UTC", 4);
	}
	buf_append(b, "\n", 1);
	buf_append(b, f, n);
	buf_append(b, "\n", 1);
}

static int64_t wall_at(const struct tz *z, int64_t t)
{
	return t + tz_offset(z, t);
}

static void check_instant(const struct tz *z, int64_t t)
{
	long off = tz_offset(z, t);
	CHECK(off >= OFF_MIN && off <= OFF_MAX, "offset %ld at %lld is out of range", off,
	      (long long)t);
	struct tz_tm tm;
	tz_localtime(z, t, &tm);
	CHECK(tm.offset == off, "localtime offset %ld != tz_offset %ld at %lld", tm.offset, off,
	      (long long)t);
	CHECK(tm.mon >= 1 && tm.mon <= 12 && tm.mday >= 1 &&
		      tm.mday <= tz_days_in_month(tm.year, tm.mon) && tm.hour >= 0 &&
		      tm.hour < 24 && tm.min >= 0 && tm.min < 60 && tm.sec >= 0 && tm.sec < 60 &&
		      tm.wday >= 0 && tm.wday < 7 && tm.yday >= 0 && tm.yday < 366 &&
		      (tm.isdst == 0 || tm.isdst == 1),
	      "localtime fields out of range at %lld: %lld-%d-%d %d:%d:%d wday %d yday %d",
	      (long long)t, (long long)tm.year, tm.mon, tm.mday, tm.hour, tm.min, tm.sec, tm.wday,
	      tm.yday);
	CHECK(tm.abbr != NULL && strlen(tm.abbr) < 4096, "no abbreviation at %lld", (long long)t);
	if (t < -W_LIMIT || t > W_LIMIT)
		return;

	/* The wall time this instant shows, and the one just after it. */
	for (int64_t w = wall_at(z, t); w <= wall_at(z, t) + 1; w++) {
		int64_t out[2];
		int n = tz_local_resolve(z, w, out);
		CHECK(n >= 0 && n <= 2, "tz_local_resolve(%lld) reports %d instants", (long long)w,
		      n);
		for (int i = 0; i < n; i++)
			CHECK(wall_at(z, out[i]) == w,
			      "tz_local_resolve(%lld)[%d] = %lld shows wall %lld", (long long)w, i,
			      (long long)out[i], (long long)wall_at(z, out[i]));
		CHECK(n < 2 || out[0] < out[1], "tz_local_resolve(%lld): %lld, %lld not ascending",
		      (long long)w, (long long)out[0], (long long)out[1]);
		CHECK(n > 0 || wall_at(z, out[0]) > w,
		      "tz_local_resolve(%lld) finds a gap but %lld shows wall %lld", (long long)w,
		      (long long)out[0], (long long)wall_at(z, out[0]));

		int64_t f = tz_local_first(z, w);
		CHECK(wall_at(z, f) >= w && wall_at(z, f - 1) < w,
		      "tz_local_first(%lld) = %lld, which shows %lld (the second before shows "
		      "%lld)",
		      (long long)w, (long long)f, (long long)wall_at(z, f),
		      (long long)wall_at(z, f - 1));
		/* In a gap resolve answers tz_local_first; else that is no later
		 * than the first instant reading w (earlier only when the clock
		 * skipped w and came back to it, in a zone denser than any real
		 * one). */
		CHECK(n > 0 ? f <= out[0] : f == out[0],
		      "tz_local_first(%lld) = %lld, resolve says %lld (%d instants)", (long long)w,
		      (long long)f, (long long)out[0], n);
		CHECK(tz_local_first(z, w + 1) >= f, "tz_local_first decreases after wall %lld",
		      (long long)w);
	}

	int64_t r = tz_wall_reached(z, t);
	CHECK(r >= wall_at(z, t), "tz_wall_reached(%lld) = %lld is below its own wall %lld",
	      (long long)t, (long long)r, (long long)wall_at(z, t));
	CHECK(tz_local_first(z, r) <= t && tz_local_first(z, r + 1) > t,
	      "tz_wall_reached(%lld) = %lld, but tz_local_first(%lld) = %lld and of the next "
	      "second %lld",
	      (long long)t, (long long)r, (long long)r, (long long)tz_local_first(z, r),
	      (long long)tz_local_first(z, r + 1));
}

/* Fixed instants: the domain's edges, the epoch, the 32-bit edges, now-ish
 * and the far future where only the footer rule answers. */
static const int64_t fixed[] = {
	INT64_MIN,     -T_LIMIT - 1,  -T_LIMIT,	  -W_LIMIT,   -62135596800,
	-2147483649LL, -2147483648LL, -1,	  0,	      1,
	2147483647,    2147483648LL,  1719792000, 4102444800, 253402300799,
	W_LIMIT,       T_LIMIT,	      INT64_MAX,
};

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Up to max transition instants of the file's own table (the v2 one when
 * there is one), spread over it: where dense or odd transitions are. Read
 * here from RFC 8536's layout, independently of tz.c. */
static size_t file_instants(const uint8_t *d, size_t n, int64_t *out, size_t max)
{
	if (n < 44)
		return 0;
	size_t off = 44, tsize = 4;
	uint64_t cnt[6];
	for (int i = 0; i < 6; i++)
		cnt[i] = rd32(d + 20 + 4 * i); /* isut isstd leap time type char */
	if (d[4] >= '2') {
		off += cnt[3] * 5 + cnt[4] * 6 + cnt[5] + cnt[2] * 8 + cnt[1] + cnt[0] + 44;
		if (off > n)
			return 0;
		for (int i = 0; i < 6; i++)
			cnt[i] = rd32(d + off - 24 + 4 * i);
		tsize = 8;
	}
	size_t k = 0;
	for (uint64_t i = 0; i < cnt[3] && k < max; i += cnt[3] / max + 1) {
		if (off + (i + 1) * tsize > n)
			break;
		const uint8_t *p = d + off + i * tsize;
		out[k++] = tsize == 8 ? (int64_t)((uint64_t)rd32(p) << 32 | rd32(p + 4))
				      : (int64_t)(int32_t)rd32(p);
	}
	return k;
}

/* The instant t and the edges of the periods in the days after it, found
 * by bisection on the offset (the first 8 of the next three years):
 * transitions, and the footer's generated ones, themselves. */
static void check_from(const struct tz *z, int64_t t)
{
	check_instant(z, t);
	if (t < -W_LIMIT || t > W_LIMIT)
		return;
	int64_t lo = t;
	int edges = 0;
	for (int64_t step = 1; step < 3 * 366 * 86400 && edges < 8; step *= 2) {
		int64_t hi = lo + step;
		if (tz_offset(z, hi) == tz_offset(z, lo))
			continue;
		while (hi - lo > 1) {
			int64_t mid = lo + (hi - lo) / 2;
			if (tz_offset(z, mid) == tz_offset(z, lo))
				lo = mid;
			else
				hi = mid;
		}
		check_instant(z, lo);
		check_instant(z, hi);
		lo = hi;
		step = 1;
		edges++;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct buf wrapped;
	const uint8_t *bytes = data;
	size_t n = size;
	buf_init(&wrapped, TZ_FILE_MAX + 256);
	if (size < 4 || memcmp(data, "TZif", 4) != 0) {
		wrap_footer(data, size, &wrapped);
		bytes = (const uint8_t *)wrapped.data;
		n = wrapped.len;
	}
	char *err = NULL;
	struct tz *z = tz_parse(bytes, n, "Fuzz/Zone", &err);
	if (!z) {
		CHECK(err && strncmp(err, "time zone Fuzz/Zone: ", 21) == 0,
		      "tz_parse failed without a message naming the zone: %s",
		      err ? err : "(null)");
		free(err);
		buf_free(&wrapped);
		return 0;
	}
	CHECK(!err, "tz_parse succeeded with a message: %s", err);
	CHECK(strcmp(tz_name(z), "Fuzz/Zone") == 0, "zone named %s", tz_name(z));

	for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
		check_instant(z, fixed[i]);
	/* Around the file's own transitions, and at instants spread by the
	 * input's bytes. */
	int64_t at[16];
	size_t nat = file_instants(bytes, n, at, 16);
	for (size_t i = 0; i < nat; i++)
		if (at[i] > -T_LIMIT && at[i] < T_LIMIT)
			check_from(z, at[i] - 2);
	uint64_t h = 1469598103934665603ULL;
	for (size_t i = 0; i < size; i++)
		h = (h ^ data[i]) * 1099511628211ULL;
	for (int i = 0; i < 8; i++) {
		h = h * 6364136223846793005ULL + 1442695040888963407ULL;
		/* 1800 .. 2200 mostly, sometimes anywhere in the domain. */
		check_from(z, (i & 3) ? (int64_t)((h >> 1) % 12623040000ULL) - 5364662400
				      : (int64_t)(h % (2 * (uint64_t)T_LIMIT)) - T_LIMIT);
	}
	tz_free(z);
	buf_free(&wrapped);
	return 0;
}
