/*
 * libFuzzer target: arbitrary bytes as a stream message's event field,
 * decoded and matched against a fixed set of patterns that use every
 * operator, each compiled under both match_arrays modes (values, then
 * elements). Besides crashes, leaks and hangs it checks four invariants:
 * the pattern set agrees with rule-by-rule evaluation; a decoded event is an
 * object; every member of every object is what event_get finds for its key
 * (the last member with that key); and when jansson also accepts the text,
 * matching its tree gives the same answers as matching Relay's own decoding.
 */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "io/event.h"
#include "model/pattern.h"
#include "base/util.h"

static const char *const pattern_texts[] = {
	"{}",
	"{\"event_name\":[\"INSERT\",\"MODIFY\"],\"table_name\":[\"users\"]}",
	"{\"a\":[1,1.5,\"1\",true,false,null]}",
	"{\"a\":{\"equals\":[\"x\",9223372036854775807,-9223372036854775808]}}",
	"{\"a\":{\"equals\":0.1}}",
	"{\"id\":{\"prefix\":[\"user_\",\"\"]},\"f\":{\"suffix\":[\".jpg\",\"\\u00e9\"]}}",
	"{\"a\":{\"exists\":true},\"b\":{\"exists\":false}}",
	"{\"n\":{\"x\":{\"exists\":false}},\"m\":{\"y\":{\"z\":{\"exists\":true}}}}",
	"{\"a\":{\"gt\":5,\"lt\":-5.5},\"b\":{\"gte\":[0,\"now()-1h30m\"],\"lte\":\"now()+0s\"}}",
	"{\"t\":{\"gt\":\"now()-5m\"},\"u\":{\"lt\":\"now()+24h\",\"exists\":false}}",
	"{\"a\":{\"b\":[\"x\"],\"c\":{\"d\":{\"prefix\":[\"p\"],\"gt\":1e10}}}}",
	"{\"a\":[\"x\"],\"b\":{\"c\":[5]}}",
	"{\"b\":{\"c\":[5.0]},\"a\":{\"prefix\":[\"x\"]}}",
	"{\"k9\":[\"v\"],\"k10\":{\"exists\":true}}",
	/* escapes outside the BMP: a surrogate pair decoded wrongly shows here */
	"{\"id\":{\"suffix\":[\"_\\ud83d\\ude00\"]}}",
	"{\"u\":[\"\\u00e9\\ud83d\\ude00\\u0001\"]}",
	/* the EventBridge operators, $or and arrays */
	"{\"s\":{\"anything-but\":[\"a\",5,null,true]}}",
	"{\"s\":{\"anything-but\":{\"prefix\":[\"us-\",\"\"]}},\"t\":{\"anything-but\":{\"suffix\":"
	"\".png\"}}}",
	"{\"s\":{\"anything-but\":{\"equals-ignore-case\":[\"stra\\u00dfe\",\"\\u03c3\"]}}}",
	"{\"s\":{\"anything-but\":{\"wildcard\":[\"*/lib/*\",\"a\\\\*\"]}}}",
	"{\"s\":{\"equals-ignore-case\":[\"alice\",\"\\u212a\",\"\\ud801\\udc28\",\"\"]}}",
	"{\"s\":{\"wildcard\":[\"*a*a*a*\",\"dir/*/x*\",\"\\\\**\\\\\\\\\",\"\"]}}",
	"{\"ip\":{\"cidr\":[\"10.0.0.0/8\",\"2001:db8::/32\",\"::ffff:0:0/96\",\"0.0.0.0/0\"]}}",
	"{\"ip\":{\"cidr\":\"192.168.1.7/31\"},\"n\":{\"numeric\":[\">\",0,\"<=\",5]}}",
	"{\"n\":{\"numeric\":[[\">\",-1e300,\"<\",-0.5],[\"=\",9223372036854775807],[\">=\",1e19]]}"
	"}",
	"{\"n\":{\"numeric\":[\"=\",0],\"prefix\":\"x\",\"exists\":false}}",
	"{\"$or\":[{\"a\":[\"x\"]},{\"b\":{\"$or\":[{\"c\":[1]},{\"d\":{\"exists\":false}}]}}],"
	"\"e\":{\"exists\":true}}",
	"{\"a\":{\"$or\":[{\"b\":{\"numeric\":[\">\",1]}},{\"c\":{\"wildcard\":\"*\"}}]}}",
	"{\"items\":{\"sku\":[\"A\"],\"qty\":{\"numeric\":[\">\",1]}},\"tags\":[\"x\",null]}",
	"{\"a\":{\"b\":{\"c\":{\"anything-but\":[\"x\"]}},\"d\":{\"gone\":{\"exists\":false}}}}",
};
/* Each text compiled twice: patterns[i] under match_arrays: values,
 * patterns[NTEXT + i] under elements. */
#define NTEXT (sizeof pattern_texts / sizeof pattern_texts[0])
#define NPAT (2 * NTEXT)

static struct pattern *patterns[NPAT];
static struct pattern_set *set;

/* The decoder's hash key, fixed instead of random so that the seed
 * "sorted-fallback" (keys crowded into 16 slots under this key) reaches the
 * sorted index that colliding keys fall back to, and mutations of it stay
 * near. The hash table path is the same under any key. */
static const unsigned char hash_key[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

static void init(void)
{
	event_hash_key_for_tests(hash_key);
	for (size_t i = 0; i < NPAT; i++) {
		const char *text = pattern_texts[i % NTEXT];
		json_t *j = json_loads(text, 0, NULL);
		CHECK(j && pattern_compile_arrays(j, "fuzz",
						  i < NTEXT ? PATTERN_ARRAYS_VALUES
							    : PATTERN_ARRAYS_ELEMENTS,
						  &patterns[i], NULL) == 0,
		      "fixed pattern %s does not compile", text);
		json_decref(j);
	}
	set = pattern_set_new((const struct pattern *const *)patterns, NPAT);
}

static bool same_key(const struct event_member *a, const struct event_member *b)
{
	return a->klen == b->klen && memcmp(a->key, b->key, a->klen) == 0;
}

/* event_get against the members themselves: the value found for member i's
 * key belongs to a member with that key at or after i, and, in objects of up
 * to 64 members (the exact check is quadratic), to the last such member. */
static void check_lookups(const struct event_value *v)
{
	if (v->type == EVENT_ARRAY)
		for (size_t i = 0; i < v->n; i++)
			check_lookups(&v->u.items[i]);
	if (v->type != EVENT_OBJECT)
		return;
	const struct event_member *first = event_member_at(v, 0);
	for (size_t i = 0; i < v->n; i++) {
		const struct event_member *m = event_member_at(v, i);
		const struct event_value *got = event_get(v, m->key, m->klen);
		CHECK(got, "member %zu of an object of %zu is not found by its key", i, v->n);
		const struct event_member *owner =
			(const void *)((const char *)got - offsetof(struct event_member, value));
		size_t k = (size_t)(owner - first);
		CHECK(k < v->n && k >= i && same_key(owner, m),
		      "the key of member %zu of %zu finds member %zu", i, v->n, k);
		if (v->n <= 64) {
			size_t last = i;
			for (size_t j = i + 1; j < v->n; j++)
				if (same_key(event_member_at(v, j), m))
					last = j;
			CHECK(k == last, "the key of member %zu of %zu finds member %zu, not %zu",
			      i, v->n, k, last);
		}
		check_lookups(&m->value);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int ready;
	if (!ready) {
		init();
		ready = 1;
	}
	/* the first byte picks the instant, so now() cutoffs vary too */
	int64_t now = 1789332461000000000LL;
	if (size > 0)
		now += ((int64_t)data[0] - 128) * 3600LL * 1000000000LL;

	const char *fields[] = {"source", "x", "event", (const char *)data};
	size_t lens[] = {6, 1, 5, size};
	struct event *ev = NULL;
	char *why = NULL;
	int rc = event_decode(fields, lens, 4, &ev, &why);
	CHECK((rc == EVENT_OK) == (ev != NULL) && (rc == EVENT_OK || why),
	      "event_decode returned %d with event %p and reason %s", rc, (void *)ev,
	      why ? why : "(none)");
	free(why);
	if (!ev)
		return 0;
	CHECK(event_root(ev)->type == EVENT_OBJECT, "a decoded event is not an object");
	check_lookups(event_root(ev));

	bool naive[NPAT];
	for (size_t i = 0; i < NPAT; i++)
		naive[i] = pattern_match(patterns[i], ev, now);
	uint32_t ids[NPAT];
	size_t n = pattern_set_match(set, ev, now, ids);
	size_t k = 0;
	for (size_t i = 0; i < NPAT; i++) {
		if (!naive[i])
			continue;
		CHECK(k < n && ids[k] == i, "rule %zu matches alone but the pattern set says %s", i,
		      k < n ? "another rule" : "nothing more");
		k++;
	}
	CHECK(k == n, "the pattern set matches %zu rules, rule by rule %zu", n, k);

	json_t *j = json_loadb((const char *)data, size, JSON_ALLOW_NUL, NULL);
	if (j && json_is_object(j)) {
		for (size_t i = 0; i < NPAT; i++)
			CHECK(pattern_match_json(patterns[i], j, now) == naive[i],
			      "pattern %s: jansson's tree %s, Relay's decoding %s",
			      pattern_texts[i % NTEXT], naive[i] ? "does not match" : "matches",
			      naive[i] ? "matches" : "does not");
	}
	json_decref(j);
	event_free(ev);
	return 0;
}
