/*
 * An HTTP client for the tests of Relay's HTTP servers (test_http.c,
 * test_metrics_http.c, test_webhook.c): one request through curl with its
 * status, two headers and its body, plus raw loopback sockets (a listener
 * that holds a port, a connection). Header-only, like t.h; everything is
 * static inline.
 */
#ifndef RELAY_THTTP_H
#define RELAY_THTTP_H

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "base/util.h"

struct reply {
	long status;
	char content_type[128];
	char allow[128];
	struct buf body;
	double seconds;
};

static inline size_t on_body(char *p, size_t size, size_t n, void *arg)
{
	struct reply *r = arg;
	return buf_append(&r->body, p, size * n) < 0 ? 0 : size * n;
}

static inline void header_value(const char *line, size_t len, const char *name, char *dst,
				size_t size)
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

static inline size_t on_header(char *p, size_t size, size_t n, void *arg)
{
	struct reply *r = arg;
	header_value(p, size * n, "Content-Type", r->content_type, sizeof r->content_type);
	header_value(p, size * n, "Allow", r->allow, sizeof r->allow);
	return size * n;
}

/* Performs one request with the request headers in the NULL-terminated
 * array headers (NULL: none); returns the curl result. r->body must be
 * freed. */
static inline CURLcode fetch_with(const char *method, const char *url, const char *post,
				  const char *const *headers, struct reply *r)
{
	memset(r, 0, sizeof *r);
	buf_init(&r->body, 512 << 20);
	CURL *c = curl_easy_init();
	if (!c)
		return CURLE_FAILED_INIT;
	struct curl_slist *hdrs = NULL;
	for (size_t i = 0; headers && headers[i]; i++)
		hdrs = curl_slist_append(hdrs, headers[i]);
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

/* fetch_with one extra request header (NULL: none). */
static inline CURLcode fetch(const char *method, const char *url, const char *post,
			     const char *extra_header, struct reply *r)
{
	const char *const headers[] = {extra_header, NULL};
	return fetch_with(method, url, post, headers, r);
}

static inline char *url_for(int port, const char *path)
{
	return xasprintf("http://127.0.0.1:%d%s", port, path);
}

/* A TCP socket listening on 127.0.0.1 at an ephemeral port. */
static inline int blocker(int *port)
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

/* A TCP connection to 127.0.0.1:port, or -1. */
static inline int connect_to(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
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

/* A TCP connection to 127.0.0.1:port from the loopback address src
 * ("127.0.0.2", ...), or -1. Slow clients from several addresses, so that
 * a per-address cap alone cannot be what turns them away. */
static inline int connect_from(const char *src, int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {0}, b = {0};
	b.sin_family = AF_INET;
	inet_pton(AF_INET, src, &b.sin_addr);
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons((uint16_t)port);
	if (fd < 0 || bind(fd, (struct sockaddr *)&b, sizeof b) < 0 ||
	    connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* Slowloris: clients that send a request one byte at a time and never
 * finish its headers. */
#define SLOW_MAX 128
struct slow_clients {
	int n;
	int fd[SLOW_MAX];
	size_t sent[SLOW_MAX];
	int64_t opened_ns[SLOW_MAX], closed_ns[SLOW_MAX]; /* closed_ns 0: open */
	char req[256];
};

/* Whether the server closed fd (EOF or reset), without blocking. */
static inline bool peer_closed(int fd)
{
	char b[256];
	ssize_t k = recv(fd, b, sizeof b, MSG_DONTWAIT);
	return k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* Opens n clients to 127.0.0.1:port, client i from 127.0.0.(first + i %
 * addrs), each sending the first byte of "GET path HTTP/1.1" and headers
 * that never end. Returns how many connected. */
static inline int slow_open(struct slow_clients *c, int n, int first, int addrs, int port,
			    const char *path)
{
	memset(c, 0, sizeof *c);
	snprintf(c->req, sizeof c->req, "GET %s HTTP/1.1\r\nHost: relay\r\nX-Slow: ", path);
	for (int i = 0; i < n && i < SLOW_MAX; i++) {
		char src[32];
		snprintf(src, sizeof src, "127.0.0.%d", first + i % addrs);
		c->fd[c->n] = connect_from(src, port);
		if (c->fd[c->n] < 0)
			break;
		c->opened_ns[c->n] = now_mono_ns();
		c->sent[c->n] = send(c->fd[c->n], c->req, 1, MSG_NOSIGNAL) == 1;
		c->n++;
	}
	return c->n;
}

/* One more byte from every client still open (after the request line and
 * Host, 'a' forever); notes the time of each one the server closed.
 * Returns how many are still open. */
static inline int slow_tick(struct slow_clients *c)
{
	int open_n = 0;
	size_t rl = strlen(c->req);
	for (int i = 0; i < c->n; i++) {
		if (c->closed_ns[i])
			continue;
		char ch = c->sent[i] < rl ? c->req[c->sent[i]] : 'a';
		if (peer_closed(c->fd[i]) || send(c->fd[i], &ch, 1, MSG_NOSIGNAL) != 1) {
			c->closed_ns[i] = now_mono_ns();
			continue;
		}
		c->sent[i]++;
		open_n++;
	}
	return open_n;
}

/* The longest a closed client stayed connected, in seconds; -1 when one
 * is still open. */
static inline double slow_longest(const struct slow_clients *c)
{
	double most = 0;
	for (int i = 0; i < c->n; i++) {
		if (!c->closed_ns[i])
			return -1;
		double d = (double)(c->closed_ns[i] - c->opened_ns[i]) / 1e9;
		if (d > most)
			most = d;
	}
	return most;
}

static inline void slow_close(struct slow_clients *c)
{
	for (int i = 0; i < c->n; i++)
		close(c->fd[i]);
	c->n = 0;
}

/* A whole HTTP/1.0 GET of path from 127.0.0.1 within `within` seconds:
 * the response's status, or 0 when none came in time. *took: seconds. */
static inline int timed_get(int port, const char *path, int within, double *took)
{
	int64_t t0 = now_mono_ns();
	int fd = connect_to(port), status = 0;
	*took = 0;
	if (fd < 0)
		return 0;
	struct timeval tv = {.tv_sec = within};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	char req[256], b[256];
	snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: relay\r\n\r\n", path);
	if (send(fd, req, strlen(req), MSG_NOSIGNAL) == (ssize_t)strlen(req)) {
		ssize_t k = recv(fd, b, sizeof b - 1, 0);
		if (k > 0) {
			b[k] = '\0';
			if (sscanf(b, "HTTP/1.%*d %d", &status) != 1)
				status = 0;
		}
	}
	close(fd);
	*took = (double)(now_mono_ns() - t0) / 1e9;
	return *took <= within ? status : 0;
}

/* The slowloris check that every Relay listener must pass, on a server at
 * 127.0.0.1:port: 64 clients from 8 loopback addresses (127.0.0.2-9, 8
 * each: under any per-address cap) trickle one byte every 500 ms. While
 * they are all attached, a GET of path from 127.0.0.1 answers within 3 s
 * (*status, *took); and every one of them is closed by the server by
 * deadline + 1 s after its connect, however it trickles (*longest: the
 * longest any stayed, -1 when one was still open at deadline + 3 s). */
struct slowloris_result {
	int connected, status;
	double took, longest;
};
static inline struct slowloris_result slowloris(int port, const char *path, unsigned deadline)
{
	struct slowloris_result r = {0};
	struct slow_clients *c = calloc(1, sizeof *c);
	if (!c)
		return r;
	r.connected = slow_open(c, 64, 2, 8, port, path);
	for (int i = 0; i < 2; i++) { /* all attached, and trickling */
		usleep(500 * 1000);
		slow_tick(c);
	}
	r.status = timed_get(port, path, 3, &r.took);
	int64_t until = c->opened_ns[0] + (int64_t)(deadline + 3) * 1000000000;
	while (slow_tick(c) > 0 && now_mono_ns() < until)
		usleep(500 * 1000);
	r.longest = slow_longest(c);
	slow_close(c);
	free(c);
	return r;
}

#endif
