/* Event decoding: every error kind, the bounds, and the decoded tree. */
#include <jansson.h>
#include <math.h>

#include "event.h"
#include "t.h"
#include "util.h"

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
       T_CASE(large_object_lookup), T_CASE(agrees_with_jansson), T_CASE(error_names))
