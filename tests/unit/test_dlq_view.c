/* relay dlq's pure parts (src/cmd/dlq_view.c): ids and the exact ls table
 * (its cells escaped). */
#include <stdlib.h>
#include <string.h>

#include "cmd/dlq_view.h"
#include "t.h"
#include "base/util.h"

/* An entry from "name=value" pairs (value up to the next NULL). */
static struct dlq_entry *entry(const char *id, const char *const *kv)
{
	struct dlq_entry *e = dlq_view_entry_new(id, strlen(id));
	for (size_t i = 0; kv && kv[i]; i++) {
		const char *eq = strchr(kv[i], '=');
		dlq_view_entry_add(e, kv[i], (size_t)(eq - kv[i]), eq + 1, strlen(eq + 1));
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
		{"0-1", 0},
		/* A millisecond alone is no entry id: Redis reads it as a range. */
		{"5", -1},
		{"1700000000000", -1},
		{"", -1},
		{"-1", -1},
		{"1-", -1},
		{"1-x", -1},
		{"1-2-3", -1},
		{"abc", -1},
		{"123456789012345678901-0", -1},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		CHECK(dlq_view_id_valid(cases[i].id) == (cases[i].ms >= 0));
		CHECK_INT(dlq_view_id_ms(cases[i].id), cases[i].ms);
	}
}

/* Every cell is escaped: ESC, C1 (CSI U+009B), bidi controls. */
TEST(ls_cells_are_escaped)
{
	struct dlq_entry *e = entry("1700000000000-1",
				    (const char *const[]){"original_id=1-1\x1b[2J", "attempts=1",
							  "function=fn\xc2\x9b"
							  "31m",
							  "reason=boom \x1b]0;pwn\x07 \xe2\x80\xae"
							  "evil \xe2\x81\xa6x",
							  NULL});
	struct buf b;
	buf_init(&b, 1 << 12);
	dlq_view_render_ls(&b, &e, 1, 1764633600, 0);
	CHECK_STR(b.data, "ID               AGE         ORIGINAL    ATTEMPTS  FUNCTION     REASON\n"
			  "1700000000000-1  2023-11-14  1-1\\x1b[2J  1         fn\\u009b31m  boom "
			  "\\x1b]0;pwn\\x07 \\u202eevil \\u2066x\n");
	buf_free(&b);
	dlq_view_entry_free(e);
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
	dlq_view_render_ls(&b, e, ARRAY_LEN(e), 1764633600 /* 2025-12-02 */, width);
	for (size_t i = 0; i < ARRAY_LEN(e); i++)
		dlq_view_entry_free(e[i]);
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
	dlq_view_render_ls(&b, NULL, 0, 0, 0);
	CHECK_STR(b.data, "ID  AGE  ORIGINAL  ATTEMPTS  FUNCTION  REASON\n");
	buf_free(&b);
}

T_MAIN(T_CASE(ids), T_CASE(ls_cells_are_escaped), T_CASE(ls_table))
