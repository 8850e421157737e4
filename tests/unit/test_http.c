/* Relay's HTTP server glue (http.h): listen-address forms, bodies and
 * headers, the body size limit and budget, address forms that bind, and the
 * response helpers. The metrics endpoint on top of it is tested in
 * test_metrics_http.c. */
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "io/http.h"
#include "base/log.h"
#include "engine/metrics.h"
#include "t.h"
#include "tfiles.h"
#include "thttp.h"

/* ---- listen addresses ------------------------------------------------ */

TEST(listen_address_forms)
{
	static const struct {
		const char *in;
		int ok;
		const char *host;
		unsigned port;
	} cases[] = {
		{":9090", 1, "", 9090},
		{"127.0.0.1:9090", 1, "127.0.0.1", 9090},
		{"[::1]:9090", 1, "::1", 9090},
		{"[::]:0", 1, "::", 0},
		{"metrics.example:65535", 1, "metrics.example", 65535},
		{"localhost:80", 1, "localhost", 80},
		{"9090", 0, NULL, 0},
		{":", 0, NULL, 0},
		{":65536", 0, NULL, 0},
		{":-1", 0, NULL, 0},
		{":+80", 0, NULL, 0},
		{":123456", 0, NULL, 0},
		{"::1:9090", 0, NULL, 0},
		{"[::1]9090", 0, NULL, 0},
		{"[]:9090", 0, NULL, 0},
		{"[nothex]:9090", 0, NULL, 0},
		{"ho st:9090", 0, NULL, 0},
		{"host:90a", 0, NULL, 0},
		{"", 0, NULL, 0},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		char host[256] = "unset";
		unsigned port = 12345;
		int rc = http_parse_listen_addr(cases[i].in, host, sizeof host, &port);
		if ((rc == 0) != cases[i].ok) {
			T_FAIL_("\"%s\": rc %d", cases[i].in, rc);
			continue;
		}
		if (cases[i].ok) {
			CHECK_STR(host, cases[i].host);
			CHECK_INT(port, cases[i].port);
		}
	}
	CHECK_INT(metrics_server_start("nonsense"), -1);
}

/* ---- the generic server (reused by the webhook) ----------------------- */

static void echo(const struct http_request *req, struct http_response *resp, void *arg)
{
	int *calls = arg;
	__atomic_add_fetch(calls, 1, __ATOMIC_SEQ_CST);
	const char *ev = http_request_header(req, "x-github-event");
	char *text = xasprintf("%s %s [%s] %zu:%s", req->method, req->path, ev ? ev : "-",
			       req->body_len, req->body);
	resp->status = 202;
	http_response_header(resp, "Content-Type", "text/plain");
	http_response_header(resp, "X-Echo", "yes");
	http_response_take_body(resp, text, strlen(text));
}

TEST(generic_server_bodies_and_headers)
{
	int calls = 0;
	struct http_server_config cfg = {
		.name = "Test",
		.listen_addr = "127.0.0.1:0",
		.handler = echo,
		.arg = &calls,
		.max_body = 16,
	};
	struct http_server *s;
	char *err;
	t_capture_logs();
	REQUIRE(http_server_start(&cfg, &s, &err) == 0);
	int port = http_server_port(s);
	char *url = url_for(port, "/github");
	struct reply r;
	CHECK_INT(fetch("POST", url, "{\"ref\":\"x\"}", "X-GitHub-Event: push", &r), CURLE_OK);
	CHECK_INT(r.status, 202);
	CHECK_STR(r.body.data, "POST /github [push] 11:{\"ref\":\"x\"}");
	buf_free(&r.body);
	CHECK_INT(fetch("POST", url, "0123456789abcdefX", NULL, &r), CURLE_OK);
	CHECK_INT(r.status, 413);
	buf_free(&r.body);
	CHECK_INT(calls, 1); /* the handler never saw the oversized body */

	/* without retry_bind, a taken port is an error */
	char addr[32];
	snprintf_(addr, sizeof addr, "127.0.0.1:%d", port);
	cfg.listen_addr = addr;
	struct http_server *s2 = (struct http_server *)1;
	CHECK_INT(http_server_start(&cfg, &s2, &err), -1);
	CHECK(s2 == NULL);
	char *want = xasprintf("listen tcp %s: Address already in use", addr);
	CHECK_STR(err, want);
	free(want);
	free(err);
	cfg.listen_addr = "bad";
	CHECK_INT(http_server_start(&cfg, &s2, &err), -1);
	CHECK_STR(err, "invalid listen address bad");
	free(err);
	http_server_stop(s);
	http_server_stop(NULL);
	free(url);
	t_release_logs();
}

/* Sends all of p (false once the peer has closed). */
static bool send_all(int fd, const void *p, size_t n)
{
	while (n) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
		if (k <= 0)
			return false;
		p = (const char *)p + k;
		n -= (size_t)k;
	}
	return true;
}

/* One chunk of a chunked body: n bytes of 'x'. */
static bool send_chunk(int fd, size_t n)
{
	char head[32], *data = xmalloc(n + 2);
	snprintf_(head, sizeof head, "%zx\r\n", n);
	memset(data, 'x', n);
	memcpy(data + n, "\r\n", 2);
	bool ok = send_all(fd, head, strlen(head)) && send_all(fd, data, n + 2);
	free(data);
	return ok;
}

/* The status of the response on fd, or 0 (closed, or none within 5 s). */
static int response_status(int fd)
{
	struct timeval tv = {.tv_sec = 5};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	char b[256];
	ssize_t k = recv(fd, b, sizeof b - 1, 0);
	int status = 0;
	if (k <= 0)
		return 0;
	b[k] = '\0';
	return sscanf(b, "HTTP/1.%*d %d", &status) == 1 ? status : 0;
}

static void wait_stats(struct http_server *s, struct http_server_stats *st,
		       bool (*done)(const struct http_server_stats *))
{
	int64_t until = now_mono_ns() + 10 * 1000000000LL;
	do {
		usleep(20 * 1000);
		http_server_stats(s, st);
	} while (!done(st) && now_mono_ns() < until);
}

static bool one_cut(const struct http_server_stats *st)
{
	return st->over_budget >= 1;
}

static bool nothing_held(const struct http_server_stats *st)
{
	return st->body_bytes == 0;
}

static bool one_held(const struct http_server_stats *st)
{
	return st->body_bytes == 64 * 1024;
}

/* Bodies without a Content-Length (chunked) grow their buffer as they come:
 * each growth is counted against the budget, a body that cannot grow has
 * its connection closed, and one over max_body gets 413 with nothing kept.
 * The server's own count of buffer bytes never passes the budget. */
TEST(generic_server_chunked_bodies_within_budget)
{
	enum { BUDGET = 96 * 1024 };
	int calls = 0;
	struct http_server_config cfg = {
		.name = "Test",
		.listen_addr = "127.0.0.1:0",
		.handler = echo,
		.arg = &calls,
		.max_body = 64 * 1024,
		.body_budget = BUDGET,
		.body_timeout_seconds = 60,
	};
	struct http_server *s;
	char *err;
	t_capture_logs();
	REQUIRE(http_server_start(&cfg, &s, &err) == 0);
	int port = http_server_port(s);
	const char *head = "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
	struct http_server_stats st;

	/* a whole chunked body of 50 KB is served, and released */
	int a = connect_to(port);
	CHECK(send_all(a, head, strlen(head)));
	for (int i = 0; i < 5; i++)
		CHECK(send_chunk(a, 10000));
	CHECK(send_all(a, "0\r\n\r\n", 5));
	CHECK_INT(response_status(a), 202);
	close(a);
	/* over max_body: 413, nothing kept */
	a = connect_to(port);
	CHECK(send_all(a, head, strlen(head)));
	for (int i = 0; i < 7; i++)
		send_chunk(a, 10000);
	send_all(a, "0\r\n\r\n", 5);
	CHECK_INT(response_status(a), 413);
	close(a);
	CHECK_INT(calls, 1);

	/* one holds 40 KB (a 64 KiB buffer), the next cannot grow past the
	 * 32 KiB left and is cut; a small body still fits */
	int hold = connect_to(port), cut = connect_to(port);
	CHECK(send_all(hold, head, strlen(head)));
	for (int i = 0; i < 4; i++)
		CHECK(send_chunk(hold, 10000));
	wait_stats(s, &st, one_held);
	CHECK(send_all(cut, head, strlen(head)));
	for (int i = 0; i < 4; i++)
		send_chunk(cut, 10000);
	wait_stats(s, &st, one_cut);
	CHECK_INT(st.over_budget, 1);
	CHECK(st.body_bytes <= BUDGET && st.body_bytes_peak <= BUDGET);
	CHECK_INT(st.body_bytes, 64 * 1024);
	CHECK_INT(response_status(cut), 0); /* closed without a response */
	close(cut);
	int small = connect_to(port);
	CHECK(send_all(small, head, strlen(head)));
	CHECK(send_chunk(small, 100));
	CHECK(send_all(small, "0\r\n\r\n", 5));
	CHECK_INT(response_status(small), 202);
	close(small);
	close(hold);
	wait_stats(s, &st, nothing_held);
	CHECK_INT(st.body_bytes, 0);
	CHECK(st.body_bytes_peak <= BUDGET);
	CHECK_INT(st.too_large, 1);
	CHECK_INT(calls, 2);
	http_server_stop(s);
	t_release_logs();
}

static bool ipv6_loopback(void)
{
	int fd = socket(AF_INET6, SOCK_STREAM, 0);
	if (fd < 0)
		return false;
	struct sockaddr_in6 a = {0};
	a.sin6_family = AF_INET6;
	a.sin6_addr = in6addr_loopback;
	bool ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
	close(fd);
	return ok;
}

TEST(address_forms_bind)
{
	int calls = 0;
	struct http_server_config cfg = {.name = "Test", .handler = echo, .arg = &calls};
	struct {
		const char *addr;
		const char *url_host; /* where to fetch */
		bool v6;
	} cases[] = {
		{":0", "127.0.0.1", false},
		{":0", "[::1]", true}, /* ":port" is dual-stack */
		{"localhost:0", "127.0.0.1", false},
		{"127.0.0.1:0", "127.0.0.1", false},
		{"[::1]:0", "[::1]", true},
	};
	bool have6 = ipv6_loopback();
	t_capture_logs();
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		if (cases[i].v6 && !have6) {
			T_SKIP("no IPv6 loopback: %s not tried", cases[i].addr);
			continue;
		}
		cfg.listen_addr = cases[i].addr;
		struct http_server *s;
		char *err;
		if (http_server_start(&cfg, &s, &err) < 0) {
			T_FAIL_("%s: %s", cases[i].addr, err);
			free(err);
			continue;
		}
		char *url = xasprintf("http://%s:%d/x", cases[i].url_host, http_server_port(s));
		struct reply r;
		CURLcode rc = fetch("GET", url, NULL, NULL, &r);
		if (rc != CURLE_OK || r.status != 202)
			T_FAIL_("%s via %s: curl %d status %ld", cases[i].addr, url, rc, r.status);
		buf_free(&r.body);
		free(url);
		http_server_stop(s);
	}
	/* an unresolvable host is an error (or retried, with retry_bind) */
	cfg.listen_addr = "no-such-host.invalid:0";
	struct http_server *s;
	char *err;
	CHECK_INT(http_server_start(&cfg, &s, &err), -1);
	CHECK(err && strstr(err, "lookup no-such-host.invalid") != NULL);
	free(err);
	t_release_logs();
}

/* ---- the response helpers ------------------------------------------------ */

/* Sets ten headers, the last two past HTTP_MAX_RESPONSE_HEADERS, then a text
 * body replacing an earlier one. */
static void many_headers(const struct http_request *req, struct http_response *resp, void *arg)
{
	char name[16], value[16];
	http_response_take_body(resp, xstrdup("replaced"), 8);
	for (int i = 0; i < HTTP_MAX_RESPONSE_HEADERS + 2; i++) {
		snprintf_(name, sizeof name, "X-H%d", i);
		snprintf_(value, sizeof value, "v%d", i);
		http_response_header(resp, name, value);
	}
	http_response_text(resp, 418, NULL, "short and stout");
}

/* One HTTP/1.0 GET over a raw socket: the whole response (malloc'd). */
static char *raw_get(int port, const char *path)
{
	int fd = connect_to(port);
	if (fd < 0)
		return xstrdup("");
	struct timeval tv = {.tv_sec = 5};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	char *req = xasprintf("GET %s HTTP/1.0\r\n\r\n", path);
	send_all(fd, req, strlen(req));
	free(req);
	struct buf b;
	buf_init(&b, 1 << 20);
	char chunk[4096];
	ssize_t k;
	while ((k = recv(fd, chunk, sizeof chunk, 0)) > 0)
		buf_append(&b, chunk, (size_t)k);
	close(fd);
	return buf_steal(&b);
}

TEST(response_helpers)
{
	struct http_server_config cfg = {
		.name = "Test", .listen_addr = "127.0.0.1:0", .handler = many_headers};
	struct http_server *s;
	char *err;
	t_capture_logs();
	REQUIRE(http_server_start(&cfg, &s, &err) == 0);
	char *r = raw_get(http_server_port(s), "/");
	CHECK(strncmp(r, "HTTP/1.", 7) == 0 && strstr(r, " 418 ") == strchr(r, ' '));
	char want[32];
	for (int i = 0; i < HTTP_MAX_RESPONSE_HEADERS; i++) {
		snprintf_(want, sizeof want, "\r\nX-H%d: v%d\r\n", i, i);
		if (!strstr(r, want))
			T_FAIL_("header %d missing: %s", i, r);
	}
	for (int i = HTTP_MAX_RESPONSE_HEADERS; i < HTTP_MAX_RESPONSE_HEADERS + 2; i++) {
		snprintf_(want, sizeof want, "\r\nX-H%d:", i);
		if (strstr(r, want))
			T_FAIL_("header %d past the limit was sent: %s", i, r);
	}
	const char *body = strstr(r, "\r\n\r\n");
	REQUIRE(body != NULL);
	CHECK_STR(body + 4, "short and stout");
	free(r);
	http_server_stop(s);
	t_release_logs();
}

/* Slowloris: the headers' deadline runs from the accept however
 * the client trickles, on every server with the defaults; a 17th
 * connection from one address is closed at once while the others and
 * other addresses are served; a kept-alive connection gets the deadline
 * again for its next request, and is not cut while it is answered. */
TEST(slow_headers_cut_at_their_deadline_and_per_address_cap)
{
	int calls = 0;
	struct http_server_config cfg = {
		.name = "Test", .listen_addr = "127.0.0.1:0", .handler = echo, .arg = &calls};
	struct http_server *s;
	char *err;
	t_capture_logs();
	REQUIRE(http_server_start(&cfg, &s, &err) == 0);
	int port = http_server_port(s);
	struct slowloris_result r = slowloris(port, "/x", HTTP_DEFAULT_HEADER_TIMEOUT_SECONDS);
	CHECK_INT(r.connected, 64);
	CHECK_INT(r.status, 202); /* echo's status */
	CHECK(r.took < 3);
	CHECK(r.longest >= HTTP_DEFAULT_HEADER_TIMEOUT_SECONDS - 0.5);
	CHECK(r.longest > 0 && r.longest <= HTTP_DEFAULT_HEADER_TIMEOUT_SECONDS + 1.5);
	printf("# 64 slow clients: GET answered in %.2fs, each cut after at most %.2fs\n", r.took,
	       r.longest);
	struct http_server_stats st;
	http_server_stats(s, &st);
	CHECK_INT(st.too_slow_headers, 64);

	/* one address: the 17th connection is closed at once */
	struct slow_clients *c = calloc(1, sizeof *c);
	REQUIRE(c != NULL);
	CHECK_INT(slow_open(c, HTTP_DEFAULT_PER_IP_LIMIT + 1, 20, 1, port, "/x"),
		  HTTP_DEFAULT_PER_IP_LIMIT + 1);
	int64_t until = now_mono_ns() + 2000000000LL;
	while (slow_tick(c) > HTTP_DEFAULT_PER_IP_LIMIT && now_mono_ns() < until)
		usleep(100 * 1000);
	int open_n = slow_tick(c);
	CHECK_INT(open_n, HTTP_DEFAULT_PER_IP_LIMIT);
	double took;
	CHECK_INT(timed_get(port, "/x", 3, &took), 202); /* another address */
	slow_close(c);
	free(c);

	/* keep-alive: a request answered, the next one's headers trickled
	 * are cut at the deadline from the end of the first */
	int fd = connect_to(port);
	REQUIRE(fd >= 0);
	const char *req = "GET /a HTTP/1.1\r\nHost: relay\r\n\r\n";
	CHECK(send_all(fd, req, strlen(req)));
	CHECK_INT(response_status(fd), 202);
	int64_t t0 = now_mono_ns();
	bool closed = false;
	while (!closed &&
	       now_mono_ns() - t0 < (HTTP_DEFAULT_HEADER_TIMEOUT_SECONDS + 3) * 1000000000LL) {
		closed = peer_closed(fd) || send(fd, "G", 1, MSG_NOSIGNAL) != 1;
		usleep(200 * 1000);
	}
	double after = (double)(now_mono_ns() - t0) / 1e9;
	CHECK(closed);
	CHECK(after >= HTTP_DEFAULT_HEADER_TIMEOUT_SECONDS - 0.5 &&
	      after <= HTTP_DEFAULT_HEADER_TIMEOUT_SECONDS + 1.5);
	close(fd);
	http_server_stop(s);
	char *logs = t_captured_logs();
	CHECK(strstr(logs, "Test http server: request headers not received within 5s; connection "
			   "closed") != NULL);
	CHECK(strstr(logs, "peer=127.0.0.2") != NULL);
	free(logs);
	t_release_logs();
}

T_MAIN(T_CASE(listen_address_forms), T_CASE(generic_server_bodies_and_headers),
       T_CASE(generic_server_chunked_bodies_within_budget), T_CASE(address_forms_bind),
       T_CASE(response_helpers), T_CASE(slow_headers_cut_at_their_deadline_and_per_address_cap))
