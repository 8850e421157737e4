/* Stream retention (retention.h) without a Redis server: the tick
 * interval, the start line, a stop that never waits out a tick, and trims
 * that fail (nothing listens) logged and retried every tick without
 * stopping the worker. The trim itself (XTRIM MINID) needs Redis and is
 * tested through the real binary in tests/it. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/duration.h"
#include "base/log.h"
#include "engine/retention.h"
#include "t.h"
#include "tfiles.h"
#include "base/util.h"

TEST(interval_is_a_24th_clamped_to_a_minute_and_an_hour)
{
	static const struct {
		int64_t retention, want;
	} cases[] = {
		{0, NS_PER_MIN},
		{-NS_PER_HOUR, NS_PER_MIN},
		{NS_PER_SEC, NS_PER_MIN},
		{24 * NS_PER_MIN, NS_PER_MIN},
		{24 * NS_PER_MIN + 24, NS_PER_MIN + 1},
		{NS_PER_HOUR, 150 * NS_PER_SEC},
		{10 * NS_PER_HOUR, 25 * NS_PER_MIN},
		{24 * NS_PER_HOUR - 24, NS_PER_HOUR - 1},
		{24 * NS_PER_HOUR, NS_PER_HOUR},
		{24 * NS_PER_HOUR + 24, NS_PER_HOUR},
		{48 * NS_PER_HOUR, NS_PER_HOUR},
		{7 * 24 * NS_PER_HOUR, NS_PER_HOUR},
		{INT64_MAX, NS_PER_HOUR},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		int64_t got = retention_interval_ns(cases[i].retention);
		if (got != cases[i].want)
			T_FAIL_("retention %" PRId64 ": %" PRId64 ", want %" PRId64,
				cases[i].retention, got, cases[i].want);
	}
}

/* A Redis URI on a loopback port nothing listens on. */
static void nowhere(struct redis_uri *uri)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof a;
	int port = 1;
	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd); /* the port is free again: connections are refused */
	char *s = xasprintf("redis://127.0.0.1:%d", port), *why = NULL;
	if (redis_uri_parse(s, uri, &why) < 0) {
		printf("  %s: %s\n", s, why);
		abort();
	}
	free(s);
}

#define TRIM_FAILED "level=WARN msg=\"stream trim failed; retrying next tick\" stream=events"

/* The defaults: the first trim 5 s after the start, then every
 * retention/24. Stopped before the first one, nothing is tried. */
TEST(start_line_and_a_prompt_stop)
{
	struct redis_uri uri;
	nowhere(&uri);
	t_capture_logs();
	struct retention *r = retention_start(&uri, "events", 48 * NS_PER_HOUR, 0, 0);
	usleep(200 * 1000);
	int64_t t0 = now_mono_ns();
	retention_stop(r);
	CHECK(now_mono_ns() - t0 < 1000 * NS_PER_MS);
	r = retention_start(&uri, "events", 2 * NS_PER_HOUR, 0, 0);
	retention_stop(r);
	retention_stop(NULL);
	char *logs = t_captured_logs();
	t_release_logs();
	CHECK(strstr(logs, "level=INFO msg=\"stream retention enabled\" stream=events "
			   "retention=48h0m0s interval=1h0m0s\n") != NULL);
	CHECK(strstr(logs, "level=INFO msg=\"stream retention enabled\" stream=events "
			   "retention=2h0m0s interval=5m0s\n") != NULL);
	CHECK_INT(t_count(logs, "stream trim failed"), 0);
	if (t_failed_)
		printf("%s", logs);
	free(logs);
	redis_uri_free(&uri);
}

/* Every tick that cannot reach Redis is one WARN; the worker goes on, and
 * a stop mid-wait returns at once. */
TEST(failed_trims_are_retried_every_tick)
{
	struct redis_uri uri;
	nowhere(&uri);
	t_capture_logs();
	struct retention *r =
		retention_start(&uri, "events", NS_PER_HOUR, 50 * NS_PER_MS, 100 * NS_PER_MS);
	usleep(700 * 1000);
	char *logs = t_captured_logs();
	int failed = t_count(logs, TRIM_FAILED);
	CHECK(failed >= 3);
	free(logs);
	int64_t t0 = now_mono_ns();
	retention_stop(r);
	CHECK(now_mono_ns() - t0 < 1000 * NS_PER_MS);
	logs = t_captured_logs();
	t_release_logs();
	CHECK(strstr(logs, "level=INFO msg=\"stream retention enabled\" stream=events "
			   "retention=1h0m0s interval=100ms\n") != NULL);
	if (t_failed_)
		printf("%s", logs);
	free(logs);
	redis_uri_free(&uri);
}

T_MAIN(T_CASE(interval_is_a_24th_clamped_to_a_minute_and_an_hour),
       T_CASE(start_line_and_a_prompt_stop), T_CASE(failed_trims_are_retried_every_tick))
