/*
 * Docker Engine API client over HTTP/1.1 (libcurl).
 *
 * The daemon is named by DOCKER_HOST: unix:///path (default
 * unix:///var/run/docker.sock) or tcp://host:port, with TLS when
 * DOCKER_TLS_VERIFY is set to a non-empty value other than "0" (certificates
 * ca.pem, cert.pem, key.pem from DOCKER_CERT_PATH, default ~/.docker).
 * DOCKER_API_VERSION pins the API version; otherwise docker_open() negotiates
 * it with GET /version (the lower of the daemon's ApiVersion and the newest
 * version Relay speaks).
 *
 * A struct docker is one connection handle: not thread-safe, each thread
 * opens its own. Errors are returned as negative values with the message in
 * docker_errmsg(); an error answered by the daemon carries the daemon's own
 * message verbatim (the "message" field of its JSON error body), except
 * HTTP 403, which is what a Docker socket proxy answers for a request its
 * allow-list does not permit: that message is docker_forbidden_message().
 */
#ifndef RELAY_DOCKER_H
#define RELAY_DOCKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct docker;

/* Newest Engine API version Relay is written against. */
#define DOCKER_API_MAX "1.41"

/* Maximum size of a buffered response body (a JSON reply). */
#define DOCKER_BODY_MAX (8u * 1024 * 1024)

/* Bound on docker_open() as a whole: its one request (GET /version),
 * connecting included. The runner's time bounds count on it (runner.h). */
#define DOCKER_OPEN_TIMEOUT_MS 10000L

/* Parses the environment and negotiates the API version (GET /version).
 * On failure returns -1 and, when errp is not NULL, sets *errp to a
 * malloc'd message (caller frees); *out is NULL then. */
int docker_open(struct docker **out, char **errp);
void docker_close(struct docker *d);

/* Human-readable name of the endpoint ("unix:///var/run/docker.sock"). */
const char *docker_endpoint(const struct docker *d);
/* Negotiated API version, e.g. "1.41". */
const char *docker_api_version(const struct docker *d);
/* The last error message on this handle (never NULL). */
const char *docker_errmsg(const struct docker *d);

/* Addition: true when the last docker_request()/docker_request_stream()
 * on d failed before a connection to the daemon was made, so the request
 * cannot have reached it (refused, no socket, connect timeout). False after
 * any other outcome: a failure after connecting may have been acted on. */
bool docker_request_unsent(const struct docker *d);

/* Addition: true when the last docker_request(), docker_request_stream()
 * or docker_hijack() on d got no HTTP answer from the daemon: it could not
 * connect, the connection broke, or the time ran out first. Together with
 * docker_request_unsent() this tells "the daemon is unreachable" from an
 * answer that refused the request. */
bool docker_no_answer(const struct docker *d);

/* Addition: true when the last request on d (docker_request(),
 * docker_request_stream(), docker_ping() or docker_hijack()) was answered
 * HTTP 403, most likely by a socket proxy's allow-list; docker_errmsg()
 * then names the request (docker_forbidden_message()). */
bool docker_request_denied(const struct docker *d);

/* GET /_ping; 0 when the daemon answers "OK". */
int docker_ping(struct docker *d);

/* Whether name (a RELAY_OCI_RUNTIME value, [A-Za-z0-9._-]) is one of the
 * runtimes the daemon reports in GET /info "Runtimes". 0, or -1 with *errp
 * (malloc'd): the request failed, or name is unknown: "RELAY_OCI_RUNTIME
 * \"x\" is not a runtime of the Docker daemon (it has: a, b)", the daemon's
 * names sorted and escaped. */
int docker_check_runtime(struct docker *d, const char *name, char **errp);

struct docker_response {
	long status; /* HTTP status */
	char *body;  /* NUL-terminated, malloc'd; may be "" */
	size_t len;
};
void docker_response_free(struct docker_response *r);

/*
 * One buffered request. path is relative to the version prefix
 * ("/containers/create?name=x"); body may be NULL. content_type defaults to
 * application/json when a body is given. Returns 0 when the daemon answered
 * (any status, see resp->status; for status >= 400 docker_errmsg() holds the
 * daemon's message), -1 on a transport error. timeout_ms 0 = no timeout.
 */
int docker_request(struct docker *d, const char *method, const char *path, const void *body,
		   size_t body_len, const char *content_type, long timeout_ms,
		   struct docker_response *resp);

/*
 * Streaming request: the body is delivered in chunks to on_data as it
 * arrives (on_data returns 0 to continue, non-zero to abort). Used for
 * POST /build and other JSON-stream endpoints. A request body larger than
 * memory can be supplied through body/body_len (it is sent as is).
 * Returns 0 when the daemon answered (status in *status), -1 on a transport
 * error or an abort by the callback.
 * When the daemon answers with status >= 400 the body is an error document,
 * not stream data: it is not passed to on_data; docker_errmsg() holds the
 * daemon's message instead (as for docker_request). Chunks passed to on_data
 * are valid only during the call.
 */
typedef int (*docker_data_fn)(const char *data, size_t len, void *ctx);
int docker_request_stream(struct docker *d, const char *method, const char *path, const void *body,
			  size_t body_len, const char *content_type, long timeout_ms,
			  docker_data_fn on_data, void *ctx, long *status);

/*
 * Hijacked connection (POST /containers/{id}/attach with Upgrade: tcp).
 * After docker_hijack() succeeds the connection carries raw stream data:
 * docker_conn_write() sends stdin, docker_conn_close_write() half-closes
 * (the container sees EOF on stdin), docker_conn_read() reads the
 * multiplexed stdout/stderr frames, waiting at most timeout_ms
 * (returns bytes read, 0 at EOF, -1 on error, DOCKER_CONN_TIMEOUT when
 * timeout_ms passed; a negative timeout_ms waits without limit, 0 only
 * takes what is already there).
 *
 * docker_hijack() opens its own connection (the handle d is only borrowed
 * for its settings and its error message: on failure it returns -1 with the
 * message in docker_errmsg(d)); the connection outlives nothing of d and may
 * be used from another thread than d, but one connection from one thread at
 * a time. The attach must be made before the container is started, or early
 * output is lost. docker_conn_write() blocks until everything is sent
 * (0 or -1). All memory is released by docker_conn_free().
 */
struct docker_conn;
/* What docker_conn_read() and docker_conn_write_timeout() return when their
 * time ran out. */
#define DOCKER_CONN_TIMEOUT (-2)
int docker_hijack(struct docker *d, const char *path, struct docker_conn **out);
int docker_conn_write(struct docker_conn *c, const void *p, size_t n);
int docker_conn_close_write(struct docker_conn *c);
long docker_conn_read(struct docker_conn *c, void *p, size_t n, int timeout_ms);
void docker_conn_free(struct docker_conn *c);

/* Addition: docker_hijack() with a bound on the whole exchange (connect,
 * request, upgrade answer) of timeout_ms (> 0; docker_hijack() uses 30 s).
 * Returns -1 with a "timed out" message in docker_errmsg(d) when it passed. */
int docker_hijack_timeout(struct docker *d, const char *path, long timeout_ms,
			  struct docker_conn **out);

/* Addition: docker_conn_write() with a bound: waits at most timeout_ms for
 * the daemon to accept more bytes (negative = no limit). Returns 0, -1 on
 * error, DOCKER_CONN_TIMEOUT when it passed (some bytes may have been sent;
 * the stream is then unusable for stdin, close it). A writer that never
 * times out can deadlock against a container that writes output before
 * reading stdin. */
int docker_conn_write_timeout(struct docker_conn *c, const void *p, size_t n, int timeout_ms);
/* Addition: the last error message on this connection (never NULL). */
const char *docker_conn_errmsg(const struct docker_conn *c);

/* Addition (standby containers): without reading or blocking, 1 when the
 * peer has closed its side (or the socket failed), or, with data_too, when
 * anything at all is waiting to be read; 0 otherwise. */
int docker_conn_hung_up(const struct docker_conn *c, bool data_too);

/* Addition: POST /containers/{id}/update {"NanoCpus": nano_cpus}: the
 * container's CPU quota, in billionths of a CPU (as NanoCpus at create:
 * nano_cpus * 100 ms / 1e9 of CPU time every 100 ms), changed in place,
 * running or not; the daemon has written its cgroup when it answers. The
 * container must have been created with NanoCpus (the daemon refuses a
 * switch from CpuQuota). Within timeout_ms (at least 1 ms; never "no
 * timeout"). 0 on HTTP 200, else -1 with the message in docker_errmsg()
 * (the daemon's own for an error answer; docker_no_answer() and
 * docker_request_denied() as for docker_request). */
int docker_update_cpus(struct docker *d, const char *id, int64_t nano_cpus, long timeout_ms);

/* ---- Exposed for tests (pure parsing, no I/O) ------------------------- */

/* Default daemon address when DOCKER_HOST is unset or empty. */
#define DOCKER_DEFAULT_HOST "unix:///var/run/docker.sock"

enum docker_transport { DOCKER_TRANSPORT_UNIX, DOCKER_TRANSPORT_TCP };

struct docker_host {
	enum docker_transport transport;
	char *path;    /* unix: socket path (malloc'd), else NULL */
	char *host;    /* tcp: host name or address, IPv6 without brackets */
	unsigned port; /* tcp: 1..65535 */
};

/*
 * Parses a DOCKER_HOST value (NULL or "" = DOCKER_DEFAULT_HOST):
 * unix:///path, tcp://host:port or http://host:port (same as tcp://), an
 * IPv6 host in brackets, an optional trailing "/". The port is required.
 * Returns 0 and fills *out (release with docker_host_clear), or -1 with a
 * malloc'd message naming DOCKER_HOST and the value in *errp.
 */
int docker_host_parse(const char *value, struct docker_host *out, char **errp);
void docker_host_clear(struct docker_host *h);

/* 1 when v looks like an API version "N.NN" (digits, one dot, digits). */
int docker_version_valid(const char *v);
/* Compares two valid versions numerically (1.9 < 1.10): <0, 0, >0. */
int docker_version_cmp(const char *a, const char *b);

/*
 * Picks the API version from a GET /version reply: the lower of its
 * "ApiVersion" and max, refused when the daemon's "MinAPIVersion" is above
 * that. Writes the version to out (size outsz) and returns 0, or -1 with a
 * malloc'd message in *errp.
 */
int docker_negotiate_version(const char *body, size_t len, const char *max, char *out, size_t outsz,
			     char **errp);

/*
 * The message for an error answer: the "message" field of a JSON body
 * verbatim when there is one, else "HTTP <status>: <first line of the
 * body>" (cut at 200 bytes), else "HTTP <status>". Returns a malloc'd string.
 */
char *docker_error_message(long status, const char *body, size_t len);

/* s percent-encoded for a query string (a list call's filters JSON):
 * unreserved characters as they are, every other byte %XX; malloc'd, at
 * most 16 KiB (what is past it is left out). */
char *docker_query_encode(const char *s);

/*
 * What a tecnativa/docker-socket-proxy would need to let method path
 * through (path with or without the /vX.Y prefix, query allowed): "IMAGES=1"
 * for a read, "BUILD=1 and POST=1" for a write, "EXEC=1 and POST=1" for
 * /containers/{id}/exec, "POST=1" for a write to a path in no section.
 * NULL for a read of a path in no section. Malloc'd.
 */
char *docker_proxy_allowance(const char *method, const char *path);

/*
 * The one-line message for an HTTP 403 answer to method path at endpoint:
 *   Docker API request POST /v1.41/build to tcp://proxy:2375 refused with
 *   HTTP 403, probably by a Docker socket proxy (allowing it takes BUILD=1
 *   and POST=1)
 * The query is left out. When body is JSON with a "message" (a daemon's
 * own refusal, e.g. an authorization plugin), its first line follows after
 * ": ". Malloc'd.
 */
char *docker_forbidden_message(const char *endpoint, const char *method, const char *path,
			       const char *body, size_t len);

#endif
