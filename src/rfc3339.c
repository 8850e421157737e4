/*
 * RFC 3339 parsing with the exact acceptance rules of Go's generic layout
 * parser for time.RFC3339 (see rfc3339.h), which is a superset of its fast
 * path: time.Parse tries the strict fast path first and falls back to the
 * layout parser, so the union is what Go accepts.
 */
#include "rfc3339.h"

#include <stdbool.h>

#include "util.h"

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

static bool is_leap(int64_t y)
{
	return y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
}

static int days_in_month(int64_t y, int m)
{
	static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	return m == 2 && is_leap(y) ? 29 : days[m - 1];
}

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
	y -= m <= 2;
	int64_t era = (y >= 0 ? y : y - 399) / 400;
	int64_t yoe = y - era * 400;
	int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
	z += 719468;
	int64_t era = (z >= 0 ? z : z - 146096) / 146097;
	int64_t doe = z - era * 146097;
	int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	int64_t mp = (5 * doy + 2) / 153;
	*d = (int)(doy - (153 * mp + 2) / 5 + 1);
	*m = (int)(mp < 10 ? mp + 3 : mp - 9);
	*y = yoe + era * 400 + (*m <= 2);
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
	if (day < 1 || day > days_in_month(year, month))
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

	int32_t frac = 0;
	if (i + 1 < n && (s[i] == '.' || s[i] == ',') && is_digit(s[i + 1])) {
		int digits = 0;
		i++;
		for (; i < n && is_digit(s[i]); i++) {
			if (digits < 9) {
				frac = frac * 10 + (s[i] - '0');
				digits++;
			}
		}
		for (; digits < 9; digits++)
			frac *= 10;
	}

	int64_t offset = 0;
	if (i < n && s[i] == 'Z') {
		i++;
	} else {
		if (n - i < 6 || (s[i] != '+' && s[i] != '-') || s[i + 3] != ':')
			return -1;
		int oh = two_digits(s, n, i + 1), om = two_digits(s, n, i + 4);
		if (oh < 0 || om < 0 || oh > 24 || om > 60)
			return -1;
		offset = (int64_t)(oh * 60 + om) * 60;
		if (s[i] == '-')
			offset = -offset;
		i += 6;
	}
	if (i != n)
		return -1;

	*sec = days_from_civil(year, month, day) * 86400 + hour * 3600 + min * 60 + secs - offset;
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
	civil_from_days(days, &y, &m, &d);
	snprintf_(out, RFC3339_STR_MAX, "%04lld-%02d-%02dT%02d:%02d:%02dZ", (long long)y, m, d,
		  (int)(rem / 3600), (int)(rem / 60 % 60), (int)(rem % 60));
	return out;
}
