/* The bounded YAML reader (yaml.h): node, text and depth bounds with
 * aliases expanded, aliases, duplicate keys, lines, and the work of its lookups. */
#include <math.h>

#include "t.h"
#include "base/util.h"
#include "io/yaml.h"

static const struct ylimits roomy = {1000000, 64, 65536, 1 << 30};

/* Parses text with lim; returns the document or NULL with *err set. */
static struct yaml_doc *parse(const char *text, const struct ylimits *lim, char **err)
{
	struct yaml_doc *d = NULL;
	*err = NULL;
	if (yaml_parse(text, strlen(text), "t.yaml", lim, &d, err) < 0)
		return NULL;
	return d;
}

/* Expects text to fail with a message holding want. */
static void refused(const char *text, const struct ylimits *lim, const char *want)
{
	char *err = NULL;
	struct yaml_doc *d = parse(text, lim, &err);
	if (d) {
		T_FAIL_("accepted: %s", text);
		yaml_free(d);
		return;
	}
	if (!err || !strstr(err, want))
		T_FAIL_("error \"%s\" does not say \"%s\"", err ? err : "(none)", want);
	free(err);
}

TEST(expanded_size_counts_each_reference)
{
	/* root 1, keys a b c 3, [1,2,3] 4, *a 4, [*a, *a] 1 + 8: 21 */
	const char *y = "a: &a [1, 2, 3]\nb: *a\nc: [*a, *a]\n";
	char *err = NULL;
	struct yaml_doc *d = parse(y, &roomy, &err);
	REQUIRE(d != NULL);
	CHECK_INT(yaml_nodes(d), 21);
	const struct ynode *r = yaml_root(d);
	REQUIRE(r && r->type == YN_MAP && r->n == 3);
	/* An alias is the anchored node itself, never a copy. */
	CHECK(r->u.kids[3] == r->u.kids[1]);
	CHECK_INT(r->u.kids[5]->size, 9);
	yaml_free(d);

	struct ylimits exact = {21, 64, 65536, 1 << 30}, less = {20, 64, 65536, 1 << 30};
	d = parse(y, &exact, &err);
	CHECK(d != NULL);
	yaml_free(d);
	refused(y, &less, "t.yaml: more than 20 YAML nodes with aliases expanded (at line 3");
}

/* 1,000 references to a 1,000-node anchor would be a million nodes: the
 * read stops at the reference that crosses the bound, before building
 * anything for it (the position says which). */
TEST(bound_stops_at_the_reference_that_crosses_it)
{
	struct buf b;
	buf_init(&b, 1 << 20);
	buf_appendf(&b, "big: &big [");
	for (int i = 0; i < 999; i++)
		buf_appendf(&b, "%s0", i ? "," : "");
	buf_appendf(&b, "]\nrefs:\n");
	for (int i = 0; i < 1000; i++)
		buf_appendf(&b, "- *big\n");
	/* 1 + 2 keys + 1000 + seq 1 = 1004 before the list items; each *big
	 * adds 1000: the 99th makes 100,004 (positions are libfyaml's: an
	 * alias's is its name's, a quoted scalar's its first character's). */
	struct ylimits lim = {100000, 64, 65536, 1 << 30};
	refused(b.data, &lim,
		"more than 100000 YAML nodes with aliases expanded (at line 101, column 4)");
	buf_free(&b);
}

/* Text counts like nodes: every scalar's bytes (keys too), an alias as all
 * the text of the node it stands for, checked before anything is built. */
TEST(expanded_text_counts_each_reference)
{
	/* keys a b c: 3; "hello" 5; *a 5; [*a, *a] 10: 23 bytes */
	const char *y = "a: &a hello\nb: *a\nc: [*a, *a]\n";
	char *err = NULL;
	struct yaml_doc *d = parse(y, &roomy, &err);
	REQUIRE(d != NULL);
	CHECK_INT(yaml_bytes(d), 23);
	const struct ynode *r = yaml_root(d);
	REQUIRE(r && r->type == YN_MAP && r->n == 3);
	CHECK_INT(r->u.kids[5]->bytes, 10);
	CHECK_INT(r->bytes, 23);
	yaml_free(d);

	struct ylimits exact = {1000, 64, 65536, 23}, less = {1000, 64, 65536, 22};
	d = parse(y, &exact, &err);
	CHECK(d != NULL);
	yaml_free(d);
	refused(y, &less,
		"t.yaml: more than 22 bytes of text with aliases expanded (at line 3, column 10)");

	/* 1,000 references to 1,000 bytes: the read stops at the 3rd. */
	struct buf b;
	buf_init(&b, 1 << 20);
	buf_appendf(&b, "big: &big \"");
	for (int i = 0; i < 1000; i++)
		buf_append(&b, "x", 1);
	buf_appendf(&b, "\"\nrefs:\n");
	for (int i = 0; i < 1000; i++)
		buf_appendf(&b, "- *big\n");
	/* big, refs: 7; the anchor 1,000; then 1,000 each: 4,007 > 4,000 */
	struct ylimits lim = {100000, 64, 65536, 4000};
	refused(b.data, &lim,
		"more than 4000 bytes of text with aliases expanded (at line 5, column 4)");
	buf_free(&b);
}

TEST(depth_counts_aliased_levels)
{
	struct buf b;
	buf_init(&b, 1 << 16);
	for (int i = 0; i < 64; i++)
		buf_append(&b, "[", 1);
	for (int i = 0; i < 64; i++)
		buf_append(&b, "]", 1);
	char *err = NULL;
	struct yaml_doc *d = parse(b.data, &roomy, &err);
	CHECK(d != NULL);
	yaml_free(d);
	buf_reset(&b);
	for (int i = 0; i < 65; i++)
		buf_append(&b, "[", 1);
	for (int i = 0; i < 65; i++)
		buf_append(&b, "]", 1);
	refused(b.data, &roomy, "t.yaml: nested deeper than 64 levels");
	buf_free(&b);

	/* Three levels in the anchor, two around the alias: 5 > 4. */
	struct ylimits four = {1000, 4, 65536, 1 << 30};
	refused("a: &a [[[1]]]\nb: [*a]\n", &four, "nested deeper than 4 levels");
	struct ylimits five = {1000, 5, 65536, 1 << 30};
	d = parse("a: &a [[[1]]]\nb: [*a]\n", &five, &err);
	CHECK(d != NULL);
	yaml_free(d);
}

TEST(alias_errors)
{
	refused("a: *x\nb: &x 1\n", &roomy,
		"invalid YAML at line 1, column 5: alias *x has no anchor before it");
	refused("a: &x [1, *x]\n", &roomy,
		"invalid YAML at line 1, column 12: alias *x is inside the node its anchor names");
	/* The most recent anchor of a name before the alias wins. */
	char *err = NULL;
	struct yaml_doc *d = parse("a: &x 1\nb: &x [2]\nc: *x\nd: &x 3\n", &roomy, &err);
	REQUIRE(d != NULL);
	const struct ynode *r = yaml_root(d);
	CHECK(r->u.kids[5]->type == YN_SEQ);
	yaml_free(d);
}

TEST(duplicate_keys)
{
	refused("{a: 1, \"a\": 2}\n", &roomy, "invalid YAML at line 1, column 9: duplicate key");
	refused("{1: 1, !!str 1: 2}\n", &roomy, "duplicate key");
	refused("k: &k a\nm: {*k : 1, a: 2}\n", &roomy, "line 2, column 13: duplicate key");
	refused("k: &k a\nm: {*k : 1, *k : 2}\n", &roomy, "duplicate key");
	refused("a:\n  b: 1\n  c: 2\n  b: 3\n", &roomy, "line 4, column 3: duplicate key");
	/* The same key in different maps, and values equal to keys, are fine. */
	char *err = NULL;
	struct yaml_doc *d = parse("a: {a: a}\nb: {a: a}\n", &roomy, &err);
	CHECK(d != NULL);
	yaml_free(d);
}

/* libfyaml compared each new key with every earlier one (20,000 keys took
 * 39 s) and resolved each alias by scanning every anchor: here both are
 * balanced-tree lookups, O(n log n) comparisons in all. */
TEST(keys_and_anchors_cost_n_log_n)
{
	enum { N = 20000 };
	struct buf b;
	buf_init(&b, 4 << 20);
	buf_appendf(&b, "m:\n");
	for (int i = 0; i < N; i++)
		buf_appendf(&b, "  k%d: &a%d %d\n", i, i, i);
	buf_appendf(&b, "l:\n");
	for (int i = 0; i < N; i++)
		buf_appendf(&b, "  - *a%d\n", (i * 7919) % N);
	char *err = NULL;
	struct yaml_doc *d = parse(b.data, &roomy, &err);
	REQUIRE(d != NULL);
	/* Per key: a lookup and an insertion; per anchor: the same; per alias:
	 * a lookup. Each is at most 2 log2(n) + 2 comparisons (red-black). */
	double per = 2 * log2((double)N) + 2;
	uint64_t bound = (uint64_t)(5 * N * per);
	if (yaml_work(d) > bound)
		T_FAIL_("%llu comparisons for %d keys, anchors and aliases; bound %llu",
			(unsigned long long)yaml_work(d), N, (unsigned long long)bound);
	yaml_free(d);
	buf_free(&b);
}

TEST(line_bound)
{
	struct ylimits lim = {1000000, 64, 100, 1 << 30};
	struct buf b;
	buf_init(&b, 4096);
	buf_appendf(&b, "a: 1\nb: [");
	while (b.len < 5 + 99)
		buf_append(&b, "1,", 2);
	b.len = 5 + 99;
	b.data[b.len - 1] = ']';
	b.data[b.len] = '\0';
	char *err = NULL;
	struct yaml_doc *d = parse(b.data, &lim, &err); /* line 2 is exactly 99 bytes */
	CHECK(d != NULL);
	yaml_free(d);
	buf_reset(&b);
	buf_appendf(&b, "a: 1\r\nb: \"");
	for (int i = 0; i < 97; i++) /* 4 + 97 + 1: 102 bytes */
		buf_append(&b, "x", 1);
	buf_appendf(&b, "\"\n");
	refused(b.data, &lim, "t.yaml: line 2 is longer than 100 bytes");
	buf_free(&b);
}

TEST(scalars_and_documents)
{
	char *err = NULL;
	struct yaml_doc *d =
		parse("a: !!int \"5\"\nb: 'x'\nc:\nd: ~\ne: |\n  text\n", &roomy, &err);
	REQUIRE(d != NULL);
	const struct ynode *r = yaml_root(d);
	REQUIRE(r->n == 5);
	const struct ynode *a = r->u.kids[1], *bq = r->u.kids[3], *c = r->u.kids[5],
			   *dn = r->u.kids[7], *e = r->u.kids[9];
	CHECK(a->tag == YT_INT && !a->plain);
	CHECK_STR(a->u.s.text, "5");
	CHECK(bq->tag == YT_NONE && !bq->plain);
	CHECK(c->plain && c->u.s.len == 0);
	CHECK(dn->plain);
	CHECK_STR(dn->u.s.text, "~");
	CHECK(!e->plain);
	CHECK_STR(e->u.s.text, "text\n");
	yaml_free(d);

	/* Only the first document is read. */
	d = parse("a: 1\n---\n[[[\n", &roomy, &err);
	REQUIRE(d != NULL);
	CHECK_INT(yaml_nodes(d), 3);
	yaml_free(d);
	/* Nothing but comments: no document, no error. */
	d = parse("# nothing\n", &roomy, &err);
	REQUIRE(d != NULL);
	CHECK(yaml_root(d) == NULL);
	yaml_free(d);
	refused("a: [1, 2\n", &roomy, "invalid YAML at line");
}

T_MAIN(T_CASE(expanded_size_counts_each_reference), T_CASE(expanded_text_counts_each_reference),
       T_CASE(bound_stops_at_the_reference_that_crosses_it), T_CASE(depth_counts_aliased_levels),
       T_CASE(alias_errors), T_CASE(duplicate_keys), T_CASE(keys_and_anchors_cost_n_log_n),
       T_CASE(line_bound), T_CASE(scalars_and_documents))
