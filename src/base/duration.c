#include "base/duration.h"

#include <stdbool.h>
#include <string.h>

static const struct {
	const char *name;
	uint64_t ns;
} units[] = {
	{"ns", 1},
	{"us", NS_PER_US},
	{"\xc2\xb5s", NS_PER_US}, /* U+00B5 micro sign */
	{"\xce\xbcs", NS_PER_US}, /* U+03BC Greek mu */
	{"ms", NS_PER_MS},
	{"s", NS_PER_SEC},
	{"m", NS_PER_MIN},
	{"h", NS_PER_HOUR},
};

#define OVERFLOW_LIMIT ((uint64_t)1 << 63)

/* Leading decimal digits as uint64; -1 on overflow. */
static int leading_int(const char *s, size_t n, size_t *used, uint64_t *out)
{
	uint64_t x = 0;
	size_t i = 0;
	for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
		if (x > OVERFLOW_LIMIT / 10)
			return -1;
		x = x * 10 + (uint64_t)(s[i] - '0');
		if (x > OVERFLOW_LIMIT)
			return -1;
	}
	*used = i;
	*out = x;
	return 0;
}

/* Fraction digits: value and scale, ignoring digits beyond precision. */
static void leading_fraction(const char *s, size_t n, size_t *used, uint64_t *out, double *scale)
{
	uint64_t x = 0;
	double sc = 1;
	bool overflow = false;
	size_t i = 0;
	for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
		if (overflow)
			continue;
		if (x > (UINT64_C(1) << 63) / 10) {
			overflow = true;
			continue;
		}
		uint64_t y = x * 10 + (uint64_t)(s[i] - '0');
		if (y > OVERFLOW_LIMIT) {
			overflow = true;
			continue;
		}
		x = y;
		sc *= 10;
	}
	*used = i;
	*out = x;
	*scale = sc;
}

int duration_parse_n(const char *s, size_t n, int64_t *out)
{
	uint64_t d = 0;
	bool neg = false;
	size_t i = 0;

	if (i < n && (s[i] == '-' || s[i] == '+')) {
		neg = s[i] == '-';
		i++;
	}
	if (n - i == 1 && s[i] == '0') {
		*out = 0;
		return 0;
	}
	if (i == n)
		return -1;
	while (i < n) {
		uint64_t v = 0, f = 0;
		double scale = 1;
		size_t used;

		if (!(s[i] == '.' || (s[i] >= '0' && s[i] <= '9')))
			return -1;
		if (leading_int(s + i, n - i, &used, &v) < 0)
			return -1;
		bool pre = used > 0;
		i += used;
		bool post = false;
		if (i < n && s[i] == '.') {
			i++;
			leading_fraction(s + i, n - i, &used, &f, &scale);
			post = used > 0;
			i += used;
		}
		if (!pre && !post)
			return -1;
		size_t u = i;
		while (u < n && s[u] != '.' && !(s[u] >= '0' && s[u] <= '9'))
			u++;
		if (u == i)
			return -1; /* missing unit */
		uint64_t unit = 0;
		for (size_t k = 0; k < sizeof units / sizeof units[0]; k++) {
			if (strlen(units[k].name) == u - i &&
			    memcmp(units[k].name, s + i, u - i) == 0) {
				unit = units[k].ns;
				break;
			}
		}
		if (!unit)
			return -1;
		i = u;
		if (v > OVERFLOW_LIMIT / unit)
			return -1;
		v *= unit;
		if (f > 0) {
			v += (uint64_t)((double)f * ((double)unit / scale));
			if (v > OVERFLOW_LIMIT)
				return -1;
		}
		d += v;
		if (d > OVERFLOW_LIMIT)
			return -1;
	}
	if (neg) {
		*out = d == OVERFLOW_LIMIT ? INT64_MIN : -(int64_t)d;
		return 0;
	}
	if (d > OVERFLOW_LIMIT - 1)
		return -1;
	*out = (int64_t)d;
	return 0;
}

int duration_parse(const char *s, int64_t *out)
{
	return duration_parse_n(s, strlen(s), out);
}

/* Go's fmtFrac: writes v's fraction of prec digits backwards into buf
 * ending at w, omitting trailing zeros; returns the new w and v/10^prec. */
static size_t fmt_frac(char *buf, size_t w, uint64_t v, int prec, uint64_t *nv)
{
	bool print = false;
	for (int i = 0; i < prec; i++) {
		int digit = (int)(v % 10);
		print = print || digit != 0;
		if (print) {
			buf[--w] = (char)('0' + digit);
		}
		v /= 10;
	}
	if (print)
		buf[--w] = '.';
	*nv = v;
	return w;
}

static size_t fmt_int(char *buf, size_t w, uint64_t v)
{
	if (v == 0) {
		buf[--w] = '0';
	} else {
		while (v > 0) {
			buf[--w] = (char)('0' + v % 10);
			v /= 10;
		}
	}
	return w;
}

char *duration_format(int64_t d, char out[DURATION_STR_MAX])
{
	char buf[DURATION_STR_MAX];
	size_t w = sizeof buf;
	uint64_t u = d < 0 ? (uint64_t)0 - (uint64_t)d : (uint64_t)d;
	bool neg = d < 0;

	if (u < (uint64_t)NS_PER_SEC) {
		int prec = 0;
		buf[--w] = 's';
		w--;
		if (u == 0) {
			memcpy(out, "0s", 3);
			return out;
		} else if (u < (uint64_t)NS_PER_US) {
			prec = 0;
			buf[w] = 'n';
		} else if (u < (uint64_t)NS_PER_MS) {
			prec = 3;
			/* U+00B5 'µ' micro sign, two bytes */
			w--;
			memcpy(&buf[w], "\xc2\xb5", 2);
		} else {
			prec = 6;
			buf[w] = 'm';
		}
		w = fmt_frac(buf, w, u, prec, &u);
		w = fmt_int(buf, w, u);
	} else {
		buf[--w] = 's';
		w = fmt_frac(buf, w, u, 9, &u);
		w = fmt_int(buf, w, u % 60);
		u /= 60;
		if (u > 0) {
			buf[--w] = 'm';
			w = fmt_int(buf, w, u % 60);
			u /= 60;
			if (u > 0) {
				buf[--w] = 'h';
				w = fmt_int(buf, w, u);
			}
		}
	}
	if (neg)
		buf[--w] = '-';
	memcpy(out, buf + w, sizeof buf - w);
	out[sizeof buf - w] = '\0';
	return out;
}
