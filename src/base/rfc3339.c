/*
 * RFC 3339 parsing with the exact acceptance rules of Go's generic layout
 * parser for time.RFC3339 (see rfc3339.h), which is a superset of its fast
 * path: time.Parse tries the strict fast path first and falls back to the
 * layout parser, so the union is what Go accepts.
 */
#include "base/rfc3339.h"

#include <stdbool.h>

#include "base/tz.h" /* the proleptic Gregorian calendar */
#include "base/util.h"

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* Two digits at s[i], s[i+1]; -1 unless both are digits. */
static int two_digits(const char *s, size_t n, size_t i)
{
	if (i + 1 >= n || !is_digit(s[i]) || !is_digit(s[i + 1]))
		return -1;
	return (s[i] - '0') * 10 + (s[i + 1] - '0');
}

/* An optional fraction at s[*i] ('.' or ',' and digits; past the ninth
 * they are ignored) as nanoseconds; *i moves past it. */
static int32_t fraction(const char *s, size_t n, size_t *i)
{
	int32_t frac = 0;
	size_t j = *i;
	if (j + 1 >= n || (s[j] != '.' && s[j] != ',') || !is_digit(s[j + 1]))
		return 0;
	int digits = 0;
	for (j++; j < n && is_digit(s[j]); j++) {
		if (digits < 9) {
			frac = frac * 10 + (s[j] - '0');
			digits++;
		}
	}
	for (; digits < 9; digits++)
		frac *= 10;
	*i = j;
	return frac;
}

/* 'Z' or ±hh:mm at s[*i] (hh <= 24, mm <= 60, Go's range check) into
 * *offset seconds east of UTC; *i moves past it. 0, or -1 when neither. */
static int zone_offset(const char *s, size_t n, size_t *i, int64_t *offset)
{
	size_t j = *i;
	*offset = 0;
	if (j < n && s[j] == 'Z') {
		*i = j + 1;
		return 0;
	}
	if (n - j < 6 || (s[j] != '+' && s[j] != '-') || s[j + 3] != ':')
		return -1;
	int oh = two_digits(s, n, j + 1), om = two_digits(s, n, j + 4);
	if (oh < 0 || om < 0 || oh > 24 || om > 60)
		return -1;
	*offset = (int64_t)(oh * 60 + om) * 60 * (s[j] == '-' ? -1 : 1);
	*i = j + 6;
	return 0;
}

int rfc3339_parse(const char *s, size_t n, int64_t *sec, int32_t *nsec)
{
	size_t i = 0;
	int64_t year = 0;

	if (!s || n < 4)
		return -1;
	for (; i < 4; i++) {
		if (!is_digit(s[i]))
			return -1;
		year = year * 10 + (s[i] - '0');
	}
	if (i >= n || s[i++] != '-')
		return -1;
	int month = two_digits(s, n, i);
	if (month < 1 || month > 12)
		return -1;
	i += 2;
	if (i >= n || s[i++] != '-')
		return -1;
	int day = two_digits(s, n, i);
	if (day < 1 || day > tz_days_in_month(year, month))
		return -1;
	i += 2;
	if (i >= n || s[i++] != 'T')
		return -1;
	/* Go's stdHour takes one or two digits */
	if (i >= n || !is_digit(s[i]))
		return -1;
	int hour = s[i++] - '0';
	if (i < n && is_digit(s[i]))
		hour = hour * 10 + (s[i++] - '0');
	if (hour > 23)
		return -1;
	if (i >= n || s[i++] != ':')
		return -1;
	int min = two_digits(s, n, i);
	if (min < 0 || min > 59)
		return -1;
	i += 2;
	if (i >= n || s[i++] != ':')
		return -1;
	int secs = two_digits(s, n, i);
	if (secs < 0 || secs > 59)
		return -1;
	i += 2;

	int32_t frac = fraction(s, n, &i);
	int64_t offset;
	if (zone_offset(s, n, &i, &offset) < 0 || i != n)
		return -1;

	*sec = tz_days_from_civil(year, month, day) * 86400 + hour * 3600 + min * 60 + secs -
	       offset;
	*nsec = frac;
	return 0;
}

int rfc3339_parse_ns(const char *s, size_t n, int64_t *unix_ns)
{
	int64_t sec;
	int32_t nsec;
	if (rfc3339_parse(s, n, &sec, &nsec) < 0)
		return -1;
	/* sec * 1e9 + nsec must fit in int64 */
	if (sec > INT64_MAX / 1000000000 || sec < INT64_MIN / 1000000000 - 1)
		return -1;
	if (sec == INT64_MAX / 1000000000 && nsec > INT64_MAX % 1000000000)
		return -1;
	if (sec == INT64_MIN / 1000000000 - 1) {
		/* -9223372037 s + nsec: representable only from nsec >= 145224192 */
		if (nsec < 1000000000 + INT64_MIN % 1000000000)
			return -1;
		*unix_ns = (sec + 1) * 1000000000 + (nsec - 1000000000);
		return 0;
	}
	*unix_ns = sec * 1000000000 + nsec;
	return 0;
}

char *rfc3339_format_utc(int64_t unix_ns, char out[RFC3339_STR_MAX])
{
	int64_t sec = unix_ns / 1000000000;
	if (unix_ns % 1000000000 < 0)
		sec--;
	int64_t days = sec / 86400, rem = sec % 86400;
	if (rem < 0) {
		rem += 86400;
		days--;
	}
	int64_t y;
	int m, d;
	tz_civil_from_days(days, &y, &m, &d);
	snprintf_(out, RFC3339_STR_MAX, "%04lld-%02d-%02dT%02d:%02d:%02dZ", (long long)y, m, d,
		  (int)(rem / 3600), (int)(rem / 60 % 60), (int)(rem % 60));
	return out;
}
