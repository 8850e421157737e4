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
 * s->cond so stop wakes it at once. s->body_mu guards the body accounting
 * (body_bytes and the stats), taken for a moment around each growth of a
 * request body's buffer and never while calling out.
 *
 * Deadlines on headers (http.h): MHD's connection timeout is an idle
 * timeout, reset by every byte, so it cannot bound how long a client takes
 * to send its headers. Each connection is therefore tracked from MHD's
 * NOTIFY_CONNECTION STARTED to CLOSED in s->conns (guarded by s->conn_mu)
 * with a deadline, and the "reaper" thread (one per server, woken every
 * REAP_TICK_MS) shuts down the socket of every connection still receiving
 * past it; MHD's connection thread then sees the end of the stream and
 * closes it as for any peer that went away. The reaper shuts down its own
 * duplicate of the socket (dup at STARTED, closed at CLOSED under
 * conn_mu), so a descriptor number MHD closed and the kernel reused is
 * never touched. The deadline is header_timeout_seconds from the accept;
 * once the headers are in, the body's (body_timeout_seconds); while the
 * handler runs and the response goes out, none (the idle timeout applies);
 * after a response, header_timeout_seconds again for the next request of a
 * kept-alive connection. MHD_OPTION_PER_IP_CONNECTION_LIMIT caps the
 * connections from one address: with the deadline, one address holds at
 * most per_ip_limit slots for at most header_timeout_seconds at a time.
 *
 * Bodies (the bounds are listed in http.h): a body is buffered in one
 * array per request, allocated when its first byte arrives: Content-Length
 * + 1 bytes at once when declared, else growing geometrically up to
 * max_body + 1. Every allocation is first counted against body_budget: the
 * count is of allocated capacity, so it is what the bodies really hold.
 * (Growing declared bodies piecemeal would let many of them each take a
 * part of the budget and then all fail to grow.) The deadline is checked
 * each time data arrives and, between arrivals, enforced by MHD itself:
 * the connection's idle timeout is set to what is left of the deadline.
 */
#include "io/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
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

#include "base/log.h"
#include "base/util.h"

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
	pthread_mutex_t body_mu;
	struct http_server_stats stats; /* guarded by body_mu */
	pthread_mutex_t conn_mu;	/* guards conns and every conn's fields */
	pthread_cond_t reap_cond;	/* wakes the reaper for stop */
	struct conn *conns;		/* every open connection */
	bool reap_stop, reaping;
	pthread_t reaper;
};

/* An open connection, from NOTIFY_CONNECTION STARTED to CLOSED. */
struct conn {
	struct conn *prev, *next;
	int fd;		     /* our duplicate of its socket, or -1 */
	int64_t deadline_ns; /* monotonic; 0 while none applies */
	bool in_body;	     /* the deadline is the body's, not the headers' */
	char peer[64];	     /* the client address, for the log */
};

/* How often the reaper looks at the deadlines: they hold to within this. */
#define REAP_TICK_MS 200

/* Per-request state kept by MHD between calls of the access handler. */
struct request_ctx {
	char *body; /* NUL-terminated once the request is complete */
	size_t len, cap;
	size_t limit;	     /* cap never grows past this */
	bool declared;	     /* limit is Content-Length + 1 */
	int64_t deadline_ns; /* end of the body at the latest (monotonic) */
	bool too_large;	     /* past max_body: the rest is discarded, 413 */
	bool answered;	     /* a response is queued */
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
	char host[HTTP_LISTEN_HOST_MAX];
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

/* ---- connections and their deadlines ---------------------------------- */

static void count(struct http_server *s, unsigned long *counter);

static int64_t secs_ns(unsigned s)
{
	return (int64_t)s * 1000000000;
}

static void peer_name(const struct sockaddr *sa, char *out, size_t size)
{
	snprintf_(out, size, "?");
	if (!sa)
		return;
	if (sa->sa_family == AF_INET) {
		inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out,
			  (socklen_t)size);
	} else if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
		if (IN6_IS_ADDR_V4MAPPED(a)) /* 127.0.0.1, not ::ffff:127.0.0.1 */
			inet_ntop(AF_INET, &a->s6_addr[12], out, (socklen_t)size);
		else
			inet_ntop(AF_INET6, a, out, (socklen_t)size);
	}
}

static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
			  enum MHD_ConnectionNotificationCode code)
{
	struct http_server *s = cls;
	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		struct conn *c = xcalloc(1, sizeof *c);
		const union MHD_ConnectionInfo *fi =
			MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
		const union MHD_ConnectionInfo *ai =
			MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
		peer_name(ai ? ai->client_addr : NULL, c->peer, sizeof c->peer);
		c->fd = fi ? fcntl(fi->connect_fd, F_DUPFD_CLOEXEC, 0) : -1;
		/* Without a duplicate the deadline cannot be enforced: refuse
		 * the connection now (the descriptor is surely its own here). */
		if (c->fd < 0 && fi)
			shutdown(fi->connect_fd, SHUT_RDWR);
		c->deadline_ns = now_mono_ns() + secs_ns(s->cfg.header_timeout_seconds);
		pthread_mutex_lock(&s->conn_mu);
		c->next = s->conns;
		if (s->conns)
			s->conns->prev = c;
		s->conns = c;
		pthread_mutex_unlock(&s->conn_mu);
		*socket_context = c;
		return;
	}
	struct conn *c = *socket_context;
	if (!c)
		return;
	pthread_mutex_lock(&s->conn_mu);
	if (c->prev)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	if (c->fd >= 0)
		close(c->fd);
	pthread_mutex_unlock(&s->conn_mu);
	free(c);
	*socket_context = NULL;
}

/* Sets the connection's deadline (0: none). */
static void conn_deadline(struct http_server *s, struct MHD_Connection *mc, int64_t deadline_ns,
			  bool in_body)
{
	const union MHD_ConnectionInfo *i =
		MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	struct conn *c = i ? i->socket_context : NULL;
	if (!c)
		return;
	pthread_mutex_lock(&s->conn_mu);
	c->deadline_ns = deadline_ns;
	c->in_body = in_body;
	pthread_mutex_unlock(&s->conn_mu);
}

/* Clears the connection's deadline: true when it was set, i.e. the reaper
 * has not cut the connection (so exactly one of the two counts the cut). */
static bool conn_disarm(struct http_server *s, struct MHD_Connection *mc)
{
	const union MHD_ConnectionInfo *i =
		MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	struct conn *c = i ? i->socket_context : NULL;
	if (!c)
		return true;
	pthread_mutex_lock(&s->conn_mu);
	bool armed = c->deadline_ns != 0;
	c->deadline_ns = 0;
	pthread_mutex_unlock(&s->conn_mu);
	return armed;
}

static void *reaper_main(void *arg)
{
	struct http_server *s = arg;
	pthread_mutex_lock(&s->conn_mu);
	while (!s->reap_stop) {
		struct timespec until;
		clock_gettime(CLOCK_MONOTONIC, &until);
		int64_t ns = until.tv_nsec + (int64_t)REAP_TICK_MS * 1000000;
		until.tv_sec += ns / 1000000000;
		until.tv_nsec = ns % 1000000000;
		pthread_cond_timedwait(&s->reap_cond, &s->conn_mu, &until);
		int64_t now = now_mono_ns();
		struct conn *c = s->conns;
		while (c && !s->reap_stop) {
			if (!c->deadline_ns || now < c->deadline_ns || c->fd < 0) {
				c = c->next;
				continue;
			}
			/* once: the socket is shut, MHD closes the connection */
			shutdown(c->fd, SHUT_RDWR);
			close(c->fd);
			c->fd = -1;
			c->deadline_ns = 0;
			bool body = c->in_body;
			char peer[sizeof c->peer];
			memcpy(peer, c->peer, sizeof peer);
			/* the log line without the lock the connections take;
			 * then from the head again, the list may have changed */
			pthread_mutex_unlock(&s->conn_mu);
			count(s, body ? &s->stats.too_slow : &s->stats.too_slow_headers);
			log_warn(LOG_ATTRS("addr", s->addr, "peer", peer),
				 "%s http server: request %s not received within %us; "
				 "connection closed",
				 s->cfg.name, body ? "body" : "headers",
				 body ? s->cfg.body_timeout_seconds
				      : s->cfg.header_timeout_seconds);
			pthread_mutex_lock(&s->conn_mu);
			c = s->conns;
		}
	}
	pthread_mutex_unlock(&s->conn_mu);
	return NULL;
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

static void count(struct http_server *s, unsigned long *counter)
{
	pthread_mutex_lock(&s->body_mu);
	(*counter)++;
	pthread_mutex_unlock(&s->body_mu);
}

/* Whether n more body bytes fit in what is left of body_budget now. */
static bool budget_left(struct http_server *s, uint64_t n)
{
	pthread_mutex_lock(&s->body_mu);
	bool ok = n <= s->cfg.body_budget - s->stats.body_bytes;
	pthread_mutex_unlock(&s->body_mu);
	return ok;
}

/* Grows ctx->body to hold need bytes: to ctx->limit at once for a declared
 * length, else geometrically up to ctx->limit, or to exactly need when that
 * is all that fits. The growth is counted against body_budget first
 * (body_bytes never exceeds it). -1 when it does not fit. */
static int body_grow(struct http_server *s, struct request_ctx *ctx, size_t need)
{
	if (need <= ctx->cap)
		return 0;
	/* With a Content-Length, all of it at the first byte: one allocation,
	 * counted once, so a body that got its buffer never fails half-way */
	size_t cap = ctx->cap ? ctx->cap : ctx->declared ? ctx->limit : 4096;
	while (cap < need)
		cap = cap > SIZE_MAX / 2 ? need : 2 * cap;
	if (cap > ctx->limit) /* need <= limit: Content-Length or max_body checked */
		cap = need > ctx->limit ? need : ctx->limit;
	pthread_mutex_lock(&s->body_mu);
	size_t left = s->cfg.body_budget - s->stats.body_bytes;
	if (cap - ctx->cap > left)
		cap = need; /* no room to grow ahead: just what this chunk needs */
	bool fits = cap - ctx->cap <= left;
	if (fits) {
		s->stats.body_bytes += cap - ctx->cap;
		if (s->stats.body_bytes > s->stats.body_bytes_peak)
			s->stats.body_bytes_peak = s->stats.body_bytes;
	}
	pthread_mutex_unlock(&s->body_mu);
	if (!fits)
		return -1;
	ctx->body = xrealloc(ctx->body, cap);
	ctx->cap = cap;
	return 0;
}

static void body_release(struct http_server *s, struct request_ctx *ctx)
{
	pthread_mutex_lock(&s->body_mu);
	s->stats.body_bytes -= ctx->cap;
	pthread_mutex_unlock(&s->body_mu);
	free(ctx->body);
	ctx->body = NULL;
	ctx->len = ctx->cap = 0;
}

/* MHD closes a connection after this many idle seconds: the configured
 * idle timeout, or less when the body's deadline comes sooner (at least 1:
 * 0 would mean "never"). */
static void set_timeout(struct MHD_Connection *conn, struct http_server *s, int64_t deadline_ns)
{
	int64_t left = deadline_ns - now_mono_ns();
	int64_t secs = left <= 0 ? 1 : (left + 999999999) / 1000000000;
	if (secs > (int64_t)s->cfg.timeout_seconds)
		secs = s->cfg.timeout_seconds;
	MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)secs);
}

/* Headers are in: the request's state, and the refusals that can be sent
 * before its body is read (by Content-Length). Returns MHD_YES to go on
 * reading, or the result of queueing 413/503 (MHD then discards the body
 * and closes the connection). */
static enum MHD_Result request_begin(struct http_server *s, struct MHD_Connection *conn,
				     void **con_cls)
{
	struct request_ctx *ctx = xcalloc(1, sizeof *ctx);
	*con_cls = ctx;
	ctx->limit = s->cfg.max_body + 1;
	ctx->deadline_ns = now_mono_ns() + (int64_t)s->cfg.body_timeout_seconds * 1000000000;
	conn_deadline(s, conn, ctx->deadline_ns, true);
	const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
	int64_t declared;
	if (cl && parse_int64(cl, &declared) == 0 && declared >= 0) {
		if ((uint64_t)declared > s->cfg.max_body) { /* max_body */
			count(s, &s->stats.too_large);
			return send_text(conn, 413, "request body too large\n");
		}
		if (!budget_left(s, (uint64_t)declared + 1)) { /* body_budget */
			count(s, &s->stats.over_budget);
			log_warn(LOG_ATTRS("addr", s->addr),
				 "%s http server: request bodies over their memory budget; "
				 "request refused with 503",
				 s->cfg.name);
			return send_text(conn, 503, "server busy: too many request bodies\n");
		}
		ctx->limit = (size_t)declared + 1;
		ctx->declared = true;
	}
	set_timeout(conn, s, ctx->deadline_ns);
	return MHD_YES;
}

/* One piece of the body. MHD_NO closes the connection (no response can be
 * queued while MHD is receiving the body). */
static enum MHD_Result request_data(struct http_server *s, struct MHD_Connection *conn,
				    struct request_ctx *ctx, const char *data, size_t n)
{
	if (now_mono_ns() >= ctx->deadline_ns) { /* body_timeout_seconds */
		if (conn_disarm(s, conn)) {	 /* else the reaper counted it */
			count(s, &s->stats.too_slow);
			log_warn(LOG_ATTRS("addr", s->addr),
				 "%s http server: request body not received within %us; "
				 "connection closed",
				 s->cfg.name, s->cfg.body_timeout_seconds);
		}
		return MHD_NO;
	}
	set_timeout(conn, s, ctx->deadline_ns);
	if (ctx->too_large)
		return MHD_YES;
	if (n > s->cfg.max_body - ctx->len) { /* max_body, without Content-Length */
		ctx->too_large = true;
		body_release(s, ctx);
		return MHD_YES;
	}
	if (body_grow(s, ctx, ctx->len + n + 1) < 0) { /* body_budget */
		count(s, &s->stats.over_budget);
		log_warn(LOG_ATTRS("addr", s->addr),
			 "%s http server: request bodies over their memory budget; "
			 "connection closed",
			 s->cfg.name);
		return MHD_NO;
	}
	memcpy(ctx->body + ctx->len, data, n);
	ctx->len += n;
	return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *upload_data,
				  size_t *upload_data_size, void **con_cls)
{
	struct http_server *s = cls;
	struct request_ctx *ctx = *con_cls;
	if (!ctx) /* headers only; the body (if any) follows */
		return request_begin(s, conn, con_cls);
	if (*upload_data_size) {
		size_t n = *upload_data_size;
		*upload_data_size = 0;
		return request_data(s, conn, ctx, upload_data, n);
	}
	if (ctx->too_large) {
		count(s, &s->stats.too_large);
		return send_text(conn, 413, "request body too large\n");
	}
	if (ctx->body)
		ctx->body[ctx->len] = '\0';
	struct http_request req = {
		.method = method,
		.path = url,
		.body = ctx->body ? ctx->body : "",
		.body_len = ctx->len,
		.conn_ = conn,
	};
	struct http_response resp = {.status = 200};
	conn_deadline(s, conn, 0, false); /* received: the idle timeout from here */
	s->cfg.handler(&req, &resp, s->cfg.arg);
	body_release(s, ctx); /* not needed any more, whatever the client reads */
	ctx->answered = true;
	/* the response, and the next request on this connection, get the idle
	 * timeout again (set_timeout may have shortened it to the deadline) */
	MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, s->cfg.timeout_seconds);
	enum MHD_Result rc = send_response(conn, &resp);
	response_clear(&resp);
	return rc;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct http_server *s = cls;
	struct request_ctx *ctx = *con_cls;
	/* MHD's idle timeout cut a body that stopped coming before its end
	 * (unless the reaper did first, and counted it) */
	if (ctx && toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED && !ctx->answered &&
	    conn_disarm(s, conn))
		count(s, &s->stats.too_slow);
	/* a kept-alive connection's next request: its headers' deadline */
	conn_deadline(s, conn, now_mono_ns() + secs_ns(s->cfg.header_timeout_seconds), false);
	if (!ctx)
		return;
	body_release(s, ctx);
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
	sigset_t old;
	signals_block_all(&old);
	struct MHD_Daemon *d = MHD_start_daemon(
		MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
			MHD_USE_ITC | MHD_USE_ERROR_LOG,
		0, NULL, NULL, on_request, s, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
		MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->cfg.connection_limit,
		MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)s->cfg.per_ip_limit,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->cfg.timeout_seconds,
		MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_NOTIFY_COMPLETED,
		on_completed, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s, MHD_OPTION_END);
	signals_restore(&old);
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
	char host[HTTP_LISTEN_HOST_MAX];
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
		s->cfg.max_body = HTTP_DEFAULT_MAX_BODY;
	if (!s->cfg.body_budget)
		s->cfg.body_budget = 2 * s->cfg.max_body;
	if (s->cfg.body_budget < s->cfg.max_body + 1)
		s->cfg.body_budget = s->cfg.max_body + 1; /* one full body always fits */
	if (!s->cfg.body_timeout_seconds)
		s->cfg.body_timeout_seconds = HTTP_DEFAULT_BODY_TIMEOUT_SECONDS;
	if (!s->cfg.connection_limit)
		s->cfg.connection_limit = HTTP_DEFAULT_CONNECTION_LIMIT;
	if (!s->cfg.per_ip_limit)
		s->cfg.per_ip_limit = HTTP_DEFAULT_PER_IP_LIMIT;
	if (!s->cfg.header_timeout_seconds)
		s->cfg.header_timeout_seconds = HTTP_DEFAULT_HEADER_TIMEOUT_SECONDS;
	if (!s->cfg.timeout_seconds)
		s->cfg.timeout_seconds = HTTP_DEFAULT_TIMEOUT_SECONDS;
	if (!s->cfg.retry_interval_ms)
		s->cfg.retry_interval_ms = HTTP_DEFAULT_RETRY_INTERVAL_MS;
	pthread_mutex_init(&s->mu, NULL);
	pthread_mutex_init(&s->body_mu, NULL);
	pthread_mutex_init(&s->conn_mu, NULL);
	cond_init_monotonic(&s->cond);
	cond_init_monotonic(&s->reap_cond);

	char rname[32]; /* "Metrics-reap" */
	snprintf_(rname, sizeof rname, "%s-reap", s->cfg.name);
	int trc = thread_start(&s->reaper, rname, reaper_main, s);
	if (trc != 0) {
		*err = xasprintf("cannot start the %s http reaper thread: %s", s->cfg.name,
				 strerror(trc));
		http_server_stop(s);
		return -1;
	}
	s->reaping = true;

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

	char tname[32]; /* "Metrics-retry": thread_start keeps 15 bytes */
	snprintf_(tname, sizeof tname, "%s-retry", s->cfg.name);
	int rc = thread_start(&s->retry_thread, tname, retry_main, s);
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
	if (s->reaping) { /* after MHD: no connection is left to watch */
		pthread_mutex_lock(&s->conn_mu);
		s->reap_stop = true;
		pthread_cond_broadcast(&s->reap_cond);
		pthread_mutex_unlock(&s->conn_mu);
		pthread_join(s->reaper, NULL);
	}
	pthread_cond_destroy(&s->reap_cond);
	pthread_mutex_destroy(&s->conn_mu);
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->mu);
	pthread_mutex_destroy(&s->body_mu);
	free(s->addr);
	free(s);
}

void http_server_stats(struct http_server *s, struct http_server_stats *out)
{
	*out = (struct http_server_stats){0};
	if (!s)
		return;
	pthread_mutex_lock(&s->body_mu);
	*out = s->stats;
	pthread_mutex_unlock(&s->body_mu);
}
