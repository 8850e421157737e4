/* Unit tests for the pure parts of src/io/docker.c: DOCKER_HOST parsing,
 * API version checks and negotiation, daemon error messages, the message
 * for a refusal (HTTP 403) and the proxy variable it names, the failure
 * message of docker_open() for an unreachable daemon, and (against a fake
 * daemon on a unix socket) which failed requests may have reached it and
 * what a refusal of each kind of request reports. */
#include "io/docker.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/duration.h"
#include "t.h"
#include "base/util.h"

/* ---- DOCKER_HOST ------------------------------------------------------ */

static const struct {
	const char *value;
	enum docker_transport transport;
	const char *path_or_host;
	unsigned port;
} good_hosts[] = {
	{NULL, DOCKER_TRANSPORT_UNIX, "/var/run/docker.sock", 0},
	{"", DOCKER_TRANSPORT_UNIX, "/var/run/docker.sock", 0},
	{"unix:///var/run/docker.sock", DOCKER_TRANSPORT_UNIX, "/var/run/docker.sock", 0},
	{"unix:///tmp/x y.sock", DOCKER_TRANSPORT_UNIX, "/tmp/x y.sock", 0},
	{"UNIX:///run/d.sock", DOCKER_TRANSPORT_UNIX, "/run/d.sock", 0},
	{"tcp://127.0.0.1:2375", DOCKER_TRANSPORT_TCP, "127.0.0.1", 2375},
	{"tcp://socket-proxy:2375", DOCKER_TRANSPORT_TCP, "socket-proxy", 2375},
	{"tcp://socket-proxy:2375/", DOCKER_TRANSPORT_TCP, "socket-proxy", 2375},
	{"tcp://docker.example.com:2376", DOCKER_TRANSPORT_TCP, "docker.example.com", 2376},
	{"tcp://[::1]:2375", DOCKER_TRANSPORT_TCP, "::1", 2375},
	{"tcp://h:1", DOCKER_TRANSPORT_TCP, "h", 1},
	{"tcp://h:65535", DOCKER_TRANSPORT_TCP, "h", 65535},
	{"http://127.0.0.1:23750", DOCKER_TRANSPORT_TCP, "127.0.0.1", 23750},
};

TEST(host_good)
{
	for (size_t i = 0; i < ARRAY_LEN(good_hosts); i++) {
		struct docker_host h;
		char *err = NULL;
		int rc = docker_host_parse(good_hosts[i].value, &h, &err);
		CHECK_INT(rc, 0);
		if (rc != 0) {
			printf("    value %s: %s\n", good_hosts[i].value, err ? err : "");
			free(err);
			continue;
		}
		CHECK(err == NULL);
		CHECK_INT(h.transport, good_hosts[i].transport);
		if (h.transport == DOCKER_TRANSPORT_UNIX) {
			CHECK_STR(h.path, good_hosts[i].path_or_host);
			CHECK(h.host == NULL);
		} else {
			CHECK_STR(h.host, good_hosts[i].path_or_host);
			CHECK_INT(h.port, good_hosts[i].port);
			CHECK(h.path == NULL);
		}
		docker_host_clear(&h);
	}
}

/* Each bad value must fail with a message naming DOCKER_HOST, the value,
 * and the reason. */
static const struct {
	const char *value;
	const char *reason;
} bad_hosts[] = {
	{"/var/run/docker.sock", "missing scheme"},
	{"localhost:2375", "missing scheme"},
	{"ssh://user@host", "unsupported scheme \"ssh\""},
	{"npipe:////./pipe/docker_engine", "unsupported scheme \"npipe\""},
	{"fd://", "unsupported scheme \"fd\""},
	{"https://h:2376", "DOCKER_TLS_VERIFY"},
	{"unix://", "missing socket path"},
	{"tcp://", "missing host and port"},
	{"tcp://host", "missing port"},
	{"tcp://host:", "missing port"},
	{"tcp://:2375", "missing host"},
	{"tcp://host:0", "port must be"},
	{"tcp://host:65536", "port must be"},
	{"tcp://host:99999999999", "port must be"},
	{"tcp://host:23x", "port must be"},
	{"tcp://host:-1", "port must be"},
	{"tcp://host:2375/base", "path"},
	{"tcp://user@host:2375", "invalid character"},
	{"tcp://h?x=1:2375", "invalid character"},
	{"tcp://::1:2375", "IPv6 addresses must be in brackets"},
	{"tcp://[::1:2375", "unterminated ["},
	{"tcp://[::1]", "missing port"},
	{"tcp://[::1]x:2375", "unexpected text"},
	{"unix:///"
	 "0123456789012345678901234567890123456789012345678901234567890123456789"
	 "0123456789012345678901234567890123456789.sock",
	 "too long"},
};

TEST(host_bad)
{
	for (size_t i = 0; i < ARRAY_LEN(bad_hosts); i++) {
		struct docker_host h;
		char *err = NULL;
		int rc = docker_host_parse(bad_hosts[i].value, &h, &err);
		CHECK_INT(rc, -1);
		REQUIRE(err != NULL);
		char *want_prefix = NULL;
		size_t n = strlen("invalid DOCKER_HOST \"") + strlen(bad_hosts[i].value) + 2;
		want_prefix = malloc(n + 1);
		snprintf(want_prefix, n + 1, "invalid DOCKER_HOST \"%s\"", bad_hosts[i].value);
		if (strncmp(err, want_prefix, strlen(want_prefix)) != 0 ||
		    !strstr(err, bad_hosts[i].reason))
			T_FAIL_("value %s: message \"%s\" lacks prefix or \"%s\"",
				bad_hosts[i].value, err, bad_hosts[i].reason);
		CHECK(h.path == NULL && h.host == NULL);
		free(want_prefix);
		free(err);
	}
}

TEST(host_bad_without_errp)
{
	struct docker_host h;
	CHECK_INT(docker_host_parse("ftp://x", &h, NULL), -1);
}

/* ---- API versions ----------------------------------------------------- */

TEST(version_valid)
{
	static const char *const good[] = {"1.41", "1.24", "1.4", "2.0", "10.100", "1.44"};
	static const char *const bad[] = {"",	   "1",	    "1.",	".41", "v1.41", "1.41.0",
					  " 1.41", "1.41 ", "1,41",	"a.b", "1.-1",	"+1.41",
					  "1.4a",  "1..41", "123456.1", NULL};
	for (size_t i = 0; i < ARRAY_LEN(good); i++)
		if (!docker_version_valid(good[i]))
			T_FAIL_("\"%s\" should be valid", good[i]);
	for (size_t i = 0; i < ARRAY_LEN(bad); i++)
		if (docker_version_valid(bad[i]))
			T_FAIL_("\"%s\" should be invalid", bad[i] ? bad[i] : "(null)");
}

TEST(version_cmp)
{
	static const struct {
		const char *a, *b;
		int sign;
	} cases[] = {
		{"1.41", "1.41", 0}, {"1.40", "1.41", -1}, {"1.41", "1.40", 1},
		{"1.9", "1.10", -1}, {"1.10", "1.9", 1},   {"2.0", "1.99", 1},
		{"1.44", "1.41", 1}, {"1.041", "1.41", 0},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		int c = docker_version_cmp(cases[i].a, cases[i].b);
		int sign = c < 0 ? -1 : c > 0;
		if (sign != cases[i].sign)
			T_FAIL_("cmp(%s, %s) = %d, want sign %d", cases[i].a, cases[i].b, c,
				cases[i].sign);
	}
}

TEST(negotiate_picks_lower)
{
	static const struct {
		const char *body;
		const char *want;
	} cases[] = {
		/* An old daemon: speak its version. */
		{"{\"ApiVersion\":\"1.40\",\"MinAPIVersion\":\"1.12\"}", "1.40"},
		/* The daemon Relay was written against. */
		{"{\"ApiVersion\":\"1.41\",\"MinAPIVersion\":\"1.12\"}", "1.41"},
		/* A newer daemon: cap at DOCKER_API_MAX. */
		{"{\"ApiVersion\":\"1.43\",\"MinAPIVersion\":\"1.12\"}", "1.41"},
		/* Numeric, not string, comparison. */
		{"{\"ApiVersion\":\"1.9\"}", "1.9"},
		{"{\"Version\":\"20.10.24\",\"ApiVersion\":\"1.41\"}", "1.41"},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		char out[16] = "";
		char *err = NULL;
		int rc = docker_negotiate_version(cases[i].body, strlen(cases[i].body),
						  DOCKER_API_MAX, out, sizeof out, &err);
		CHECK_INT(rc, 0);
		CHECK_STR(out, cases[i].want);
		CHECK(err == NULL);
		free(err);
	}
}

TEST(negotiate_errors)
{
	static const struct {
		const char *body;
		const char *want;
	} cases[] = {
		{"not json", "not a JSON object"},
		{"[1]", "not a JSON object"},
		{"{}", "no valid ApiVersion"},
		{"{\"ApiVersion\":141}", "no valid ApiVersion"},
		{"{\"ApiVersion\":\"latest\"}", "no valid ApiVersion"},
		{"{\"ApiVersion\":\"1.52\",\"MinAPIVersion\":\"1.44\"}",
		 "Docker daemon requires API version 1.44 or newer, Relay speaks at most 1.41"},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		char out[16] = "";
		char *err = NULL;
		int rc = docker_negotiate_version(cases[i].body, strlen(cases[i].body),
						  DOCKER_API_MAX, out, sizeof out, &err);
		CHECK_INT(rc, -1);
		if (!err || !strstr(err, cases[i].want))
			T_FAIL_("body %s: got \"%s\", want \"%s\"", cases[i].body,
				err ? err : "(null)", cases[i].want);
		free(err);
	}
}

/* ---- daemon error messages -------------------------------------------- */

TEST(error_message)
{
	static const struct {
		long status;
		const char *body;
		const char *want;
	} cases[] = {
		{404, "{\"message\":\"No such container: abc\"}\n", "No such container: abc"},
		{409,
		 "{\"message\":\"You cannot remove a running container 0123. Stop the "
		 "container before attempting removal or force remove\"}",
		 "You cannot remove a running container 0123. Stop the container before "
		 "attempting removal or force remove"},
		/* Escapes are decoded, the text is otherwise verbatim. */
		{400, "{\"message\":\"bad \\\"x\\\"\\n\"}", "bad \"x\"\n"},
		/* A socket proxy's plain-text refusal. */
		{403, "Forbidden\n", "HTTP 403: Forbidden"},
		{502, "  <html>\r\n<body>Bad Gateway</body></html>", "HTTP 502: <html>"},
		{500, "", "HTTP 500"},
		{500, " \n ", "HTTP 500"},
		{500, "{\"message\":\"\"}", "HTTP 500: {\"message\":\"\"}"},
		{500, "{\"message\":42}", "HTTP 500: {\"message\":42}"},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		char *m =
			docker_error_message(cases[i].status, cases[i].body, strlen(cases[i].body));
		CHECK_STR(m, cases[i].want);
		free(m);
	}
}

TEST(error_message_bounded)
{
	char body[1000];
	memset(body, 'x', sizeof body);
	char *m = docker_error_message(500, body, sizeof body);
	/* "HTTP 500: " + 200 bytes */
	CHECK_INT(strlen(m), 10 + 200);
	free(m);
}

/* ---- refusals (HTTP 403) ------------------------------------------------ */

TEST(proxy_allowance)
{
	static const struct {
		const char *method, *path, *want;
	} cases[] = {
		{"GET", "/_ping", "PING=1"},
		{"HEAD", "/_ping", "PING=1"},
		{"GET", "/version", "VERSION=1"},
		{"GET", "/v1.41/version", "VERSION=1"},
		{"GET", "/v1.41/images/relay-fn-x:0123456789abcdef/json", "IMAGES=1"},
		{"GET", "/v1.41/images/json", "IMAGES=1"},
		{"DELETE", "/v1.41/images/relay-fn-x:0123456789abcdef", "IMAGES=1 and POST=1"},
		{"POST", "/v1.41/build?t=relay-fn-x:01&rm=1", "BUILD=1 and POST=1"},
		{"GET", "/v1.41/containers/json?all=1", "CONTAINERS=1"},
		{"POST", "/v1.41/containers/create?name=x", "CONTAINERS=1 and POST=1"},
		{"POST", "/v1.41/containers/abc/attach?stream=1", "CONTAINERS=1 and POST=1"},
		{"DELETE", "/v1.41/containers/abc?force=1", "CONTAINERS=1 and POST=1"},
		/* Creating an exec instance is an EXEC request, not a container one. */
		{"POST", "/v1.41/containers/abc/exec", "EXEC=1 and POST=1"},
		{"POST", "/containers/abc/exec", "EXEC=1 and POST=1"},
		{"POST", "/v1.41/exec/123/start", "EXEC=1 and POST=1"},
		{"POST", "/v1.41/containers/exec/start", "CONTAINERS=1 and POST=1"},
		{"GET", "/v1.41/secrets", "SECRETS=1"},
		{"GET", "/v1.41/events?since=1", "EVENTS=1"},
		/* A segment that merely starts like a section is not one. */
		{"GET", "/v1.41/containersx", NULL},
		{"GET", "/v1.41/nothing", NULL},
		{"PUT", "/v1.41/nothing", "POST=1"},
		/* "v" and digits only make a version prefix before a slash. */
		{"GET", "/v1.41", NULL},
		{"GET", "/vx/images/json", NULL},
		{"GET", "", NULL},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		char *got = docker_proxy_allowance(cases[i].method, cases[i].path);
		if (cases[i].want)
			CHECK_STR(got, cases[i].want);
		else if (got)
			CHECK_STR(got, "(NULL)");
		free(got);
	}
}

/* What haproxy (tecnativa/docker-socket-proxy) answers for a denied path. */
static const char proxy_403_body[] = "<html><body><h1>403 Forbidden</h1>\n"
				     "Request forbidden by administrative rules.\n"
				     "</body></html>\n";

TEST(forbidden_message)
{
	char *m = docker_forbidden_message("tcp://socket-proxy:2375", "POST",
					   "/v1.41/build?t=relay-fn-x:0123456789abcdef&rm=1",
					   proxy_403_body, sizeof proxy_403_body - 1);
	CHECK_STR(m, "Docker API request POST /v1.41/build to tcp://socket-proxy:2375 refused "
		     "with HTTP 403, probably by a Docker socket proxy (allowing it takes BUILD=1 "
		     "and POST=1)");
	free(m);
	m = docker_forbidden_message("unix:///var/run/docker.sock", "GET", "/v1.41/images/json", "",
				     0);
	CHECK_STR(m, "Docker API request GET /v1.41/images/json to unix:///var/run/docker.sock "
		     "refused with HTTP 403, probably by a Docker socket proxy (allowing it takes "
		     "IMAGES=1)");
	free(m);
	/* A path in no section: nothing to suggest. */
	m = docker_forbidden_message("tcp://h:1", "GET", "/v1.41/nothing", "", 0);
	CHECK_STR(m, "Docker API request GET /v1.41/nothing to tcp://h:1 refused with HTTP 403, "
		     "probably by a Docker socket proxy");
	free(m);
	/* A daemon's own refusal (an authorization plugin) keeps its reason,
	 * first line only: the message stays one line. */
	static const char authz[] = "{\"message\":\"authorization denied by plugin "
				    "opa: no\\nsecond line\"}";
	m = docker_forbidden_message("tcp://h:1", "POST", "/v1.41/containers/abc/exec", authz,
				     sizeof authz - 1);
	CHECK_STR(m, "Docker API request POST /v1.41/containers/abc/exec to tcp://h:1 refused "
		     "with HTTP 403, probably by a Docker socket proxy (allowing it takes EXEC=1 "
		     "and POST=1): authorization denied by plugin opa: no");
	CHECK(strchr(m, '\n') == NULL);
	free(m);
}

/* ---- docker_open failures (no daemon needed) -------------------------- */

static void check_open_fails(const char *host, const char *api, const char *want)
{
	setenv("DOCKER_HOST", host, 1);
	if (api)
		setenv("DOCKER_API_VERSION", api, 1);
	else
		unsetenv("DOCKER_API_VERSION");
	unsetenv("DOCKER_TLS_VERIFY");
	struct docker *d = (struct docker *)1;
	char *err = NULL;
	int rc = docker_open(&d, &err);
	CHECK_INT(rc, -1);
	CHECK(d == NULL);
	if (!err || strcmp(err, want) != 0)
		T_FAIL_("DOCKER_HOST=%s: got \"%s\", want \"%s\"", host, err ? err : "(null)",
			want);
	free(err);
}

TEST(open_unreachable)
{
	check_open_fails("unix:///nonexistent/docker.sock", NULL,
			 "cannot connect to the Docker daemon at unix:///nonexistent/docker.sock: "
			 "No such file or directory");
	/* Port 1 on loopback: nothing listens there. */
	check_open_fails("tcp://127.0.0.1:1", NULL,
			 "cannot connect to the Docker daemon at tcp://127.0.0.1:1: "
			 "Connection refused");
	check_open_fails("ftp://x", NULL,
			 "invalid DOCKER_HOST \"ftp://x\": unsupported scheme \"ftp\" "
			 "(want unix:// or tcp://)");
	check_open_fails("unix:///nonexistent/docker.sock", "latest",
			 "invalid DOCKER_API_VERSION \"latest\": want a version like 1.41");
	unsetenv("DOCKER_HOST");
	unsetenv("DOCKER_API_VERSION");
}

TEST(open_tls_missing_certs)
{
	setenv("DOCKER_HOST", "tcp://127.0.0.1:1", 1);
	setenv("DOCKER_TLS_VERIFY", "1", 1);
	setenv("DOCKER_CERT_PATH", "/nonexistent-certs", 1);
	struct docker *d = NULL;
	char *err = NULL;
	CHECK_INT(docker_open(&d, &err), -1);
	CHECK_STR(err, "DOCKER_TLS_VERIFY is set but /nonexistent-certs/ca.pem is not "
		       "readable (DOCKER_CERT_PATH): No such file or directory");
	free(err);
	/* "0" means off, as for the docker CLI: back to a plain connect. */
	setenv("DOCKER_TLS_VERIFY", "0", 1);
	err = NULL;
	CHECK_INT(docker_open(&d, &err), -1);
	CHECK_STR(err, "cannot connect to the Docker daemon at tcp://127.0.0.1:1: "
		       "Connection refused");
	free(err);
	unsetenv("DOCKER_HOST");
	unsetenv("DOCKER_TLS_VERIFY");
	unsetenv("DOCKER_CERT_PATH");
}

/* ---- which failed requests may have reached the daemon ---------------- */

/* A fake daemon: answers GET /version, and reads but never answers any
 * request for /hold (a daemon slower than the caller's timeout). One
 * connection at a time, kept alive as a daemon does. */
struct fake {
	char path[108];
	int lfd;
	atomic_int stop, held;
	/* Answer every request but GET /version as a socket proxy denying
	 * it: haproxy's 403 page, then close. */
	bool deny;
	/* The last request answered, headers and body (POST /update). */
	char last[8192];
	pthread_t th;
};

static void *fake_main(void *arg)
{
	struct fake *f = arg;
	static const char version[] = "{\"ApiVersion\":\"1.41\",\"MinAPIVersion\":\"1.12\"}";
	char *ok = xasprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
			     "Content-Length: %zu\r\n\r\n%s",
			     sizeof version - 1, version);
	while (!atomic_load(&f->stop)) {
		struct pollfd p = {f->lfd, POLLIN, 0};
		if (poll(&p, 1, 50) <= 0)
			continue;
		int c = accept(f->lfd, NULL, NULL);
		if (c < 0)
			continue;
		char req[8192];
		size_t have = 0;
		while (!atomic_load(&f->stop)) {
			struct pollfd q = {c, POLLIN, 0};
			if (poll(&q, 1, 50) <= 0)
				continue;
			ssize_t n = read(c, req + have, sizeof req - 1 - have);
			if (n <= 0)
				break;
			have += (size_t)n;
			req[have] = '\0';
			char *end = strstr(req, "\r\n\r\n");
			if (!end)
				continue;
			const char *cl = strcasestr(req, "\r\nContent-Length:");
			if (cl && cl < end &&
			    (size_t)(end + 4 - req) + strtoul(cl + 17, NULL, 10) > have)
				continue;
			strlcpy_(f->last, req, sizeof f->last);
			if (strstr(req, "/hold")) {
				atomic_fetch_add(&f->held, 1);
			} else if (f->deny && strncmp(req, "GET /version ", 13) != 0) {
				char *no = xasprintf("HTTP/1.1 403 Forbidden\r\ncontent-length: "
						     "%zu\r\ncontent-type: text/html\r\n"
						     "connection: close\r\n\r\n%s",
						     sizeof proxy_403_body - 1, proxy_403_body);
				write_all(c, no, strlen(no));
				free(no);
				break;
			} else if (strstr(req, "/containers/missing/")) {
				static const char gone[] =
					"HTTP/1.1 404 Not Found\r\nContent-Type: "
					"application/json\r\n"
					"Content-Length: 40\r\n\r\n"
					"{\"message\":\"No such container: missing\"}";
				if (write_all(c, gone, sizeof gone - 1) < 0)
					break;
			} else if (write_all(c, ok, strlen(ok)) < 0) {
				break;
			}
			have = 0;
		}
		close(c);
	}
	free(ok);
	return NULL;
}

static int fake_start(struct fake *f)
{
	snprintf_(f->path, sizeof f->path, "/tmp/relay-test-docker-%d.sock", (int)getpid());
	unlink(f->path);
	f->lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	strlcpy_(a.sun_path, f->path, sizeof a.sun_path);
	if (f->lfd < 0 || bind(f->lfd, (struct sockaddr *)&a, sizeof a) < 0 ||
	    listen(f->lfd, 4) < 0)
		return -1;
	return pthread_create(&f->th, NULL, fake_main, f) == 0 ? 0 : -1;
}

static void fake_stop(struct fake *f)
{
	atomic_store(&f->stop, 1);
	pthread_join(f->th, NULL);
	close(f->lfd);
	unlink(f->path);
}

/* Starts the fake daemon f and opens a client on it (DOCKER_HOST set to
 * its socket, no version pinned, no TLS); NULL when either fails. The
 * caller closes d, then unsets DOCKER_HOST and frees the returned host. */
static char *open_on_fake(struct fake *f, struct docker **d)
{
	if (fake_start(f) != 0)
		return NULL;
	char *host = xasprintf("unix://%s", f->path);
	setenv("DOCKER_HOST", host, 1);
	unsetenv("DOCKER_API_VERSION");
	unsetenv("DOCKER_TLS_VERIFY");
	char *err = NULL;
	if (docker_open(d, &err) < 0) {
		printf("  %s\n", err);
		free(err);
		free(host);
		return NULL;
	}
	return host;
}

/*
 * A request that timed out on a connection kept alive from the previous
 * one was sent, and the daemon may act on it (a container create): it is
 * not "unsent", and its message is not "cannot connect". Curl reports a
 * connect time of 0 for a reused connection, which used to pass for a
 * connect timeout. A daemon that is gone is unsent.
 */
TEST(request_unsent_only_before_connecting)
{
	struct fake f = {0};
	struct docker *d = NULL;
	char *host = open_on_fake(&f, &d);
	REQUIRE(host != NULL);
	CHECK(!docker_no_answer(d)); /* GET /version was answered */
	struct docker_response r;
	CHECK_INT(docker_request(d, "POST", "/hold/containers/create", "{}", 2, NULL, 300, &r), -1);
	docker_response_free(&r);
	CHECK_INT(atomic_load(&f.held), 1);
	CHECK(!docker_request_unsent(d));
	CHECK(docker_no_answer(d)); /* sent, never answered */
	CHECK(strstr(docker_errmsg(d), "cannot connect") == NULL);
	/* The daemon goes away: nothing can be sent any more. */
	fake_stop(&f);
	CHECK_INT(docker_request(d, "GET", "/containers/json", NULL, 0, NULL, 300, &r), -1);
	docker_response_free(&r);
	CHECK(docker_request_unsent(d));
	CHECK(docker_no_answer(d));
	CHECK(strstr(docker_errmsg(d), "cannot connect") != NULL);
	struct docker_conn *c = NULL;
	CHECK_INT(docker_hijack_timeout(d, "/containers/x/attach", 300, &c), -1);
	CHECK(docker_no_answer(d));
	docker_close(d);
	free(host);
	unsetenv("DOCKER_HOST");
}

/* Every kind of request reports a refusal the same way: denied, and the
 * message names the request and the proxy variable. */
TEST(refusals_name_the_request)
{
	struct fake f = {.deny = true};
	struct docker *d = NULL;
	char *host = open_on_fake(&f, &d);
	REQUIRE(host != NULL);
	char *want = NULL;

	struct docker_response r;
	CHECK_INT(docker_request(d, "GET", "/images/relay-fn-x:01/json", NULL, 0, NULL, 5000, &r),
		  0);
	CHECK_INT(r.status, 403);
	docker_response_free(&r);
	CHECK(docker_request_denied(d));
	CHECK(!docker_no_answer(d)); /* a refusal is an answer */
	CHECK(!docker_request_unsent(d));
	want = xasprintf("Docker API request GET /v1.41/images/relay-fn-x:01/json to unix://%s "
			 "refused with HTTP 403, probably by a Docker socket proxy (allowing it "
			 "takes IMAGES=1)",
			 f.path);
	CHECK_STR(docker_errmsg(d), want);
	free(want);

	long status = 0;
	CHECK_INT(docker_request_stream(d, "POST", "/build?t=x", "tar", 3, "application/x-tar",
					5000, NULL, NULL, &status),
		  0);
	CHECK_INT(status, 403);
	CHECK(docker_request_denied(d));
	CHECK(strstr(docker_errmsg(d), "POST /v1.41/build to ") != NULL);
	CHECK(strstr(docker_errmsg(d), "(allowing it takes BUILD=1 and POST=1)") != NULL);

	CHECK_INT(docker_ping(d), -1);
	CHECK(docker_request_denied(d));
	CHECK(strstr(docker_errmsg(d), "GET /_ping to ") != NULL);
	CHECK(strstr(docker_errmsg(d), "(allowing it takes PING=1)") != NULL);

	struct docker_conn *c = NULL;
	CHECK_INT(docker_hijack(d, "/containers/abc/attach?stream=1&stdin=1", &c), -1);
	CHECK(c == NULL);
	CHECK(docker_request_denied(d));
	want = xasprintf("Docker API request POST /v1.41/containers/abc/attach to unix://%s "
			 "refused with HTTP 403, probably by a Docker socket proxy (allowing it "
			 "takes CONTAINERS=1 and POST=1)",
			 f.path);
	CHECK_STR(docker_errmsg(d), want);
	free(want);

	/* A request that is answered clears the flag. */
	f.deny = false;
	CHECK_INT(docker_request(d, "GET", "/containers/json", NULL, 0, NULL, 5000, &r), 0);
	CHECK_INT(r.status, 200);
	docker_response_free(&r);
	CHECK(!docker_request_denied(d));

	docker_close(d);
	fake_stop(&f);
	free(host);
	unsetenv("DOCKER_HOST");
}

/* The parking CPU bound's one call: POST /containers/{id}/update with
 * NanoCpus alone; the daemon's refusal is its message; an id that would
 * change the path is refused before anything is sent; a timeout of 0 is
 * still a bound. */
TEST(update_cpus)
{
	struct fake f = {0};
	struct docker *d = NULL;
	char *host = open_on_fake(&f, &d);
	REQUIRE(host != NULL);
	CHECK_INT(docker_update_cpus(d, "abc123", 1000000000, 5000), 0);
	CHECK(strncmp(f.last, "POST /v1.41/containers/abc123/update HTTP/1.1\r\n", 47) == 0);
	const char *body = strstr(f.last, "\r\n\r\n");
	REQUIRE(body != NULL);
	CHECK_STR(body + 4, "{\"NanoCpus\":1000000000}");
	CHECK(strcasestr(f.last, "\r\nContent-Type: application/json\r\n") != NULL);

	CHECK_INT(docker_update_cpus(d, "missing", 50000000, 5000), -1);
	CHECK_STR(docker_errmsg(d), "No such container: missing");
	CHECK(!docker_no_answer(d));

	f.last[0] = '\0';
	CHECK_INT(docker_update_cpus(d, "a/../b", 1, 5000), -1);
	CHECK(strstr(docker_errmsg(d), "invalid container id") != NULL);
	CHECK_INT(docker_update_cpus(d, "", 1, 5000), -1);
	CHECK_STR(f.last, "");

	int64_t t0 = now_mono_ns();
	CHECK_INT(docker_update_cpus(d, "hold", 1, 0), -1);
	CHECK(docker_no_answer(d));
	CHECK(now_mono_ns() - t0 < 2 * NS_PER_SEC);
	docker_close(d);
	fake_stop(&f);
	free(host);
	unsetenv("DOCKER_HOST");
}

T_MAIN(T_CASE(host_good), T_CASE(host_bad), T_CASE(host_bad_without_errp), T_CASE(version_valid),
       T_CASE(version_cmp), T_CASE(negotiate_picks_lower), T_CASE(negotiate_errors),
       T_CASE(error_message), T_CASE(error_message_bounded), T_CASE(proxy_allowance),
       T_CASE(forbidden_message), T_CASE(open_unreachable), T_CASE(open_tls_missing_certs),
       T_CASE(request_unsent_only_before_connecting), T_CASE(refusals_name_the_request),
       T_CASE(update_cpus))
