/*
 * The bounded YAML reader (yaml.h). One pass over libfyaml's events:
 *
 *   scalar           check the budgets (one node, its bytes), allocate, add
 *                    to the open collection
 *   alias            look the anchor up (balanced tree), check budgets and
 *                    depth with the anchored node's memoised size, bytes
 *                    and height, add a pointer to that node (no copy)
 *   sequence/mapping open a frame (depth checked, one node counted); at
 *                    its end the node gets its children, size, bytes and
 *                    height
 *
 * The running totals are the document's nodes and text with aliases
 * expanded, so both bounds hold before anything is allocated for an
 * expansion; nothing is ever expanded. Nodes and texts live in one arena
 * freed at once.
 *
 * Error messages are libfyaml's for YAML syntax (first error, with its
 * position) and this module's for the bounds, aliases and duplicate keys.
 */
#include "io/yaml.h"

#include <libfyaml.h>
#include <search.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/* ---- arena ------------------------------------------------------------ */

#define CHUNK_MIN (64 * 1024)

struct chunk {
	struct chunk *next;
	size_t used, cap;
	max_align_t data[];
};

struct arena {
	struct chunk *head;
};

static void *arena_alloc(struct arena *a, size_t n)
{
	n = (n + sizeof(max_align_t) - 1) & ~(sizeof(max_align_t) - 1);
	struct chunk *c = a->head;
	if (!c || c->cap - c->used < n) {
		size_t cap = n > CHUNK_MIN ? n : CHUNK_MIN;
		c = xmalloc(sizeof *c + cap);
		c->used = 0;
		c->cap = cap;
		c->next = a->head;
		a->head = c;
	}
	void *p = (char *)c->data + c->used;
	c->used += n;
	return p;
}

static void arena_free(struct arena *a)
{
	while (a->head) {
		struct chunk *c = a->head;
		a->head = c->next;
		free(c);
	}
}

/* ---- document --------------------------------------------------------- */

struct yaml_doc {
	struct arena arena;
	struct ynode *root;
	uint32_t nodes;
	uint32_t bytes;
	uint64_t work;
};

const struct ynode *yaml_root(const struct yaml_doc *d)
{
	return d->root;
}

uint32_t yaml_nodes(const struct yaml_doc *d)
{
	return d->nodes;
}

uint32_t yaml_bytes(const struct yaml_doc *d)
{
	return d->bytes;
}

uint64_t yaml_work(const struct yaml_doc *d)
{
	return d->work;
}

void yaml_free(struct yaml_doc *d)
{
	if (!d)
		return;
	arena_free(&d->arena);
	free(d);
}

/* ---- reader ----------------------------------------------------------- */

struct anchor {
	const char *name; /* in the arena */
	size_t len;
	struct ynode *node; /* the most recent node of this name */
	bool open;	    /* that node is still being read */
};

struct frame {
	struct ynode *node;
	struct ynode **kids; /* growable, copied into the arena at the end */
	size_t n, cap;
	struct anchor *anchor; /* NULL, or the anchor naming this node */
	void *keys;	       /* mapping: tsearch tree of its scalar keys */
};

struct reader {
	struct yaml_doc *doc;
	const char *name;
	uint32_t max_nodes;
	uint32_t max_bytes;
	int max_depth;
	uint64_t total; /* nodes so far, aliases expanded */
	uint64_t bytes; /* scalar text so far, aliases expanded */
	struct frame *stack;
	int depth; /* open collections */
	void *anchors;
	uint32_t line, col; /* position of the last event with one */
	char *err;
};

/* Comparisons made by the tree lookups of the parse running in this
 * thread (tsearch's comparators take no context). */
static _Thread_local uint64_t compares;

static int text_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
	compares++;
	int c = memcmp(a, b, alen < blen ? alen : blen);
	return c ? c : (alen > blen) - (alen < blen);
}

static int anchor_cmp(const void *a, const void *b)
{
	const struct anchor *x = a, *y = b;
	return text_cmp(x->name, x->len, y->name, y->len);
}

static int key_cmp(const void *a, const void *b)
{
	const struct ynode *x = a, *y = b;
	return text_cmp(x->u.s.text, x->u.s.len, y->u.s.text, y->u.s.len);
}

static void no_free(void *p)
{
	(void)p;
}

/* An anchor or alias name as messages show it: at most 40 bytes, printable. */
static char *shown_name(const char *s, size_t n)
{
	size_t m = n > 40 ? 40 : n;
	char *q = xstrndup(s, m);
	for (size_t i = 0; i < m; i++)
		if ((unsigned char)q[i] < 0x20 || q[i] == 0x7f)
			q[i] = '?';
	char *out = xasprintf("%s%s", q, n > m ? "..." : "");
	free(q);
	return out;
}

__attribute__((format(printf, 2, 3))) static int fail_at(struct reader *r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *msg = xvasprintf(fmt, ap);
	va_end(ap);
	if (!r->err)
		r->err = xasprintf("invalid YAML at line %u, column %u: %s", r->line, r->col, msg);
	free(msg);
	return -1;
}

static int too_many(struct reader *r)
{
	if (!r->err)
		r->err = xasprintf("%s: more than %u YAML nodes with aliases expanded (at line "
				   "%u, column %u); the limit covers the whole file",
				   r->name, r->max_nodes, r->line, r->col);
	return -1;
}

static int too_much_text(struct reader *r)
{
	if (!r->err)
		r->err = xasprintf("%s: more than %u bytes of text with aliases expanded (at line "
				   "%u, column %u); the limit covers the whole file",
				   r->name, r->max_bytes, r->line, r->col);
	return -1;
}

static int too_deep(struct reader *r)
{
	if (!r->err)
		r->err = xasprintf("%s: nested deeper than %d levels with aliases expanded (at "
				   "line %u, column %u)",
				   r->name, r->max_depth, r->line, r->col);
	return -1;
}

static void note_mark(struct reader *r, struct fy_event *e)
{
	const struct fy_mark *m = fy_event_start_mark(e);
	if (m) {
		r->line = (uint32_t)m->line + 1;
		r->col = (uint32_t)m->column + 1;
	}
}

/* Counts n more nodes holding b more bytes of text; refuses past either
 * bound before anything is built. */
static int charge(struct reader *r, uint64_t n, uint64_t b)
{
	if (r->total + n > r->max_nodes)
		return too_many(r);
	if (r->bytes + b > r->max_bytes)
		return too_much_text(r);
	r->total += n;
	r->bytes += b;
	return 0;
}

static struct ynode *new_node(struct reader *r, enum ynode_type type)
{
	struct ynode *n = arena_alloc(&r->doc->arena, sizeof *n);
	memset(n, 0, sizeof *n);
	n->type = (uint8_t)type;
	n->line = r->line;
	n->col = r->col;
	n->size = 1;
	return n;
}

static const char *arena_text(struct reader *r, const char *s, size_t n)
{
	char *p = arena_alloc(&r->doc->arena, n + 1);
	if (n)
		memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

/* The anchor entry of token t in *out (NULL when t is NULL, or when it is
 * new and create is false), created if new. -1 when libfyaml could not
 * allocate the name's text. */
static int anchor_get(struct reader *r, struct fy_token *t, bool create, struct anchor **out)
{
	*out = NULL;
	if (!t)
		return 0;
	size_t len = 0;
	const char *name = fy_token_get_text(t, &len);
	if (!name)
		return fail_at(r, "out of memory reading an anchor name");
	struct anchor key = {.name = name, .len = len};
	struct anchor **found = tfind(&key, &r->anchors, anchor_cmp);
	if (found || !create) {
		*out = found ? *found : NULL;
		return 0;
	}
	struct anchor *a = arena_alloc(&r->doc->arena, sizeof *a);
	a->name = arena_text(r, key.name, key.len);
	a->len = key.len;
	a->node = NULL;
	a->open = false;
	if (!tsearch(a, &r->anchors, anchor_cmp)) {
		fputs("relay: out of memory\n", stderr);
		abort();
	}
	*out = a;
	return 0;
}

/* Adds a complete node (or an aliased one) to the open collection, or
 * makes it the root. */
static int attach(struct reader *r, struct ynode *n)
{
	if (r->depth == 0) {
		r->doc->root = n;
		return 0;
	}
	struct frame *f = &r->stack[r->depth - 1];
	if (f->node->type == YN_MAP && f->n % 2 == 0 && n->type == YN_SCALAR) {
		/* By text: the same anchored scalar twice is a duplicate too. */
		if (tfind(n, &f->keys, key_cmp))
			return fail_at(r, "duplicate key");
		if (!tsearch(n, &f->keys, key_cmp)) {
			fputs("relay: out of memory\n", stderr);
			abort();
		}
	}
	if (f->n == f->cap) {
		f->cap = f->cap ? f->cap * 2 : 8;
		f->kids = xrealloc(f->kids, f->cap * sizeof *f->kids);
	}
	f->kids[f->n++] = n;
	return 0;
}

static enum ytag tag_of(struct fy_token *t)
{
	if (!t)
		return YT_NONE;
	size_t n = 0;
	const char *s = fy_token_get_text(t, &n);
	static const struct {
		const char *name;
		enum ytag tag;
	} core[] = {{"tag:yaml.org,2002:str", YT_STR},	   {"!!str", YT_STR},
		    {"tag:yaml.org,2002:int", YT_INT},	   {"!!int", YT_INT},
		    {"tag:yaml.org,2002:float", YT_FLOAT}, {"!!float", YT_FLOAT},
		    {"tag:yaml.org,2002:bool", YT_BOOL},   {"!!bool", YT_BOOL},
		    {"tag:yaml.org,2002:null", YT_NULL},   {"!!null", YT_NULL}};
	for (size_t i = 0; s && i < ARRAY_LEN(core); i++)
		if (strlen(core[i].name) == n && memcmp(core[i].name, s, n) == 0)
			return core[i].tag;
	return YT_OTHER;
}

static int on_scalar(struct reader *r, struct fy_event *e)
{
	/* No token is an empty value (`a:`); a token without text is
	 * libfyaml failing to allocate it. */
	size_t len = 0;
	const char *text = e->scalar.value ? fy_token_get_text(e->scalar.value, &len) : "";
	if (!text)
		return fail_at(r, "out of memory reading a scalar");
	if (!e->scalar.value)
		len = 0;
	if (charge(r, 1, len) < 0)
		return -1;
	struct ynode *n = new_node(r, YN_SCALAR);
	n->u.s.text = arena_text(r, text, len);
	n->u.s.len = len;
	n->bytes = (uint32_t)len; /* <= max_bytes: charged */
	n->tag = (uint8_t)tag_of(e->scalar.tag);
	n->plain = !e->scalar.value || fy_token_scalar_style(e->scalar.value) == FYSS_PLAIN;
	struct anchor *a;
	if (anchor_get(r, e->scalar.anchor, true, &a) < 0)
		return -1;
	if (a) {
		a->node = n;
		a->open = false;
	}
	return attach(r, n);
}

static int on_alias(struct reader *r, struct fy_event *e)
{
	struct anchor *a;
	if (anchor_get(r, e->alias.anchor, false, &a) < 0)
		return -1;
	if (!a || (!a->node && !a->open)) {
		size_t len = 0;
		const char *s = e->alias.anchor ? fy_token_get_text(e->alias.anchor, &len) : NULL;
		char *q = shown_name(s ? s : "", s ? len : 0);
		fail_at(r, "alias *%s has no anchor before it", q);
		free(q);
		return -1;
	}
	if (a->open) {
		char *q = shown_name(a->name, a->len);
		fail_at(r, "alias *%s is inside the node its anchor names", q);
		free(q);
		return -1;
	}
	if (r->depth + a->node->height > r->max_depth)
		return too_deep(r);
	if (charge(r, a->node->size, a->node->bytes) < 0)
		return -1;
	return attach(r, a->node);
}

static int on_start(struct reader *r, enum ynode_type type, struct fy_token *anchor)
{
	if (r->depth + 1 > r->max_depth)
		return too_deep(r);
	if (charge(r, 1, 0) < 0)
		return -1;
	struct frame *f = &r->stack[r->depth++];
	memset(f, 0, sizeof *f);
	f->node = new_node(r, type);
	if (anchor_get(r, anchor, true, &f->anchor) < 0)
		return -1;
	if (f->anchor) {
		f->anchor->node = NULL;
		f->anchor->open = true;
	}
	return 0;
}

static void frame_release(struct frame *f)
{
	free(f->kids);
	f->kids = NULL;
	if (f->keys)
		tdestroy(f->keys, no_free);
	f->keys = NULL;
}

static int on_end(struct reader *r)
{
	struct frame *f = &r->stack[--r->depth];
	struct ynode *n = f->node;
	n->n = (uint32_t)(n->type == YN_MAP ? f->n / 2 : f->n);
	n->u.kids = arena_alloc(&r->doc->arena, (f->n ? f->n : 1) * sizeof *n->u.kids);
	uint64_t size = 1, bytes = 0;
	int height = 0;
	for (size_t i = 0; i < f->n; i++) {
		n->u.kids[i] = f->kids[i];
		size += f->kids[i]->size;
		bytes += f->kids[i]->bytes;
		if (f->kids[i]->height > height)
			height = f->kids[i]->height;
	}
	/* <= max_nodes and max_bytes: every part was charged */
	n->size = (uint32_t)size;
	n->bytes = (uint32_t)bytes;
	n->height = (uint8_t)(height + 1);
	if (f->anchor) {
		f->anchor->node = n;
		f->anchor->open = false;
	}
	frame_release(f);
	return attach(r, n);
}

/* 1 at the end of the first document (or of a stream without one), 0 to
 * go on, -1 on error. */
static int on_event(struct reader *r, struct fy_event *e)
{
	note_mark(r, e);
	switch (e->type) {
	case FYET_SCALAR: return on_scalar(r, e);
	case FYET_ALIAS: return on_alias(r, e);
	case FYET_SEQUENCE_START: return on_start(r, YN_SEQ, e->sequence_start.anchor);
	case FYET_MAPPING_START: return on_start(r, YN_MAP, e->mapping_start.anchor);
	case FYET_SEQUENCE_END:
	case FYET_MAPPING_END: return r->depth > 0 ? on_end(r) : fail_at(r, "unbalanced end");
	case FYET_DOCUMENT_END:
	case FYET_STREAM_END: return 1;
	default: return 0;
	}
}

/* ---- libfyaml diagnostics --------------------------------------------- */

struct diag_ctx {
	struct buf msg;	  /* the first error */
	struct buf first; /* the first diagnostic of any level */
};

/* Keeps the first error: a warning before it (an unsupported %DIRECTIVE)
 * is not why the document failed. Some input fails with a warning only
 * ("%%"), so the first diagnostic is kept too. */
static void diag_output(struct fy_diag *diag, void *user, const char *buf, size_t len)
{
	struct diag_ctx *d = user;
	if (d->msg.len == 0 && memmem(buf, len, ": error: ", 9))
		buf_append(&d->msg, buf, len);
	if (d->first.len == 0)
		buf_append(&d->first, buf, len);
}

/* "<file>:3:5: error: duplicate key" → "invalid YAML at line 3, column 5:
 * duplicate key"; a diagnostic without a position is about the whole file. */
static char *yaml_error_text(const char *raw, const char *name)
{
	char *s = xstrdup(raw ? raw : "");
	size_t n = strlen(s);
	while (n && (s[n - 1] == '\n' || s[n - 1] == ' '))
		s[--n] = '\0';
	/* Keep the first line only. */
	char *nl = strchr(s, '\n');
	if (nl)
		*nl = '\0';
	int line = 0, col = 0;
	const char *e = strstr(s, ": error: ");
	size_t skip = 9;
	if (!e && (e = strstr(s, ": warning: ")))
		skip = 11;
	char *out;
	if (e && sscanf(s, "%*[^:]:%d:%d:", &line, &col) == 2)
		out = xasprintf("invalid YAML at line %d, column %d: %s", line, col, e + skip);
	else if (e) /* no position: the whole file is the place */
		out = xasprintf("%s: invalid YAML: %s", name, e + skip);
	else
		out = xasprintf("%s: invalid YAML: %s", name, *s ? s : "parse error");
	free(s);
	return out;
}

/* The 1-based number of the first line longer than max bytes, or 0. */
static size_t long_line(const char *text, size_t len, size_t max)
{
	size_t line = 1, start = 0;
	for (size_t i = 0; i <= len; i++) {
		if (i < len && text[i] != '\n' && text[i] != '\r')
			continue;
		if (i - start > max)
			return line;
		if (i < len && (text[i] == '\n' || i + 1 >= len || text[i + 1] != '\n'))
			line++; /* "\r\n" is one break */
		start = i + 1;
	}
	return 0;
}

/* Reads p's events into r's document: 0, or -1 with r->err set (from
 * libfyaml's diagnostics in dc when the error is its own). */
static int read_events(struct reader *r, struct fy_parser *p, const struct diag_ctx *dc)
{
	int rc = 0;
	for (;;) {
		/* The stream ends with an event (FYET_STREAM_END, which ends
		 * the loop): no event before it is an error, libfyaml's own
		 * or a failed allocation. */
		struct fy_event *e = fy_parser_parse(p);
		if (!e) {
			rc = -1;
			break;
		}
		rc = on_event(r, e);
		fy_parser_event_free(p, e);
		if (rc != 0)
			break;
	}
	if (rc > 0)
		rc = 0;
	if (rc == 0 && r->depth > 0)
		rc = fail_at(r, "incomplete document");
	if (rc < 0 && !r->err)
		/* libfyaml reports every syntax error; it stops without one
		 * only when it could not allocate. */
		r->err = dc->msg.len || dc->first.len
				 ? yaml_error_text(dc->msg.len ? dc->msg.data : dc->first.data,
						   r->name)
				 : xasprintf("%s: out of memory reading the YAML", r->name);
	return rc;
}

int yaml_parse(const char *text, size_t len, const char *name, const struct ylimits *lim,
	       struct yaml_doc **out, char **err)
{
	*out = NULL;
	*err = NULL;
	size_t bad = long_line(text, len, lim->line);
	if (bad) {
		*err = xasprintf("%s: line %zu is longer than %zu bytes (write long lists and "
				 "maps over several lines)",
				 name, bad, lim->line);
		return -1;
	}
	int max_depth = lim->depth > UINT8_MAX ? UINT8_MAX : lim->depth;
	struct diag_ctx dc;
	buf_init(&dc.msg, 4096);
	buf_init(&dc.first, 4096);
	struct fy_diag_cfg dcfg;
	fy_diag_cfg_default(&dcfg);
	dcfg.fp = NULL;
	dcfg.output_fn = diag_output;
	dcfg.user = &dc;
	dcfg.colorize = false;
	struct fy_diag *diag = fy_diag_create(&dcfg);
	struct fy_parse_cfg pcfg = {.flags = FYPCF_QUIET | FYPCF_DISABLE_RECYCLING, .diag = diag};
	struct fy_parser *p = diag ? fy_parser_create(&pcfg) : NULL;
	if (!p || fy_parser_set_string(p, text, len) != 0) {
		if (p)
			fy_parser_destroy(p);
		if (diag)
			fy_diag_destroy(diag);
		buf_free(&dc.msg);
		buf_free(&dc.first);
		*err = xasprintf("%s: out of memory (creating the YAML parser)", name);
		return -1;
	}
	struct reader r = {
		.doc = xcalloc(1, sizeof *r.doc),
		.name = name,
		.max_nodes = lim->nodes,
		.max_bytes = lim->bytes,
		.max_depth = max_depth,
		.stack = xcalloc((size_t)max_depth + 1, sizeof *r.stack),
		.line = 1,
		.col = 1,
	};
	compares = 0;
	int rc = read_events(&r, p, &dc);
	for (int i = 0; i < r.depth; i++)
		frame_release(&r.stack[i]);
	free(r.stack);
	if (r.anchors)
		tdestroy(r.anchors, no_free);
	fy_parser_destroy(p);
	fy_diag_destroy(diag);
	buf_free(&dc.msg);
	buf_free(&dc.first);
	if (rc < 0) {
		yaml_free(r.doc);
		*err = r.err;
		return -1;
	}
	r.doc->nodes = (uint32_t)r.total;
	r.doc->bytes = (uint32_t)r.bytes;
	r.doc->work = compares;
	*out = r.doc;
	return 0;
}
