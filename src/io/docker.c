/*
 * Docker Engine API client over libcurl. This file: the handle (DOCKER_HOST
 * parsing, TLS files, the version probe), buffered and streaming requests,
 * daemon error bodies and refusals. The hijacked connections are in
 * docker_conn.c; what the two share is in docker_internal.h.
 *
 * Design notes
 *
 * - One CURL easy handle per struct docker, reused for every buffered and
 *   streaming request: curl keeps the connection alive between requests, so
 *   a burst of create/start/wait/remove calls costs one connect. Each request
 *   starts with curl_easy_reset(), which clears options but keeps the
 *   connection cache, so no option leaks from one request into the next.
 *
 * - A hijacked attach stream (docker_conn.c) needs the raw socket after the HTTP upgrade,
 *   which curl's HTTP layer cannot hand over. It therefore gets its own easy
 *   handle with CURLOPT_CONNECT_ONLY: curl only connects (unix socket, TCP,
 *   or TCP + TLS handshake) and we speak HTTP ourselves through
 *   curl_easy_send/curl_easy_recv, which keeps TLS transparent. Half-closing
 *   stdin is shutdown(SHUT_WR) on the active socket, after a TLS
 *   close_notify under TLS (curl hands out its OpenSSL handle for that):
 *   the daemon's Go TLS would take the TCP FIN alone as EOF, but a TLS
 *   terminator on OpenSSL in front of it takes that for a fatal error.
 *
 * - Proxies are disabled (CURLOPT_PROXY ""): curl would otherwise honour
 *   http_proxy/HTTPS_PROXY from the environment and send Engine API calls
 *   (and the attach upgrade, which no proxy forwards) through them. The
 *   daemon is a local or internal-network endpoint.
 *
 * - curl_global_init() is not thread-safe and must run once per process:
 *   pthread_once guards it. curl_global_cleanup() is never called; the
 *   process keeps curl for its whole life.
 *
 * Every response body is read into a capped buffer (DOCKER_BODY_MAX); error
 * bodies read on the hijack and streaming paths have a smaller cap since
 * they only carry a short JSON message.
 */
#include "io/docker.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/un.h>

#include <curl/curl.h>
#include <jansson.h>

#include "base/log.h"
#include "base/util.h"
#include "io/docker_internal.h"

/* GET /version and GET /_ping answer at once on a live daemon. docker_open
 * makes one such request, so this is its whole bound (docker.h). */
#define PROBE_TIMEOUT_MS DOCKER_OPEN_TIMEOUT_MS

/* ---- process-wide curl init ------------------------------------------- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_FAILED_INIT;

static void curl_init_once(void)
{
	curl_init_rc = curl_global_init(CURL_GLOBAL_ALL);
}

/* ---- small helpers ---------------------------------------------------- */

void docker_set_err(struct docker *d, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *msg = xvasprintf(fmt, ap);
	va_end(ap);
	free(d->err);
	d->err = msg;
}

static char *errp_set(char **errp, char *msg)
{
	if (errp)
		*errp = msg;
	else
		free(msg);
	return NULL;
}

/* Request targets go into a URL and, for the hijack, straight into the
 * request line: refuse anything that could break either. */
bool docker_path_ok(const char *path)
{
	if (!path || path[0] != '/')
		return false;
	for (const unsigned char *p = (const unsigned char *)path; *p; p++)
		if (*p <= 0x20 || *p >= 0x7f)
			return false;
	return true;
}

static bool method_is(const char *method, const char *want)
{
	return strcmp(method, want) == 0;
}

/* ---- exposed for tests: DOCKER_HOST ------------------------------------ */

void docker_host_clear(struct docker_host *h)
{
	free(h->path);
	free(h->host);
	h->path = h->host = NULL;
	h->port = 0;
}

static int host_fail(char **errp, const char *value, const char *why)
{
	errp_set(errp, xasprintf("invalid DOCKER_HOST \"%s\": %s", value, why));
	return -1;
}

static bool host_char_ok(char ch)
{
	return isalnum((unsigned char)ch) || ch == '.' || ch == '-' || ch == '_';
}

/* "host:port" or "[v6]:port", optional trailing "/". */
static int parse_tcp(const char *value, const char *addr, struct docker_host *out, char **errp)
{
	size_t len = strlen(addr);
	if (len && addr[len - 1] == '/')
		len--;
	if (len == 0)
		return host_fail(errp, value, "missing host and port (want tcp://host:port)");
	if (memchr(addr, '/', len))
		return host_fail(errp, value, "a path after host:port is not supported");

	const char *host, *colon;
	size_t host_len;
	bool v6 = addr[0] == '[';
	if (v6) {
		const char *close = memchr(addr, ']', len);
		if (!close)
			return host_fail(errp, value, "unterminated [ in IPv6 address");
		host = addr + 1;
		host_len = (size_t)(close - host);
		colon = close + 1 < addr + len && close[1] == ':' ? close + 1 : NULL;
		if (!colon && close + 1 != addr + len)
			return host_fail(errp, value, "unexpected text after ]");
	} else {
		colon = memrchr(addr, ':', len);
		host = addr;
		host_len = colon ? (size_t)(colon - addr) : len;
	}
	if (!colon || colon + 1 == addr + len)
		return host_fail(errp, value, "missing port (want tcp://host:port)");
	if (host_len == 0)
		return host_fail(errp, value, "missing host (want tcp://host:port)");
	for (size_t i = 0; i < host_len; i++) {
		/* An IPv6 literal also has ':' (and '%' for a zone, which curl
		 * wants encoded: leave zones out). */
		if (host_char_ok(host[i]) || (v6 && host[i] == ':'))
			continue;
		return host_fail(errp, value,
				 v6 || host[i] != ':' ? "invalid character in host"
						      : "IPv6 addresses must be in brackets");
	}

	unsigned port = 0;
	for (const char *p = colon + 1; p < addr + len; p++) {
		if (!isdigit((unsigned char)*p) || port > 65535)
			return host_fail(errp, value, "port must be a number from 1 to 65535");
		port = port * 10 + (unsigned)(*p - '0');
	}
	if (port == 0 || port > 65535)
		return host_fail(errp, value, "port must be a number from 1 to 65535");

	out->transport = DOCKER_TRANSPORT_TCP;
	out->host = xstrndup(host, host_len);
	out->port = port;
	return 0;
}

int docker_host_parse(const char *value, struct docker_host *out, char **errp)
{
	memset(out, 0, sizeof *out);
	if (errp)
		*errp = NULL;
	if (!value || !*value)
		value = DOCKER_DEFAULT_HOST;

	const char *sep = strstr(value, "://");
	if (!sep)
		return host_fail(errp, value,
				 "missing scheme (want unix:///path/to/socket or tcp://host:port)");
	size_t scheme_len = (size_t)(sep - value);
	const char *rest = sep + 3;

	if (scheme_len == 4 && strncasecmp(value, "unix", 4) == 0) {
		if (!*rest)
			return host_fail(errp, value, "missing socket path");
		/* sun_path holds 108 bytes including the NUL; curl would fail
		 * with a vaguer message. */
		if (strlen(rest) >= sizeof(((struct sockaddr_un *)0)->sun_path))
			return host_fail(errp, value, "socket path too long");
		out->transport = DOCKER_TRANSPORT_UNIX;
		out->path = xstrdup(rest);
		return 0;
	}
	/* The moby client dials http:// like tcp://. */
	if ((scheme_len == 3 && strncasecmp(value, "tcp", 3) == 0) ||
	    (scheme_len == 4 && strncasecmp(value, "http", 4) == 0))
		return parse_tcp(value, rest, out, errp);
	if (scheme_len == 5 && strncasecmp(value, "https", 5) == 0)
		return host_fail(errp, value,
				 "use tcp://host:port with DOCKER_TLS_VERIFY=1 for TLS");

	char *why = xasprintf("unsupported scheme \"%.*s\" (want unix:// or tcp://)",
			      (int)scheme_len, value);
	host_fail(errp, value, why);
	free(why);
	return -1;
}

/* ---- exposed for tests: versions --------------------------------------- */

/* Splits "N.NN" into numbers; -1 unless it is exactly that shape. Five
 * digits per part are more than any API version needs and keep the
 * arithmetic far from overflow. */
static int version_split(const char *v, unsigned *major, unsigned *minor)
{
	unsigned part[2] = {0, 0};
	const char *p = v;
	if (!p)
		return -1;
	for (int i = 0; i < 2; i++) {
		int digits = 0;
		while (isdigit((unsigned char)*p)) {
			if (++digits > 5)
				return -1;
			part[i] = part[i] * 10 + (unsigned)(*p++ - '0');
		}
		if (digits == 0)
			return -1;
		if (i == 0 && *p++ != '.')
			return -1;
	}
	if (*p)
		return -1;
	*major = part[0];
	*minor = part[1];
	return 0;
}

int docker_version_valid(const char *v)
{
	unsigned a, b;
	return version_split(v, &a, &b) == 0;
}

int docker_version_cmp(const char *a, const char *b)
{
	unsigned amaj = 0, amin = 0, bmaj = 0, bmin = 0;
	version_split(a, &amaj, &amin);
	version_split(b, &bmaj, &bmin);
	if (amaj != bmaj)
		return amaj < bmaj ? -1 : 1;
	if (amin != bmin)
		return amin < bmin ? -1 : 1;
	return 0;
}

int docker_negotiate_version(const char *body, size_t len, const char *max, char *out, size_t outsz,
			     char **errp)
{
	int rc = -1;
	json_error_t jerr;
	if (errp)
		*errp = NULL;
	json_t *root = json_loadb(body, len, 0, &jerr);
	if (!root || !json_is_object(root)) {
		errp_set(errp, xasprintf("GET /version: reply is not a JSON object"));
		goto out;
	}
	const char *api = json_string_value(json_object_get(root, "ApiVersion"));
	if (!docker_version_valid(api)) {
		errp_set(errp, xasprintf("GET /version: reply has no valid ApiVersion"));
		goto out;
	}
	const char *pick = docker_version_cmp(api, max) < 0 ? api : max;
	/* A daemon newer than Relay may have dropped the versions Relay
	 * speaks (Engine 29 requires 1.44); say so up front rather than on
	 * the first real request. */
	const char *min = json_string_value(json_object_get(root, "MinAPIVersion"));
	if (docker_version_valid(min) && docker_version_cmp(min, pick) > 0) {
		errp_set(errp, xasprintf("Docker daemon requires API version %s or newer, "
					 "Relay speaks at most %s",
					 min, pick));
		goto out;
	}
	if (strlen(pick) >= outsz) {
		errp_set(errp, xasprintf("GET /version: API version \"%s\" too long", pick));
		goto out;
	}
	strlcpy_(out, pick, outsz);
	rc = 0;
out:
	json_decref(root);
	return rc;
}

/* ---- exposed for tests: daemon error bodies --------------------------- */

/* The first non-blank line of body, trimmed and cut at 200 bytes. */
const char *docker_first_line(const char *body, size_t len, size_t *n)
{
	size_t i = 0;
	while (i < len && isspace((unsigned char)body[i]))
		i++;
	size_t j = i;
	while (j < len && body[j] != '\n' && body[j] != '\r' && j - i < 200)
		j++;
	while (j > i && isspace((unsigned char)body[j - 1]))
		j--;
	*n = j - i;
	return body + i;
}

/* The "message" field of a JSON error body (malloc'd), or NULL. */
static char *json_message(const char *body, size_t len)
{
	json_error_t jerr;
	json_t *root = len ? json_loadb(body, len, 0, &jerr) : NULL;
	const char *m = json_string_value(json_object_get(root, "message"));
	char *msg = m && *m ? xstrdup(m) : NULL;
	json_decref(root);
	return msg;
}

char *docker_error_message(long status, const char *body, size_t len)
{
	char *msg = json_message(body, len);
	if (msg)
		return msg;
	/* Not the daemon's JSON (a proxy's text or HTML page): its first
	 * non-blank line, bounded, is still the most useful thing to show. */
	size_t n;
	const char *line = docker_first_line(body, len, &n);
	if (n)
		return xasprintf("HTTP %ld: %.*s", status, (int)n, line);
	return xasprintf("HTTP %ld", status);
}

/* ---- exposed for tests: refusals (HTTP 403) ---------------------------- */

/* The sections of tecnativa/docker-socket-proxy's allow-list: a path's
 * first segment after the version prefix, and the variable allowing it. */
static const struct {
	const char *segment, *var;
} proxy_sections[] = {
	{"_ping", "PING"},
	{"auth", "AUTH"},
	{"build", "BUILD"},
	{"commit", "COMMIT"},
	{"configs", "CONFIGS"},
	{"containers", "CONTAINERS"},
	{"distribution", "DISTRIBUTION"},
	{"events", "EVENTS"},
	{"exec", "EXEC"},
	{"images", "IMAGES"},
	{"info", "INFO"},
	{"networks", "NETWORKS"},
	{"nodes", "NODES"},
	{"plugins", "PLUGINS"},
	{"secrets", "SECRETS"},
	{"services", "SERVICES"},
	{"session", "SESSION"},
	{"swarm", "SWARM"},
	{"system", "SYSTEM"},
	{"tasks", "TASKS"},
	{"version", "VERSION"},
	{"volumes", "VOLUMES"},
};

/* Length of the path segment at p (up to '/', '?' or the end). */
static size_t segment_len(const char *p)
{
	return strcspn(p, "/?");
}

static bool segment_is(const char *p, size_t n, const char *want)
{
	return strlen(want) == n && strncmp(p, want, n) == 0;
}

char *docker_proxy_allowance(const char *method, const char *path)
{
	const char *var = NULL;
	const char *p = path && path[0] == '/' ? path + 1 : "";
	/* The version prefix: "v1.41/". */
	size_t n = segment_len(p);
	if (n > 1 && p[0] == 'v' && p[n] == '/' && strspn(p + 1, "0123456789.") == n - 1)
		p += n + 1;
	n = segment_len(p);
	/* /containers/{id}/exec creates an exec instance: EXEC, not
	 * CONTAINERS. */
	if (segment_is(p, n, "containers") && p[n] == '/') {
		const char *id = p + n + 1;
		size_t idn = segment_len(id);
		if (idn && id[idn] == '/' &&
		    segment_is(id + idn + 1, segment_len(id + idn + 1), "exec"))
			var = "EXEC";
	}
	for (size_t i = 0; !var && i < ARRAY_LEN(proxy_sections); i++)
		if (segment_is(p, n, proxy_sections[i].segment))
			var = proxy_sections[i].var;
	bool write = !method_is(method, "GET") && !method_is(method, "HEAD");
	if (var && write)
		return xasprintf("%s=1 and POST=1", var);
	if (var)
		return xasprintf("%s=1", var);
	return write ? xstrdup("POST=1") : NULL;
}

char *docker_forbidden_message(const char *endpoint, const char *method, const char *path,
			       const char *body, size_t len)
{
	/* The query is left out: it only makes the line longer. */
	int path_len = (int)strcspn(path, "?");
	char *allow = docker_proxy_allowance(method, path);
	char *hint = allow ? xasprintf(" (allowing it takes %s)", allow) : xstrdup("");
	/* A daemon's own refusal (an authorization plugin) says why in its
	 * JSON message: keep its first line. A proxy's page says nothing
	 * more than the status. */
	char *said = json_message(body, len);
	size_t said_len = 0;
	const char *said_line = said ? docker_first_line(said, strlen(said), &said_len) : NULL;
	char *msg = xasprintf("Docker API request %s %.*s to %s refused with HTTP 403, probably "
			      "by a Docker socket proxy%s%s%.*s",
			      method, path_len, path, endpoint, hint, said_len ? ": " : "",
			      (int)said_len, said_line ? said_line : "");
	free(said);
	free(hint);
	free(allow);
	return msg;
}

/* ---- connection setup shared by both kinds of handle ------------------ */

/* Options every handle needs; called after each curl_easy_reset(). */
void docker_setup_common(const struct docker *d, CURL *h, char *errbuf)
{
	errbuf[0] = '\0';
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	/* Relay is multithreaded: no SIGALRM-based resolver timeouts. */
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
	curl_easy_setopt(h, CURLOPT_PROXY, "");
	curl_easy_setopt(h, CURLOPT_USERAGENT, "relay");
	if (d->host.transport == DOCKER_TRANSPORT_UNIX)
		curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, d->host.path);
	if (d->tls) {
		curl_easy_setopt(h, CURLOPT_CAINFO, d->ca);
		curl_easy_setopt(h, CURLOPT_SSLCERT, d->cert);
		curl_easy_setopt(h, CURLOPT_SSLKEY, d->key);
		curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
		curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
		/* Connections are kept alive, so resumption saves little, and
		 * some TLS terminators in front of a daemon (socat with client
		 * verification) reject resumed sessions outright. */
		curl_easy_setopt(h, CURLOPT_SSL_SESSIONID_CACHE, 0L);
	}
}

/* True for failures that happen before a request reaches the daemon. */
static bool connect_failure(CURL *h, CURLcode code)
{
	switch (code) {
	case CURLE_COULDNT_CONNECT:
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CACERT_BADFILE: return true;
	case CURLE_OPERATION_TIMEDOUT: {
		/* A connection reused from an earlier request reports a
		 * connect time of 0 too: only a request that sent nothing
		 * timed out connecting. */
		curl_off_t t = 0;
		long sent = 0;
		return curl_easy_getinfo(h, CURLINFO_CONNECT_TIME_T, &t) == CURLE_OK && t == 0 &&
		       curl_easy_getinfo(h, CURLINFO_REQUEST_SIZE, &sent) == CURLE_OK && sent == 0;
	}
	default: return false;
	}
}

/* The most specific description of a curl failure: the OS error for a
 * refused or missing socket, else curl's own detailed message. */
static char *curl_detail(CURL *h, CURLcode code, const char *errbuf)
{
	long os_errno = 0;
	curl_easy_getinfo(h, CURLINFO_OS_ERRNO, &os_errno);
	if (code == CURLE_COULDNT_CONNECT && os_errno > 0) {
		char tmp[128];
		return xstrdup(strerror_r((int)os_errno, tmp, sizeof tmp));
	}
	return xstrdup(errbuf[0] ? errbuf : curl_easy_strerror(code));
}

void docker_set_transport_err(struct docker *d, CURL *h, CURLcode code, const char *errbuf,
			      const char *method, const char *path)
{
	char *detail = curl_detail(h, code, errbuf);
	d->unsent = connect_failure(h, code);
	if (d->unsent)
		docker_set_err(d, "cannot connect to the Docker daemon at %s: %s", d->endpoint,
			       detail);
	else
		docker_set_err(d, "Docker request %s %s to %s failed: %s", method, path,
			       d->endpoint, detail);
	free(detail);
}

/* ---- buffered and streaming requests ---------------------------------- */

enum sink_mode { SINK_BUFFER, SINK_STREAM };

struct sink {
	enum sink_mode mode;
	CURL *curl;
	struct buf body; /* buffered body, or the error body in stream mode */
	bool overflow;	 /* body exceeded its cap */
	docker_data_fn on_data;
	void *ctx;
	bool aborted; /* on_data asked to stop */
};

static size_t sink_write(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct sink *s = userdata;
	size_t n = size * nmemb;
	if (s->mode == SINK_STREAM) {
		long status = 0;
		curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &status);
		/* An error answer is a JSON document for docker_errmsg(), not
		 * stream data for the caller. */
		if (status < 400) {
			if (s->on_data(ptr, n, s->ctx) != 0) {
				s->aborted = true;
				return 0;
			}
			return n;
		}
	}
	if (buf_append(&s->body, ptr, n) < 0) {
		s->overflow = true;
		return 0; /* makes curl fail with CURLE_WRITE_ERROR */
	}
	return n;
}

/* curl_slist_append returns NULL on failure and leaves the list alone. */
static bool slist_add(struct curl_slist **list, const char *s)
{
	struct curl_slist *n = curl_slist_append(*list, s);
	if (!n)
		return false;
	*list = n;
	return true;
}

/* The method, body and headers of one request, on a handle fresh from
 * docker_setup_common(). Returns 0, or -1 out of memory (*headers then holds what
 * was built, for the caller to free). */
static int set_request(CURL *h, const char *method, const void *body, size_t body_len,
		       const char *content_type, struct curl_slist **headers)
{
	if (body || method_is(method, "POST") || method_is(method, "PUT")) {
		/* POSTFIELDS does not copy: the caller's body is sent in place,
		 * and a NULL body still yields "Content-Length: 0", which the
		 * daemon's POST handlers expect. */
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body ? (const char *)body : "");
		if (!method_is(method, "POST"))
			curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	} else if (method_is(method, "HEAD")) {
		curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
	} else if (!method_is(method, "GET")) {
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	}
	if (body || content_type) {
		char *line = xasprintf("Content-Type: %s",
				       content_type ? content_type : "application/json");
		bool ok = slist_add(headers, line);
		free(line);
		if (!ok)
			return -1;
	}
	/* curl asks "Expect: 100-continue" for large bodies and then waits
	 * for an answer the daemon need not send; a build context should
	 * start flowing at once. */
	if (!slist_add(headers, "Expect:"))
		return -1;
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, *headers);
	return 0;
}

/* What curl_easy_perform's result means: 0 when the daemon answered
 * (for status >= 400 d->err becomes its message), -1 with d->err when it
 * did not, or the body overflowed, or the sink's caller aborted. */
static int perform_result(struct docker *d, CURLcode code, const char *method,
			  const char *full_path, const struct sink *s, long status)
{
	if (s->overflow) {
		docker_set_err(d, "Docker response to %s %s exceeds the %zu-byte limit", method,
			       full_path, s->body.max);
		return -1;
	}
	if (s->aborted) {
		docker_set_err(d, "Docker request %s %s aborted by the caller", method, full_path);
		return -1;
	}
	if (code != CURLE_OK) {
		docker_set_transport_err(d, d->curl, code, d->curl_err, method, full_path);
		return -1;
	}
	const char *body = s->body.data ? s->body.data : "";
	if (status == 403) {
		d->denied = true;
		free(d->err);
		d->err =
			docker_forbidden_message(d->endpoint, method, full_path, body, s->body.len);
	} else if (status >= 400) {
		char *msg = docker_error_message(status, body, s->body.len);
		free(d->err);
		d->err = msg;
	}
	return 0;
}

static void log_request(const char *method, const char *full_path, long status, int64_t start)
{
	if (!log_enabled(LOG_DEBUG))
		return;
	char st[24], ms[24];
	snprintf_(st, sizeof st, "%ld", status);
	snprintf_(ms, sizeof ms, "%" PRId64, (now_mono_ns() - start) / 1000000);
	log_debug(LOG_ATTRS("method", method, "path", full_path, "status", st, "ms", ms),
		  "docker request");
}

/*
 * Runs one request on d's handle. full_path already carries the version
 * prefix (or none, for /version and /_ping). Fills *status and leaves the
 * body (buffer mode, or error body in stream mode) in s->body. Returns 0
 * when the daemon answered, -1 with d->err set otherwise.
 */
static int perform(struct docker *d, const char *method, const char *full_path, const void *body,
		   size_t body_len, const char *content_type, long timeout_ms, struct sink *s,
		   long *status)
{
	int rc = -1;
	struct curl_slist *headers = NULL;
	char *url = NULL;
	int64_t start = now_mono_ns();
	*status = 0;
	d->unsent = false;
	d->denied = false;
	d->silent = false;

	if (!docker_path_ok(full_path)) {
		docker_set_err(d, "invalid Docker API path \"%s\"", full_path);
		goto out;
	}
	curl_easy_reset(d->curl);
	docker_setup_common(d, d->curl, d->curl_err);
	url = xasprintf("%s%s", d->base_url, full_path);
	curl_easy_setopt(d->curl, CURLOPT_URL, url);
	curl_easy_setopt(d->curl, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 0L);
	if (set_request(d->curl, method, body, body_len, content_type, &headers) < 0) {
		docker_set_err(d, "out of memory building a Docker request");
		goto out;
	}
	s->curl = d->curl;
	curl_easy_setopt(d->curl, CURLOPT_WRITEFUNCTION, sink_write);
	curl_easy_setopt(d->curl, CURLOPT_WRITEDATA, s);

	CURLcode code = curl_easy_perform(d->curl);
	curl_easy_getinfo(d->curl, CURLINFO_RESPONSE_CODE, status);
	rc = perform_result(d, code, method, full_path, s, *status);
	d->silent = rc < 0 && *status == 0;
out:
	log_request(method, full_path, *status, start);
	curl_slist_free_all(headers);
	free(url);
	/* The handle must not keep pointers into this frame or the caller's
	 * body beyond the call. */
	curl_easy_setopt(d->curl, CURLOPT_HTTPHEADER, NULL);
	curl_easy_setopt(d->curl, CURLOPT_WRITEDATA, NULL);
	curl_easy_setopt(d->curl, CURLOPT_POSTFIELDS, NULL);
	return rc;
}

void docker_response_free(struct docker_response *r)
{
	if (!r)
		return;
	free(r->body);
	r->body = NULL;
	r->len = 0;
	r->status = 0;
}

int docker_request(struct docker *d, const char *method, const char *path, const void *body,
		   size_t body_len, const char *content_type, long timeout_ms,
		   struct docker_response *resp)
{
	int rc = -1;
	struct sink s = {.mode = SINK_BUFFER};
	buf_init(&s.body, DOCKER_BODY_MAX);
	char *full = xasprintf("/v%s%s", d->version, path ? path : "");
	memset(resp, 0, sizeof *resp);

	if (perform(d, method, full, body, body_len, content_type, timeout_ms, &s, &resp->status) <
	    0)
		goto out;
	resp->len = s.body.len;
	resp->body = buf_steal(&s.body);
	rc = 0;
out:
	buf_free(&s.body);
	free(full);
	return rc;
}

int docker_request_stream(struct docker *d, const char *method, const char *path, const void *body,
			  size_t body_len, const char *content_type, long timeout_ms,
			  docker_data_fn on_data, void *ctx, long *status)
{
	struct sink s = {.mode = SINK_STREAM, .on_data = on_data, .ctx = ctx};
	buf_init(&s.body, ERROR_BODY_MAX);
	char *full = xasprintf("/v%s%s", d->version, path ? path : "");
	int rc = perform(d, method, full, body, body_len, content_type, timeout_ms, &s, status);
	buf_free(&s.body);
	free(full);
	return rc;
}

int docker_update_cpus(struct docker *d, const char *id, int64_t nano_cpus, long timeout_ms)
{
	if (!id || !*id || strlen(id) > 128 || strcspn(id, "/?#%") != strlen(id)) {
		docker_set_err(d, "updating a container: invalid container id");
		return -1;
	}
	if (timeout_ms <= 0)
		timeout_ms = 1; /* 0 would mean "no timeout" to docker_request */
	char body[64];
	snprintf_(body, sizeof body, "{\"NanoCpus\":%" PRId64 "}", nano_cpus);
	char *path = xasprintf("/containers/%s/update", id);
	struct docker_response r;
	int rc = docker_request(d, "POST", path, body, strlen(body), NULL, timeout_ms, &r);
	if (rc == 0 && r.status != 200) {
		/* d->err holds the daemon's message for >= 400. */
		if (r.status < 400)
			docker_set_err(
				d,
				"Docker daemon at %s answered POST /containers/%.12s/update with "
				"HTTP %ld",
				d->endpoint, id, r.status);
		rc = -1;
	}
	docker_response_free(&r);
	free(path);
	return rc;
}

/* qsort over char *. */
static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int docker_check_runtime(struct docker *d, const char *name, char **errp)
{
	*errp = NULL;
	struct docker_response r;
	if (docker_request(d, "GET", "/info", NULL, 0, NULL, 30000, &r) < 0 || r.status != 200) {
		*errp = xasprintf("cannot read the Docker daemon's runtimes (GET /info): %s",
				  docker_errmsg(d));
		docker_response_free(&r);
		return -1;
	}
	json_error_t jerr;
	json_t *root = json_loadb(r.body, r.len, 0, &jerr);
	docker_response_free(&r);
	json_t *rts = json_object_get(root, "Runtimes");
	if (!json_is_object(rts)) {
		json_decref(root);
		*errp = xstrdup("the Docker daemon's GET /info has no Runtimes object");
		return -1;
	}
	if (json_object_get(rts, name)) {
		json_decref(root);
		return 0;
	}
	/* The daemon's names, sorted, escaped (outside text), at most 32. */
	size_t n = 0;
	const char *k;
	json_t *v;
	const char *names[32];
	json_object_foreach(rts, k, v) {
		if (n < ARRAY_LEN(names))
			names[n++] = k;
	}
	qsort(names, n, sizeof names[0], cmp_str);
	struct buf b;
	buf_init(&b, 4096);
	for (size_t i = 0; i < n; i++) {
		if (i)
			buf_append(&b, ", ", 2);
		text_escape(&b, names[i], strlen(names[i]), 64, 0);
	}
	if (json_object_size(rts) > n)
		buf_append(&b, ", ...", 5);
	char *list = buf_steal(&b);
	*errp = xasprintf("RELAY_OCI_RUNTIME \"%s\" is not a runtime of the Docker daemon (it has: %s)",
			  name, list);
	free(list);
	json_decref(root);
	return -1;
}

int docker_ping(struct docker *d)
{
	int rc = -1;
	long status = 0;
	struct sink s = {.mode = SINK_BUFFER};
	buf_init(&s.body, ERROR_BODY_MAX);
	/* Unversioned: a ping must work whatever version was pinned. */
	if (perform(d, "GET", "/_ping", NULL, 0, NULL, PROBE_TIMEOUT_MS, &s, &status) < 0)
		goto out;
	if (status != 200) {
		/* d->err holds the daemon's message for >= 400. */
		if (status < 400)
			docker_set_err(d, "Docker daemon at %s answered GET /_ping with HTTP %ld",
				       d->endpoint, status);
		goto out;
	}
	if (!s.body.data || strcmp(s.body.data, "OK") != 0) {
		docker_set_err(d, "Docker daemon at %s answered GET /_ping with \"%.64s\", not OK",
			       d->endpoint, s.body.data ? s.body.data : "");
		goto out;
	}
	rc = 0;
out:
	buf_free(&s.body);
	return rc;
}

/* ---- open / close ----------------------------------------------------- */

static bool env_tls_verify(void)
{
	const char *v = getenv("DOCKER_TLS_VERIFY");
	return v && *v && strcmp(v, "0") != 0;
}

/* Resolves DOCKER_CERT_PATH (default ~/.docker) and checks the three files
 * are readable, so a missing file is named instead of a TLS failure. */
static int tls_files(struct docker *d, char **errp)
{
	int rc = -1;
	char *home_dir = NULL;
	const char *dir = getenv("DOCKER_CERT_PATH");
	if (!dir || !*dir) {
		const char *home = getenv("HOME");
		if (!home || !*home) {
			errp_set(errp, xasprintf("DOCKER_TLS_VERIFY is set but neither "
						 "DOCKER_CERT_PATH nor HOME is"));
			goto out;
		}
		home_dir = xasprintf("%s/.docker", home);
		dir = home_dir;
	}
	d->ca = xasprintf("%s/ca.pem", dir);
	d->cert = xasprintf("%s/cert.pem", dir);
	d->key = xasprintf("%s/key.pem", dir);
	const char *files[] = {d->ca, d->cert, d->key};
	for (size_t i = 0; i < ARRAY_LEN(files); i++) {
		if (access(files[i], R_OK) != 0) {
			char tmp[128];
			errp_set(errp, xasprintf("DOCKER_TLS_VERIFY is set but %s is not readable "
						 "(DOCKER_CERT_PATH): %s",
						 files[i], strerror_r(errno, tmp, sizeof tmp)));
			goto out;
		}
	}
	rc = 0;
out:
	free(home_dir);
	return rc;
}

/* d's endpoint and base URL from DOCKER_HOST and, over TCP only (as with
 * the docker CLI), DOCKER_TLS_VERIFY and its certificates. */
static int open_endpoint(struct docker *d, char **errp)
{
	if (docker_host_parse(getenv("DOCKER_HOST"), &d->host, errp) < 0)
		return -1;
	if (d->host.transport == DOCKER_TRANSPORT_UNIX) {
		d->endpoint = xasprintf("unix://%s", d->host.path);
		/* The authority is only the Host header over a unix socket. */
		d->base_url = xstrdup("http://docker");
		return 0;
	}
	d->tls = env_tls_verify();
	if (d->tls && tls_files(d, errp) < 0)
		return -1;
	bool v6 = strchr(d->host.host, ':') != NULL;
	d->endpoint = xasprintf(v6 ? "tcp://[%s]:%u" : "tcp://%s:%u", d->host.host, d->host.port);
	d->base_url = xasprintf(v6 ? "%s://[%s]:%u" : "%s://%s:%u", d->tls ? "https" : "http",
				d->host.host, d->host.port);
	return 0;
}

/* GET /version, asked even with a pinned version (pin, or NULL): it
 * doubles as the reachability check. Then the API version: the pin, or
 * negotiated from the answer. */
static int open_probe(struct docker *d, const char *pin, char **errp)
{
	int rc = -1;
	long status = 0;
	struct sink s = {.mode = SINK_BUFFER};
	buf_init(&s.body, DOCKER_BODY_MAX);
	if (perform(d, "GET", "/version", NULL, 0, NULL, PROBE_TIMEOUT_MS, &s, &status) < 0) {
		errp_set(errp, xstrdup(d->err));
		goto out;
	}
	if (status != 200) {
		/* For >= 400 d->err is the daemon's message (or "HTTP <n>: ..."
		 * when whatever answered was not a daemon). */
		if (status == 403) /* the message names the request and the endpoint */
			errp_set(errp, xstrdup(d->err));
		else if (status >= 400)
			errp_set(errp, xasprintf("Docker daemon at %s refused GET /version: %s",
						 d->endpoint, d->err));
		else
			errp_set(errp, xasprintf("Docker daemon at %s answered GET /version with "
						 "HTTP %ld",
						 d->endpoint, status));
		goto out;
	}
	if (pin) {
		strlcpy_(d->version, pin, sizeof d->version);
	} else {
		char *why = NULL;
		if (docker_negotiate_version(s.body.data, s.body.len, DOCKER_API_MAX, d->version,
					     sizeof d->version, &why) < 0) {
			errp_set(errp, xasprintf("Docker daemon at %s: %s", d->endpoint, why));
			free(why);
			goto out;
		}
	}
	rc = 0;
out:
	buf_free(&s.body);
	return rc;
}

int docker_open(struct docker **out, char **errp)
{
	struct docker *d = NULL;
	*out = NULL;
	if (errp)
		*errp = NULL;

	pthread_once(&curl_once, curl_init_once);
	if (curl_init_rc != CURLE_OK) {
		errp_set(errp, xasprintf("curl_global_init failed: %s",
					 curl_easy_strerror(curl_init_rc)));
		goto fail;
	}
	d = xcalloc(1, sizeof *d);
	if (open_endpoint(d, errp) < 0)
		goto fail;
	const char *pin = getenv("DOCKER_API_VERSION");
	if (pin && !*pin)
		pin = NULL;
	if (pin && !docker_version_valid(pin)) {
		errp_set(errp, xasprintf("invalid DOCKER_API_VERSION \"%s\": want a version "
					 "like %s",
					 pin, DOCKER_API_MAX));
		goto fail;
	}
	d->curl = curl_easy_init();
	if (!d->curl) {
		errp_set(errp, xstrdup("curl_easy_init failed"));
		goto fail;
	}
	if (open_probe(d, pin, errp) < 0)
		goto fail;
	log_debug(LOG_ATTRS("endpoint", d->endpoint, "api_version", d->version, "pinned",
			    pin ? "true" : "false"),
		  "connected to the Docker daemon");
	docker_set_err(d, "no error");
	*out = d;
	return 0;
fail:
	docker_close(d);
	return -1;
}

void docker_close(struct docker *d)
{
	if (!d)
		return;
	if (d->curl)
		curl_easy_cleanup(d->curl);
	docker_host_clear(&d->host);
	free(d->endpoint);
	free(d->base_url);
	free(d->ca);
	free(d->cert);
	free(d->key);
	free(d->err);
	free(d);
}

const char *docker_endpoint(const struct docker *d)
{
	return d->endpoint;
}

const char *docker_api_version(const struct docker *d)
{
	return d->version;
}

const char *docker_errmsg(const struct docker *d)
{
	return d->err ? d->err : "no error";
}

bool docker_request_unsent(const struct docker *d)
{
	return d->unsent;
}

bool docker_no_answer(const struct docker *d)
{
	return d->silent;
}

bool docker_request_denied(const struct docker *d)
{
	return d->denied;
}

char *docker_query_encode(const char *s)
{
	struct buf b;
	buf_init(&b, 16 * 1024);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		    (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' || *p == '.' || *p == '~')
			buf_append(&b, p, 1);
		else
			buf_appendf(&b, "%%%02X", *p);
	}
	return buf_steal(&b);
}
