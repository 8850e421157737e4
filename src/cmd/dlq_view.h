/*
 * The pure parts of relay dlq: a dead-letter entry as read from Redis, its
 * id, and the exact table of relay dlq ls. They format; they never touch
 * Redis. Thread-safe.
 */
#ifndef RELAY_CMD_DLQ_VIEW_H
#define RELAY_CMD_DLQ_VIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/util.h"

/* The bounds of relay dlq (docs/limits.md; docs/dlq.md): the digits of
 * each part of an entry id (MS-SEQ, both parts required), the bytes of a
 * field `ls` shows (longer ones cut, marked "..."), the entries one
 * `replay --all` or `rm --all` takes, and the replayed ids waiting in
 * relay:<stream>:replays for relay start to count (past it a replay is
 * published but not counted). */
#define DLQ_ID_DIGITS_MAX 20
#define DLQ_FIELD_MAX 16384
#define DLQ_ALL_MAX 100000
#define DLQ_REPLAYS_MAX 1000000

/* One DLQ stream entry: its id and every field, in stored order. */
struct dlq_entry {
	char *id;
	int64_t ms; /* the id's milliseconds: when it was dead-lettered */
	size_t nf;
	char **name, **val; /* NUL-terminated copies; val may hold NUL bytes */
	size_t *vlen;
};

/* A new entry of id with no fields; dlq_view_entry_add appends one. */
struct dlq_entry *dlq_view_entry_new(const char *id, size_t idlen);
void dlq_view_entry_add(struct dlq_entry *e, const char *name, size_t nlen, const char *val,
		   size_t vlen);
void dlq_view_entry_free(struct dlq_entry *e);
/* The last field called name (borrowed; *len its bytes when len is not
 * NULL), NULL when absent. */
const char *dlq_view_entry_get(const struct dlq_entry *e, const char *name, size_t *len);

/* Whether s is a complete stream id: digits "-" digits (at most
 * DLQ_ID_DIGITS_MAX each).
 * "MS" alone is not one: Redis reads it as a whole millisecond. */
bool dlq_view_id_valid(const char *s);
/* The milliseconds of a stream id (its part before '-'); -1 when invalid. */
int64_t dlq_view_id_ms(const char *id);

/*
 * The filters of ls, replay --all and rm --all (applied inside Redis by
 * dlq.c's scan): since_ms > 0 keeps entries dead-lettered at or after it
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

/*
 * relay dlq ls's table: the header "ID  AGE  ORIGINAL  ATTEMPTS  FUNCTION
 * REASON", one row per entry in the order given. Columns are the widest
 * cell plus 2 spaces; AGE as render_age at now_s; "-" for a field
 * missing or empty (entries written before Relay recorded the function, a
 * malformed event's empty function). Every cell goes through text_escape
 * (util.h). width > 0: REASON is cut so that each line fits in width
 * columns (but keeps at least 10); 0: never cut.
 *
 * Rendered in pieces so that the entries need not be held together: the
 * widths of every entry first (dlq_view_ls_widths_add), then the header, then
 * the rows in as many calls as wanted. dlq_view_render_ls does all of it for
 * entries at hand.
 */
enum { DLQ_COL_ID, DLQ_COL_AGE, DLQ_COL_ORIGINAL, DLQ_COL_ATTEMPTS, DLQ_COL_FUNCTION, DLQ_NCOL };
struct dlq_ls_widths {
	size_t w[DLQ_NCOL]; /* columns before REASON */
};
void dlq_view_ls_widths_init(struct dlq_ls_widths *w);
void dlq_view_ls_widths_add(struct dlq_ls_widths *w, const struct dlq_entry *e, int64_t now_s);
void dlq_view_render_ls_head(struct buf *b, const struct dlq_ls_widths *w);
void dlq_view_render_ls_rows(struct buf *b, const struct dlq_ls_widths *w, struct dlq_entry *const *e,
			size_t n, int64_t now_s, size_t width);
void dlq_view_render_ls(struct buf *b, struct dlq_entry *const *e, size_t n, int64_t now_s,
		   size_t width);

#endif
