#include "cmd/dlq_view.h"

#include <stdlib.h>
#include <string.h>

#include "cmd/render.h"

struct dlq_entry *dlq_view_entry_new(const char *id, size_t idlen)
{
	struct dlq_entry *e = xcalloc(1, sizeof *e);
	e->id = xstrndup(id, idlen);
	e->ms = dlq_view_id_ms(e->id);
	return e;
}

void dlq_view_entry_add(struct dlq_entry *e, const char *name, size_t nlen, const char *val, size_t vlen)
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

void dlq_view_entry_free(struct dlq_entry *e)
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

const char *dlq_view_entry_get(const struct dlq_entry *e, const char *name, size_t *len)
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

bool dlq_view_id_valid(const char *s)
{
	size_t a = digits(s);
	if (a == 0 || a > DLQ_ID_DIGITS_MAX || s[a] != '-')
		return false;
	size_t b = digits(s + a + 1);
	return b > 0 && b <= DLQ_ID_DIGITS_MAX && s[a + 1 + b] == '\0';
}

int64_t dlq_view_id_ms(const char *id)
{
	if (!dlq_view_id_valid(id))
		return -1;
	int64_t ms = 0;
	for (size_t i = 0; id[i] >= '0' && id[i] <= '9'; i++) {
		if (ms > (INT64_MAX - 9) / 10)
			return -1;
		ms = ms * 10 + (id[i] - '0');
	}
	return ms;
}

static void pad(struct buf *b, const char *cell, size_t width)
{
	buf_appendf(b, "%s", cell);
	for (size_t c = text_cols(cell); c < width; c++)
		buf_append(b, " ", 1);
}

static const char *const head[DLQ_NCOL + 1] = {"ID",	   "AGE",      "ORIGINAL",
					       "ATTEMPTS", "FUNCTION", "REASON"};

/* The escaped cell of field name, "-" when it is missing or empty. */
static char *cell(const struct dlq_entry *e, const char *name, size_t max_cols)
{
	size_t n = 0;
	const char *v = dlq_view_entry_get(e, name, &n);
	return v && n ? text_escaped(v, n, max_cols, 0) : xstrdup("-");
}

/* The cells of e before REASON. */
static void cells_of(const struct dlq_entry *e, int64_t now_s, char *out[DLQ_NCOL])
{
	char age[RENDER_AGE_MAX];
	out[DLQ_COL_ID] = text_escaped(e->id, strlen(e->id), 0, 0);
	out[DLQ_COL_AGE] = xstrdup(e->ms >= 0 ? render_age(e->ms / 1000, now_s, age) : "-");
	out[DLQ_COL_ORIGINAL] = cell(e, "original_id", 0);
	out[DLQ_COL_ATTEMPTS] = cell(e, "attempts", 0);
	out[DLQ_COL_FUNCTION] = cell(e, "function", 0);
}

void dlq_view_ls_widths_init(struct dlq_ls_widths *w)
{
	for (int c = 0; c < DLQ_NCOL; c++)
		w->w[c] = strlen(head[c]);
}

void dlq_view_ls_widths_add(struct dlq_ls_widths *w, const struct dlq_entry *e, int64_t now_s)
{
	char *cells[DLQ_NCOL];
	cells_of(e, now_s, cells);
	for (int c = 0; c < DLQ_NCOL; c++) {
		size_t k = text_cols(cells[c]);
		if (k > w->w[c])
			w->w[c] = k;
		free(cells[c]);
	}
}

void dlq_view_render_ls_head(struct buf *b, const struct dlq_ls_widths *w)
{
	for (int c = 0; c < DLQ_NCOL; c++)
		pad(b, head[c], w->w[c] + 2);
	buf_appendf(b, "%s\n", head[DLQ_NCOL]);
}

void dlq_view_render_ls_rows(struct buf *b, const struct dlq_ls_widths *w, struct dlq_entry *const *e,
			size_t n, int64_t now_s, size_t width)
{
	size_t left = 0; /* columns before REASON */
	for (int c = 0; c < DLQ_NCOL; c++)
		left += w->w[c] + 2;
	size_t room = 0;
	if (width > 0)
		room = width > left + 10 ? width - left : 10;
	for (size_t i = 0; i < n; i++) {
		char *cells[DLQ_NCOL];
		cells_of(e[i], now_s, cells);
		for (int c = 0; c < DLQ_NCOL; c++) {
			pad(b, cells[c], w->w[c] + 2);
			free(cells[c]);
		}
		char *reason = cell(e[i], "reason", room);
		buf_appendf(b, "%s\n", reason);
		free(reason);
	}
}

void dlq_view_render_ls(struct buf *b, struct dlq_entry *const *e, size_t n, int64_t now_s, size_t width)
{
	struct dlq_ls_widths w;
	dlq_view_ls_widths_init(&w);
	for (size_t i = 0; i < n; i++)
		dlq_view_ls_widths_add(&w, e[i], now_s);
	dlq_view_render_ls_head(b, &w);
	dlq_view_render_ls_rows(b, &w, e, n, now_s, width);
}
