/*
 * libFuzzer target: the reply guard (redis_guard_init / redis_guard_feed,
 * src/io/redis.h), the RESP2 scanner that bounds the elements at one array
 * depth of every reply before hiredis buffers them, fed arbitrary bytes.
 *
 * The first 4 bytes choose the guard: depth = byte 0 % 5, max = 1 + (bytes
 * 1-2, big-endian) % 4096, max_elements = byte 3 % 65 (0: no bound); the
 * four together seed how the stream is split into pieces. The rest is the
 * reply stream. For every input:
 *
 * 1. Split independence. Fed one byte at a time the guard refuses at some
 *    byte R (or accepts all); fed whole it must give the same verdict, and
 *    fed in seeded pieces the first refused piece must be the one holding
 *    R. Where it accepts, the three end in the same state; where it refuses,
 *    g->first is the same (redis.c copies it for redis_guard_first) and
 *    every later call refuses too.
 *
 * 2. Bounds as documented. A second scanner U reads the same bytes with
 *    no bound in effect (max and max_elements SIZE_MAX) in lockstep: the
 *    guard must refuse byte i exactly when U does (not RESP2), or when a
 *    header line of a guarded element ends at i and U's counts put the
 *    element past a bound: more than max_elements lines, or more than max
 *    bytes counting the whole string a '$' header announces (refused at the
 *    header of the string that would take it over, or at a line that
 *    already does).
 *
 * 3. Agreement with hiredis 0.14, through its reader with object functions
 *    of this file that build nothing (hiredis' own would allocate an
 *    array's table from its announced count: 16 GiB for "*2147483647"). On
 *    the prefix each scanner accepted (before R, or all of it):
 *    - hiredis reports no error;
 *    - it ends replies at the bytes where the scanner comes back between
 *      replies, and holds a partial reply exactly when the scanner is not
 *      between replies at the end;
 *    - it completes the same guarded elements, each of the same element
 *      count (the scanner counts only with max_elements) and the same size
 *      as sent, computed from the objects ("$" digits CRLF string CRLF, "*"
 *      digits CRLF, a nil's 5 bytes, a status or error line; for an
 *      element holding an integer, whose spelling is not in the object,
 *      only a lower bound, from its shortest one); for the bounded guard
 *      each within max and max_elements, checked as hiredis builds it;
 *    - every string is followed by CRLF (hiredis skips those two bytes
 *      without looking at them).
 *    And where U refuses a byte that hiredis, fed the whole input, read
 *    past without an error, the refusal must be the one strictness
 *    redis_guard.c documents beyond hiredis': a string not followed by CRLF.
 *
 * 4. g->first (redis.h): just before the last byte of a complete reply it
 *    is the reply's first string inside its guarded elements (in hiredis'
 *    objects), or "" when there is none or it is longer than
 *    REDIS_GUARD_FIRST_MAX; at a refusal, the first such string hiredis
 *    completed in the refused reply, or, when hiredis completed none, "" or
 *    a string whose body arrived but whose CRLF was refused.
 */
#include <hiredis/hiredis.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "io/redis.h"

/* ---- one scanner fed byte by byte --------------------------------------- */

struct snap {
	size_t len;
	char s[REDIS_GUARD_FIRST_MAX];
};

struct elem {
	uint64_t bytes, elements;
	bool exact; /* hiredis side: no integer inside */
};

struct run {
	struct redis_guard g;
	size_t refused;	     /* the refused byte, or the input's length */
	size_t *ends;	     /* where each complete reply ends (offset after it) */
	struct snap *firsts; /* g->first just before each reply's last byte */
	size_t nends;
	struct elem *elems; /* each complete guarded element: g->sum, g->elements */
	size_t nelems;
	struct snap cur; /* g->first as of the last byte fed */
	int pre_state;	 /* g->state before the refused byte */
	uint64_t pre_skip;
	bool between; /* between replies after the last byte accepted */
	size_t cap_ends, cap_firsts, cap_elems;
};

/* The scanner's states that matter here, learnt from the scanner itself
 * (redis_guard.c keeps the enum private): between elements, and inside a
 * line. */
static int type_state, line_state;
static bool learnt;

static void learn_states(void)
{
	learnt = true;
	struct redis_guard g;
	redis_guard_init(&g, 0, 64, 0);
	type_state = g.state;
	CHECK(redis_guard_feed(&g, ":", 1) == 0, "':' refused");
	line_state = g.state;
	CHECK(line_state != type_state, "no line state");
}

/* Grows *p to hold want items of size bytes (kept across inputs: ASan
 * holds freed memory in quarantine, which counts against -rss_limit_mb). */
static void grow(void *pp, size_t *cap, size_t want, size_t size)
{
	void **p = pp;
	if (want <= *cap)
		return;
	free(*p);
	*p = calloc(want, size);
	CHECK(*p != NULL, "out of memory");
	*cap = want;
}

static void run_init(struct run *r, size_t n, int depth, size_t max, size_t max_elements)
{
	struct run keep = *r; /* its arrays */
	memset(r, 0, sizeof *r);
	r->ends = keep.ends;
	r->firsts = keep.firsts;
	r->elems = keep.elems;
	r->cap_ends = keep.cap_ends;
	r->cap_firsts = keep.cap_firsts;
	r->cap_elems = keep.cap_elems;
	redis_guard_init(&r->g, depth, max, max_elements);
	r->refused = n;
	r->between = true;
	/* A reply or an element is at least 3 bytes ("+\r\n"). */
	size_t cap = n / 3 + 2;
	grow(&r->ends, &r->cap_ends, cap, sizeof *r->ends);
	grow(&r->firsts, &r->cap_firsts, cap, sizeof *r->firsts);
	grow(&r->elems, &r->cap_elems, cap, sizeof *r->elems);
}

/* Whether the byte about to be fed can end a guarded element: one is open,
 * or a line at its depth is being read. */
static bool in_element(const struct redis_guard *g)
{
	return g->in || (g->sp == g->depth && g->state == line_state);
}

/* Feeds d[i]; false when refused (then r->refused = i). */
static bool run_byte(struct run *r, const uint8_t *d, size_t i)
{
	struct redis_guard *g = &r->g;
	bool was_in = in_element(g);
	int pre_state = g->state;
	uint64_t pre_skip = g->skip;
	if (redis_guard_feed(g, (const char *)d + i, 1) < 0) {
		r->refused = i;
		r->pre_state = pre_state;
		r->pre_skip = pre_skip;
		return false;
	}
	r->between = g->sp == 0 && g->state == type_state;
	CHECK(g->firstlen <= REDIS_GUARD_FIRST_MAX, "firstlen %zu", g->firstlen);
	if (r->between) {
		r->ends[r->nends] = i + 1;
		r->firsts[r->nends] = r->cur; /* as of the byte before */
		r->nends++;
	}
	if (was_in && !g->in && g->state == type_state)
		r->elems[r->nelems++] = (struct elem){g->sum, g->elements, true};
	if (g->firstlen != r->cur.len || (g->firstlen && memcmp(g->first, r->cur.s, g->firstlen))) {
		r->cur.len = g->firstlen;
		memcpy(r->cur.s, g->first, g->firstlen);
	}
	return true;
}

/* ---- the split -------------------------------------------------------- */

static uint64_t next(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* The next piece at offset i of n: 1 byte to 16 KiB (redis.c reads 16 KiB
 * at a time), mostly short. */
static size_t piece(uint64_t *seed, size_t i, size_t n)
{
	uint64_t x = next(seed);
	size_t k = 1 + (size_t)((x >> 8) % ((size_t)1 << (x % 15)));
	return k < n - i ? k : n - i;
}

/* The fields of two scanners' states that a split could make differ. */
static void same_state(const struct redis_guard *a, const struct redis_guard *b, const char *how)
{
	bool same = a->state == b->state && a->sp == b->sp && a->in == b->in && a->sum == b->sum &&
		    a->elements == b->elements && a->skip == b->skip &&
		    a->first_done == b->first_done && a->firstlen == b->firstlen &&
		    memcmp(a->first, b->first, a->firstlen) == 0 &&
		    memcmp(a->left, b->left, (size_t)a->sp * sizeof a->left[0]) == 0;
	if (same && a->state == line_state)
		same = a->type == b->type && a->linelen == b->linelen && a->cr == b->cr &&
		       a->numlen == b->numlen && memcmp(a->num, b->num, a->numlen) == 0;
	CHECK(same,
	      "fed %s, the scanner ends in another state than fed byte by byte "
	      "(state %d/%d, sp %d/%d, sum %llu/%llu, elements %llu/%llu, skip %llu/%llu, "
	      "firstlen %zu/%zu)",
	      how, a->state, b->state, a->sp, b->sp, (unsigned long long)a->sum,
	      (unsigned long long)b->sum, (unsigned long long)a->elements,
	      (unsigned long long)b->elements, (unsigned long long)a->skip,
	      (unsigned long long)b->skip, a->firstlen, b->firstlen);
}

static void split_independence(const struct run *bytes, const uint8_t *d, size_t n, int depth,
			       size_t max, size_t max_elements, uint64_t seed)
{
	struct redis_guard g;
	redis_guard_init(&g, depth, max, max_elements);
	int whole = redis_guard_feed(&g, (const char *)d, n);
	CHECK((whole < 0) == (bytes->refused < n),
	      "fed whole: %s; fed byte by byte: refused at byte %zu of %zu",
	      whole < 0 ? "refused" : "accepted", bytes->refused, n);
	if (whole == 0)
		same_state(&g, &bytes->g, "whole");
	else
		CHECK(g.firstlen == bytes->g.firstlen &&
			      memcmp(g.first, bytes->g.first, g.firstlen) == 0,
		      "refused whole, first is %zu bytes; byte by byte %zu", g.firstlen,
		      bytes->g.firstlen);

	redis_guard_init(&g, depth, max, max_elements);
	size_t i = 0;
	while (i < n) {
		size_t k = piece(&seed, i, n);
		if (redis_guard_feed(&g, (const char *)d + i, k) < 0) {
			CHECK(i <= bytes->refused && bytes->refused < i + k,
			      "fed in pieces, refused the piece [%zu, %zu); byte by byte at %zu", i,
			      i + k, bytes->refused);
			CHECK(g.firstlen == bytes->g.firstlen &&
				      memcmp(g.first, bytes->g.first, g.firstlen) == 0,
			      "refused in pieces, first is %zu bytes; byte by byte %zu", g.firstlen,
			      bytes->g.firstlen);
			CHECK(redis_guard_feed(&g, ":1\r\n", 4) < 0,
			      "a refused scanner accepts the next bytes");
			return;
		}
		i += k;
	}
	CHECK(bytes->refused == n, "fed in pieces, accepted all; byte by byte refused at %zu",
	      bytes->refused);
	same_state(&g, &bytes->g, "in pieces");
}

/* ---- hiredis ---------------------------------------------------------- */

struct hr {
	int depth;
	size_t max, max_elements; /* 0, 0: not checked */
	bool open;		  /* a guarded element is being read */
	struct elem cur;
	struct elem *elems; /* each complete guarded element */
	size_t nelems, cap;
	bool have_first; /* the current reply's first guarded string */
	struct snap first;
	bool first_long;
	char obj; /* what every object points to */
};

static unsigned digits(long long v)
{
	unsigned long long u = v < 0 ? 0 - (unsigned long long)v : (unsigned long long)v;
	unsigned k = v < 0 ? 2 : 1;
	while (u >= 10) {
		u /= 10;
		k++;
	}
	return k;
}

static int task_depth(const redisReadTask *t)
{
	int d = 0;
	for (; t->parent; t = t->parent)
		d++;
	return d;
}

/* An object of `bytes` as sent at task t; leaf: it is complete now (all but
 * an array with elements, which completes with its last). */
static void *object(const redisReadTask *t, uint64_t bytes, bool exact, bool leaf, const char *str,
		    size_t len)
{
	struct hr *h = t->privdata;
	int d = task_depth(t);
	if (d == h->depth) {
		CHECK(!h->open, "hiredis: a guarded element starts inside another");
		h->open = true;
		h->cur = (struct elem){0, 0, true};
	}
	if (d >= h->depth) {
		CHECK(h->open, "hiredis: an object below depth %d outside an element", h->depth);
		h->cur.bytes += bytes;
		h->cur.elements++;
		h->cur.exact &= exact;
		CHECK(!h->max_elements || h->cur.elements <= h->max_elements,
		      "hiredis parsed a guarded element of over %zu elements", h->max_elements);
		CHECK(!h->max || h->cur.bytes <= h->max,
		      "hiredis parsed a guarded element of %llu bytes or more (max %zu)",
		      (unsigned long long)h->cur.bytes, h->max);
		if (str && !h->have_first) {
			h->have_first = true;
			h->first_long = len > REDIS_GUARD_FIRST_MAX;
			h->first.len = h->first_long ? 0 : len;
			memcpy(h->first.s, str, h->first.len);
		}
	}
	for (; leaf; t = t->parent, d--) {
		if (d == h->depth) {
			CHECK(h->nelems < h->cap,
			      "hiredis completed more guarded elements than the scanner");
			h->elems[h->nelems++] = h->cur;
			h->open = false;
		}
		if (!t->parent || t->idx != t->parent->elements - 1)
			break;
	}
	return &h->obj;
}

static void *create_string(const redisReadTask *t, char *s, size_t len)
{
	const struct hr *h = t->privdata;
	/* hiredis 0.14 skips the 2 bytes after a string unread; the scanner
	 * passes none but CRLF there. */
	if (t->type == REDIS_REPLY_STRING && h->depth != INT_MAX)
		CHECK(s[len] == '\r' && s[len + 1] == '\n',
		      "a string is followed by 0x%02x 0x%02x, not CRLF, in what the scanner "
		      "accepted",
		      (unsigned char)s[len], (unsigned char)s[len + 1]);
	if (t->type == REDIS_REPLY_STRING)
		return object(t, 1 + digits((long long)len) + 2 + len + 2, true, true, s, len);
	return object(t, 1 + len + 2, true, true, NULL, 0); /* status, error */
}

static void *create_array(const redisReadTask *t, int n)
{
	return object(t, 1 + digits(n) + 2, true, n == 0, NULL, 0);
}

static void *create_integer(const redisReadTask *t, long long v)
{
	return object(t, 1 + digits(v) + 2, false, true, NULL, 0);
}

static void *create_nil(const redisReadTask *t)
{
	return object(t, 5, true, true, NULL, 0);
}

static void free_object(void *o)
{
	(void)o;
}

static redisReplyObjectFunctions functions = {create_string, create_array, create_integer,
					      create_nil, free_object};

static redisReader *reader_new(struct hr *h)
{
	redisReader *r = redisReaderCreateWithFunctions(&functions);
	CHECK(r != NULL, "out of memory");
	r->privdata = h; /* redisReaderSetPrivdata casts the pointer to int */
	return r;
}

/* Whether hiredis holds nothing of a reply. */
static bool reader_idle(const redisReader *r)
{
	return r->pos == r->len && (r->ridx == -1 || (r->ridx == 0 && r->rstack[0].type < 0));
}

static bool same_snap(const struct snap *a, const char *s, size_t len)
{
	return a->len == len && memcmp(a->s, s, len) == 0;
}

/* hiredis reads what run accepted, in seeded pieces. bounded: run is the
 * guard with max and max_elements (else U). */
static void agree(const struct run *run, const uint8_t *d, size_t n, int depth, size_t max,
		  size_t max_elements, bool bounded, uint64_t seed)
{
	size_t len = run->refused; /* the accepted prefix */
	struct hr h = {.depth = depth, .cap = run->nelems + 1};
	if (bounded) {
		h.max = max;
		h.max_elements = max_elements;
	}
	static struct elem *elems;
	static size_t cap;
	grow(&elems, &cap, h.cap, sizeof *elems);
	h.elems = elems;
	redisReader *r = reader_new(&h);
	size_t fed = 0, replies = 0;
	const char *who = bounded ? "the guard" : "the unbounded scanner";
	while (fed < len) {
		size_t k = piece(&seed, fed, len);
		CHECK(redisReaderFeed(r, (const char *)d + fed, k) == REDIS_OK, "feed failed");
		fed += k;
		for (;;) {
			void *reply = NULL;
			CHECK(redisReaderGetReply(r, &reply) == REDIS_OK,
			      "hiredis: \"%s\" within the %zu bytes %s accepted (depth %d)",
			      r->errstr, len, who, depth);
			if (!reply)
				break;
			size_t end = fed - (r->len - r->pos);
			CHECK(replies < run->nends && run->ends[replies] == end,
			      "hiredis ends reply %zu at byte %zu, %s at %zu", replies + 1, end,
			      who, replies < run->nends ? run->ends[replies] : 0);
			const struct snap *g = &run->firsts[replies];
			CHECK(h.have_first ? same_snap(g, h.first.s, h.first.len)
					   : same_snap(g, "", 0),
			      "reply %zu: g->first is \"%.*s\" (%zu bytes); its first guarded "
			      "string is %s \"%.*s\"",
			      replies + 1, (int)g->len, g->s, g->len,
			      !h.have_first  ? "none:"
			      : h.first_long ? "longer than REDIS_GUARD_FIRST_MAX, want"
					     : "",
			      (int)h.first.len, h.first.s);
			h.have_first = false;
			replies++;
		}
	}
	CHECK(replies == run->nends, "hiredis returned %zu replies, %s ended %zu", replies, who,
	      run->nends);
	bool between = run->between;
	CHECK(reader_idle(r) == between,
	      "%s is %s replies after %zu bytes; hiredis holds %s (pos %zu of %zu, ridx %d)", who,
	      between ? "between" : "inside", len, reader_idle(r) ? "nothing" : "a partial reply",
	      r->pos, r->len, r->ridx);

	/* The guarded elements: the same, each of the same size as sent. */
	CHECK(h.nelems == run->nelems, "hiredis completed %zu guarded elements, %s %zu", h.nelems,
	      who, run->nelems);
	for (size_t i = 0; i < h.nelems; i++) {
		const struct elem *a = &h.elems[i], *b = &run->elems[i];
		CHECK((a->elements == b->elements || !run->g.max_elements) &&
			      (a->exact ? a->bytes == b->bytes : a->bytes <= b->bytes),
		      "guarded element %zu: hiredis %llu elements, %s%llu bytes; %s %llu "
		      "elements, %llu bytes",
		      i + 1, (unsigned long long)a->elements, a->exact ? "" : "at least ",
		      (unsigned long long)a->bytes, who, (unsigned long long)b->elements,
		      (unsigned long long)b->bytes);
	}

	/* The refused reply's first string (redis_guard_first). */
	if (run->refused < n) {
		const struct redis_guard *g = &run->g;
		size_t at = run->refused, fl = g->firstlen;
		bool ok;
		if (h.have_first)
			ok = same_snap(&h.first, g->first, fl);
		else
			ok = fl == 0 || (at >= fl && memcmp(d + at - fl, g->first, fl) == 0) ||
			     (at >= fl + 1 && memcmp(d + at - 1 - fl, g->first, fl) == 0);
		CHECK(ok,
		      "refused at byte %zu: first is \"%.*s\"; hiredis' first guarded string "
		      "in that reply is %s\"%.*s\"",
		      at, (int)fl, g->first, h.have_first ? "" : "none, ", (int)h.first.len,
		      h.first.s);
	}
	redisReaderFree(r);
}

/* Where U refuses a byte that hiredis, fed the whole input, read past
 * without an error, U must be at a string's CRLF. */
static void refusal_is_resp(const struct run *u, const uint8_t *d, size_t n)
{
	struct hr h = {.depth = INT_MAX}; /* no element counted */
	redisReader *r = reader_new(&h);
	CHECK(redisReaderFeed(r, (const char *)d, n) == REDIS_OK, "feed failed");
	void *reply;
	int rc;
	while ((rc = redisReaderGetReply(r, &reply)) == REDIS_OK && reply)
		;
	if (rc == REDIS_OK) {
		size_t passed = n - (r->len - r->pos);
		CHECK(passed <= u->refused || (u->pre_state != type_state &&
					       u->pre_state != line_state && u->pre_skip == 0),
		      "refused byte %zu (0x%02x), which hiredis passed (it read %zu bytes "
		      "without an error), not at a string's CRLF",
		      u->refused, d[u->refused], passed);
	}
	redisReaderFree(r);
}

/* ---- the target ------------------------------------------------------- */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!learnt)
		learn_states();
	if (size < 4)
		return 0;
	int depth = data[0] % 5;
	size_t max = 1 + (((size_t)data[1] << 8 | data[2]) % 4096);
	size_t max_elements = data[3] % 65;
	uint64_t seed = (uint64_t)data[0] << 24 | (uint64_t)data[1] << 16 | (uint64_t)data[2] << 8 |
			data[3];
	next(&seed);
	const uint8_t *d = data + 4;
	size_t n = size - 4;

	/* The guard and U, byte by byte, in lockstep (2). */
	static struct run b, u;
	run_init(&b, n, depth, max, max_elements);
	run_init(&u, n, depth, SIZE_MAX, SIZE_MAX); /* counts elements */
	bool b_on = true;
	for (size_t i = 0; i < n; i++) {
		bool guarded = in_element(&u.g); /* the line is counted */
		bool in_line = u.g.state == line_state;
		bool u_ok = run_byte(&u, d, i);
		bool over = false;
		if (u_ok && in_line && u.g.state != line_state && guarded) {
			uint64_t whole = u.g.sum + (u.g.state != type_state ? u.g.skip + 2 : 0);
			over = (max_elements && u.g.elements > max_elements) || whole > max;
		}
		if (b_on) {
			b_on = run_byte(&b, d, i);
			CHECK(b_on == (u_ok && !over),
			      "byte %zu (0x%02x): the guard %s it; %s (depth %d, max %zu, "
			      "max_elements %zu; the element so far %llu bytes, %llu elements, "
			      "%llu string bytes to come)",
			      i, d[i], b_on ? "accepts" : "refuses",
			      !u_ok  ? "it is not RESP2"
			      : over ? "the element is past a bound there"
				     : "the element is within its bounds",
			      depth, max, max_elements, (unsigned long long)u.g.sum,
			      (unsigned long long)u.g.elements,
			      (unsigned long long)(u.g.state != type_state ? u.g.skip : 0));
		}
		if (!u_ok)
			break;
	}
	if (b.refused < n)
		CHECK(redis_guard_feed(&b.g, "+\r\n", 3) < 0 &&
			      redis_guard_feed(&b.g, (const char *)d + b.refused, 1) < 0,
		      "a refused scanner accepts the next bytes");

	/* 1 */
	split_independence(&b, d, n, depth, max, max_elements, seed);
	/* 3 and 4, for the guard and for U */
	agree(&b, d, n, depth, max, max_elements, true, seed);
	if (u.refused != b.refused || u.nends != b.nends)
		agree(&u, d, n, depth, max, max_elements, false, seed);
	if (u.refused < n)
		refusal_is_resp(&u, d, n);
	return 0;
}
