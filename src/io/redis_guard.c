/*
 * The reply guard's scanner (redis.h: "Reply guard"): it looks at the bytes
 * of a reply stream before hiredis does. A connection runs it on every chunk
 * it reads (fill_reader, redis.c).
 *
 * A RESP2 scanner that never stores what it passes: it reads type bytes and
 * header lines one byte at a time, and passes strings by their announced
 * length, looking only at their closing CRLF. Its stack mirrors the open
 * arrays, so it knows the depth of every element and the bytes of the
 * guarded one so far. It is as strict as hiredis or stricter, and refuses
 * no later than hiredis fails (a number is written as hiredis 0.14 reads
 * it: digits with an optional leading '-', no leading zero, not "-0", a
 * length -1 or more, an array count at most INT_MAX; every line and string
 * ends in CRLF; at most 8 nested arrays, a ninth refused at its type byte):
 * whatever hiredis parses, the scanner saw in the same shape, so the two
 * never disagree about where an element ends. tests/fuzz/fuzz_resp.c
 * checks this against hiredis.
 */
#include "io/redis.h"

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "base/util.h"

enum { GUARD_TYPE, GUARD_LINE, GUARD_BODY, GUARD_BODY_CR, GUARD_BODY_LF, GUARD_STUCK };

void redis_guard_init(struct redis_guard *g, int depth, size_t max, size_t max_elements)
{
	memset(g, 0, sizeof *g);
	g->depth = depth;
	g->max = max;
	g->max_elements = max_elements;
	g->state = GUARD_TYPE;
}

/* The element at level sp is complete: count it in the arrays it
 * completes in turn. */
static void guard_done(struct redis_guard *g)
{
	for (;;) {
		if (g->sp == g->depth)
			g->in = false; /* that was a guarded element */
		if (g->sp == 0) {
			/* A whole reply: the next one records its own first string. */
			g->first_done = false;
			g->firstlen = 0;
			return;
		}
		if (--g->left[g->sp - 1] > 0)
			return;
		g->sp--;
	}
}

/* Counts n bytes of the guarded element: -1 once it is past max. */
static int guard_count(struct redis_guard *g, uint64_t n)
{
	if (!g->in)
		return 0;
	g->sum += n;
	return g->sum > g->max ? -1 : 0;
}

/* A line is complete. -1 refuses. */
static int guard_line(struct redis_guard *g)
{
	g->state = GUARD_TYPE;
	if (g->sp == g->depth) {
		g->in = true; /* a guarded element starts with this line */
		g->sum = 0;
		g->elements = 0;
	}
	if (g->in && g->max_elements && ++g->elements > g->max_elements)
		return -1;
	if (guard_count(g, g->linelen) < 0)
		return -1;
	if (g->type == '+' || g->type == '-') {
		guard_done(g);
		return 0;
	}
	int64_t v;
	g->num[g->numlen] = '\0';
	if (parse_int64(g->num, &v) < 0)
		return -1;
	if (g->type == ':') {
		guard_done(g);
		return 0;
	}
	if (v < -1 || (g->type == '*' && v > INT_MAX))
		return -1; /* hiredis 0.14 keeps a count in an int */
	if (v == -1 || (g->type == '*' && v == 0)) {
		guard_done(g); /* a null, or an empty array */
		return 0;
	}
	if (g->type == '*') {
		g->left[g->sp++] = v;
		return 0;
	}
	/* The whole string and its CRLF must fit: refused before a byte of it. */
	if (g->in && g->sum + (uint64_t)v + 2 > g->max)
		return -1;
	g->caplen = 0;
	if (g->in && !g->first_done) {
		g->first_done = true;
		g->firstlen = 0;
		g->caplen = v <= REDIS_GUARD_FIRST_MAX ? (size_t)v : 0;
	}
	g->skip = (uint64_t)v;
	g->state = v ? GUARD_BODY : GUARD_BODY_CR;
	return 0;
}

/* One byte of a line (after its type byte). -1 refuses. */
static int guard_line_byte(struct redis_guard *g, char ch)
{
	g->linelen++;
	if (g->cr && ch == '\n')
		return guard_line(g);
	bool num = g->type == '$' || g->type == '*' || g->type == ':';
	if (g->cr && num)
		return -1; /* a '\r' inside a number */
	g->cr = ch == '\r';
	if (g->cr || !num)
		return 0;
	if (!((ch >= '0' && ch <= '9') || (ch == '-' && g->numlen == 0)) ||
	    g->numlen + 1 >= sizeof g->num)
		return -1;
	/* As hiredis' string2ll: nothing after a leading '0', no "-0". */
	size_t neg = g->numlen > 0 && g->num[0] == '-';
	if ((g->numlen > neg && g->num[neg] == '0') || (neg && g->numlen == 1 && ch == '0'))
		return -1;
	g->num[g->numlen++] = ch;
	return 0;
}

int redis_guard_feed(struct redis_guard *g, const char *p, size_t n)
{
	size_t i = 0;
	while (i < n) {
		switch (g->state) {
		case GUARD_TYPE:
			g->type = p[i++];
			if (!g->type || !strchr("+-:$*", g->type))
				goto refuse;
			/* hiredis fails at the type byte of a ninth nested array. */
			if (g->type == '*' && g->sp >= REDIS_GUARD_STACK)
				goto refuse;
			g->numlen = 0;
			g->linelen = 1;
			g->cr = false;
			g->state = GUARD_LINE;
			break;
		case GUARD_LINE:
			if (guard_line_byte(g, p[i++]) < 0)
				goto refuse;
			break;
		case GUARD_BODY: {
			size_t take = n - i < g->skip ? n - i : (size_t)g->skip;
			for (size_t k = 0; k < take && g->firstlen < g->caplen; k++)
				g->first[g->firstlen++] = p[i + k];
			if (guard_count(g, take) < 0)
				goto refuse; /* cannot happen: checked at the header */
			g->skip -= take;
			i += take;
			if (g->skip == 0)
				g->state = GUARD_BODY_CR;
			break;
		}
		case GUARD_BODY_CR:
		case GUARD_BODY_LF:
			if (p[i++] != (g->state == GUARD_BODY_CR ? '\r' : '\n') ||
			    guard_count(g, 1) < 0)
				goto refuse;
			if (g->state == GUARD_BODY_CR) {
				g->state = GUARD_BODY_LF;
			} else {
				g->state = GUARD_TYPE;
				g->caplen = 0;
				guard_done(g);
			}
			break;
		default: return -1;
		}
	}
	return 0;
refuse:
	g->state = GUARD_STUCK;
	return -1;
}
