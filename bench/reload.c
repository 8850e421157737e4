/*
 * bench/reload: the two latencies of `relay start` with targets,
 * measured black-box on the relay binary with a private redis-server and
 * the real Docker daemon.
 *
 *   build/bench/reload [RELAY] [ROUNDS]   (defaults: build/relay, 5)
 *
 * 1. Startup: from spawning `relay start` with 50 functions whose images
 *    are cached to the "worker started" line (consuming), and to the output
 *    of an event that was already waiting in the stream (first handler
 *    output, which adds one container run). Target: consuming under 1 s.
 * 2. Hot reload: from saving a changed handler (one of the 50; the function
 *    has a requirements.txt, so its image builds FROM a cached relay-dep-*
 *    image) to the "function updated" line (the new version is serving),
 *    and to the new code's output for an event sent right then. The 750 ms
 *    debounce is part of the figure. Target: serving under 3 s.
 *
 * A first, unmeasured start builds whatever images are missing. The
 * functions' images (relay-fn-bench-rl-*) are removed at the end; the
 * shared dependency image stays, as Relay itself never removes those.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "io/docker.h"
#include "engine/image.h"
#include "base/log.h"
#include "base/util.h"

#define NFUNCTIONS 50

static char tmpdir[] = "/tmp/relay-bench-reload.XXXXXX";
static char fdir[512];
static int redis_port;
static pid_t redis_pid;

static double now_s(void)
{
	return (double)now_mono_ns() / 1e9;
}

static void die(const char *what)
{
	fprintf(stderr, "bench/reload: %s\n", what);
	exit(1);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0)
		die("cannot write a fixture file");
}

static void make_function(int i, const char *marker)
{
	char d[600], p[700], text[512];
	snprintf_(d, sizeof d, "%s/bench-rl-%02d", fdir, i);
	mkdir(d, 0755);
	snprintf_(p, sizeof p, "%s/template.yaml", d);
	snprintf_(text, sizeof text,
		  "runtime: python3.14\nevents:\n  - handler: main.handler\n    pattern: {fn: "
		  "[bench-rl-%02d]}\n",
		  i);
	write_file(p, text);
	snprintf_(p, sizeof p, "%s/requirements.txt", d);
	write_file(p, "# no third-party packages\n");
	snprintf_(p, sizeof p, "%s/main.py", d);
	snprintf_(text, sizeof text, "def handler(event):\n    print(\"%s \" + event[\"n\"])\n",
		  marker);
	write_file(p, text);
}

static redisContext *redis_ctx(void)
{
	for (int i = 0; i < 100; i++) {
		redisContext *c = redisConnect("127.0.0.1", redis_port);
		if (c && !c->err)
			return c;
		if (c)
			redisFree(c);
		usleep(50 * 1000);
	}
	die("redis-server did not start");
	return NULL;
}

static void xadd(redisContext *c, int fn, const char *n)
{
	char ev[256];
	snprintf_(ev, sizeof ev, "{\"event_id\":\"evt_%s\",\"fn\":\"bench-rl-%02d\",\"n\":\"%s\"}",
		  n, fn, n);
	redisReply *r = redisCommand(c, "XADD events * event %s", ev);
	if (!r || r->type == REDIS_REPLY_ERROR)
		die("XADD failed");
	freeReplyObject(r);
}

/* A running relay with its stdout+stderr on a pipe. */
struct proc {
	pid_t pid;
	int fd;
	char buf[1 << 16];
	size_t len;
	FILE *log; /* everything read, for diagnostics */
};

static void spawn(struct proc *p, const char *relay)
{
	int fds[2];
	if (pipe(fds) < 0)
		die("pipe");
	p->len = 0;
	p->pid = fork();
	if (p->pid < 0)
		die("fork");
	if (p->pid == 0) {
		dup2(fds[1], 1);
		dup2(fds[1], 2);
		close(fds[0]);
		close(fds[1]);
		execl(relay, "relay", "start", (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	p->fd = fds[0];
}

/* Reads lines until one contains needle; 0 and *at, or -1 on timeout/EOF. */
static int wait_line(struct proc *p, const char *needle, double timeout_s, double *at)
{
	double deadline = now_s() + timeout_s;
	for (;;) {
		char *nl;
		while ((nl = memchr(p->buf, '\n', p->len))) {
			*nl = '\0';
			bool hit = strstr(p->buf, needle) != NULL;
			if (p->log)
				fprintf(p->log, "%s\n", p->buf);
			size_t used = (size_t)(nl - p->buf) + 1;
			memmove(p->buf, nl + 1, p->len - used);
			p->len -= used;
			if (hit) {
				*at = now_s();
				return 0;
			}
		}
		double left = deadline - now_s();
		if (left <= 0)
			return -1;
		struct pollfd pf = {p->fd, POLLIN, 0};
		if (poll(&pf, 1, (int)(left * 1000) + 1) <= 0)
			continue;
		if (p->len == sizeof p->buf)
			p->len = 0; /* an absurdly long line: drop it */
		ssize_t n = read(p->fd, p->buf + p->len, sizeof p->buf - p->len);
		if (n <= 0)
			return -1;
		p->len += (size_t)n;
	}
}

static void stop(struct proc *p)
{
	double at;
	kill(p->pid, SIGTERM);
	wait_line(p, "msg=\"Relay stopped\"", 30, &at);
	int st;
	waitpid(p->pid, &st, 0);
	close(p->fd);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void report(const char *what, double *v, int n, double target)
{
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	printf("%-44s median %6.3f s  min %6.3f s  max %6.3f s", what, v[n / 2], v[0], v[n - 1]);
	if (target > 0)
		printf("  (target %.0f s: %s, %.0f%% of it)", target,
		       v[n / 2] < target ? "met" : "MISSED", 100 * v[n / 2] / target);
	printf("\n");
}

static void cleanup(void)
{
	if (redis_pid > 0) {
		kill(redis_pid, SIGTERM);
		waitpid(redis_pid, NULL, 0);
	}
	char cmd[600];
	snprintf_(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		fprintf(stderr, "bench/reload: could not remove %s\n", tmpdir);
}

int main(int argc, char **argv)
{
	const char *relay = argc > 1 ? argv[1] : "build/relay";
	int64_t rounds = 5;
	if (argc > 2 && (parse_int64(argv[2], &rounds) < 0 || rounds < 1 || rounds > 100))
		die("ROUNDS must be 1..100");
	if (access(relay, X_OK) != 0)
		die("no relay binary (build it with make, or pass its path)");
	if (!mkdtemp(tmpdir))
		die("mkdtemp");
	atexit(cleanup);
	snprintf_(fdir, sizeof fdir, "%s/functions", tmpdir);
	mkdir(fdir, 0755);
	char data[600], logpath[600];
	snprintf_(data, sizeof data, "%s/data", tmpdir);
	snprintf_(logpath, sizeof logpath, "%s/relay.log", tmpdir);

	srand((unsigned)getpid());
	redis_port = 20000 + rand() % 40000;
	redis_pid = fork();
	if (redis_pid == 0) {
		char port[16];
		snprintf_(port, sizeof port, "%d", redis_port);
		int nul = open("/dev/null", O_WRONLY);
		dup2(nul, 1);
		dup2(nul, 2);
		execlp("redis-server", "redis-server", "--bind", "127.0.0.1", "--port", port,
		       "--save", "", "--appendonly", "no", "--dir", tmpdir, (char *)NULL);
		_exit(127);
	}
	redisContext *rc = redis_ctx();

	char uri[64];
	snprintf_(uri, sizeof uri, "127.0.0.1:%d", redis_port);
	setenv("REDIS_URI", uri, 1);
	setenv("REDIS_STREAM", "events", 1);
	setenv("REDIS_GROUP", "relay", 1);
	setenv("RELAY_FUNCTIONS_DIR", fdir, 1);
	setenv("RELAY_DATA_DIR", data, 1);
	unsetenv("LOG_LEVEL");
	unsetenv("METRICS_ADDR");
	unsetenv("REDIS_STREAM_RETENTION");

	for (int i = 0; i < NFUNCTIONS; i++)
		make_function(i, "v0");

	struct proc p = {0};
	p.log = fopen(logpath, "w");
	double t0, t1, t2;
	printf("bench/reload: %d Python functions, relay %s, %lld rounds\n", NFUNCTIONS, relay,
	       (long long)rounds);
	t0 = now_s();
	spawn(&p, relay);
	if (wait_line(&p, "msg=\"worker started\"", 900, &t1) < 0)
		die("the warm-up start failed (see the log in the temporary directory)");
	stop(&p);
	printf("warm-up start (builds what is missing):       %.3f s\n", t1 - t0);

	double *ready = xcalloc((size_t)rounds, sizeof *ready);
	double *first = xcalloc((size_t)rounds, sizeof *first);
	for (int r = 0; r < rounds; r++) {
		char n[32];
		snprintf_(n, sizeof n, "start%d", r);
		xadd(rc, r % NFUNCTIONS, n);
		char want[64];
		snprintf_(want, sizeof want, "\": v0 %s", n);
		t0 = now_s();
		spawn(&p, relay);
		if (wait_line(&p, "msg=\"worker started\"", 60, &t1) < 0 ||
		    wait_line(&p, want, 60, &t2) < 0)
			die("relay did not start or handle the waiting event");
		ready[r] = t1 - t0;
		first[r] = t2 - t0;
		stop(&p);
	}
	report("start -> consuming (50 cached functions)", ready, (int)rounds, 1);
	report("start -> first handler output", first, (int)rounds, 0);

	double *swap = xcalloc((size_t)rounds, sizeof *swap);
	double *served = xcalloc((size_t)rounds, sizeof *served);
	spawn(&p, relay);
	if (wait_line(&p, "msg=\"worker started\"", 60, &t1) < 0)
		die("relay did not start");
	for (int r = 0; r < rounds; r++) {
		char marker[32], n[32], want[96];
		snprintf_(marker, sizeof marker, "v%d", r + 1);
		snprintf_(n, sizeof n, "reload%d", r);
		t0 = now_s();
		make_function(0, marker);
		if (wait_line(&p, "msg=\"function updated\" function=bench-rl-00", 120, &t1) < 0)
			die("the change was not picked up");
		xadd(rc, 0, n);
		snprintf_(want, sizeof want, "\": %s %s", marker, n);
		if (wait_line(&p, want, 60, &t2) < 0)
			die("the new code did not run");
		swap[r] = t1 - t0;
		served[r] = t2 - t0;
		usleep(300 * 1000);
	}
	stop(&p);
	report("save -> new version serving (cached deps)", swap, (int)rounds, 3);
	report("save -> new code's output for an event", served, (int)rounds, 0);
	printf("(the reload figures include the fixed 750 ms debounce)\n");

	/* Remove this benchmark's function images. */
	struct docker *d = NULL;
	char *err = NULL;
	log_set_level(LOG_WARN);
	if (docker_open(&d, &err) == 0) {
		for (int i = 0; i < NFUNCTIONS; i++) {
			char name[32];
			snprintf_(name, sizeof name, "bench-rl-%02d", i);
			char *gerr = NULL;
			if (image_gc(d, name, NULL, 0, NULL, &gerr) < 0) {
				fprintf(stderr, "bench/reload: %s\n", gerr);
				free(gerr);
			}
		}
		docker_close(d);
	} else {
		free(err);
	}
	fclose(p.log);
	redisFree(rc);
	free(ready);
	free(first);
	free(swap);
	free(served);
	return 0;
}
