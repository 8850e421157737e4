/*
 * Redis transport. Design: a non-blocking socket driven with poll(2) so that
 * every connect, handshake, write and read is bounded by a timeout; OpenSSL
 * on top for rediss://; hiredis only formats commands and parses replies.
 * Outgoing commands are queued in `out` (pipelining) and flushed by
 * redis_get_reply(). Any transport error closes the connection, because the
 * position in the reply stream is then unknown.
 */
#include "redis.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "duration.h"
#include "log.h"
#include "util.h"

/* REDIS_REPLY_MAX (redis.h) bounds every reply read; REDIS_OUT_MAX every
 * queue of outgoing commands. */
#define REDIS_OUT_MAX (64u * 1024 * 1024)
#define BACKOFF_MIN_MS 1000
#define BACKOFF_MAX_MS 30000

struct redis {
	struct redis_uri uri;
	struct redis_opts opts;
	char addr[300];
	char err[512];
	int fd;
	SSL *ssl;
	redisReader *reader;
	size_t fed; /* bytes fed to the reader since its last complete reply */
	struct buf out;
	struct redis_guard guard; /* max 0: off */
	bool tripped;
	char first[REDIS_GUARD_FIRST_MAX + 1]; /* the refused reply's (redis_guard_first) */
};

/* ---- URI ------------------------------------------------------------ */

/* Percent-decodes s[0..n) into a new string; NULL on a bad escape. */
static char *pct_decode(const char *s, size_t n)
{
	char *out = xmalloc(n + 1);
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] != '%') {
			out[o++] = s[i];
			continue;
		}
		int hi = i + 1 < n ? hex_digit((unsigned char)s[i + 1]) : -1;
		int lo = i + 2 < n ? hex_digit((unsigned char)s[i + 2]) : -1;
		if (hi < 0 || lo < 0) {
			free(out);
			return NULL;
		}
		out[o++] = (char)(hi * 16 + lo);
		i += 2;
	}
	out[o] = '\0';
	return out;
}

static int valid_port(const char *p, size_t n)
{
	if (n == 0 || n > 5)
		return 0;
	int v = 0;
	for (size_t i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return 0;
		v = v * 10 + (p[i] - '0');
	}
	return v >= 1 && v <= 65535;
}

/* Parses "host:port" / "[v6]:port" / "host" (when default_port is set). */
static int parse_hostport(const char *s, size_t n, const char *default_port, struct redis_uri *u,
			  char **why)
{
	const char *host;
	size_t hostlen;
	const char *rest;
	if (n && s[0] == '[') {
		const char *close = memchr(s, ']', n);
		if (!close) {
			*why = xstrdup("unterminated [ in host");
			return -1;
		}
		host = s + 1;
		hostlen = (size_t)(close - s - 1);
		rest = close + 1;
		char tmp[64];
		struct in6_addr a6;
		if (hostlen == 0 || hostlen >= sizeof tmp) {
			*why = xstrdup("invalid IPv6 address");
			return -1;
		}
		memcpy(tmp, host, hostlen);
		tmp[hostlen] = '\0';
		if (inet_pton(AF_INET6, tmp, &a6) != 1) {
			*why = xstrdup("invalid IPv6 address");
			return -1;
		}
	} else {
		const char *colon = memchr(s, ':', n);
		host = s;
		hostlen = colon ? (size_t)(colon - s) : n;
		rest = s + hostlen;
		if (colon && memchr(colon + 1, ':', n - hostlen - 1)) {
			*why = xstrdup("an IPv6 host must be written in brackets, e.g. [::1]:6379");
			return -1;
		}
		for (size_t i = 0; i < hostlen; i++) {
			unsigned char c = (unsigned char)host[i];
			if (!(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') &&
			    !(c >= '0' && c <= '9') && c != '.' && c != '-' && c != '_') {
				*why = xasprintf("invalid character '%c' in host",
						 c >= 0x20 && c < 0x7f ? c : '?');
				return -1;
			}
		}
	}
	if (hostlen == 0) {
		*why = xstrdup("missing host");
		return -1;
	}
	size_t restlen = n - (size_t)(rest - s);
	const char *port;
	size_t portlen;
	if (restlen == 0) {
		if (!default_port) {
			*why = xstrdup("missing port");
			return -1;
		}
		port = default_port;
		portlen = strlen(default_port);
	} else {
		if (rest[0] != ':') {
			*why = xstrdup("unexpected text after host");
			return -1;
		}
		port = rest + 1;
		portlen = restlen - 1;
	}
	if (!valid_port(port, portlen)) {
		*why = xstrdup("port must be a number from 1 to 65535");
		return -1;
	}
	u->host = xstrndup(host, hostlen);
	u->port = xstrndup(port, portlen);
	return 0;
}

int redis_uri_parse(const char *s, struct redis_uri *u, char **why)
{
	memset(u, 0, sizeof *u);
	*why = NULL;
	const char *p = s;
	const char *sep = strstr(s, "://");
	if (!sep) {
		if (parse_hostport(s, strlen(s), NULL, u, why) < 0)
			goto fail;
		return 0;
	}
	size_t schemelen = (size_t)(sep - s);
	if (schemelen == 5 && strncmp(s, "redis", 5) == 0) {
		u->tls = false;
	} else if (schemelen == 6 && strncmp(s, "rediss", 6) == 0) {
		u->tls = true;
	} else {
		char scheme[32];
		snprintf_(scheme, sizeof scheme, "%.*s", (int)(schemelen < 20 ? schemelen : 20), s);
		*why = xasprintf("unsupported scheme '%s'", scheme);
		goto fail;
	}
	p = sep + 3;
	if (strpbrk(p, "?#")) {
		*why = xstrdup("query strings and fragments are not supported");
		goto fail;
	}
	const char *slash = strchr(p, '/');
	size_t authlen = slash ? (size_t)(slash - p) : strlen(p);
	/* The last '@' ends the userinfo: passwords may contain '@' unescaped. */
	const char *at = NULL;
	for (size_t i = 0; i < authlen; i++)
		if (p[i] == '@')
			at = p + i;
	const char *hp = p;
	if (at) {
		const char *colon = memchr(p, ':', (size_t)(at - p));
		size_t userlen = colon ? (size_t)(colon - p) : (size_t)(at - p);
		if (userlen) {
			u->user = pct_decode(p, userlen);
			if (!u->user) {
				*why = xstrdup("bad percent-encoding in user name");
				goto fail;
			}
		}
		if (colon) {
			u->password = pct_decode(colon + 1, (size_t)(at - colon - 1));
			if (!u->password) {
				*why = xstrdup("bad percent-encoding in password");
				goto fail;
			}
		}
		hp = at + 1;
	}
	if (parse_hostport(hp, authlen - (size_t)(hp - p), "6379", u, why) < 0)
		goto fail;
	if (slash && slash[1]) {
		int64_t db;
		if (parse_int64(slash + 1, &db) < 0 || db < 0 || db > 1000000 || slash[1] == '+' ||
		    slash[1] == '-') {
			*why = xstrdup("the path must be a database number, e.g. /0");
			goto fail;
		}
		u->db = (int)db;
	}
	return 0;
fail:
	redis_uri_free(u);
	return -1;
}

void redis_uri_free(struct redis_uri *u)
{
	free(u->host);
	free(u->port);
	free(u->user);
	if (u->password) {
		memset(u->password, 0, strlen(u->password));
		free(u->password);
	}
	memset(u, 0, sizeof *u);
}

void redis_uri_copy(struct redis_uri *dst, const struct redis_uri *src)
{
	dst->host = xstrdup(src->host);
	dst->port = xstrdup(src->port);
	dst->user = src->user ? xstrdup(src->user) : NULL;
	dst->password = src->password ? xstrdup(src->password) : NULL;
	dst->tls = src->tls;
	dst->db = src->db;
}

char *redis_uri_redact(const char *s)
{
	/* More careful than the parser: whatever the URI's faults, a password
	 * ends at the last '@', even one holding '/', '?' or '#' unescaped or
	 * a value without a scheme, so no error message can show it. */
	const char *sep = strstr(s, "://");
	const char *p = sep ? sep + 3 : s;
	const char *at = strrchr(p, '@');
	if (!at)
		return xstrdup(s);
	const char *colon = memchr(p, ':', (size_t)(at - p));
	if (!colon)
		return xstrdup(s);
	return xasprintf("%.*sxxxxx%s", (int)(colon + 1 - s), s, at);
}

/* ---- connection ----------------------------------------------------- */

static pthread_once_t ssl_once = PTHREAD_ONCE_INIT;
static SSL_CTX *ssl_ctx;
static char ssl_ctx_err[256];

static void ssl_init(void)
{
	ssl_ctx = SSL_CTX_new(TLS_client_method());
	if (!ssl_ctx) {
		snprintf_(ssl_ctx_err, sizeof ssl_ctx_err, "cannot create TLS context");
		return;
	}
	SSL_CTX_set_min_proto_version(ssl_ctx, TLS1_2_VERSION);
	SSL_CTX_set_verify(ssl_ctx, SSL_VERIFY_PEER, NULL);
	/* Honors SSL_CERT_FILE/SSL_CERT_DIR as OpenSSL does; when SSL_CERT_FILE
	 * names an extra CA, keep the system bundle trusted too. */
	SSL_CTX_set_default_verify_paths(ssl_ctx);
	const char *extra = getenv("SSL_CERT_FILE");
	if (extra && *extra) {
		if (access(X509_get_default_cert_file(), R_OK) == 0)
			SSL_CTX_load_verify_locations(ssl_ctx, X509_get_default_cert_file(), NULL);
		if (SSL_CTX_load_verify_locations(ssl_ctx, extra, NULL) != 1)
			snprintf_(ssl_ctx_err, sizeof ssl_ctx_err,
				  "cannot load CA certificates from SSL_CERT_FILE %s", extra);
	}
	ERR_clear_error();
}

struct redis *redis_new(const struct redis_uri *uri, const struct redis_opts *opts)
{
	struct redis *r = xcalloc(1, sizeof *r);
	redis_uri_copy(&r->uri, uri);
	if (opts)
		r->opts = *opts;
	if (r->opts.connect_timeout_ms <= 0)
		r->opts.connect_timeout_ms = 5000;
	if (r->opts.command_timeout_ms <= 0)
		r->opts.command_timeout_ms = 5000;
	bool v6 = strchr(uri->host, ':') != NULL;
	snprintf_(r->addr, sizeof r->addr, "%s://%s%s%s:%s", uri->tls ? "rediss" : "redis",
		  v6 ? "[" : "", uri->host, v6 ? "]" : "", uri->port);
	r->fd = -1;
	buf_init(&r->out, REDIS_OUT_MAX);
	snprintf_(r->err, sizeof r->err, "not connected");
	return r;
}

void redis_disconnect(struct redis *r)
{
	if (r->ssl) {
		SSL_free(r->ssl);
		r->ssl = NULL;
	}
	if (r->fd >= 0) {
		close(r->fd);
		r->fd = -1;
	}
	if (r->reader) {
		redisReaderFree(r->reader);
		r->reader = NULL;
	}
	buf_reset(&r->out);
	r->fed = 0;
	/* A new connection starts a new reply stream. */
	redis_guard_init(&r->guard, r->guard.depth, r->guard.max, r->guard.max_elements);
}

void redis_free(struct redis *r)
{
	if (!r)
		return;
	redis_disconnect(r);
	buf_free(&r->out);
	redis_uri_free(&r->uri);
	free(r);
}

bool redis_is_connected(const struct redis *r)
{
	return r->fd >= 0;
}

const char *redis_addr(const struct redis *r)
{
	return r->addr;
}

const char *redis_errmsg(const struct redis *r)
{
	return r->err;
}

static void set_err(struct redis *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_err(struct redis *r, const char *fmt, ...)
{
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	snprintf_(r->err, sizeof r->err, "redis %s: %s", r->addr, msg);
}

/* Transport failure: record why and drop the connection. */
static void fail(struct redis *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(struct redis *r, const char *fmt, ...)
{
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	redis_disconnect(r);
	set_err(r, "%s", msg);
}

static int wait_fd(int fd, short events, int64_t deadline_ns)
{
	for (;;) {
		int64_t left = deadline_ns - now_mono_ns();
		if (left <= 0)
			return 0;
		struct pollfd pfd = {.fd = fd, .events = events};
		int n = poll(&pfd, 1, (int)((left + 999999) / 1000000));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			continue; /* recheck the deadline */
		return 1;
	}
}

static const char *ssl_reason(void)
{
	static _Thread_local char msg[256];
	unsigned long e = ERR_get_error();
	if (!e)
		return "TLS error";
	ERR_error_string_n(e, msg, sizeof msg);
	ERR_clear_error();
	return msg;
}

static int tcp_connect(struct redis *r, int64_t deadline)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	struct addrinfo *res = NULL;
	int gai = getaddrinfo(r->uri.host, r->uri.port, &hints, &res);
	if (gai != 0) {
		set_err(r, "cannot resolve host %s: %s", r->uri.host, gai_strerror(gai));
		return -1;
	}
	int fd = -1;
	int last_errno = 0;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
			    ai->ai_protocol);
		if (fd < 0) {
			last_errno = errno;
			continue;
		}
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
			break;
		if (errno == EINPROGRESS) {
			int w = wait_fd(fd, POLLOUT, deadline);
			int soerr = 0;
			socklen_t len = sizeof soerr;
			if (w == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) == 0 &&
			    soerr == 0)
				break;
			last_errno = w == 0 ? ETIMEDOUT : soerr ? soerr : errno;
		} else {
			last_errno = errno;
		}
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0) {
		set_err(r, "connect: %s",
			last_errno == ETIMEDOUT ? "connection timed out" : strerror(last_errno));
		return -1;
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
	r->fd = fd;
	return 0;
}

static int tls_handshake(struct redis *r, int64_t deadline)
{
	pthread_once(&ssl_once, ssl_init);
	if (!ssl_ctx || ssl_ctx_err[0]) {
		fail(r, "%s", ssl_ctx_err[0] ? ssl_ctx_err : "TLS unavailable");
		return -1;
	}
	r->ssl = SSL_new(ssl_ctx);
	if (!r->ssl) {
		fail(r, "TLS: %s", ssl_reason());
		return -1;
	}
	SSL_set_fd(r->ssl, r->fd);
	unsigned char ipbuf[16];
	bool is_ip = inet_pton(AF_INET, r->uri.host, ipbuf) == 1 ||
		     inet_pton(AF_INET6, r->uri.host, ipbuf) == 1;
	X509_VERIFY_PARAM *param = SSL_get0_param(r->ssl);
	if (is_ip) {
		X509_VERIFY_PARAM_set1_ip_asc(param, r->uri.host);
	} else {
		SSL_set_tlsext_host_name(r->ssl, r->uri.host);
		X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
		X509_VERIFY_PARAM_set1_host(param, r->uri.host, 0);
	}
	for (;;) {
		ERR_clear_error();
		int rc = SSL_connect(r->ssl);
		if (rc == 1)
			return 0;
		int e = SSL_get_error(r->ssl, rc);
		short ev = e == SSL_ERROR_WANT_READ    ? POLLIN
			   : e == SSL_ERROR_WANT_WRITE ? POLLOUT
						       : 0;
		if (!ev) {
			long vr = SSL_get_verify_result(r->ssl);
			if (vr != X509_V_OK)
				fail(r, "TLS handshake: certificate verify failed: %s",
				     X509_verify_cert_error_string(vr));
			else
				fail(r, "TLS handshake: %s", ssl_reason());
			return -1;
		}
		int w = wait_fd(r->fd, ev, deadline);
		if (w <= 0) {
			fail(r, "TLS handshake: %s", w == 0 ? "timed out" : strerror(errno));
			return -1;
		}
	}
}

static int flush_out(struct redis *r, int64_t deadline)
{
	size_t off = 0;
	while (off < r->out.len) {
		ssize_t n;
		short ev = POLLOUT;
		if (r->ssl) {
			ERR_clear_error();
			int rc = SSL_write(r->ssl, r->out.data + off, (int)(r->out.len - off));
			if (rc > 0) {
				off += (size_t)rc;
				continue;
			}
			int e = SSL_get_error(r->ssl, rc);
			if (e == SSL_ERROR_WANT_READ)
				ev = POLLIN;
			else if (e != SSL_ERROR_WANT_WRITE) {
				fail(r, "write: %s", ssl_reason());
				return -1;
			}
		} else {
			n = send(r->fd, r->out.data + off, r->out.len - off, MSG_NOSIGNAL);
			if (n > 0) {
				off += (size_t)n;
				continue;
			}
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
				fail(r, "write: %s", strerror(errno));
				return -1;
			}
		}
		int w = wait_fd(r->fd, ev, deadline);
		if (w <= 0) {
			fail(r, "write: %s", w == 0 ? "timed out" : strerror(errno));
			return -1;
		}
	}
	buf_reset(&r->out);
	return 0;
}

/* ---- reply guard --------------------------------------------------------- */

/*
 * A RESP2 scanner that never stores what it passes: it reads type bytes and
 * header lines one byte at a time, and passes strings by their announced
 * length, looking only at their closing CRLF. Its stack mirrors the open
 * arrays, so it knows the depth of every element and the bytes of the
 * guarded one so far. It is as strict as hiredis or stricter, and refuses
 * no later than hiredis fails (a number is written as hiredis 0.14 reads
 * it: digits with an optional leading '-', no leading zero, not "-0", a
 * length -1 or more, an array count at most INT_MAX; every line and string
 * ends in CRLF; at most 8 nested arrays, a ninth refused at its type byte):
 * whatever hiredis parses, the scanner saw in the same shape, so the two
 * never disagree about where an element ends. tests/fuzz/fuzz_resp.c
 * checks this against hiredis.
 */
enum { GUARD_TYPE, GUARD_LINE, GUARD_BODY, GUARD_BODY_CR, GUARD_BODY_LF, GUARD_STUCK };

void redis_guard_init(struct redis_guard *g, int depth, size_t max, size_t max_elements)
{
	memset(g, 0, sizeof *g);
	g->depth = depth;
	g->max = max;
	g->max_elements = max_elements;
	g->state = GUARD_TYPE;
}

/* The element at level sp is complete: count it in the arrays it
 * completes in turn. */
static void guard_done(struct redis_guard *g)
{
	for (;;) {
		if (g->sp == g->depth)
			g->in = false; /* that was a guarded element */
		if (g->sp == 0) {
			/* A whole reply: the next one records its own first string. */
			g->first_done = false;
			g->firstlen = 0;
			return;
		}
		if (--g->left[g->sp - 1] > 0)
			return;
		g->sp--;
	}
}

/* Counts n bytes of the guarded element: -1 once it is past max. */
static int guard_count(struct redis_guard *g, uint64_t n)
{
	if (!g->in)
		return 0;
	g->sum += n;
	return g->sum > g->max ? -1 : 0;
}

/* A line is complete. -1 refuses. */
static int guard_line(struct redis_guard *g)
{
	g->state = GUARD_TYPE;
	if (g->sp == g->depth) {
		g->in = true; /* a guarded element starts with this line */
		g->sum = 0;
		g->elements = 0;
	}
	if (g->in && g->max_elements && ++g->elements > g->max_elements)
		return -1;
	if (guard_count(g, g->linelen) < 0)
		return -1;
	if (g->type == '+' || g->type == '-') {
		guard_done(g);
		return 0;
	}
	int64_t v;
	g->num[g->numlen] = '\0';
	if (parse_int64(g->num, &v) < 0)
		return -1;
	if (g->type == ':') {
		guard_done(g);
		return 0;
	}
	if (v < -1 || (g->type == '*' && v > INT_MAX))
		return -1; /* hiredis 0.14 keeps a count in an int */
	if (v == -1 || (g->type == '*' && v == 0)) {
		guard_done(g); /* a null, or an empty array */
		return 0;
	}
	if (g->type == '*') {
		g->left[g->sp++] = v;
		return 0;
	}
	/* The whole string and its CRLF must fit: refused before a byte of it. */
	if (g->in && g->sum + (uint64_t)v + 2 > g->max)
		return -1;
	g->caplen = 0;
	if (g->in && !g->first_done) {
		g->first_done = true;
		g->firstlen = 0;
		g->caplen = v <= REDIS_GUARD_FIRST_MAX ? (size_t)v : 0;
	}
	g->skip = (uint64_t)v;
	g->state = v ? GUARD_BODY : GUARD_BODY_CR;
	return 0;
}

/* One byte of a line (after its type byte). -1 refuses. */
static int guard_line_byte(struct redis_guard *g, char ch)
{
	g->linelen++;
	if (g->cr && ch == '\n')
		return guard_line(g);
	bool num = g->type == '$' || g->type == '*' || g->type == ':';
	if (g->cr && num)
		return -1; /* a '\r' inside a number */
	g->cr = ch == '\r';
	if (g->cr || !num)
		return 0;
	if (!((ch >= '0' && ch <= '9') || (ch == '-' && g->numlen == 0)) ||
	    g->numlen + 1 >= sizeof g->num)
		return -1;
	/* As hiredis' string2ll: nothing after a leading '0', no "-0". */
	size_t neg = g->numlen > 0 && g->num[0] == '-';
	if ((g->numlen > neg && g->num[neg] == '0') || (neg && g->numlen == 1 && ch == '0'))
		return -1;
	g->num[g->numlen++] = ch;
	return 0;
}

int redis_guard_feed(struct redis_guard *g, const char *p, size_t n)
{
	size_t i = 0;
	while (i < n) {
		switch (g->state) {
		case GUARD_TYPE:
			g->type = p[i++];
			if (!g->type || !strchr("+-:$*", g->type))
				goto refuse;
			/* hiredis fails at the type byte of a ninth nested array. */
			if (g->type == '*' && g->sp >= REDIS_GUARD_STACK)
				goto refuse;
			g->numlen = 0;
			g->linelen = 1;
			g->cr = false;
			g->state = GUARD_LINE;
			break;
		case GUARD_LINE:
			if (guard_line_byte(g, p[i++]) < 0)
				goto refuse;
			break;
		case GUARD_BODY: {
			size_t take = n - i < g->skip ? n - i : (size_t)g->skip;
			for (size_t k = 0; k < take && g->firstlen < g->caplen; k++)
				g->first[g->firstlen++] = p[i + k];
			if (guard_count(g, take) < 0)
				goto refuse; /* cannot happen: checked at the header */
			g->skip -= take;
			i += take;
			if (g->skip == 0)
				g->state = GUARD_BODY_CR;
			break;
		}
		case GUARD_BODY_CR:
		case GUARD_BODY_LF:
			if (p[i++] != (g->state == GUARD_BODY_CR ? '\r' : '\n') ||
			    guard_count(g, 1) < 0)
				goto refuse;
			if (g->state == GUARD_BODY_CR) {
				g->state = GUARD_BODY_LF;
			} else {
				g->state = GUARD_TYPE;
				g->caplen = 0;
				guard_done(g);
			}
			break;
		default: return -1;
		}
	}
	return 0;
refuse:
	g->state = GUARD_STUCK;
	return -1;
}

void redis_set_guard(struct redis *r, int depth, size_t max, size_t max_elements)
{
	redis_guard_init(&r->guard, depth, max, max_elements);
}

bool redis_guard_tripped(const struct redis *r)
{
	return r->tripped;
}

const char *redis_guard_first(const struct redis *r)
{
	return r->first;
}

/* Reads what is available into the reader, waiting until the deadline.
 * 1 when bytes were fed; at the deadline -1 (connection closed) or, when
 * soft, 0 with the connection kept; -1 on any other failure. */
static int fill_reader(struct redis *r, int64_t deadline, bool soft)
{
	char chunk[16384];
	for (;;) {
		ssize_t n;
		short ev = POLLIN;
		if (r->ssl) {
			ERR_clear_error();
			int rc = SSL_read(r->ssl, chunk, sizeof chunk);
			if (rc > 0) {
				n = rc;
			} else {
				int e = SSL_get_error(r->ssl, rc);
				if (e == SSL_ERROR_ZERO_RETURN) {
					fail(r, "connection closed by server");
					return -1;
				}
				if (e == SSL_ERROR_WANT_WRITE)
					ev = POLLOUT;
				else if (e != SSL_ERROR_WANT_READ) {
					fail(r, "read: %s",
					     e == SSL_ERROR_SYSCALL && rc == 0
						     ? "connection closed by server"
						     : ssl_reason());
					return -1;
				}
				n = -1;
				errno = EAGAIN;
			}
		} else {
			n = recv(r->fd, chunk, sizeof chunk, 0);
			if (n == 0) {
				fail(r, "connection closed by server");
				return -1;
			}
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
				fail(r, "read: %s", strerror(errno));
				return -1;
			}
		}
		if (n > 0) {
			if (r->guard.max && redis_guard_feed(&r->guard, chunk, (size_t)n) < 0) {
				/* Closed before hiredis sees any of this chunk: the
				 * refused element is read no further. */
				size_t max = r->guard.max;
				snprintf_(r->first, sizeof r->first, "%.*s", (int)r->guard.firstlen,
					  r->guard.first);
				fail(r, "reply refused: an element over %zu bytes, or not RESP2",
				     max);
				r->tripped = true;
				return -1;
			}
			r->fed += (size_t)n;
			if (r->fed > REDIS_REPLY_MAX) {
				fail(r, "reply larger than %u bytes", REDIS_REPLY_MAX);
				return -1;
			}
			if (redisReaderFeed(r->reader, chunk, (size_t)n) != REDIS_OK) {
				fail(r, "protocol error: %s", r->reader->errstr);
				return -1;
			}
			return 1;
		}
		int w = wait_fd(r->fd, ev, deadline);
		if (w == 0 && soft)
			return 0;
		if (w <= 0) {
			fail(r, "read: %s", w == 0 ? "timed out" : strerror(errno));
			return -1;
		}
	}
}

redisReply *redis_get_reply(struct redis *r, int timeout_ms)
{
	if (r->fd < 0) {
		if (!r->err[0])
			set_err(r, "not connected");
		return NULL;
	}
	int64_t deadline =
		now_mono_ns() +
		(int64_t)(timeout_ms < 0 ? r->opts.command_timeout_ms : timeout_ms) * NS_PER_MS;
	if (r->out.len && flush_out(r, deadline) < 0)
		return NULL;
	for (;;) {
		void *reply = NULL;
		if (redisReaderGetReply(r->reader, &reply) != REDIS_OK) {
			fail(r, "protocol error: %s", r->reader->errstr);
			return NULL;
		}
		if (reply) {
			r->fed = 0;
			return reply;
		}
		if (fill_reader(r, deadline, false) < 0)
			return NULL;
	}
}

int redis_wait_reply(struct redis *r, int timeout_ms, redisReply **out)
{
	*out = NULL;
	if (r->fd < 0) {
		if (!r->err[0])
			set_err(r, "not connected");
		return -1;
	}
	int64_t deadline = now_mono_ns() + (int64_t)timeout_ms * NS_PER_MS;
	if (r->out.len && flush_out(r, deadline) < 0)
		return -1;
	for (;;) {
		void *reply = NULL;
		if (redisReaderGetReply(r->reader, &reply) != REDIS_OK) {
			fail(r, "protocol error: %s", r->reader->errstr);
			return -1;
		}
		if (reply) {
			r->fed = 0;
			*out = reply;
			return 1;
		}
		int f = fill_reader(r, deadline, true);
		if (f <= 0)
			return f;
	}
}

/* ---- scripts ------------------------------------------------------------ */

void redis_script_init(struct redis_script *s, const char *text)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;
	s->text = text;
	if (EVP_Digest(text, strlen(text), md, &n, EVP_sha1(), NULL) != 1 || n != 20) {
		/* Never matches a cached script: every call falls back to EVAL. */
		memset(s->sha, '0', 40);
		s->sha[40] = '\0';
	} else {
		hex_encode(md, 20, s->sha);
	}
}

/* Queues a command hiredis formatted into cmd (len < 0: it could not),
 * taking cmd. 0, or -1 with the error set. */
static int append_formatted(struct redis *r, char *cmd, int len)
{
	if (len < 0) {
		set_err(r, "cannot format command");
		return -1;
	}
	int rc = buf_append(&r->out, cmd, (size_t)len);
	redisFreeCommand(cmd);
	if (rc < 0)
		set_err(r, "pipeline larger than %u bytes", REDIS_OUT_MAX);
	return rc;
}

/* Queues <verb> <body> argv... */
static int append_script(struct redis *r, const char *verb, const char *body, int argc,
			 const char **argv, const size_t *lens)
{
	const char **a = xcalloc((size_t)argc + 2, sizeof *a);
	size_t *l = xcalloc((size_t)argc + 2, sizeof *l);
	a[0] = verb;
	l[0] = strlen(verb);
	a[1] = body;
	l[1] = strlen(body);
	for (int i = 0; i < argc; i++) {
		a[i + 2] = argv[i];
		l[i + 2] = lens ? lens[i] : strlen(argv[i]);
	}
	int rc = redis_append_argv(r, argc + 2, a, l);
	free(a);
	free(l);
	return rc;
}

int redis_append_script(struct redis *r, const struct redis_script *s, int argc, const char **argv,
			const size_t *lens)
{
	return append_script(r, "EVALSHA", s->sha, argc, argv, lens);
}

bool redis_reply_is_noscript(const redisReply *rep)
{
	return rep && rep->type == REDIS_REPLY_ERROR && rep->str &&
	       strncmp(rep->str, "NOSCRIPT", 8) == 0;
}

redisReply *redis_script_run(struct redis *r, const struct redis_script *s, int argc,
			     const char **argv, const size_t *lens)
{
	if (redis_append_script(r, s, argc, argv, lens) < 0)
		return NULL;
	redisReply *rep = redis_get_reply(r, -1);
	if (!redis_reply_is_noscript(rep))
		return rep;
	freeReplyObject(rep);
	/* EVAL also caches it for the next EVALSHA. */
	if (append_script(r, "EVAL", s->text, argc, argv, lens) < 0)
		return NULL;
	return redis_get_reply(r, -1);
}

int redis_append_argv(struct redis *r, int argc, const char **argv, const size_t *lens)
{
	if (r->fd < 0)
		return -1;
	char *cmd = NULL;
	int len = redisFormatCommandArgv(&cmd, argc, argv, lens);
	return append_formatted(r, cmd, len);
}

static int append_v(struct redis *r, const char *fmt, va_list ap)
{
	if (r->fd < 0)
		return -1;
	char *cmd = NULL;
	int len = redisvFormatCommand(&cmd, fmt, ap);
	return append_formatted(r, cmd, len);
}

int redis_append(struct redis *r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = append_v(r, fmt, ap);
	va_end(ap);
	return rc;
}

redisReply *redis_command(struct redis *r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = append_v(r, fmt, ap);
	va_end(ap);
	if (rc < 0)
		return NULL;
	return redis_get_reply(r, -1);
}

redisReply *redis_command_argv(struct redis *r, int argc, const char **argv, const size_t *lens)
{
	if (redis_append_argv(r, argc, argv, lens) < 0)
		return NULL;
	return redis_get_reply(r, -1);
}

/* AUTH and SELECT after the transport is up. */
static int handshake(struct redis *r)
{
	redisReply *rep = NULL;
	if (r->uri.password) {
		if (r->uri.user)
			rep = redis_command(r, "AUTH %s %s", r->uri.user, r->uri.password);
		else
			rep = redis_command(r, "AUTH %s", r->uri.password);
		if (!rep)
			return -1;
		if (rep->type == REDIS_REPLY_ERROR) {
			char msg[256];
			snprintf_(msg, sizeof msg, "%s", rep->str);
			freeReplyObject(rep);
			fail(r, "authentication failed: %s", msg);
			return -1;
		}
		freeReplyObject(rep);
	}
	if (r->uri.db) {
		rep = redis_command(r, "SELECT %d", r->uri.db);
		if (!rep)
			return -1;
		if (rep->type == REDIS_REPLY_ERROR) {
			char msg[256];
			snprintf_(msg, sizeof msg, "%s", rep->str);
			freeReplyObject(rep);
			fail(r, "SELECT %d failed: %s", r->uri.db, msg);
			return -1;
		}
		freeReplyObject(rep);
	}
	return 0;
}

int redis_connect(struct redis *r)
{
	redis_disconnect(r);
	int64_t deadline = now_mono_ns() + (int64_t)r->opts.connect_timeout_ms * NS_PER_MS;
	if (tcp_connect(r, deadline) < 0)
		return -1;
	if (r->uri.tls && tls_handshake(r, deadline) < 0)
		return -1;
	r->reader = redisReaderCreate();
	r->fed = 0;
	r->tripped = false;
	r->first[0] = '\0';
	if (handshake(r) < 0)
		return -1;
	r->err[0] = '\0';
	return 0;
}

int64_t redis_backoff_ms(int failures)
{
	int64_t cap = BACKOFF_MIN_MS;
	for (int i = 1; i < failures && cap < BACKOFF_MAX_MS; i++)
		cap *= 2;
	if (cap > BACKOFF_MAX_MS)
		cap = BACKOFF_MAX_MS;
	/* Jitter over the upper half keeps a fleet from reconnecting in step
	 * while never retrying faster than half the nominal delay. */
	return cap / 2 + (int64_t)rand_below((uint64_t)(cap / 2) + 1);
}

int redis_connect_retry(struct redis *r, const atomic_int *stop)
{
	int failures = 0;
	for (;;) {
		if (stop && atomic_load(stop))
			return -1;
		if (redis_connect(r) == 0) {
			if (failures)
				log_info(LOG_ATTRS("addr", r->addr),
					 "redis connection restored after %d failed attempt(s)",
					 failures);
			return 0;
		}
		failures++;
		int64_t wait = redis_backoff_ms(failures);
		char waitstr[DURATION_STR_MAX];
		duration_format(wait * NS_PER_MS, waitstr);
		log_warn(LOG_ATTRS("addr", r->addr, "error", r->err, "retry_in", waitstr),
			 "redis connection failed");
		sleep_ms_interruptible(wait, stop);
	}
}
