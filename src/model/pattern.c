/*
 * Pattern compilation and matching (the pattern-set index is
 * pattern_set.c; the string and address operators pattern_ops.c).
 *
 * Compilation turns the jansson tree handed over by the template parser into
 * a small immutable tree (pattern_internal.h): a node is a list of field
 * conditions (AND) and the branches of its $or; a condition is either a
 * nested node or a set of operator operands (OR). Validation walks the whole
 * tree and keeps going after an error, so one template load reports every
 * problem (OpenSMTPD style); a pattern with any error is discarded.
 */
#include "model/pattern.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/duration.h"
#include "base/rfc3339.h"
#include "model/pattern_internal.h"

/* ------------------------------------------------------------------ */
/* messages                                                            */

struct compiler {
	struct buf *errors;
	int nerr;
};

/* Where a value is: a chain up to the pattern's own path, made into text
 * only for a message, so a deep path costs nothing per value compiled. */
struct at {
	const struct at *up; /* NULL: key is the whole path */
	const char *key;     /* a field or operator name; NULL: list element */
	size_t klen;
	size_t index;
};

/* The chain as text, built once from the root (O(path length)). */
static char *at_path(const struct at *a)
{
	/* A level is at most a field, or $or and a branch index; a leaf adds
	 * an operator and two list indexes. */
	const struct at *chain[2 * PATTERN_MAX_DEPTH + 8];
	size_t n = 0;
	for (; a && n < ARRAY_LEN(chain); a = a->up)
		chain[n++] = a;
	struct buf b;
	buf_init(&b, 1 << 20); /* paths: at most ~90 bytes per level */
	while (n--) {
		const struct at *x = chain[n];
		if (!x->up) {
			buf_append(&b, x->key, strlen(x->key));
		} else if (!x->key) {
			buf_appendf(&b, "[%zu]", x->index);
		} else {
			char *seg = pattern_path_key("", x->key, x->klen);
			buf_append(&b, seg, strlen(seg));
			free(seg);
		}
	}
	return buf_steal(&b);
}

__attribute__((format(printf, 3, 4))) static void report(struct compiler *c, const struct at *at,
							 const char *fmt, ...)
{
	/* Past PATTERN_MAX_MESSAGES errors are counted, not formatted: 30,000
	 * bad operands at the bottom of a deep path took seconds to describe. */
	if (c->nerr++ >= PATTERN_MAX_MESSAGES || !c->errors)
		return;
	va_list ap;
	va_start(ap, fmt);
	char *msg = xvasprintf(fmt, ap);
	va_end(ap);
	char *path = at_path(at);
	buf_appendf(c->errors, "%s: %s\n", path, msg);
	free(path);
	free(msg);
}

#define QUOTE_MAX 80

/* s as a Go-style double-quoted literal, at most QUOTE_MAX bytes of it
 * (cut at a character boundary, "..." appended). malloc'd. */
static char *quote(const char *s, size_t n)
{
	struct buf b;
	buf_init(&b, 8 * QUOTE_MAX);
	bool cut = false;
	if (n > QUOTE_MAX) {
		n = QUOTE_MAX;
		while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
			n--;
		cut = true;
	}
	buf_append(&b, "\"", 1);
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch == '"' || ch == '\\') {
			char e[2] = {'\\', (char)ch};
			buf_append(&b, e, 2);
		} else if (ch == '\n') {
			buf_append(&b, "\\n", 2);
		} else if (ch == '\t') {
			buf_append(&b, "\\t", 2);
		} else if (ch == '\r') {
			buf_append(&b, "\\r", 2);
		} else if (ch < 0x20 || ch == 0x7f) {
			buf_appendf(&b, "\\x%02x", ch);
		} else {
			buf_append(&b, &s[i], 1);
		}
	}
	buf_append(&b, "\"", 1);
	if (cut)
		buf_append(&b, "...", 3);
	return buf_steal(&b);
}

/* "string \"x\"", "integer 5", "boolean true", "map"...: malloc'd. */
static char *describe(const json_t *j)
{
	switch (json_typeof(j)) {
	case JSON_STRING: {
		char *q = quote(json_string_value(j), json_string_length(j));
		char *r = xasprintf("string %s", q);
		free(q);
		return r;
	}
	case JSON_INTEGER: return xasprintf("integer %lld", (long long)json_integer_value(j));
	case JSON_REAL: return xasprintf("number %.17g", json_real_value(j));
	case JSON_TRUE: return xstrdup("boolean true");
	case JSON_FALSE: return xstrdup("boolean false");
	case JSON_NULL: return xstrdup("null");
	case JSON_ARRAY: return xstrdup("list");
	case JSON_OBJECT: return xstrdup("map");
	}
	return xstrdup("unknown value");
}

/* report() of "<what>, got <v described>". */
static void report_got(struct compiler *c, const struct at *at, const json_t *v, const char *what)
{
	char *d = describe(v);
	report(c, at, "%s, got %s", what, d);
	free(d);
}

char *pattern_path_key(const char *path, const char *key, size_t klen)
{
	/* A long key is quoted, hence cut: a path stays short. */
	bool plain = klen > 0 && klen <= QUOTE_MAX;
	if (klen == 3 && memcmp(key, "$or", 3) == 0)
		return xasprintf("%s.$or", path);
	for (size_t i = 0; i < klen && plain; i++) {
		unsigned char ch = (unsigned char)key[i];
		plain = ch >= 0x80 || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
			(ch >= '0' && ch <= '9') || ch == '_' || ch == '-';
	}
	if (plain)
		return xasprintf("%s.%.*s", path, (int)klen, key);
	char *q = quote(key, klen);
	char *r = xasprintf("%s[%s]", path, q);
	free(q);
	return r;
}

/* ------------------------------------------------------------------ */
/* compilation                                                         */

enum op {
	OP_EQUALS,
	OP_PREFIX,
	OP_SUFFIX,
	OP_EXISTS,
	OP_GT,
	OP_GTE,
	OP_LT,
	OP_LTE,
	OP_ANYTHING_BUT,
	OP_FOLD,
	OP_WILDCARD,
	OP_CIDR,
	OP_NUMERIC,
};

/* Indexed by enum op. */
static const char *const operators[] = {
	"equals",   "prefix", "suffix",	 "exists",	 "gt",
	"gte",	    "lt",     "lte",	 "anything-but", "equals-ignore-case",
	"wildcard", "cidr",   "numeric",
};

static int operator_index(const char *key, size_t klen)
{
	for (size_t i = 0; i < ARRAY_LEN(operators); i++)
		if (strlen(operators[i]) == klen && memcmp(operators[i], key, klen) == 0)
			return (int)i;
	return -1;
}

static bool is_scalar(const json_t *j)
{
	return json_is_string(j) || json_is_number(j) || json_is_boolean(j) || json_is_null(j);
}

static void scalar_from_json(const json_t *j, struct scalar *s)
{
	memset(s, 0, sizeof *s);
	switch (json_typeof(j)) {
	case JSON_STRING:
		s->kind = SC_STRING;
		s->len = json_string_length(j);
		s->s = xstrndup(json_string_value(j), s->len);
		break;
	case JSON_INTEGER:
		s->kind = SC_INT;
		s->i = (int64_t)json_integer_value(j);
		break;
	case JSON_REAL:
		s->kind = SC_REAL;
		s->d = json_real_value(j);
		break;
	case JSON_TRUE: s->kind = SC_TRUE; break;
	case JSON_FALSE: s->kind = SC_FALSE; break;
	default: s->kind = SC_NULL; break;
	}
}

/* "now()", "now()+D" or "now()-D" with D an unsigned Go duration. */
static int parse_temporal(const char *s, size_t n, int64_t *offset)
{
	if (n < 5 || memcmp(s, "now()", 5) != 0)
		return -1;
	if (n == 5) {
		*offset = 0;
		return 0;
	}
	char sign = s[5];
	if ((sign != '+' && sign != '-') || n == 6 || s[6] == '+' || s[6] == '-')
		return -1;
	if (memchr(s, '\0', n))
		return -1;
	int64_t d;
	if (duration_parse_n(s + 6, n - 6, &d) < 0)
		return -1;
	*offset = sign == '-' ? -d : d;
	return 0;
}

/* The operands of one operator: a non-empty list, or (allow_single) one
 * value. Calls each() for every element with its place; reserve() first
 * learns how many there may be, so arrays grow once, not per element. */
typedef void (*operand_fn)(struct compiler *c, const json_t *v, const struct at *at, void *arg);

static void each_operand(struct compiler *c, const json_t *v, const struct at *at,
			 bool allow_single, void (*reserve)(void *arg, size_t n), operand_fn fn,
			 void *arg)
{
	if (json_is_array(v)) {
		size_t n = json_array_size(v);
		if (n == 0) {
			report(c, at, "empty list matches nothing");
			return;
		}
		reserve(arg, n);
		for (size_t i = 0; i < n; i++) {
			struct at item = {.up = at, .index = i};
			fn(c, json_array_get(v, i), &item, arg);
		}
		return;
	}
	if (!allow_single) {
		report_got(c, at, v, "must be a list");
		return;
	}
	reserve(arg, 1);
	fn(c, v, at, arg);
}

struct scalars {
	struct scalar *v;
	size_t n;
	bool strings_only;
};

static void reserve_scalars(void *arg, size_t more)
{
	struct scalars *ss = arg;
	ss->v = xrealloc(ss->v, (ss->n + more) * sizeof *ss->v);
}

static void add_scalar(struct compiler *c, const json_t *v, const struct at *at, void *arg)
{
	struct scalars *ss = arg;
	if (ss->strings_only ? !json_is_string(v) : !is_scalar(v)) {
		report_got(c, at, v,
			   ss->strings_only
				   ? "must be a string"
				   : "values must be scalars (string, number, boolean or null)");
		return;
	}
	scalar_from_json(v, &ss->v[ss->n++]);
}

struct cmps {
	struct cmp *v;
	size_t n;
	enum cmp_op op;
};

static void reserve_cmps(void *arg, size_t more)
{
	struct cmps *cs = arg;
	cs->v = xrealloc(cs->v, (cs->n + more) * sizeof *cs->v);
}

static void add_cmp(struct compiler *c, const json_t *v, const struct at *at, void *arg)
{
	struct cmps *cs = arg;
	struct cmp cm = {.op = cs->op};
	if (json_is_number(v)) {
		scalar_from_json(v, &cm.num);
	} else if (json_is_string(v)) {
		if (parse_temporal(json_string_value(v), json_string_length(v), &cm.offset_ns) <
		    0) {
			char *q = quote(json_string_value(v), json_string_length(v));
			report(c, at,
			       "invalid temporal operand %s (use now() or now()±<Go duration>)", q);
			free(q);
			return;
		}
		cm.temporal = true;
	} else {
		report_got(c, at, v, "must be a number or a now() expression");
		return;
	}
	cs->v[cs->n++] = cm;
}

/* The string operands of equals-ignore-case, wildcard and cidr, and of
 * anything-but's string operators (STR_PLAIN: prefix, suffix). */
enum str_kind { STR_PLAIN, STR_FOLD, STR_GLOB, STR_CIDR };

struct strs {
	enum str_kind kind;
	struct scalar *v; /* STR_PLAIN, STR_FOLD */
	struct pattern_glob *g;
	struct pattern_cidr *cidr;
	size_t n;
};

static void reserve_strs(void *arg, size_t more)
{
	struct strs *ss = arg;
	if (ss->kind == STR_GLOB)
		ss->g = xrealloc(ss->g, (ss->n + more) * sizeof *ss->g);
	else if (ss->kind == STR_CIDR)
		ss->cidr = xrealloc(ss->cidr, (ss->n + more) * sizeof *ss->cidr);
	else
		ss->v = xrealloc(ss->v, (ss->n + more) * sizeof *ss->v);
}

static void add_str(struct compiler *c, const json_t *v, const struct at *at, void *arg)
{
	struct strs *ss = arg;
	if (!json_is_string(v)) {
		report_got(c, at, v, "must be a string");
		return;
	}
	const char *s = json_string_value(v);
	size_t n = json_string_length(v);
	char *why = NULL;
	switch (ss->kind) {
	case STR_PLAIN: scalar_from_json(v, &ss->v[ss->n++]); return;
	case STR_FOLD: {
		struct scalar *sc = &ss->v[ss->n++];
		memset(sc, 0, sizeof *sc);
		sc->kind = SC_STRING;
		sc->s = pattern_fold(s, n, &sc->len);
		return;
	}
	case STR_GLOB:
		if (pattern_glob_compile(s, n, &ss->g[ss->n], &why) == 0) {
			ss->n++;
			return;
		}
		break;
	case STR_CIDR:
		if (pattern_cidr_parse(s, n, &ss->cidr[ss->n], &why) == 0) {
			ss->n++;
			return;
		}
		break;
	}
	char *q = quote(s, n);
	report(c, at, "%s %s", q, why);
	free(q);
	free(why);
}

/* Indexed by enum cmp_op. */
static const char *const cmp_names[] = {">", ">=", "<", "<=", "="};

/* One numeric range: operator and number pairs, all of which must hold. */
static void compile_range(struct compiler *c, const json_t *list, const struct at *at,
			  struct range *r)
{
	size_t n = json_array_size(list);
	if (n == 0) {
		report(c, at, "empty list matches nothing");
		return;
	}
	if (n % 2) {
		report(c, at, "must be pairs of an operator and a number, got %zu elements", n);
		return;
	}
	r->c = xcalloc(n / 2, sizeof *r->c);
	for (size_t i = 0; i < n; i += 2) {
		const json_t *op = json_array_get(list, i), *num = json_array_get(list, i + 1);
		struct at po = {.up = at, .index = i}, pn = {.up = at, .index = i + 1};
		int k = -1;
		for (size_t j = 0; json_is_string(op) && j < ARRAY_LEN(cmp_names); j++)
			if (strlen(cmp_names[j]) == json_string_length(op) &&
			    memcmp(cmp_names[j], json_string_value(op), json_string_length(op)) ==
				    0)
				k = (int)j;
		if (k < 0)
			report_got(c, &po, op, "unknown operator: must be one of =, <, <=, >, >=");
		if (!json_is_number(num))
			report_got(c, &pn, num, "must be a number");
		if (k >= 0 && json_is_number(num)) {
			struct cmp *cm = &r->c[r->n++];
			cm->op = (enum cmp_op)k;
			scalar_from_json(num, &cm->num);
		}
	}
}

/* numeric: one range, or a list of ranges (any of which may hold). */
static void compile_numeric(struct compiler *c, const json_t *v, const struct at *at,
			    struct cond *cd)
{
	if (!json_is_array(v)) {
		report_got(c, at, v, "must be a list such as [\">\", 0, \"<=\", 5]");
		return;
	}
	size_t n = json_array_size(v);
	if (n == 0 || !json_is_array(json_array_get(v, 0))) {
		cd->rng = xcalloc(1, sizeof *cd->rng);
		cd->nrng = 1;
		compile_range(c, v, at, &cd->rng[0]);
		return;
	}
	cd->rng = xcalloc(n, sizeof *cd->rng);
	for (size_t i = 0; i < n; i++) {
		const json_t *item = json_array_get(v, i);
		struct at p = {.up = at, .index = i};
		if (!json_is_array(item)) {
			report_got(c, &p, item,
				   "must be a range such as [\">\", 0], as the first element is");
			continue;
		}
		compile_range(c, item, &p, &cd->rng[cd->nrng++]);
	}
}

static const struct {
	const char *name;
	enum neg_kind kind;
} neg_ops[] = {
	{"prefix", NEG_PREFIX},
	{"suffix", NEG_SUFFIX},
	{"equals-ignore-case", NEG_FOLD},
	{"wildcard", NEG_WILDCARD},
};

/* anything-but: a value or a list of values, or a map of one string
 * operator whose matches it excludes. */
static void compile_anything_but(struct compiler *c, const json_t *v, const struct at *at,
				 struct cond *cd)
{
	if (!json_is_object(v)) {
		struct scalars ss = {0};
		each_operand(c, v, at, true, reserve_scalars, add_scalar, &ss);
		cd->neg = NEG_VALUES;
		cd->negv = ss.v;
		cd->nnegv = ss.n;
		return;
	}
	if (json_object_size(v) != 1) {
		report(c, at,
		       "must be a list of values or a map of one operator (prefix, suffix, "
		       "equals-ignore-case or wildcard), got a map of %zu keys",
		       json_object_size(v));
		return;
	}
	const char *key;
	size_t klen;
	const json_t *sub;
	json_object_keylen_foreach((json_t *)v, key, klen, sub)
	{
		struct at p = {.up = at, .key = key, .klen = klen};
		enum neg_kind kind = NEG_NONE;
		for (size_t i = 0; i < ARRAY_LEN(neg_ops); i++)
			if (strlen(neg_ops[i].name) == klen &&
			    memcmp(neg_ops[i].name, key, klen) == 0)
				kind = neg_ops[i].kind;
		if (kind == NEG_NONE) {
			char *q = quote(key, klen);
			report(c, &p,
			       "unknown operator %s (anything-but takes a list of values or one of "
			       "prefix, suffix, equals-ignore-case, wildcard)",
			       q);
			free(q);
			continue;
		}
		struct strs ss = {.kind = kind == NEG_WILDCARD ? STR_GLOB
					  : kind == NEG_FOLD   ? STR_FOLD
							       : STR_PLAIN};
		each_operand(c, sub, &p, true, reserve_strs, add_str, &ss);
		cd->neg = kind;
		if (kind == NEG_WILDCARD) {
			cd->negglob = ss.g;
			cd->nnegglob = ss.n;
		} else {
			cd->negv = ss.v;
			cd->nnegv = ss.n;
		}
	}
}

static void compile_strs(struct compiler *c, const json_t *v, const struct at *at, enum op op,
			 struct cond *cd)
{
	struct strs ss = {.kind = op == OP_FOLD	      ? STR_FOLD
				  : op == OP_WILDCARD ? STR_GLOB
						      : STR_CIDR};
	each_operand(c, v, at, true, reserve_strs, add_str, &ss);
	if (op == OP_FOLD) {
		cd->fold = ss.v;
		cd->nfold = ss.n;
	} else if (op == OP_WILDCARD) {
		cd->glob = ss.g;
		cd->nglob = ss.n;
	} else {
		cd->cidr = ss.cidr;
		cd->ncidr = ss.n;
	}
}

static void compile_node(struct compiler *c, const json_t *obj, const struct at *at, int depth,
			 struct node *out, bool top);

static void compile_ops(struct compiler *c, const json_t *obj, const struct at *at, struct cond *cd)
{
	const char *key;
	size_t klen;
	const json_t *v;
	json_object_keylen_foreach((json_t *)obj, key, klen, v)
	{
		int op = operator_index(key, klen);
		struct at p = {.up = at, .key = key, .klen = klen};
		switch (op) {
		case OP_EQUALS: {
			struct scalars ss = {.v = cd->eq, .n = cd->neq};
			each_operand(c, v, &p, true, reserve_scalars, add_scalar, &ss);
			cd->eq = ss.v;
			cd->neq = ss.n;
			break;
		}
		case OP_PREFIX:
		case OP_SUFFIX: {
			struct scalars ss = {.v = op == 1 ? cd->pre : cd->suf,
					     .n = op == 1 ? cd->npre : cd->nsuf,
					     .strings_only = true};
			each_operand(c, v, &p, true, reserve_scalars, add_scalar, &ss);
			if (op == 1) {
				cd->pre = ss.v;
				cd->npre = ss.n;
			} else {
				cd->suf = ss.v;
				cd->nsuf = ss.n;
			}
			break;
		}
		case OP_EXISTS:
			if (json_is_boolean(v)) {
				cd->exists = json_is_true(v);
			} else {
				report_got(c, &p, v, "must be true or false");
			}
			break;
		case OP_GT:
		case OP_GTE:
		case OP_LT:
		case OP_LTE: {
			struct cmps cs = {
				.v = cd->cmp, .n = cd->ncmp, .op = (enum cmp_op)(op - OP_GT)};
			each_operand(c, v, &p, true, reserve_cmps, add_cmp, &cs);
			cd->cmp = cs.v;
			cd->ncmp = cs.n;
			break;
		}
		case OP_ANYTHING_BUT: compile_anything_but(c, v, &p, cd); break;
		case OP_FOLD:
		case OP_WILDCARD:
		case OP_CIDR: compile_strs(c, v, &p, (enum op)op, cd); break;
		case OP_NUMERIC: compile_numeric(c, v, &p, cd); break;
		}
	}
}

/* Names of up to three keys of obj that are (want_ops) or are not operators. */
static char *key_names(const json_t *obj, bool want_ops)
{
	struct buf b;
	buf_init(&b, 4096);
	const char *key;
	size_t klen;
	const json_t *v;
	int shown = 0, total = 0;
	json_object_keylen_foreach((json_t *)obj, key, klen, v)
	{
		if ((operator_index(key, klen) >= 0) != want_ops)
			continue;
		if (total++ >= 3)
			continue;
		char *q = quote(key, klen);
		buf_appendf(&b, "%s%s", shown++ ? ", " : "", q);
		free(q);
	}
	if (total > 3)
		buf_appendf(&b, ", ...");
	return buf_steal(&b);
}

static void compile_cond(struct compiler *c, const json_t *v, const struct at *at, int depth,
			 struct cond *cd)
{
	cd->exists = -1;
	if (json_is_array(v)) {
		struct scalars ss = {0};
		each_operand(c, v, at, false, reserve_scalars, add_scalar, &ss);
		cd->eq = ss.v;
		cd->neq = ss.n;
		return;
	}
	if (!json_is_object(v)) {
		report_got(c, at, v,
			   "condition must be a list of values, an operator map or a nested field "
			   "map");
		return;
	}
	if (json_object_size(v) == 0) {
		report(c, at, "empty map (use exists: true to test presence)");
		return;
	}
	size_t nops = 0;
	const char *key;
	size_t klen;
	const json_t *sub;
	json_object_keylen_foreach((json_t *)v, key, klen, sub)
	{
		if (operator_index(key, klen) >= 0)
			nops++;
	}
	if (nops && nops != json_object_size(v)) {
		char *ops = key_names(v, true), *fields = key_names(v, false);
		report(c, at, "map mixes operator keys (%s) with field keys (%s)", ops, fields);
		free(ops);
		free(fields);
		return;
	}
	if (nops) {
		compile_ops(c, v, at, cd);
		return;
	}
	if (depth >= PATTERN_MAX_DEPTH) {
		report(c, at, "pattern nested deeper than %d levels", PATTERN_MAX_DEPTH);
		return;
	}
	cd->nested = xcalloc(1, sizeof *cd->nested);
	compile_node(c, v, at, depth + 1, cd->nested, false);
}

/* $or: a list of 2 to PATTERN_MAX_OR_BRANCHES field maps, each nested one
 * level deeper than the map holding it. */
static void compile_alts(struct compiler *c, const json_t *v, const struct at *at, int depth,
			 struct node *out)
{
	if (!json_is_array(v)) {
		report_got(c, at, v, "must be a list of at least 2 patterns");
		return;
	}
	size_t n = json_array_size(v);
	if (n < 2) {
		report(c, at, "needs at least 2 branches, got %zu", n);
		return;
	}
	if (n > PATTERN_MAX_OR_BRANCHES) {
		report(c, at, "more than %d branches (%zu)", PATTERN_MAX_OR_BRANCHES, n);
		return;
	}
	if (depth >= PATTERN_MAX_DEPTH) {
		report(c, at, "pattern nested deeper than %d levels", PATTERN_MAX_DEPTH);
		return;
	}
	out->alts = xcalloc(n, sizeof *out->alts);
	for (size_t i = 0; i < n; i++) {
		const json_t *item = json_array_get(v, i);
		struct at p = {.up = at, .index = i};
		if (!json_is_object(item)) {
			report_got(c, &p, item, "a branch must be a map of field conditions");
		} else if (json_object_size(item) == 0) {
			report(c, &p, "empty branch (it would match every event)");
		} else {
			compile_node(c, item, &p, depth + 1, &out->alts[out->nalts++], true);
		}
	}
}

/* A map of field conditions (and $or); top: the pattern itself or a $or
 * branch, where an operator has no field. */
static void compile_node(struct compiler *c, const json_t *obj, const struct at *at, int depth,
			 struct node *out, bool top)
{
	size_t n = json_object_size(obj);
	out->conds = xcalloc(n ? n : 1, sizeof *out->conds);
	out->n = 0;
	void *it = json_object_iter((json_t *)obj);
	for (; it; it = json_object_iter_next((json_t *)obj, it)) {
		const char *key = json_object_iter_key(it);
		size_t klen = json_object_iter_key_len(it);
		struct at p = {.up = at, .key = key, .klen = klen};
		if (klen == 0) {
			report(c, &p, "empty field name");
		} else if (klen == 3 && memcmp(key, "$or", 3) == 0) {
			compile_alts(c, json_object_iter_value(it), &p, depth, out);
		} else if (top && operator_index(key, klen) >= 0) {
			report(c, &p, "operator outside a field (write field: {%.*s: ...})",
			       (int)klen, key);
		} else {
			struct cond *cd = &out->conds[out->n++];
			cd->key = xstrndup(key, klen);
			cd->klen = klen;
			compile_cond(c, json_object_iter_value(it), &p, depth, cd);
		}
	}
}

static void free_scalars(struct scalar *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(s[i].s);
	free(s);
}

static void free_globs(struct pattern_glob *g, size_t n)
{
	for (size_t i = 0; i < n; i++)
		pattern_glob_free(&g[i]);
	free(g);
}

static void free_node(struct node *nd)
{
	for (size_t i = 0; i < nd->n; i++) {
		struct cond *cd = &nd->conds[i];
		free(cd->key);
		if (cd->nested) {
			free_node(cd->nested);
			free(cd->nested);
		}
		free_scalars(cd->eq, cd->neq);
		free_scalars(cd->pre, cd->npre);
		free_scalars(cd->suf, cd->nsuf);
		free(cd->cmp);
		free_scalars(cd->fold, cd->nfold);
		free_globs(cd->glob, cd->nglob);
		free(cd->cidr);
		for (size_t r = 0; r < cd->nrng; r++)
			free(cd->rng[r].c);
		free(cd->rng);
		if (cd->neg == NEG_WILDCARD)
			free_globs(cd->negglob, cd->nnegglob);
		else
			free_scalars(cd->negv, cd->nnegv);
	}
	free(nd->conds);
	for (size_t i = 0; i < nd->nalts; i++)
		free_node(&nd->alts[i]);
	free(nd->alts);
}

void pattern_free(struct pattern *p)
{
	if (!p)
		return;
	free_node(&p->root);
	free(p);
}

int pattern_compile(const json_t *node, const char *path, struct pattern **out, struct buf *errors)
{
	return pattern_compile_arrays(node, path, PATTERN_ARRAYS_VALUES, out, errors);
}

int pattern_compile_arrays(const json_t *node, const char *path, enum pattern_arrays arrays,
			   struct pattern **out, struct buf *errors)
{
	struct compiler c = {.errors = errors};
	struct pattern *p = NULL;

	*out = NULL;
	if (!path)
		path = "pattern";
	struct at root = {.key = path};
	if (!node) {
		report(&c, &root, "pattern is required");
	} else if (!json_is_object(node)) {
		report_got(&c, &root, node, "pattern must be a map of field conditions");
	} else {
		p = xcalloc(1, sizeof *p);
		p->elements = arrays == PATTERN_ARRAYS_ELEMENTS;
		compile_node(&c, node, &root, 1, &p->root, true);
	}
	if (c.nerr > PATTERN_MAX_MESSAGES && errors)
		buf_appendf(errors, "%s: %d more errors not shown\n", path,
			    c.nerr - PATTERN_MAX_MESSAGES);
	if (c.nerr) {
		pattern_free(p);
		return -c.nerr;
	}
	*out = p;
	return 0;
}

/* ------------------------------------------------------------------ */
/* matching                                                            */

/* Exact comparison of an int64 with a finite double: -1, 0 or 1. */
static int cmp_int_double(int64_t i, double d)
{
	if (d >= 9223372036854775808.0)
		return -1;
	if (d < -9223372036854775808.0)
		return 1;
	int64_t t = (int64_t)d; /* truncation; exact for |d| < 2^63 */
	if (i != t)
		return i < t ? -1 : 1;
	double frac = d - (double)t;
	return frac > 0 ? -1 : frac < 0 ? 1 : 0;
}

/* Numeric comparison of an event number with a numeric operand; 2 when the
 * value is not a number. */
static int num_cmp(const struct event_value *v, const struct scalar *s)
{
	if (v->type == EVENT_INT) {
		if (s->kind == SC_INT)
			return v->u.i < s->i ? -1 : v->u.i > s->i;
		return cmp_int_double(v->u.i, s->d);
	}
	if (v->type == EVENT_REAL) {
		if (s->kind == SC_INT)
			return -cmp_int_double(s->i, v->u.d);
		return v->u.d < s->d ? -1 : v->u.d > s->d;
	}
	return 2;
}

static bool scalar_eq(const struct event_value *v, const struct scalar *s)
{
	switch (s->kind) {
	case SC_NULL: return v->type == EVENT_NULL;
	case SC_TRUE: return v->type == EVENT_TRUE;
	case SC_FALSE: return v->type == EVENT_FALSE;
	case SC_STRING:
		return v->type == EVENT_STRING && v->n == s->len &&
		       memcmp(v->u.str, s->s, s->len) == 0;
	case SC_INT:
	case SC_REAL: return num_cmp(v, s) == 0;
	}
	return false;
}

static bool op_holds(enum cmp_op op, int c)
{
	switch (op) {
	case CMP_GT: return c > 0;
	case CMP_GTE: return c >= 0;
	case CMP_LT: return c < 0;
	case CMP_LTE: return c <= 0;
	case CMP_EQ: return c == 0;
	}
	return false;
}

static void split_ns(int64_t ns, int64_t *sec, int64_t *nsec)
{
	*sec = ns / 1000000000;
	*nsec = ns % 1000000000;
	if (*nsec < 0) {
		*nsec += 1000000000;
		(*sec)--;
	}
}

/* What matching needs besides the event: now(), and the array mode. */
struct mctx {
	int64_t now;
	bool elements;
};

/* The comparisons of gt, gte, lt and lte (any one holding). */
static bool cmps_match(const struct cond *cd, const struct event_value *v, int64_t now)
{
	int parsed = 0; /* 0 not yet, 1 ok, -1 not a timestamp */
	int64_t vs = 0;
	int32_t vn = 0;
	for (size_t i = 0; i < cd->ncmp; i++) {
		const struct cmp *cm = &cd->cmp[i];
		if (!cm->temporal) {
			int c = num_cmp(v, &cm->num);
			if (c != 2 && op_holds(cm->op, c))
				return true;
			continue;
		}
		if (!parsed)
			parsed = v->type == EVENT_STRING &&
						 rfc3339_parse(v->u.str, v->n, &vs, &vn) == 0
					 ? 1
					 : -1;
		if (parsed < 0)
			continue;
		int64_t ns, nn, os, on;
		split_ns(now, &ns, &nn);
		split_ns(cm->offset_ns, &os, &on);
		int64_t cs = ns + os, cn = nn + on;
		if (cn >= 1000000000) {
			cn -= 1000000000;
			cs++;
		}
		int c = vs != cs ? (vs < cs ? -1 : 1) : (vn != cn ? (vn < cn ? -1 : 1) : 0);
		if (op_holds(cm->op, c))
			return true;
	}
	return false;
}

static bool has_prefix(const char *s, size_t n, const struct scalar *p)
{
	return n >= p->len && memcmp(s, p->s, p->len) == 0;
}

static bool has_suffix(const char *s, size_t n, const struct scalar *p)
{
	return n >= p->len && memcmp(s + n - p->len, p->s, p->len) == 0;
}

/* prefix, suffix, equals-ignore-case, wildcard and cidr on a string. */
static bool str_match(const struct cond *cd, const char *s, size_t n)
{
	for (size_t i = 0; i < cd->npre; i++)
		if (has_prefix(s, n, &cd->pre[i]))
			return true;
	for (size_t i = 0; i < cd->nsuf; i++)
		if (has_suffix(s, n, &cd->suf[i]))
			return true;
	for (size_t i = 0; i < cd->nfold; i++)
		if (pattern_fold_eq(s, n, cd->fold[i].s, cd->fold[i].len))
			return true;
	for (size_t i = 0; i < cd->nglob; i++)
		if (pattern_glob_match(&cd->glob[i], s, n))
			return true;
	unsigned char addr[16];
	if (cd->ncidr && pattern_cidr_address(s, n, addr) == 0)
		for (size_t i = 0; i < cd->ncidr; i++)
			if (pattern_cidr_contains(&cd->cidr[i], addr))
				return true;
	return false;
}

/* numeric: some range whose every comparison holds. */
static bool ranges_match(const struct cond *cd, const struct event_value *v)
{
	if (v->type != EVENT_INT && v->type != EVENT_REAL)
		return false;
	for (size_t r = 0; r < cd->nrng; r++) {
		const struct range *rg = &cd->rng[r];
		size_t i = 0;
		while (i < rg->n && op_holds(rg->c[i].op, num_cmp(v, &rg->c[i].num)))
			i++;
		if (i == rg->n)
			return true;
	}
	return false;
}

/* anything-but: a scalar equal to none of the values, or a string that
 * none of the operands matches. */
static bool neg_match(const struct cond *cd, const struct event_value *v)
{
	if (cd->neg == NEG_VALUES) {
		if (v->type == EVENT_ARRAY || v->type == EVENT_OBJECT)
			return false;
		for (size_t i = 0; i < cd->nnegv; i++)
			if (scalar_eq(v, &cd->negv[i]))
				return false;
		return true;
	}
	if (v->type != EVENT_STRING)
		return false;
	const char *s = v->u.str;
	size_t n = v->n;
	for (size_t i = 0; i < cd->nnegv; i++) {
		const struct scalar *o = &cd->negv[i];
		if (cd->neg == NEG_PREFIX   ? has_prefix(s, n, o)
		    : cd->neg == NEG_SUFFIX ? has_suffix(s, n, o)
					    : pattern_fold_eq(s, n, o->s, o->len))
			return false;
	}
	for (size_t i = 0; i < cd->nnegglob; i++)
		if (pattern_glob_match(&cd->negglob[i], s, n))
			return false;
	return true;
}

/* Every operator but exists, on a present value; under match_arrays:
 * elements, on each element of an array (nested arrays flattened). */
static bool value_match(const struct cond *cd, const struct event_value *v, const struct mctx *m)
{
	if (m->elements && v->type == EVENT_ARRAY) {
		for (size_t i = 0; i < v->n; i++)
			if (value_match(cd, &v->u.items[i], m))
				return true;
		return false;
	}
	for (size_t i = 0; i < cd->neq; i++)
		if (scalar_eq(v, &cd->eq[i]))
			return true;
	if (v->type == EVENT_STRING && str_match(cd, v->u.str, v->n))
		return true;
	if (cd->nrng && ranges_match(cd, v))
		return true;
	if (cd->neg != NEG_NONE && neg_match(cd, v))
		return true;
	return cd->ncmp && cmps_match(cd, v, m->now);
}

static bool ops_match(const struct cond *cd, const struct event_value *v, const struct mctx *m)
{
	if (cd->exists == 1 && v)
		return true;
	if (cd->exists == 0 && !v)
		return true;
	if (!v)
		return false;
	return value_match(cd, v, m);
}

static bool node_match(const struct node *nd, const struct event_value *obj, const struct mctx *m);

/* Nested conditions on the value v of their parent field: an object's
 * fields; anything else counts as missing, but under match_arrays:
 * elements an array's elements are tried in turn (an empty one counts as
 * missing). */
static bool nested_match(const struct node *nd, const struct event_value *v, const struct mctx *m)
{
	if (m->elements && v && v->type == EVENT_ARRAY && v->n > 0) {
		for (size_t i = 0; i < v->n; i++)
			if (nested_match(nd, &v->u.items[i], m))
				return true;
		return false;
	}
	return node_match(nd, v && v->type == EVENT_OBJECT ? v : NULL, m);
}

static bool node_match(const struct node *nd, const struct event_value *obj, const struct mctx *m)
{
	for (size_t i = 0; i < nd->n; i++) {
		const struct cond *cd = &nd->conds[i];
		const struct event_value *v = event_get(obj, cd->key, cd->klen);
		bool ok = cd->nested ? nested_match(cd->nested, v, m) : ops_match(cd, v, m);
		if (!ok)
			return false;
	}
	for (size_t i = 0; i < nd->nalts; i++)
		if (node_match(&nd->alts[i], obj, m))
			return true;
	return nd->nalts == 0;
}

bool pattern_match(const struct pattern *p, const struct event *ev, int64_t now_unix_ns)
{
	if (!p || !ev)
		return false;
	struct mctx m = {.now = now_unix_ns, .elements = p->elements};
	return node_match(&p->root, event_root(ev), &m);
}

bool pattern_match_json(const struct pattern *p, const json_t *event, int64_t now_unix_ns)
{
	struct event *ev;
	if (event_from_json(event, &ev) != EVENT_OK)
		return false;
	bool ok = pattern_match(p, ev, now_unix_ns);
	event_free(ev);
	return ok;
}

bool pattern_elements(const struct pattern *p)
{
	return p->elements;
}
