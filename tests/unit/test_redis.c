#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "io/redis.h"
#include "t.h"
#include "tfiles.h"

TEST(backoff_is_capped_and_jittered)
{
	static const struct {
		int failures;
		int64_t lo, hi;
	} rows[] = {
		{1, 500, 1000},	  {2, 1000, 2000},   {3, 2000, 4000},	{4, 4000, 8000},
		{5, 8000, 16000}, {6, 15000, 30000}, {7, 15000, 30000}, {100, 15000, 30000},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		int64_t min = INT64_MAX, max = 0;
		for (int k = 0; k < 2000; k++) {
			int64_t w = redis_backoff_ms(rows[i].failures);
			min = w < min ? w : min;
			max = w > max ? w : max;
		}
		if (min < rows[i].lo || max > rows[i].hi)
			T_FAIL_("failures=%d: waits in [%" PRId64 ", %" PRId64
				"], want within [%" PRId64 ", %" PRId64 "]",
				rows[i].failures, min, max, rows[i].lo, rows[i].hi);
		/* jittered: not one constant value */
		CHECK(max > min);
	}
}

static atomic_int stop_flag;

static void *stopper(void *arg)
{
	usleep(1700 * 1000);
	atomic_store(&stop_flag, 1);
	return arg;
}

/* A handle for uri, not connected; NULL (and why, printed) when uri does
 * not parse. */
static struct redis *handle_for(const char *uri)
{
	struct redis_uri u;
	char *why = NULL;
	if (redis_uri_parse(uri, &u, &why) < 0) {
		printf("  %s: %s\n", uri, why);
		free(why);
		return NULL;
	}
	struct redis *r = redis_new(&u, NULL);
	redis_uri_free(&u);
	return r;
}

/* Against a port where nothing listens: one WARN line per failed attempt,
 * naming the address and the reason, and the loop ends when asked. */
TEST(retry_logs_each_failure_and_stops)
{
	struct redis *r = handle_for("redis://user:Pa55word@127.0.0.1:1");
	REQUIRE(r != NULL);
	t_capture_logs();
	atomic_store(&stop_flag, 0);
	pthread_t t;
	pthread_create(&t, NULL, stopper, NULL);
	CHECK_INT(redis_connect_retry(r, &stop_flag), -1);
	pthread_join(t, NULL);
	char *out = t_captured_logs();
	t_release_logs();
	REQUIRE(out[0] != '\0');
	int warns = t_count(out, "level=WARN msg=\"redis connection failed\"");
	/* attempts at ~0 s and ~0.5-1 s (and maybe ~1.5 s) before the stop at 1.7 s */
	CHECK(warns >= 2 && warns <= 3);
	CHECK(strstr(out, "addr=redis://127.0.0.1:1") != NULL);
	CHECK(strstr(out, "connect: Connection refused") != NULL);
	CHECK(strstr(out, "retry_in=") != NULL);
	CHECK(strstr(out, "Pa55word") == NULL);
	CHECK(!redis_is_connected(r));
	free(out);
	redis_free(r);
}

TEST(commands_on_a_closed_connection_fail_cleanly)
{
	struct redis *r = handle_for("127.0.0.1:1");
	REQUIRE(r != NULL);
	CHECK(redis_command(r, "PING") == NULL);
	CHECK(redis_get_reply(r, 10) == NULL);
	CHECK(redis_errmsg(r)[0] != '\0');
	redis_free(r);
}

/* EVALSHA needs the server's name for a script: SHA1 of its text, lower
 * case hex (what SCRIPT LOAD answers for "return 1"). */
TEST(scripts_are_named_by_the_sha1_redis_gives_them)
{
	struct redis_script s;
	redis_script_init(&s, "return 1");
	CHECK_STR(s.sha, "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
	CHECK(s.text != NULL && strcmp(s.text, "return 1") == 0);
	redisReply noscript = {.type = REDIS_REPLY_ERROR,
			       .str = "NOSCRIPT No matching script. Please use EVAL.",
			       .len = 45};
	redisReply other = {.type = REDIS_REPLY_ERROR, .str = "ERR something", .len = 13};
	redisReply ok = {.type = REDIS_REPLY_STATUS, .str = "NOSCRIPT", .len = 8};
	CHECK(redis_reply_is_noscript(&noscript));
	CHECK(!redis_reply_is_noscript(&other));
	CHECK(!redis_reply_is_noscript(&ok));
	CHECK(!redis_reply_is_noscript(NULL));
}

/* A subscriber's wait on a closed connection is an error (-1), never a
 * timeout (0) that would have its caller wait forever. */
TEST(waiting_on_a_closed_connection_is_an_error)
{
	struct redis *r = handle_for("127.0.0.1:1");
	REQUIRE(r != NULL);
	redisReply dummy = {0}, *rep = &dummy;
	CHECK_INT(redis_wait_reply(r, 10, &rep), -1);
	CHECK(rep == NULL);
	const char *argv[] = {"1", "k"};
	struct redis_script s;
	redis_script_init(&s, "return 1");
	CHECK(redis_script_run(r, &s, 2, argv, NULL) == NULL);
	CHECK(redis_errmsg(r)[0] != '\0');
	redis_free(r);
}

/* ---- reply guard ------------------------------------------------------ */

/* RESP text built for the guard tests (no NULs inside). */
struct resp {
	char s[8192];
	size_t n;
};

static void put(struct resp *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct resp *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(b->s + b->n, sizeof b->s - b->n, fmt, ap);
	va_end(ap);
	b->n += (size_t)k;
}

static void put_str(struct resp *b, const char *v)
{
	put(b, "$%zu\r\n%s\r\n", strlen(v), v);
}

/* One stream entry as XREADGROUP sends it: [id, [f1, v1, ...]]. */
static void put_entry(struct resp *b, const char *id, int nf, const char *const *f)
{
	put(b, "*2\r\n");
	put_str(b, id);
	put(b, "*%d\r\n", nf);
	for (int i = 0; i < nf; i++)
		put_str(b, f[i]);
}

/* An XREADGROUP reply for stream "s" with the given entries (their RESP). */
static void put_reply(struct resp *b, int n, const struct resp *entries)
{
	put(b, "*1\r\n*2\r\n");
	put_str(b, "s");
	put(b, "*%d\r\n", n);
	for (int i = 0; i < n; i++)
		put(b, "%.*s", (int)entries[i].n, entries[i].s);
}

/* Feeds p one byte at a time: the index of the byte refused, or -1. */
static long feed_bytes(struct redis_guard *g, const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (redis_guard_feed(g, p + i, 1) < 0)
			return (long)i;
	return -1;
}

/* The index at which a fresh guard (depth, max) refuses p, fed byte by
 * byte, or -1; and whether feeding it whole agrees. */
static long refused_at(int depth, size_t max, const char *p, size_t n)
{
	struct redis_guard g;
	redis_guard_init(&g, depth, max, 0);
	long at = feed_bytes(&g, p, n);
	redis_guard_init(&g, depth, max, 0);
	int whole = redis_guard_feed(&g, p, n);
	if ((whole < 0) != (at >= 0))
		T_FAIL_("fed whole: %d, byte by byte: refused at %ld", whole, at);
	return at;
}

static const char *const EVENT_FIELDS[] = {"event", "{\"kind\":\"a\"}"};

/* The index at which a fresh guard (depth 3, 1 MiB, max_elements) refuses
 * p fed byte by byte, or -1; feeding it whole must agree. */
static long refused_at_elements(size_t max_elements, const char *p, size_t n)
{
	struct redis_guard g;
	redis_guard_init(&g, 3, 1 << 20, max_elements);
	long at = feed_bytes(&g, p, n);
	redis_guard_init(&g, 3, 1 << 20, max_elements);
	int whole = redis_guard_feed(&g, p, n);
	if ((whole < 0) != (at >= 0))
		T_FAIL_("fed whole: %d, byte by byte: refused at %ld", whole, at);
	return at;
}

/* max_elements: an entry of 20 one-byte fields is 43 elements (the entry,
 * its id, the field array, 40 strings). 43 pass, for each of two entries
 * (each counts its own); at 42 the refusal is at the '\n' of the last
 * string's header, before hiredis would allocate it. */
TEST(guard_bounds_the_elements_of_an_entry)
{
	const char *f[40];
	for (int i = 0; i < 40; i++)
		f[i] = "a";
	struct resp e[2] = {0}, b = {0};
	put_entry(&e[0], "1-1", 40, f);
	put_entry(&e[1], "1-2", 40, f);
	put_reply(&b, 2, e);
	CHECK_INT(refused_at_elements(43, b.s, b.n), -1);
	CHECK_INT(refused_at_elements(0, b.s, b.n), -1);
	/* The first entry's last string header: "$1\r\n" before its "a\r\n",
	 * the last 7 bytes of the entry. */
	size_t first_entry_end = b.n - e[1].n;
	CHECK_INT(refused_at_elements(42, b.s, b.n), (long)(first_entry_end - 7 + 3));
}

/* Two entries and a second reply, whole, in every split into two chunks,
 * and byte by byte: nothing refused, and the scanner ends between replies. */
TEST(guard_passes_whole_replies_however_they_are_split)
{
	struct resp e[2] = {0}, b = {0};
	put_entry(&e[0], "1-1", 2, EVENT_FIELDS);
	put_entry(&e[1], "1-2", 2, EVENT_FIELDS);
	put_reply(&b, 2, e);
	put(&b, ":2\r\n"); /* a second reply after a complete one */
	for (size_t cut = 0; cut <= b.n; cut++) {
		struct redis_guard g;
		redis_guard_init(&g, 3, e[0].n, 0);
		if (redis_guard_feed(&g, b.s, cut) < 0 ||
		    redis_guard_feed(&g, b.s + cut, b.n - cut) < 0)
			T_FAIL_("refused with a cut at %zu", cut);
		CHECK(g.sp == 0 && !g.in);
	}
	CHECK_INT(refused_at(3, e[0].n, b.s, b.n), -1);
}

/* An element exactly at max passes; one byte over is refused at the '\n'
 * of the header of the string that takes it over, not a byte before, and
 * whatever comes before it (the reply's own headers, earlier entries) is
 * not counted against it. */
TEST(guard_refuses_at_the_header_of_the_string_that_crosses_max)
{
	char big[301];
	memset(big, 'x', 300);
	big[300] = '\0';
	const char *const fields[] = {"event", big};
	struct resp e[2] = {0}, b = {0};
	put_entry(&e[0], "1-1", 2, EVENT_FIELDS);
	put_entry(&e[1], "1-2", 2, fields);
	put_reply(&b, 2, e);
	size_t header_nl = (size_t)(strstr(b.s, "$300\r\n") - b.s) + 5;
	CHECK_INT(refused_at(3, e[1].n, b.s, b.n), -1);
	CHECK_INT(refused_at(3, e[1].n - 1, b.s, b.n), (long)header_nl);
	/* The same entry first in its reply; and a string that alone is the
	 * element (depth 2 of a plain array reply). */
	struct resp b1 = {0};
	put_reply(&b1, 1, &e[1]);
	header_nl = (size_t)(strstr(b1.s, "$300\r\n") - b1.s) + 5;
	CHECK_INT(refused_at(3, e[1].n, b1.s, b1.n), -1);
	CHECK_INT(refused_at(3, e[1].n - 1, b1.s, b1.n), (long)header_nl);
	struct resp s = {0};
	put(&s, "*2\r\n$1\r\na\r\n");
	put_str(&s, big);
	CHECK_INT(refused_at(1, 6 + 300 + 2, s.s, s.n), -1);
	CHECK_INT(refused_at(1, 6 + 300 + 1, s.s, s.n), (long)(s.n - 300 - 3));
}

/* Nested arrays, nulls, empty arrays, integers, status and error lines:
 * each counts what it takes on the wire, and the element ends where
 * hiredis ends it. */
TEST(guard_counts_nested_arrays_nulls_and_lines)
{
	/* Depth 1: [[["abc"], 5, nil, [], nil-array, +OK, -ERR x], "next"] */
	const char elem[] = "*7\r\n*1\r\n$3\r\nabc\r\n:5\r\n$-1\r\n*0\r\n*-1\r\n+OK\r\n-ERR x\r\n";
	struct resp b = {0};
	put(&b, "*2\r\n%s$4\r\nnext\r\n", elem);
	const size_t len = sizeof elem - 1;
	CHECK_INT(refused_at(1, len, b.s, b.n), -1);
	/* One byte less: refused at the end of the last line (no string to
	 * withhold: the line that took it over). */
	CHECK_INT(refused_at(1, len - 1, b.s, b.n), (long)(4 + len - 1));
	/* Only "abc" crosses at its header. */
	CHECK_INT(refused_at(1, 4 + 4 + 4, b.s, b.n), (long)(4 + 4 + 4 + 3));
	/* Nulls and empties as whole replies, and as the guarded elements:
	 * one byte under their size, refused where the size is known. */
	static const struct {
		const char *text;
		long at;
	} alone[] = {{"$-1\r\n", 4}, {"*-1\r\n", 4},	 {"*0\r\n", 3},	   {":-7\r\n", 4},
		     {"+OK\r\n", 4}, {"-ERR no\r\n", 8}, {"$0\r\n\r\n", 3}};
	for (size_t i = 0; i < ARRAY_LEN(alone); i++) {
		const char *t = alone[i].text;
		struct redis_guard g;
		redis_guard_init(&g, 0, 64, 0);
		CHECK_INT(redis_guard_feed(&g, t, strlen(t)), 0);
		CHECK(g.sp == 0 && !g.in);
		CHECK_INT(redis_guard_feed(&g, t, strlen(t)), 0);
		CHECK_INT(refused_at(0, strlen(t), t, strlen(t)), -1);
		CHECK_INT(refused_at(0, strlen(t) - 1, t, strlen(t)), alone[i].at);
	}
}

/* The first string of the refused reply's first entry is kept (the batch's
 * first id), whether the refusal is in that entry or a later one; a reply
 * completed before (an XACK's integer, a whole XREADGROUP reply) leaves
 * nothing behind. */
TEST(guard_keeps_the_first_id_of_the_refused_reply)
{
	char big[301];
	memset(big, 'y', 300);
	big[300] = '\0';
	const char *const fields[] = {"event", big};
	struct resp small = {0}, large = {0}, other = {0};
	put_entry(&small, "1700000000000-7", 2, EVENT_FIELDS);
	put_entry(&large, "1700000000001-0", 2, fields);
	put_entry(&other, "1-1", 2, EVENT_FIELDS);
	struct resp done[1] = {other}, pair[2] = {small, large}, lone[1] = {large}, a = {0};
	put(&a, ":3\r\n");
	put_reply(&a, 1, done);
	const size_t completed = a.n;
	put_reply(&a, 2, pair);
	struct redis_guard g;
	redis_guard_init(&g, 3, small.n, 0);
	CHECK(feed_bytes(&g, a.s, a.n) >= 0);
	CHECK(g.firstlen == 15 && memcmp(g.first, "1700000000000-7", 15) == 0);
	struct resp b = {0};
	put_reply(&b, 1, lone);
	redis_guard_init(&g, 3, small.n, 0);
	CHECK(redis_guard_feed(&g, b.s, b.n) < 0);
	CHECK(g.firstlen == 15 && memcmp(g.first, "1700000000001-0", 15) == 0);
	/* A completed reply leaves nothing for the next. */
	redis_guard_init(&g, 3, small.n, 0);
	CHECK_INT(redis_guard_feed(&g, a.s, completed), 0);
	CHECK_INT((long)g.firstlen, 0);
	CHECK(!g.first_done);
}

/* What is not RESP2, or not as hiredis 0.14 takes it, is refused, and
 * the scanner stays refused. */
TEST(guard_refuses_what_is_not_resp2)
{
	static const char *const bad[] = {
		"HTTP/1.1 200 OK\r\n",		/* not a type byte */
		"%1\r\n+a\r\n+b\r\n",		/* a RESP3 map */
		"_\r\n",			/* RESP3 null */
		"$abc\r\n",			/* not a number */
		"$\r\n",			/* no number */
		"$-2\r\n",			/* negative, not -1 */
		"*1-\r\n",			/* '-' inside */
		"$1\r2\r\nab\r\n",		/* a lone '\r' in a header */
		"$1\r\nab\r\n",			/* the string longer than announced */
		"$2\r\na\r\n\r\n",		/* shorter: its CRLF is not where it must be */
		"$99999999999999999999999\r\n", /* too many digits */
		":12a\r\n",			/* not an integer */
		"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", /* 9 deep */
		"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*0\r\n",	/* 9, empty */
	};
	for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
		struct redis_guard g;
		redis_guard_init(&g, 3, 1 << 20, 0);
		if (redis_guard_feed(&g, bad[i], strlen(bad[i])) == 0)
			T_FAIL_("accepted %s", bad[i]);
		CHECK(redis_guard_feed(&g, ":1\r\n", 4) < 0);
		CHECK(refused_at(3, 1 << 20, bad[i], strlen(bad[i])) >= 0);
	}
	/* Eight deep is what hiredis takes. */
	const char eight[] = "*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n";
	CHECK_INT(refused_at(3, 1 << 20, eight, sizeof eight - 1), -1);
	/* Status and error lines may hold any byte but CRLF. */
	const char odd[] = "+a\rb\nc\r\n-x:$*\r\n";
	CHECK_INT(refused_at(0, 1 << 20, odd, sizeof odd - 1), -1);
}

/* A number hiredis 0.14 refuses is refused no later: written otherwise
 * than its shortest way (a leading zero, "-0"), an array count over
 * INT_MAX; and a ninth nested array at its type byte, where hiredis stops.
 * Found by tests/fuzz/fuzz_resp.c (corpus/resp/regress-*). */
TEST(guard_refuses_what_hiredis_refuses_no_later)
{
	static const struct {
		const char *text;
		long at; /* the byte refused, -1: none */
	} cases[] = {
		{":01\r\n", 2},
		{":-01\r\n", 2},
		{"$-0\r\n\r\n", 2},
		{"*00\r\n", 2},
		{":-0\r\n", 2},
		{"*2147483648\r\n", 12},
		{"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", 32},
		{"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*-1\r\n", 32},
		/* what both take */
		{":0\r\n", -1},
		{":-10\r\n", -1},
		{"$0\r\n\r\n", -1},
		{"*-1\r\n", -1},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		const char *t = cases[i].text;
		size_t n = strlen(t);
		long at = refused_at(0, 1 << 20, t, n);
		if (at != cases[i].at)
			T_FAIL_("%zu: refused at %ld, want %ld", i, at, cases[i].at);
		/* hiredis: an error on the text, none before the refused byte */
		redisReader *r = redisReaderCreate();
		void *reply = NULL;
		size_t upto = at < 0 ? n : (size_t)at;
		CHECK(redisReaderFeed(r, t, upto) == REDIS_OK);
		CHECK_INT(redisReaderGetReply(r, &reply), REDIS_OK);
		if (reply)
			freeReplyObject(reply);
		if (at >= 0) {
			CHECK(redisReaderFeed(r, t + upto, n - upto) == REDIS_OK);
			CHECK_INT(redisReaderGetReply(r, &reply), REDIS_ERR);
		}
		redisReaderFree(r);
	}
	/* Eight deep, and a count of INT_MAX, still pass. */
	const char count[] = "*2147483647\r\n:1\r\n";
	CHECK_INT(refused_at(0, 1 << 20, count, sizeof count - 1), -1);
}

T_MAIN(T_CASE(backoff_is_capped_and_jittered), T_CASE(retry_logs_each_failure_and_stops),
       T_CASE(commands_on_a_closed_connection_fail_cleanly),
       T_CASE(scripts_are_named_by_the_sha1_redis_gives_them),
       T_CASE(waiting_on_a_closed_connection_is_an_error),
       T_CASE(guard_bounds_the_elements_of_an_entry),
       T_CASE(guard_passes_whole_replies_however_they_are_split),
       T_CASE(guard_refuses_at_the_header_of_the_string_that_crosses_max),
       T_CASE(guard_counts_nested_arrays_nulls_and_lines),
       T_CASE(guard_keeps_the_first_id_of_the_refused_reply),
       T_CASE(guard_refuses_what_is_not_resp2), T_CASE(guard_refuses_what_hiredis_refuses_no_later))
