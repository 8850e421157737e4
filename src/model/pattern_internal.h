/*
 * What pattern.c, pattern_set.c and pattern_ops.c share: the compiled
 * pattern tree, and the string and address operators (wildcard globs, CIDR
 * ranges, Unicode simple case folding). Each operator compiles its operand
 * once, when a template loads, and matches without allocating, in time
 * linear in the event value (times the operand for a glob). Everything
 * here is pure and thread-safe; a compiled tree is immutable.
 */
#ifndef RELAY_PATTERN_INTERNAL_H
#define RELAY_PATTERN_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the compiled tree (built by pattern.c) ---- */

enum scalar_kind { SC_NULL, SC_FALSE, SC_TRUE, SC_INT, SC_REAL, SC_STRING };

struct scalar {
	enum scalar_kind kind;
	int64_t i;
	double d;
	char *s;
	size_t len;
};

enum cmp_op { CMP_GT, CMP_GTE, CMP_LT, CMP_LTE, CMP_EQ };

struct cmp {
	enum cmp_op op;
	bool temporal;
	struct scalar num; /* SC_INT or SC_REAL unless temporal */
	int64_t offset_ns; /* temporal: now() + offset */
};

/* numeric: every comparison holds (a range). */
struct range {
	struct cmp *c;
	size_t n;
};

/* What anything-but negates: a list of values, or one string operator. */
enum neg_kind { NEG_NONE, NEG_VALUES, NEG_PREFIX, NEG_SUFFIX, NEG_FOLD, NEG_WILDCARD };

struct node;

/* One field's condition: a nested node, or its operators' operands. */
struct cond {
	char *key;
	size_t klen;
	struct node *nested; /* nested fields; NULL for an operator condition */
	int exists;	     /* -1 absent, 0 false, 1 true */
	struct scalar *eq;
	size_t neq;
	struct scalar *pre; /* SC_STRING */
	size_t npre;
	struct scalar *suf;
	size_t nsuf;
	struct cmp *cmp;
	size_t ncmp;
	struct scalar *fold; /* equals-ignore-case, folded (pattern_fold) */
	size_t nfold;
	struct pattern_glob *glob;
	size_t nglob;
	struct pattern_cidr *cidr;
	size_t ncidr;
	struct range *rng;
	size_t nrng;
	enum neg_kind neg;
	struct scalar *negv; /* NEG_VALUES; NEG_PREFIX, NEG_SUFFIX, NEG_FOLD (folded) */
	size_t nnegv;
	struct pattern_glob *negglob; /* NEG_WILDCARD */
	size_t nnegglob;
};

/* Field conditions (AND), and the branches of its $or, of which one must
 * match too. */
struct node {
	struct cond *conds;
	size_t n;
	struct node *alts;
	size_t nalts;
};

struct pattern {
	struct node root;
	bool elements; /* match_arrays: elements */
};

/* ---- operators on strings ---- */

/* Most unescaped stars in one wildcard operand (docs/template.md,
 * "wildcard"): more is refused as too costly to match. */
#define PATTERN_MAX_WILDCARD_STARS 32

/* A wildcard operand: its literal segments between unescaped stars, in
 * order (nseg = stars + 1; the first or last is empty when the operand
 * starts or ends with a star). */
struct pattern_glob {
	char *lit;   /* every segment's bytes, back to back, escapes resolved */
	size_t *end; /* segment i is lit[i ? end[i-1] : 0 .. end[i]) */
	size_t nseg;
};

/* Compiles s[0..n): `*` any run of bytes, `\*` a star, `\\` a backslash;
 * any other backslash, two stars in a row and more than
 * PATTERN_MAX_WILDCARD_STARS stars are errors. 0, or -1 with *why (one
 * line, malloc'd). */
int pattern_glob_compile(const char *s, size_t n, struct pattern_glob *out, char **why);
void pattern_glob_free(struct pattern_glob *g);
/* Whether s[0..n) matches: leftmost placement of each middle segment
 * (memmem), so O(n · segments) at worst, without backtracking. */
bool pattern_glob_match(const struct pattern_glob *g, const char *s, size_t n);

/* An address range, IPv4 held as its IPv4-mapped IPv6 form
 * (::ffff:a.b.c.d, the prefix length + 96), so both families compare as
 * 128-bit numbers. */
struct pattern_cidr {
	unsigned char net[16]; /* host bits cleared */
	unsigned bits;	       /* 0..128 */
};

/* Parses "ADDRESS/BITS" (inet_pton's IPv4 or IPv6 text, BITS decimal
 * without leading zeros, at most 32 or 128). Host bits set below the
 * prefix are cleared. 0, or -1 with *why (malloc'd). */
int pattern_cidr_parse(const char *s, size_t n, struct pattern_cidr *out, char **why);
/* An event's address text (inet_pton, IPv4 or IPv6) as 16 bytes; -1 when
 * s[0..n) is not an address. */
int pattern_cidr_address(const char *s, size_t n, unsigned char out[16]);
bool pattern_cidr_contains(const struct pattern_cidr *c, const unsigned char addr[16]);

/* s[0..n) with every code point replaced by its Unicode simple case
 * folding (ICU's u_foldCase, default mappings), as UTF-8; bytes that are
 * not UTF-8 are kept. malloc'd, its length in *outlen. */
char *pattern_fold(const char *s, size_t n, size_t *outlen);
/* Whether s[0..n), folded, equals folded[0..fn) (pattern_fold's output);
 * allocates nothing. */
bool pattern_fold_eq(const char *s, size_t n, const char *folded, size_t fn);

#endif
