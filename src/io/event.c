/*
 * Event decoding: a strict one-pass JSON parser into an arena.
 *
 * Why not jansson: see event.h. The tree here is read-only and compact:
 * scalars inline, strings copied (unescaped) into the arena, arrays and
 * objects as contiguous vectors built on a parser stack and copied into the
 * arena when they close. Objects with more than SMALL_OBJECT members also get
 * an index (a keyed hash table, or a sorted array when keys collide; see
 * "object index") so a hostile event with one huge object can make neither
 * building it nor a lookup cost more than O(n log n) and O(log n).
 *
 * UTF-8 is validated once over the whole text before parsing (that check is
 * what distinguishes EVENT_ERR_NOT_TEXT); the parser then only has to reject
 * non-ASCII bytes outside strings, which the grammar does anyway.
 */
#include "io/event.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/siphash.h"
#include "base/util.h"

/* Objects up to this size are searched linearly: comparing at most 16 key
 * lengths (and bytes where they agree) costs less than hashing the key, and
 * most events' objects are this small (bench/match ran 13% faster than at 8). */
#define SMALL_OBJECT 16

/* An object with more than SMALL_OBJECT members has either a hash table
 * (slots) or, when keys collided too much, a sorted array (sorted); see
 * "object index" below. */
struct event_object {
	size_t n;
	const struct event_member *members;
	uint32_t mask;	    /* slots has mask + 1 entries */
	uint32_t probe_max; /* the longest distance of a key from its home slot */
	const uint32_t *slots;
	const struct sorted_entry *sorted; /* nsorted entries, one per distinct key */
	size_t nsorted;
};

struct arena_block {
	struct arena_block *next;
	size_t cap, used;
	_Alignas(16) unsigned char data[];
};

struct event {
	struct arena_block *blocks;
	struct event_value root;
};

static void *arena_alloc(struct event *ev, size_t n)
{
	n = (n + 15) & ~(size_t)15;
	struct arena_block *b = ev->blocks;
	if (!b || b->cap - b->used < n) {
		size_t cap = b ? b->cap * 2 : 4096;
		if (cap < n)
			cap = n;
		b = xmalloc(sizeof *b + cap);
		b->cap = cap;
		b->used = 0;
		b->next = ev->blocks;
		ev->blocks = b;
	}
	void *p = b->data + b->used;
	b->used += n;
	return p;
}

void event_free(struct event *ev)
{
	if (!ev)
		return;
	struct arena_block *b = ev->blocks;
	while (b) {
		struct arena_block *next = b->next;
		free(b);
		b = next;
	}
	free(ev);
}

static struct event *event_new(size_t hint)
{
	struct event *ev = xcalloc(1, sizeof *ev);
	if (hint) {
		/* one block usually holds the whole tree */
		size_t cap = hint * 2 + 1024;
		struct arena_block *b = xmalloc(sizeof *b + cap);
		b->cap = cap;
		b->used = 0;
		b->next = NULL;
		ev->blocks = b;
	}
	return ev;
}

const char *event_err_name(int err)
{
	switch (err) {
	case EVENT_OK: return "ok";
	case EVENT_ERR_MISSING: return "missing";
	case EVENT_ERR_NOT_TEXT: return "not_text";
	case EVENT_ERR_INVALID_JSON: return "invalid_json";
	case EVENT_ERR_NOT_OBJECT: return "not_object";
	case EVENT_ERR_TOO_LARGE: return "too_large";
	case EVENT_ERR_TOO_DEEP: return "too_deep";
	}
	return "unknown";
}

/* ---- object index ---- */

/*
 * Members are hashed with SipHash-1-3 under a 128-bit key drawn once per
 * process, so a producer cannot choose keys that collide in the table (the
 * unseeded FNV-1a used before let a 1 MiB event of colliding keys take
 * seconds). Linear probing with load <= 1/4: at 1/2, simulated tables of
 * 131,072 random keys had a key more than INDEX_PROBE_MAX slots from home
 * two times in five; at 1/4, in 2000 tables of 262,144 keys the farthest was
 * 20 slots. A slot is 32 bits: the member index + 1 (0 = empty) in the low
 * INDEX_IDX_BITS, the hash's top 12 bits above, so a probe compares key
 * bytes only when those agree too (1 in 4096 for a different key).
 *
 * The key is a secret only as long as nothing leaks it, so the worst case is
 * bounded by construction too: when any key would land more than
 * INDEX_PROBE_MAX slots past its home slot (random keys practically never
 * do, as above), the table is dropped and the object
 * is indexed as an array sorted by (hash, length, bytes) instead, searched by
 * bisection. Building costs at most n * (INDEX_PROBE_MAX + 1) probes, then
 * 8n moves of a radix sort and n log2 n comparisons of a merge sort at worst;
 * a lookup at most INDEX_PROBE_MAX + 1 probes or log2 n + 1 comparisons,
 * whoever chose the keys.
 */
#define INDEX_PROBE_MAX 32
#define INDEX_IDX_BITS 20
#define INDEX_IDX_MASK ((UINT32_C(1) << INDEX_IDX_BITS) - 1)
/* the most members a table can index (their index + 1 fits INDEX_IDX_BITS) */
#define INDEX_TABLE_MAX (INDEX_IDX_MASK - 1)

struct sorted_entry {
	uint64_t hash;
	uint64_t idx; /* member index; 64 bits to keep the entry 16 bytes */
};

static unsigned char hash_key[SIPHASH_KEY_BYTES];
static pthread_once_t hash_key_once = PTHREAD_ONCE_INIT;
static _Thread_local struct event_index_stats index_stats;

static void hash_key_init(void)
{
	size_t got = random_fill(hash_key, sizeof hash_key);
	if (got < sizeof hash_key) {
		/* no getrandom (an old kernel or a seccomp filter): a key from the
		 * clocks and the pid is weaker, but the probe bound holds whatever
		 * the key */
		uint64_t k[2] = {(uint64_t)now_wall_ns() ^ (uint64_t)(uintptr_t)&got,
				 (uint64_t)now_mono_ns() ^ ((uint64_t)getpid() << 32)};
		memcpy(hash_key, k, sizeof hash_key);
	}
}

static uint64_t key_hash(const char *s, size_t n)
{
	return siphash13(hash_key, s, n);
}

void event_hash_key_for_tests(const unsigned char key[16])
{
	pthread_once(&hash_key_once, hash_key_init);
	memcpy(hash_key, key, sizeof hash_key);
}

void event_index_stats(struct event_index_stats *out, bool reset)
{
	*out = index_stats;
	if (reset)
		memset(&index_stats, 0, sizeof index_stats);
}

static bool same_key(const struct event_member *m, const char *key, size_t klen)
{
	index_stats.compares++;
	return m->klen == klen && memcmp(m->key, key, klen) == 0;
}

/* Orders sorted entries by hash, then length, then bytes, then document
 * order, so equal keys end up adjacent with the last one last. */
static int entry_cmp(const struct sorted_entry *a, const struct sorted_entry *b,
		     const struct event_member *m)
{
	index_stats.compares++;
	if (a->hash != b->hash)
		return a->hash < b->hash ? -1 : 1;
	const struct event_member *x = &m[a->idx], *y = &m[b->idx];
	if (x->klen != y->klen)
		return x->klen < y->klen ? -1 : 1;
	int c = memcmp(x->key, y->key, x->klen);
	if (c)
		return c;
	return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* Bottom-up merge sort of e[0..n) by entry_cmp through tmp (n entries): at
 * most n log2 n comparisons for every input (qsort promises no bound). */
static void merge_sort(struct sorted_entry *e, size_t n, struct sorted_entry *tmp,
		       const struct event_member *m)
{
	struct sorted_entry *src = e, *dst = tmp;
	for (size_t width = 1; width < n; width *= 2) {
		for (size_t lo = 0; lo < n; lo += 2 * width) {
			size_t mid = lo + width < n ? lo + width : n;
			size_t hi = lo + 2 * width < n ? lo + 2 * width : n;
			size_t i = lo, j = mid, k = lo;
			while (i < mid && j < hi)
				dst[k++] = entry_cmp(&src[j], &src[i], m) < 0 ? src[j++] : src[i++];
			memcpy(dst + k, src + i, (mid - i) * sizeof *dst);
			memcpy(dst + k + (mid - i), src + j, (hi - j) * sizeof *dst);
		}
		struct sorted_entry *t = src;
		src = dst;
		dst = t;
	}
	if (src != e)
		memcpy(e, src, n * sizeof *e);
}

/*
 * Sorts e[0..n) (in document order) by entry_cmp: a stable LSD radix sort on
 * the hash, eight passes of one byte, then a merge sort of each run of equal
 * hashes (repeated keys, or a 64-bit collision). O(n) moves when the hashes
 * differ, n log2 n comparisons more if they were all equal; a comparison sort
 * of random hashes took four times as long, mostly in mispredicted branches.
 */
static void sort_entries(struct sorted_entry *e, size_t n, const struct event_member *m)
{
	struct sorted_entry *tmp = xmalloc(n * sizeof *tmp), *src = e, *dst = tmp;
	size_t count[8][256] = {{0}};
	for (size_t i = 0; i < n; i++)
		for (int d = 0; d < 8; d++)
			count[d][e[i].hash >> (8 * d) & 0xff]++;
	for (int d = 0; d < 8; d++) {
		if (count[d][src[0].hash >> (8 * d) & 0xff] == n)
			continue; /* every hash has this byte */
		for (size_t v = 0, pos = 0; v < 256; v++) {
			size_t c = count[d][v];
			count[d][v] = pos;
			pos += c;
		}
		for (size_t i = 0; i < n; i++)
			dst[count[d][src[i].hash >> (8 * d) & 0xff]++] = src[i];
		index_stats.moves += n;
		struct sorted_entry *t = src;
		src = dst;
		dst = t;
	}
	if (src != e)
		memcpy(e, src, n * sizeof *e);
	for (size_t i = 0, j; i < n; i = j) {
		for (j = i + 1; j < n && e[j].hash == e[i].hash; j++)
			;
		if (j - i > 1)
			merge_sort(e + i, j - i, tmp, m);
	}
	free(tmp);
}

static uint32_t slot_tag(uint64_t h)
{
	return (uint32_t)(h >> 52) << INDEX_IDX_BITS;
}

/* Indexes o as a sorted array, in the memory of its abandoned hash table:
 * its 4n or more slots of 4 bytes hold the n entries of 16 bytes. */
static void index_sorted(struct event_object *o, uint32_t *slots)
{
	const struct event_member *m = o->members;
	struct sorted_entry *e = (struct sorted_entry *)slots;
	for (size_t i = 0; i < o->n; i++) {
		e[i].hash = key_hash(m[i].key, m[i].klen);
		e[i].idx = i;
	}
	sort_entries(e, o->n, m);
	/* duplicate keys: keep the last of each run, the one that wins */
	size_t w = 0;
	for (size_t i = 0; i < o->n; i++) {
		if (i + 1 < o->n && e[i].hash == e[i + 1].hash &&
		    same_key(&m[e[i].idx], m[e[i + 1].idx].key, m[e[i + 1].idx].klen))
			continue;
		e[w++] = e[i];
	}
	o->mask = 0;
	o->slots = NULL;
	o->sorted = e;
	o->nsorted = w;
	index_stats.sorted++;
}

/* Inserts member i; false when it would land past INDEX_PROBE_MAX. */
static bool index_insert(struct event_object *o, uint32_t *slots, uint32_t i)
{
	const struct event_member *m = &o->members[i];
	uint64_t h = key_hash(m->key, m->klen);
	uint32_t tag = slot_tag(h), pos = (uint32_t)h & o->mask;
	for (uint32_t d = 0; d <= INDEX_PROBE_MAX; d++) {
		index_stats.probes++;
		uint32_t s = slots[pos];
		if (!s) {
			slots[pos] = tag | (i + 1);
			if (d > o->probe_max)
				o->probe_max = d;
			return true;
		}
		if ((s & ~INDEX_IDX_MASK) == tag &&
		    same_key(&o->members[(s & INDEX_IDX_MASK) - 1], m->key, m->klen)) {
			slots[pos] = tag | (i + 1); /* last one wins */
			return true;
		}
		pos = (pos + 1) & o->mask;
	}
	return false;
}

static const struct event_object *make_object(struct event *ev, const struct event_member *src,
					      size_t n)
{
	struct event_object *o = arena_alloc(ev, sizeof *o);
	struct event_member *m = NULL;
	if (n) {
		m = arena_alloc(ev, n * sizeof *m);
		memcpy(m, src, n * sizeof *m);
	}
	memset(o, 0, sizeof *o);
	o->n = n;
	o->members = m;
	if (n <= SMALL_OBJECT)
		return o;
	pthread_once(&hash_key_once, hash_key_init);
	size_t size = 16;
	while (size < n * 4)
		size *= 2;
	uint32_t *slots = arena_alloc(ev, size * sizeof *slots);
	memset(slots, 0, size * sizeof *slots);
	/* Decoded text has n < EVENT_MAX_BYTES / 5 < INDEX_TABLE_MAX members
	 * ("":0 and a comma), but a jansson tree (event_from_json) has no such
	 * bound. */
	if (n > INDEX_TABLE_MAX) {
		index_sorted(o, slots);
		return o;
	}
	o->mask = (uint32_t)(size - 1);
	o->slots = slots;
	for (size_t i = 0; i < n; i++) {
		if (!index_insert(o, slots, (uint32_t)i)) {
			index_sorted(o, slots);
			break;
		}
	}
	return o;
}

static const struct event_value *lookup_sorted(const struct event_object *o, const char *key,
					       size_t klen)
{
	uint64_t h = key_hash(key, klen);
	size_t lo = 0, hi = o->nsorted;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct sorted_entry *e = &o->sorted[mid];
		const struct event_member *m = &o->members[e->idx];
		index_stats.compares++;
		int c = e->hash != h	  ? (e->hash < h ? -1 : 1)
			: m->klen != klen ? (m->klen < klen ? -1 : 1)
					  : memcmp(m->key, key, klen);
		if (c == 0)
			return &m->value;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

const struct event_value *event_get(const struct event_value *obj, const char *key, size_t klen)
{
	if (!obj || obj->type != EVENT_OBJECT)
		return NULL;
	const struct event_object *o = obj->u.obj;
	if (o->sorted)
		return lookup_sorted(o, key, klen);
	if (o->slots) {
		uint64_t h = key_hash(key, klen);
		uint32_t tag = slot_tag(h), pos = (uint32_t)h & o->mask;
		/* a present key sits at most probe_max slots past its home */
		for (uint32_t d = 0; d <= o->probe_max; d++) {
			index_stats.probes++;
			uint32_t s = o->slots[pos];
			if (!s)
				return NULL;
			const struct event_member *m = &o->members[(s & INDEX_IDX_MASK) - 1];
			if ((s & ~INDEX_IDX_MASK) == tag && same_key(m, key, klen))
				return &m->value;
			pos = (pos + 1) & o->mask;
		}
		return NULL;
	}
	for (size_t i = o->n; i-- > 0;) {
		const struct event_member *m = &o->members[i];
		if (m->klen == klen && memcmp(m->key, key, klen) == 0)
			return &m->value;
	}
	return NULL;
}

const struct event_member *event_member_at(const struct event_value *obj, size_t i)
{
	if (!obj || obj->type != EVENT_OBJECT || i >= obj->u.obj->n)
		return NULL;
	return &obj->u.obj->members[i];
}

const struct event_value *event_root(const struct event *ev)
{
	return &ev->root;
}

/* ---- UTF-8 ---- */

/* 0 when s[0..n) is valid UTF-8 without NUL bytes; else the offset + 1 of
 * the first bad byte. */
static size_t utf8_check(const unsigned char *s, size_t n)
{
	size_t i = 0;
	while (i < n) {
		/* fast path: eight ASCII non-NUL bytes */
		if (n - i >= 8) {
			uint64_t w;
			memcpy(&w, s + i, 8);
			if (!(w & 0x8080808080808080ull) &&
			    !((w - 0x0101010101010101ull) & ~w & 0x8080808080808080ull)) {
				i += 8;
				continue;
			}
		}
		unsigned char c = s[i];
		if (c == 0)
			return i + 1;
		if (c < 0x80) {
			i++;
			continue;
		}
		size_t len;
		uint32_t cp;
		if (c >= 0xc2 && c <= 0xdf) {
			len = 2;
			cp = c & 0x1f;
		} else if (c >= 0xe0 && c <= 0xef) {
			len = 3;
			cp = c & 0x0f;
		} else if (c >= 0xf0 && c <= 0xf4) {
			len = 4;
			cp = c & 0x07;
		} else {
			return i + 1;
		}
		if (n - i < len)
			return i + 1;
		for (size_t k = 1; k < len; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return i + 1;
			cp = (cp << 6) | (s[i + k] & 0x3f);
		}
		if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
		    (cp >= 0xd800 && cp <= 0xdfff))
			return i + 1;
		i += len;
	}
	return 0;
}

/* ---- parser ---- */

struct parser {
	const char *start, *p, *end;
	struct event *ev;
	struct event_member *ms; /* pending object members */
	size_t mlen, mcap;
	struct event_value *vs; /* pending array items */
	size_t vlen, vcap;
	int depth;
	int err;
	char *why;
};

static int fail(struct parser *ps, int err, const char *what)
{
	if (!ps->err) {
		ps->err = err;
		if (err == EVENT_ERR_TOO_DEEP)
			ps->why = xasprintf("nested deeper than %d levels", EVENT_MAX_DEPTH);
		else if (ps->p >= ps->end)
			ps->why = xasprintf("%s at end of input", what);
		else
			ps->why = xasprintf("%s at offset %zu", what, (size_t)(ps->p - ps->start));
	}
	return -1;
}

static void skip_ws(struct parser *ps)
{
	while (ps->p < ps->end &&
	       (*ps->p == ' ' || *ps->p == '\n' || *ps->p == '\r' || *ps->p == '\t'))
		ps->p++;
}

static int hex4(const char *s, const char *end, uint32_t *out)
{
	if (end - s < 4)
		return -1;
	uint32_t v = 0;
	for (int i = 0; i < 4; i++) {
		int h = hex_digit((unsigned char)s[i]);
		if (h < 0)
			return -1;
		v = v << 4 | (uint32_t)h;
	}
	*out = v;
	return 0;
}

static size_t put_utf8(char *o, uint32_t cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xc0 | cp >> 6);
		o[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xe0 | cp >> 12);
		o[1] = (char)(0x80 | (cp >> 6 & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (char)(0xf0 | cp >> 18);
	o[1] = (char)(0x80 | (cp >> 12 & 0x3f));
	o[2] = (char)(0x80 | (cp >> 6 & 0x3f));
	o[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* At the opening quote. Stores the unescaped string in the arena. The text
 * is known to be valid UTF-8 already. */
/* The character a one-letter JSON escape stands for, or 0. */
static char simple_escape(char c)
{
	switch (c) {
	case '"': return '"';
	case '\\': return '\\';
	case '/': return '/';
	case 'b': return '\b';
	case 'f': return '\f';
	case 'n': return '\n';
	case 'r': return '\r';
	case 't': return '\t';
	}
	return 0;
}

static int parse_string(struct parser *ps, const char **out, size_t *outlen)
{
	const char *s = ++ps->p;
	const char *q = s;
	bool escapes = false;
	for (;;) {
		if (q >= ps->end) {
			ps->p = q;
			return fail(ps, EVENT_ERR_INVALID_JSON, "unterminated string");
		}
		unsigned char c = (unsigned char)*q;
		if (c == '"')
			break;
		if (c < 0x20) {
			ps->p = q;
			return fail(ps, EVENT_ERR_INVALID_JSON, "control character in string");
		}
		if (c == '\\') {
			escapes = true;
			q += 2; /* the escaped byte is checked below */
			continue;
		}
		q++;
	}
	size_t span = (size_t)(q - s);
	char *o = arena_alloc(ps->ev, span + 1);
	if (!escapes) {
		memcpy(o, s, span);
		o[span] = '\0';
		*out = o;
		*outlen = span;
		ps->p = q + 1;
		return 0;
	}
	size_t w = 0;
	const char *r = s;
	while (r < q) {
		if (*r != '\\') {
			o[w++] = *r++;
			continue;
		}
		ps->p = r;
		r++;
		char simple = simple_escape(*r);
		if (simple) {
			o[w++] = simple;
			r++;
			continue;
		}
		switch (*r) {
		case 'u': {
			uint32_t cp, lo;
			if (hex4(r + 1, q, &cp) < 0)
				return fail(ps, EVENT_ERR_INVALID_JSON, "invalid \\u escape");
			r += 5;
			if (cp >= 0xd800 && cp <= 0xdbff) {
				if (q - r >= 6 && r[0] == '\\' && r[1] == 'u' &&
				    hex4(r + 2, q, &lo) == 0 && lo >= 0xdc00 && lo <= 0xdfff) {
					cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
					r += 6;
				} else {
					cp = 0xfffd;
				}
			} else if (cp >= 0xdc00 && cp <= 0xdfff) {
				cp = 0xfffd;
			}
			w += put_utf8(o + w, cp);
			break;
		}
		default: return fail(ps, EVENT_ERR_INVALID_JSON, "invalid escape in string");
		}
	}
	o[w] = '\0';
	*out = o;
	*outlen = w;
	ps->p = q + 1;
	return 0;
}

static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;

static void c_locale_init(void)
{
	c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
}

static int parse_number(struct parser *ps, struct event_value *v)
{
	const char *s = ps->p, *q = s;
	bool neg = false, integral = true;
	if (q < ps->end && *q == '-') {
		neg = true;
		q++;
	}
	if (q >= ps->end || !(*q >= '0' && *q <= '9'))
		return fail(ps, EVENT_ERR_INVALID_JSON, "invalid number");
	if (*q == '0') {
		q++;
	} else {
		while (q < ps->end && *q >= '0' && *q <= '9')
			q++;
	}
	if (q < ps->end && *q == '.') {
		integral = false;
		q++;
		if (q >= ps->end || !(*q >= '0' && *q <= '9')) {
			ps->p = q;
			return fail(ps, EVENT_ERR_INVALID_JSON, "invalid number");
		}
		while (q < ps->end && *q >= '0' && *q <= '9')
			q++;
	}
	if (q < ps->end && (*q == 'e' || *q == 'E')) {
		integral = false;
		q++;
		if (q < ps->end && (*q == '+' || *q == '-'))
			q++;
		if (q >= ps->end || !(*q >= '0' && *q <= '9')) {
			ps->p = q;
			return fail(ps, EVENT_ERR_INVALID_JSON, "invalid number");
		}
		while (q < ps->end && *q >= '0' && *q <= '9')
			q++;
	}
	if (integral) {
		uint64_t x = 0;
		bool overflow = false;
		for (const char *d = s + neg; d < q; d++) {
			unsigned dig = (unsigned)(*d - '0');
			if (x > (UINT64_MAX - dig) / 10) {
				overflow = true;
				break;
			}
			x = x * 10 + dig;
		}
		if (!overflow && !neg && x <= (uint64_t)INT64_MAX) {
			v->type = EVENT_INT;
			v->u.i = (int64_t)x;
			ps->p = q;
			return 0;
		}
		if (!overflow && neg && x <= (uint64_t)INT64_MAX + 1) {
			v->type = EVENT_INT;
			v->u.i = x == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)x;
			ps->p = q;
			return 0;
		}
		/* beyond int64: a double, as Go would decode it */
	}
	char small[64];
	size_t len = (size_t)(q - s);
	char *tmp = len < sizeof small ? small : xmalloc(len + 1);
	memcpy(tmp, s, len);
	tmp[len] = '\0';
	pthread_once(&c_locale_once, c_locale_init);
	double d = c_locale ? strtod_l(tmp, NULL, c_locale) : strtod(tmp, NULL);
	if (tmp != small)
		free(tmp);
	if (isinf(d) || isnan(d))
		return fail(ps, EVENT_ERR_INVALID_JSON, "number out of range");
	v->type = EVENT_REAL;
	v->u.d = d;
	ps->p = q;
	return 0;
}

static int literal(struct parser *ps, const char *word, size_t n)
{
	if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
		return fail(ps, EVENT_ERR_INVALID_JSON, "invalid literal");
	ps->p += n;
	return 0;
}

static int parse_value(struct parser *ps, struct event_value *v);

/* The scratch stack p (of *cap elements of size elem) doubled, from 64. */
static void *grow(void *p, size_t *cap, size_t elem)
{
	*cap = *cap ? *cap * 2 : 64;
	return xrealloc(p, *cap * elem);
}

/* After an array item or object member: ',' (1: another follows) or the
 * closing bracket (0: done), both consumed; anything else fails (-1). */
static int after_element(struct parser *ps, char close)
{
	skip_ws(ps);
	if (ps->p < ps->end && *ps->p == ',') {
		ps->p++;
		return 1;
	}
	if (ps->p < ps->end && *ps->p == close) {
		ps->p++;
		return 0;
	}
	return fail(ps, EVENT_ERR_INVALID_JSON,
		    close == ']' ? "expected ',' or ']'" : "expected ',' or '}'");
}

static int parse_array(struct parser *ps, struct event_value *v)
{
	size_t base = ps->vlen;
	ps->p++;
	skip_ws(ps);
	if (ps->p < ps->end && *ps->p == ']') {
		ps->p++;
	} else {
		for (;;) {
			struct event_value item;
			if (parse_value(ps, &item) < 0)
				return -1;
			if (ps->vlen == ps->vcap)
				ps->vs = grow(ps->vs, &ps->vcap, sizeof *ps->vs);
			ps->vs[ps->vlen++] = item;
			int more = after_element(ps, ']');
			if (more < 0)
				return -1;
			if (!more)
				break;
		}
	}
	size_t n = ps->vlen - base;
	struct event_value *items = NULL;
	if (n) {
		items = arena_alloc(ps->ev, n * sizeof *items);
		memcpy(items, ps->vs + base, n * sizeof *items);
	}
	ps->vlen = base;
	v->type = EVENT_ARRAY;
	v->n = n;
	v->u.items = items;
	return 0;
}

static int parse_object(struct parser *ps, struct event_value *v)
{
	size_t base = ps->mlen;
	ps->p++;
	skip_ws(ps);
	if (ps->p < ps->end && *ps->p == '}') {
		ps->p++;
	} else {
		for (;;) {
			struct event_member m;
			skip_ws(ps);
			if (ps->p >= ps->end || *ps->p != '"')
				return fail(ps, EVENT_ERR_INVALID_JSON, "expected object key");
			if (parse_string(ps, &m.key, &m.klen) < 0)
				return -1;
			skip_ws(ps);
			if (ps->p >= ps->end || *ps->p != ':')
				return fail(ps, EVENT_ERR_INVALID_JSON, "expected ':'");
			ps->p++;
			if (parse_value(ps, &m.value) < 0)
				return -1;
			if (ps->mlen == ps->mcap)
				ps->ms = grow(ps->ms, &ps->mcap, sizeof *ps->ms);
			ps->ms[ps->mlen++] = m;
			int more = after_element(ps, '}');
			if (more < 0)
				return -1;
			if (!more)
				break;
		}
	}
	size_t n = ps->mlen - base;
	v->type = EVENT_OBJECT;
	v->n = n;
	v->u.obj = make_object(ps->ev, n ? ps->ms + base : NULL, n);
	ps->mlen = base;
	return 0;
}

static int parse_value(struct parser *ps, struct event_value *v)
{
	skip_ws(ps);
	if (ps->p >= ps->end)
		return fail(ps, EVENT_ERR_INVALID_JSON, "expected a value");
	v->n = 0;
	switch (*ps->p) {
	case '{':
	case '[': {
		if (++ps->depth > EVENT_MAX_DEPTH)
			return fail(ps, EVENT_ERR_TOO_DEEP, "");
		int rc = *ps->p == '{' ? parse_object(ps, v) : parse_array(ps, v);
		ps->depth--;
		return rc;
	}
	case '"': v->type = EVENT_STRING; return parse_string(ps, &v->u.str, &v->n);
	case 't': v->type = EVENT_TRUE; return literal(ps, "true", 4);
	case 'f': v->type = EVENT_FALSE; return literal(ps, "false", 5);
	case 'n': v->type = EVENT_NULL; return literal(ps, "null", 4);
	default:
		if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9'))
			return parse_number(ps, v);
		return fail(ps, EVENT_ERR_INVALID_JSON, "unexpected character");
	}
}

int event_parse_json(const char *text, size_t len, struct event **out, char **reason)
{
	struct parser ps = {0};
	struct event *ev = NULL;
	int rc;

	*out = NULL;
	if (reason)
		*reason = NULL;
	if (!text) {
		rc = EVENT_ERR_NOT_TEXT;
		if (reason)
			*reason = xstrdup("event is not a string");
		goto out;
	}
	if (len > EVENT_MAX_BYTES) {
		rc = EVENT_ERR_TOO_LARGE;
		if (reason)
			*reason = xasprintf("event is %zu bytes, more than the maximum of %d", len,
					    EVENT_MAX_BYTES);
		goto out;
	}
	size_t bad = utf8_check((const unsigned char *)text, len);
	if (bad) {
		rc = EVENT_ERR_NOT_TEXT;
		if (reason)
			*reason = xasprintf("event is not UTF-8 text (%s at offset %zu)",
					    text[bad - 1] ? "invalid byte" : "NUL byte", bad - 1);
		goto out;
	}
	ev = event_new(len);
	ps.start = ps.p = text;
	ps.end = text + len;
	ps.ev = ev;
	if (parse_value(&ps, &ev->root) == 0) {
		skip_ws(&ps);
		if (ps.p != ps.end)
			fail(&ps, EVENT_ERR_INVALID_JSON, "unexpected data after the JSON value");
	}
	if (ps.err) {
		rc = ps.err;
		if (reason)
			*reason = xasprintf("event is not valid JSON: %s", ps.why);
		if (reason && rc == EVENT_ERR_TOO_DEEP) {
			free(*reason);
			*reason = xasprintf("event is %s", ps.why);
		}
		goto out;
	}
	if (ev->root.type != EVENT_OBJECT) {
		static const char *const names[] = {"null",	"false",    "true",
						    "a number", "a number", "a string",
						    "an array", "an object"};
		rc = EVENT_ERR_NOT_OBJECT;
		if (reason)
			*reason = xasprintf("event is %s, not a JSON object", names[ev->root.type]);
		goto out;
	}
	*out = ev;
	ev = NULL;
	rc = EVENT_OK;
out:
	free(ps.why);
	free(ps.ms);
	free(ps.vs);
	event_free(ev);
	return rc;
}

int event_decode(const char *const *fields, const size_t *lens, size_t nfields, struct event **out,
		 char **reason)
{
	const char *val = NULL;
	size_t vlen = 0;
	bool found = false;

	*out = NULL;
	if (reason)
		*reason = NULL;
	for (size_t i = 0; i + 1 < nfields; i += 2) {
		if (fields[i] && lens[i] == 5 && memcmp(fields[i], "event", 5) == 0) {
			found = true;
			val = fields[i + 1];
			vlen = val ? lens[i + 1] : 0;
		}
	}
	if (!found) {
		if (reason)
			*reason = xstrdup("message has no event field");
		return EVENT_ERR_MISSING;
	}
	return event_parse_json(val, vlen, out, reason);
}

/* ---- from jansson ---- */

static int from_json(struct event *ev, const json_t *j, struct event_value *v, int depth)
{
	v->n = 0;
	switch (json_typeof(j)) {
	case JSON_NULL: v->type = EVENT_NULL; return 0;
	case JSON_TRUE: v->type = EVENT_TRUE; return 0;
	case JSON_FALSE: v->type = EVENT_FALSE; return 0;
	case JSON_INTEGER:
		v->type = EVENT_INT;
		v->u.i = (int64_t)json_integer_value(j);
		return 0;
	case JSON_REAL:
		v->type = EVENT_REAL;
		v->u.d = json_real_value(j);
		return 0;
	case JSON_STRING: {
		size_t n = json_string_length(j);
		char *s = arena_alloc(ev, n + 1);
		memcpy(s, json_string_value(j), n);
		s[n] = '\0';
		v->type = EVENT_STRING;
		v->u.str = s;
		v->n = n;
		return 0;
	}
	case JSON_ARRAY: {
		if (depth >= EVENT_MAX_DEPTH)
			return EVENT_ERR_TOO_DEEP;
		size_t n = json_array_size(j);
		struct event_value *items = n ? arena_alloc(ev, n * sizeof *items) : NULL;
		for (size_t i = 0; i < n; i++)
			if (from_json(ev, json_array_get(j, i), &items[i], depth + 1) < 0)
				return EVENT_ERR_TOO_DEEP;
		v->type = EVENT_ARRAY;
		v->u.items = items;
		v->n = n;
		return 0;
	}
	case JSON_OBJECT: {
		if (depth >= EVENT_MAX_DEPTH)
			return EVENT_ERR_TOO_DEEP;
		size_t n = json_object_size(j);
		struct event_member *ms = xmalloc((n ? n : 1) * sizeof *ms);
		size_t i = 0;
		void *it = json_object_iter((json_t *)j);
		for (; it && i < n; it = json_object_iter_next((json_t *)j, it), i++) {
			size_t klen = json_object_iter_key_len(it);
			char *k = arena_alloc(ev, klen + 1);
			memcpy(k, json_object_iter_key(it), klen);
			k[klen] = '\0';
			ms[i].key = k;
			ms[i].klen = klen;
			if (from_json(ev, json_object_iter_value(it), &ms[i].value, depth + 1) <
			    0) {
				free(ms);
				return EVENT_ERR_TOO_DEEP;
			}
		}
		v->type = EVENT_OBJECT;
		v->n = i;
		v->u.obj = make_object(ev, ms, i);
		free(ms);
		return 0;
	}
	}
	v->type = EVENT_NULL;
	return 0;
}

int event_from_json(const json_t *json, struct event **out)
{
	*out = NULL;
	if (!json_is_object(json))
		return EVENT_ERR_NOT_OBJECT;
	struct event *ev = event_new(0);
	int rc = from_json(ev, json, &ev->root, 0);
	if (rc < 0) {
		event_free(ev);
		return rc;
	}
	*out = ev;
	return EVENT_OK;
}
