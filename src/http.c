/*
 * HTTP server glue over libmicrohttpd (see http.h for the contract).
 *
 * Why Relay binds the socket itself: MHD's own binding takes one sockaddr
 * and reports failures only through its logger. Doing socket/bind/listen
 * here gives Go's listen-address forms, a precise error for the WARN line,
 * and a retry loop that simply tries again: once a socket is bound, it is
 * handed to MHD with MHD_OPTION_LISTEN_SOCKET (MHD closes it on stop).
 *
 * Threads: the retry thread exists only while a bind is pending. MHD runs an
 * internal listen thread plus one thread per connection
 * (MHD_USE_THREAD_PER_CONNECTION), so a client that connects and never
 * sends, or never reads, blocks only its own thread until the connection
 * timeout. All of them start with every signal blocked.
 *
 * Locking: s->mu guards daemon, port and stopping; the retry thread waits on
 * s->cond so stop wakes it at once.
 */
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

struct http_server {
	struct http_server_config cfg;
	char *addr;
	pthread_mutex_t mu;
	pthread_cond_t cond;
	struct MHD_Daemon *daemon; /* NULL until bound */
	int port;
	bool stopping;
	bool retry_running;
	pthread_t retry_thread;
};

/* Per-request state kept by MHD between calls of the access handler. */
struct request_ctx {
	struct buf body;
	bool too_large;
};

int http_parse_listen_addr(const char *addr, char *host, size_t host_size, unsigned *port)
{
	const char *colon;
	size_t n;
	if (!addr || !host || host_size == 0)
		return -1;
	if (addr[0] == '[') {
		const char *close = strchr(addr, ']');
		if (!close || close[1] != ':')
			return -1;
		n = (size_t)(close - addr - 1);
		if (n == 0 || n >= host_size)
			return -1;
		memcpy(host, addr + 1, n);
		host[n] = '\0';
		struct in6_addr a6;
		if (inet_pton(AF_INET6, host, &a6) != 1)
			return -1;
		colon = close + 1;
	} else {
		colon = strrchr(addr, ':');
		if (!colon)
			return -1;
		n = (size_t)(colon - addr);
		if (n >= host_size)
			return -1;
		memcpy(host, addr, n);
		host[n] = '\0';
		if (memchr(host, ':', n))
			return -1; /* an IPv6 host must be bracketed */
		for (size_t i = 0; i < n; i++) {
			char ch = host[i];
			bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
				  (ch >= '0' && ch <= '9') || ch == '.' || ch == '-' || ch == '_';
			if (!ok)
				return -1;
		}
	}
	const char *p = colon + 1;
	size_t plen = strlen(p);
	if (plen == 0 || plen > 5)
		return -1;
	for (size_t i = 0; i < plen; i++)
		if (p[i] < '0' || p[i] > '9')
			return -1;
	int64_t v;
	if (parse_int64(p, &v) < 0 || v < 0 || v > 65535)
		return -1;
	*port = (unsigned)v;
	return 0;
}

/* ---- socket ------------------------------------------------------------ */

static int bind_one(const struct sockaddr *sa, socklen_t len, int family, int *err_out)
{
	int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		*err_out = errno;
		return -1;
	}
	int one = 1, zero = 0;
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (family == AF_INET6) /* ":port" listens on IPv4 too, as Go does */
		(void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
	if (bind(fd, sa, len) < 0 || listen(fd, 64) < 0) {
		*err_out = errno;
		close(fd);
		return -1;
	}
	return fd;
}

/* Returns a listening socket, or -1 with *err (malloc'd). */
static int open_listener(const char *addr, char **err)
{
	char host[256];
	unsigned port;
	if (http_parse_listen_addr(addr, host, sizeof host, &port) < 0) {
		*err = xasprintf("invalid listen address %s", addr);
		return -1;
	}
	int e = 0;
	if (host[0] == '\0') {
		struct sockaddr_in6 s6 = {0};
		s6.sin6_family = AF_INET6;
		s6.sin6_addr = in6addr_any;
		s6.sin6_port = htons((uint16_t)port);
		int fd = bind_one((struct sockaddr *)&s6, sizeof s6, AF_INET6, &e);
		if (fd >= 0)
			return fd;
		if (e == EAFNOSUPPORT || e == EADDRNOTAVAIL) { /* no IPv6 on this host */
			struct sockaddr_in s4 = {0};
			s4.sin_family = AF_INET;
			s4.sin_addr.s_addr = htonl(INADDR_ANY);
			s4.sin_port = htons((uint16_t)port);
			fd = bind_one((struct sockaddr *)&s4, sizeof s4, AF_INET, &e);
			if (fd >= 0)
				return fd;
		}
		*err = xasprintf("listen tcp %s: %s", addr, strerror(e));
		return -1;
	}
	char service[8];
	snprintf_(service, sizeof service, "%u", port);
	struct addrinfo hints = {0}, *res = NULL;
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	int rc = getaddrinfo(host, service, &hints, &res);
	if (rc != 0) {
		*err = xasprintf("listen tcp %s: lookup %s: %s", addr, host, gai_strerror(rc));
		return -1;
	}
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		int fd = bind_one(ai->ai_addr, ai->ai_addrlen, ai->ai_family, &e);
		if (fd >= 0) {
			freeaddrinfo(res);
			return fd;
		}
	}
	freeaddrinfo(res);
	*err = xasprintf("listen tcp %s: %s", addr, strerror(e ? e : EADDRNOTAVAIL));
	return -1;
}

static int socket_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof ss;
	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return 0;
	if (ss.ss_family == AF_INET)
		return ntohs(((struct sockaddr_in *)&ss)->sin_port);
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return 0;
}

/* ---- requests ---------------------------------------------------------- */

const char *http_request_header(const struct http_request *req, const char *name)
{
	return MHD_lookup_connection_value((struct MHD_Connection *)req->conn_, MHD_HEADER_KIND,
					   name);
}

void http_response_header(struct http_response *resp, const char *name, const char *value)
{
	if (resp->nheaders >= HTTP_MAX_RESPONSE_HEADERS)
		return;
	resp->header_names[resp->nheaders] = xstrdup(name);
	resp->header_values[resp->nheaders] = xstrdup(value);
	resp->nheaders++;
}

void http_response_take_body(struct http_response *resp, char *body, size_t len)
{
	free(resp->body);
	resp->body = body;
	resp->body_len = len;
}

void http_response_text(struct http_response *resp, int status, const char *content_type,
			const char *text)
{
	resp->status = status;
	if (content_type)
		http_response_header(resp, "Content-Type", content_type);
	http_response_take_body(resp, xstrdup(text), strlen(text));
}

static void response_clear(struct http_response *resp)
{
	free(resp->body);
	for (size_t i = 0; i < resp->nheaders; i++) {
		free(resp->header_names[i]);
		free(resp->header_values[i]);
	}
}

static enum MHD_Result send_response(struct MHD_Connection *conn, struct http_response *r)
{
	char *body = r->body ? r->body : xstrdup("");
	size_t len = r->body ? r->body_len : 0;
	r->body = NULL;
	struct MHD_Response *mr = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	if (!mr) {
		free(body);
		return MHD_NO;
	}
	for (size_t i = 0; i < r->nheaders; i++)
		MHD_add_response_header(mr, r->header_names[i], r->header_values[i]);
	enum MHD_Result rc = MHD_queue_response(conn, (unsigned)r->status, mr);
	MHD_destroy_response(mr);
	return rc;
}

static enum MHD_Result send_text(struct MHD_Connection *conn, int status, const char *text)
{
	struct http_response r = {0};
	http_response_text(&r, status, "text/plain; charset=utf-8", text);
	enum MHD_Result rc = send_response(conn, &r);
	response_clear(&r);
	return rc;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *upload_data,
				  size_t *upload_data_size, void **con_cls)
{
	struct http_server *s = cls;
	struct request_ctx *ctx = *con_cls;
	if (!ctx) { /* headers only; the body (if any) follows */
		ctx = xcalloc(1, sizeof *ctx);
		buf_init(&ctx->body, s->cfg.max_body);
		*con_cls = ctx;
		return MHD_YES;
	}
	if (*upload_data_size) {
		if (!ctx->too_large && buf_append(&ctx->body, upload_data, *upload_data_size) < 0)
			ctx->too_large = true;
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (ctx->too_large)
		return send_text(conn, 413, "request body too large\n");

	struct http_request req = {
		.method = method,
		.path = url,
		.body = ctx->body.data ? ctx->body.data : "",
		.body_len = ctx->body.len,
		.conn_ = conn,
	};
	struct http_response resp = {.status = 200};
	s->cfg.handler(&req, &resp, s->cfg.arg);
	enum MHD_Result rc = send_response(conn, &resp);
	response_clear(&resp);
	return rc;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct request_ctx *ctx = *con_cls;
	if (!ctx)
		return;
	buf_free(&ctx->body);
	free(ctx);
	*con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	if (!log_enabled(LOG_DEBUG))
		return;
	char *msg = xvasprintf(fmt, ap);
	str_trim(msg);
	struct http_server *s = cls;
	log_debug(LOG_ATTRS("addr", s->addr), "http server: %s", msg);
	free(msg);
}

/* ---- lifecycle --------------------------------------------------------- */

/* Binds and starts MHD. Returns 0, or -1 with *err (malloc'd). */
static int try_start(struct http_server *s, char **err)
{
	int fd = open_listener(s->addr, err);
	if (fd < 0)
		return -1;
	int port = socket_port(fd);

	/* MHD's threads inherit this mask: keep process signals off them. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	struct MHD_Daemon *d = MHD_start_daemon(
		MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
			MHD_USE_ITC | MHD_USE_ERROR_LOG,
		0, NULL, NULL, on_request, s, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
		MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->cfg.connection_limit,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->cfg.timeout_seconds,
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log,
		s, MHD_OPTION_END);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!d) {
		close(fd);
		*err = xasprintf("listen tcp %s: cannot start the http daemon", s->addr);
		return -1;
	}
	pthread_mutex_lock(&s->mu);
	s->daemon = d;
	s->port = port;
	pthread_mutex_unlock(&s->mu);
	log_info(NULL, "%s http server listening on %s", s->cfg.name, s->addr);
	return 0;
}

static void *retry_main(void *arg)
{
	struct http_server *s = arg;
	pthread_mutex_lock(&s->mu);
	for (;;) {
		struct timespec until;
		clock_gettime(CLOCK_MONOTONIC, &until);
		int64_t ns = until.tv_nsec + (int64_t)s->cfg.retry_interval_ms * 1000000;
		until.tv_sec += ns / 1000000000;
		until.tv_nsec = ns % 1000000000;
		while (!s->stopping) {
			if (pthread_cond_timedwait(&s->cond, &s->mu, &until) == ETIMEDOUT)
				break;
		}
		if (s->stopping)
			break;
		pthread_mutex_unlock(&s->mu);
		char *err = NULL;
		int rc = try_start(s, &err);
		if (rc < 0)
			log_debug(LOG_ATTRS("addr", s->addr, "error", err),
				  "%s http server still cannot listen; retrying", s->cfg.name);
		free(err);
		pthread_mutex_lock(&s->mu);
		if (rc == 0)
			break;
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

int http_server_start(const struct http_server_config *cfg, struct http_server **out, char **err)
{
	char host[256];
	unsigned port;
	*out = NULL;
	*err = NULL;
	if (!cfg->handler ||
	    http_parse_listen_addr(cfg->listen_addr, host, sizeof host, &port) < 0) {
		*err = xasprintf("invalid listen address %s",
				 cfg->listen_addr ? cfg->listen_addr : "");
		return -1;
	}
	struct http_server *s = xcalloc(1, sizeof *s);
	s->cfg = *cfg;
	s->addr = xstrdup(cfg->listen_addr);
	s->cfg.listen_addr = s->addr;
	if (!s->cfg.name)
		s->cfg.name = "HTTP";
	if (!s->cfg.max_body)
		s->cfg.max_body = 1 << 20;
	if (!s->cfg.connection_limit)
		s->cfg.connection_limit = 64;
	if (!s->cfg.timeout_seconds)
		s->cfg.timeout_seconds = 10;
	if (!s->cfg.retry_interval_ms)
		s->cfg.retry_interval_ms = 2000;
	pthread_mutex_init(&s->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cond, &ca);
	pthread_condattr_destroy(&ca);

	char *e = NULL;
	if (try_start(s, &e) == 0) {
		*out = s;
		return 0;
	}
	if (!s->cfg.retry_bind) {
		*err = e;
		http_server_stop(s);
		return -1;
	}
	log_warn(LOG_ATTRS("addr", s->addr, "error", e),
		 "%s http server cannot listen; retrying in the background", s->cfg.name);
	free(e);

	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&s->retry_thread, NULL, retry_main, s);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		*err = xasprintf("cannot start the %s http retry thread: %s", s->cfg.name,
				 strerror(rc));
		http_server_stop(s);
		return -1;
	}
	s->retry_running = true;
	*out = s;
	return 0;
}

int http_server_port(struct http_server *s)
{
	if (!s)
		return 0;
	pthread_mutex_lock(&s->mu);
	int port = s->port;
	pthread_mutex_unlock(&s->mu);
	return port;
}

void http_server_stop(struct http_server *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	s->stopping = true;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->mu);
	if (s->retry_running)
		pthread_join(s->retry_thread, NULL);
	/* The retry thread is gone: nobody else touches daemon now. */
	if (s->daemon) {
		MHD_stop_daemon(s->daemon);
		log_info(NULL, "%s http server stopped", s->cfg.name);
	}
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->mu);
	free(s->addr);
	free(s);
}
