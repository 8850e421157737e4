/*
 * RFC 3339 timestamps exactly as Go's time.Parse(time.RFC3339, s) accepts
 * them, so patterns written for the reference implementation keep matching
 * the same event values:
 *
 *   YYYY-MM-DDTHH:MM:SS[.fraction]Z   or   ...[.fraction]±hh:mm
 *
 * - year is exactly four digits (0000-9999), month 01-12, day calendar-checked
 *   (2026-02-30 and 2025-02-29 are invalid, 2024-02-29 is valid);
 * - the hour may be one or two digits (Go's layout parser accepts "T9:05:00"),
 *   0-23; minutes and seconds are two digits, 0-59 (no leap second);
 * - the fraction is '.' or ',' and one or more digits; digits beyond the
 *   ninth are ignored (truncated), as Go does;
 * - 'T' and 'Z' are upper case only; the offset is ±hh:mm with hh <= 24 and
 *   mm <= 60 (Go's range check); nothing may follow.
 *
 * Pure functions, thread-safe.
 */
#ifndef RELAY_RFC3339_H
#define RELAY_RFC3339_H

#include <stddef.h>
#include <stdint.h>

/* Parses the n bytes at s. On success returns 0 and stores the instant as
 * seconds since the Unix epoch (*sec, may be negative) plus nanoseconds
 * (*nsec, 0..999999999). Returns -1 when s is not such a timestamp. */
int rfc3339_parse(const char *s, size_t n, int64_t *sec, int32_t *nsec);

/* The same, as int64 nanoseconds since the epoch (what pattern_match takes as
 * "now"). Returns -1 also when the instant lies outside the int64 range
 * (before 1677-09-21 or after 2262-04-11). */
int rfc3339_parse_ns(const char *s, size_t n, int64_t *unix_ns);

/* Formats unix_ns as Go's time.RFC3339 formats a UTC time:
 * "2006-01-02T15:04:05Z" (whole seconds, truncated toward the past).
 * Returns out. */
#define RFC3339_STR_MAX 32
char *rfc3339_format_utc(int64_t unix_ns, char out[RFC3339_STR_MAX]);

#endif
