/* The metrics endpoint (metrics.h, metrics_server_*): GET /metrics over
 * the HTTP glue, a taken port retried in the background, stop while
 * retrying, stalled clients. The HTTP server itself is tested in
 * test_http.c. */
#include <stdbool.h>
#include <sys/time.h>
#include <unistd.h>

#include "base/log.h"
#include "engine/metrics.h"
#include "t.h"
#include "tfiles.h"
#include "thttp.h"

/* ---- GET /metrics ---------------------------------------------------- */

TEST(serves_metrics)
{
	metrics_reset_for_tests();
	t_capture_logs();
	REQUIRE(metrics_server_start("127.0.0.1:0") == 0);
	int port = metrics_server_port();
	CHECK(port > 0);
	CHECK_INT(metrics_server_start("127.0.0.1:0"), -1); /* one server per process */
	char *url = url_for(port, "/metrics");

	struct reply r;
	CHECK_INT(fetch("GET", url, NULL, NULL, &r), CURLE_OK);
	CHECK_INT(r.status, 200);
	CHECK_STR(r.content_type, "text/plain; version=0.0.4; charset=utf-8");
	CHECK(strstr(r.body.data, "\nevents_received_total 0\n") != NULL);
	buf_free(&r.body);

	/* updates are visible at once */
	metrics_inc(METRIC_EVENTS_RECEIVED);
	metrics_handler_invocation("fn", "h", METRIC_OUTCOME_FAILURE, 0.3);
	CHECK_INT(fetch("GET", url, NULL, NULL, &r), CURLE_OK);
	CHECK(strstr(r.body.data, "\nevents_received_total 1\n") != NULL);
	CHECK(strstr(r.body.data, "\nhandler_invocations_total{function=\"fn\",handler=\"h\","
				  "outcome=\"failure\"} 1\n") != NULL);
	/* the body is exactly the registry's rendering */
	struct buf want;
	buf_init(&want, 64 << 20);
	REQUIRE(metrics_render(&want) == 0);
	CHECK_STR(r.body.data, want.data);
	buf_free(&want);
	buf_free(&r.body);

	char *q = url_for(port, "/metrics?name[]=x");
	CHECK_INT(fetch("GET", q, NULL, NULL, &r), CURLE_OK);
	CHECK_INT(r.status, 200);
	buf_free(&r.body);
	free(q);

	CHECK_INT(fetch("HEAD", url, NULL, NULL, &r), CURLE_OK);
	CHECK_INT(r.status, 200);
	CHECK_INT(r.body.len, 0);
	buf_free(&r.body);

	static const char *const missing[] = {"/", "/metrics/", "/Metrics", "/metricsx", "/x"};
	for (size_t i = 0; i < ARRAY_LEN(missing); i++) {
		char *u = url_for(port, missing[i]);
		CHECK_INT(fetch("GET", u, NULL, NULL, &r), CURLE_OK);
		if (r.status != 404)
			T_FAIL_("%s: status %ld, want 404", missing[i], r.status);
		buf_free(&r.body);
		free(u);
	}

	static const char *const methods[] = {"POST", "PUT", "DELETE", "PATCH", "OPTIONS"};
	for (size_t i = 0; i < ARRAY_LEN(methods); i++) {
		CHECK_INT(
			fetch(methods[i], url, strcmp(methods[i], "POST") ? NULL : "a=b", NULL, &r),
			CURLE_OK);
		if (r.status != 405)
			T_FAIL_("%s: status %ld, want 405", methods[i], r.status);
		CHECK_STR(r.allow, "GET, HEAD");
		buf_free(&r.body);
	}

	metrics_server_stop();
	CHECK_INT(metrics_server_port(), 0);
	CHECK_INT(fetch("GET", url, NULL, NULL, &r), CURLE_COULDNT_CONNECT);
	buf_free(&r.body);
	metrics_server_stop(); /* idempotent */

	char *logs = t_captured_logs();
	CHECK(strstr(logs, "level=INFO msg=\"Metrics http server listening on 127.0.0.1:0\"") !=
	      NULL);
	CHECK(strstr(logs, "level=INFO msg=\"Metrics http server stopped\"") != NULL);
	free(logs);
	t_release_logs();
	free(url);
}

/* A taken port is not fatal: start returns, retries, and binds once free. */
TEST(bind_failure_is_retried)
{
	metrics_reset_for_tests();
	t_capture_logs();
	int port;
	int fd = blocker(&port);
	REQUIRE(fd >= 0);
	char addr[32];
	snprintf_(addr, sizeof addr, "127.0.0.1:%d", port);

	int64_t t0 = now_mono_ns();
	REQUIRE(metrics_server_start(addr) == 0);
	CHECK(now_mono_ns() - t0 < 500 * 1000000LL); /* returns at once */
	CHECK_INT(metrics_server_port(), 0);
	usleep(300 * 1000);
	CHECK_INT(metrics_server_port(), 0);
	close(fd);

	t0 = now_mono_ns();
	while (metrics_server_port() == 0 && now_mono_ns() - t0 < 6000 * 1000000LL)
		usleep(50 * 1000);
	CHECK_INT(metrics_server_port(), port);
	char *url = url_for(port, "/metrics");
	struct reply r;
	CHECK_INT(fetch("GET", url, NULL, NULL, &r), CURLE_OK);
	CHECK_INT(r.status, 200);
	buf_free(&r.body);
	metrics_server_stop();
	free(url);

	char *logs = t_captured_logs();
	char *want = xasprintf(
		"level=WARN msg=\"Metrics http server cannot listen; retrying in "
		"the background\" addr=%s error=\"listen tcp %s: Address already in use\"",
		addr, addr);
	CHECK(strstr(logs, want) != NULL);
	free(want);
	want = xasprintf("level=INFO msg=\"Metrics http server listening on %s\"", addr);
	CHECK(strstr(logs, want) != NULL);
	free(want);
	if (t_failed_)
		printf("%s", logs);
	free(logs);
	t_release_logs();
}

/* Stopping while still retrying returns promptly and never binds later. */
TEST(stop_while_retrying)
{
	int port;
	int fd = blocker(&port);
	REQUIRE(fd >= 0);
	char addr[32];
	snprintf_(addr, sizeof addr, "127.0.0.1:%d", port);
	t_capture_logs();
	REQUIRE(metrics_server_start(addr) == 0);
	int64_t t0 = now_mono_ns();
	metrics_server_stop();
	CHECK(now_mono_ns() - t0 < 500 * 1000000LL);
	close(fd);
	usleep(2500 * 1000);
	int c = connect_to(port);
	CHECK(c < 0); /* nobody listens */
	if (c >= 0)
		close(c);
	t_release_logs();
}

/* Clients that connect and never send, or send and never read a large
 * response, do not delay other scrapes, and stop still returns. */
TEST(stalled_clients_do_not_block)
{
	metrics_reset_for_tests();
	char fn[32];
	for (int i = 0; i < 3000; i++) { /* a multi-megabyte exposition */
		snprintf_(fn, sizeof fn, "function-%04d", i);
		metrics_handler_invocation(fn, "handler.main", METRIC_OUTCOME_SUCCESS, 0.1);
	}
	REQUIRE(metrics_server_start("127.0.0.1:0") == 0);
	int port = metrics_server_port();
	REQUIRE(port > 0);

	int silent[4], nonreader[2], partial;
	for (int i = 0; i < 4; i++)
		silent[i] = connect_to(port);
	partial = connect_to(port);
	const char *half = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
	CHECK(write(partial, half, strlen(half)) == (ssize_t)strlen(half));
	const char *req =
		"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
	for (int i = 0; i < 2; i++) {
		nonreader[i] = connect_to(port);
		CHECK(write(nonreader[i], req, strlen(req)) == (ssize_t)strlen(req));
	}
	usleep(300 * 1000); /* let the non-readers fill their socket buffers */

	char *url = url_for(port, "/metrics");
	for (int k = 0; k < 3; k++) {
		struct reply r;
		CHECK_INT(fetch("GET", url, NULL, NULL, &r), CURLE_OK);
		CHECK_INT(r.status, 200);
		CHECK(r.body.len > 1000000);
		/* Not a speed check: a server blocked by the stalled clients
		 * would answer only when their 10 s idle timeout closes them. */
		CHECK(r.seconds < 8.0);
		buf_free(&r.body);
	}
	free(url);

	int64_t t0 = now_mono_ns();
	metrics_server_stop();
	double stop_s = (double)(now_mono_ns() - t0) / 1e9;
	CHECK(stop_s < 8.0); /* the same: not waiting for the stalled clients */
	for (int i = 0; i < 4; i++)
		close(silent[i]);
	for (int i = 0; i < 2; i++)
		close(nonreader[i]);
	close(partial);
	metrics_reset_for_tests();
}

/* Slowloris on the metrics listener: 64 clients from 8
 * addresses trickling their headers; a scrape from 127.0.0.1 answers
 * within 3 s while they are attached, and each is cut at the headers'
 * deadline. Before: at most 32 connections, each kept while it sent a byte
 * within the 10 s idle timeout, so the scrape waited as long as they did. */
TEST(slow_clients_do_not_keep_scrapes_out)
{
	t_capture_logs();
	REQUIRE(metrics_server_start("127.0.0.1:0") == 0);
	int port = metrics_server_port();
	struct slowloris_result r = slowloris(port, "/metrics", 5);
	CHECK_INT(r.connected, 64);
	CHECK_INT(r.status, 200);
	CHECK(r.took < 3);
	CHECK(r.longest > 0 && r.longest <= 5 + 1.5);
	printf("# metrics, 64 slow clients: scrape in %.2fs, each cut after at most %.2fs\n",
	       r.took, r.longest);
	metrics_server_stop();
	t_release_logs();
}

T_MAIN(T_CASE(serves_metrics), T_CASE(bind_failure_is_retried), T_CASE(stop_while_retrying),
       T_CASE(stalled_clients_do_not_block), T_CASE(slow_clients_do_not_keep_scrapes_out))
