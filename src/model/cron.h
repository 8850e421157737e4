/*
 * Relay's cron evaluator (the C counterpart of gocron / robfig cron).
 *
 * Grammar: 5 fields "minute hour day-of-month month day-of-week" or 6 fields
 * with a leading "second". Each field is a comma-separated list of items:
 * "*", a value, a range "a-b", each optionally followed by "/step"; "a/step"
 * means from a to the field's maximum. Months and weekdays also take names
 * (JAN-DEC, SUN-SAT, case-insensitive); Sunday is 0 or 7; "?" is "*" in the
 * day-of-month and day-of-week fields. Descriptors: @yearly, @annually,
 * @monthly, @weekly, @daily, @midnight, @hourly.
 *
 * Day-of-month and day-of-week combine as in Vixie/ISC cron: when both are
 * restricted (neither is "*" or "?") a day matches if either matches.
 *
 * A parsed struct cron is immutable: every function below may be called on
 * the same object from any number of threads.
 */
#ifndef RELAY_CRON_H
#define RELAY_CRON_H

#include <stdbool.h>
#include <stdint.h>

#include "base/tz.h"

struct cron;

/* Expressions longer than this are rejected. */
#define CRON_EXPR_MAX 1024

/*
 * Parses expr. On success stores a new object in *out (free with
 * cron_free) and returns 0. On failure returns -1 and *err is a malloc'd
 * message quoting the expression and naming the problem, e.g.
 * `cron "61 * * * *": minute 61 out of range 0-59`. Expressions that can
 * never fire (`0 0 30 2 *`) and `TZ=`/`CRON_TZ=` prefixes are rejected.
 */
int cron_parse(const char *expr, struct cron **out, char **err);

/* Frees c (NULL is fine). */
void cron_free(struct cron *c);

/* True when the expression has a seconds field (6 fields). */
bool cron_has_seconds(const struct cron *c);

/*
 * The first occurrence strictly after the instant `after` (Unix seconds),
 * evaluated on the wall clock of zone z (NULL means UTC). A wall time
 * skipped by a spring-forward gap fires once, at the transition instant;
 * a wall time repeated by a fall-back overlap fires once, at its first
 * instant. Returns -1 when there is none within ten years (never for a
 * parsed expression) or in year 9999, or when `after` is negative (before
 * 1970) or past year 9999.
 */
int64_t cron_next(const struct cron *c, const struct tz *z, int64_t after);

/*
 * A malloc'd English description in 24-hour time ("At 08:00, Monday through
 * Friday", "Every 15 minutes"), or NULL when the expression is too irregular
 * to describe well; the caller then shows the raw expression only.
 */
char *cron_describe(const struct cron *c);

#endif
