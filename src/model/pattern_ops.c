/*
 * Wildcards, CIDR ranges and case folding for patterns (pattern_internal.h).
 *
 * Case folding is ICU's u_foldCase with U_FOLD_CASE_DEFAULT: Unicode's
 * simple case folding (CaseFolding.txt statuses C and S), one code point to
 * one code point, so a folded comparison walks both strings once. ICU comes
 * from Debian (libicu72, already in the runtime image through libxml2).
 * The folding of every code point of planes 0 and 1 (all that have case
 * mappings in Unicode 15) is asked of ICU once, the first time a pattern
 * folds, into a 256 KiB table; other code points still ask ICU. ICU takes
 * about 20 ns for a code point with several case mappings (U+01C4), which
 * made a 64 KiB value of them cost 4x its decoding; with the table and
 * UTF-8 decoded inline the worst measured is about 2x (bench/match).
 */
#include "model/pattern_internal.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unicode/uchar.h>

#include "base/util.h"

/* ---- wildcard ---------------------------------------------------------- */

int pattern_glob_compile(const char *s, size_t n, struct pattern_glob *out, char **why)
{
	memset(out, 0, sizeof *out);
	size_t stars = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '\\') {
			if (i + 1 >= n) {
				*why = xstrdup("ends with a lone backslash (write \\\\ for a "
					       "backslash)");
				return -1;
			}
			if (s[i + 1] != '*' && s[i + 1] != '\\') {
				unsigned char ch = (unsigned char)s[i + 1];
				char shown[8];
				snprintf_(shown, sizeof shown,
					  ch > 0x20 && ch < 0x7f ? "%c" : "\\x%02x", ch);
				*why = xasprintf("has an invalid escape \"\\%s\" at byte %zu (only "
						 "\\* and \\\\ are escapes)",
						 shown, i);
				return -1;
			}
			i++;
		} else if (s[i] == '*') {
			if (i + 1 < n && s[i + 1] == '*') {
				*why = xasprintf(
					"has two stars in a row at byte %zu (one star already "
					"matches any run of characters)",
					i);
				return -1;
			}
			stars++;
		}
	}
	if (stars > PATTERN_MAX_WILDCARD_STARS) {
		*why = xasprintf("is too costly to match: %zu stars, at most %d", stars,
				 PATTERN_MAX_WILDCARD_STARS);
		return -1;
	}
	out->lit = xmalloc(n + 1);
	out->end = xmalloc((stars + 1) * sizeof *out->end);
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '\\') {
			out->lit[k++] = s[++i];
		} else if (s[i] == '*') {
			out->end[out->nseg++] = k;
		} else {
			out->lit[k++] = s[i];
		}
	}
	out->end[out->nseg++] = k;
	return 0;
}

void pattern_glob_free(struct pattern_glob *g)
{
	free(g->lit);
	free(g->end);
}

bool pattern_glob_match(const struct pattern_glob *g, const char *s, size_t n)
{
	const char *lit = g->lit;
	size_t first = g->end[0];
	if (g->nseg == 1)
		return n == first && memcmp(s, lit, n) == 0;
	size_t lstart = g->end[g->nseg - 2], last = g->end[g->nseg - 1] - lstart;
	if (n < first + last || memcmp(s, lit, first) != 0 ||
	    memcmp(s + n - last, lit + lstart, last) != 0)
		return false;
	/* Each middle segment at its leftmost place after the previous one:
	 * placing it later could only leave less room for the rest. */
	size_t pos = first, limit = n - last;
	for (size_t i = 1; i + 1 < g->nseg; i++) {
		size_t from = g->end[i - 1], len = g->end[i] - from;
		const char *at = memmem(s + pos, limit - pos, lit + from, len);
		if (!at)
			return false;
		pos = (size_t)(at - s) + len;
	}
	return true;
}

/* ---- CIDR -------------------------------------------------------------- */

int pattern_cidr_address(const char *s, size_t n, unsigned char out[16])
{
	char text[INET6_ADDRSTRLEN + 1];
	if (n == 0 || n >= sizeof text || memchr(s, '\0', n))
		return -1;
	memcpy(text, s, n);
	text[n] = '\0';
	unsigned char v4[4];
	if (inet_pton(AF_INET, text, v4) == 1) {
		memset(out, 0, 10);
		out[10] = out[11] = 0xff;
		memcpy(out + 12, v4, 4);
		return 0;
	}
	return inet_pton(AF_INET6, text, out) == 1 ? 0 : -1;
}

int pattern_cidr_parse(const char *s, size_t n, struct pattern_cidr *out, char **why)
{
	const char *slash = memchr(s, '/', n);
	if (!slash) {
		*why = xstrdup("is not an address range such as 10.0.0.0/24 or 2001:db8::/32 "
			       "(no /prefix length)");
		return -1;
	}
	size_t alen = (size_t)(slash - s);
	if (pattern_cidr_address(s, alen, out->net) < 0) {
		*why = xstrdup("is not an IPv4 or IPv6 address before the /");
		return -1;
	}
	bool v4 = memchr(s, ':', alen) == NULL;
	const char *d = slash + 1;
	size_t dn = n - alen - 1;
	unsigned bits = 0;
	bool ok = dn > 0 && dn <= 3 && !(dn > 1 && d[0] == '0');
	for (size_t i = 0; ok && i < dn; i++) {
		ok = d[i] >= '0' && d[i] <= '9';
		bits = bits * 10 + (unsigned)(d[i] - '0');
	}
	unsigned max = v4 ? 32 : 128;
	if (!ok || bits > max) {
		*why = xasprintf("has a prefix length that is not a number from 0 to %u", max);
		return -1;
	}
	out->bits = v4 ? bits + 96 : bits;
	for (unsigned i = out->bits; i < 128; i++)
		out->net[i / 8] &= (unsigned char)~(0x80u >> (i % 8));
	return 0;
}

bool pattern_cidr_contains(const struct pattern_cidr *c, const unsigned char addr[16])
{
	unsigned full = c->bits / 8, rest = c->bits % 8;
	if (memcmp(c->net, addr, full) != 0)
		return false;
	if (!rest)
		return true;
	unsigned char mask = (unsigned char)(0xff00u >> rest);
	return (addr[full] & mask) == c->net[full];
}

/* ---- case folding ------------------------------------------------------ */

/* FOLD_TABLE code points, planes 0 and 1: fold_low[c] holds the low 16
 * bits of the simple case folding of c, which stays in c's plane; 0 stands
 * for "ask ICU" where it would not (none does in Unicode 15) and for a
 * folding whose low bits are 0, told apart by c's own low bits. */
#define FOLD_TABLE 0x20000u
static uint16_t *fold_low;
static pthread_once_t fold_once = PTHREAD_ONCE_INIT;

static void fold_build(void)
{
	uint16_t *t = xmalloc(FOLD_TABLE * sizeof *t);
	for (uint32_t c = 0; c < FOLD_TABLE; c++) {
		uint32_t f = (uint32_t)u_foldCase((UChar32)c, U_FOLD_CASE_DEFAULT);
		t[c] = (f >> 16) == (c >> 16) ? (uint16_t)f : 0;
	}
	fold_low = t;
}

static inline uint32_t fold(uint32_t r)
{
	if (r < FOLD_TABLE && (fold_low[r] || (r & 0xFFFF) == 0))
		return (r & ~0xFFFFu) | fold_low[r];
	return (uint32_t)u_foldCase((UChar32)r, U_FOLD_CASE_DEFAULT);
}

/* The next code point of s[*i..n), folded when fold_it, advancing *i; a
 * byte that does not start valid UTF-8 stands for itself, above every code
 * point. */
static inline uint32_t next_code(const char *s, size_t n, size_t *i, bool fold_it)
{
	unsigned char b = (unsigned char)s[*i];
	if (b < 0x80) { /* ASCII folds to ASCII: A-Z to a-z */
		*i += 1;
		return fold_it && b >= 'A' && b <= 'Z' ? b + 32u : b;
	}
	uint32_t r;
	unsigned char c = *i + 1 < n ? (unsigned char)s[*i + 1] : 0;
	if ((b & 0xE0) == 0xC0 && (c & 0xC0) == 0x80 && b >= 0xC2) {
		/* two bytes, the common case outside ASCII, decoded here */
		r = ((b & 0x1Fu) << 6) | (c & 0x3Fu);
		*i += 2;
		return fold_it ? fold_low[r] : r; /* below U+0800: its own plane */
	}
	unsigned char d = *i + 2 < n ? (unsigned char)s[*i + 2] : 0;
	if ((b & 0xF0) == 0xE0 && (c & 0xC0) == 0x80 && (d & 0xC0) == 0x80) {
		r = ((b & 0x0Fu) << 12) | ((c & 0x3Fu) << 6) | (d & 0x3Fu);
		if (r >= 0x800 && (r < 0xD800 || r > 0xDFFF)) {
			*i += 3;
			return fold_it ? fold(r) : r;
		}
	}
	unsigned char e = *i + 3 < n ? (unsigned char)s[*i + 3] : 0;
	if ((b & 0xF8) == 0xF0 && (c & 0xC0) == 0x80 && (d & 0xC0) == 0x80 && (e & 0xC0) == 0x80) {
		r = ((b & 0x07u) << 18) | ((c & 0x3Fu) << 12) | ((d & 0x3Fu) << 6) | (e & 0x3Fu);
		if (r >= 0x10000 && r <= 0x10FFFF) {
			*i += 4;
			return fold_it ? fold(r) : r;
		}
	}
	/* not UTF-8: the byte stands for itself */
	*i += 1;
	return 0x110000u + b;
}

static size_t utf8_put(uint32_t r, char *out)
{
	if (r < 0x80) {
		out[0] = (char)r;
		return 1;
	}
	if (r < 0x800) {
		out[0] = (char)(0xC0 | (r >> 6));
		out[1] = (char)(0x80 | (r & 0x3F));
		return 2;
	}
	if (r < 0x10000) {
		out[0] = (char)(0xE0 | (r >> 12));
		out[1] = (char)(0x80 | ((r >> 6) & 0x3F));
		out[2] = (char)(0x80 | (r & 0x3F));
		return 3;
	}
	out[0] = (char)(0xF0 | (r >> 18));
	out[1] = (char)(0x80 | ((r >> 12) & 0x3F));
	out[2] = (char)(0x80 | ((r >> 6) & 0x3F));
	out[3] = (char)(0x80 | (r & 0x3F));
	return 4;
}

char *pattern_fold(const char *s, size_t n, size_t *outlen)
{
	/* Every code point takes at least one byte of s and at most four of
	 * the output. */
	pthread_once(&fold_once, fold_build);
	char *out = xmalloc(4 * n + 1);
	size_t k = 0;
	for (size_t i = 0; i < n;) {
		size_t at = i;
		uint32_t r = next_code(s, n, &i, true);
		if (r >= 0x110000u)
			out[k++] = s[at];
		else
			k += utf8_put(r, out + k);
	}
	out[k] = '\0';
	*outlen = k;
	return out;
}

bool pattern_fold_eq(const char *s, size_t n, const char *folded, size_t fn)
{
	pthread_once(&fold_once, fold_build);
	size_t i = 0, j = 0;
	while (i < n && j < fn)
		if (next_code(s, n, &i, true) != next_code(folded, fn, &j, false))
			return false;
	return i == n && j == fn;
}
