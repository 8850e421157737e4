/*
 * Retry policies (template.yaml `retry:`, docs/template.md "Retries"):
 * when the next attempt of a failed invocation starts, and which failures
 * are not retried at all.
 *
 * A policy is what one level of the template says: the top-level `retry:`
 * (the function's default) or a rule's or schedule's own, each key given
 * or not. retry_policy_merge makes the effective policy of a rule: its own
 * keys win, key by key, over the top level's, and the built-in defaults
 * fill what neither gives (the backoff 1m, 2m, 5m, 10m; no max_age; every
 * exit code retried). The attempts are `retries` + 1, as before.
 *
 *   backoff   a list of delays, the delay after attempt n being its nth
 *             entry and the last repeating; or exponential: initial ×
 *             multiplier^(n-1), at most max, spread by ± jitter of itself
 *             (uniformly), and never beyond max
 *   max_age   a retry due when the stream entry is older than this is not
 *             run: the message goes to the dead-letter stream
 *   no_retry_exit_codes
 *             a handler exit code listed here (1..255) is permanent: the
 *             message goes to the dead-letter stream at once
 *
 * Pure data and arithmetic; a policy is immutable once parsed and may be
 * shared by any thread.
 */
#ifndef RELAY_RETRY_H
#define RELAY_RETRY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/strlist.h"

/* At most this many delays in a backoff list. */
#define RETRY_MAX_BACKOFF 32
/* Each delay, initial and max: above 0, at most 1 day. */
#define RETRY_MAX_DELAY_NS (24LL * 3600 * 1000000000LL)
/* max_age at most 7 days: the invocation state a retry needs lives 7 days
 * (INVOCATION_TTL_SECONDS). */
#define RETRY_MAX_AGE_NS (7LL * 24 * 3600 * 1000000000LL)
/* multiplier at most this. */
#define RETRY_MAX_MULTIPLIER 1000.0

enum retry_backoff_kind { RETRY_BACKOFF_LIST, RETRY_BACKOFF_EXPONENTIAL };

struct retry_policy {
	/* Which keys this level gives (a merged policy: all true). */
	bool has_backoff, has_max_age, has_no_retry;
	enum retry_backoff_kind kind;
	int64_t list[RETRY_MAX_BACKOFF]; /* RETRY_BACKOFF_LIST */
	size_t nlist;
	int64_t initial_ns, max_ns; /* RETRY_BACKOFF_EXPONENTIAL */
	double multiplier, jitter;
	int64_t max_age_ns;   /* 0: none */
	uint8_t no_retry[32]; /* bit c: exit code c is permanent */
};

/*
 * One level's `retry:` value (template.c converts the YAML, typed by the
 * core schema, to JSON): a map of backoff, max_age and no_retry_exit_codes,
 * each optional. Every problem is added to errors as one line starting with
 * path ("events[0].retry.backoff.multiplier: 0.5 is below 1"); returns 0
 * when there was none. Bounded: at most RETRY_MAX_BACKOFF delays and 255
 * exit codes are looked at, and one error line per key.
 */
int retry_policy_parse(const json_t *j, const char *path, struct retry_policy *out,
		       struct strlist *errors);

/* How a template error names the kind of a JSON value: "a map", "a
 * list", "a string", "an integer", "a number", "a boolean", "null" (also
 * keyconc.c's). */
const char *retry_json_kind(const json_t *j);

/* The built-in defaults, every key given: backoff [1m, 2m, 5m, 10m] (an
 * entry of override, when non-NULL, that is > 0 replaces its step: tests),
 * no max_age, no permanent exit code. */
void retry_policy_default(struct retry_policy *out, const int64_t override[4]);

/* The effective policy: rule's keys (NULL: none) over top's (NULL: none)
 * over base (retry_policy_default). */
void retry_policy_merge(struct retry_policy *out, const struct retry_policy *base,
			const struct retry_policy *top, const struct retry_policy *rule);

/* The delay after attempt (1-based; below 1 counts as 1). u is a uniform
 * random number in [0, 1), used only with a jitter. Never negative, never
 * over RETRY_MAX_DELAY_NS, never overflows whatever attempt is. */
int64_t retry_backoff_ns(const struct retry_policy *p, int attempt, double u);

/* Whether exit code is listed in no_retry_exit_codes. */
bool retry_exit_code_permanent(const struct retry_policy *p, int code);
void retry_exit_code_set(struct retry_policy *p, int code);

/* One line for `relay function inspect`, e.g. "backoff [2s, 4s], max_age
 * 1h, no_retry_exit_codes [2]" or "backoff exponential 1s x2 up to 10m
 * jitter 0.1, no max_age, every exit code retried" (malloc'd). */
char *retry_policy_describe(const struct retry_policy *p);

#endif
