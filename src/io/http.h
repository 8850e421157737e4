/*
 * Relay's small HTTP server glue over libmicrohttpd, shared by the metrics
 * endpoint and the GitHub webhook.
 *
 * Relay creates the listening socket itself (so it controls address parsing,
 * resolution, IPv6 and bind errors) and hands it to MHD, which then runs an
 * internal polling thread plus one thread per connection. A slow or stalled
 * client therefore only ever occupies its own thread, never the caller's or
 * another client's. Every server thread has all signals blocked.
 *
 * Bounds on what a client can make a server hold (enforced in http.c):
 *  - connections: connection_limit at once, at most per_ip_limit of them
 *    from one client address (more are closed as soon as accepted), each
 *    closed after timeout_seconds without traffic; MHD's own
 *    per-connection pool (32 KiB) bounds the request line and headers;
 *  - time for the request line and headers: header_timeout_seconds from
 *    the accept (for a kept-alive connection's next request, from the end
 *    of the previous one), however the client paces them; past it the
 *    connection is closed. Without it, one byte every few seconds resets
 *    the idle timeout forever and a few dozen such clients hold every
 *    slot (slowloris);
 *  - one request body: max_body bytes (413: before any of it is read when
 *    Content-Length says so, else once it is passed, discarding the rest);
 *  - all bodies together: body_budget bytes of buffer (allocated capacity,
 *    counted across connections). A request whose Content-Length does not
 *    fit in what is left gets 503 before its body is read; a body growing
 *    past it mid-way (no Content-Length, or others grew first) has its
 *    connection closed (a response cannot be sent while MHD is receiving
 *    the body);
 *  - time for a body: body_timeout_seconds from the end of the headers to
 *    the end of the body, however the client paces it (trickling one byte
 *    a second would otherwise reset the idle timeout forever); past it the
 *    connection is closed.
 * http_server_stats reports what is buffered and what was refused.
 *
 * Listen addresses are Go's forms: ":9090" (every interface, IPv6 and IPv4),
 * "127.0.0.1:9090", "[::1]:9090", "host:9090" (resolved with getaddrinfo;
 * the first address that binds wins). Port 0 picks an ephemeral port.
 * http_parse_listen_addr is the one parser of that form: config.c validates
 * METRICS_ADDR and GIT_WEBHOOK_ADDR with it, so what configuration accepts
 * is exactly what a server can be started on.
 */
#ifndef RELAY_HTTP_H
#define RELAY_HTTP_H

#include <stdbool.h>
#include <stddef.h>

/* A request as the handler sees it. Everything is borrowed and valid only
 * during the handler call. */
struct http_request {
	const char *method; /* "GET", "POST", ... */
	const char *path;   /* without the query string */
	const char *body;   /* NUL-terminated; "" when there is none */
	size_t body_len;
	void *conn_; /* private: for http_request_header */
};

/* Value of a request header (case-insensitive name), or NULL. Borrowed. */
const char *http_request_header(const struct http_request *req, const char *name);

#define HTTP_MAX_RESPONSE_HEADERS 8

/* The handler fills this in. Strings set through the helpers are copied. */
struct http_response {
	int status; /* default 200 */
	char *body; /* malloc'd, owned by http.c once the handler returns */
	size_t body_len;
	char *header_names[HTTP_MAX_RESPONSE_HEADERS];
	char *header_values[HTTP_MAX_RESPONSE_HEADERS];
	size_t nheaders;
};

/* Adds a response header (copied; beyond HTTP_MAX_RESPONSE_HEADERS it is
 * dropped). */
void http_response_header(struct http_response *resp, const char *name, const char *value);
/* Sets status, Content-Type and a copy of text as the body. */
void http_response_text(struct http_response *resp, int status, const char *content_type,
			const char *text);
/* Sets the body, taking ownership of body (malloc'd). */
void http_response_take_body(struct http_response *resp, char *body, size_t len);

struct http_server_config {
	const char *name;	 /* for logs: "Metrics" → "Metrics http server ..." */
	const char *listen_addr; /* copied */
	/* Runs on a server thread, possibly several at once. Fills resp. */
	void (*handler)(const struct http_request *req, struct http_response *resp, void *arg);
	void *arg;
	/* Bounds; 0 means the HTTP_DEFAULT_* below. */
	size_t max_body;		 /* larger bodies get 413 */
	size_t body_budget;		 /* all buffered bodies; default 2 * max_body */
	unsigned connection_limit;	 /* connections at once */
	unsigned per_ip_limit;		 /* of them from one client address */
	unsigned timeout_seconds;	 /* idle connection timeout */
	unsigned header_timeout_seconds; /* accept to end of headers */
	unsigned body_timeout_seconds;	 /* headers to end of body */
	/* When true a bind/resolve failure is logged (WARN) and retried in the
	 * background every retry_interval_ms and start returns 0; when false
	 * start fails with the error. */
	bool retry_bind;
	unsigned retry_interval_ms;
};

#define HTTP_DEFAULT_MAX_BODY (1u << 20) /* 1 MiB */
#define HTTP_DEFAULT_CONNECTION_LIMIT 128
#define HTTP_DEFAULT_PER_IP_LIMIT 16
#define HTTP_DEFAULT_TIMEOUT_SECONDS 10
#define HTTP_DEFAULT_HEADER_TIMEOUT_SECONDS 5
#define HTTP_DEFAULT_BODY_TIMEOUT_SECONDS 10
#define HTTP_DEFAULT_RETRY_INTERVAL_MS 2000

struct http_server;

/* A listen address's host part is shorter than this (a longer one is
 * refused); every caller passes a buffer of this size, so all agree. */
#define HTTP_LISTEN_HOST_MAX 256

/* Parses "host:port" forms into host (without brackets, "" for any) and port.
 * The host is an IPv6 address in brackets, or else ASCII letters, digits,
 * '.', '-' and '_' (possibly none); the port 1 to 5 ASCII digits, at most
 * 65535. Returns 0, or -1 when malformed (addr NULL included), host and
 * *port then unspecified. host_size bounds host: HTTP_LISTEN_HOST_MAX.
 * Pure; any thread. */
int http_parse_listen_addr(const char *addr, char *host, size_t host_size, unsigned *port);

/* Starts a server; on success *out owns it (free with http_server_stop).
 * Returns 0, or -1 with *err set (malloc'd message) for a malformed address,
 * or, without retry_bind, a resolve/bind/MHD failure. */
int http_server_start(const struct http_server_config *cfg, struct http_server **out, char **err);

/* The bound port, or 0 while not listening (still retrying). Thread-safe. */
int http_server_port(struct http_server *s);

struct http_server_stats {
	size_t body_bytes;		/* body buffer allocated now, all connections */
	size_t body_bytes_peak;		/* the most ever allocated at once */
	unsigned long over_budget;	/* requests refused (503) or cut: body_budget */
	unsigned long too_slow;		/* requests cut at body_timeout_seconds */
	unsigned long too_slow_headers; /* cut at header_timeout_seconds */
	unsigned long too_large;	/* 413s */
};

/* A snapshot of the counters above. Thread-safe. */
void http_server_stats(struct http_server *s, struct http_server_stats *out);

/* Stops retrying, closes the listening socket and every connection after
 * in-flight handlers return, joins all threads and frees s. NULL is a no-op. */
void http_server_stop(struct http_server *s);

#endif
