/*
 * The pure parts of relay dlq: a dead-letter entry as read from Redis,
 * the filters of ls/replay/rm, escaping and cutting for display, and the
 * exact table of relay dlq ls. They format and compare; they never touch
 * Redis. Thread-safe.
 */
#ifndef RELAY_CMD_DLQ_VIEW_H
#define RELAY_CMD_DLQ_VIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

/* One DLQ stream entry: its id and every field, in stored order. */
struct dlq_entry {
	char *id;
	int64_t ms; /* the id's milliseconds: when it was dead-lettered */
	size_t nf;
	char **name, **val; /* NUL-terminated copies; val may hold NUL bytes */
	size_t *vlen;
};

/* A new entry of id with no fields; dlq_entry_add appends one. */
struct dlq_entry *dlq_entry_new(const char *id, size_t idlen);
void dlq_entry_add(struct dlq_entry *e, const char *name, size_t nlen, const char *val,
		   size_t vlen);
void dlq_entry_free(struct dlq_entry *e);
/* The last field called name (borrowed; *len its bytes when len is not
 * NULL), NULL when absent. */
const char *dlq_entry_get(const struct dlq_entry *e, const char *name, size_t *len);

/* Whether s is a stream id: digits, or digits "-" digits. */
bool dlq_id_valid(const char *s);
/* The milliseconds of a stream id (its part before '-'); -1 when invalid. */
int64_t dlq_id_ms(const char *id);

/*
 * The filters: since_ms > 0 keeps entries dead-lettered at or after it
 * (by id); reason keeps entries whose reason contains it (bytes, case
 * matters); function keeps entries whose function field equals it (an
 * entry written before Relay recorded the function has none and never
 * matches). NULL/0: no filter.
 */
struct dlq_filter {
	int64_t since_ms;
	const char *reason;
	const char *function;
};
bool dlq_filter_match(const struct dlq_filter *f, const struct dlq_entry *e);

/*
 * s (n bytes) made safe for a terminal, malloc'd: printable ASCII and
 * valid UTF-8 kept, backslash as "\\", newline, tab and carriage return
 * as "\n" "\t" "\r", every other control or invalid byte as "\xNN". With
 * max_cols > 0 the result is cut to at most max_cols columns (a code
 * point is one column), ending in "..." when something was left out,
 * never inside an escape or a UTF-8 sequence.
 */
char *dlq_escape(const char *s, size_t n, size_t max_cols);

/*
 * relay dlq ls's table, appended to b: the header "ID  AGE  ORIGINAL
 * ATTEMPTS  FUNCTION  REASON", one row per entry in the order given.
 * Columns are the widest cell plus 2 spaces; AGE as state_format_age at
 * now_s; "-" for a field missing or empty (entries written before Relay
 * recorded the function, a malformed event's empty function). Every cell
 * is escaped (dlq_escape). width > 0: REASON is cut so that each line fits
 * in width columns (but keeps at least 10); 0: never cut.
 */
void dlq_render_ls(struct buf *b, struct dlq_entry *const *e, size_t n, int64_t now_s,
		   size_t width);

#endif
