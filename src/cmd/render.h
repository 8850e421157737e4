/*
 * The CLI's views of the state database: the exact outputs of `relay
 * function ls`, `relay function inspect` and `relay stats`, rendered from
 * what state.h's reader returns. Pure and thread-safe: they format, they
 * never open the database.
 */
#ifndef RELAY_CMD_RENDER_H
#define RELAY_CMD_RENDER_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/state.h"
#include "base/util.h"

/*
 * The age of `then` at `now`, as the CLI shows it: "0s ago" .. "59s ago",
 * "1m ago" .. "59m ago", "1h ago" .. "23h ago", "1d ago" .. "29d ago",
 * then the UTC date "2026-08-01" from 30 days on. A time in the future
 * (clock skew) reads "0s ago" within 30 days, else its date.
 */
#define RENDER_AGE_MAX 32
char *render_age(int64_t then, int64_t now, char out[RENDER_AGE_MAX]);

/* Returns a malloc'd human description of a cron expression, or NULL. */
typedef char *(*render_cron_describe_fn)(const char *expr);

/*
 * The exact outputs of `relay function ls`, `relay function inspect` and
 * `relay stats`, appended to b, ages computed at `now` (Unix seconds).
 *
 * ls: columns at least as wide as the spec's example (22, 13, 10, 11) and
 * otherwise the widest cell plus 3 spaces (Go's tabwriter, padding 3);
 * rows in the order given; UPDATED is prepared_at, else updated_at.
 * inspect: labels padded to 19 columns; Image/Fingerprint/Prepared omitted
 * while pending; "Last reconcile:    never" before any reconcile; Last
 * error omitted when empty; Events/Schedules blocks omitted when empty
 * (handler column: widest + 3; schedules at least 38 as in the spec);
 * timeout= on schedules only when not the 6s default; describe may be NULL
 * or return NULL (raw cron="..." alone); Standby (each handler's parked
 * containers, aligned like Events) only when the flush wrote rows for the
 * function (standby on, Relay running); Stats always; Environment and
 * Secrets only when defined, sorted by name.
 */
/* Every text these views print goes through text_escape (util.h): names,
 * statuses, errors, values read from the database, Redis or a template. */
/* s escaped, then spaces up to width columns (the tables' columns). */
void render_pad(struct buf *b, const char *s, size_t width);
/* The columns s takes once escaped (what render_pad counts). */
size_t render_cols(const char *s);
/* "<label padded to 19><value escaped>\n": the label column of inspect,
 * stats and event status; _cut cuts value to max_cols (text_escape). */
void render_field(struct buf *b, const char *label, const char *value);
void render_field_cut(struct buf *b, const char *label, const char *value, size_t max_cols);

void render_state_ls(struct buf *b, const struct state_function_info *fs, size_t n, int64_t now);
void render_state_inspect(struct buf *b, const struct state_function_info *f, int64_t now,
			  render_cron_describe_fn describe);
void render_state_stats(struct buf *b, const struct state_stats *st, int64_t now);

/*
 * The --json documents of the same three views (docs/json.md): the same
 * data as the text, times as RFC 3339 UTC ("2026-08-01T10:00:00Z"; a
 * stored time that does not parse is passed through as stored), durations
 * as seconds (numbers), absent values null. New references.
 */
json_t *render_state_json_ls(const struct state_function_info *fs, size_t n);
json_t *render_state_json_inspect(const struct state_function_info *f,
				  render_cron_describe_fn describe);
json_t *render_state_json_stats(const struct state_stats *st);

#endif
