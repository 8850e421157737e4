/*
 * Go time.ParseDuration / time.Duration.String, exactly.
 *
 * Grammar: [-+]? ( decimal unit )+ | "0", where decimal is digits with an
 * optional fraction (".5", "1.", "1.5") and unit one of ns us µs μs ms s m h.
 * Values are int64 nanoseconds; overflow is an error. Pure functions,
 * thread-safe.
 */
#ifndef RELAY_DURATION_H
#define RELAY_DURATION_H

#include <stddef.h>
#include <stdint.h>

#define NS_PER_US 1000LL
#define NS_PER_MS 1000000LL
#define NS_PER_SEC 1000000000LL
#define NS_PER_MIN (60 * NS_PER_SEC)
#define NS_PER_HOUR (60 * NS_PER_MIN)

/* Parses all of s. Returns 0, or -1 when s is not a Go duration. */
int duration_parse(const char *s, int64_t *out);
/* Parses the first n bytes of s. */
int duration_parse_n(const char *s, size_t n, int64_t *out);

/* Formats d as Go does ("6s", "1m30s", "5m0s", "1.5ms", "0s") into out
 * (32 bytes always suffice). Returns out. */
#define DURATION_STR_MAX 32
char *duration_format(int64_t d, char out[DURATION_STR_MAX]);

#endif
