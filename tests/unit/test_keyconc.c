/* key_concurrency: parsing, the key value of an event (keyconc.h), and the
 * Redis names of per-key queues (keyorder.h). */
#include <string.h>

#include "base/util.h"
#include "engine/keyorder.h"
#include "engine/keys.h"
#include "io/event.h"
#include "model/keyconc.h"
#include "t.h"

/* Parses text (JSON); returns the errors joined by '|' ("" when none). */
static char *parse(const char *text, struct keyconc *out)
{
	json_error_t je;
	json_t *j = json_loads(text, JSON_DECODE_ANY, &je);
	if (!j) {
		T_FAIL_("bad test JSON %s", text);
		return xstrdup("?");
	}
	struct strlist errs = {0};
	int rc = keyconc_parse(j, out, &errs);
	json_decref(j);
	struct buf b;
	buf_init(&b, 4096);
	for (size_t i = 0; i < errs.n; i++)
		buf_appendf(&b, "%s%s", i ? "|" : "", errs.v[i]);
	char *s = xstrdup(b.data ? b.data : "");
	buf_free(&b);
	if ((rc == 0) != (errs.n == 0))
		T_FAIL_("rc %d with %zu errors for %s", rc, errs.n, text);
	strlist_free(&errs);
	return s;
}

TEST(parse_valid)
{
	struct keyconc k;
	char *e = parse("{\"key\": \"new_image.tenant_id\"}", &k);
	CHECK_STR(e, "");
	CHECK_STR(k.path, "new_image.tenant_id");
	CHECK_INT(k.nsegs, 2);
	CHECK_STR(k.segs[1], "tenant_id");
	CHECK_INT(k.limit, 1);
	free(e);
	keyconc_free(&k);
	e = parse("{\"key\": \"a\", \"limit\": 10000}", &k);
	CHECK_STR(e, "");
	CHECK_INT(k.limit, 10000);
	free(e);
	keyconc_free(&k);
}

TEST(validation_errors_name_the_field)
{
	static const struct {
		const char *in, *want;
	} rows[] = {
		{"[]", "key_concurrency: must be a map of key and limit, not a list"},
		{"{}", "key_concurrency.key: is required (a dotted path into the event such as "
		       "new_image.tenant_id)"},
		{"{\"key\": \"\"}", "key_concurrency.key: is empty; must be a dotted path into the "
				    "event such as new_image.tenant_id"},
		{"{\"key\": 3}", "key_concurrency.key: must be a dotted path into the event such as "
				 "new_image.tenant_id, not an integer"},
		{"{\"key\": \".a\"}", "key_concurrency.key: has an empty segment (a leading, "
				      "trailing or doubled dot)"},
		{"{\"key\": \"a.\"}", "key_concurrency.key: has an empty segment (a leading, "
				      "trailing or doubled dot)"},
		{"{\"key\": \"a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q\"}",
		 "key_concurrency.key: has 17 segments; at most 16"},
		{"{\"key\": \"a\", \"limit\": 0}",
		 "key_concurrency.limit: 0 is out of range; must be an integer from 1 to 10000"},
		{"{\"key\": \"a\", \"limit\": -1}",
		 "key_concurrency.limit: -1 is out of range; must be an integer from 1 to 10000"},
		{"{\"key\": \"a\", \"limit\": 10001}",
		 "key_concurrency.limit: 10001 is out of range; must be an integer from 1 to 10000"},
		{"{\"key\": \"a\", \"limit\": 1.5}",
		 "key_concurrency.limit: must be an integer from 1 to 10000, not a number"},
		{"{\"key\": \"a\", \"x\\\"y\": 1}",
		 "key_concurrency: unknown key \"x?y\" (key_concurrency takes key and limit)"},
	};
	for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
		struct keyconc k;
		char *e = parse(rows[i].in, &k);
		CHECK_STR(e, rows[i].want);
		free(e);
		keyconc_free(&k);
	}
	/* A path over 256 bytes. */
	char big[300];
	memset(big, 'a', sizeof big);
	big[sizeof big - 1] = 0;
	json_t *j = json_pack("{s:s}", "key", big);
	struct strlist errs = {0};
	struct keyconc k;
	CHECK_INT(keyconc_parse(j, &k, &errs), -1);
	CHECK_STR(errs.n ? errs.v[0] : "", "key_concurrency.key: must be at most 256 bytes without "
					   "NUL (299 given)");
	strlist_free(&errs);
	keyconc_free(&k);
	json_decref(j);
}

/* The key value of event text under path ("" = NULL). */
static char *value_of(const char *path, const char *text, size_t *len)
{
	struct keyconc k;
	json_t *j = json_pack("{s:s}", "key", path);
	struct strlist errs = {0};
	keyconc_parse(j, &k, &errs);
	strlist_free(&errs);
	json_decref(j);
	struct event *ev = NULL;
	char *why = NULL;
	if (event_parse_json(text, strlen(text), &ev, &why) != EVENT_OK)
		T_FAIL_("bad test event %s: %s", text, why ? why : "");
	free(why);
	char *v = keyconc_value(&k, ev, len);
	event_free(ev);
	keyconc_free(&k);
	return v ? v : xstrdup("(none)");
}

TEST(key_value_of_an_event)
{
	static const struct {
		const char *path, *event, *want;
	} rows[] = {
		{"new_image.tenant_id", "{\"new_image\": {\"tenant_id\": \"acme\"}}", "acme"},
		{"new_image.tenant_id", "{\"new_image\": {\"tenant_id\": 42}}", "42"},
		{"new_image.tenant_id", "{\"new_image\": {\"tenant_id\": -7}}", "-7"},
		{"a", "{\"a\": true}", "true"},
		{"a", "{\"a\": false}", "false"},
		{"a", "{\"a\": 1.5}", "(none)"},
		{"a", "{\"a\": null}", "(none)"},
		{"a", "{\"a\": [1]}", "(none)"},
		{"a", "{\"a\": {\"b\": 1}}", "(none)"},
		{"a.b", "{\"a\": \"s\"}", "(none)"},
		{"a.b", "{\"a\": [{\"b\": 1}]}", "(none)"},
		{"x", "{\"a\": 1}", "(none)"},
		{"a", "{\"a\": \"\"}", ""},
	};
	for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
		size_t len = 0;
		char *v = value_of(rows[i].path, rows[i].event, &len);
		CHECK_STR(v, rows[i].want);
		free(v);
	}
	size_t len = 0;
	char *v = value_of("a", "{\"a\": \"x\\u0000y\"}", &len);
	CHECK_INT(len, 3);
	CHECK(memcmp(v, "x\0y", 3) == 0);
	free(v);
}

TEST(queue_keys_and_their_values)
{
	struct keyorder *k = keyorder_new("ev{t}", "g:1");
	char *q = keyorder_queue_key(k, "fn", "a b/c", 5);
	CHECK_STR(q, "relay:keyq:ev%7Bt%7D:g%3A1:fn:a%20b%2Fc");
	char *v = keyorder_queue_value(q);
	CHECK_STR(v, "a b/c");
	free(v);
	free(q);
	/* A value with NUL or over 128 bytes is named by its SHA-256. */
	q = keyorder_queue_key(k, "fn", "x\0y", 3);
	CHECK(strstr(q, ":fn:sha256:") != NULL);
	CHECK_INT(strlen(strstr(q, "sha256:")), 7 + 64);
	v = keyorder_queue_value(q);
	CHECK(strncmp(v, "sha256:", 7) == 0 && strlen(v) == 71);
	free(v);
	free(q);
	char big[200];
	memset(big, 'z', sizeof big);
	q = keyorder_queue_key(k, "fn", big, sizeof big);
	CHECK(strstr(q, ":fn:sha256:") != NULL);
	free(q);
	keyorder_free(k);
	/* On Redis Cluster the stream's hash tag stays, and a value's braces
	 * are encoded, so every key lives in the stream's slot. */
	keys_set_cluster(true);
	k = keyorder_new("ev{t}", "g");
	q = keyorder_queue_key(k, "fn", "{x}", 3);
	CHECK_STR(q, "relay:keyq:ev{t}:g:fn:%7Bx%7D");
	CHECK_STR(k->lease, "relay:keylease:ev{t}:g");
	CHECK_STR(k->held, "relay:keyheld:ev{t}:g");
	CHECK_STR(k->mark, "relay:keymark:ev{t}:g");
	free(q);
	keyorder_free(k);
	keys_set_cluster(false);
}

TEST(lease_bounds)
{
	CHECK_INT(keyorder_lease_ms(0), KEYORDER_LEASE_MIN_MS);
	CHECK_INT(keyorder_lease_ms(-5), KEYORDER_LEASE_MIN_MS);
	CHECK_INT(keyorder_lease_ms(10LL * 1000000000), 10000);
	CHECK_INT(keyorder_lease_ms(3600LL * 1000000000), KEYORDER_LEASE_MAX_MS);
}

T_MAIN(T_CASE(parse_valid), T_CASE(validation_errors_name_the_field),
       T_CASE(key_value_of_an_event), T_CASE(queue_keys_and_their_values), T_CASE(lease_bounds))
