/*
 * Redis transport. Design: a non-blocking socket driven with poll(2) so that
 * every connect, handshake, write and read is bounded by a timeout; OpenSSL
 * on top for rediss://; hiredis only formats commands and parses replies.
 * Outgoing commands are queued in `out` (pipelining) and flushed by
 * redis_get_reply(). Any transport error closes the connection, because the
 * position in the reply stream is then unknown.
 */
#include "io/redis.h"

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

#include "base/duration.h"
#include "base/log.h"
#include "base/util.h"

/* REDIS_REPLY_MAX (redis.h) bounds every reply read; REDIS_OUT_MAX every
 * queue of outgoing commands. */
#define REDIS_OUT_MAX (64u * 1024 * 1024)
#define BACKOFF_MIN_MS 1000
#define BACKOFF_MAX_MS 30000

/* A command in flight (cluster and sentinel mode): its bytes in pend. */
struct inflight {
	size_t len;
	int tries; /* resends so far */
};

struct redis {
	struct redis_uri uri;
	struct redis_opts opts;
	bool aux; /* a helper connection (sentinel, ASK target): no routing */
	enum redis_mode mode;
	bool track;		 /* keep copies of the commands in flight */
	char host[256], port[8]; /* the node connected to (or last tried) */
	unsigned slot;		 /* cluster mode: the slot of route_key */
	char describe[400];
	struct redis_host *known; /* the nodes of the last slot map */
	size_t nknown;
	struct buf pend; /* bytes of the commands in flight, from pend_off */
	size_t pend_off;
	struct inflight *fl; /* fl[fl_head..fl_n) */
	size_t fl_head, fl_n, fl_cap;
	redisReply **ready; /* replies read ahead (a redirect in a pipeline) */
	size_t ready_head, ready_n;
	bool episode;		/* a redirect was logged; INFO when served again */
	bool asked;		/* an ASK was logged on this connection */
	int64_t route_deadline; /* bounds one routing (every seed, sentinel, node) */
	int slot_pin;		/* without route_key: the slot a MOVED led to, or -1 */
	unsigned epoch;		/* sentinel mode: sentinel_epoch when last routed */
	bool routing;		/* inside route(): its own commands never re-route */
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

/* Parses the comma-separated host list s[0..n) into u->hosts (and
 * u->host/port, the first). */
static int parse_hostlist(const char *s, size_t n, const char *default_port, struct redis_uri *u,
			  char **why)
{
	size_t count = 1;
	for (size_t i = 0; i < n; i++)
		if (s[i] == ',')
			count++;
	if (count > REDIS_HOSTS_MAX) {
		*why = xasprintf("at most %d hosts are allowed in the list, not %zu",
				 REDIS_HOSTS_MAX, count);
		return -1;
	}
	u->hosts = xcalloc(count, sizeof *u->hosts);
	const char *p = s;
	for (size_t k = 0; k < count; k++) {
		const char *end = memchr(p, ',', n - (size_t)(p - s));
		size_t len = end ? (size_t)(end - p) : n - (size_t)(p - s);
		if (len == 0 && count > 1) {
			*why = xasprintf("empty entry %zu in the host list", k + 1);
			return -1;
		}
		struct redis_uri tmp = {0};
		char *inner = NULL;
		if (parse_hostport(p, len, default_port, &tmp, &inner) < 0) {
			if (count > 1) {
				*why = xasprintf("host %zu of the list: %s", k + 1, inner);
				free(inner);
			} else {
				*why = inner;
			}
			return -1;
		}
		u->hosts[k].host = tmp.host;
		u->hosts[k].port = tmp.port;
		u->nhosts = k + 1;
		p = end ? end + 1 : p + len;
	}
	u->host = xstrdup(u->hosts[0].host);
	u->port = xstrdup(u->hosts[0].port);
	return 0;
}

static int parse_db(const char *s, struct redis_uri *u, char **why)
{
	int64_t db;
	if (parse_int64(s, &db) < 0 || db < 0 || db > 1000000 || s[0] == '+' || s[0] == '-') {
		*why = xstrdup("the path must be a database number, e.g. /0");
		return -1;
	}
	u->db = (int)db;
	return 0;
}

int redis_uri_parse(const char *s, struct redis_uri *u, char **why)
{
	memset(u, 0, sizeof *u);
	*why = NULL;
	const char *p = s;
	const char *sep = strstr(s, "://");
	if (!sep) {
		if (parse_hostlist(s, strlen(s), NULL, u, why) < 0)
			goto fail;
		if (u->nhosts > 1) {
			*why = xstrdup("a host list needs the redis:// form, e.g. "
				       "redis://h1:7000,h2:7001");
			goto fail;
		}
		return 0;
	}
	size_t schemelen = (size_t)(sep - s);
	bool sentinel = false;
	if (schemelen == 5 && strncmp(s, "redis", 5) == 0) {
		u->tls = false;
	} else if (schemelen == 6 && strncmp(s, "rediss", 6) == 0) {
		u->tls = true;
	} else if (schemelen == 14 && strncmp(s, "redis-sentinel", 14) == 0) {
		sentinel = true;
	} else if (schemelen == 15 && strncmp(s, "rediss-sentinel", 15) == 0) {
		u->tls = true;
		u->sentinel_tls = true;
		sentinel = true;
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
	/* Refused before anything else reads the path: redaction takes the
	 * password to end at the last '@', so an error about the master name
	 * or database would otherwise tell which bytes the password held. */
	if (slash && strchr(slash, '@')) {
		*why = xstrdup("'@' after the host list: a password holding '/' must be "
			       "percent-encoded as %2F");
		goto fail;
	}
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
	if (parse_hostlist(hp, authlen - (size_t)(hp - p), sentinel ? "26379" : "6379", u, why) < 0)
		goto fail;
	if (sentinel) {
		const char *name = slash ? slash + 1 : "";
		const char *end = strchr(name, '/');
		size_t namelen = end ? (size_t)(end - name) : strlen(name);
		if (namelen == 0) {
			*why = xstrdup("missing master name: the form is "
				       "redis-sentinel://host:26379,.../<master-name>[/db]");
			goto fail;
		}
		for (size_t i = 0; i < namelen; i++) {
			unsigned char c = (unsigned char)name[i];
			if (c <= 0x20 || c >= 0x7f) {
				*why = xstrdup("invalid character in the master name");
				goto fail;
			}
		}
		u->sentinel_master = xstrndup(name, namelen);
		if (end && end[1] && parse_db(end + 1, u, why) < 0)
			goto fail;
		return 0;
	}
	if (slash && slash[1] && parse_db(slash + 1, u, why) < 0)
		goto fail;
	return 0;
fail:
	redis_uri_free(u);
	return -1;
}

static void free_secret(char *s)
{
	if (s) {
		memset(s, 0, strlen(s));
		free(s);
	}
}

void redis_uri_free(struct redis_uri *u)
{
	free(u->host);
	free(u->port);
	for (size_t i = 0; i < u->nhosts; i++) {
		free(u->hosts[i].host);
		free(u->hosts[i].port);
	}
	free(u->hosts);
	free(u->user);
	free_secret(u->password);
	free(u->sentinel_master);
	free(u->sentinel_user);
	free_secret(u->sentinel_password);
	free(u->route_key);
	memset(u, 0, sizeof *u);
}

static char *dup_or_null(const char *s)
{
	return s ? xstrdup(s) : NULL;
}

void redis_uri_copy(struct redis_uri *dst, const struct redis_uri *src)
{
	dst->host = xstrdup(src->host);
	dst->port = xstrdup(src->port);
	dst->nhosts = src->nhosts;
	dst->hosts = NULL;
	if (src->nhosts) {
		dst->hosts = xcalloc(src->nhosts, sizeof *dst->hosts);
		for (size_t i = 0; i < src->nhosts; i++) {
			dst->hosts[i].host = xstrdup(src->hosts[i].host);
			dst->hosts[i].port = xstrdup(src->hosts[i].port);
		}
	}
	dst->user = dup_or_null(src->user);
	dst->password = dup_or_null(src->password);
	dst->tls = src->tls;
	dst->sentinel_tls = src->sentinel_tls;
	dst->db = src->db;
	dst->sentinel_master = dup_or_null(src->sentinel_master);
	dst->sentinel_user = dup_or_null(src->sentinel_user);
	dst->sentinel_password = dup_or_null(src->sentinel_password);
	dst->route_key = dup_or_null(src->route_key);
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

/* The sentinel-watch thread (below) runs until the process ends, over TLS
 * with rediss-sentinel://: OpenSSL must not tear its state down at exit
 * under it (a crash or a hang in exit()). The first initialisation decides,
 * so this runs before main. */
__attribute__((constructor)) static void ssl_no_atexit(void)
{
	OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, NULL);
}

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
	/* A configured CA replaces the system's, as redis-cli --cacert and
	 * libpq's sslrootcert do: a private CA means only the servers it signed,
	 * not also any server a public CA signed for its owner's name. OpenSSL's
	 * own default paths would keep the system directory beside the file. */
	const char *ca = getenv("SSL_CERT_FILE");
	if (ca && *ca) {
		if (SSL_CTX_load_verify_locations(ssl_ctx, ca, NULL) != 1)
			snprintf_(ssl_ctx_err, sizeof ssl_ctx_err,
				  "cannot load CA certificates from SSL_CERT_FILE %s", ca);
	} else {
		SSL_CTX_set_default_verify_paths(ssl_ctx);
	}
	ERR_clear_error();
}

/* The node the connection is on next: host, port and addr. */
static void set_node(struct redis *r, const char *host, const char *port)
{
	char h[sizeof r->host], p[sizeof r->port];
	snprintf_(h, sizeof h, "%s", host); /* host may be r->host */
	snprintf_(p, sizeof p, "%s", port);
	memcpy(r->host, h, sizeof h);
	memcpy(r->port, p, sizeof p);
	bool v6 = strchr(host, ':') != NULL;
	snprintf_(r->addr, sizeof r->addr, "%s://%s%s%s:%s", r->uri.tls ? "rediss" : "redis",
		  v6 ? "[" : "", host, v6 ? "]" : "", port);
}

static void free_hosts(struct redis_host *h, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(h[i].host);
		free(h[i].port);
	}
	free(h);
}

/* Forgets the commands in flight and the replies read ahead. */
static void drop_inflight(struct redis *r)
{
	buf_reset(&r->pend);
	r->pend_off = 0;
	r->fl_head = r->fl_n = 0;
	for (size_t i = r->ready_head; i < r->ready_n; i++)
		freeReplyObject(r->ready[i]);
	free(r->ready);
	r->ready = NULL;
	r->ready_head = r->ready_n = 0;
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
	set_node(r, uri->host, uri->port);
	r->fd = -1;
	r->slot_pin = -1;
	buf_init(&r->out, REDIS_OUT_MAX);
	buf_init(&r->pend, REDIS_OUT_MAX);
	snprintf_(r->err, sizeof r->err, "not connected");
	snprintf_(r->describe, sizeof r->describe, "standalone");
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
	drop_inflight(r);
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
	buf_free(&r->pend);
	free(r->fl);
	free_hosts(r->known, r->nknown);
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
	int gai = getaddrinfo(r->host, r->port, &hints, &res);
	if (gai != 0) {
		set_err(r, "cannot resolve host %s: %s", r->host, gai_strerror(gai));
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
	bool is_ip =
		inet_pton(AF_INET, r->host, ipbuf) == 1 || inet_pton(AF_INET6, r->host, ipbuf) == 1;
	/* The name checked is the host or address connected to, whoever named
	 * it (the URI, a slot map, a redirect, a sentinel): without a check
	 * set, any certificate the CAs signed would pass. */
	X509_VERIFY_PARAM *param = SSL_get0_param(r->ssl);
	int named;
	if (is_ip) {
		named = X509_VERIFY_PARAM_set1_ip_asc(param, r->host);
	} else {
		X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
		named = SSL_set_tlsext_host_name(r->ssl, r->host) == 1 &&
			X509_VERIFY_PARAM_set1_host(param, r->host, 0) == 1;
	}
	if (named != 1) {
		fail(r, "TLS: cannot check the certificate against host %s", r->host);
		return -1;
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

/* The next reply on the wire: 1 (in *out), 0 when soft and none arrived
 * by the deadline, -1 on a transport/protocol error (connection closed). */
static int read_one(struct redis *r, int64_t deadline, bool soft, redisReply **out)
{
	*out = NULL;
	if (r->fd < 0) {
		if (!r->err[0])
			set_err(r, "not connected");
		return -1;
	}
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
		int f = fill_reader(r, deadline, soft);
		if (f <= 0)
			return f;
	}
}

/* ---- in-flight commands and redirects (cluster and sentinel mode) ------- */

static int fl_push(struct redis *r, const char *cmd, size_t len, int tries)
{
	if (buf_append(&r->pend, cmd, len) < 0)
		return -1;
	if (r->fl_n == r->fl_cap) {
		r->fl_cap = r->fl_cap ? r->fl_cap * 2 : 16;
		r->fl = xrealloc(r->fl, r->fl_cap * sizeof *r->fl);
	}
	r->fl[r->fl_n++] = (struct inflight){.len = len, .tries = tries};
	return 0;
}

static void fl_pop(struct redis *r)
{
	r->pend_off += r->fl[r->fl_head].len;
	r->fl_head++;
	if (r->fl_head == r->fl_n) {
		buf_reset(&r->pend);
		r->pend_off = 0;
		r->fl_head = r->fl_n = 0;
	} else if (r->fl_head >= 1024 && r->fl_head * 2 >= r->fl_n) {
		/* A pipeline that never drains: keep the queues compact. */
		r->fl_n -= r->fl_head;
		memmove(r->fl, r->fl + r->fl_head, r->fl_n * sizeof *r->fl);
		r->fl_head = 0;
		r->pend.len -= r->pend_off;
		memmove(r->pend.data, r->pend.data + r->pend_off, r->pend.len);
		r->pend.data[r->pend.len] = '\0';
		r->pend_off = 0;
	}
}

enum { RD_NONE, RD_MOVED, RD_ASK, RD_WAIT, RD_REROUTE };

static bool err_word(const char *s, const char *w)
{
	size_t n = strlen(w);
	return strncmp(s, w, n) == 0 && (s[n] == ' ' || s[n] == '\0');
}

/* Whether rep is an error reply saying the command did not run here. */
static int redirect_kind(const redisReply *rep)
{
	if (!rep || rep->type != REDIS_REPLY_ERROR || !rep->str)
		return RD_NONE;
	const char *s = rep->str;
	if (err_word(s, "MOVED"))
		return RD_MOVED;
	if (err_word(s, "ASK"))
		return RD_ASK;
	if (err_word(s, "TRYAGAIN") || err_word(s, "CLUSTERDOWN") || err_word(s, "LOADING") ||
	    err_word(s, "MASTERDOWN"))
		return RD_WAIT;
	if (err_word(s, "READONLY") || err_word(s, "UNBLOCKED"))
		return RD_REROUTE;
	return RD_NONE;
}

static bool valid_host(const char *s, size_t n)
{
	if (n == 0 || n > 255)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f || s[i] == '/' ||
		    s[i] == '@' || s[i] == ',')
			return false;
	return true;
}

/* "MOVED <slot> <host>:<port>" / "ASK ...": the slot and the node (an
 * empty host is the node that answered). */
static bool redirect_target(const struct redis *r, const char *s, unsigned *slot, char *host,
			    char *port)
{
	const char *sp = strchr(s, ' ');
	if (!sp)
		return false;
	char *end;
	errno = 0;
	unsigned long v = strtoul(sp + 1, &end, 10);
	if (end == sp + 1 || *end != ' ' || v > 16383 || errno)
		return false;
	*slot = (unsigned)v;
	const char *a = end + 1;
	const char *colon = strrchr(a, ':');
	if (!colon || !valid_port(colon + 1, strlen(colon + 1)))
		return false;
	size_t hl = (size_t)(colon - a);
	if (hl == 0) {
		snprintf_(host, 256, "%s", r->host);
	} else {
		if (a[0] == '[' && hl > 2 && a[hl - 1] == ']') {
			a++;
			hl -= 2;
		}
		if (!valid_host(a, hl))
			return false;
		snprintf_(host, 256, "%.*s", (int)hl, a);
	}
	snprintf_(port, 8, "%s", colon + 1);
	return true;
}

static int route(struct redis *r, const char *hint_host, const char *hint_port);
static bool switched(const struct redis *r);
static void follow_switch(struct redis *r);

/* Whether a MOVED for slot moves this connection: the slot is its own, or
 * it has no route_key and follows the keys it is sent (then it pins the
 * slot for the next routing). Otherwise one command is served elsewhere. */
static bool follows(struct redis *r, unsigned slot)
{
	if (r->mode != REDIS_MODE_CLUSTER || slot == r->slot)
		return true;
	if (r->uri.route_key)
		return false;
	r->slot_pin = (int)slot;
	return true;
}

static bool same_node(const struct redis_host *h, const char *host, const char *port)
{
	return strcmp(h->host, host) == 0 && strcmp(h->port, port) == 0;
}

/* Whether host:port is a node of the cluster as Relay knows it: the node
 * connected to, a seed of the URI, or a node of the last slot map. */
static bool known_node(const struct redis *r, const char *host, const char *port)
{
	if (strcmp(r->host, host) == 0 && strcmp(r->port, port) == 0)
		return true;
	struct redis_host first = {.host = r->uri.host, .port = r->uri.port};
	if (r->uri.nhosts == 0 && same_node(&first, host, port))
		return true;
	for (size_t i = 0; i < r->uri.nhosts; i++)
		if (same_node(&r->uri.hosts[i], host, port))
			return true;
	for (size_t i = 0; i < r->nknown; i++)
		if (same_node(&r->known[i], host, port))
			return true;
	return false;
}

/* Whether a MOVED or ASK to host:port may be followed, which sends the
 * credentials there: 1 for a known node (after the slot map is read again
 * through the seeds, when it was not: a node that joined since), 0 when
 * refused (logged; outside cluster mode always), -1 when reading the map
 * again failed (the connection is closed, r->err says why). */
static int redirect_allowed(struct redis *r, const char *host, const char *port)
{
	if (r->mode == REDIS_MODE_CLUSTER && known_node(r, host, port))
		return 1;
	if (r->mode == REDIS_MODE_CLUSTER) {
		if (route(r, NULL, NULL) < 0)
			return -1;
		if (r->mode == REDIS_MODE_CLUSTER && known_node(r, host, port))
			return 1;
	}
	char to[300];
	snprintf_(to, sizeof to, "%s%s%s:%s", strchr(host, ':') ? "[" : "", host,
		  strchr(host, ':') ? "]" : "", port);
	log_warn(LOG_ATTRS("addr", r->addr, "to", to),
		 "redis redirect to a node outside the cluster refused: not a seed of REDIS_URI "
		 "nor a node of the cluster's slot map");
	return 0;
}

/* A copy of n bytes (commands may hold NUL bytes). */
static char *memdup(const char *p, size_t n)
{
	char *c = xmalloc(n ? n : 1);
	memcpy(c, p, n);
	return c;
}

/* A helper connection with the data nodes' credentials (or the sentinels'). */
static struct redis *aux_new(const struct redis *r, const char *host, const char *port,
			     bool sentinel)
{
	struct redis_uri u = {.host = (char *)host, .port = (char *)port};
	if (sentinel) {
		u.user = r->uri.sentinel_user;
		u.password = r->uri.sentinel_password;
		u.tls = r->uri.sentinel_tls;
	} else {
		u.user = r->uri.user;
		u.password = r->uri.password;
		u.tls = r->uri.tls;
		u.db = r->uri.db;
	}
	struct redis *a = redis_new(&u, &r->opts);
	a->aux = true;
	return a;
}

static void sleep_until(int64_t ms, int64_t deadline)
{
	int64_t left = (deadline - now_mono_ns()) / NS_PER_MS;
	if (ms > left)
		ms = left;
	if (ms > 0)
		poll(NULL, 0, (int)ms);
}

/* Before resend number tries + 1 of a command the server could not run
 * yet (TRYAGAIN, CLUSTERDOWN, LOADING, MASTERDOWN): 100 ms doubling up to
 * 1 s, never past the deadline. */
static void wait_backoff(int tries, int64_t deadline)
{
	int64_t ms = 100;
	for (int i = 0; i < tries && ms < 1000; i++)
		ms *= 2;
	sleep_until(ms > 1000 ? 1000 : ms, deadline);
}

static void warn_redirect(struct redis *r, const char *from, const char *to, const char *why)
{
	if (r->episode)
		return;
	r->episode = true;
	char reason[160];
	snprintf_(reason, sizeof reason, "%s", why);
	log_warn(LOG_ATTRS("addr", from, "to", to, "reason", reason),
		 "redis command redirected; resending it");
}

static void served_again(struct redis *r)
{
	if (!r->episode)
		return;
	r->episode = false;
	log_info(LOG_ATTRS("addr", r->addr), "redis commands served again after a redirect");
}

/* Runs cmd once on a helper connection to host:port (after ASKING when
 * asking). 1 with its reply, or -1 (r->err says why). */
static int side_run(struct redis *r, const char *host, const char *port, bool asking,
		    const char *cmd, size_t len, int64_t deadline, redisReply **out)
{
	struct redis *a = aux_new(r, host, port, false);
	int rc = -1;
	redisReply *ask = NULL;
	if (redis_connect(a) < 0)
		goto done;
	if (asking && redis_append(a, "ASKING") < 0)
		goto done;
	if (buf_append(&a->out, cmd, len) < 0) {
		set_err(a, "pipeline larger than %u bytes", REDIS_OUT_MAX);
		goto done;
	}
	if (asking && read_one(a, deadline, false, &ask) < 0)
		goto done;
	if (read_one(a, deadline, false, out) < 0)
		goto done;
	rc = 1;
done:
	if (rc < 0)
		snprintf_(r->err, sizeof r->err, "%s", a->err);
	if (ask)
		freeReplyObject(ask);
	redis_free(a);
	return rc;
}

/* Acts on the redirect e (kind) of a command, then resends the command
 * (tries: its resends before this one): 1 with the new reply in *out, or
 * -1 on a transport error. Logs the episode's WARN. */
static int resend(struct redis *r, const redisReply *e, int kind, int tries, bool rerouted,
		  const char *cmd, size_t len, int64_t deadline, redisReply **out)
{
	char from[sizeof r->addr];
	snprintf_(from, sizeof from, "%s", r->addr);
	char host[256], port[8];
	unsigned slot;
	if (kind == RD_ASK || kind == RD_MOVED) {
		if (!redirect_target(r, e->str, &slot, host, port)) {
			/* Unreadable: the caller gets the error reply as it is. */
			*out = NULL;
			return 0;
		}
		int allowed = redirect_allowed(r, host, port);
		if (allowed <= 0) {
			/* Refused: the caller gets the error reply as it is. */
			*out = NULL;
			return allowed;
		}
		if (kind == RD_MOVED && strcmp(host, r->host) == 0 && strcmp(port, r->port) == 0 &&
		    r->fd >= 0) {
			/* Already there (a pipeline's later command). */
			kind = RD_WAIT;
			tries = -1;
		} else if (kind == RD_ASK || !follows(r, slot)) {
			/* Another slot than the connection's, or a slot in
			 * migration: that node serves this one command. */
			char to[300];
			snprintf_(to, sizeof to, "%s:%s", host, port);
			if (kind == RD_MOVED) {
				warn_redirect(r, from, to, e->str);
			} else if (!r->asked) {
				/* Once per connection: a migration asks often. */
				r->asked = true;
				char reason[160];
				snprintf_(reason, sizeof reason, "%s", e->str);
				log_warn(LOG_ATTRS("addr", from, "to", to, "reason", reason),
					 "redis slot migrating: commands for the keys already "
					 "moved go to the target node (ASKING)");
			}
			if (side_run(r, host, port, kind == RD_ASK, cmd, len, deadline, out) < 0) {
				char why[sizeof r->err];
				snprintf_(why, sizeof why, "%s", r->err);
				redis_disconnect(r);
				snprintf_(r->err, sizeof r->err, "%s", why);
				return -1;
			}
			return 1;
		}
	}
	if (kind == RD_WAIT && tries >= 0) {
		wait_backoff(tries, deadline);
		warn_redirect(r, from, from, e->str);
	} else if (kind == RD_REROUTE && rerouted) {
		/* This episode found the master already. */
	} else if (kind != RD_WAIT) {
		char why[200];
		snprintf_(why, sizeof why, "%s", e->str);
		if (route(r, kind == RD_MOVED ? host : NULL, kind == RD_MOVED ? port : NULL) < 0)
			return -1;
		warn_redirect(r, from, r->addr, why);
	}
	if (buf_append(&r->out, cmd, len) < 0) {
		fail(r, "pipeline larger than %u bytes", REDIS_OUT_MAX);
		return -1;
	}
	return read_one(r, deadline, false, out);
}

struct redo {
	char *cmd;
	size_t len;
	int tries;
	redisReply *rep; /* the answer, NULL until there is one */
	redisReply *err; /* the last redirect */
};

/*
 * *rep, the reply to the command at the head of the in-flight queue, is a
 * redirect. Returns 1 with *rep the final reply of that command (the
 * replies of the rest of the pipeline read ahead into r->ready), 2 when
 * the command was resent on this connection and its reply is still to be
 * read (soft, one command in flight), -1 on a transport error.
 */
static int redirect(struct redis *r, redisReply **rep, bool soft, int64_t deadline)
{
	size_t n = r->fl_n - r->fl_head;
	int64_t hard = deadline;
	if (soft) {
		int64_t d = now_mono_ns() + (int64_t)r->opts.command_timeout_ms * NS_PER_MS;
		hard = d > deadline ? d : deadline;
	}
	int kind = redirect_kind(*rep);
	char host[256] = "", port[8] = "";
	unsigned slot = 0;
	bool movable = kind == RD_WAIT || kind == RD_REROUTE;
	if (kind == RD_MOVED && redirect_target(r, (*rep)->str, &slot, host, port))
		movable = follows(r, slot);
	if (n == 1 && soft && movable) {
		/* A blocking read: resend it and go on waiting softly. */
		struct inflight f = r->fl[r->fl_head];
		if (f.tries >= REDIS_REDIRECTS_MAX) {
			fl_pop(r);
			return 1;
		}
		char *cmd = memdup(r->pend.data + r->pend_off, f.len);
		char from[sizeof r->addr];
		snprintf_(from, sizeof from, "%s", r->addr);
		if (host[0]) {
			/* A MOVED: to a node the cluster has, or the caller gets
			 * it. Reading the map again reconnects (nothing in flight
			 * then: the command is in cmd). */
			int allowed = redirect_allowed(r, host, port);
			if (allowed <= 0) {
				if (r->fl_head < r->fl_n)
					fl_pop(r);
				free(cmd);
				if (allowed == 0)
					return 1;
				freeReplyObject(*rep);
				*rep = NULL;
				return -1;
			}
		}
		int rc = 0;
		if (kind == RD_WAIT) {
			wait_backoff(f.tries, hard);
			warn_redirect(r, from, from, (*rep)->str);
			fl_pop(r);
		} else {
			char why[200];
			snprintf_(why, sizeof why, "%s", (*rep)->str);
			rc = route(r, host[0] ? host : NULL, host[0] ? port : NULL);
			if (rc == 0)
				warn_redirect(r, from, r->addr, why);
		}
		if (rc == 0 && (buf_append(&r->out, cmd, f.len) < 0 ||
				fl_push(r, cmd, f.len, f.tries + 1) < 0)) {
			fail(r, "pipeline larger than %u bytes", REDIS_OUT_MAX);
			rc = -1;
		}
		free(cmd);
		freeReplyObject(*rep);
		*rep = NULL;
		return rc < 0 ? -1 : 2;
	}
	struct redo *it = xcalloc(n, sizeof *it);
	size_t off = r->pend_off;
	for (size_t i = 0; i < n; i++) {
		struct inflight f = r->fl[r->fl_head + i];
		it[i].cmd = memdup(r->pend.data + off, f.len);
		it[i].len = f.len;
		it[i].tries = f.tries;
		off += f.len;
	}
	it[0].err = *rep;
	*rep = NULL;
	int rc = 1;
	/* The old connection's other replies first: those that ran stay. */
	for (size_t i = 1; i < n; i++) {
		redisReply *x = NULL;
		if (read_one(r, hard, false, &x) < 0) {
			rc = -1;
			goto done;
		}
		if (redirect_kind(x) != RD_NONE)
			it[i].err = x;
		else
			it[i].rep = x;
	}
	buf_reset(&r->pend);
	r->pend_off = 0;
	r->fl_head = r->fl_n = 0;
	/* Then each redirected one, in order, each answered before the next. */
	bool rerouted = false, served = false;
	for (size_t i = 0; i < n; i++) {
		while (!it[i].rep) {
			int k = redirect_kind(it[i].err);
			redisReply *x = NULL;
			int s = 0;
			if (it[i].tries < REDIS_REDIRECTS_MAX && now_mono_ns() < hard)
				s = resend(r, it[i].err, k, it[i].tries, rerouted, it[i].cmd,
					   it[i].len, hard, &x);
			if (k == RD_REROUTE && s > 0)
				rerouted = true;
			if (s < 0) {
				rc = -1;
				goto done;
			}
			if (s == 0) { /* give up: the caller gets the error */
				it[i].rep = it[i].err;
				it[i].err = NULL;
				break;
			}
			it[i].tries++;
			if (redirect_kind(x) != RD_NONE) {
				freeReplyObject(it[i].err);
				it[i].err = x;
			} else {
				it[i].rep = x;
				served = true;
			}
		}
	}
	if (served)
		served_again(r);
	*rep = it[0].rep;
	it[0].rep = NULL;
	if (n > 1) {
		r->ready = xcalloc(n - 1, sizeof *r->ready);
		for (size_t i = 1; i < n; i++) {
			r->ready[i - 1] = it[i].rep;
			it[i].rep = NULL;
		}
		r->ready_head = 0;
		r->ready_n = n - 1;
	}
done:
	for (size_t i = 0; i < n; i++) {
		free(it[i].cmd);
		if (it[i].rep)
			freeReplyObject(it[i].rep);
		if (it[i].err)
			freeReplyObject(it[i].err);
	}
	free(it);
	if (rc < 0 && r->fd >= 0)
		fail(r, "%s", "connection lost during a redirect");
	return rc;
}

/* The next reply for the caller: one read ahead, else from the wire with
 * the redirects resolved (cluster and sentinel mode). As read_one. */
static int next_reply(struct redis *r, int64_t deadline, bool soft, redisReply **out)
{
	*out = NULL;
	if (r->ready_head < r->ready_n) {
		*out = r->ready[r->ready_head++];
		if (r->ready_head == r->ready_n) {
			free(r->ready);
			r->ready = NULL;
			r->ready_head = r->ready_n = 0;
		}
		return 1;
	}
	for (;;) {
		if (soft && switched(r) && r->fl_n - r->fl_head == 1 && !r->out.len && !r->fed) {
			/* A blocking read on a master the sentinels replaced: no new
			 * entry reaches it any more. Resent on the new one (a reply
			 * it may still have sent is lost with the old master's state,
			 * or left pending for the reclaim). */
			struct inflight f = r->fl[r->fl_head];
			char *cmd = memdup(r->pend.data + r->pend_off, f.len);
			char from[sizeof r->addr];
			snprintf_(from, sizeof from, "%s", r->addr);
			int rc = route(r, NULL, NULL);
			if (rc == 0) {
				log_info(LOG_ATTRS("addr", from, "to", r->addr),
					 "the sentinels switched the master; following it");
				if (buf_append(&r->out, cmd, f.len) < 0 ||
				    fl_push(r, cmd, f.len, f.tries) < 0) {
					fail(r, "pipeline larger than %u bytes", REDIS_OUT_MAX);
					rc = -1;
				}
			}
			free(cmd);
			if (rc < 0)
				return -1;
		}
		int rc = read_one(r, deadline, soft, out);
		if (rc <= 0 || !r->track || r->fl_head == r->fl_n)
			return rc;
		if (redirect_kind(*out) == RD_NONE) {
			fl_pop(r);
			served_again(r);
			return 1;
		}
		rc = redirect(r, out, soft, deadline);
		if (rc != 2)
			return rc;
	}
}

redisReply *redis_get_reply(struct redis *r, int timeout_ms)
{
	int64_t deadline =
		now_mono_ns() +
		(int64_t)(timeout_ms < 0 ? r->opts.command_timeout_ms : timeout_ms) * NS_PER_MS;
	redisReply *rep = NULL;
	return next_reply(r, deadline, false, &rep) == 1 ? rep : NULL;
}

int redis_wait_reply(struct redis *r, int timeout_ms, redisReply **out)
{
	int64_t deadline = now_mono_ns() + (int64_t)timeout_ms * NS_PER_MS;
	return next_reply(r, deadline, true, out);
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
	if (rc == 0 && r->track && fl_push(r, cmd, (size_t)len, 0) < 0) {
		r->out.len -= (size_t)len; /* all or nothing */
		r->out.data[r->out.len] = '\0';
		rc = -1;
	}
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
	follow_switch(r);
	if (r->fd < 0)
		return -1;
	char *cmd = NULL;
	int len = redisFormatCommandArgv(&cmd, argc, argv, lens);
	return append_formatted(r, cmd, len);
}

static int append_v(struct redis *r, const char *fmt, va_list ap)
{
	follow_switch(r);
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

/* Frees rep: 0 unless it is missing or an error, which fails r with
 * "<what>: <error>". */
static int reply_not_error(struct redis *r, redisReply *rep, const char *what)
{
	if (!rep)
		return -1;
	int rc = 0;
	if (rep->type == REDIS_REPLY_ERROR) {
		fail(r, "%s: %s", what, rep->str);
		rc = -1;
	}
	freeReplyObject(rep);
	return rc;
}

/* AUTH and SELECT after the transport is up. */
static int handshake(struct redis *r)
{
	if (r->uri.password) {
		redisReply *rep =
			r->uri.user ? redis_command(r, "AUTH %s %s", r->uri.user, r->uri.password)
				    : redis_command(r, "AUTH %s", r->uri.password);
		if (reply_not_error(r, rep, "authentication failed") < 0)
			return -1;
	}
	if (r->uri.db) {
		char what[40];
		snprintf_(what, sizeof what, "SELECT %d failed", r->uri.db);
		if (reply_not_error(r, redis_command(r, "SELECT %d", r->uri.db), what) < 0)
			return -1;
	}
	return 0;
}

/* Connects to host:port (TCP, TLS, AUTH, SELECT), closing any connection. */
static int node_connect(struct redis *r, const char *host, const char *port)
{
	redis_disconnect(r);
	set_node(r, host, port);
	int64_t deadline = now_mono_ns() + (int64_t)r->opts.connect_timeout_ms * NS_PER_MS;
	if (r->route_deadline && r->route_deadline < deadline)
		deadline = r->route_deadline;
	if (tcp_connect(r, deadline) < 0)
		return -1;
	if (r->uri.tls && tls_handshake(r, deadline) < 0)
		return -1;
	r->reader = redisReaderCreate();
	r->fed = 0;
	r->tripped = false;
	r->first[0] = '\0';
	r->asked = false;
	return handshake(r);
}

static void hostport(char *dst, size_t n, const char *host, const char *port)
{
	bool v6 = strchr(host, ':') != NULL;
	snprintf_(dst, n, "%s%s%s:%s", v6 ? "[" : "", host, v6 ? "]" : "", port);
}

/* On a cluster node: the slot map, the master of r->slot. 0 with *owner
 * (malloc'd), or -1 with the connection closed. */
static int cluster_owner(struct redis *r, struct redis_host *owner)
{
	bool shards = true;
	redisReply *rep = redis_command(r, "CLUSTER SHARDS");
	if (!rep)
		return -1;
	if (rep->type == REDIS_REPLY_ERROR) {
		/* Before Redis 7.0. */
		freeReplyObject(rep);
		shards = false;
		rep = redis_command(r, "CLUSTER SLOTS");
		if (!rep)
			return -1;
		if (rep->type == REDIS_REPLY_ERROR)
			return reply_not_error(r, rep, "CLUSTER SLOTS failed");
	}
	struct redis_slotmap m;
	char *why = NULL;
	int rc = redis_slotmap_parse(rep, shards, r->slot, r->uri.tls, r->host, &m, &why);
	freeReplyObject(rep);
	if (rc < 0) {
		fail(r, "%s", why);
		free(why);
		return -1;
	}
	free_hosts(r->known, r->nknown);
	r->known = m.nodes;
	r->nknown = m.nnodes;
	*owner = m.owner;
	return 0;
}

static void add_cand(struct redis_host *c, size_t *n, size_t max, const char *host,
		     const char *port)
{
	if (!host || !port || *n >= max)
		return;
	for (size_t i = 0; i < *n; i++)
		if (strcmp(c[i].host, host) == 0 && strcmp(c[i].port, port) == 0)
			return;
	c[*n].host = xstrdup(host);
	c[*n].port = xstrdup(port);
	(*n)++;
}

/* Seeds (hint first, then the URI's, then the last slot map's): the first
 * that accepts tells the mode; on a cluster, the slot's master. */
static int route_seeds(struct redis *r, const char *hint_host, const char *hint_port)
{
	size_t max = 1 + REDIS_HOSTS_MAX + REDIS_NODES_MAX, nc = 0;
	struct redis_host *c = xcalloc(max, sizeof *c);
	add_cand(c, &nc, max, hint_host, hint_port);
	if (r->uri.nhosts == 0)
		add_cand(c, &nc, max, r->uri.host, r->uri.port);
	for (size_t i = 0; i < r->uri.nhosts; i++)
		add_cand(c, &nc, max, r->uri.hosts[i].host, r->uri.hosts[i].port);
	for (size_t i = 0; i < r->nknown; i++)
		add_cand(c, &nc, max, r->known[i].host, r->known[i].port);
	r->slot = r->uri.route_key   ? redis_key_slot(r->uri.route_key, strlen(r->uri.route_key))
		  : r->slot_pin >= 0 ? (unsigned)r->slot_pin
				     : 0;
	char lasterr[sizeof r->err] = "";
	int rc = -1;
	for (size_t i = 0; i < nc && rc < 0 && (i == 0 || now_mono_ns() < r->route_deadline); i++) {
		if (node_connect(r, c[i].host, c[i].port) < 0) {
			snprintf_(lasterr, sizeof lasterr, "%s", r->err);
			continue;
		}
		redisReply *rep = redis_command(r, "INFO cluster");
		if (!rep) {
			snprintf_(lasterr, sizeof lasterr, "%s", r->err);
			continue;
		}
		/* An error (INFO refused by an ACL): standalone. */
		bool cluster = rep->type == REDIS_REPLY_STRING && rep->str &&
			       strstr(rep->str, "cluster_enabled:1");
		freeReplyObject(rep);
		if (!cluster) {
			r->mode = REDIS_MODE_STANDALONE;
			snprintf_(r->describe, sizeof r->describe, "standalone");
			rc = 0;
			break;
		}
		struct redis_host owner;
		if (cluster_owner(r, &owner) < 0) {
			snprintf_(lasterr, sizeof lasterr, "%s", r->err);
			continue;
		}
		int ok = strcmp(owner.host, r->host) == 0 && strcmp(owner.port, r->port) == 0
				 ? 0
				 : node_connect(r, owner.host, owner.port);
		free(owner.host);
		free(owner.port);
		if (ok < 0) {
			snprintf_(lasterr, sizeof lasterr, "%s", r->err);
			continue;
		}
		r->mode = REDIS_MODE_CLUSTER;
		char hp[300];
		hostport(hp, sizeof hp, r->host, r->port);
		snprintf_(r->describe, sizeof r->describe, "cluster, slot %u on %s", r->slot, hp);
		rc = 0;
	}
	free_hosts(c, nc);
	if (rc < 0)
		snprintf_(r->err, sizeof r->err, "%s",
			  lasterr[0] ? lasterr : "no host to connect to");
	return rc;
}

/*
 * Sentinel mode: the master switch as it happens. The sentinels publish
 * +switch-master the moment they promote a replica; the old master still
 * accepts commands until they demote it (seconds later: their next INFO
 * round), and a read blocked there would wait until then. One thread per
 * process (started by the first connection routed through the sentinels)
 * subscribes on one sentinel at a time and counts the switches of that
 * master in sentinel_epoch; a connection routed at an older epoch moves to
 * the new master before its next command (follow_switch), and a blocking
 * read waiting there is resent on it (next_reply).
 */
static atomic_uint sentinel_epoch;
static pthread_mutex_t watch_lock = PTHREAD_MUTEX_INITIALIZER;
static bool watch_started;
static struct redis_uri watch_uri; /* the first sentinel URI routed */

#define WATCH_RETRY_MS 1000

/* Whether m is a +switch-master message about master name. */
static bool switch_message(const redisReply *m, const char *name)
{
	if (!m || m->type != REDIS_REPLY_ARRAY || m->elements != 3)
		return false;
	const redisReply *kind = m->element[0], *chan = m->element[1], *body = m->element[2];
	size_t n = strlen(name);
	return kind->type == REDIS_REPLY_STRING && strcmp(kind->str, "message") == 0 &&
	       chan->type == REDIS_REPLY_STRING && strcmp(chan->str, "+switch-master") == 0 &&
	       body->type == REDIS_REPLY_STRING && body->len > n &&
	       strncmp(body->str, name, n) == 0 && body->str[n] == ' ';
}

static void *sentinel_watch(void *arg)
{
	(void)arg;
	struct redis_opts o = {0};
	struct redis probe = {.uri = watch_uri};
	size_t ns = watch_uri.nhosts ? watch_uri.nhosts : 1;
	for (size_t i = 0;; i = (i + 1) % ns) {
		const char *sh = watch_uri.nhosts ? watch_uri.hosts[i].host : watch_uri.host;
		const char *sp = watch_uri.nhosts ? watch_uri.hosts[i].port : watch_uri.port;
		struct redis *a = aux_new(&probe, sh, sp, true);
		a->opts = o;
		a->opts.connect_timeout_ms = 5000;
		a->opts.command_timeout_ms = 5000;
		if (redis_connect(a) == 0 && redis_append(a, "SUBSCRIBE +switch-master") == 0) {
			for (;;) {
				redisReply *m = NULL;
				int w = redis_wait_reply(a, 60000, &m);
				if (w < 0)
					break;
				if (w > 0 && switch_message(m, watch_uri.sentinel_master))
					atomic_fetch_add(&sentinel_epoch, 1);
				if (m)
					freeReplyObject(m);
			}
		}
		redis_free(a);
		sleep_ms_interruptible(WATCH_RETRY_MS, NULL);
	}
	return NULL;
}

static void start_watch(const struct redis *r)
{
	pthread_mutex_lock(&watch_lock);
	if (!watch_started) {
		redis_uri_copy(&watch_uri, &r->uri);
		pthread_t t;
		if (thread_start(&t, "sentinel-watch", sentinel_watch, NULL) == 0) {
			pthread_detach(t);
			watch_started = true;
		} else {
			redis_uri_free(&watch_uri);
		}
	}
	pthread_mutex_unlock(&watch_lock);
}

/* Whether the sentinels switched r's master since r was routed. */
static bool switched(const struct redis *r)
{
	return r->mode == REDIS_MODE_SENTINEL && !r->aux && !r->routing && r->fd >= 0 &&
	       atomic_load(&sentinel_epoch) != r->epoch;
}

/* Before a command on a connection with nothing in flight: a master the
 * sentinels replaced is left for the new one. On failure the connection
 * is closed (the caller's append fails and it reconnects). */
static void follow_switch(struct redis *r)
{
	if (!switched(r) || r->fl_head != r->fl_n || r->ready_n || r->out.len)
		return;
	char from[sizeof r->addr];
	snprintf_(from, sizeof from, "%s", r->addr);
	if (route(r, NULL, NULL) == 0)
		log_info(LOG_ATTRS("addr", from, "to", r->addr),
			 "the sentinels switched the master; following it");
}

/* The master through the sentinels, confirmed with ROLE. */
static int route_sentinel(struct redis *r)
{
	char lasterr[sizeof r->err] = "";
	const char *name = r->uri.sentinel_master;
	/* Before asking: a switch during the routing routes again. */
	unsigned epoch = atomic_load(&sentinel_epoch);
	size_t ns = r->uri.nhosts ? r->uri.nhosts : 1;
	for (size_t i = 0; i < ns && (i == 0 || now_mono_ns() < r->route_deadline); i++) {
		const char *sh = r->uri.nhosts ? r->uri.hosts[i].host : r->uri.host;
		const char *sp = r->uri.nhosts ? r->uri.hosts[i].port : r->uri.port;
		struct redis *a = aux_new(r, sh, sp, true);
		int64_t left = (r->route_deadline - now_mono_ns()) / NS_PER_MS;
		if (left < a->opts.connect_timeout_ms)
			a->opts.connect_timeout_ms = left > 1 ? (int)left : 1;
		redisReply *rep = NULL;
		if (redis_connect(a) < 0 ||
		    !(rep = redis_command(a, "SENTINEL get-master-addr-by-name %s", name))) {
			snprintf_(lasterr, sizeof lasterr, "sentinel %s", a->err);
			redis_free(a);
			continue;
		}
		char host[256] = "", port[8] = "";
		if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
		    rep->element[0]->type == REDIS_REPLY_STRING &&
		    rep->element[1]->type == REDIS_REPLY_STRING &&
		    valid_host(rep->element[0]->str, rep->element[0]->len) &&
		    valid_port(rep->element[1]->str, rep->element[1]->len)) {
			snprintf_(host, sizeof host, "%s", rep->element[0]->str);
			snprintf_(port, sizeof port, "%s", rep->element[1]->str);
		} else if (rep->type == REDIS_REPLY_NIL) {
			snprintf_(lasterr, sizeof lasterr, "sentinel %s does not know master %s",
				  a->addr, name);
		} else {
			snprintf_(lasterr, sizeof lasterr,
				  "sentinel %s: unexpected reply to SENTINEL "
				  "get-master-addr-by-name%s%.100s",
				  a->addr, rep->type == REDIS_REPLY_ERROR ? ": " : "",
				  rep->type == REDIS_REPLY_ERROR ? rep->str : "");
		}
		freeReplyObject(rep);
		redis_free(a);
		if (!host[0])
			continue;
		if (node_connect(r, host, port) < 0 || !(rep = redis_command(r, "ROLE"))) {
			snprintf_(lasterr, sizeof lasterr, "%s", r->err);
			continue;
		}
		bool master = rep->type == REDIS_REPLY_ARRAY && rep->elements >= 1 &&
			      rep->element[0]->type == REDIS_REPLY_STRING &&
			      strcmp(rep->element[0]->str, "master") == 0;
		char role[32] = "?";
		if (rep->type == REDIS_REPLY_ARRAY && rep->elements >= 1 &&
		    rep->element[0]->type == REDIS_REPLY_STRING)
			snprintf_(role, sizeof role, "%s", rep->element[0]->str);
		freeReplyObject(rep);
		if (!master) {
			fail(r, "the sentinels' master %s is not a master (ROLE: %s)", name, role);
			snprintf_(lasterr, sizeof lasterr, "%s", r->err);
			continue;
		}
		r->mode = REDIS_MODE_SENTINEL;
		r->epoch = epoch;
		start_watch(r);
		char hp[300];
		hostport(hp, sizeof hp, r->host, r->port);
		snprintf_(r->describe, sizeof r->describe, "sentinel master %s at %s", name, hp);
		return 0;
	}
	snprintf_(r->err, sizeof r->err, "%s", lasterr[0] ? lasterr : "no sentinel to ask");
	return -1;
}

static int route(struct redis *r, const char *hint_host, const char *hint_port)
{
	/* The routing commands are neither tracked nor guarded, nor routed. */
	r->track = false;
	r->routing = true;
	struct redis_guard g = r->guard;
	redis_guard_init(&r->guard, 0, 0, 0);
	/* Dead seeds cost at most three connect timeouts in all. */
	r->route_deadline = now_mono_ns() + 3 * (int64_t)r->opts.connect_timeout_ms * NS_PER_MS;
	int rc = r->aux			  ? node_connect(r, r->uri.host, r->uri.port)
		 : r->uri.sentinel_master ? route_sentinel(r)
					  : route_seeds(r, hint_host, hint_port);
	redis_guard_init(&r->guard, g.depth, g.max, g.max_elements);
	r->route_deadline = 0;
	r->routing = false;
	if (rc < 0) {
		if (r->fd >= 0)
			redis_disconnect(r);
		return -1;
	}
	r->track = !r->aux && r->mode != REDIS_MODE_STANDALONE;
	r->err[0] = '\0';
	return 0;
}

int redis_connect(struct redis *r)
{
	return route(r, NULL, NULL);
}

enum redis_mode redis_mode(const struct redis *r)
{
	return r->mode;
}

const char *redis_describe(const struct redis *r)
{
	return r->describe;
}

/* ---- cluster slots -------------------------------------------------------- */

static uint16_t crc16_xmodem(const char *p, size_t n)
{
	uint16_t crc = 0;
	for (size_t i = 0; i < n; i++) {
		crc ^= (uint16_t)((unsigned char)p[i] << 8);
		for (int k = 0; k < 8; k++)
			crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021)
					     : (uint16_t)(crc << 1);
	}
	return crc;
}

bool redis_hash_tag(const char *key, size_t len, size_t *off, size_t *taglen)
{
	const char *open = memchr(key, '{', len);
	if (!open)
		return false;
	size_t start = (size_t)(open - key) + 1;
	const char *close = memchr(key + start, '}', len - start);
	if (!close || close == key + start)
		return false;
	*off = start;
	*taglen = (size_t)(close - (key + start));
	return true;
}

unsigned redis_key_slot(const char *key, size_t len)
{
	size_t off = 0, n = len;
	if (!redis_hash_tag(key, len, &off, &n))
		off = 0, n = len;
	return crc16_xmodem(key + off, n) & 16383u;
}

static bool rstr(const redisReply *e, const char *want)
{
	return e && (e->type == REDIS_REPLY_STRING || e->type == REDIS_REPLY_STATUS) &&
	       strcmp(e->str, want) == 0;
}

/* A port: an integer or a string of digits. */
static bool rport(const redisReply *e, char out[8])
{
	if (e->type == REDIS_REPLY_INTEGER && e->integer >= 1 && e->integer <= 65535) {
		snprintf_(out, 8, "%lld", (long long)e->integer);
		return true;
	}
	if (e->type == REDIS_REPLY_STRING && valid_port(e->str, e->len)) {
		snprintf_(out, 8, "%s", e->str);
		return true;
	}
	return false;
}

static void map_add(struct redis_slotmap *m, const char *host, const char *port)
{
	if (m->nnodes >= REDIS_NODES_MAX)
		return;
	for (size_t i = 0; i < m->nnodes; i++)
		if (strcmp(m->nodes[i].host, host) == 0 && strcmp(m->nodes[i].port, port) == 0)
			return;
	if (!m->nodes)
		m->nodes = xcalloc(REDIS_NODES_MAX, sizeof *m->nodes);
	m->nodes[m->nnodes].host = xstrdup(host);
	m->nodes[m->nnodes].port = xstrdup(port);
	m->nnodes++;
}

static void map_owner(struct redis_slotmap *m, const char *host, const char *port)
{
	free(m->owner.host);
	free(m->owner.port);
	m->owner.host = xstrdup(host);
	m->owner.port = xstrdup(port);
}

/* The host of a node: the endpoint, else the ip, an empty one the node
 * asked. false when unknown or not a host name. */
static bool node_host(const redisReply *e, const char *self_host, char out[256])
{
	if (!e || e->type != REDIS_REPLY_STRING)
		return false;
	if (e->len == 0) {
		snprintf_(out, 256, "%s", self_host ? self_host : "");
		return out[0] != '\0';
	}
	if (!valid_host(e->str, e->len) || strcmp(e->str, "?") == 0)
		return false;
	snprintf_(out, 256, "%s", e->str);
	return true;
}

#define MAP_FIELDS_MAX 64 /* fields of a shard or node map */

/* One shard of CLUSTER SHARDS: 0, or -1 with why. */
static int parse_shard(const redisReply *sh, size_t idx, unsigned slot, bool tls,
		       const char *self_host, struct redis_slotmap *m, int *best, char **why)
{
	if (sh->type != REDIS_REPLY_ARRAY || sh->elements % 2 || sh->elements > MAP_FIELDS_MAX) {
		*why = xasprintf("shard %zu is not a map", idx + 1);
		return -1;
	}
	const redisReply *slots = NULL, *nodes = NULL;
	for (size_t i = 0; i < sh->elements; i += 2) {
		if (rstr(sh->element[i], "slots"))
			slots = sh->element[i + 1];
		else if (rstr(sh->element[i], "nodes"))
			nodes = sh->element[i + 1];
	}
	if (!slots || slots->type != REDIS_REPLY_ARRAY || slots->elements % 2 ||
	    slots->elements > 2 * 16384) {
		*why = xasprintf("shard %zu has no valid slots", idx + 1);
		return -1;
	}
	if (!nodes || nodes->type != REDIS_REPLY_ARRAY || nodes->elements > MAP_FIELDS_MAX) {
		*why = xasprintf("shard %zu has no valid nodes", idx + 1);
		return -1;
	}
	bool owns = false;
	for (size_t i = 0; i < slots->elements; i += 2) {
		const redisReply *a = slots->element[i], *b = slots->element[i + 1];
		if (a->type != REDIS_REPLY_INTEGER || b->type != REDIS_REPLY_INTEGER ||
		    a->integer < 0 || b->integer > 16383 || a->integer > b->integer) {
			*why = xasprintf("shard %zu has an invalid slot range", idx + 1);
			return -1;
		}
		if ((long long)slot >= a->integer && (long long)slot <= b->integer)
			owns = true;
	}
	for (size_t k = 0; k < nodes->elements; k++) {
		const redisReply *n = nodes->element[k];
		if (n->type != REDIS_REPLY_ARRAY || n->elements % 2 ||
		    n->elements > MAP_FIELDS_MAX) {
			*why = xasprintf("shard %zu: node %zu is not a map", idx + 1, k + 1);
			return -1;
		}
		const redisReply *ip = NULL, *endpoint = NULL, *port = NULL, *tport = NULL,
				 *role = NULL, *health = NULL;
		for (size_t i = 0; i < n->elements; i += 2) {
			const redisReply *key = n->element[i], *v = n->element[i + 1];
			if (rstr(key, "ip"))
				ip = v;
			else if (rstr(key, "endpoint"))
				endpoint = v;
			else if (rstr(key, "port"))
				port = v;
			else if (rstr(key, "tls-port"))
				tport = v;
			else if (rstr(key, "role"))
				role = v;
			else if (rstr(key, "health"))
				health = v;
		}
		char host[256], p[8];
		/* The endpoint (what clients are told), else the ip. */
		const redisReply *addr =
			endpoint && endpoint->type == REDIS_REPLY_STRING && endpoint->len ? endpoint
											  : ip;
		if (!node_host(addr, self_host, host))
			continue; /* an unknown address: not usable */
		if (!((tls && tport && rport(tport, p)) || (port && rport(port, p))))
			continue;
		map_add(m, host, p);
		if (owns && rstr(role, "master")) {
			int score = rstr(health, "online") ? 2 : 1;
			if (score > *best) {
				*best = score;
				map_owner(m, host, p);
			}
		}
	}
	return 0;
}

/* One range of CLUSTER SLOTS: [start, end, master, replicas...]. */
static int parse_range(const redisReply *e, size_t idx, unsigned slot, const char *self_host,
		       struct redis_slotmap *m, int *best, char **why)
{
	if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->elements > MAP_FIELDS_MAX ||
	    e->element[0]->type != REDIS_REPLY_INTEGER ||
	    e->element[1]->type != REDIS_REPLY_INTEGER || e->element[0]->integer < 0 ||
	    e->element[1]->integer > 16383 || e->element[0]->integer > e->element[1]->integer) {
		*why = xasprintf("entry %zu is not a slot range", idx + 1);
		return -1;
	}
	bool owns = (long long)slot >= e->element[0]->integer &&
		    (long long)slot <= e->element[1]->integer;
	for (size_t k = 2; k < e->elements; k++) {
		const redisReply *n = e->element[k];
		char host[256], p[8];
		if (n->type != REDIS_REPLY_ARRAY || n->elements < 2 || !rport(n->element[1], p)) {
			*why = xasprintf("entry %zu: node %zu is not [host, port, ...]", idx + 1,
					 k - 1);
			return -1;
		}
		if (!node_host(n->element[0], self_host, host))
			continue;
		map_add(m, host, p);
		if (k == 2 && owns && *best == 0) {
			*best = 2;
			map_owner(m, host, p);
		}
	}
	return 0;
}

void redis_slotmap_free(struct redis_slotmap *m)
{
	free(m->owner.host);
	free(m->owner.port);
	free_hosts(m->nodes, m->nnodes);
	memset(m, 0, sizeof *m);
}

int redis_slotmap_parse(const redisReply *rep, bool shards, unsigned slot, bool tls,
			const char *self_host, struct redis_slotmap *m, char **why)
{
	memset(m, 0, sizeof *m);
	*why = NULL;
	const char *what = shards ? "CLUSTER SHARDS" : "CLUSTER SLOTS";
	char *inner = NULL;
	int best = 0;
	if (!rep || rep->type != REDIS_REPLY_ARRAY) {
		inner = xstrdup("not an array");
	} else if (rep->elements > REDIS_SHARDS_MAX) {
		inner = xasprintf("more than %d entries", REDIS_SHARDS_MAX);
	} else {
		for (size_t i = 0; i < rep->elements && !inner; i++) {
			if (shards)
				parse_shard(rep->element[i], i, slot, tls, self_host, m, &best,
					    &inner);
			else
				parse_range(rep->element[i], i, slot, self_host, m, &best, &inner);
		}
	}
	if (inner) {
		*why = xasprintf("malformed %s reply: %s", what, inner);
		free(inner);
		redis_slotmap_free(m);
		return -1;
	}
	if (!m->owner.host) {
		*why = xasprintf("slot %u is served by no master in %s (is the cluster down?)",
				 slot, what);
		redis_slotmap_free(m);
		return -1;
	}
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
