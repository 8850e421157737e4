/*
 * bench/retry: how late retries start under load, and what waiting
 * retries cost (docs/execution.md, "Retries").
 *
 *   build/bench/retry [SECONDS]     (default 20 s of load)
 *
 * It starts its own redis-server on a free port and runs the consumer in
 * this process (consumer_start, 8 workers, 16 buffered) over one function
 * whose rule has `retry: {backoff: [2s]}` and `concurrency: 8`, with an
 * invoke callback that works 10 ms per invocation (no container: the
 * subject is Relay's scheduling, not Docker's) and fails attempt 1 of the
 * events marked to fail.
 *
 *   capacity  2,000 events pushed at once, timed until all acknowledged;
 *   load      SECONDS of events at 80 % of that rate, 5 % of them failing
 *             once: for each retry, its lateness = attempt 2's start -
 *             (attempt 1's end + 2 s); p50, p95, max and how many fall
 *             outside [-0.1 s, +1.5 s] (goal: none);
 *   idle      the retry index holding 0, then 100,000 retries due in an
 *             hour: Redis's memory per waiting retry (INFO used_memory),
 *             and over 10 idle seconds each, Redis's and this process's CPU
 *             (INFO used_cpu_*, getrusage): what waiting retries cost per
 *             wake-up of the retrier (one a second).
 */
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/duration.h"
#include "base/log.h"
#include "base/util.h"
#include "engine/consumer.h"
#include "engine/invocation.h"
#include "engine/registry.h"
#include "io/redis.h"
#include "model/function.h"

#define MAX_EVENTS 200000
#define WORK_US 10000
#define BACKOFF_NS (2 * NS_PER_SEC)

static struct redis_uri uri;
static int64_t end1[MAX_EVENTS], start2[MAX_EVENTS];
static atomic_int done_n;

static int event_n(const char *payload, size_t len)
{
	const char *p = memmem(payload, len, "\"n\":", 4);
	return p ? atoi(p + 4) : -1;
}

static void invoke(void *ctx, const struct invoke_request *req, struct invoke_result *res)
{
	int n = event_n(req->payload, req->payload_len);
	bool fail = memmem(req->payload, req->payload_len, "\"fail\":1", 8) != NULL;
	if (n >= 0 && n < MAX_EVENTS && req->attempt == 2)
		start2[n] = now_wall_ns();
	usleep(WORK_US);
	res->exit_code = 0;
	res->outcome = INVOKE_OK;
	if (fail && req->attempt == 1) {
		res->outcome = INVOKE_FAILED;
		res->exit_code = 1;
		snprintf_(res->error, sizeof res->error, "failed on purpose");
		if (n >= 0 && n < MAX_EVENTS)
			end1[n] = now_wall_ns();
	} else {
		atomic_fetch_add(&done_n, 1);
	}
}

static pid_t redis_pid;

static void redis_stop(void)
{
	if (redis_pid > 0) {
		kill(redis_pid, SIGTERM);
		waitpid(redis_pid, NULL, 0);
	}
}

static struct redis *conn(void)
{
	struct redis *r = redis_new(&uri, &(struct redis_opts){10000, 30000});
	if (redis_connect(r) < 0) {
		fprintf(stderr, "cannot connect: %s\n", redis_errmsg(r));
		exit(2);
	}
	return r;
}

static double info_num(struct redis *r, const char *section, const char *field)
{
	redisReply *rep = redis_command(r, "INFO %s", section);
	double v = 0;
	if (rep && rep->type == REDIS_REPLY_STRING) {
		char *p = strstr(rep->str, field);
		if (p)
			v = strtod(p + strlen(field) + 1, NULL);
	}
	freeReplyObject(rep);
	return v;
}

static struct registry *registry_from(const char *dir)
{
	struct registry *reg = registry_new();
	struct function_scan scan;
	char *err = NULL;
	if (function_scan_dir(dir, &scan, &err) < 0) {
		fprintf(stderr, "scan: %s\n", err);
		exit(2);
	}
	struct fn_version **fvs = xcalloc(scan.n + 1, sizeof *fvs);
	size_t n = 0;
	for (size_t i = 0; i < scan.n; i++)
		if (scan.v[i].fn) {
			fvs[n++] = registry_fn_version_new(scan.v[i].fn, NULL, NULL);
			scan.v[i].fn = NULL;
		}
	function_scan_free(&scan);
	registry_publish(reg, fvs, n); /* takes fvs */
	return reg;
}

static struct consumer *start(struct registry *reg, const char *stream)
{
	struct redis *r = conn();
	redisReply *rep = redis_command(r, "XGROUP CREATE %s g 0 MKSTREAM", stream);
	freeReplyObject(rep);
	redis_free(r);
	struct consumer_config cfg = {
		.uri = &uri,
		.stream = stream,
		.group = "g",
		.consumer = "bench",
		.max_buffered = 16,
		.max_concurrency = 8,
		.registry = reg,
		.invoke = invoke,
	};
	return consumer_start(&cfg);
}

static void push(struct redis *r, const char *stream, int from, int n, bool fails)
{
	for (int i = from; i < from + n; i++) {
		char ev[128];
		snprintf_(ev, sizeof ev, "{\"kind\":\"w\",\"n\":%d,\"fail\":%d}", i,
			  fails && i % 20 == 7 ? 1 : 0);
		const char *argv[] = {"XADD", stream, "*", "event", ev};
		redis_append_argv(r, 5, argv, NULL);
	}
	for (int i = 0; i < n; i++) {
		redisReply *rep = redis_get_reply(r, -1);
		freeReplyObject(rep);
	}
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

static double cpu_self(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec / 1e6;
}

int main(int argc, char **argv)
{
	int seconds = argc > 1 ? atoi(argv[1]) : 20;
	if (seconds < 1 || seconds > 600)
		seconds = 20;
	log_set_level(LOG_ERROR);
	/* The plain per-message lines are written whatever the level. */
	int devnull = open("/dev/null", O_WRONLY);
	if (devnull >= 0)
		log_set_fd(devnull);
	char tmpl[] = "/tmp/relay-bench-retry-XXXXXX";
	char *dir = mkdtemp(tmpl);
	int port = 20000 + (int)(getpid() % 30000);
	char portbuf[16];
	snprintf_(portbuf, sizeof portbuf, "%d", port);
	redis_pid = fork();
	if (redis_pid == 0) {
		freopen("/dev/null", "w", stdout);
		execlp("redis-server", "redis-server", "--port", portbuf, "--bind", "127.0.0.1",
		       "--save", "", "--appendonly", "no", "--dir", dir, (char *)NULL);
		_exit(127);
	}
	atexit(redis_stop);
	char *u = xasprintf("127.0.0.1:%d", port);
	char *perr = NULL;
	if (redis_uri_parse(u, &uri, &perr) < 0) {
		fprintf(stderr, "%s\n", perr);
		return 2;
	}
	struct redis *r = NULL;
	for (int i = 0; i < 100; i++) {
		r = redis_new(&uri, &(struct redis_opts){1000, 5000});
		if (redis_connect(r) == 0)
			break;
		redis_free(r);
		r = NULL;
		usleep(50000);
	}
	if (!r) {
		fprintf(stderr, "redis-server did not start\n");
		return 2;
	}
	char *fdir = xasprintf("%s/functions", dir);
	mkdir(fdir, 0755);
	char *fd = xasprintf("%s/bench-r", fdir);
	mkdir(fd, 0755);
	char *tp = xasprintf("%s/template.yaml", fd);
	FILE *f = fopen(tp, "w");
	fputs("runtime: python3.14\nconcurrency: 8\nevents:\n  - handler: h.handler\n"
	      "    pattern: {kind: [w]}\n    retries: 1\n    retry: {backoff: [2s]}\n",
	      f);
	fclose(f);
	char *hp = xasprintf("%s/h.py", fd);
	f = fopen(hp, "w");
	fputs("def handler(event):\n    pass\n", f);
	fclose(f);
	struct registry *reg = registry_from(fdir);

	/* capacity */
	struct consumer *c = start(reg, "cap");
	atomic_store(&done_n, 0);
	int64_t t0 = now_mono_ns();
	push(r, "cap", 0, 2000, false);
	while (atomic_load(&done_n) < 2000)
		usleep(1000);
	double cap = 2000.0 / ((double)(now_mono_ns() - t0) / 1e9);
	consumer_stop(c);
	consumer_free(c);
	printf("capacity: %.0f events/s (8 workers, %d ms of work each)\n", cap, WORK_US / 1000);

	/* load at 80 % with 5 % failing once */
	double rate = 0.8 * cap;
	int total = (int)(rate * seconds);
	if (total > MAX_EVENTS)
		total = MAX_EVENTS;
	memset(end1, 0, sizeof end1);
	memset(start2, 0, sizeof start2);
	atomic_store(&done_n, 0);
	c = start(reg, "load");
	t0 = now_mono_ns();
	int sent = 0;
	while (sent < total) {
		int64_t el = now_mono_ns() - t0;
		int due = (int)(rate * (double)el / 1e9);
		if (due > total)
			due = total;
		if (due > sent) {
			push(r, "load", sent, due - sent, true);
			sent = due;
		}
		usleep(10000);
	}
	while (atomic_load(&done_n) < total && now_mono_ns() - t0 < (int64_t)(seconds + 60) * NS_PER_SEC)
		usleep(10000);
	consumer_stop(c);
	consumer_free(c);
	int64_t *late = xcalloc((size_t)total + 1, sizeof *late);
	int nl = 0, outside = 0, missing = 0;
	for (int i = 0; i < total; i++) {
		if (i % 20 != 7)
			continue;
		if (!end1[i] || !start2[i]) {
			missing++;
			continue;
		}
		late[nl] = start2[i] - (end1[i] + BACKOFF_NS);
		if (late[nl] < -100 * NS_PER_MS || late[nl] > 1500 * NS_PER_MS)
			outside++;
		nl++;
	}
	qsort(late, (size_t)nl, sizeof *late, cmp_i64);
	printf("load: %d events at %.0f/s (80%%), %d retried; retry lateness p50 %.1f ms, "
	       "p95 %.1f ms, max %.1f ms; outside [-0.1 s, +1.5 s]: %d; not retried: %d%s\n",
	       total, rate, nl, nl ? late[nl / 2] / 1e6 : 0, nl ? late[nl * 95 / 100] / 1e6 : 0,
	       nl ? late[nl - 1] / 1e6 : 0, outside, missing,
	       outside || missing ? "  (goal missed)" : "  (goal met)");
	free(late);

	/* idle cost of waiting retries */
	char *key = invocation_retry_key("idle", "g");
	c = start(reg, "idle");
	for (int round = 0; round < 2; round++) {
		if (round == 1) {
			double m0 = info_num(r, "memory", "used_memory");
			int64_t far = now_wall_ns() / NS_PER_MS + 3600 * 1000;
			for (int i = 0; i < 100000; i++) {
				char score[24], member[32];
				snprintf_(score, sizeof score, "%" PRId64, far + i);
				snprintf_(member, sizeof member, "%" PRId64 "-0", far - 1000000 + i);
				const char *av[] = {"ZADD", key, score, member};
				redis_append_argv(r, 4, av, NULL);
			}
			for (int i = 0; i < 100000; i++) {
				redisReply *rep = redis_get_reply(r, -1);
				freeReplyObject(rep);
			}
			double m1 = info_num(r, "memory", "used_memory");
			printf("idle: 100,000 waiting retries take %.1f MiB of Redis memory (%.0f "
			       "bytes each)\n",
			       (m1 - m0) / 1048576.0, (m1 - m0) / 100000.0);
		}
		double rc0 = info_num(r, "cpu", "used_cpu_sys") + info_num(r, "cpu", "used_cpu_user");
		double pc0 = cpu_self();
		sleep(10);
		double rc1 = info_num(r, "cpu", "used_cpu_sys") + info_num(r, "cpu", "used_cpu_user");
		double pc1 = cpu_self();
		printf("idle: %s waiting: over 10 s, Redis CPU %.1f ms, Relay CPU %.1f ms (%.2f / "
		       "%.2f ms per retrier wake-up, about 10)\n",
		       round ? "100,000" : "0", (rc1 - rc0) * 1e3, (pc1 - pc0) * 1e3,
		       (rc1 - rc0) * 1e2, (pc1 - pc0) * 1e2);
	}
	consumer_stop(c);
	consumer_free(c);
	free(key);
	registry_free(reg);
	redis_free(r);
	char *rm = xasprintf("rm -rf '%s'", dir);
	if (system(rm) != 0)
		fprintf(stderr, "cannot remove %s\n", dir);
	free(rm);
	free(u), free(fdir), free(fd), free(tp), free(hp);
	return outside || missing ? 1 : 0;
}
