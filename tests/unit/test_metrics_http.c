#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "http.h"
#include "log.h"
#include "metrics.h"
#include "t.h"
#include "tfiles.h"

/* ---- helpers ---------------------------------------------------------- */

struct reply {
	long status;
	char content_type[128];
	char allow[128];
	struct buf body;
	double seconds;
};

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
	struct reply *r = arg;
	return buf_append(&r->body, p, size * n) < 0 ? 0 : size * n;
}

static void header_value(const char *line, size_t len, const char *name, char *dst, size_t size)
{
	size_t nl = strlen(name);
	if (len <= nl + 1 || strncasecmp(line, name, nl) != 0 || line[nl] != ':')
		return;
	const char *v = line + nl + 1;
	size_t vn = len - nl - 1;
	while (vn && (*v == ' '))
		v++, vn--;
	while (vn && (v[vn - 1] == '\r' || v[vn - 1] == '\n'))
		vn--;
	if (vn >= size)
		vn = size - 1;
	memcpy(dst, v, vn);
	dst[vn] = '\0';
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
	struct reply *r = arg;
	header_value(p, size * n, "Content-Type", r->content_type, sizeof r->content_type);
	header_value(p, size * n, "Allow", r->allow, sizeof r->allow);
	return size * n;
}

/* Performs one request; returns the curl result. r->body must be freed. */
static CURLcode fetch(const char *method, const char *url, const char *post,
		      const char *extra_header, struct reply *r)
{
	memset(r, 0, sizeof *r);
	buf_init(&r->body, 512 << 20);
	CURL *c = curl_easy_init();
	if (!c)
		return CURLE_FAILED_INIT;
	struct curl_slist *hdrs = NULL;
	if (extra_header)
		hdrs = curl_slist_append(hdrs, extra_header);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 5000L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	if (hdrs)
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
	if (post)
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, post);
	if (strcmp(method, "HEAD") == 0)
		curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
	else if (strcmp(method, "GET") != 0 && !(post && strcmp(method, "POST") == 0))
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	int64_t t0 = now_mono_ns();
	CURLcode rc = curl_easy_perform(c);
	r->seconds = (double)(now_mono_ns() - t0) / 1e9;
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(c);
	return rc;
}

static char *url_for(int port, const char *path)
{
	return xasprintf("http://127.0.0.1:%d%s", port, path);
}

/* A TCP socket listening on 127.0.0.1 at an ephemeral port. */
static int blocker(int *port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {0};
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 4) < 0)
		return -1;
	socklen_t len = sizeof a;
	getsockname(fd, (struct sockaddr *)&a, &len);
	*port = ntohs(a.sin_port);
	return fd;
}

static int connect_to(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {0};
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons((uint16_t)port);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

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

T_MAIN(T_CASE(listen_address_forms), T_CASE(serves_metrics), T_CASE(bind_failure_is_retried),
       T_CASE(stop_while_retrying), T_CASE(stalled_clients_do_not_block),
       T_CASE(generic_server_bodies_and_headers),
       T_CASE(generic_server_chunked_bodies_within_budget), T_CASE(address_forms_bind))
