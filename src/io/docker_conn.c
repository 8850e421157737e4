/*
 * Hijacked connections to the Docker daemon (docker_hijack and the
 * docker_conn_* calls of docker.h): the raw stream an attach or a wait
 * rides after the HTTP upgrade. curl only connects (unix socket, TCP, or
 * TCP + TLS handshake, CURLOPT_CONNECT_ONLY); the request, the answer's
 * headers and every byte after them are read and written here through
 * curl_easy_send/curl_easy_recv, with deadlines of our own. Half-closing
 * stdin sends a TLS close_notify first under TLS. The request machinery,
 * DOCKER_HOST and TLS set-up are in docker.c (see its design notes).
 */
#include "io/docker.h"

#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include <curl/curl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "base/log.h"
#include "base/util.h"
#include "io/docker_internal.h"

/* Upper bound for the attach request/response exchange. */
#define HIJACK_TIMEOUT_MS 30000
/* The upgrade answer is a handful of headers. */
#define HIJACK_HEADER_MAX (16u * 1024)

struct docker_conn {
	CURL *curl;
	curl_socket_t fd;
	char *pending; /* stream bytes that arrived with the upgrade answer */
	size_t pending_len, pending_off;
	char *err;
	char curl_err[CURL_ERROR_SIZE];
};

static void conn_err(struct docker_conn *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void conn_err(struct docker_conn *c, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *msg = xvasprintf(fmt, ap);
	va_end(ap);
	free(c->err);
	c->err = msg;
}

static int64_t deadline_after(int timeout_ms)
{
	return timeout_ms < 0 ? -1 : now_mono_ns() + (int64_t)timeout_ms * 1000000;
}

/* Milliseconds left until deadline (-1 = none), clamped to [0, INT_MAX]. */
static int remaining_ms(int64_t deadline)
{
	if (deadline < 0)
		return -1;
	int64_t left = (deadline - now_mono_ns()) / 1000000;
	if (left < 0)
		return 0;
	return left > 0x7fffffff ? 0x7fffffff : (int)left;
}

/* ---- hijacked connections --------------------------------------------- */

/* Waits for the socket to be ready; 1 ready, 0 timeout, -1 error. */
static int wait_fd(struct docker_conn *c, short events, int64_t deadline)
{
	for (;;) {
		struct pollfd pfd = {.fd = (int)c->fd, .events = events};
		int n = poll(&pfd, 1, remaining_ms(deadline));
		if (n > 0)
			return 1;
		if (n == 0)
			return 0;
		if (errno != EINTR) {
			char tmp[128];
			conn_err(c, "poll on the Docker connection: %s",
				 strerror_r(errno, tmp, sizeof tmp));
			return -1;
		}
	}
}

/* One curl_easy_recv with a deadline: bytes read, 0 at EOF, -1, or
 * DOCKER_CONN_TIMEOUT. */
static long conn_recv(struct docker_conn *c, void *p, size_t n, int64_t deadline)
{
	for (;;) {
		size_t got = 0;
		/* Try first: under TLS decrypted bytes may already sit in the
		 * library's buffer while the socket itself is not readable. */
		CURLcode code = curl_easy_recv(c->curl, p, n, &got);
		if (code == CURLE_OK)
			return (long)got;
		if (code != CURLE_AGAIN) {
			conn_err(c, "reading from the Docker connection: %s",
				 c->curl_err[0] ? c->curl_err : curl_easy_strerror(code));
			return -1;
		}
		int w = wait_fd(c, POLLIN, deadline);
		if (w <= 0)
			return w == 0 ? DOCKER_CONN_TIMEOUT : -1;
	}
}

static int conn_send_all(struct docker_conn *c, const void *p, size_t n, int64_t deadline)
{
	const char *at = p;
	while (n > 0) {
		size_t sent = 0;
		CURLcode code = curl_easy_send(c->curl, at, n, &sent);
		if (code == CURLE_OK) {
			at += sent;
			n -= sent;
			continue;
		}
		if (code != CURLE_AGAIN) {
			conn_err(c, "writing to the Docker connection: %s",
				 c->curl_err[0] ? c->curl_err : curl_easy_strerror(code));
			return -1;
		}
		int w = wait_fd(c, POLLOUT, deadline);
		if (w == 0) {
			conn_err(c, "writing to the Docker connection: timed out");
			return DOCKER_CONN_TIMEOUT;
		}
		if (w < 0)
			return -1;
	}
	return 0;
}

/* Case-insensitive header lookup in a raw header block; returns the value
 * start and its length in *len, or NULL. */
static const char *header_value(const char *block, const char *name, size_t *len)
{
	size_t nl = strlen(name);
	for (const char *line = strstr(block, "\r\n"); line; line = strstr(line, "\r\n")) {
		line += 2;
		if (strncasecmp(line, name, nl) == 0 && line[nl] == ':') {
			const char *v = line + nl + 1;
			while (*v == ' ' || *v == '\t')
				v++;
			const char *end = strstr(v, "\r\n");
			*len = end ? (size_t)(end - v) : strlen(v);
			return v;
		}
	}
	return NULL;
}

/* Reads the rest of an error answer's body so the daemon's own message
 * can be reported: up to Content-Length when given, else until the daemon
 * closes (its attach errors are bare text with neither length nor
 * keep-alive). Bounded by ERROR_BODY_MAX and a short wait: the message
 * normally arrives with the headers, and a missing one must not hold up
 * the failure. */
static void read_error_body(struct docker_conn *c, const char *head, struct buf *body,
			    int64_t deadline)
{
	size_t vlen = 0;
	const char *v = header_value(head, "Content-Length", &vlen);
	int64_t want = -1;
	if (v) {
		char tmp[24];
		snprintf_(tmp, sizeof tmp, "%.*s", (int)(vlen < 23 ? vlen : 23), v);
		if (parse_int64(tmp, &want) < 0 || want < 0)
			want = -1;
	}
	int64_t soon = deadline_after(2000);
	if (deadline >= 0 && deadline < soon)
		soon = deadline;
	char chunk[4096];
	while (want < 0 || body->len < (uint64_t)want) {
		long n = conn_recv(c, chunk, sizeof chunk, soon);
		if (n <= 0 || buf_append(body, chunk, (size_t)n) < 0)
			return;
	}
}

int docker_hijack(struct docker *d, const char *path, struct docker_conn **out)
{
	return docker_hijack_timeout(d, path, HIJACK_TIMEOUT_MS, out);
}

/* One hijack in progress: what docker_hijack_timeout's phases share. */
struct hijack {
	struct docker *d;
	struct docker_conn *c;
	const char *full; /* the path with its version prefix */
	int64_t deadline; /* of the whole exchange, connecting included */
	struct buf head;  /* the answer: headers, then any bytes after them */
	size_t head_len;  /* of the headers, through the blank line */
};

/* Connects (unix socket, TCP, or TCP + TLS handshake) and nothing more:
 * curl hands over the socket, the HTTP exchange is ours. */
static int hijack_connect(struct hijack *h, long timeout_ms)
{
	struct docker *d = h->d;
	struct docker_conn *c = h->c;
	c->curl = curl_easy_init();
	if (!c->curl) {
		docker_set_err(d, "curl_easy_init failed");
		return -1;
	}
	docker_setup_common(d, c->curl, c->curl_err);
	/* Connecting counts against the same deadline as the exchange. */
	if (timeout_ms < CONNECT_TIMEOUT_MS)
		curl_easy_setopt(c->curl, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
	char *url = xasprintf("%s/", d->base_url);
	curl_easy_setopt(c->curl, CURLOPT_URL, url);
	curl_easy_setopt(c->curl, CURLOPT_CONNECT_ONLY, 1L);
	CURLcode code = curl_easy_perform(c->curl);
	free(url);
	if (code != CURLE_OK) {
		docker_set_transport_err(d, c->curl, code, c->curl_err, "POST", h->full);
		return -1;
	}
	curl_socket_t fd = CURL_SOCKET_BAD;
	if (curl_easy_getinfo(c->curl, CURLINFO_ACTIVESOCKET, &fd) != CURLE_OK ||
	    fd == CURL_SOCKET_BAD) {
		docker_set_err(d, "Docker attach to %s: no socket after connecting", d->endpoint);
		return -1;
	}
	c->fd = fd;
	return 0;
}

/* What the docker CLI sends: Upgrade asks for 101 and a raw stream; the
 * empty body must be announced for the daemon's HTTP server to treat the
 * request as complete. */
static int hijack_send(struct hijack *h)
{
	struct buf req;
	int rc = -1;
	buf_init(&req, 4096 + strlen(h->full));
	if (buf_appendf(&req,
			"POST %s HTTP/1.1\r\n"
			"Host: docker\r\n"
			"User-Agent: relay\r\n"
			"Content-Type: text/plain\r\n"
			"Content-Length: 0\r\n"
			"Connection: Upgrade\r\n"
			"Upgrade: tcp\r\n"
			"\r\n",
			h->full) < 0) {
		docker_set_err(h->d, "Docker attach request too long");
		goto out;
	}
	if (conn_send_all(h->c, req.data, req.len, h->deadline) < 0) {
		docker_set_err(h->d, "Docker attach %s at %s: %s", h->full, h->d->endpoint,
			       h->c->err);
		goto out;
	}
	rc = 0;
out:
	buf_free(&req);
	return rc;
}

/* Reads up to the blank line; whatever follows is already stream data (or
 * the start of an error body). */
static int hijack_read_head(struct hijack *h)
{
	char chunk[4096];
	const char *end = NULL;
	while (!end) {
		long n = conn_recv(h->c, chunk, sizeof chunk, h->deadline);
		if (n == DOCKER_CONN_TIMEOUT)
			conn_err(h->c, "timed out waiting for the daemon's answer");
		else if (n == 0)
			conn_err(h->c, "connection closed before the daemon answered");
		if (n <= 0) {
			docker_set_err(h->d, "Docker attach %s at %s: %s", h->full, h->d->endpoint,
				       h->c->err);
			return -1;
		}
		if (buf_append(&h->head, chunk, (size_t)n) < 0) {
			docker_set_err(h->d,
				       "Docker attach %s at %s: answer headers exceed %u bytes",
				       h->full, h->d->endpoint, HIJACK_HEADER_MAX);
			return -1;
		}
		end = strstr(h->head.data, "\r\n\r\n");
	}
	h->head_len = (size_t)(end - h->head.data) + 4;
	return 0;
}

/* The status of "HTTP/1.x NNN reason", or -1 when sl is not that. */
static int status_line(const char *sl)
{
	if (strncmp(sl, "HTTP/1.", 7) != 0 || !isdigit((unsigned char)sl[7]) || sl[8] != ' ' ||
	    !isdigit((unsigned char)sl[9]) || !isdigit((unsigned char)sl[10]) ||
	    !isdigit((unsigned char)sl[11]) || (sl[12] != ' ' && sl[12] != '\r'))
		return -1;
	return (sl[9] - '0') * 100 + (sl[10] - '0') * 10 + (sl[11] - '0');
}

/* An error answer (status >= 400): its body, read to the end, becomes
 * d->err. */
static void hijack_refused(struct hijack *h, int status)
{
	struct docker *d = h->d;
	struct buf body;
	buf_init(&body, ERROR_BODY_MAX);
	buf_append(&body, h->head.data + h->head_len, h->head.len - h->head_len);
	h->head.data[h->head_len] = '\0';
	read_error_body(h->c, h->head.data, &body, h->deadline);
	const char *text = body.data ? body.data : "";
	if (status == 403) {
		d->denied = true;
		free(d->err);
		d->err = docker_forbidden_message(d->endpoint, "POST", h->full, text, body.len);
		goto out;
	}
	size_t vlen = 0;
	const char *ctype = header_value(h->head.data, "Content-Type", &vlen);
	size_t n;
	const char *line = docker_first_line(text, body.len, &n);
	/* The daemon writes attach errors as plain text on the raw stream:
	 * that text is its message, verbatim. */
	if (ctype && vlen >= 23 && strncasecmp(ctype, "application/vnd.docker.", 23) == 0 && n) {
		docker_set_err(d, "%.*s", (int)n, line);
	} else {
		char *msg = docker_error_message(status, text, body.len);
		free(d->err);
		d->err = msg;
	}
out:
	buf_free(&body);
}

int docker_hijack_timeout(struct docker *d, const char *path, long timeout_ms,
			  struct docker_conn **out)
{
	int rc = -1;
	char *full = xasprintf("/v%s%s", d->version, path ? path : "");
	struct hijack h = {.d = d, .c = xcalloc(1, sizeof *h.c), .full = full};
	buf_init(&h.head, HIJACK_HEADER_MAX);
	if (timeout_ms <= 0 || timeout_ms > 0x7fffffff)
		timeout_ms = HIJACK_TIMEOUT_MS;
	h.deadline = deadline_after((int)timeout_ms);
	*out = NULL;
	h.c->fd = CURL_SOCKET_BAD;
	d->denied = false;
	d->silent = false;

	if (!docker_path_ok(full)) {
		docker_set_err(d, "invalid Docker API path \"%s\"", full);
		goto out;
	}
	if (hijack_connect(&h, timeout_ms) < 0 || hijack_send(&h) < 0 || hijack_read_head(&h) < 0) {
		d->silent = true;
		goto out;
	}
	int status = status_line(h.head.data);
	if (status < 0) {
		docker_set_err(d, "Docker attach %s at %s: not an HTTP answer", full, d->endpoint);
		goto out;
	}
	if (status >= 400) {
		hijack_refused(&h, status);
		goto out;
	}
	/* Daemons before API 1.21 hijack after a plain 200. */
	if (status != 101 && status != 200) {
		docker_set_err(d, "Docker attach %s at %s: unexpected HTTP %d", full, d->endpoint,
			       status);
		goto out;
	}
	size_t extra = h.head.len - h.head_len;
	if (extra) {
		h.c->pending = xmalloc(extra);
		memcpy(h.c->pending, h.head.data + h.head_len, extra);
		h.c->pending_len = extra;
	}
	log_debug(LOG_ATTRS("path", full), "docker attach established");
	conn_err(h.c, "no error");
	*out = h.c;
	h.c = NULL;
	rc = 0;
out:
	docker_conn_free(h.c);
	buf_free(&h.head);
	free(full);
	return rc;
}

int docker_conn_write_timeout(struct docker_conn *c, const void *p, size_t n, int timeout_ms)
{
	return conn_send_all(c, p, n, deadline_after(timeout_ms));
}

int docker_conn_write(struct docker_conn *c, const void *p, size_t n)
{
	return conn_send_all(c, p, n, -1);
}

/* Under TLS, the end of what Relay sends is first a close_notify alert
 * (TLS 1.3's half-close; Go's tls.Conn.CloseWrite sends the same). A
 * daemon's own Go TLS reads EOF after a bare TCP FIN too, but a TLS
 * terminator built on OpenSSL 3 in front of it (socat, seen) takes that
 * FIN for an unexpected EOF, a fatal error: it dropped the connection
 * before the container's output came back. Reading goes on
 * after the alert until the peer's own close.
 *
 * curl has no call for the alert, but hands out its OpenSSL handle. The
 * alert is written through a socket BIO of our own, swapped in for curl's
 * write BIO just for SSL_shutdown(): curl's BIO only works inside curl's
 * own calls. Everything sent before has left (docker_conn_write() returns
 * once curl sent it all), so the alert follows it on the socket. Returns
 * 0 (also when the connection is not TLS), or -1 with the message. */
static int tls_close_notify(struct docker_conn *c)
{
	struct curl_tlssessioninfo *info = NULL;
	if (curl_easy_getinfo(c->curl, CURLINFO_TLS_SSL_PTR, &info) != CURLE_OK || !info ||
	    info->backend != CURLSSLBACKEND_OPENSSL || !info->internals)
		return 0;
	SSL *ssl = info->internals;
	BIO *curl_bio = SSL_get_wbio(ssl), *sock_bio = BIO_new_socket((int)c->fd, BIO_NOCLOSE);
	if (!curl_bio || !sock_bio || !BIO_up_ref(curl_bio)) {
		BIO_free(sock_bio);
		conn_err(c, "half-closing the Docker connection: TLS close_notify: out of memory");
		return -1;
	}
	SSL_set0_wbio(ssl, sock_bio); /* drops one reference to curl_bio: ours is kept */
	int64_t deadline = deadline_after(CONNECT_TIMEOUT_MS);
	int rc = 0;
	for (;;) {
		ERR_clear_error();
		int r = SSL_shutdown(ssl);
		if (r >= 0)
			break;
		int e = SSL_get_error(ssl, r);
		if (e != SSL_ERROR_WANT_WRITE || remaining_ms(deadline) == 0) {
			char msg[256] = "timed out";
			if (e != SSL_ERROR_WANT_WRITE)
				ERR_error_string_n(ERR_peek_last_error(), msg, sizeof msg);
			conn_err(c, "half-closing the Docker connection: TLS close_notify: %s",
				 msg);
			rc = -1;
			break;
		}
		struct pollfd pf = {(int)c->fd, POLLOUT, 0};
		(void)poll(&pf, 1, remaining_ms(deadline));
	}
	SSL_set0_wbio(ssl, curl_bio); /* frees sock_bio, takes our reference back */
	return rc;
}

int docker_conn_close_write(struct docker_conn *c)
{
	/* The TCP half-close follows even when the alert could not be sent:
	 * the daemon's Go TLS takes it for EOF. */
	int rc = tls_close_notify(c);
	if (shutdown((int)c->fd, SHUT_WR) != 0) {
		char tmp[128];
		conn_err(c, "half-closing the Docker connection: %s",
			 strerror_r(errno, tmp, sizeof tmp));
		return -1;
	}
	return rc;
}

long docker_conn_read(struct docker_conn *c, void *p, size_t n, int timeout_ms)
{
	if (n == 0)
		return 0;
	if (c->pending_off < c->pending_len) {
		size_t k = c->pending_len - c->pending_off;
		if (k > n)
			k = n;
		memcpy(p, c->pending + c->pending_off, k);
		c->pending_off += k;
		if (c->pending_off == c->pending_len) {
			free(c->pending);
			c->pending = NULL;
			c->pending_len = c->pending_off = 0;
		}
		return (long)k;
	}
	if (n > 0x7fffffff)
		n = 0x7fffffff; /* keep the count representable in the result */
	return conn_recv(c, p, n, deadline_after(timeout_ms));
}

int docker_conn_hung_up(const struct docker_conn *c, bool data_too)
{
	if (c->pending_off < c->pending_len)
		return data_too;
	struct pollfd pfd = {.fd = (int)c->fd, .events = POLLIN | POLLRDHUP};
	if (poll(&pfd, 1, 0) <= 0)
		return 0;
	if (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))
		return 1;
	return data_too && (pfd.revents & POLLIN);
}

const char *docker_conn_errmsg(const struct docker_conn *c)
{
	return c->err ? c->err : "no error";
}

void docker_conn_free(struct docker_conn *c)
{
	if (!c)
		return;
	if (c->curl)
		curl_easy_cleanup(c->curl);
	free(c->pending);
	free(c->err);
	free(c);
}
