#include "cmd/dlq_view.h"

#include <stdlib.h>
#include <string.h>

#include "cmd/render.h"

struct dlq_entry *dlq_entry_new(const char *id, size_t idlen)
{
	struct dlq_entry *e = xcalloc(1, sizeof *e);
	e->id = xstrndup(id, idlen);
	e->ms = dlq_id_ms(e->id);
	return e;
}

void dlq_entry_add(struct dlq_entry *e, const char *name, size_t nlen, const char *val, size_t vlen)
{
	e->name = xrealloc(e->name, (e->nf + 1) * sizeof *e->name);
	e->val = xrealloc(e->val, (e->nf + 1) * sizeof *e->val);
	e->vlen = xrealloc(e->vlen, (e->nf + 1) * sizeof *e->vlen);
	e->name[e->nf] = xstrndup(name, nlen);
	e->val[e->nf] = xmalloc(vlen + 1);
	memcpy(e->val[e->nf], val, vlen);
	e->val[e->nf][vlen] = '\0';
	e->vlen[e->nf] = vlen;
	e->nf++;
}

void dlq_entry_free(struct dlq_entry *e)
{
	if (!e)
		return;
	for (size_t i = 0; i < e->nf; i++) {
		free(e->name[i]);
		free(e->val[i]);
	}
	free(e->name);
	free(e->val);
	free(e->vlen);
	free(e->id);
	free(e);
}

const char *dlq_entry_get(const struct dlq_entry *e, const char *name, size_t *len)
{
	const char *v = NULL;
	for (size_t i = 0; i < e->nf; i++)
		if (strcmp(e->name[i], name) == 0) {
			v = e->val[i];
			if (len)
				*len = e->vlen[i];
		}
	return v;
}

static size_t digits(const char *s)
{
	size_t n = 0;
	while (s[n] >= '0' && s[n] <= '9')
		n++;
	return n;
}

bool dlq_id_valid(const char *s)
{
	size_t a = digits(s);
	if (a == 0 || a > 20)
		return false;
	if (s[a] == '\0')
		return true;
	size_t b = s[a] == '-' ? digits(s + a + 1) : 0;
	return b > 0 && b <= 20 && s[a + 1 + b] == '\0';
}

int64_t dlq_id_ms(const char *id)
{
	if (!dlq_id_valid(id))
		return -1;
	int64_t ms = 0;
	for (size_t i = 0; id[i] >= '0' && id[i] <= '9'; i++) {
		if (ms > (INT64_MAX - 9) / 10)
			return -1;
		ms = ms * 10 + (id[i] - '0');
	}
	return ms;
}

bool dlq_filter_match(const struct dlq_filter *f, const struct dlq_entry *e)
{
	if (f->since_ms > 0 && e->ms < f->since_ms)
		return false;
	if (f->reason) {
		size_t n = 0;
		const char *r = dlq_entry_get(e, "reason", &n);
		if (!r || !memmem(r, n, f->reason, strlen(f->reason)))
			return false;
	}
	if (f->function) {
		size_t n = 0;
		const char *fn = dlq_entry_get(e, "function", &n);
		if (!fn || n != strlen(f->function) || memcmp(fn, f->function, n) != 0)
			return false;
	}
	return true;
}

/* The escaped form of the unit at p (k bytes) into out (at most 4 bytes
 * plus NUL): its length, which is also its width in columns for an
 * escape; a UTF-8 sequence is copied and counts as one column. */
static size_t unit(const unsigned char *p, size_t n, char out[8], size_t *k, size_t *cols)
{
	uint32_t rune;
	size_t u = utf8_decode(p, n, &rune);
	if (u > 1 || (u == 1 && p[0] >= 0x20 && p[0] < 0x7f && p[0] != '\\')) {
		memcpy(out, p, u);
		*k = u;
		*cols = 1;
		return u;
	}
	*k = 1;
	const char *esc = p[0] == '\\'	 ? "\\\\"
			  : p[0] == '\n' ? "\\n"
			  : p[0] == '\t' ? "\\t"
			  : p[0] == '\r' ? "\\r"
					 : NULL;
	if (esc)
		snprintf_(out, 8, "%s", esc);
	else
		snprintf_(out, 8, "\\x%02x", p[0]);
	*cols = strlen(out);
	return *cols;
}

char *dlq_escape(const char *s, size_t n, size_t max_cols)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t total = 0;
	for (size_t i = 0; i < n;) {
		char u[8];
		size_t k, cols;
		unit(p + i, n - i, u, &k, &cols);
		total += cols;
		i += k;
	}
	bool cut = max_cols > 0 && total > max_cols;
	size_t budget = cut ? (max_cols > 3 ? max_cols - 3 : 0) : total;
	struct buf b;
	buf_init(&b, n * 4 + 8); /* every byte as "\xNN", then "..." */
	size_t used = 0;
	for (size_t i = 0; i < n;) {
		char u[8];
		size_t k, cols, len = unit(p + i, n - i, u, &k, &cols);
		if (used + cols > budget)
			break;
		buf_append(&b, u, len);
		used += cols;
		i += k;
	}
	if (cut)
		buf_append(&b, "...", 3);
	return buf_steal(&b);
}

/* Columns of an escaped cell: its code points. */
static size_t cols_of(const char *s)
{
	size_t n = 0;
	for (; *s; s++)
		if (((unsigned char)*s & 0xc0) != 0x80)
			n++;
	return n;
}

static void pad(struct buf *b, const char *cell, size_t width)
{
	buf_appendf(b, "%s", cell);
	for (size_t c = cols_of(cell); c < width; c++)
		buf_append(b, " ", 1);
}

enum { COL_ID, COL_AGE, COL_ORIGINAL, COL_ATTEMPTS, COL_FUNCTION, COL_REASON, NCOL };

/* The escaped cell of field name, "-" when it is missing or empty. */
static char *cell(const struct dlq_entry *e, const char *name, size_t max_cols)
{
	size_t n = 0;
	const char *v = dlq_entry_get(e, name, &n);
	return v && n ? dlq_escape(v, n, max_cols) : xstrdup("-");
}

void dlq_render_ls(struct buf *b, struct dlq_entry *const *e, size_t n, int64_t now_s, size_t width)
{
	static const char *const head[NCOL] = {"ID",	   "AGE",      "ORIGINAL",
					       "ATTEMPTS", "FUNCTION", "REASON"};
	char *(*cells)[NCOL] = xcalloc(n + 1, sizeof *cells);
	size_t w[NCOL];
	for (int c = 0; c < NCOL; c++)
		w[c] = strlen(head[c]);
	for (size_t i = 0; i < n; i++) {
		char age[STATE_AGE_MAX];
		cells[i][COL_ID] = dlq_escape(e[i]->id, strlen(e[i]->id), 0);
		cells[i][COL_AGE] = xstrdup(
			e[i]->ms >= 0 ? state_format_age(e[i]->ms / 1000, now_s, age) : "-");
		cells[i][COL_ORIGINAL] = cell(e[i], "original_id", 0);
		cells[i][COL_ATTEMPTS] = cell(e[i], "attempts", 0);
		cells[i][COL_FUNCTION] = cell(e[i], "function", 0);
		for (int c = 0; c < COL_REASON; c++) {
			size_t k = cols_of(cells[i][c]);
			if (k > w[c])
				w[c] = k;
		}
	}
	size_t left = 0; /* columns before REASON */
	for (int c = 0; c < COL_REASON; c++)
		left += w[c] + 2;
	size_t room = 0;
	if (width > 0)
		room = width > left + 10 ? width - left : 10;
	for (int c = 0; c < COL_REASON; c++)
		pad(b, head[c], w[c] + 2);
	buf_appendf(b, "%s\n", head[COL_REASON]);
	for (size_t i = 0; i < n; i++) {
		cells[i][COL_REASON] = cell(e[i], "reason", room);
		for (int c = 0; c < COL_REASON; c++)
			pad(b, cells[i][c], w[c] + 2);
		buf_appendf(b, "%s\n", cells[i][COL_REASON]);
		for (int c = 0; c < NCOL; c++)
			free(cells[i][c]);
	}
	free(cells);
}
