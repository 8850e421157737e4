/*
 * template.yaml parser. The YAML is read by yaml.c into a bounded tree,
 * which is walked once; each field is checked against the rules below and
 * every problem recorded with its path, so an operator sees all mistakes at
 * once (OpenSMTPD parse.y style). A pattern is converted into a jansson
 * tree (core-schema typed) and compiled by pattern.c.
 *
 * Bounds (template.h has the cost model): the text is at most
 * TEMPLATE_MAX_BYTES; the whole document, aliases expanded, is at most
 * TEMPLATE_MAX_NODES nodes holding at most TEMPLATE_MAX_EXPANDED_BYTES of
 * scalar text, nested at most TEMPLATE_MAX_DEPTH levels, all checked by
 * yaml.c while reading, before anything is built for an expansion. Every
 * walk below follows aliases, so each one is bounded by those figures, in
 * what it visits and in what it copies: an alias bomb, of many nodes or of
 * one long text, in one rule or spread over many, is an error, not an
 * explosion.
 */
#include "model/template.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/duration.h"
#include "model/secret.h"
#include "io/yaml.h"

/* ---- YAML scalars under the core schema ------------------------------- */

enum ytype { Y_NULL, Y_BOOL, Y_INT, Y_FLOAT, Y_STR, Y_SEQ, Y_MAP, Y_BAD };

struct yscalar {
	enum ytype type;
	const char *text; /* not NUL-terminated */
	size_t len;
	bool b;
	int64_t i;
	double f;
	bool int_overflow; /* an integer too large for int64: kept as a float */
};

static bool text_eq(const char *t, size_t n, const char *s)
{
	return strlen(s) == n && memcmp(t, s, n) == 0;
}

static bool match_int(const char *t, size_t n, int64_t *out, bool *overflow)
{
	size_t i = 0;
	int base = 10;
	bool neg = false;
	*overflow = false;
	if (n > 2 && t[0] == '0' && t[1] == 'o') {
		base = 8;
		i = 2;
	} else if (n > 2 && t[0] == '0' && t[1] == 'x') {
		base = 16;
		i = 2;
	} else if (i < n && (t[i] == '-' || t[i] == '+')) {
		neg = t[i] == '-';
		i++;
	}
	if (i == n)
		return false;
	uint64_t v = 0;
	for (; i < n; i++) {
		int d = hex_digit((unsigned char)t[i]); /* a-f are >= base below 16 */
		if (d < 0 || d >= base)
			return false;
		if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base)
			*overflow = true;
		else
			v = v * (uint64_t)base + (uint64_t)d;
	}
	if (!*overflow && (neg ? v > (uint64_t)INT64_MAX + 1 : v > (uint64_t)INT64_MAX))
		*overflow = true;
	if (!*overflow)
		*out = neg ? (int64_t)(0 - v) : (int64_t)v;
	return true;
}

static bool match_float(const char *t, size_t n, double *out)
{
	size_t i = 0;
	if (i < n && (t[i] == '-' || t[i] == '+'))
		i++;
	const char *rest = t + i;
	size_t rn = n - i;
	if (text_eq(rest, rn, ".inf") || text_eq(rest, rn, ".Inf") || text_eq(rest, rn, ".INF")) {
		*out = t[0] == '-' ? -INFINITY : INFINITY;
		return true;
	}
	if (i == 0 && (text_eq(t, n, ".nan") || text_eq(t, n, ".NaN") || text_eq(t, n, ".NAN"))) {
		*out = NAN;
		return true;
	}
	/* [-+]? ( \. [0-9]+ | [0-9]+ ( \. [0-9]* )? ) ( [eE] [-+]? [0-9]+ )? */
	size_t digits = 0, j = i;
	while (j < n && isdigit((unsigned char)t[j]))
		j++, digits++;
	if (j < n && t[j] == '.') {
		j++;
		while (j < n && isdigit((unsigned char)t[j]))
			j++, digits++;
	}
	if (!digits)
		return false;
	if (j < n && (t[j] == 'e' || t[j] == 'E')) {
		j++;
		if (j < n && (t[j] == '-' || t[j] == '+'))
			j++;
		size_t e = 0;
		while (j < n && isdigit((unsigned char)t[j]))
			j++, e++;
		if (!e)
			return false;
	}
	if (j != n)
		return false;
	char *s = xstrndup(t, n);
	errno = 0;
	*out = strtod(s, NULL);
	free(s);
	return true;
}

/* Types a scalar node by the core schema. */
static void classify(const struct ynode *n, struct yscalar *y)
{
	memset(y, 0, sizeof *y);
	y->text = n->u.s.text;
	y->len = n->u.s.len;
	const char *t = y->text;
	size_t len = y->len;

	if (n->tag != YT_NONE) {
		if (n->tag == YT_STR) {
			y->type = Y_STR;
			return;
		}
		bool ok = false;
		if (n->tag == YT_INT) {
			ok = match_int(t, len, &y->i, &y->int_overflow) && !y->int_overflow;
			y->type = Y_INT;
		} else if (n->tag == YT_FLOAT) {
			ok = match_float(t, len, &y->f);
			if (!ok && match_int(t, len, &y->i, &y->int_overflow)) {
				ok = true;
				y->f = (double)y->i;
			}
			y->type = Y_FLOAT;
		} else if (n->tag == YT_BOOL) {
			ok = true;
			if (text_eq(t, len, "true") || text_eq(t, len, "True") ||
			    text_eq(t, len, "TRUE"))
				y->b = true;
			else if (!(text_eq(t, len, "false") || text_eq(t, len, "False") ||
				   text_eq(t, len, "FALSE")))
				ok = false;
			y->type = Y_BOOL;
		} else if (n->tag == YT_NULL) {
			ok = len == 0 || text_eq(t, len, "~") || text_eq(t, len, "null") ||
			     text_eq(t, len, "Null") || text_eq(t, len, "NULL");
			y->type = Y_NULL;
		}
		if (!ok)
			y->type = Y_BAD;
		return;
	}
	if (!n->plain) {
		y->type = Y_STR;
		return;
	}
	if (len == 0 || text_eq(t, len, "~") || text_eq(t, len, "null") ||
	    text_eq(t, len, "Null") || text_eq(t, len, "NULL")) {
		y->type = Y_NULL;
	} else if (text_eq(t, len, "true") || text_eq(t, len, "True") || text_eq(t, len, "TRUE")) {
		y->type = Y_BOOL;
		y->b = true;
	} else if (text_eq(t, len, "false") || text_eq(t, len, "False") ||
		   text_eq(t, len, "FALSE")) {
		y->type = Y_BOOL;
	} else if (match_int(t, len, &y->i, &y->int_overflow)) {
		if (y->int_overflow) {
			y->type = Y_FLOAT;
			match_float(t, len, &y->f);
		} else {
			y->type = Y_INT;
		}
	} else if (match_float(t, len, &y->f)) {
		y->type = Y_FLOAT;
	} else {
		y->type = Y_STR;
	}
}

static const char *type_name(enum ytype t)
{
	switch (t) {
	case Y_NULL: return "null";
	case Y_BOOL: return "a boolean";
	case Y_INT: return "an integer";
	case Y_FLOAT: return "a number";
	case Y_STR: return "a string";
	case Y_SEQ: return "a list";
	case Y_MAP: return "a map";
	case Y_BAD: return "an invalid tagged value";
	}
	return "?";
}

/* A node's core-schema type; an absent node (NULL) is null. */
static enum ytype node_type(const struct ynode *n, struct yscalar *y)
{
	if (!n) {
		if (y) {
			memset(y, 0, sizeof *y);
			y->text = "";
		}
		return Y_NULL;
	}
	switch (n->type) {
	case YN_SEQ: return Y_SEQ;
	case YN_MAP: return Y_MAP;
	default: {
		struct yscalar tmp;
		classify(n, y ? y : &tmp);
		return y ? y->type : tmp.type;
	}
	}
}

/* A short, printable rendering of a scalar for messages. */
static char *shown(const struct yscalar *y)
{
	size_t n = y->len > 80 ? 80 : y->len;
	char *s = xstrndup(y->text, n);
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == '"' || s[i] == 0x7f)
			s[i] = '?';
	char *out = xasprintf("\"%s%s\"", s, y->len > 80 ? "..." : "");
	free(s);
	return out;
}

/* ---- messages --------------------------------------------------------- */

/* Where the messages go. At most TEMPLATE_MAX_MESSAGES errors and as many
 * warnings are kept; the rest are counted into one last line of each, so
 * 30,000 unknown keys or bad operands cost a count, not 30,000 lines. */
struct ctx {
	struct strlist *errors;
	struct strlist *warnings;
	size_t nerr0, nwarn0;
	size_t more_errors, more_warnings;
};

static void add_error(struct ctx *c, char *line)
{
	if (c->errors->n - c->nerr0 < TEMPLATE_MAX_MESSAGES) {
		strlist_add(c->errors, line);
	} else {
		c->more_errors++;
		free(line);
	}
}

static void add_warning(struct ctx *c, char *line)
{
	if (c->warnings->n - c->nwarn0 < TEMPLATE_MAX_MESSAGES) {
		strlist_add(c->warnings, line);
	} else {
		c->more_warnings++;
		free(line);
	}
}

static void err(struct ctx *c, const char *path, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void err(struct ctx *c, const char *path, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *msg = xvasprintf(fmt, ap);
	va_end(ap);
	add_error(c, xasprintf("%s: %s", path, msg));
	free(msg);
}

/* Adds each line of pattern_compile's messages. */
static void add_lines(struct ctx *c, const char *text)
{
	for (const char *p = text ? text : ""; *p;) {
		size_t n = strcspn(p, "\n");
		if (n)
			add_error(c, xstrndup(p, n));
		p += n;
		if (*p == '\n')
			p++;
	}
}

/* ---- pattern → JSON --------------------------------------------------- */

/* Where a node is, as a chain up to the pattern's own path: the text of a
 * path is only made for a message, so a deep path costs nothing per node. */
struct seg {
	const struct seg *up; /* NULL: key is the whole path */
	const char *key;      /* a map key, or NULL for a list index */
	size_t klen;
	size_t index;
};

static char *seg_path(const struct seg *s)
{
	const struct seg *chain[TEMPLATE_MAX_DEPTH + 2];
	size_t n = 0;
	for (; s && n < ARRAY_LEN(chain); s = s->up)
		chain[n++] = s;
	struct buf b;
	buf_init(&b, 1 << 20); /* paths: at most ~90 bytes per level */
	while (n--) {
		const struct seg *x = chain[n];
		char *part = !x->up   ? xstrdup(x->key)
			     : x->key ? pattern_path_key("", x->key, x->klen)
				      : xasprintf("[%zu]", x->index);
		buf_append(&b, part, strlen(part));
		free(part);
	}
	return buf_steal(&b);
}

/* The first problem of a pattern ends its conversion. */
__attribute__((format(printf, 3, 4))) static void conv_error(struct ctx *c, const struct seg *at,
							     const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *msg = xvasprintf(fmt, ap);
	va_end(ap);
	char *path = seg_path(at);
	add_error(c, xasprintf("%s: %s", path, msg));
	free(path);
	free(msg);
}

/* j, or NULL with the error when jansson could not allocate it. */
static json_t *made(struct ctx *c, const struct seg *at, json_t *j)
{
	if (!j)
		conv_error(c, at, "out of memory building the pattern");
	return j;
}

/* Converts n (its nodes, text and depth bounded by yaml.c, aliases
 * included). NULL exactly when an error was added. */
static json_t *to_json(struct ctx *c, const struct ynode *n, const struct seg *at)
{
	struct yscalar y;
	enum ytype t = node_type(n, &y);
	switch (t) {
	case Y_NULL: return json_null();
	case Y_BOOL: return json_boolean(y.b);
	case Y_INT: return made(c, at, json_integer(y.i));
	case Y_FLOAT:
		if (!isfinite(y.f)) {
			char *s = shown(&y);
			conv_error(c, at, "%s is not a finite number", s);
			free(s);
			return NULL;
		}
		return made(c, at, json_real(y.f));
	case Y_STR: return made(c, at, json_stringn_nocheck(y.text, y.len));
	case Y_BAD: {
		char *s = shown(&y);
		conv_error(c, at, "%s does not match its explicit tag", s);
		free(s);
		return NULL;
	}
	case Y_SEQ: {
		json_t *a = made(c, at, json_array());
		for (uint32_t i = 0; a && i < n->n; i++) {
			struct seg item = {.up = at, .index = i};
			json_t *v = to_json(c, n->u.kids[i], &item);
			/* A failed append has released v. */
			if (!v || json_array_append_new(a, v) < 0) {
				if (v)
					conv_error(c, &item, "out of memory building the pattern");
				json_decref(a);
				return NULL;
			}
		}
		return a;
	}
	case Y_MAP: {
		json_t *o = made(c, at, json_object());
		for (uint32_t i = 0; o && i < n->n; i++) {
			struct yscalar k;
			enum ytype kt = node_type(n->u.kids[2 * i], &k);
			if (kt == Y_SEQ || kt == Y_MAP || kt == Y_BAD) {
				conv_error(c, at, "a pattern key must be a scalar");
				json_decref(o);
				return NULL;
			}
			if (memchr(k.text, '\0', k.len)) {
				conv_error(c, at, "a pattern key contains a NUL byte");
				json_decref(o);
				return NULL;
			}
			struct seg field = {.up = at, .key = k.text, .klen = k.len};
			json_t *v = to_json(c, n->u.kids[2 * i + 1], &field);
			if (!v) {
				json_decref(o);
				return NULL;
			}
			/* k.text is NUL-terminated (yaml.c) and holds no NUL. A
			 * failed set has released v. */
			if (json_object_set_new_nocheck(o, k.text, v) < 0) {
				conv_error(c, &field, "out of memory building the pattern");
				json_decref(o);
				return NULL;
			}
		}
		return o;
	}
	}
	return NULL;
}

/* ---- field helpers ---------------------------------------------------- */

/* Looks up key in a mapping node (NULL when absent). */
static const struct ynode *map_get(const struct ynode *map, const char *key, bool *present)
{
	*present = false;
	for (uint32_t i = 0; i < map->n; i++) {
		struct yscalar k;
		if (node_type(map->u.kids[2 * i], &k) == Y_STR && text_eq(k.text, k.len, key)) {
			*present = true;
			return map->u.kids[2 * i + 1];
		}
	}
	return NULL;
}

/* Whether a string key is known, for check_keys. */
typedef bool key_known_fn(const struct yscalar *key, const void *arg);

/* key_known_fn over a NULL-terminated list of names. */
static bool one_of(const struct yscalar *key, const void *names)
{
	for (const char *const *p = names; *p; p++)
		if (text_eq(key->text, key->len, *p))
			return true;
	return false;
}

/* Warns about keys that are not strings known(key, arg) accepts; errors
 * for keys that are not scalars. */
static void check_keys(struct ctx *c, const struct ynode *map, const char *path,
		       key_known_fn *known, const void *arg)
{
	for (uint32_t i = 0; i < map->n; i++) {
		struct yscalar k;
		enum ytype kt = node_type(map->u.kids[2 * i], &k);
		if (kt == Y_SEQ || kt == Y_MAP || kt == Y_BAD) {
			err(c, *path ? path : "template", "keys must be scalars");
		} else if (kt != Y_STR || !known(&k, arg)) {
			char *s = shown(&k);
			add_warning(c, xasprintf("%s%s%s: unknown key, ignored", path,
						 *path ? "." : "", s));
			free(s);
		}
	}
}

/* A Go duration string > 0 and ≤ 5m; default when absent. */
static int64_t get_timeout(struct ctx *c, const struct ynode *parent, const char *path)
{
	bool present;
	const struct ynode *n = map_get(parent, "timeout", &present);
	if (!present)
		return TEMPLATE_DEFAULT_TIMEOUT_NS;
	char *p = xasprintf("%s.timeout", path);
	struct yscalar y;
	enum ytype t = node_type(n, &y);
	int64_t d = TEMPLATE_DEFAULT_TIMEOUT_NS;
	if (t != Y_STR) {
		err(c, p, "must be a Go duration string such as 6s or 1m30s, not %s", type_name(t));
	} else {
		char *s = xstrndup(y.text, y.len);
		char *q = shown(&y);
		if (duration_parse(s, &d) < 0 || strlen(s) != y.len)
			err(c, p, "%s is not a Go duration (such as 20s or 1m30s)", q);
		else if (d <= 0)
			err(c, p, "%s must be positive", q);
		else if (d > TEMPLATE_MAX_TIMEOUT_NS)
			err(c, p, "%.*s exceeds the maximum of %dm", (int)(y.len > 40 ? 40 : y.len),
			    y.text, TEMPLATE_MAX_TIMEOUT_MINUTES);
		free(q);
		free(s);
	}
	free(p);
	return d;
}

static int get_retries(struct ctx *c, const struct ynode *parent, const char *path)
{
	bool present;
	const struct ynode *n = map_get(parent, "retries", &present);
	if (!present)
		return TEMPLATE_DEFAULT_RETRIES;
	char *p = xasprintf("%s.retries", path);
	struct yscalar y;
	enum ytype t = node_type(n, &y);
	int r = TEMPLATE_DEFAULT_RETRIES;
	if (t != Y_INT) {
		char *q = t == Y_SEQ || t == Y_MAP ? xstrdup(type_name(t)) : shown(&y);
		err(c, p, "must be a non-negative integer, not %s", q);
		free(q);
	} else if (y.i < 0) {
		err(c, p, "%" PRId64 " is negative; must be a non-negative integer", y.i);
	} else if (y.i > TEMPLATE_MAX_RETRIES) {
		err(c, p, "%" PRId64 " exceeds the maximum of %d", y.i, TEMPLATE_MAX_RETRIES);
	} else {
		r = (int)y.i;
	}
	free(p);
	return r;
}

/* ---- the handler rule -------------------------------------------------- */

/*
 * Length of the whitespace character at p[0..n), 0 if there is none: the
 * Unicode White_Space characters, as Go's unicode.IsSpace counts them
 * (ASCII \t \n \v \f \r and space; U+0085, U+00A0, U+1680, U+2000..U+200A,
 * U+2028, U+2029, U+202F, U+205F, U+3000, in UTF-8). The bootstraps
 * (bootstrap.c) check the same set.
 */
static size_t space_at(const unsigned char *p, size_t n)
{
	if (p[0] == ' ' || (p[0] >= '\t' && p[0] <= '\r'))
		return 1;
	if (n >= 2 && p[0] == 0xc2 && (p[1] == 0x85 || p[1] == 0xa0))
		return 2;
	if (n < 3)
		return 0;
	if ((p[0] == 0xe1 && p[1] == 0x9a && p[2] == 0x80) ||
	    (p[0] == 0xe2 && p[1] == 0x80 &&
	     ((p[2] >= 0x80 && p[2] <= 0x8a) || p[2] == 0xa8 || p[2] == 0xa9 || p[2] == 0xaf)) ||
	    (p[0] == 0xe2 && p[1] == 0x81 && p[2] == 0x9f) ||
	    (p[0] == 0xe3 && p[1] == 0x80 && p[2] == 0x80))
		return 3;
	return 0;
}

/* Control and invisible formatting characters (C0, DEL, C1, the soft
 * hyphen, zero-width and bidirectional controls, the BOM): a name holding
 * one can look like another, or drive the terminal it is printed to. */
static bool control_or_format(uint32_t c)
{
	return c < 0x20 || (c >= 0x7f && c <= 0x9f) || c == 0xad || c == 0x61c || c == 0x180e ||
	       (c >= 0x200b && c <= 0x200f) || (c >= 0x202a && c <= 0x202e) ||
	       (c >= 0x2060 && c <= 0x206f) || c == 0xfeff || (c >= 0xfff9 && c <= 0xfffb);
}

static bool ascii_alnum(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* The characters, one by one: no NUL, whitespace, invalid UTF-8, control
 * or formatting character; the last dot's offset in *dot (len if none). */
static const char *handler_chars(const char *s, size_t len, size_t *dot)
{
	*dot = len;
	for (size_t i = 0; i < len;) {
		const unsigned char *p = (const unsigned char *)s + i;
		uint32_t c;
		size_t n;
		if (p[0] == '\0')
			return "no NUL byte";
		if (space_at(p, len - i))
			return "no whitespace";
		if (!(n = utf8_decode(p, len - i, &c)))
			return "not valid UTF-8";
		if (control_or_format(c))
			return "no control or formatting character";
		if (c == '.')
			*dot = i;
		i += n;
	}
	return NULL;
}

#define FUNCTION_RULE \
	"the function is an identifier: a letter, _ or $, then letters, digits, _ or $"

bool template_handler_valid(const char *s, size_t len, const char **why)
{
	size_t dot;
	const char *w = handler_chars(s, len, &dot);
	if (!w && !(dot < len && dot > 0 && dot < len - 1))
		w = "split at the last dot, no empty part";
	/* Beyond ASCII, every character left is allowed in both parts. */
	for (size_t i = 0; !w && i < dot; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c < 0x80 && !ascii_alnum(c) && !strchr("_$-./", c))
			w = "the module has only letters, digits and _ $ - . /";
	}
	for (size_t i = dot + 1; !w && i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		bool digit = c >= '0' && c <= '9';
		if ((c < 0x80 && !(ascii_alnum(c) || c == '_' || c == '$')) ||
		    (digit && i == dot + 1))
			w = FUNCTION_RULE;
	}
	if (why)
		*why = w;
	return w == NULL;
}

/*
 * Why Python's importlib.import_module can never load module m, whatever
 * files exist, or NULL: a leading '.' (a relative import, which needs a
 * package), a '/' (never part of a module name), or an empty part that is
 * not the last ("a..b": "a." is never a package). A trailing empty part
 * is fine: handler "a..b" imports "a.", which loads a/.py, as the original
 * does. Checked for python3.14 only: what validation accepts, the
 * bootstrap can run.
 */
static const char *python_module_problem(const char *m)
{
	if (m[0] == '.')
		return "a leading '.' is a relative import, which needs a package";
	if (strchr(m, '/'))
		return "a '/' is never part of a Python module name";
	if (strstr(m, ".."))
		return "an empty part between two dots is never a Python package";
	return NULL;
}

static void check_python_modules(struct ctx *c, const struct template *t)
{
	if (!t->runtime || strcmp(t->runtime->name, "python3.14") != 0)
		return;
	for (size_t i = 0; i < t->nrules + t->nschedules; i++) {
		bool rule = i < t->nrules;
		const char *handler =
			rule ? t->rules[i].handler : t->schedules[i - t->nrules].handler;
		const char *module = rule ? t->rules[i].module : t->schedules[i - t->nrules].module;
		int index = rule ? t->rules[i].index : t->schedules[i - t->nrules].index;
		const char *why = module ? python_module_problem(module) : NULL;
		if (!why)
			continue; /* fine, or refused as a handler already */
		char *p = xasprintf("%s[%d].handler", rule ? "events" : "schedules", index);
		char h[300], m[300];
		err(c, p, "\"%s\": Python cannot import module \"%s\" (%s)",
		    printable_copy(handler, h, sizeof h, sizeof h - 1),
		    printable_copy(module, m, sizeof m, sizeof m - 1), why);
		free(p);
	}
}

/* handler: the handler rule above, then split at the last dot. The three
 * outputs stay NULL when it is refused. */
static void get_handler(struct ctx *c, const struct ynode *parent, const char *path, char **handler,
			char **module, char **function)
{
	bool present;
	const struct ynode *n = map_get(parent, "handler", &present);
	char *p = xasprintf("%s.handler", path);
	struct yscalar y;
	enum ytype t = node_type(n, &y);
	const char *why;
	if (!present || t == Y_NULL) {
		err(c, p, "is required (module.function, e.g. events.created.handler)");
	} else if (t != Y_STR) {
		err(c, p, "must be a string of the form module.function, not %s", type_name(t));
	} else if (y.len > TEMPLATE_MAX_HANDLER) {
		err(c, p, "longer than %d characters", TEMPLATE_MAX_HANDLER);
	} else if (!template_handler_valid(y.text, y.len, &why)) {
		char *q = shown(&y);
		err(c, p, "%s is not of the form module.function (%s)", q, why);
		free(q);
	} else {
		*handler = xstrndup(y.text, y.len);
		const char *dot = strrchr(*handler, '.');
		*module = xstrndup(*handler, (size_t)(dot - *handler));
		*function = xstrdup(dot + 1);
	}
	free(p);
}

/* ---- name rules ------------------------------------------------------- */

int template_env_name_valid(const char *s)
{
	if (!(isalpha((unsigned char)s[0]) || s[0] == '_'))
		return 0;
	for (const char *p = s; *p; p++)
		if (!(isalnum((unsigned char)*p) || *p == '_') || (unsigned char)*p > 0x7f)
			return 0;
	return 1;
}

/* ---- sections --------------------------------------------------------- */

/* Errors added so far, kept or only counted. */
static size_t errors_seen(const struct ctx *c)
{
	return c->errors->n + c->more_errors;
}

/* pattern: converted to JSON and compiled; NULL exactly when an error was
 * added for it (a rule is never left without its pattern). */
static struct pattern *get_pattern(struct ctx *c, const struct ynode *parent, const char *path,
				   enum pattern_arrays arrays)
{
	bool present;
	const struct ynode *n = map_get(parent, "pattern", &present);
	char *p = xasprintf("%s.pattern", path);
	struct pattern *pattern = NULL;
	size_t seen = errors_seen(c);
	if (!present || node_type(n, NULL) == Y_NULL) {
		err(c, p, "is required (use {} to match every event)");
	} else {
		struct seg at = {.key = p};
		json_t *j = to_json(c, n, &at);
		if (j) {
			struct buf pe;
			buf_init(&pe, 1 << 20);
			if (pattern_compile_arrays(j, p, arrays, &pattern, &pe) != 0)
				add_lines(c, pe.data);
			buf_free(&pe);
			json_decref(j);
		}
	}
	if (!pattern && errors_seen(c) == seen)
		err(c, p, "could not be built (out of memory)");
	free(p);
	return pattern;
}

/* retry: the level's own keys over `top` (the template's, NULL at the top
 * level), into *out; errors as every field's. */
static void retry_node(struct ctx *c, const struct ynode *n, bool present, const char *path,
		       const struct retry_policy *top, struct retry_policy *out)
{
	struct retry_policy own = {0};
	if (present) {
		char *p = *path ? xasprintf("%s.retry", path) : xstrdup("retry");
		struct seg at = {.key = p};
		json_t *j = to_json(c, n, &at);
		struct strlist lines = {0};
		if (j && retry_policy_parse(j, p, &own, &lines) < 0)
			memset(&own, 0, sizeof own);
		for (size_t i = 0; i < lines.n; i++) {
			add_error(c, lines.v[i]);
			lines.v[i] = NULL;
		}
		strlist_free(&lines);
		json_decref(j);
		free(p);
	}
	*out = top ? *top : own;
	if (top) {
		struct retry_policy none = {0};
		retry_policy_merge(out, &none, top, &own);
		out->has_backoff = top->has_backoff || own.has_backoff;
		out->has_max_age = top->has_max_age || own.has_max_age;
		out->has_no_retry = top->has_no_retry || own.has_no_retry;
	}
}

static void get_retry(struct ctx *c, const struct ynode *parent, const char *path,
		      const struct retry_policy *top, struct retry_policy *out)
{
	bool present;
	const struct ynode *n = map_get(parent, "retry", &present);
	retry_node(c, n, present, path, top, out);
}

/* Item i of the list section (events or schedules) as a map, its keys
 * checked against known and its path ("events[2]") in path; NULL, and
 * reported, when it is not a map. */
static const struct ynode *list_item(struct ctx *c, const struct ynode *seq, uint32_t i,
				     const char *section, const char *shape,
				     const char *const *known, char path[static 32])
{
	const struct ynode *item = seq->u.kids[i];
	snprintf_(path, 32, "%s[%u]", section, i);
	if (node_type(item, NULL) != Y_MAP) {
		err(c, path, "must be a map with %s", shape);
		return NULL;
	}
	check_keys(c, item, path, one_of, known);
	return item;
}

static void parse_rules(struct ctx *c, const struct ynode *seq, struct template *t)
{
	uint32_t count = seq->n;
	if (count > TEMPLATE_MAX_ITEMS) {
		err(c, "events", "more than %d rules", TEMPLATE_MAX_ITEMS);
		return;
	}
	t->rules = xcalloc((size_t)count + 1, sizeof *t->rules);
	static const char *const known[] = {"handler", "pattern", "timeout",
					    "retries", "retry",	  NULL};
	for (uint32_t i = 0; i < count; i++) {
		char path[32];
		const struct ynode *item =
			list_item(c, seq, i, "events", "handler and pattern", known, path);
		if (!item)
			continue;
		struct rule r = {.index = (int)i};
		get_handler(c, item, path, &r.handler, &r.module, &r.function);
		r.timeout_ns = get_timeout(c, item, path);
		r.retries = get_retries(c, item, path);
		get_retry(c, item, path, &t->retry, &r.retry);
		r.pattern = get_pattern(c, item, path,
					t->match_arrays_elements ? PATTERN_ARRAYS_ELEMENTS
								 : PATTERN_ARRAYS_VALUES);
		t->rules[t->nrules++] = r;
	}
}

/* cron: a cron expression; s->cron_expr as written, s->cron parsed. */
static void get_cron(struct ctx *c, const struct ynode *parent, const char *path,
		     struct schedule *s)
{
	bool present;
	struct yscalar y;
	const struct ynode *n = map_get(parent, "cron", &present);
	enum ytype t = node_type(n, &y);
	if (!present || t == Y_NULL) {
		err(c, path, "cron is required (e.g. \"0 3 * * *\")");
		return;
	}
	char *p = xasprintf("%s.cron", path);
	if (t != Y_STR) {
		err(c, p, "must be a string such as \"0 3 * * *\", not %s", type_name(t));
	} else {
		s->cron_expr = xstrndup(y.text, y.len);
		char *why = NULL;
		if (strlen(s->cron_expr) != y.len)
			err(c, p, "contains a NUL byte");
		else if (cron_parse(s->cron_expr, &s->cron, &why) < 0)
			err(c, p, "%s", why);
		free(why);
	}
	free(p);
}

/* timezone: an IANA name, UTC when absent; s->timezone as written. */
static void get_timezone(struct ctx *c, const struct ynode *parent, const char *path,
			 struct schedule *s)
{
	bool present;
	struct yscalar y;
	const struct ynode *n = map_get(parent, "timezone", &present);
	enum ytype t = node_type(n, &y);
	char *p = xasprintf("%s.timezone", path);
	if (!present) {
		s->timezone = xstrdup("UTC");
		s->tz = tz_utc();
	} else if (t != Y_STR) {
		err(c, p, "must be an IANA time zone name such as Europe/Rome, not %s",
		    type_name(t));
	} else {
		s->timezone = xstrndup(y.text, y.len);
		char *why = NULL;
		if (strlen(s->timezone) != y.len || tz_load(s->timezone, &s->tz, &why) < 0)
			err(c, p, "%s", why ? why : "invalid time zone");
		free(why);
	}
	free(p);
}

static void parse_schedules(struct ctx *c, const struct ynode *seq, struct template *t)
{
	uint32_t count = seq->n;
	if (count > TEMPLATE_MAX_ITEMS) {
		err(c, "schedules", "more than %d schedules", TEMPLATE_MAX_ITEMS);
		return;
	}
	t->schedules = xcalloc((size_t)count + 1, sizeof *t->schedules);
	static const char *const known[] = {"handler", "cron",	  "timezone",
					    "timeout", "retries", "retry", NULL};
	for (uint32_t i = 0; i < count; i++) {
		char path[32];
		const struct ynode *item =
			list_item(c, seq, i, "schedules", "handler and cron", known, path);
		if (!item)
			continue;
		struct schedule s = {.index = (int)i};
		get_handler(c, item, path, &s.handler, &s.module, &s.function);
		s.timeout_ns = get_timeout(c, item, path);
		s.retries = get_retries(c, item, path);
		get_retry(c, item, path, &t->retry, &s.retry);
		get_cron(c, item, path, &s);
		get_timezone(c, item, path, &s);
		t->schedules[t->nschedules++] = s;
	}
}

/* env / secrets: a map of variable name → scalar text. */
static void parse_vars(struct ctx *c, const struct ynode *map, const char *section,
		       struct env_var **out, size_t *nout)
{
	uint32_t count = map->n;
	if (count > TEMPLATE_MAX_ITEMS) {
		err(c, section, "more than %d variables", TEMPLATE_MAX_ITEMS);
		return;
	}
	*out = xcalloc((size_t)count + 1, sizeof **out);
	bool secrets = strcmp(section, "secrets") == 0;
	for (uint32_t i = 0; i < count; i++) {
		struct yscalar k, v;
		enum ytype kt = node_type(map->u.kids[2 * i], &k);
		if (kt == Y_SEQ || kt == Y_MAP) {
			err(c, section, "variable names must be scalars");
			continue;
		}
		char *name = xstrndup(k.text, k.len);
		char *path = xasprintf("%s.%s", section, name);
		enum ytype vt = node_type(map->u.kids[2 * i + 1], &v);
		if (strlen(name) != k.len || !template_env_name_valid(name)) {
			char *q = shown(&k);
			err(c, section, "%s is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)",
			    q);
			free(q);
		} else if (strcmp(name, "RELAY_HANDLER") == 0) {
			err(c, path, "RELAY_HANDLER is reserved by Relay");
		} else if (vt == Y_SEQ || vt == Y_MAP) {
			err(c, path, "must be a scalar, not %s", type_name(vt));
		} else if (secrets) {
			char *ref = xstrndup(v.text, v.len);
			if (vt != Y_STR || strlen(ref) != v.len || !secret_name_ok(ref)) {
				char *q = shown(&v);
				if (vt != Y_STR)
					err(c, path,
					    "%s is not a valid secret name: it is %s, not a string "
					    "(quote it)",
					    q, type_name(vt));
				else
					err(c, path,
					    "%s is not a valid secret name: " SECRET_NAME_RULE, q);
				free(q);
				free(ref);
			} else {
				(*out)[*nout].name = name;
				(*out)[*nout].value = ref;
				(*nout)++;
				name = NULL;
			}
		} else {
			/* Env values are literal text: `PORT: 8080` is "8080", `FLAG:` is "". */
			(*out)[*nout].name = name;
			(*out)[*nout].value = xstrndup(v.text, v.len);
			(*nout)++;
			name = NULL;
		}
		free(name);
		free(path);
	}
}

/* ---- top-level keys ---------------------------------------------------- */

/* What the rows of top_keys fill in. */
struct top {
	struct ctx *c;
	struct template *t;
	int listed; /* event rules and schedules written, valid or not */
};

static void top_runtime(struct top *top, const struct ynode *n, bool present)
{
	struct yscalar y;
	enum ytype ty = node_type(n, &y);
	if (!present || ty == Y_NULL) {
		err(top->c, "runtime", "is required (one of %s)", runtime_names());
	} else if (ty != Y_STR) {
		err(top->c, "runtime", "must be one of %s, not %s", runtime_names(), type_name(ty));
	} else {
		char *name = xstrndup(y.text, y.len);
		top->t->runtime = runtime_find(name);
		if (!top->t->runtime) {
			char *q = shown(&y);
			err(top->c, "runtime", "unsupported runtime %s (supported: %s)", q,
			    runtime_names());
			free(q);
		}
		free(name);
	}
}

static void top_concurrency(struct top *top, const struct ynode *n, bool present)
{
	top->t->concurrency = TEMPLATE_DEFAULT_CONCURRENCY;
	if (!present)
		return;
	struct yscalar y;
	enum ytype ty = node_type(n, &y);
	if (ty != Y_INT) {
		char *q = ty == Y_SEQ || ty == Y_MAP ? xstrdup(type_name(ty)) : shown(&y);
		err(top->c, "concurrency", "must be a positive integer, not %s%s", q,
		    ty == Y_STR	   ? " (a string)"
		    : ty == Y_BOOL ? " (a boolean)"
				   : "");
		free(q);
	} else if (y.i <= 0) {
		err(top->c, "concurrency",
		    "%" PRId64 " is not positive; must be a positive integer", y.i);
	} else {
		top->t->concurrency = y.i;
	}
}

/* match_arrays: values (the default: an array is one value) or elements (a
 * condition holds for an array when one element satisfies it). Read before
 * events, whose patterns it changes. */
static void top_match_arrays(struct top *top, const struct ynode *n, bool present)
{
	top->t->match_arrays_elements = false;
	if (!present)
		return;
	struct yscalar y;
	enum ytype ty = node_type(n, &y);
	if (ty == Y_STR && text_eq(y.text, y.len, "elements")) {
		top->t->match_arrays_elements = true;
	} else if (ty == Y_STR && text_eq(y.text, y.len, "values")) {
		return;
	} else if (ty == Y_STR) {
		char *q = shown(&y);
		err(top->c, "match_arrays", "must be values or elements, not %s", q);
		free(q);
	} else {
		err(top->c, "match_arrays", "must be values or elements, not %s", type_name(ty));
	}
}

/* warm.idle, when given: a Go duration from 1s to 1h. False on an error. */
static bool warm_idle(struct top *top, const struct ynode *n)
{
	bool here;
	const struct ynode *v = map_get(n, "idle", &here);
	if (!here)
		return true;
	struct yscalar y;
	enum ytype vt = node_type(v, &y);
	if (vt != Y_STR) {
		err(top->c, "warm.idle", "must be a Go duration string such as 60s or 5m, not %s",
		    type_name(vt));
		return false;
	}
	int64_t d = 0;
	char *s = xstrndup(y.text, y.len);
	char *q = shown(&y);
	bool ok = false;
	if (duration_parse(s, &d) < 0 || strlen(s) != y.len)
		err(top->c, "warm.idle", "%s is not a Go duration (such as 60s or 5m)", q);
	else if (d < TEMPLATE_MIN_WARM_IDLE_NS)
		err(top->c, "warm.idle", "%s is below the minimum of 1s", q);
	else if (d > TEMPLATE_MAX_WARM_IDLE_NS)
		err(top->c, "warm.idle", "%s exceeds the maximum of 1h", q);
	else
		ok = true;
	if (ok)
		top->t->warm_idle_ns = d;
	free(q);
	free(s);
	return ok;
}

/* warm.max_uses, when given: an integer from 1 to the maximum. False on
 * an error. */
static bool warm_max_uses(struct top *top, const struct ynode *n)
{
	bool here;
	const struct ynode *v = map_get(n, "max_uses", &here);
	if (!here)
		return true;
	struct yscalar y;
	enum ytype vt = node_type(v, &y);
	if (vt != Y_INT) {
		char *q = vt == Y_SEQ || vt == Y_MAP ? xstrdup(type_name(vt)) : shown(&y);
		err(top->c, "warm.max_uses", "must be an integer from 1 to %d, not %s%s",
		    TEMPLATE_MAX_WARM_MAX_USES, q,
		    vt == Y_STR	   ? " (a string)"
		    : vt == Y_BOOL ? " (a boolean)"
				   : "");
		free(q);
		return false;
	}
	if (y.i < 1) {
		err(top->c, "warm.max_uses",
		    "%" PRId64 " is not positive; must be an integer from 1 to %d", y.i,
		    TEMPLATE_MAX_WARM_MAX_USES);
		return false;
	}
	if (y.i > TEMPLATE_MAX_WARM_MAX_USES) {
		err(top->c, "warm.max_uses", "%" PRId64 " exceeds the maximum of %d", y.i,
		    TEMPLATE_MAX_WARM_MAX_USES);
		return false;
	}
	top->t->warm_max_uses = y.i;
	return true;
}

/* warm: a mapping of idle (a duration, 1s..1h) and max_uses (an integer,
 * 1..100000); {} takes both defaults. An unknown key inside it is an error
 * (a misspelt bound would silently keep a container for an hour). */
static void top_warm(struct top *top, const struct ynode *n, bool present)
{
	struct template *t = top->t;
	t->warm = false;
	t->warm_idle_ns = TEMPLATE_DEFAULT_WARM_IDLE_NS;
	t->warm_max_uses = TEMPLATE_DEFAULT_WARM_MAX_USES;
	if (!present)
		return;
	enum ytype ty = node_type(n, NULL);
	if (ty != Y_MAP) {
		err(top->c, "warm",
		    "must be a map of idle and max_uses (warm: {} for the defaults), not %s",
		    type_name(ty));
		return;
	}
	bool ok = true;
	for (uint32_t i = 0; i < n->n; i++) {
		struct yscalar k;
		enum ytype kt = node_type(n->u.kids[2 * i], &k);
		if (kt != Y_STR) {
			err(top->c, "warm", "keys must be strings (idle, max_uses)");
			ok = false;
		} else if (!text_eq(k.text, k.len, "idle") && !text_eq(k.text, k.len, "max_uses")) {
			char *q = shown(&k);
			err(top->c, "warm", "unknown key %s (warm takes idle and max_uses)", q);
			free(q);
			ok = false;
		}
	}
	/* Both looked at, so that both report their errors. */
	bool idle_ok = warm_idle(top, n), uses_ok = warm_max_uses(top, n);
	t->warm = ok && idle_ok && uses_ok;
}

/* retry: the function's default retry policy (retry.h); read before the
 * rules and schedules, which merge their own keys over it. */
static void top_retry(struct top *top, const struct ynode *n, bool present)
{
	retry_node(top->c, n, present, "", NULL, &top->t->retry);
}

/* key_concurrency: per-key concurrency and order (keyconc.h). */
static void top_key_concurrency(struct top *top, const struct ynode *n, bool present)
{
	if (!present)
		return;
	struct seg at = {.key = "key_concurrency"};
	json_t *j = to_json(top->c, n, &at);
	struct strlist lines = {0};
	if (j && keyconc_parse(j, &top->t->key, &lines) < 0)
		keyconc_free(&top->t->key);
	for (size_t i = 0; i < lines.n; i++) {
		add_error(top->c, lines.v[i]);
		lines.v[i] = NULL;
	}
	strlist_free(&lines);
	json_decref(j);
}

/* events or schedules: a list, parsed by parse; null is none. */
static void top_list(struct top *top, const struct ynode *n, const char *key, const char *what,
		     void (*parse)(struct ctx *, const struct ynode *, struct template *))
{
	enum ytype ty = node_type(n, NULL);
	if (ty == Y_SEQ) {
		top->listed += (int)n->n;
		parse(top->c, n, top->t);
	} else if (ty != Y_NULL) {
		top->listed++;
		err(top->c, key, "must be a list of %s, not %s", what, type_name(ty));
	}
}

static void top_events(struct top *top, const struct ynode *n, bool present)
{
	top_list(top, n, "events", "rules", parse_rules);
}

static void top_schedules(struct top *top, const struct ynode *n, bool present)
{
	top_list(top, n, "schedules", "schedules", parse_schedules);
}

/* Over events and schedules: each handler's module importable (Python),
 * and at least one of them written. */
static void check_handlers(struct top *top, const struct ynode *n, bool present)
{
	check_python_modules(top->c, top->t);
	/* Rules that failed validation were reported already; only a template
	 * that lists neither rules nor schedules gets this error. */
	if (top->listed == 0)
		strlist_addf(top->c->errors,
			     "events: a function needs at least one event rule or schedule");
}

/* env or secrets: a map, parsed by parse_vars; null is none. */
static void top_vars(struct top *top, const struct ynode *n, const char *key, const char *what,
		     struct env_var **out, size_t *nout)
{
	enum ytype ty = node_type(n, NULL);
	if (ty == Y_MAP)
		parse_vars(top->c, n, key, out, nout);
	else if (ty != Y_NULL)
		err(top->c, key, "must be a map of %s, not %s", what, type_name(ty));
}

static void top_env(struct top *top, const struct ynode *n, bool present)
{
	top_vars(top, n, "env", "NAME: value", &top->t->env, &top->t->nenv);
}

static void top_secrets(struct top *top, const struct ynode *n, bool present)
{
	top_vars(top, n, "secrets", "NAME: secret-name", &top->t->secrets, &top->t->nsecrets);
}

/* Over env and secrets: no variable in both. */
static void check_vars(struct top *top, const struct ynode *n, bool present)
{
	const struct template *t = top->t;
	for (size_t i = 0; i < t->nsecrets; i++)
		for (size_t j = 0; j < t->nenv; j++)
			if (strcmp(t->secrets[i].name, t->env[j].name) == 0) {
				char *p = xasprintf("secrets.%s", t->secrets[i].name);
				err(top->c, p, "%s is defined in both env and secrets",
				    t->secrets[i].name);
				free(p);
			}
}

/*
 * The top-level keys, each with what parses its value (n NULL and present
 * false when the key is absent). Rows run in this order, which is the
 * order of their messages; a row without a key is a check over what the
 * rows above it filled in. check_keys warns about any key not named here.
 */
static const struct top_key {
	const char *key;
	void (*parse)(struct top *top, const struct ynode *n, bool present);
} top_keys[] = {
	{"runtime", top_runtime},
	{"concurrency", top_concurrency},
	{"match_arrays", top_match_arrays},
	{"retry", top_retry},
	{"key_concurrency", top_key_concurrency},
	{"events", top_events},
	{"schedules", top_schedules},
	{NULL, check_handlers},
	{"env", top_env},
	{"secrets", top_secrets},
	{NULL, check_vars},
	{"warm", top_warm},
};

static bool top_key_known(const struct yscalar *key, const void *unused)
{
	for (size_t i = 0; i < ARRAY_LEN(top_keys); i++)
		if (top_keys[i].key && text_eq(key->text, key->len, top_keys[i].key))
			return true;
	return false;
}

static void parse_top(struct ctx *c, const struct ynode *root, struct template *t)
{
	check_keys(c, root, "", top_key_known, NULL);
	struct top top = {c, t, 0};
	for (size_t i = 0; i < ARRAY_LEN(top_keys); i++) {
		bool present = false;
		const struct ynode *n =
			top_keys[i].key ? map_get(root, top_keys[i].key, &present) : NULL;
		top_keys[i].parse(&top, n, present);
	}
}

/* ---- document --------------------------------------------------------- */

/* Offset of the first byte that is not part of valid UTF-8, or len. */
static size_t utf8_invalid_at(const char *text, size_t len)
{
	const unsigned char *s = (const unsigned char *)text;
	size_t i = 0;
	while (i < len) {
		uint32_t rune;
		size_t n = utf8_decode(s + i, len - i, &rune);
		if (n == 0)
			return i;
		i += n;
	}
	return len;
}

/* True when text holds nothing but blank lines, comments and markers. */
static bool yaml_is_blank(const char *text, size_t len)
{
	size_t i = 0;
	while (i < len) {
		while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r'))
			i++;
		if (i < len && text[i] == '#') {
			while (i < len && text[i] != '\n')
				i++;
		} else if (len - i >= 3 &&
			   (memcmp(text + i, "---", 3) == 0 || memcmp(text + i, "...", 3) == 0)) {
			i += 3;
			continue;
		}
		if (i < len && text[i] != '\n')
			return false;
		i++;
	}
	return true;
}

/* The document's root map, or NULL with the reason added to errors: too
 * large, not UTF-8 text, not YAML, empty or not a map. *doc owns the tree
 * (possibly set on failure too). */
static const struct ynode *read_root(const char *text, size_t len, struct strlist *errors,
				     struct yaml_doc **doc)
{
	if (len > TEMPLATE_MAX_BYTES) {
		strlist_addf(errors, "template.yaml: larger than %d bytes", TEMPLATE_MAX_BYTES);
		return NULL;
	}
	if (memchr(text, '\0', len)) {
		strlist_addf(errors, "template.yaml: contains a NUL byte");
		return NULL;
	}
	/* YAML is UTF-8 text; checking first also keeps libfyaml 0.7 away from
	 * truncated sequences, on which its scanner can loop forever. */
	size_t bad = utf8_invalid_at(text, len);
	if (bad < len) {
		strlist_addf(errors, "template.yaml: not valid UTF-8 (at byte %zu)", bad);
		return NULL;
	}
	char *yerr = NULL;
	static const struct ylimits lim = {TEMPLATE_MAX_NODES, TEMPLATE_MAX_DEPTH,
					   TEMPLATE_MAX_LINE, TEMPLATE_MAX_EXPANDED_BYTES};
	if (yaml_parse(text, len, "template.yaml", &lim, doc, &yerr) < 0) {
		if (yaml_is_blank(text, len)) {
			free(yerr);
			strlist_addf(errors, "template.yaml: empty (runtime and events or "
					     "schedules are required)");
		} else {
			strlist_add(errors, yerr);
		}
		return NULL;
	}
	const struct ynode *root = yaml_root(*doc);
	enum ytype rt = node_type(root, NULL);
	if (!root || rt == Y_NULL) {
		strlist_addf(errors,
			     "template.yaml: empty (runtime and events or schedules are required)");
		return NULL;
	}
	if (rt != Y_MAP) {
		strlist_addf(
			errors,
			"template.yaml: must be a map of runtime, events, schedules, ...; found %s",
			type_name(rt));
		return NULL;
	}
	return root;
}

int template_parse(const char *text, size_t len, struct template **out, struct strlist *errors,
		   struct strlist *warnings)
{
	*out = NULL;
	size_t nerr0 = errors->n;
	struct ctx c = {errors, warnings, nerr0, warnings->n, 0, 0};
	struct yaml_doc *doc = NULL;
	struct template *t = NULL;
	const struct ynode *root = read_root(text, len, errors, &doc);
	if (root) {
		t = xcalloc(1, sizeof *t);
		parse_top(&c, root, t);
	}
	if (c.more_errors)
		strlist_addf(errors, "template.yaml: %zu more errors not shown", c.more_errors);
	if (c.more_warnings)
		strlist_addf(warnings, "template.yaml: %zu more warnings not shown",
			     c.more_warnings);
	yaml_free(doc);
	if (errors->n > nerr0) {
		template_free(t);
		return -1;
	}
	*out = t;
	return 0;
}

void template_free(struct template *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->nrules; i++) {
		free(t->rules[i].handler);
		free(t->rules[i].module);
		free(t->rules[i].function);
		pattern_free(t->rules[i].pattern);
	}
	free(t->rules);
	for (size_t i = 0; i < t->nschedules; i++) {
		free(t->schedules[i].handler);
		free(t->schedules[i].module);
		free(t->schedules[i].function);
		free(t->schedules[i].cron_expr);
		cron_free(t->schedules[i].cron);
		free(t->schedules[i].timezone);
	}
	free(t->schedules);
	for (size_t i = 0; i < t->nenv; i++) {
		free(t->env[i].name);
		free(t->env[i].value);
	}
	free(t->env);
	for (size_t i = 0; i < t->nsecrets; i++) {
		free(t->secrets[i].name);
		free(t->secrets[i].value);
	}
	free(t->secrets);
	keyconc_free(&t->key);
	free(t);
}
