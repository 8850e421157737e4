/*
 * bench/consume: Relay's consume-and-ACK rate for events that match no rule,
 * against a minimal XREADGROUP + XACK loop on the same Redis in the same run,
 * Relay's RSS while it does so, and the cost of the hot-path
 * metric updates, metrics on vs off.
 *
 *   build/bench/consume [RELAY_BINARY [ROUNDS]]   (default build/relay, 3 rounds;
 *                                                  at most 15)
 *
 * It starts its own redis-server on a free port in a temporary directory.
 * Each measurement gets a fresh stream of N_EVENTS events (a ~200-byte JSON
 * object in the `event` field, pushed with pipelined XADDs) and a fresh
 * group created at 0 before anything reads:
 *
 *   minimal   one connection: XREADGROUP GROUP g c COUNT 16 STREAMS s >,
 *             then one XACK of the returned ids, until all are ACKed
 *             (timed directly);
 *   binary    `relay start` as a child process (REDIS_URI/STREAM/GROUP, an
 *             empty RELAY_FUNCTIONS_DIR, a temporary RELAY_DATA_DIR,
 *             LOG_LEVEL=WARN, default MAX_CONCURRENCY / MAX_BUFFERED_EVENTS,
 *             METRICS_ADDR unset), then SIGTERM;
 *   on / off  consumer_start() in this process with an empty registry and a
 *             no-op invoke callback (the defaults relay start uses: 8
 *             workers, 16 buffered), metrics_set_enabled(true / false).
 *
 *   traced    tracing on the worker path (docs/operations.md, "Tracing"):
 *             consumer_start() in this process with one function whose
 *             rule matches every event and the no-op invoke, so each
 *             message is decoded, matched, claimed (the invocation-state
 *             script), "invoked", recorded and ACKed, with export off
 *             (propagation only), on to a collector that answers (a sink
 *             thread of this program answering 200 to every POST), and on
 *             with the collector down (a port that refuses); this
 *             process's VmRSS before and after the collector-down run
 *             shows the export queue's bound. The sink counts the span
 *             objects it received. Each row also reports this process's
 *             CPU time per event (the sink thread's left out: a
 *             collector's cost, not Relay's) and the up rows the exporter
 *             thread's; the cost figures are medians of the per-round
 *             ratios, each round's three rows having run side by side.
 *
 *   build/bench/consume RELAY ROUNDS trace
 *
 * runs only the traced rows, so that many rounds fit in a few minutes.
 *
 * For binary and on/off a poller reads XINFO GROUPS every millisecond on its
 * own connection: the clock starts at the first poll that sees the group
 * has read something (so Relay's startup is excluded) and stops at the first
 * poll that sees the last entry delivered and nothing pending. The child's
 * VmRSS is read from /proc when 10,000 events are ACKed and when all are.
 *
 * The child talks to a tiny Docker API stand-in served by this program on a
 * unix socket (GET /version, /_ping, /containers/json, /images/json), not to
 * the real daemon: `relay start` force-removes this host's relay containers
 * and garbage-collects relay-fn-* images at startup, which would hit other
 * work sharing the daemon, and none of it is part of what is measured.
 *
 * Measurements are interleaved (minimal, binary, on, off; on/off swapped on
 * every other round) over the rounds and medians reported: this is a
 * 2-core machine also running redis-server.
 *
 *   build/bench/consume RELAY ROUNDS cluster
 *
 * adds, to each round, the minimal loop and `relay start` against the
 * master of a 3-master, 3-replica Redis Cluster (tests/it/redis-ha cluster,
 * run from the repository root; stopped at exit), REDIS_URI its seed list
 * and the stream {la2}:cluster:<round>, whose hash tag is in slot 0 (so a
 * connection routed for no key lands on the same master). The ratio relay
 * start on the cluster / relay start standalone is the cluster figure
 * (goal >= 0.9); the cluster master also feeds its replica, which the
 * standalone server does not: the minimal loop on each shows what the
 * server side costs by itself, and `relay start` against a standalone
 * master with one replica (tests/it/redis-ha sentinel, REDIS_URI its
 * host:port) is the baseline with the same server-side work.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine/consumer.h"
#include "base/duration.h"
#include "base/log.h"
#include "engine/metrics.h"
#include "io/redis.h"
#include "engine/registry.h"
#include "engine/trace.h"
#include "io/otlp.h"
#include "model/function.h"
#include "base/util.h"

#define N_EVENTS 100000
#define RSS_EARLY_AT 10000
#define DEFAULT_ROUNDS 3
#define MAX_ROUNDS 15
#define FILL_CHUNK 1000
#define POLL_US 1000
#define WAIT_LIMIT_NS (300LL * NS_PER_SEC)
#define MINIMAL_COUNT 16

extern char **environ;

static char tmpdir[64];
static pid_t redis_pid;
static char redis_port[16];
static struct redis_uri uri;
/* REDIS_URI of the relay child (standalone: 127.0.0.1:<redis_port>). */
static char child_uri[512];
/* its log, in tmpdir */
static const char *child_log = "relay.log";
/* cluster mode: the cluster's directory, its master for slot 0. */
static char cluster_dir[128];
static char cluster_port[16];
static struct redis_uri curi;

/* ---- helpers ------------------------------------------------------------ */

static void die(const char *what)
{
	fprintf(stderr, "consume: %s\n", what);
	exit(1);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int rounds = DEFAULT_ROUNDS;

static double median(const double *v, int n)
{
	double s[MAX_ROUNDS];
	memcpy(s, v, (size_t)n * sizeof *v);
	qsort(s, (size_t)n, sizeof *s, cmp_double);
	return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

static void sleep_us(long us)
{
	struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
	nanosleep(&ts, NULL);
}

static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof a;
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &len) < 0)
		die("cannot find a free port");
	close(fd);
	return ntohs(a.sin_port);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)flag, (void)ftw;
	remove(path);
	return 0;
}

static struct redis *conn(void)
{
	struct redis_opts o = {.connect_timeout_ms = 5000, .command_timeout_ms = 30000};
	struct redis *r = redis_new(&uri, &o);
	if (redis_connect(r) < 0)
		die(redis_errmsg(r));
	return r;
}

static void command_ok(struct redis *r, int argc, const char **argv)
{
	redisReply *rep = redis_command_argv(r, argc, argv, NULL);
	if (!rep || rep->type == REDIS_REPLY_ERROR) {
		fprintf(stderr, "consume: %s failed: %s\n", argv[0],
			rep ? rep->str : redis_errmsg(r));
		exit(1);
	}
	freeReplyObject(rep);
}

/* ---- redis-server ------------------------------------------------------ */

static void redis_start(void)
{
	char dir[128];
	snprintf_(dir, sizeof dir, "%s/redis", tmpdir);
	if (mkdir(dir, 0700) < 0)
		die("cannot create the redis directory");
	snprintf_(redis_port, sizeof redis_port, "%d", free_port());
	redis_pid = fork();
	if (redis_pid < 0)
		die("fork failed");
	if (redis_pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 1);
		dup2(null, 2);
		execlp("redis-server", "redis-server", "--bind", "127.0.0.1", "--port", redis_port,
		       "--save", "", "--appendonly", "no", "--dir", dir, "--loglevel", "warning",
		       (char *)NULL);
		_exit(127);
	}
	uri.host = "127.0.0.1";
	uri.port = redis_port;
	snprintf_(child_uri, sizeof child_uri, "127.0.0.1:%s", redis_port);
	for (int i = 0; i < 100; i++) {
		struct redis *r = redis_new(&uri, NULL);
		int ok = redis_connect(r) == 0;
		redis_free(r);
		if (ok)
			return;
		sleep_us(50000);
	}
	die("redis-server did not start");
}

/* The first line a shell command prints (trailing newline removed). */
static void read_line(const char *cmd, char *out, size_t outlen)
{
	FILE *f = popen(cmd, "r");
	if (!f || !fgets(out, (int)outlen, f))
		out[0] = '\0';
	if (f && pclose(f) != 0)
		out[0] = '\0';
	out[strcspn(out, "\n")] = '\0';
}

static char cluster_seeds[512];

static void cluster_start(void)
{
	char cmd[512];
	snprintf_(cluster_dir, sizeof cluster_dir, "%s/cluster", tmpdir);
	snprintf_(cmd, sizeof cmd, "tests/it/redis-ha cluster %s", cluster_dir);
	read_line(cmd, cluster_seeds, sizeof cluster_seeds);
	if (!cluster_seeds[0])
		die("tests/it/redis-ha cluster failed (run from the repository root)");
	snprintf_(cmd, sizeof cmd, "tests/it/redis-ha master-of %s '{la2}'", cluster_dir);
	read_line(cmd, cluster_port, sizeof cluster_port);
	if (!cluster_port[0])
		die("no master owns slot 0");
	curi.host = "127.0.0.1";
	curi.port = cluster_port;
}

/* The baseline with the same server-side work: a standalone master with
 * one replica (tests/it/redis-ha sentinel; the sentinels only watch). */
static char pair_dir[128];
static char pair_port[16];
static char pair_uri[64];
static struct redis_uri puri;

static void pair_start(void)
{
	char cmd[512], line[512];
	snprintf_(pair_dir, sizeof pair_dir, "%s/pair", tmpdir);
	snprintf_(cmd, sizeof cmd, "tests/it/redis-ha sentinel %s", pair_dir);
	read_line(cmd, line, sizeof line);
	if (!line[0])
		die("tests/it/redis-ha sentinel failed (run from the repository root)");
	snprintf_(cmd, sizeof cmd, "head -n1 %s/nodes", pair_dir);
	read_line(cmd, pair_port, sizeof pair_port);
	if (!pair_port[0])
		die("no master in the replicated pair");
	snprintf_(pair_uri, sizeof pair_uri, "127.0.0.1:%s", pair_port);
	puri.host = "127.0.0.1";
	puri.port = pair_port;
}

static void ha_stop(char *dir)
{
	if (dir[0]) {
		char cmd[512];
		snprintf_(cmd, sizeof cmd, "tests/it/redis-ha stop %s", dir);
		if (system(cmd) != 0)
			fprintf(stderr, "consume: %s failed\n", cmd);
		dir[0] = '\0';
	}
}

static void cluster_stop(void)
{
	ha_stop(cluster_dir);
	ha_stop(pair_dir);
}

static void redis_stop(void)
{
	if (redis_pid > 0) {
		kill(redis_pid, SIGTERM);
		waitpid(redis_pid, NULL, 0);
		redis_pid = 0;
	}
}

/* ---- Docker API stand-in ---------------------------------------------- */

static char docker_sock[128];
static int docker_fd = -1;
static atomic_int docker_stop;
static pthread_t docker_thread;

static void docker_answer(int fd)
{
	char req[8192];
	size_t len = 0;
	while (len < sizeof req - 1) {
		struct pollfd p = {fd, POLLIN, 0};
		if (poll(&p, 1, 5000) <= 0)
			return;
		ssize_t n = read(fd, req + len, sizeof req - 1 - len);
		if (n <= 0)
			return;
		len += (size_t)n;
		req[len] = '\0';
		if (strstr(req, "\r\n\r\n"))
			break;
	}
	char method[16] = "", path[512] = "";
	const char *sp = strchr(req, ' ');
	const char *sp2 = sp ? strchr(sp + 1, ' ') : NULL;
	if (sp && sp2 && (size_t)(sp - req) < sizeof method &&
	    (size_t)(sp2 - sp - 1) < sizeof path) {
		memcpy(method, req, (size_t)(sp - req));
		method[sp - req] = '\0';
		memcpy(path, sp + 1, (size_t)(sp2 - sp - 1));
		path[sp2 - sp - 1] = '\0';
	}
	const char *p = path;
	if (strncmp(p, "/v1.", 4) == 0 && strchr(p + 1, '/'))
		p = strchr(p + 1, '/'); /* drop the version prefix */
	int status = 200;
	const char *body;
	if (strcmp(method, "GET") == 0 && strcmp(p, "/version") == 0)
		body = "{\"Version\":\"bench-stub\",\"ApiVersion\":\"1.41\",\"MinAPIVersion\":\"1."
		       "12\"}";
	else if (strcmp(method, "GET") == 0 && strcmp(p, "/_ping") == 0)
		body = "OK";
	else if (strcmp(method, "GET") == 0 &&
		 (str_has_prefix(p, "/containers/json") || str_has_prefix(p, "/images/json")))
		body = "[]";
	else {
		status = 404;
		body = "{\"message\":\"not served by the bench/consume Docker stand-in\"}";
	}
	char head[256];
	snprintf_(head, sizeof head,
		  "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nApi-Version: 1.41\r\n"
		  "Content-Length: %zu\r\nConnection: close\r\n\r\n",
		  status, status == 200 ? "OK" : "Not Found",
		  strcmp(body, "OK") == 0 ? "text/plain" : "application/json", strlen(body));
	/* A client that went away is not the benchmark's concern. */
	if (write_all(fd, head, strlen(head)) == 0)
		(void)write_all(fd, body, strlen(body));
}

static void *docker_main(void *arg)
{
	(void)arg;
	while (!atomic_load(&docker_stop)) {
		struct pollfd p = {docker_fd, POLLIN, 0};
		if (poll(&p, 1, 100) <= 0)
			continue;
		int fd = accept(docker_fd, NULL, NULL);
		if (fd < 0)
			continue;
		docker_answer(fd);
		close(fd);
	}
	return NULL;
}

static void docker_stub_start(void)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	snprintf_(docker_sock, sizeof docker_sock, "%s/docker.sock", tmpdir);
	strlcpy_(a.sun_path, docker_sock, sizeof a.sun_path);
	docker_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (docker_fd < 0 || bind(docker_fd, (struct sockaddr *)&a, sizeof a) < 0 ||
	    listen(docker_fd, 16) < 0)
		die("cannot serve the Docker stand-in");
	pthread_create(&docker_thread, NULL, docker_main, NULL);
}

static void docker_stub_stop(void)
{
	atomic_store(&docker_stop, 1);
	pthread_join(docker_thread, NULL);
	close(docker_fd);
}

/* ---- streams ------------------------------------------------------------ */

/* Pushes N_EVENTS events to a fresh stream, creates group g at 0; the last
 * id goes to last_id. Returns the size of one event. */
static size_t fill(struct redis *r, const char *stream, char *last_id, size_t idlen)
{
	const char *unlink[] = {"UNLINK", stream};
	command_ok(r, 2, unlink);
	char ev[512];
	size_t evlen = 0;
	for (int base = 0; base < N_EVENTS; base += FILL_CHUNK) {
		int k = N_EVENTS - base < FILL_CHUNK ? N_EVENTS - base : FILL_CHUNK;
		for (int i = 0; i < k; i++) {
			int seq = base + i;
			snprintf_(ev, sizeof ev,
				  "{\"event_id\":\"bench-%08d\",\"event_name\":\"bench.nothing_"
				  "matches\","
				  "\"source\":\"relay-bench\",\"occurred_at\":\"2026-01-01T00:00:"
				  "00Z\","
				  "\"data\":{\"order_id\":%d,\"tenant\":\"t%03d\",\"amount\":1234,"
				  "\"currency\":\"EUR\",\"items\":[\"a\",\"b\",\"c\"],\"note\":"
				  "\"no rule\"}}",
				  seq, seq, seq % 1000);
			evlen = strlen(ev);
			const char *argv[] = {"XADD", stream, "*", "event", ev};
			if (redis_append_argv(r, 5, argv, NULL) < 0)
				die(redis_errmsg(r));
		}
		for (int i = 0; i < k; i++) {
			redisReply *rep = redis_get_reply(r, -1);
			if (!rep || rep->type != REDIS_REPLY_STRING)
				die(rep && rep->type == REDIS_REPLY_ERROR ? rep->str
									  : "XADD failed");
			if (base + i == N_EVENTS - 1)
				snprintf_(last_id, idlen, "%.*s", (int)rep->len, rep->str);
			freeReplyObject(rep);
		}
	}
	const char *group[] = {"XGROUP", "CREATE", stream, "g", "0"};
	command_ok(r, 5, group);
	return evlen;
}

static void drop(struct redis *r, const char *stream)
{
	const char *unlink[] = {"UNLINK", stream};
	command_ok(r, 2, unlink);
}

/* ---- a: the minimal loop ----------------------------------------------- */

static double run_minimal(struct redis *r, const char *stream)
{
	char count[16];
	snprintf_(count, sizeof count, "%d", MINIMAL_COUNT);
	const char *rd[] = {"XREADGROUP", "GROUP",   "g",    "c", "COUNT",
			    count,	  "STREAMS", stream, ">"};
	const char *ack[3 + MINIMAL_COUNT] = {"XACK", stream, "g"};
	long long acked = 0;
	int64_t t0 = now_mono_ns();
	while (acked < N_EVENTS) {
		redisReply *rep = redis_command_argv(r, 9, rd, NULL);
		if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements < 1)
			die("minimal loop: XREADGROUP returned no entries before the end");
		const redisReply *entries = rep->element[0]->element[1];
		size_t k = entries->elements;
		for (size_t i = 0; i < k; i++)
			ack[3 + i] = entries->element[i]->element[0]->str;
		redisReply *a = redis_command_argv(r, 3 + (int)k, ack, NULL);
		if (!a || a->type != REDIS_REPLY_INTEGER)
			die("minimal loop: XACK failed");
		acked += a->integer;
		freeReplyObject(a);
		freeReplyObject(rep);
	}
	return N_EVENTS / ((double)(now_mono_ns() - t0) / 1e9);
}

/* ---- the poller ---------------------------------------------------------- */

struct progress {
	double rate;	    /* events/s */
	long rss_early_kib; /* VmRSS at RSS_EARLY_AT ACKed (child only) */
	long rss_end_kib;   /* VmRSS once all are ACKed */
	long hwm_kib;	    /* VmHWM then */
};

static long proc_status_kib(pid_t pid, const char *key)
{
	char path[64], line[256];
	snprintf_(path, sizeof path, "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	long v = -1;
	size_t kl = strlen(key);
	while (fgets(line, sizeof line, f)) {
		if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
			char *end;
			v = strtol(line + kl + 1, &end, 10);
			if (end == line + kl + 1)
				v = -1;
			break;
		}
	}
	fclose(f);
	return v;
}

/* Group g of stream: entries-read (-1 if nil), pending and last-delivered-id. */
static void group_info(struct redis *r, const char *stream, long long *read, long long *pending,
		       char *last, size_t lastlen)
{
	const char *argv[] = {"XINFO", "GROUPS", stream};
	redisReply *rep = redis_command_argv(r, 3, argv, NULL);
	if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements < 1)
		die("XINFO GROUPS failed");
	const redisReply *g = rep->element[0];
	*read = -1;
	*pending = -1;
	last[0] = '\0';
	for (size_t i = 0; i + 1 < g->elements; i += 2) {
		const char *k = g->element[i]->str;
		const redisReply *v = g->element[i + 1];
		if (strcmp(k, "entries-read") == 0 && v->type == REDIS_REPLY_INTEGER)
			*read = v->integer;
		else if (strcmp(k, "pending") == 0 && v->type == REDIS_REPLY_INTEGER)
			*pending = v->integer;
		else if (strcmp(k, "last-delivered-id") == 0 && v->type == REDIS_REPLY_STRING)
			snprintf_(last, lastlen, "%.*s", (int)v->len, v->str);
	}
	freeReplyObject(rep);
}

/* Waits until every event of stream is delivered to g and ACKed. */
static void wait_consumed(struct redis *r, const char *stream, const char *last_id, pid_t child,
			  struct progress *out)
{
	int64_t t_start = 0, deadline = now_mono_ns() + WAIT_LIMIT_NS;
	memset(out, 0, sizeof *out);
	for (;;) {
		long long read, pending;
		char last[64];
		group_info(r, stream, &read, &pending, last, sizeof last);
		int64_t now = now_mono_ns();
		bool any = strcmp(last, "0-0") != 0;
		if (!t_start && any)
			t_start = now;
		if (child && !out->rss_early_kib && read >= 0 && read - pending >= RSS_EARLY_AT)
			out->rss_early_kib = proc_status_kib(child, "VmRSS");
		if (strcmp(last, last_id) == 0 && pending == 0) {
			if (child) {
				out->rss_end_kib = proc_status_kib(child, "VmRSS");
				out->hwm_kib = proc_status_kib(child, "VmHWM");
			}
			out->rate = N_EVENTS / ((double)(now - t_start) / 1e9);
			return;
		}
		if (now > deadline)
			die("timed out waiting for the events to be ACKed");
		if (child && waitpid(child, NULL, WNOHANG) == child) {
			fprintf(stderr, "consume: relay exited early; see %s/%s\n", tmpdir,
				child_log);
			exit(1);
		}
		sleep_us(POLL_US);
	}
}

/* ---- b: the relay binary ----------------------------------------------- */

static char **child_env(const char *stream)
{
	static const char *const drop_vars[] = {"REDIS_URI=",		"REDIS_STREAM=",
						"REDIS_GROUP=",		"REDIS_STREAM_RETENTION=",
						"METRICS_ADDR=",	"GIT_WEBHOOK_ADDR=",
						"LOG_LEVEL=",		"MAX_CONCURRENCY=",
						"MAX_BUFFERED_EVENTS=", "RELAY_FUNCTIONS_DIR=",
						"RELAY_DATA_DIR=",	"DOCKER_HOST=",
						"DOCKER_TLS_VERIFY=",	"DOCKER_CERT_PATH=",
						"DOCKER_API_VERSION="};
	size_t n = 0;
	while (environ[n])
		n++;
	char **env = xcalloc(n + 16, sizeof *env);
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		bool skip = false;
		for (size_t j = 0; j < ARRAY_LEN(drop_vars) && !skip; j++)
			skip = str_has_prefix(environ[i], drop_vars[j]);
		if (!skip)
			env[k++] = xstrdup(environ[i]);
	}
	env[k++] = xasprintf("REDIS_URI=%s", child_uri);
	env[k++] = xasprintf("REDIS_STREAM=%s", stream);
	env[k++] = xstrdup("REDIS_GROUP=g");
	env[k++] = xstrdup("LOG_LEVEL=WARN");
	env[k++] = xasprintf("RELAY_FUNCTIONS_DIR=%s/functions", tmpdir);
	env[k++] = xasprintf("RELAY_DATA_DIR=%s/data", tmpdir);
	env[k++] = xasprintf("DOCKER_HOST=unix://%s", docker_sock);
	env[k] = NULL;
	return env;
}

static void free_env(char **env)
{
	for (size_t i = 0; env[i]; i++)
		free(env[i]);
	free(env);
}

static void run_binary(struct redis *r, const char *relay, const char *stream, const char *last_id,
		       struct progress *out)
{
	char **env = child_env(stream);
	char log_path[128];
	snprintf_(log_path, sizeof log_path, "%s/%s", tmpdir, child_log);
	int logfd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (logfd < 0)
		die("cannot open relay.log");
	pid_t pid = fork();
	if (pid < 0)
		die("fork failed");
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(logfd, 1);
		dup2(logfd, 2);
		char *const argv[] = {(char *)relay, "start", NULL};
		execve(relay, argv, env);
		_exit(127);
	}
	close(logfd);
	free_env(env);
	wait_consumed(r, stream, last_id, pid, out);
	kill(pid, SIGTERM);
	int status = 0;
	int64_t deadline = now_mono_ns() + 15 * NS_PER_SEC;
	while (waitpid(pid, &status, WNOHANG) != pid) {
		if (now_mono_ns() > deadline) {
			fprintf(stderr, "consume: relay ignored SIGTERM for 15 s; killing it\n");
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			break;
		}
		sleep_us(10000);
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fprintf(stderr,
			"consume: relay did not exit 0 after SIGTERM (status 0x%x); see %s\n",
			(unsigned)status, log_path);
}

/* ---- c: the consumer in process ---------------------------------------- */

static void noop_invoke(void *ctx, const struct invoke_request *req, struct invoke_result *res)
{
	(void)ctx, (void)req;
	res->outcome = INVOKE_OK;
	res->exit_code = 0;
}

/* The consumer in this process over reg, with the no-op invoke, until
 * every event of stream is consumed: events/s. */
static double consume_inprocess(struct redis *r, const char *stream, const char *last_id,
				struct registry *reg)
{
	struct consumer_config cfg = {
		.uri = &uri,
		.stream = stream,
		.group = "g",
		.consumer = "bench",
		.max_buffered = 16,   /* MAX_BUFFERED_EVENTS default */
		.max_concurrency = 8, /* MAX_CONCURRENCY default */
		.registry = reg,
		.invoke = noop_invoke,
	};
	struct consumer *c = consumer_start(&cfg);
	struct progress p;
	wait_consumed(r, stream, last_id, 0, &p);
	consumer_stop(c);
	consumer_free(c);
	return p.rate;
}

static double run_inprocess(struct redis *r, const char *stream, const char *last_id, bool metrics)
{
	struct registry *reg = registry_new();
	metrics_set_enabled(metrics);
	double rate = consume_inprocess(r, stream, last_id, reg);
	registry_free(reg);
	metrics_set_enabled(true);
	return rate;
}

/* ---- d: tracing on the worker path ---------------------------------------- */

static int sink_fd = -1;
/* The sink thread's CPU time so far: a collector's cost, not Relay's. */
static _Atomic int64_t sink_cpu_ns;
/* Span objects the sink received. */
static atomic_uint_fast64_t sink_spans;
static int sink_port;
static pthread_t sink_thread;

/* One connection: requests read whole (headers, Content-Length body),
 * each answered 200 with an empty JSON object, until the peer closes. */
static void sink_serve(int fd)
{
	static char buf[1 << 20];
	size_t have = 0;
	for (;;) {
		char *end = have ? memmem(buf, have, "\r\n\r\n", 4) : NULL;
		if (end) {
			char *cl = memmem(buf, (size_t)(end - buf), "Content-Length:", 15);
			size_t body = cl ? strtoul(cl + 15, NULL, 10) : 0;
			size_t need = (size_t)(end - buf) + 4 + body;
			if (need > sizeof buf)
				return;
			if (have >= need) {
				/* Counted, so that "exported" is checked by what came. */
				for (char *q = end; (q = memmem(q, need - (size_t)(q - buf),
								"{\"traceId\":", 11));
				     q += 11)
					atomic_fetch_add(&sink_spans, 1);
				static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Type: "
							 "application/json\r\nContent-Length: 2\r\n\r\n{}";
				if (write(fd, ok, sizeof ok - 1) < 0)
					return;
				memmove(buf, buf + need, have - need);
				have -= need;
				struct timespec ts;
				clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
				atomic_store(&sink_cpu_ns,
					     (int64_t)ts.tv_sec * NS_PER_SEC + ts.tv_nsec);
				continue;
			}
		}
		ssize_t n = read(fd, buf + have, sizeof buf - have);
		if (n <= 0)
			return;
		have += (size_t)n;
	}
}

static void *sink_main(void *arg)
{
	(void)arg;
	for (;;) {
		int c = accept(sink_fd, NULL, NULL);
		if (c < 0)
			return NULL;
		sink_serve(c);
		close(c);
	}
}

static void sink_start(void)
{
	sink_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof a;
	if (sink_fd < 0 || bind(sink_fd, (struct sockaddr *)&a, sizeof a) < 0 ||
	    listen(sink_fd, 4) < 0 || getsockname(sink_fd, (struct sockaddr *)&a, &len) < 0)
		die("cannot start the OTLP sink");
	sink_port = ntohs(a.sin_port);
	if (thread_start(&sink_thread, "otlp-sink", sink_main, NULL) != 0)
		die("cannot start the OTLP sink thread");
}

/* A functions directory with one function whose rule matches every bench
 * event, loaded into a registry as relay start would (no image: the
 * invoke callback is the no-op). */
static struct registry *traced_registry(bool keyed)
{
	char d[160];
	const char *dir = keyed ? "keyed" : "traced";
	snprintf_(d, sizeof d, "%s/%s/bench-traced", tmpdir, dir);
	char *p = xasprintf("mkdir -p %s && printf 'def handler(event):\\n    pass\\n' >%s/h.py && "
			    "printf 'runtime: python3.14\\nconcurrency: 8\\n%sevents:\\n"
			    "  - handler: h.handler\\n"
			    "    pattern: {event_name: [bench.nothing_matches]}\\n' >%s/template.yaml",
			    d, d, keyed ? "key_concurrency: {key: data.tenant}\\n" : "", d);
	if (system(p) != 0)
		die("cannot write the traced function");
	free(p);
	snprintf_(d, sizeof d, "%s/%s", tmpdir, dir);
	struct registry *reg = registry_new();
	struct function_scan scan;
	char *err = NULL;
	if (function_scan_dir(d, &scan, &err) < 0 || scan.n != 1 || !scan.v[0].fn)
		die("cannot load the traced function");
	struct fn_version **fvs = xcalloc(2, sizeof *fvs);
	fvs[0] = registry_fn_version_new(scan.v[0].fn, NULL, NULL);
	scan.v[0].fn = NULL;
	function_scan_free(&scan);
	registry_publish(reg, fvs, 1);
	return reg;
}

enum traced_mode { TRACED_OFF, TRACED_UP, TRACED_DOWN };

/* Spans exported and dropped by the last run of each mode. */
static uint64_t span_counts[3][3]; /* exported, dropped, received */
/* This process's CPU time per event in each mode and round (the sink's
 * left out), and the exporter thread's share of it, in microseconds. */
static double cpu_us[3][MAX_ROUNDS], exporter_us[MAX_ROUNDS];

/* The CPU time of this process's thread named comm (the first found), or
 * -1. */
static int64_t thread_cpu_ns(const char *comm)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *de;
	int64_t ns = -1;
	while (d && ns < 0 && (de = readdir(d))) {
		char path[300], name[32] = "";
		snprintf_(path, sizeof path, "/proc/self/task/%s/comm", de->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		bool match = fgets(name, sizeof name, f) && strcspn(name, "\n") == strlen(comm) &&
			     strncmp(name, comm, strlen(comm)) == 0;
		fclose(f);
		snprintf_(path, sizeof path, "/proc/self/task/%s/schedstat", de->d_name);
		long long v;
		if (match && (f = fopen(path, "r"))) {
			if (fscanf(f, "%lld", &v) == 1)
				ns = v;
			fclose(f);
		}
	}
	if (d)
		closedir(d);
	return ns;
}

static int64_t process_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (int64_t)ts.tv_sec * NS_PER_SEC + ts.tv_nsec - atomic_load(&sink_cpu_ns);
}

static double run_traced(struct redis *r, const char *stream, const char *last_id,
			 enum traced_mode mode, int round)
{
	struct otel_settings s = {.sampler = OTEL_SAMPLER_PARENTBASED_ALWAYS_ON,
				  .ratio = 1,
				  .timeout_ns = 10 * NS_PER_SEC};
	struct otlp_kv res[] = {{"service.name", "relay-bench"}};
	s.resource = res;
	s.nresource = 1;
	char url[64];
	if (mode != TRACED_OFF) {
		/* Port 1 on loopback refuses: the collector is down. */
		snprintf_(url, sizeof url, "http://127.0.0.1:%d/v1/traces",
			  mode == TRACED_UP ? sink_port : 1);
		s.traces_url = url;
	}
	char *why = NULL;
	if (trace_setup(&s, &why) < 0)
		die(why);
	struct registry *reg = traced_registry(false);
	uint64_t e0 = otlp_spans_exported(), d0 = otlp_spans_dropped(),
		 r0 = atomic_load(&sink_spans);
	int64_t cpu0 = process_cpu_ns();
	double rate = consume_inprocess(r, stream, last_id, reg);
	if (mode == TRACED_UP)
		exporter_us[round] = (double)thread_cpu_ns("otlp") / 1e3 / N_EVENTS;
	trace_shutdown();
	cpu_us[mode][round] = (double)(process_cpu_ns() - cpu0) / 1e3 / N_EVENTS;
	span_counts[mode][0] = otlp_spans_exported() - e0;
	span_counts[mode][1] = otlp_spans_dropped() - d0;
	span_counts[mode][2] = atomic_load(&sink_spans) - r0;
	registry_free(reg);
	return rate;
}

/* key_concurrency on data.tenant (1,000 values) or not, tracing off: the
 * function of the traced rows, with concurrency 8 either way. */
static double run_keyed(struct redis *r, const char *stream, const char *last_id, bool keyed)
{
	struct registry *reg = traced_registry(keyed);
	double rate = consume_inprocess(r, stream, last_id, reg);
	registry_free(reg);
	return rate;
}

/* One round of the traced rows, in an order that turns every round. */
static void run_traced_round(struct redis *r, int round, double *toff, double *tup,
			     double *tdown, long *rss_before, long *rss_after)
{
	char stream[64], last[64];
	for (int k = 0; k < 3; k++) {
		/* The order turns every round: off, up, down; up, down, off; ... */
		enum traced_mode mode = (enum traced_mode)((k + round) % 3);
		static const char *const names[] = {"off", "up", "down"};
		snprintf_(stream, sizeof stream, "bench:traced-%s:%d", names[mode], round);
		fill(r, stream, last, sizeof last);
		if (mode == TRACED_DOWN)
			rss_before[round] = proc_status_kib(getpid(), "VmRSS");
		double v = run_traced(r, stream, last, mode, round);
		if (mode == TRACED_DOWN)
			rss_after[round] = proc_status_kib(getpid(), "VmRSS");
		(mode == TRACED_OFF ? toff : mode == TRACED_UP ? tup : tdown)[round] = v;
		drop(r, stream);
	}
	printf("round %d: matched, tracing off %.0f/s, export on %.0f/s (%" PRIu64
	       " spans exported, %" PRIu64 " dropped, %" PRIu64
	       " received), collector down %.0f/s (RSS %ld -> %ld "
	       "KiB); CPU %.1f / %.1f / %.1f us/event\n",
	       round + 1, toff[round], tup[round], span_counts[TRACED_UP][0],
	       span_counts[TRACED_UP][1], span_counts[TRACED_UP][2], tdown[round], rss_before[round], rss_after[round],
	       cpu_us[TRACED_OFF][round], cpu_us[TRACED_UP][round], cpu_us[TRACED_DOWN][round]);
}

/* The traced rows' medians, the costs and the RSS bound. */
static void trace_summary(const double *toff, const double *tup, const double *tdown,
			  const long *rss_before, const long *rss_after)
{
	/* Each round's modes ran side by side: the median of the per-round
	 * ratios leaves out the machine's drift between rounds. */
	double rup[MAX_ROUNDS], rdown[MAX_ROUNDS];
	for (int k = 0; k < rounds; k++) {
		rup[k] = tup[k] / toff[k];
		rdown[k] = tdown[k] / toff[k];
	}
	double tcost = (1 - median(rup, rounds)) * 100, dcost = (1 - median(rdown, rounds)) * 100;
	printf("%-40s %9.1f %%   1 - median(up / off) (target <= 3 %%: %s)\n",
	       "tracing cost, export on", tcost, tcost <= 3 ? "met" : "NOT met");
	printf("%-40s %9.1f %%   1 - median(down / off)\n", "tracing cost, collector down",
	       dcost);
	double coff = median(cpu_us[TRACED_OFF], rounds), cup = median(cpu_us[TRACED_UP], rounds),
	       cdown = median(cpu_us[TRACED_DOWN], rounds);
	printf("%-40s %10.1f / %.1f / %.1f us (off / up / down; export: +%.1f us = +%.1f %%)\n",
	       "this process's CPU per event", coff, cup, cdown, cup - coff,
	       (cup - coff) / coff * 100);
	printf("%-40s %10.2f us per event (2 spans), in the up rows\n",
	       "exporter thread's CPU", median(exporter_us, rounds));
	long rss_growth = 0;
	for (int k = 0; k < rounds; k++)
		if (rss_after[k] - rss_before[k] > rss_growth)
			rss_growth = rss_after[k] - rss_before[k];
	printf("%-40s %10ld KiB over %d spans each run (queue bound: %d spans)\n",
	       "RSS growth, collector down, at most", rss_growth, 2 * N_EVENTS, OTEL_DEFAULT_BSP_QUEUE);
}

/* ---- main ---------------------------------------------------------------- */

static void cleanup(void)
{
	redis_stop();
	cluster_stop();
	if (tmpdir[0])
		nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int main(int argc, char **argv)
{
	const char *relay = argc > 1 ? argv[1] : "build/relay";
	bool cluster = argc > 3 && strcmp(argv[3], "cluster") == 0;
	bool keys_only = argc > 3 && strcmp(argv[3], "keys") == 0;
	bool trace_only = argc > 3 && strcmp(argv[3], "trace") == 0;
	if (argc > 4 || (argc > 3 && !cluster && !keys_only && !trace_only))
		die("usage: consume [RELAY_BINARY [ROUNDS [cluster|keys|trace]]]");
	if (argc > 2) {
		int64_t v;
		if (parse_int64(argv[2], &v) < 0 || v < 1 || v > MAX_ROUNDS)
			die("ROUNDS must be an integer from 1 to 15");
		rounds = (int)v;
	}
	if (access(relay, X_OK) != 0) {
		fprintf(stderr,
			"consume: %s is not executable (run from the repository root after make, "
			"or pass the binary)\n",
			relay);
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	log_set_level(LOG_WARN);
	snprintf_(tmpdir, sizeof tmpdir, "/tmp/relay-bench.XXXXXX");
	if (!mkdtemp(tmpdir))
		die("mkdtemp failed");
	atexit(cleanup);
	char d[128];
	snprintf_(d, sizeof d, "%s/functions", tmpdir);
	if (mkdir(d, 0700) < 0)
		die("cannot create the functions directory");
	snprintf_(d, sizeof d, "%s/data", tmpdir);
	if (mkdir(d, 0700) < 0)
		die("cannot create the data directory");
	redis_start();
	docker_stub_start();
	if (cluster) {
		cluster_start();
		pair_start();
	}

	struct redis *r = conn();
	struct redis *rc = NULL, *rp = NULL;
	if (cluster) {
		struct redis_opts o = {.connect_timeout_ms = 5000, .command_timeout_ms = 30000};
		rc = redis_new(&curi, &o);
		if (redis_connect(rc) < 0)
			die(redis_errmsg(rc));
		printf("cluster: seeds %s, slot 0 on 127.0.0.1:%s; standalone with a replica on "
		       "%s\n",
		       cluster_seeds, cluster_port, pair_uri);
		rp = redis_new(&puri, &o);
		if (redis_connect(rp) < 0)
			die(redis_errmsg(rp));
	}
	double cminimal[MAX_ROUNDS], cbinary[MAX_ROUNDS], pbinary[MAX_ROUNDS];
	double minimal[MAX_ROUNDS], binary[MAX_ROUNDS], on[MAX_ROUNDS], off[MAX_ROUNDS];
	double toff[MAX_ROUNDS], tup[MAX_ROUNDS], tdown[MAX_ROUNDS];
	double kplain[MAX_ROUNDS], kkeyed[MAX_ROUNDS];
	long rss_before[MAX_ROUNDS], rss_after[MAX_ROUNDS];
	sink_start();
	struct progress bp[MAX_ROUNDS];
	char last[64], stream[64];
	size_t evlen = 0;
	printf("bench/consume: %d events per measurement, %d interleaved rounds, redis-server %s "
	       "on "
	       "127.0.0.1:%s\n",
	       N_EVENTS, rounds, "(private)", redis_port);
	fflush(stdout);
	for (int round = 0; round < rounds; round++) {
		for (int k = 0; k < 2 && !trace_only; k++) {
			bool keyed = (k == 0) == (round % 2 == 0);
			snprintf_(stream, sizeof stream, "bench:keyed-%s:%d", keyed ? "on" : "off",
				  round);
			fill(r, stream, last, sizeof last);
			(keyed ? kkeyed : kplain)[round] = run_keyed(r, stream, last, keyed);
			drop(r, stream);
		}
		if (!trace_only)
			printf("round %d: matched, key_concurrency off %.0f/s, on (1,000 keys) "
			       "%.0f/s\n",
			       round + 1, kplain[round], kkeyed[round]);
		fflush(stdout);
		if (keys_only)
			continue;
		if (trace_only) {
			run_traced_round(r, round, toff, tup, tdown, rss_before, rss_after);
			continue;
		}
		snprintf_(stream, sizeof stream, "bench:minimal:%d", round);
		evlen = fill(r, stream, last, sizeof last);
		minimal[round] = run_minimal(r, stream);
		drop(r, stream);

		snprintf_(stream, sizeof stream, "bench:binary:%d", round);
		fill(r, stream, last, sizeof last);
		run_binary(r, relay, stream, last, &bp[round]);
		binary[round] = bp[round].rate;
		drop(r, stream);

		for (int k = 0; k < 2; k++) {
			bool metrics = (k == 0) == (round % 2 == 0);
			snprintf_(stream, sizeof stream, "bench:inproc-%s:%d",
				  metrics ? "on" : "off", round);
			fill(r, stream, last, sizeof last);
			(metrics ? on : off)[round] = run_inprocess(r, stream, last, metrics);
			drop(r, stream);
		}
		run_traced_round(r, round, toff, tup, tdown, rss_before, rss_after);
		if (cluster) {
			char saved[sizeof child_uri];
			snprintf_(saved, sizeof saved, "%s", child_uri);
			snprintf_(stream, sizeof stream, "{la2}:cluster-minimal:%d", round);
			fill(rc, stream, last, sizeof last);
			cminimal[round] = run_minimal(rc, stream);
			drop(rc, stream);
			snprintf_(stream, sizeof stream, "{la2}:cluster:%d", round);
			fill(rc, stream, last, sizeof last);
			snprintf_(child_uri, sizeof child_uri, "%s", cluster_seeds);
			child_log = "relay-cluster.log";
			struct progress cp;
			run_binary(rc, relay, stream, last, &cp);
			snprintf_(child_uri, sizeof child_uri, "%s", saved);
			child_log = "relay.log";
			cbinary[round] = cp.rate;
			drop(rc, stream);
			snprintf_(stream, sizeof stream, "{la2}:pair:%d", round);
			fill(rp, stream, last, sizeof last);
			snprintf_(child_uri, sizeof child_uri, "%s", pair_uri);
			run_binary(rp, relay, stream, last, &cp);
			snprintf_(child_uri, sizeof child_uri, "%s", saved);
			pbinary[round] = cp.rate;
			drop(rp, stream);
			printf("round %d, cluster: minimal %.0f/s, relay start %.0f/s; standalone "
			       "with a "
			       "replica: relay start %.0f/s\n",
			       round + 1, cminimal[round], cbinary[round], pbinary[round]);
		}
		printf("round %d: minimal %.0f/s, relay start %.0f/s (RSS %ld -> %ld KiB), "
		       "in-process "
		       "metrics on %.0f/s, off %.0f/s\n",
		       round + 1, minimal[round], binary[round], bp[round].rss_early_kib,
		       bp[round].rss_end_kib, on[round], off[round]);
		fflush(stdout);
	}
	redis_free(r);
	double mkp = median(kplain, rounds), mkk = median(kkeyed, rounds);
	if (!trace_only)
		printf("\n%-40s %10.0f /s\n%-40s %10.0f /s\n%-40s %10.2f   (goal >= 0.90: %s)\n",
	       "matched, key_concurrency off", mkp, "matched, key_concurrency on 1,000 keys", mkk,
	       "key_concurrency on / off", mkk / mkp, mkk / mkp >= 0.9 ? "met" : "NOT met");
	if (keys_only || trace_only) {
		if (trace_only)
			trace_summary(toff, tup, tdown, rss_before, rss_after);
		docker_stub_stop();
		return 0;
	}
	if (rc)
		redis_free(rc);
	if (rp)
		redis_free(rp);
	docker_stub_stop();

	double mm = median(minimal, rounds), mb = median(binary, rounds), mon = median(on, rounds),
	       moff = median(off, rounds);
	printf("\nevent size %zu bytes; consumers use MAX_CONCURRENCY 8, MAX_BUFFERED_EVENTS "
	       "16\n\n",
	       evlen);
	printf("%-40s", "events/s");
	for (int k = 0; k < rounds; k++)
		printf("   round %2d", k + 1);
	printf(" %10s\n", "median");
	const struct {
		const char *name;
		const double *v;
	} rows[] = {{"minimal XREADGROUP COUNT 16 + XACK", minimal},
		    {"relay start (child process)", binary},
		    {"consumer in-process, metrics on", on},
		    {"consumer in-process, metrics off", off},
		    {"matched in-process, tracing off", toff},
		    {"matched, tracing on (collector up)", tup},
		    {"matched, tracing on (collector down)", tdown}};
	for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
		printf("%-40s", rows[i].name);
		for (int k = 0; k < rounds; k++)
			printf(" %10.0f", rows[i].v[k]);
		printf(" %10.0f\n", median(rows[i].v, rounds));
	}
	double ratio = mb / mm, diff = (moff - mon) / moff * 100;
	printf("\n%-40s %10.2f   (target >= 0.80: %s)\n", "relay start / minimal", ratio,
	       ratio >= 0.8 ? "met" : "NOT met");
	printf("%-40s %10.2f\n", "in-process (metrics on) / minimal", mon / mm);
	printf("%-40s %9.1f %%   (off - on) / off (target < 3 %%: %s)\n", "metrics cost", diff,
	       diff < 3 ? "met" : "NOT met");
	trace_summary(toff, tup, tdown, rss_before, rss_after);
	if (cluster) {
		double cmm = median(cminimal, rounds), cmb = median(cbinary, rounds);
		printf("\n%-40s", "cluster node, events/s");
		for (int k = 0; k < rounds; k++)
			printf("   round %2d", k + 1);
		printf(" %10s\n", "median");
		printf("%-40s", "minimal on the cluster master");
		for (int k = 0; k < rounds; k++)
			printf(" %10.0f", cminimal[k]);
		printf(" %10.0f\n", cmm);
		printf("%-40s", "relay start on the cluster");
		for (int k = 0; k < rounds; k++)
			printf(" %10.0f", cbinary[k]);
		printf(" %10.0f\n", cmb);
		double pmb = median(pbinary, rounds);
		printf("%-40s", "relay start, standalone + 1 replica");
		for (int k = 0; k < rounds; k++)
			printf(" %10.0f", pbinary[k]);
		printf(" %10.0f\n", pmb);
		printf("%-40s %10.2f   (goal >= 0.90: %s)\n", "relay start: cluster / standalone",
		       cmb / mb, cmb / mb >= 0.9 ? "met" : "NOT met");
		printf("%-40s %10.2f   (goal >= 0.90: %s)\n", "relay: cluster / standalone+replica",
		       cmb / pmb, cmb / pmb >= 0.9 ? "met" : "NOT met");
		printf("%-40s %10.2f\n", "minimal: cluster / standalone", cmm / mm);
		printf("%-40s %10.2f\n", "relay start / minimal, on the cluster", cmb / cmm);
		/* what the relay on the cluster logged (LOG_LEVEL=WARN) */
		char cmd[512];
		snprintf_(cmd, sizeof cmd,
			  "n=$(grep -c 'level=WARN\\|level=ERROR' %s/relay-cluster.log); "
			  "echo \"relay start on the cluster logged $n WARN/ERROR line(s)\"; "
			  "grep 'level=WARN\\|level=ERROR' %s/relay-cluster.log | sed 's/^time=[^ "
			  "]* //' | "
			  "sort | uniq -c | sort -rn | head -n 3",
			  tmpdir, tmpdir);
		fflush(stdout);
		if (system(cmd) != 0)
			fprintf(stderr, "consume: cannot read relay-cluster.log\n");
	}
	printf("\n%-40s", "relay start RSS (KiB)");
	for (int k = 0; k < rounds; k++)
		printf("   round %2d", k + 1);
	printf(" %10s\n", "max");
	const char *rss_names[] = {"VmRSS after 10,000 ACKed", "VmRSS after 100,000 ACKed",
				   "VmHWM (peak)"};
	long worst_end = 0, worst_growth = 0;
	for (int row = 0; row < 3; row++) {
		printf("%-40s", rss_names[row]);
		long mx = 0;
		for (int k = 0; k < rounds; k++) {
			long v = row == 0   ? bp[k].rss_early_kib
				 : row == 1 ? bp[k].rss_end_kib
					    : bp[k].hwm_kib;
			printf(" %10ld", v);
			if (v > mx)
				mx = v;
		}
		printf(" %10ld\n", mx);
	}
	for (int k = 0; k < rounds; k++) {
		if (bp[k].rss_end_kib > worst_end)
			worst_end = bp[k].rss_end_kib;
		if (bp[k].rss_end_kib - bp[k].rss_early_kib > worst_growth)
			worst_growth = bp[k].rss_end_kib - bp[k].rss_early_kib;
	}
	printf("%-40s %10.1f MiB (target < 16 MiB: %s); growth 10k -> 100k at most %ld KiB\n",
	       "largest VmRSS after the run", worst_end / 1024.0,
	       worst_end < 16 * 1024 ? "met" : "NOT met", worst_growth);
	return 0;
}
