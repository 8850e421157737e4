/*
 * The string and address operators of patterns (pattern.c's helpers):
 * wildcard globs, CIDR ranges and Unicode simple case folding. Each compiles
 * its operand once, when a template loads, and matches without allocating,
 * in time linear in the event value (times the operand for a glob).
 * Everything here is pure and thread-safe.
 */
#ifndef RELAY_PATTERN_INTERNAL_H
#define RELAY_PATTERN_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
