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
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util.h"

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

#endif
