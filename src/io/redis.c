/*
 * Redis transport: the connection (TCP, TLS, AUTH and SELECT), its reply
 * stream, commands and pipelines, scripts, and the routing that picks the
 * node to connect to. Design: a non-blocking socket driven with poll(2) so
 * that every connect, handshake, write and read is bounded by a timeout;
 * OpenSSL on top for rediss://; hiredis only formats commands and parses
 * replies. Outgoing commands are queued in `out` (pipelining) and flushed
 * by redis_get_reply(). Any transport error closes the connection, because
 * the position in the reply stream is then unknown.
 *
 * The rest of the client: redis_cluster.c (slot map, routing through the
 * seeds, redirects), redis_sentinel.c (the master through the sentinels,
 * the +switch-master watcher), redis_uri.c (URIs), redis_guard.c (the
 * reply guard's scanner); what they share is in redis_internal.h.
 */
#include "io/redis.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
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
#include "io/redis_internal.h"

#define BACKOFF_MIN_MS 1000
#define BACKOFF_MAX_MS 30000

/* ---- connection ----------------------------------------------------- */

/* The sentinel-watch thread (redis_sentinel.c) runs until the process ends,
 * over TLS with rediss-sentinel://: OpenSSL must not tear its state down at
 * exit under it (a crash or a hang in exit()). The first initialisation
 * decides, so this runs before main. */
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

void redis_hosts_free(struct redis_host *h, size_t n)
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
	redis_hosts_free(r->known, r->nknown);
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

void redis_set_err(struct redis *r, const char *fmt, ...)
{
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	snprintf_(r->err, sizeof r->err, "redis %s: %s", r->addr, msg);
}

void redis_fail(struct redis *r, const char *fmt, ...)
{
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	redis_disconnect(r);
	redis_set_err(r, "%s", msg);
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
		redis_set_err(r, "cannot resolve host %s: %s", r->host, gai_strerror(gai));
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
		redis_set_err(r, "connect: %s",
			      last_errno == ETIMEDOUT ? "connection timed out"
						      : strerror(last_errno));
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
		redis_fail(r, "%s", ssl_ctx_err[0] ? ssl_ctx_err : "TLS unavailable");
		return -1;
	}
	r->ssl = SSL_new(ssl_ctx);
	if (!r->ssl) {
		redis_fail(r, "TLS: %s", ssl_reason());
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
		redis_fail(r, "TLS: cannot check the certificate against host %s", r->host);
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
				redis_fail(r, "TLS handshake: certificate verify failed: %s",
					   X509_verify_cert_error_string(vr));
			else
				redis_fail(r, "TLS handshake: %s", ssl_reason());
			return -1;
		}
		int w = wait_fd(r->fd, ev, deadline);
		if (w <= 0) {
			redis_fail(r, "TLS handshake: %s", w == 0 ? "timed out" : strerror(errno));
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
				redis_fail(r, "write: %s", ssl_reason());
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
				redis_fail(r, "write: %s", strerror(errno));
				return -1;
			}
		}
		int w = wait_fd(r->fd, ev, deadline);
		if (w <= 0) {
			redis_fail(r, "write: %s", w == 0 ? "timed out" : strerror(errno));
			return -1;
		}
	}
	buf_reset(&r->out);
	return 0;
}

/* ---- replies ------------------------------------------------------------ */

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
					redis_fail(r, "connection closed by server");
					return -1;
				}
				if (e == SSL_ERROR_WANT_WRITE)
					ev = POLLOUT;
				else if (e != SSL_ERROR_WANT_READ) {
					redis_fail(r, "read: %s",
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
				redis_fail(r, "connection closed by server");
				return -1;
			}
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
				redis_fail(r, "read: %s", strerror(errno));
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
				redis_fail(r,
					   "reply refused: an element over %zu bytes, or not RESP2",
					   max);
				r->tripped = true;
				return -1;
			}
			r->fed += (size_t)n;
			if (r->fed > REDIS_REPLY_MAX) {
				redis_fail(r, "reply larger than %u bytes", REDIS_REPLY_MAX);
				return -1;
			}
			if (redisReaderFeed(r->reader, chunk, (size_t)n) != REDIS_OK) {
				redis_fail(r, "protocol error: %s", r->reader->errstr);
				return -1;
			}
			return 1;
		}
		int w = wait_fd(r->fd, ev, deadline);
		if (w == 0 && soft)
			return 0;
		if (w <= 0) {
			redis_fail(r, "read: %s", w == 0 ? "timed out" : strerror(errno));
			return -1;
		}
	}
}

int redis_read_one(struct redis *r, int64_t deadline, bool soft, redisReply **out)
{
	*out = NULL;
	if (r->fd < 0) {
		if (!r->err[0])
			redis_set_err(r, "not connected");
		return -1;
	}
	if (r->out.len && flush_out(r, deadline) < 0)
		return -1;
	for (;;) {
		void *reply = NULL;
		if (redisReaderGetReply(r->reader, &reply) != REDIS_OK) {
			redis_fail(r, "protocol error: %s", r->reader->errstr);
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

/* ---- in-flight commands and the caller's replies ------------------------- */

/* Cluster and sentinel mode keep a copy of every command in flight, to
 * resend it after a redirect (redis_cluster.c) or a master switch. */

int redis_fl_push(struct redis *r, const char *cmd, size_t len, int tries)
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

void redis_fl_pop(struct redis *r)
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

char *redis_memdup(const char *p, size_t n)
{
	char *c = xmalloc(n ? n : 1);
	memcpy(c, p, n);
	return c;
}

/* The next reply for the caller: one read ahead, else from the wire with
 * the redirects resolved (cluster and sentinel mode). As redis_read_one. */
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
		if (soft && redis_sentinel_switched(r) && r->fl_n - r->fl_head == 1 &&
		    !r->out.len && !r->fed) {
			/* A blocking read on a master the sentinels replaced: no new
			 * entry reaches it any more. Resent on the new one (a reply
			 * it may still have sent is lost with the old master's state,
			 * or left pending for the reclaim). */
			struct inflight f = r->fl[r->fl_head];
			char *cmd = redis_memdup(r->pend.data + r->pend_off, f.len);
			char from[sizeof r->addr];
			snprintf_(from, sizeof from, "%s", r->addr);
			int rc = redis_route(r, NULL, NULL);
			if (rc == 0) {
				log_info(LOG_ATTRS("addr", from, "to", r->addr),
					 "the sentinels switched the master; following it");
				if (buf_append(&r->out, cmd, f.len) < 0 ||
				    redis_fl_push(r, cmd, f.len, f.tries) < 0) {
					redis_fail(r, "pipeline larger than %u bytes",
						   REDIS_OUT_MAX);
					rc = -1;
				}
			}
			free(cmd);
			if (rc < 0)
				return -1;
		}
		int rc = redis_read_one(r, deadline, soft, out);
		if (rc <= 0 || !r->track || r->fl_head == r->fl_n)
			return rc;
		if (redis_redirect_kind(*out) == RD_NONE) {
			redis_fl_pop(r);
			redis_served_again(r);
			return 1;
		}
		rc = redis_redirect(r, out, soft, deadline);
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

/* ---- scripts and commands ----------------------------------------------- */

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
		redis_set_err(r, "cannot format command");
		return -1;
	}
	int rc = buf_append(&r->out, cmd, (size_t)len);
	if (rc == 0 && r->track && redis_fl_push(r, cmd, (size_t)len, 0) < 0) {
		r->out.len -= (size_t)len; /* all or nothing */
		r->out.data[r->out.len] = '\0';
		rc = -1;
	}
	redisFreeCommand(cmd);
	if (rc < 0)
		redis_set_err(r, "pipeline larger than %u bytes", REDIS_OUT_MAX);
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
	redis_sentinel_follow(r);
	if (r->fd < 0)
		return -1;
	char *cmd = NULL;
	int len = redisFormatCommandArgv(&cmd, argc, argv, lens);
	return append_formatted(r, cmd, len);
}

static int append_v(struct redis *r, const char *fmt, va_list ap)
{
	redis_sentinel_follow(r);
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

/* ---- routing ------------------------------------------------------------ */

int redis_reply_not_error(struct redis *r, redisReply *rep, const char *what)
{
	if (!rep)
		return -1;
	int rc = 0;
	if (rep->type == REDIS_REPLY_ERROR) {
		redis_fail(r, "%s: %s", what, rep->str);
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
		if (redis_reply_not_error(r, rep, "authentication failed") < 0)
			return -1;
	}
	if (r->uri.db) {
		char what[40];
		snprintf_(what, sizeof what, "SELECT %d failed", r->uri.db);
		if (redis_reply_not_error(r, redis_command(r, "SELECT %d", r->uri.db), what) < 0)
			return -1;
	}
	return 0;
}

int redis_node_connect(struct redis *r, const char *host, const char *port)
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

void redis_hostport(char *dst, size_t n, const char *host, const char *port)
{
	bool v6 = strchr(host, ':') != NULL;
	snprintf_(dst, n, "%s%s%s:%s", v6 ? "[" : "", host, v6 ? "]" : "", port);
}

struct redis *redis_aux_new(const struct redis *r, const char *host, const char *port,
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

int redis_route(struct redis *r, const char *hint_host, const char *hint_port)
{
	/* The routing commands are neither tracked nor guarded, nor routed. */
	r->track = false;
	r->routing = true;
	struct redis_guard g = r->guard;
	redis_guard_init(&r->guard, 0, 0, 0);
	/* Dead seeds cost at most three connect timeouts in all. */
	r->route_deadline = now_mono_ns() + 3 * (int64_t)r->opts.connect_timeout_ms * NS_PER_MS;
	int rc = r->aux			  ? redis_node_connect(r, r->uri.host, r->uri.port)
		 : r->uri.sentinel_master ? redis_route_sentinel(r)
					  : redis_route_seeds(r, hint_host, hint_port);
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
	return redis_route(r, NULL, NULL);
}

enum redis_mode redis_mode(const struct redis *r)
{
	return r->mode;
}

const char *redis_describe(const struct redis *r)
{
	return r->describe;
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
