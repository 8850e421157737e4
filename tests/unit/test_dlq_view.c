/* relay dlq's pure parts (src/cmd/dlq_view.c): ids, filters, escaping and
 * cutting, and the exact ls table. */
#include <stdlib.h>
#include <string.h>

#include "cmd/dlq_view.h"
#include "t.h"
#include "util.h"

/* An entry from "name=value" pairs (value up to the next NULL). */
static struct dlq_entry *entry(const char *id, const char *const *kv)
{
	struct dlq_entry *e = dlq_entry_new(id, strlen(id));
	for (size_t i = 0; kv && kv[i]; i++) {
		const char *eq = strchr(kv[i], '=');
		dlq_entry_add(e, kv[i], (size_t)(eq - kv[i]), eq + 1, strlen(eq + 1));
	}
	return e;
}

TEST(ids)
{
	static const struct {
		const char *id;
		long long ms;
	} cases[] = {
		{"1700000000000-0", 1700000000000LL},
		{"5", 5},
		{"0-1", 0},
		{"", -1},
		{"-1", -1},
		{"1-", -1},
		{"1-x", -1},
		{"1-2-3", -1},
		{"abc", -1},
		{"123456789012345678901-0", -1},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		CHECK(dlq_id_valid(cases[i].id) == (cases[i].ms >= 0));
		CHECK_INT(dlq_id_ms(cases[i].id), cases[i].ms);
	}
}

TEST(filters)
{
	struct dlq_entry *newer =
		entry("2000-0",
		      (const char *const[]){"reason=fn/h exhausted: boom", "function=fn", NULL});
	struct dlq_entry *older = entry("1000-0", (const char *const[]){"reason=old", NULL});
	struct dlq_entry *malformed =
		entry("1500-0", (const char *const[]){"reason=malformed event (not_json): x",
						      "function=", NULL});
	static const struct {
		struct dlq_filter f;
		bool newer, older, malformed;
	} cases[] = {
		{{0}, true, true, true},
		{{.since_ms = 1500}, true, false, true},
		{{.since_ms = 2001}, false, false, false},
		{{.reason = "boom"}, true, false, false},
		{{.reason = "malformed event"}, false, false, true},
		{{.reason = "BOOM"}, false, false, false}, /* case matters */
		{{.function = "fn"}, true, false, false},
		{{.function = "f"}, false, false, false}, /* equal, not a prefix */
		{{.function = ""}, false, false, true},
		{{.since_ms = 1500, .reason = "exhausted", .function = "fn"}, true, false, false},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		CHECK(dlq_filter_match(&cases[i].f, newer) == cases[i].newer);
		CHECK(dlq_filter_match(&cases[i].f, older) == cases[i].older);
		CHECK(dlq_filter_match(&cases[i].f, malformed) == cases[i].malformed);
	}
	/* The last of a repeated field counts, as Redis readers take it. */
	struct dlq_entry *twice =
		entry("3000-0", (const char *const[]){"function=a", "function=b", NULL});
	CHECK(dlq_filter_match(&(struct dlq_filter){.function = "b"}, twice));
	CHECK(!dlq_filter_match(&(struct dlq_filter){.function = "a"}, twice));
	dlq_entry_free(twice);
	dlq_entry_free(newer);
	dlq_entry_free(older);
	dlq_entry_free(malformed);
}

TEST(escape_and_cut)
{
	static const struct {
		const char *in;
		size_t n, max;
		const char *want;
	} cases[] = {
		{"plain", 5, 0, "plain"},
		{"a\nb\tc\rd\\e", 9, 0, "a\\nb\\tc\\rd\\\\e"},
		{"nul\0x", 5, 0, "nul\\x00x"},
		{"bad\xff", 4, 0, "bad\\xff"},
		{"caf\xc3\xa9", 5, 0, "caf\xc3\xa9"},
		{"0123456789", 10, 10, "0123456789"},  /* fits exactly */
		{"0123456789a", 11, 10, "0123456..."}, /* 10 columns */
		/* never half an escape: "\x01" does not fit in the 7 left */
		{"abcde\x01xyz", 9, 10, "abcde..."},
		/* a UTF-8 sequence is one column and never split */
		{"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", 10, 4, "\xc3\xa9..."},
		{"abcdef", 6, 2, "..."},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		char *got = dlq_escape(cases[i].in, cases[i].n, cases[i].max);
		CHECK_STR(got, cases[i].want);
		free(got);
	}
}

/* The table with dead-lettered times in 2023 (ages read as dates) so that
 * it is exact at any now. */
static char *render(size_t width)
{
	struct dlq_entry *e[] = {
		entry("1700000002000-0",
		      (const char *const[]){"original_id=1699999999002-0", "attempts=3",
					    "function=fn-a", "handler=h.handler",
					    "reason=fn-a/h.handler exhausted after 3 attempt(s): "
					    "exit status 1:\nboom",
					    NULL}),
		entry("1700000001000-0",
		      (const char *const[]){"original_id=1699999999001-0", "attempts=0",
					    "function=", "reason=malformed event (not_json): x",
					    NULL}),
		entry("1700000000000-0",
		      (const char *const[]){"original_id=1-0", "reason=old", NULL}),
	};
	struct buf b;
	buf_init(&b, 1 << 16);
	dlq_render_ls(&b, e, ARRAY_LEN(e), 1764633600 /* 2025-12-02 */, width);
	for (size_t i = 0; i < ARRAY_LEN(e); i++)
		dlq_entry_free(e[i]);
	return buf_steal(&b);
}

TEST(ls_table)
{
	char *got = render(0);
	CHECK_STR(
		got,
		"ID               AGE         ORIGINAL         ATTEMPTS  FUNCTION  REASON\n"
		"1700000002000-0  2023-11-14  1699999999002-0  3         fn-a      fn-a/h.handler "
		"exhausted after 3 attempt(s): exit status 1:\\nboom\n"
		"1700000001000-0  2023-11-14  1699999999001-0  0         -         malformed "
		"event (not_json): x\n"
		"1700000000000-0  2023-11-14  1-0              -         -         old\n");
	free(got);
	/* 80 columns: 66 before REASON, 14 for it. */
	got = render(80);
	CHECK_STR(
		got,
		"ID               AGE         ORIGINAL         ATTEMPTS  FUNCTION  REASON\n"
		"1700000002000-0  2023-11-14  1699999999002-0  3         fn-a      fn-a/h.hand...\n"
		"1700000001000-0  2023-11-14  1699999999001-0  0         -         malformed e...\n"
		"1700000000000-0  2023-11-14  1-0              -         -         old\n");
	free(got);
	/* Narrower than the columns: REASON keeps 10. */
	got = render(20);
	CHECK(strstr(got, "  fn-a      fn-a/h....\n") != NULL);
	free(got);
	/* No entries: the header alone. */
	struct buf b;
	buf_init(&b, 1 << 10);
	dlq_render_ls(&b, NULL, 0, 0, 0);
	CHECK_STR(b.data, "ID  AGE  ORIGINAL  ATTEMPTS  FUNCTION  REASON\n");
	buf_free(&b);
}

T_MAIN(T_CASE(ids), T_CASE(filters), T_CASE(escape_and_cut), T_CASE(ls_table))
