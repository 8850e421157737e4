/* The function registry (registry.h): an empty snapshot at first, a
 * published snapshot sorted by name with its rules in execution order and
 * one pattern set over them, lookups, a snapshot in use outliving its
 * replacement, shared versions counted, the images every live snapshot
 * holds, and readers racing a publisher. Functions are built in memory
 * from template text: no functions directory, no Docker. */
#include <pthread.h>
#include <stdatomic.h>

#include "io/event.h"
#include "engine/registry.h"
#include "t.h"
#include "base/util.h"

/* A version of function name with nrules rules, rule i matching
 * {"fn": [name], "n": [i]}; image may be NULL. */
static struct fn_version *version(const char *name, int nrules, const char *image)
{
	struct buf text;
	buf_init(&text, 1 << 16);
	buf_appendf(&text, "runtime: python3.14\nevents:\n");
	for (int i = 0; i < nrules; i++)
		buf_appendf(&text, "  - handler: m.h%d\n    pattern: {fn: [\"%s\"], n: [%d]}\n", i,
			    name, i);
	struct strlist errors = {0}, warnings = {0};
	struct template *t = NULL;
	if (template_parse(text.data, text.len, &t, &errors, &warnings) < 0) {
		printf("  template for %s: %s\n", name, errors.n ? errors.v[0] : "?");
		abort();
	}
	strlist_free(&errors);
	strlist_free(&warnings);
	buf_free(&text);
	struct function *f = xcalloc(1, sizeof *f);
	f->name = xstrdup(name);
	f->dir = xasprintf("/functions/%s", name);
	f->tpl = t;
	return registry_fn_version_new(f, image ? xstrdup(image) : NULL, xasprintf("fp-%s", name));
}

/* fvs[0..n) as the malloc'd array registry_publish takes. */
static void publish(struct registry *r, struct fn_version *const *fvs, size_t n)
{
	struct fn_version **a = xcalloc(n + 1, sizeof *a);
	for (size_t i = 0; i < n; i++)
		a[i] = fvs[i];
	registry_publish(r, a, n);
}

/* The ids of the rules an event matches, as "i,j,k" (malloc'd). */
static char *match(const struct snapshot *s, const char *json)
{
	struct event *ev = NULL;
	if (event_parse_json(json, strlen(json), &ev, NULL) != EVENT_OK)
		return xstrdup("(not an event)");
	uint32_t *ids = xcalloc(s->nrules + 1, sizeof *ids);
	size_t n = pattern_set_match(s->set, ev, 0, ids);
	struct buf b;
	buf_init(&b, 1 << 16);
	for (size_t i = 0; i < n; i++)
		buf_appendf(&b, "%s%u", i ? "," : "", ids[i]);
	free(ids);
	event_free(ev);
	return buf_steal(&b);
}

#define CHECK_MATCH(s, json, want)               \
	do {                                     \
		char *got_ = match((s), (json)); \
		CHECK_STR(got_, (want));         \
		free(got_);                      \
	} while (0)

struct names {
	char *v[32];
	size_t n;
};

static void collect(const char *image, void *ctx)
{
	struct names *n = ctx;
	if (n->n < ARRAY_LEN(n->v))
		n->v[n->n++] = xstrdup(image);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The images registry_images_in_use reports, sorted, joined with ' '. */
static char *images(struct registry *r)
{
	struct names n = {0};
	registry_images_in_use(r, collect, &n);
	qsort(n.v, n.n, sizeof *n.v, cmp_str);
	struct buf b;
	buf_init(&b, 1 << 16);
	for (size_t i = 0; i < n.n; i++) {
		buf_appendf(&b, "%s%s", i ? " " : "", n.v[i]);
		free(n.v[i]);
	}
	return buf_steal(&b);
}

TEST(empty_at_first)
{
	struct registry *r = registry_new();
	struct snapshot *s = registry_acquire(r);
	REQUIRE(s != NULL);
	CHECK_INT(s->nfns, 0);
	CHECK_INT(s->nrules, 0);
	REQUIRE(s->set != NULL);
	CHECK_INT(pattern_set_size(s->set), 0);
	CHECK(registry_snapshot_find(s, "anything") == NULL);
	CHECK(registry_snapshot_find(s, "") == NULL);
	CHECK_MATCH(s, "{\"fn\": \"a\", \"n\": 0}", "");
	registry_release(r, s);
	char *im = images(r);
	CHECK_STR(im, "");
	free(im);
	registry_free(r);
	registry_free(NULL);
}

TEST(published_sorted_with_rules_in_execution_order)
{
	struct registry *r = registry_new();
	struct fn_version *c = version("charlie", 2, "relay-fn-charlie:1"),
			  *a = version("alpha", 1, "relay-fn-alpha:1"),
			  *b = version("bravo", 3, NULL);
	CHECK_INT(a->refs, 0);
	struct fn_version *fvs[] = {c, a, b};
	publish(r, fvs, 3);
	struct snapshot *s = registry_acquire(r);
	REQUIRE(s->nfns == 3);
	CHECK_STR(s->fns[0]->fn->name, "alpha");
	CHECK_STR(s->fns[1]->fn->name, "bravo");
	CHECK_STR(s->fns[2]->fn->name, "charlie");
	REQUIRE(s->nrules == 6);
	static const struct {
		const char *fn, *handler;
	} want[] = {{"alpha", "m.h0"}, {"bravo", "m.h0"},   {"bravo", "m.h1"},
		    {"bravo", "m.h2"}, {"charlie", "m.h0"}, {"charlie", "m.h1"}};
	for (size_t i = 0; i < ARRAY_LEN(want); i++) {
		CHECK_STR(s->rules[i].fv->fn->name, want[i].fn);
		CHECK_STR(s->rules[i].rule->handler, want[i].handler);
		CHECK(s->pats[i] == s->rules[i].rule->pattern);
	}
	/* pattern i of the set is rule i */
	CHECK_INT(pattern_set_size(s->set), 6);
	CHECK_MATCH(s, "{\"fn\": \"bravo\", \"n\": 1}", "2");
	CHECK_MATCH(s, "{\"fn\": \"charlie\", \"n\": 0}", "4");
	CHECK_MATCH(s, "{\"fn\": \"alpha\", \"n\": 0}", "0");
	CHECK_MATCH(s, "{\"fn\": \"delta\", \"n\": 0}", "");
	CHECK_INT(a->refs, 1);
	registry_release(r, s);
	registry_free(r);
}

TEST(find_by_name)
{
	struct registry *r = registry_new();
	static const char *const names[] = {"m", "b", "bb", "x.y", "a-1", "z", "k", "b-"};
	struct fn_version *fvs[ARRAY_LEN(names)];
	for (size_t i = 0; i < ARRAY_LEN(names); i++)
		fvs[i] = version(names[i], 1, NULL);
	publish(r, fvs, ARRAY_LEN(names));
	struct snapshot *s = registry_acquire(r);
	for (size_t i = 0; i < ARRAY_LEN(names); i++) {
		struct fn_version *fv = registry_snapshot_find(s, names[i]);
		if (fv != fvs[i])
			T_FAIL_("%s: found %s", names[i], fv ? fv->fn->name : "nothing");
	}
	static const char *const absent[] = {"", "a", "a-", "b--", "ba", "c", "x", "zz", "M"};
	for (size_t i = 0; i < ARRAY_LEN(absent); i++)
		if (registry_snapshot_find(s, absent[i]))
			T_FAIL_("found \"%s\"", absent[i]);
	registry_release(r, s);
	registry_free(r);
}

/* In-flight work keeps the snapshot it matched against: a replaced or
 * removed function's version stays readable until it is released, and its
 * image counts as in use until then. */
TEST(snapshot_in_use_outlives_its_replacement)
{
	struct registry *r = registry_new();
	struct fn_version *v1[] = {version("a", 1, "img-a1"), version("b", 2, "img-b")};
	publish(r, v1, 2);
	struct snapshot *held = registry_acquire(r);
	struct fn_version *v2[] = {version("c", 1, "img-c"), version("a", 3, "img-a2")};
	publish(r, v2, 2);
	char *im = images(r);
	CHECK_STR(im, "img-a1 img-a2 img-b img-c");
	free(im);

	struct snapshot *cur = registry_acquire(r);
	CHECK(cur != held);
	CHECK_INT(cur->nrules, 4);
	CHECK(registry_snapshot_find(cur, "b") == NULL);
	CHECK_STR(registry_snapshot_find(cur, "a")->image, "img-a2");
	/* the held one is unchanged, every byte of it */
	REQUIRE(held->nfns == 2 && held->nrules == 3);
	CHECK_STR(registry_snapshot_find(held, "a")->image, "img-a1");
	CHECK_STR(registry_snapshot_find(held, "b")->fn->tpl->rules[1].handler, "m.h1");
	CHECK_STR(held->rules[2].fv->fingerprint, "fp-b");
	CHECK_MATCH(held, "{\"fn\": \"b\", \"n\": 1}", "2");

	registry_release(r, held);
	im = images(r);
	CHECK_STR(im, "img-a2 img-c");
	free(im);
	/* a removal: nothing is served, the held current one still reads */
	publish(r, NULL, 0);
	CHECK_STR(registry_snapshot_find(cur, "c")->image, "img-c");
	im = images(r);
	CHECK_STR(im, "img-a2 img-c");
	free(im);
	registry_release(r, cur);
	im = images(r);
	CHECK_STR(im, "");
	free(im);
	registry_free(r);
}

/* A version in two snapshots is counted once per snapshot and freed with
 * the last one (ASan's leak and use-after-free checks watch the rest). */
TEST(shared_versions_are_counted)
{
	struct registry *r = registry_new();
	struct fn_version *x = version("x", 1, "img-x"), *y = version("y", 1, "img-y");
	publish(r, &x, 1);
	CHECK_INT(x->refs, 1);
	struct snapshot *held = registry_acquire(r);
	struct fn_version *both[] = {y, x};
	publish(r, both, 2);
	CHECK_INT(x->refs, 2);
	CHECK_INT(y->refs, 1);
	registry_release(r, held);
	CHECK_INT(x->refs, 1);
	CHECK_STR(x->fn->name, "x");
	publish(r, &y, 1);
	CHECK_INT(y->refs, 1);
	char *im = images(r);
	CHECK_STR(im, "img-y");
	free(im);
	registry_free(r);
}

static atomic_int readers_stop, reader_errors;

static void *reader(void *arg)
{
	struct registry *r = arg;
	while (!atomic_load(&readers_stop)) {
		struct snapshot *s = registry_acquire(r);
		for (size_t i = 0; i < s->nfns; i++)
			if (registry_snapshot_find(s, s->fns[i]->fn->name) != s->fns[i] ||
			    s->fns[i]->fn->tpl->nrules < 1)
				atomic_fetch_add(&reader_errors, 1);
		for (size_t i = 0; i < s->nrules; i++)
			if (s->pats[i] != s->rules[i].rule->pattern)
				atomic_fetch_add(&reader_errors, 1);
		registry_release(r, s);
	}
	return NULL;
}

/* Readers acquire and release while the reconciler's role publishes, one
 * version shared by every snapshot and one new each time (the one before
 * freed once no reader holds it). */
TEST(readers_race_a_publisher)
{
	struct registry *r = registry_new();
	pthread_t t[4];
	for (int i = 0; i < 4; i++)
		REQUIRE(pthread_create(&t[i], NULL, reader, r) == 0);
	struct fn_version *keep = version("keep", 2, "img-keep");
	char name[16];
	for (int round = 0; round < 300; round++) {
		snprintf_(name, sizeof name, "fn-%d", round % 7);
		struct fn_version *fvs[] = {version(name, 1 + round % 3, NULL), keep};
		publish(r, fvs, 2);
	}
	atomic_store(&readers_stop, 1);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	CHECK_INT(atomic_load(&reader_errors), 0);
	registry_free(r);
}

T_MAIN(T_CASE(empty_at_first), T_CASE(published_sorted_with_rules_in_execution_order),
       T_CASE(find_by_name), T_CASE(snapshot_in_use_outlives_its_replacement),
       T_CASE(shared_versions_are_counted), T_CASE(readers_race_a_publisher))
