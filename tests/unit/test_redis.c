#include <pthread.h>
#include <unistd.h>

#include "log.h"
#include "redis.h"
#include "t.h"

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

static volatile int stop_flag;

static void *stopper(void *arg)
{
	usleep(1700 * 1000);
	stop_flag = 1;
	return arg;
}

/* Against a port where nothing listens: one WARN line per failed attempt,
 * naming the address and the reason, and the loop ends when asked. */
TEST(retry_logs_each_failure_and_stops)
{
	struct redis_uri u;
	char *why = NULL;
	REQUIRE(redis_uri_parse("redis://user:Pa55word@127.0.0.1:1", &u, &why) == 0);
	struct redis *r = redis_new(&u, NULL);
	redis_uri_free(&u);
	int fds[2];
	REQUIRE(pipe(fds) == 0);
	log_set_fd(fds[1]);
	stop_flag = 0;
	pthread_t t;
	pthread_create(&t, NULL, stopper, NULL);
	CHECK_INT(redis_connect_retry(r, &stop_flag), -1);
	pthread_join(t, NULL);
	log_set_fd(2);
	close(fds[1]);
	char out[8192];
	ssize_t n = read(fds[0], out, sizeof out - 1);
	close(fds[0]);
	REQUIRE(n > 0);
	out[n] = '\0';
	int warns = 0;
	for (char *p = out; (p = strstr(p, "level=WARN msg=\"redis connection failed\"")); p++)
		warns++;
	/* attempts at ~0 s and ~0.5-1 s (and maybe ~1.5 s) before the stop at 1.7 s */
	CHECK(warns >= 2 && warns <= 3);
	CHECK(strstr(out, "addr=redis://127.0.0.1:1") != NULL);
	CHECK(strstr(out, "connect: Connection refused") != NULL);
	CHECK(strstr(out, "retry_in=") != NULL);
	CHECK(strstr(out, "Pa55word") == NULL);
	CHECK(!redis_is_connected(r));
	redis_free(r);
}

TEST(commands_on_a_closed_connection_fail_cleanly)
{
	struct redis_uri u;
	char *why = NULL;
	REQUIRE(redis_uri_parse("127.0.0.1:1", &u, &why) == 0);
	struct redis *r = redis_new(&u, NULL);
	redis_uri_free(&u);
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
	struct redis_uri u;
	char *why = NULL;
	REQUIRE(redis_uri_parse("127.0.0.1:1", &u, &why) == 0);
	struct redis *r = redis_new(&u, NULL);
	redis_uri_free(&u);
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

T_MAIN(T_CASE(backoff_is_capped_and_jittered), T_CASE(retry_logs_each_failure_and_stops),
       T_CASE(commands_on_a_closed_connection_fail_cleanly),
       T_CASE(scripts_are_named_by_the_sha1_redis_gives_them),
       T_CASE(waiting_on_a_closed_connection_is_an_error))
