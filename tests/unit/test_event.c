/* Event decoding: every error kind, the bounds, and the decoded tree. */
#include <jansson.h>
#include <math.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "io/event.h"
#include "base/siphash.h"
#include "t.h"
#include "tflood.h"
#include "base/util.h"

static int decode_text(const char *s, size_t n)
{
	struct event *ev = NULL;
	char *why = NULL;
	int rc = event_parse_json(s, n, &ev, &why);
	if ((rc == EVENT_OK) != (ev != NULL) || (rc != EVENT_OK && !why))
		T_FAIL_("inconsistent result for %.*s", (int)(n > 60 ? 60 : n), s);
	event_free(ev);
	free(why);
	return rc;
}

static int decode_str(const char *s)
{
	return decode_text(s, strlen(s));
}

TEST(field_missing)
{
	struct event *ev = (struct event *)1;
	char *why = NULL;
	const char *f1[] = {"foo", "{}"};
	size_t l1[] = {3, 2};
	CHECK_INT(event_decode(f1, l1, 2, &ev, &why), EVENT_ERR_MISSING);
	CHECK(ev == NULL);
	CHECK_STR(why, "message has no event field");
	free(why);
	CHECK_INT(event_decode(NULL, NULL, 0, &ev, NULL), EVENT_ERR_MISSING);
	/* a trailing name without a value */
	const char *f2[] = {"a", "1", "event"};
	size_t l2[] = {1, 1, 5};
	CHECK_INT(event_decode(f2, l2, 3, &ev, NULL), EVENT_ERR_MISSING);
	/* names are exact: no prefix or case folding */
	const char *f3[] = {"events", "{}", "Event", "{}", "even", "{}"};
	size_t l3[] = {6, 2, 5, 2, 4, 2};
	CHECK_INT(event_decode(f3, l3, 6, &ev, NULL), EVENT_ERR_MISSING);
	/* an event value in a name position does not count */
	const char *f4[] = {"x", "event"};
	size_t l4[] = {1, 5};
	CHECK_INT(event_decode(f4, l4, 2, &ev, NULL), EVENT_ERR_MISSING);
}

TEST(field_decoded)
{
	struct event *ev = NULL;
	char *why = NULL;
	const char *f[] = {"source", "x", "event", "{\"a\":1}"};
	size_t l[] = {6, 1, 5, 7};
	REQUIRE(event_decode(f, l, 4, &ev, &why) == EVENT_OK);
	CHECK(why == NULL);
	const struct event_value *a = event_get(event_root(ev), "a", 1);
	REQUIRE(a);
	CHECK_INT(a->type, EVENT_INT);
	CHECK_INT(a->u.i, 1);
	event_free(ev);
	/* repeated event field: the last one wins */
	const char *g[] = {"event", "[]", "event", "{\"b\":2}"};
	size_t gl[] = {5, 2, 5, 7};
	REQUIRE(event_decode(g, gl, 4, &ev, NULL) == EVENT_OK);
	CHECK(event_get(event_root(ev), "b", 1) != NULL);
	event_free(ev);
	/* lengths are honoured: the value need not be NUL-terminated */
	const char *h[] = {"event", "{\"c\":3}garbage"};
	size_t hl[] = {5, 7};
	REQUIRE(event_decode(h, hl, 2, &ev, NULL) == EVENT_OK);
	event_free(ev);
}

TEST(not_text)
{
	struct event *ev;
	char *why = NULL;
	const char *f[] = {"event", NULL};
	size_t l[] = {5, 0};
	CHECK_INT(event_decode(f, l, 2, &ev, &why), EVENT_ERR_NOT_TEXT);
	CHECK_STR(why, "event is not a string");
	free(why);
	CHECK_INT(decode_str("{\"a\":\"\xff\"}"), EVENT_ERR_NOT_TEXT);
	CHECK_INT(decode_str("\xff"), EVENT_ERR_NOT_TEXT);
	CHECK_INT(decode_str("{\"a\":\"\xc0\xaf\"}"), EVENT_ERR_NOT_TEXT);	   /* overlong */
	CHECK_INT(decode_str("{\"a\":\"\xe0\x80\xaf\"}"), EVENT_ERR_NOT_TEXT);	   /* overlong */
	CHECK_INT(decode_str("{\"a\":\"\xed\xa0\x80\"}"), EVENT_ERR_NOT_TEXT);	   /* surrogate */
	CHECK_INT(decode_str("{\"a\":\"\xf4\x90\x80\x80\"}"), EVENT_ERR_NOT_TEXT); /* > U+10FFFF */
	CHECK_INT(decode_str("{\"a\":\"\xe2\x82\"}"), EVENT_ERR_NOT_TEXT);	   /* truncated */
	CHECK_INT(decode_str("{\"a\":\"\x80\"}"), EVENT_ERR_NOT_TEXT);
	CHECK_INT(decode_text("{\"a\":\"\0\"}", 8), EVENT_ERR_NOT_TEXT); /* NUL byte */
	CHECK_INT(decode_text("{}\0", 3), EVENT_ERR_NOT_TEXT);
	CHECK_INT(decode_text("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16), EVENT_ERR_NOT_TEXT);
	/* valid multibyte text is fine */
	CHECK_INT(decode_str("{\"a\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"}"), EVENT_OK);
	/* the reason names the offset */
	CHECK_INT(event_parse_json("{}\xfe", 3, &ev, &why), EVENT_ERR_NOT_TEXT);
	CHECK_STR(why, "event is not UTF-8 text (invalid byte at offset 2)");
	free(why);
}

TEST(invalid_json)
{
	static const char *const bad[] = {
		"",
		" ",
		"{",
		"}",
		"{\"a\":}",
		"{\"a\":1,}",
		"[1,]",
		"{\"a\":01}",
		"{\"a\":1.}",
		"{\"a\":.5}",
		"{\"a\":+1}",
		"{\"a\":-}",
		"{\"a\":1e}",
		"{\"a\":1e+}",
		"{\"a\":NaN}",
		"{\"a\":Infinity}",
		"{\"a\":-Infinity}",
		"{\"a\":1e400}",
		"{\"a\":-1e400}",
		"{\"a\":\"\x01\"}",
		"{\"a\":\"\t\"}",
		"{\"a\":\"\\x\"}",
		"{\"a\":\"\\u12\"}",
		"{\"a\":\"\\u12g4\"}",
		"{\"a\":\"\\\"}",
		"{} {}",
		"{}x",
		"{},",
		"\xef\xbb\xbf{}",
		"{\"a\" 1}",
		"{a:1}",
		"{'a':1}",
		"{\"a\":tru}",
		"{\"a\":nul}",
		"{\"a\":True}",
		"/*c*/{}",
		"{\"a\":\"unterminated}",
		"{\"a\":1 \"b\":2}",
		"{\"a\":[1 2]}",
		"{\"a\":[}",
		"{\"a\":]}",
		"{,}",
		"{\"a\":1,,\"b\":2}",
		"{1:2}",
		"{\"a\"}",
		"{\"a\":\"\\u\"}",
		"{\"a\":0x10}",
		"{\"a\":- 1}",
		"{\"a\":\"\\U0041\"}",
		"\x0c{}",
		"{\"a\":\"b\"\x0b}",
	};
	for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
		int rc = decode_str(bad[i]);
		if (rc != EVENT_ERR_INVALID_JSON)
			T_FAIL_("%zu %s: got %d (%s)", i, bad[i], rc, event_err_name(rc));
	}
	struct event *ev;
	char *why = NULL;
	CHECK_INT(event_parse_json("{\"a\":}", 6, &ev, &why), EVENT_ERR_INVALID_JSON);
	CHECK_STR(why, "event is not valid JSON: unexpected character at offset 5");
	free(why);
	CHECK_INT(event_parse_json("{\"a\":1", 6, &ev, &why), EVENT_ERR_INVALID_JSON);
	CHECK_STR(why, "event is not valid JSON: expected ',' or '}' at end of input");
	free(why);
}

TEST(not_object)
{
	static const char *const other[] = {"[]",   "[{}]", "1",     "-1.5",	"\"s\"",
					    "null", "true", "false", "  [1]  ", "\"{}\""};
	for (size_t i = 0; i < ARRAY_LEN(other); i++)
		if (decode_str(other[i]) != EVENT_ERR_NOT_OBJECT)
			T_FAIL_("%s: not reported as not an object", other[i]);
	struct event *ev;
	char *why = NULL;
	CHECK_INT(event_parse_json("[1]", 3, &ev, &why), EVENT_ERR_NOT_OBJECT);
	CHECK_STR(why, "event is an array, not a JSON object");
	free(why);
	/* an invalid array is invalid JSON first */
	CHECK_INT(decode_str("[1,"), EVENT_ERR_INVALID_JSON);
}

TEST(size_bound)
{
	size_t n = EVENT_MAX_BYTES;
	char *s = xmalloc(n + 2);
	memset(s, ' ', n + 1);
	s[0] = '{';
	s[n - 1] = '}';
	CHECK_INT(decode_text(s, n), EVENT_OK);
	s[n - 1] = ' ';
	s[n] = '}';
	CHECK_INT(decode_text(s, n + 1), EVENT_ERR_TOO_LARGE);
	struct event *ev;
	char *why = NULL;
	CHECK_INT(event_parse_json(s, n + 1, &ev, &why), EVENT_ERR_TOO_LARGE);
	CHECK_STR(why, "event is 1048577 bytes, more than the maximum of 1048576");
	free(why);
	/* a large string value inside the bound */
	memset(s, 'x', n);
	memcpy(s, "{\"a\":\"", 6);
	memcpy(s + n - 2, "\"}", 2);
	CHECK_INT(decode_text(s, n), EVENT_OK);
	free(s);
}

static char *nested(int depth, const char *open, const char *close)
{
	struct buf b;
	buf_init(&b, 1 << 20);
	buf_appendf(&b, "{\"a\":");
	for (int i = 1; i < depth; i++)
		buf_appendf(&b, "%s", open);
	buf_appendf(&b, "1");
	for (int i = 1; i < depth; i++)
		buf_appendf(&b, "%s", close);
	buf_appendf(&b, "}");
	return buf_steal(&b);
}

TEST(depth_bound)
{
	char *ok = nested(EVENT_MAX_DEPTH, "[", "]");
	CHECK_INT(decode_str(ok), EVENT_OK);
	char *deep = nested(EVENT_MAX_DEPTH + 1, "[", "]");
	CHECK_INT(decode_str(deep), EVENT_ERR_TOO_DEEP);
	char *objs = nested(EVENT_MAX_DEPTH + 1, "{\"a\":", "}");
	CHECK_INT(decode_str(objs), EVENT_ERR_TOO_DEEP);
	struct event *ev;
	char *why = NULL;
	CHECK_INT(event_parse_json(deep, strlen(deep), &ev, &why), EVENT_ERR_TOO_DEEP);
	CHECK_STR(why, "event is nested deeper than 128 levels");
	free(why);
	/* far deeper input neither crashes nor recurses unboundedly */
	char *huge = nested(200000, "[", "]");
	CHECK_INT(decode_str(huge), EVENT_ERR_TOO_DEEP);
	free(ok);
	free(deep);
	free(objs);
	free(huge);
}

TEST(values)
{
	const char *text = " {\"i\":9223372036854775807,\"m\":-9223372036854775808,"
			   "\"big\":9223372036854775808,\"r\":1.5,\"e\":-2E-3,\"z\":-0,"
			   "\"s\":\"a\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\","
			   "\"nul\":\"a\\u0000b\",\"lone\":\"\\ud800x\\udc00\","
			   "\"t\":true,\"f\":false,\"n\":null,\"arr\":[1,[],{}],"
			   "\"o\":{\"k\":1,\"k\":2}} \r\n\t";
	struct event *ev = NULL;
	REQUIRE(event_parse_json(text, strlen(text), &ev, NULL) == EVENT_OK);
	const struct event_value *root = event_root(ev), *v;
	CHECK_INT(root->type, EVENT_OBJECT);
	CHECK_INT(root->n, 14);
	REQUIRE((v = event_get(root, "i", 1)) && v->type == EVENT_INT);
	CHECK(v->u.i == INT64_MAX);
	REQUIRE((v = event_get(root, "m", 1)) && v->type == EVENT_INT);
	CHECK(v->u.i == INT64_MIN);
	REQUIRE((v = event_get(root, "big", 3)) && v->type == EVENT_REAL);
	CHECK(v->u.d == 9223372036854775808.0);
	REQUIRE((v = event_get(root, "r", 1)) && v->type == EVENT_REAL);
	CHECK(v->u.d == 1.5);
	REQUIRE((v = event_get(root, "e", 1)) && v->type == EVENT_REAL);
	CHECK(v->u.d == -0.002);
	REQUIRE((v = event_get(root, "z", 1)) && v->type == EVENT_INT);
	CHECK_INT(v->u.i, 0);
	REQUIRE((v = event_get(root, "s", 1)) && v->type == EVENT_STRING);
	const char want[] = "a\"\\/\b\f\n\r\t\xc3\xa9\xf0\x9f\x98\x80";
	CHECK_INT(v->n, sizeof want - 1);
	CHECK(memcmp(v->u.str, want, sizeof want) == 0); /* NUL-terminated too */
	REQUIRE((v = event_get(root, "nul", 3)) && v->type == EVENT_STRING);
	CHECK_INT(v->n, 3);
	CHECK(memcmp(v->u.str, "a\0b", 3) == 0);
	REQUIRE((v = event_get(root, "lone", 4)) && v->type == EVENT_STRING);
	CHECK_STR(v->u.str, "\xef\xbf\xbdx\xef\xbf\xbd");
	CHECK_INT(event_get(root, "t", 1)->type, EVENT_TRUE);
	CHECK_INT(event_get(root, "f", 1)->type, EVENT_FALSE);
	CHECK_INT(event_get(root, "n", 1)->type, EVENT_NULL);
	REQUIRE((v = event_get(root, "arr", 3)) && v->type == EVENT_ARRAY);
	CHECK_INT(v->n, 3);
	CHECK_INT(v->u.items[0].type, EVENT_INT);
	CHECK_INT(v->u.items[1].type, EVENT_ARRAY);
	CHECK_INT(v->u.items[1].n, 0);
	CHECK_INT(v->u.items[2].type, EVENT_OBJECT);
	REQUIRE((v = event_get(root, "o", 1)) && v->type == EVENT_OBJECT);
	CHECK_INT(event_get(v, "k", 1)->u.i, 2); /* duplicate key: last wins */
	CHECK_INT(v->n, 2);
	CHECK_STR(event_member_at(root, 0)->key, "i");
	CHECK_STR(event_member_at(root, 13)->key, "o");
	CHECK(event_member_at(root, 14) == NULL);
	CHECK(event_get(root, "missing", 7) == NULL);
	CHECK(event_get(root, "i", 0) == NULL);
	CHECK(event_get(event_get(root, "i", 1), "x", 1) == NULL); /* not an object */
	CHECK(event_get(NULL, "x", 1) == NULL);
	event_free(ev);
}

TEST(large_object_lookup)
{
	/* objects beyond the linear-search size use a hash index */
	struct buf b;
	buf_init(&b, 1 << 22);
	buf_appendf(&b, "{");
	for (int i = 0; i < 5000; i++)
		buf_appendf(&b, "%s\"k%d\":%d", i ? "," : "", i, i);
	buf_appendf(&b, ",\"k17\":-1}");
	struct event *ev = NULL;
	REQUIRE(event_parse_json(b.data, b.len, &ev, NULL) == EVENT_OK);
	const struct event_value *root = event_root(ev);
	CHECK_INT(root->n, 5001);
	CHECK_INT(event_get(root, "k0", 2)->u.i, 0);
	CHECK_INT(event_get(root, "k4999", 5)->u.i, 4999);
	CHECK_INT(event_get(root, "k17", 3)->u.i, -1);
	CHECK(event_get(root, "k5000", 5) == NULL);
	CHECK(event_get(root, "k", 1) == NULL);
	event_free(ev);
	buf_free(&b);
}

/* ---- hash flooding ---- */

static uint64_t openssl_siphash13(const unsigned char key[16], const unsigned char *d, size_t n)
{
	EVP_MAC *mac = EVP_MAC_fetch(NULL, "SIPHASH", NULL);
	EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
	size_t size = 8, outlen = 0;
	unsigned c = 1, f = 3;
	unsigned char out[8] = {0};
	OSSL_PARAM params[] = {OSSL_PARAM_construct_size_t(OSSL_MAC_PARAM_SIZE, &size),
			       OSSL_PARAM_construct_uint(OSSL_MAC_PARAM_C_ROUNDS, &c),
			       OSSL_PARAM_construct_uint(OSSL_MAC_PARAM_D_ROUNDS, &f),
			       OSSL_PARAM_END};
	if (!ctx || !EVP_MAC_init(ctx, key, 16, params) || !EVP_MAC_update(ctx, d, n) ||
	    !EVP_MAC_final(ctx, out, &outlen, sizeof out) || outlen != 8)
		T_FAIL_("OpenSSL's SipHash failed");
	EVP_MAC_CTX_free(ctx);
	EVP_MAC_free(mac);
	uint64_t r = 0;
	for (int i = 7; i >= 0; i--)
		r = r << 8 | out[i];
	return r;
}

TEST(siphash13_matches_openssl)
{
	/* every tail length, several keys: our SipHash-1-3 is OpenSSL's */
	unsigned char key[16], data[80];
	for (int k = 0; k < 4; k++) {
		for (int i = 0; i < 16; i++)
			key[i] = (unsigned char)(k == 0 ? i : (i * 37 + k * 101) & 0xff);
		for (size_t i = 0; i < sizeof data; i++)
			data[i] = (unsigned char)(k == 0 ? i : (i * 11 + (size_t)k * 7) & 0xff);
		for (size_t n = 0; n <= sizeof data; n++)
			if (siphash13(key, data, n) != openssl_siphash13(key, data, n))
				T_FAIL_("key %d, %zu bytes: SipHash-1-3 differs from OpenSSL's", k,
					n);
	}
}

/*
 * Property: the index work (event_index_stats: probes + key comparisons +
 * sort moves) of decoding one object of n members, and of looking up each of
 * its keys once, stays under FLOOD_C * n * log2(n) whatever the keys are:
 * random ones, and sets built against the hash. None of these tests knows
 * the run's hash key; the last one (hash_flood_key_aware) plays an attacker
 * who does. event.c's bound for building (33 probes and 33 comparisons per
 * member, 8n moves, n + n log2 n comparisons) is below 9 n log2 n for
 * n >= 1000. The unseeded FNV-1a table this replaced took n^2 / 2 probes for
 * keys colliding in its low bits: 47 n log2 n at n = 1000, 1900 at 60,000.
 */
#define FLOOD_C 9.0

static const size_t flood_sizes[] = {1000, 3000, 10000, 30000, 60000};

/* The smallest power of two >= max(16, factor * n), as log2. */
static unsigned table_bits(size_t n, size_t factor)
{
	unsigned bits = 4;
	while (((size_t)1 << bits) < n * factor)
		bits++;
	return bits;
}

static void keys_free(char **keys, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(keys[i]);
	free(keys);
}

/* Random keys of 1 to 10 characters, about 1% of them repeated. */
static char **keys_random(size_t n, uint64_t seed)
{
	char **keys = xcalloc(n, sizeof *keys);
	for (size_t i = 0; i < n; i++) {
		uint64_t r = splitmix(&seed);
		if (i && r % 100 == 0) {
			keys[i] = xstrdup(keys[(r >> 8) % i]);
			continue;
		}
		size_t len = 1 + (r >> 8) % 10;
		char k[16];
		for (size_t j = 0; j < len; j++)
			k[j] = key_chars[splitmix(&seed) % 64];
		keys[i] = xstrndup(k, len);
	}
	return keys;
}

static uint32_t fnv1a(const char *s, size_t n)
{
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 16777619u;
	return h;
}

/*
 * n distinct keys whose FNV-1a hashes put them all into one window of 64
 * slots of the table the old decoder built (2n slots or more), where linear
 * probing piles them into one cluster of n. The low k bits of FNV-1a's
 * state depend only on the low k bits before each byte, so a multicollision
 * is cheap (Joux): from the current state, bucket every 3-character block by
 * the state it leads to, keep the largest bucket, repeat; any choice of one
 * block per step reaches the same state. The last block only has to agree
 * above the window's 6 bits, which gives hundreds of choices instead of 14.
 */
static char **keys_fnv(size_t n)
{
	unsigned bits = table_bits(n, 2);
	uint32_t mask = ((uint32_t)1 << bits) - 1, state = 2166136261u & mask;
	char alpha[96];
	size_t na = fnv_alphabet(alpha);
	enum { MAXB = 6 };
	char(*blocks[MAXB])[3];
	size_t nchoice[MAXB], nblocks = 0, product = 1;
	uint32_t *count = xmalloc(((size_t)mask + 1) * sizeof *count);
	for (bool last = false; !last && nblocks < MAXB;) {
		/* is a final block (agreeing above 6 bits) enough now? */
		for (int pass = 0; pass < 2; pass++) {
			unsigned shift = pass == 0 ? 6 : 0;
			uint32_t best = fnv_fullest(state, mask, shift, alpha, na, count);
			if (pass == 0 && product * count[best] < n)
				continue; /* not yet: one more full collision first */
			last = pass == 0;
			blocks[nblocks] = xmalloc(count[best] * sizeof *blocks[nblocks]);
			size_t k = fnv_bucket(state, mask, shift, best, alpha, na, blocks[nblocks]);
			nchoice[nblocks++] = k;
			product *= k;
			state = best;
			break;
		}
	}
	free(count);
	char **keys = xcalloc(n, sizeof *keys);
	for (size_t i = 0; i < n; i++) {
		char k[3 * MAXB];
		size_t x = i;
		for (size_t b = 0; b < nblocks; b++) {
			memcpy(k + 3 * b, blocks[b][x % nchoice[b]], 3);
			x /= nchoice[b];
		}
		keys[i] = xstrndup(k, 3 * nblocks);
	}
	for (size_t b = 0; b < nblocks; b++)
		free(blocks[b]);
	return keys;
}

/*
 * n keys (about 1% repeated) whose SipHash-1-3 under known_key puts them all
 * in the first 1/64 of the table event.c builds (4n slots or more): with
 * that key, linear probing would pile them into one cluster of n.
 */
static char **keys_crowded(size_t n)
{
	uint64_t mask = ((uint64_t)1 << table_bits(n, 4)) - 1;
	char **keys = xcalloc(n, sizeof *keys);
	uint64_t counter = 0;
	for (size_t i = 0; i < n; i++) {
		if (i && i % 97 == 0) {
			keys[i] = xstrdup(keys[i / 2]);
			continue;
		}
		for (;;) {
			char k[16];
			size_t len = 0;
			k[len++] = 'c';
			for (uint64_t x = counter++; x; x /= 64)
				k[len++] = key_chars[x % 64];
			if ((siphash13(known_key, k, len) & mask) < (mask + 1) / 64) {
				keys[i] = xstrndup(k, len);
				break;
			}
		}
	}
	return keys;
}

/* n keys sharing a long prefix (as long as 1 MiB allows, up to 1000 bytes),
 * so that every key comparison that gets past the hash is expensive. */
static char **keys_prefix(size_t n)
{
	size_t plen = EVENT_MAX_BYTES / n - 9;
	if (plen > 1000)
		plen = 1000;
	char **keys = xcalloc(n, sizeof *keys);
	for (size_t i = 0; i < n; i++) {
		char *k = xmalloc(plen + 4);
		memset(k, 'p', plen);
		k[plen] = key_chars[i % 64];
		k[plen + 1] = key_chars[i / 64 % 64];
		k[plen + 2] = key_chars[i / 4096 % 64];
		k[plen + 3] = '\0';
		keys[i] = k;
	}
	return keys;
}

struct key_at {
	const char *key;
	size_t i;
};

static int key_order(const void *a, const void *b)
{
	const struct key_at *x = a, *y = b;
	int c = strcmp(x->key, y->key);
	return c ? c : (x->i < y->i ? -1 : x->i > y->i);
}

/*
 * Decodes {"<keys[0]>":0,"<keys[1]>":0,...} and looks every key up, with
 * the work of each checked against FLOOD_C n log2 n. Every key must find
 * its last occurrence's member, and a key one byte longer nothing. Returns
 * false when a check failed (the caller stops growing n). *sorted counts
 * the objects that the decoder indexed by its sorted fallback.
 */
static bool flood_check(const char *set, char **keys, size_t n, uint64_t *sorted)
{
	struct buf b;
	buf_init(&b, EVENT_MAX_BYTES);
	int rc = buf_append(&b, "{", 1);
	for (size_t i = 0; i < n && rc == 0; i++)
		rc = buf_appendf(&b, "%s\"%s\":0", i ? "," : "", keys[i]);
	if (rc == 0)
		rc = buf_append(&b, "}", 1);
	if (rc != 0) {
		T_FAIL_("%s, n = %zu: the object does not fit in %d bytes", set, n,
			EVENT_MAX_BYTES);
		buf_free(&b);
		return false;
	}
	bool ok = true;
	double bound = FLOOD_C * (double)n * log2((double)n);
	struct event_index_stats st;
	struct event *ev = NULL;
	event_index_stats(&st, true);
	rc = event_parse_json(b.data, b.len, &ev, NULL);
	event_index_stats(&st, true);
	buf_free(&b);
	if (rc != EVENT_OK || event_root(ev)->n != n) {
		T_FAIL_("%s, n = %zu: not decoded", set, n);
		event_free(ev);
		return false;
	}
	*sorted += st.sorted;
	double work = (double)(st.probes + st.compares + st.moves);
	if (work > bound) {
		T_FAIL_("%s, n = %zu: decoding cost %.0f probes, compares and moves, %.1f n log2 n",
			set, n, work, work / (bound / FLOOD_C));
		ok = false;
	}

	/* the member each key must find: its last occurrence */
	struct key_at *order = xmalloc(n * sizeof *order);
	for (size_t i = 0; i < n; i++)
		order[i] = (struct key_at){keys[i], i};
	qsort(order, n, sizeof *order, key_order);
	size_t wrong = 0;
	for (size_t i = 0; i < n; i++) {
		if (i + 1 < n && strcmp(order[i].key, order[i + 1].key) == 0)
			continue;
		char longer[1100];
		size_t klen = strlen(order[i].key);
		memcpy(longer, order[i].key, klen);
		longer[klen] = '!';
		const struct event_value *v = event_get(event_root(ev), order[i].key, klen);
		if (!v || v != &event_member_at(event_root(ev), order[i].i)->value ||
		    event_get(event_root(ev), longer, klen + 1) != NULL)
			wrong++;
	}
	free(order);
	event_index_stats(&st, true);
	work = (double)(st.probes + st.compares + st.moves);
	if (wrong) {
		T_FAIL_("%s, n = %zu: %zu keys found the wrong member", set, n, wrong);
		ok = false;
	}
	if (work > bound) {
		T_FAIL_("%s, n = %zu: lookups cost %.0f probes, compares and moves, %.1f n log2 n",
			set, n, work, work / (bound / FLOOD_C));
		ok = false;
	}
	event_free(ev);
	return ok;
}

typedef char **(*keygen)(size_t n);

static char **keys_random1(size_t n)
{
	return keys_random(n, 1);
}

static char **keys_random2(size_t n)
{
	return keys_random(n, (uint64_t)n * 7919);
}

static const struct {
	const char *name;
	keygen gen;
} flood_sets[] = {
	{"random keys", keys_random1},
	{"random keys (second seed)", keys_random2},
	{"keys colliding in FNV-1a's low bits", keys_fnv},
	{"keys crowded under SipHash with a known key", keys_crowded},
	{"keys with a long shared prefix", keys_prefix},
};

/* Runs every key set at every size; returns how many objects were indexed
 * by the sorted fallback for the set named `count` (NULL: none). */
static uint64_t flood_run(const char *count)
{
	uint64_t counted = 0;
	for (size_t s = 0; s < ARRAY_LEN(flood_sets); s++) {
		uint64_t sorted = 0;
		for (size_t z = 0; z < ARRAY_LEN(flood_sizes); z++) {
			char **keys = flood_sets[s].gen(flood_sizes[z]);
			bool ok = flood_check(flood_sets[s].name, keys, flood_sizes[z], &sorted);
			keys_free(keys, flood_sizes[z]);
			if (!ok)
				break; /* an O(n^2) index would take minutes at the larger sizes */
		}
		if (count && strcmp(count, flood_sets[s].name) == 0)
			counted = sorted;
	}
	return counted;
}

static int str_order(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* How many keys repeat an earlier one. */
static size_t repeats(char **keys, size_t n)
{
	char **copy = xmalloc(n * sizeof *copy);
	memcpy(copy, keys, n * sizeof *copy);
	qsort(copy, n, sizeof *copy, str_order);
	size_t r = 0;
	for (size_t i = 1; i < n; i++)
		r += strcmp(copy[i - 1], copy[i]) == 0;
	free(copy);
	return r;
}

TEST(hash_flood_keys_collide)
{
	/* the generators do what they claim: under FNV-1a the keys fall into one
	 * window of 64 slots; under the known key into the first 1/64 of the
	 * table; and they are distinct */
	size_t n = 60000;
	char **keys = keys_fnv(n);
	uint32_t mask = ((uint32_t)1 << table_bits(n, 2)) - 1;
	uint32_t window = (fnv1a(keys[0], strlen(keys[0])) & mask) >> 6;
	size_t off = 0;
	for (size_t i = 0; i < n; i++)
		off += (fnv1a(keys[i], strlen(keys[i])) & mask) >> 6 != window;
	CHECK_INT(off, 0);
	CHECK_INT(repeats(keys, n), 0);
	keys_free(keys, n);
	keys = keys_crowded(n);
	uint64_t smask = ((uint64_t)1 << table_bits(n, 4)) - 1;
	for (size_t i = 0; i < n; i++)
		off += (siphash13(known_key, keys[i], strlen(keys[i])) & smask) >= (smask + 1) / 64;
	CHECK_INT(off, 0);
	keys_free(keys, n);
}

TEST(hash_flood)
{
	/* the run's hash key is random: no key set here was built against it */
	flood_run(NULL);
}

TEST(hash_flood_key_aware)
{
	/* an attacker who learnt the key: the crowded keys now do collide in the
	 * table, and the bound holds because the decoder falls back to its sorted
	 * index. Must run last: it changes the process's key. */
	event_hash_key_for_tests(known_key);
	uint64_t sorted = flood_run("keys crowded under SipHash with a known key");
	CHECK(sorted >= ARRAY_LEN(flood_sizes));
}

TEST(agrees_with_jansson)
{
	/* the same tree as jansson's, through event_from_json */
	static const char *const texts[] = {
		"{}",
		"{\"a\":[1,2.5,\"x\",null,true,false,{\"b\":{\"c\":[]}}],\"d\":-7}",
		"{\"u\":\"\\u00e9\\u20ac\\ud83d\\ude00\",\"e\":1e-7,\"k1\":1,\"k2\":2,\"k3\":3,"
		"\"k4\":4,\"k5\":5,\"k6\":6,\"k7\":7,\"k8\":8,\"k9\":9}",
	};
	for (size_t i = 0; i < ARRAY_LEN(texts); i++) {
		struct event *a = NULL, *b = NULL;
		json_t *j = json_loads(texts[i], 0, NULL);
		REQUIRE(j);
		REQUIRE(event_parse_json(texts[i], strlen(texts[i]), &a, NULL) == EVENT_OK);
		REQUIRE(event_from_json(j, &b) == EVENT_OK);
		const struct event_value *ra = event_root(a), *rb = event_root(b);
		CHECK_INT(ra->n, rb->n);
		for (size_t m = 0; m < ra->n; m++) {
			const struct event_member *ma = event_member_at(ra, m);
			const struct event_member *mb = event_member_at(rb, m);
			CHECK_STR(ma->key, mb->key);
			CHECK_INT(ma->value.type, mb->value.type);
			CHECK_INT(ma->value.n, mb->value.n);
		}
		event_free(a);
		event_free(b);
		json_decref(j);
	}
	json_t *arr = json_array();
	struct event *ev = (struct event *)1;
	CHECK_INT(event_from_json(arr, &ev), EVENT_ERR_NOT_OBJECT);
	CHECK(ev == NULL);
	json_decref(arr);
}

TEST(error_names)
{
	CHECK_STR(event_err_name(EVENT_OK), "ok");
	CHECK_STR(event_err_name(EVENT_ERR_MISSING), "missing");
	CHECK_STR(event_err_name(EVENT_ERR_NOT_TEXT), "not_text");
	CHECK_STR(event_err_name(EVENT_ERR_INVALID_JSON), "invalid_json");
	CHECK_STR(event_err_name(EVENT_ERR_NOT_OBJECT), "not_object");
	CHECK_STR(event_err_name(EVENT_ERR_TOO_LARGE), "too_large");
	CHECK_STR(event_err_name(EVENT_ERR_TOO_DEEP), "too_deep");
	CHECK_STR(event_err_name(42), "unknown");
}

T_MAIN(T_CASE(field_missing), T_CASE(field_decoded), T_CASE(not_text), T_CASE(invalid_json),
       T_CASE(not_object), T_CASE(size_bound), T_CASE(depth_bound), T_CASE(values),
       T_CASE(large_object_lookup), T_CASE(siphash13_matches_openssl),
       T_CASE(hash_flood_keys_collide), T_CASE(hash_flood), T_CASE(agrees_with_jansson),
       T_CASE(error_names), T_CASE(hash_flood_key_aware))
