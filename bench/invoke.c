/*
 * bench/invoke: time from dispatch to exit of one invocation of a trivial
 * handler, Python and Node, four ways (and a diagnostic fifth):
 *
 *   standby    a container parked by runner_park (created, attached, waited
 *              on and started, the handler's module imported), left idle for
 *              at least STANDBY_IDLE_MS like a real standby container, then
 *              only runner_dispatch is timed (event on stdin, half-close,
 *              output to EOF, exit status);
 *   on demand  runner_invoke, the whole container start included;
 *   docker run the docker CLI, `docker run --rm -i` with the same settings
 *              (user, limits, read-only root, tmpfs, no capabilities), the
 *              event on its stdin, the whole command timed;
 *   bare API   the same call sequence as Relay's runner (create, attach,
 *              wait condition=next-exit, start, stdin + half-close, output
 *              to EOF, exit status) with nothing Relay adds: no secrets,
 *              label bounding, line forwarding, metrics or image holds;
 *   bare API, parked (a diagnostic): the bare sequence up to start, idled
 *              like a standby container, then timed from the event on, with
 *              the first output byte and output EOF noted on the way: where
 *              a standby invocation's time goes (the handler, the process
 *              exit, the daemon's teardown).
 *
 * Then the idle cost of one parked container per runtime, and the time to
 * prepare a function image when it exists (reuse) and when its source
 * changed (build).
 *
 *   build/bench/invoke [N]     (default N = 30 rounds; needs Docker, the
 *                               docker CLI and the python:3.14-slim and
 *                               node:24-alpine images)
 *
 * Each round parks a Python and a Node container (runner_park, and bare),
 * then runs the five modes for both runtimes in an order rotated every round
 * (so daemon drift and the clean-up of the previous mode's containers hit
 * every mode alike); a parked container is dispatched once it has idled
 * STANDBY_IDLE_MS.
 * One unmeasured warm-up round comes first. Relay's forwarded output goes to
 * /dev/null.
 *
 * Idle cost: GET /containers/{id}/stats?stream=false&one-shot=true of a
 * container parked STANDBY_SETTLE_MS earlier, read as `docker stats` does
 * (memory_stats.usage minus inactive_file: the cgroup's charge, page cache
 * of the files the interpreter read included) and as the anonymous memory
 * alone (memory_stats.stats rss on cgroup v1, anon on v2: the processes'
 * RSS without page cache).
 *
 * Every container carries relay.function and relay.hostname=relay-bench-
 * invoke-<pid>; whatever a failure or Ctrl-C leaves is removed by the same
 * orphan sweep `relay start` runs, before exit.
 *
 * Exit status 0 when every goal holds: standby p50 <= 0.20 x docker run p50
 * and on demand p50 <= 1.10 x bare API p50, for both runtimes.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "io/docker.h"
#include "engine/image.h"
#include "base/log.h"
#include "engine/runner.h"
#include "model/runtime.h"
#include "base/util.h"

#define STANDBY_IDLE_MS 1000
#define STANDBY_SETTLE_MS 2000
#define GOAL_STANDBY_VS_CLI 0.20
#define GOAL_ONDEMAND_VS_BARE 1.10

static const char payload[] = "{\"id\":\"bench\"}";

enum mode { M_STANDBY, M_ONDEMAND, M_CLI, M_BARE, M_BARE_PARKED, NMODES };
static const char *const mode_names[NMODES] = {
	"standby (runner_dispatch)", "on demand (runner_invoke)", "docker run --rm -i (CLI)",
	"bare Engine API",	     "bare API, parked (diag.)",
};

struct rt_bench {
	const char *label;    /* "Python" */
	const char *runtime;  /* "python3.14" */
	const char *function; /* "bench-invoke-py" */
	const char *file;     /* handler file name */
	const char *code;     /* handler file text, before the unique comment */
	const char *comment;  /* the language's line comment */
	char *dir;
	struct image_result img, reuse, rebuild;
	double *t[NMODES];
	double *park;
	double *first, *eof; /* M_BARE_PARKED: first output byte, output EOF */
};

static struct docker *g_docker;
static char *g_host; /* relay.hostname of every container started here */
static char g_dir[] = "/tmp/relay-bench-invoke-XXXXXX";
static bool g_dir_made;
static volatile sig_atomic_t g_stop;
static char *g_images[8]; /* every image reference built here */
static int g_nimages;

static void built(const struct image_result *r)
{
	if (r->built && g_nimages < (int)ARRAY_LEN(g_images))
		g_images[g_nimages++] = xstrdup(r->ref);
}

static void cleanup(void)
{
	if (g_docker && g_host) {
		char *e = NULL;
		size_t removed = 0;
		if (runner_sweep_orphans(g_docker, g_host, NULL, 20000, &removed, &e) < 0) {
			fprintf(stderr, "bench/invoke: sweep: %s\n", e ? e : "failed");
			free(e);
		}
		/* By reference: image_gc would skip those a parked container
		 * still holds when a signal or an error cut the run short. */
		for (int i = 0; i < g_nimages; i++) {
			char *path = xasprintf("/images/%s", g_images[i]);
			struct docker_response r;
			if (docker_request(g_docker, "DELETE", path, NULL, 0, NULL, 30000, &r) == 0)
				docker_response_free(&r);
			free(path);
			free(g_images[i]);
		}
		g_nimages = 0;
	}
	if (g_dir_made) {
		char *rm = xasprintf("rm -rf '%s'", g_dir);
		if (system(rm) != 0)
			fprintf(stderr, "bench/invoke: could not remove %s\n", g_dir);
		free(rm);
		g_dir_made = false;
	}
}

static void die(const char *what, const char *why)
{
	fprintf(stderr, "bench/invoke: %s: %s\n", what, why);
	cleanup();
	exit(1);
}

static void on_signal(int sig)
{
	g_stop = sig;
}

static void check_stop(void)
{
	if (g_stop) {
		fprintf(stderr, "bench/invoke: interrupted, removing containers\n");
		cleanup();
		exit(130);
	}
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p)
{
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	int i = (int)(p * (n - 1) + 0.5);
	return v[i];
}

static double since(int64_t t0)
{
	return (double)(now_mono_ns() - t0) / 1e9;
}

static void sleep_ns(int64_t ns)
{
	struct timespec ts = {.tv_sec = ns / 1000000000LL, .tv_nsec = ns % 1000000000LL};
	while (ns > 0 && nanosleep(&ts, &ts) < 0 && errno == EINTR)
		check_stop();
}

/* ---- bare Engine API ---------------------------------------------------- */

/* A bare container, created, attached, waited on and started. */
struct bare {
	char *id;
	struct docker_conn *attach, *waitc;
};

static struct bare bare_start(struct docker *d, const char *image, const char *function)
{
	json_t *body = json_pack(
		"{s:s, s:s, s:[s], s:{s:s, s:s}, s:b, s:b, s:b, s:b, s:b, s:b, s:{s:b, s:I, s:I, "
		"s:I, s:I, s:[s], s:b, s:{s:s}, s:[s]}}",
		"Image", image, "User", IMAGE_USER, "Env", "RELAY_HANDLER=ok.handler", "Labels",
		"relay.function", function, "relay.hostname", g_host, "AttachStdin", 1,
		"AttachStdout", 1, "AttachStderr", 1, "OpenStdin", 1, "StdinOnce", 1, "Tty", 0,
		"HostConfig", "AutoRemove", 1, "Memory", (json_int_t)RUNNER_MEMORY_BYTES,
		"MemorySwap", (json_int_t)RUNNER_MEMORY_BYTES, "NanoCpus",
		(json_int_t)RUNNER_NANO_CPUS, "PidsLimit", (json_int_t)RUNNER_PIDS_LIMIT, "CapDrop",
		"ALL", "ReadonlyRootfs", 1, "Tmpfs", "/tmp", "rw,noexec,nosuid,size=64m",
		"SecurityOpt", "no-new-privileges");
	char *text = json_dumps(body, JSON_COMPACT);
	json_decref(body);
	struct docker_response r;
	if (docker_request(d, "POST", "/containers/create", text, strlen(text), NULL, 30000, &r) <
		    0 ||
	    r.status != 201)
		die("create", docker_errmsg(d));
	free(text);
	json_t *o = json_loadb(r.body, r.len, 0, NULL);
	struct bare b = {.id = xstrdup(json_string_value(json_object_get(o, "Id")))};
	json_decref(o);
	docker_response_free(&r);
	char *path = xasprintf("/containers/%s/attach?stream=1&stdin=1&stdout=1&stderr=1", b.id);
	if (docker_hijack(d, path, &b.attach) < 0)
		die("attach", docker_errmsg(d));
	free(path);
	path = xasprintf("/containers/%s/wait?condition=next-exit", b.id);
	if (docker_hijack(d, path, &b.waitc) < 0)
		die("wait", docker_errmsg(d));
	free(path);
	path = xasprintf("/containers/%s/start", b.id);
	if (docker_request(d, "POST", path, NULL, 0, NULL, 30000, &r) < 0 || r.status != 204)
		die("start", docker_errmsg(d));
	docker_response_free(&r);
	free(path);
	return b;
}

/* The event, output to EOF, exit status; frees b. Phases in seconds from
 * t0: first output byte (out[0]), output EOF (out[1]); returns the exit. */
static double bare_finish(struct bare *b, int64_t t0, double out[2])
{
	docker_conn_write(b->attach, payload, sizeof payload - 1);
	docker_conn_close_write(b->attach);
	char buf[65536];
	out[0] = 0;
	while (docker_conn_read(b->attach, buf, sizeof buf, 30000) > 0)
		if (out[0] == 0)
			out[0] = since(t0);
	out[1] = since(t0);
	struct buf wb;
	buf_init(&wb, 65536);
	int status = -1, p = 0;
	char *err = NULL;
	while (p == 0) {
		long n = docker_conn_read(b->waitc, buf, sizeof buf, 30000);
		if (n <= 0)
			die("wait", "no exit status");
		buf_append(&wb, buf, (size_t)n);
		p = runner_parse_wait(wb.data, wb.len, &status, &err);
	}
	if (p < 0 || status != 0)
		die("bare run", "non-zero exit");
	double s = since(t0);
	buf_free(&wb);
	free(err);
	docker_conn_free(b->attach);
	docker_conn_free(b->waitc);
	free(b->id);
	return s;
}

/* One bare run; returns seconds, exits on error. */
static double bare_once(struct docker *d, const char *image, const char *function)
{
	int64_t t0 = now_mono_ns();
	struct bare b = bare_start(d, image, function);
	double out[2];
	return bare_finish(&b, t0, out);
}

/* ---- Relay's runner ----------------------------------------------------- */

static struct runner_request invocation_for(const struct rt_bench *b)
{
	struct runner_request in = {
		.function = b->function,
		.handler = "ok.handler",
		.image = b->rebuild.ref,
		.hostname = g_host,
		.timeout_ns = 30LL * 1000000000LL,
		.payload = payload,
		.payload_len = sizeof payload - 1,
		.message_id = "1700000000000-0",
		.event_id = "bench",
		.event_name = "BENCH",
	};
	return in;
}

static double ondemand_once(struct docker *d, const struct rt_bench *b)
{
	struct runner_request in = invocation_for(b);
	struct runner_result r;
	int64_t t0 = now_mono_ns();
	if (runner_invoke(d, &in, &r) < 0)
		die("on-demand run", r.error ? r.error : "failed");
	double s = since(t0);
	runner_result_free(&r);
	return s;
}

/* Parks one container; *seconds: how long runner_park took. */
static struct runner_parked *park(struct docker *d, const struct rt_bench *b, double *seconds)
{
	struct runner_request in = invocation_for(b);
	in.standby = true;
	in.payload = NULL;
	in.payload_len = 0;
	in.message_id = in.event_id = in.event_name = NULL;
	struct runner_parked *p = NULL;
	char *e = NULL;
	int64_t t0 = now_mono_ns();
	if (runner_park(d, &in, &p, &e) < 0)
		die("runner_park", e);
	*seconds = since(t0);
	return p;
}

/* Waits until p has idled STANDBY_IDLE_MS since parked_at, then times only
 * its dispatch. */
/* The same for a bare parked container, phase by phase. */
static double bare_parked_once(struct rt_bench *b, struct bare *p, int64_t parked_at, int i)
{
	sleep_ns(parked_at + STANDBY_IDLE_MS * 1000000LL - now_mono_ns());
	double out[2];
	double s = bare_finish(p, now_mono_ns(), out);
	if (i >= 0) {
		b->first[i] = out[0];
		b->eof[i] = out[1];
	}
	return s;
}

static double standby_once(struct docker *d, const struct rt_bench *b, struct runner_parked *p,
			   int64_t parked_at)
{
	int64_t left = parked_at + STANDBY_IDLE_MS * 1000000LL - now_mono_ns();
	sleep_ns(left);
	if (runner_parked_gone(p) != 0)
		die("standby", "the parked container exited before its event");
	struct runner_request in = invocation_for(b);
	struct runner_result r;
	int64_t t0 = now_mono_ns();
	if (runner_dispatch(d, &p, &in, &r) < 0 || p)
		die("standby run", p ? "not dispatched" : r.error ? r.error : "failed");
	double s = since(t0);
	runner_result_free(&r);
	return s;
}

/* ---- docker CLI --------------------------------------------------------- */

static double cli_once(const struct rt_bench *b, int in_fd, int err_fd)
{
	char *label_fn = xasprintf("relay.function=%s", b->function);
	char *label_host = xasprintf("relay.hostname=%s", g_host);
	char mem[32], tmpfs[64];
	snprintf_(mem, sizeof mem, "%lld", (long long)RUNNER_MEMORY_BYTES);
	snprintf_(tmpfs, sizeof tmpfs, "/tmp:%s", "rw,noexec,nosuid,size=64m");
	char *const argv[] = {
		"docker",
		"run",
		"--rm",
		"-i",
		"--user",
		IMAGE_USER,
		"-e",
		"RELAY_HANDLER=ok.handler",
		"--label",
		label_fn,
		"--label",
		label_host,
		"--memory",
		mem,
		"--memory-swap",
		mem,
		"--cpus",
		"1",
		"--pids-limit",
		"128",
		"--cap-drop",
		"ALL",
		"--read-only",
		"--tmpfs",
		tmpfs,
		"--security-opt",
		"no-new-privileges",
		b->rebuild.ref,
		NULL,
	};
	if (lseek(in_fd, 0, SEEK_SET) < 0 || ftruncate(err_fd, 0) < 0 ||
	    lseek(err_fd, 0, SEEK_SET) < 0)
		die("docker run", strerror(errno));
	int64_t t0 = now_mono_ns();
	pid_t pid = fork();
	if (pid < 0)
		die("fork", strerror(errno));
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);
		dup2(in_fd, 0);
		dup2(null, 1);
		dup2(err_fd, 2);
		execvp("docker", argv);
		_exit(127);
	}
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			die("waitpid", strerror(errno));
	double s = since(t0);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		char msg[512] = "";
		ssize_t n = pread(err_fd, msg, sizeof msg - 1, 0);
		msg[n > 0 ? n : 0] = 0;
		die("docker run", msg[0] ? msg : "non-zero exit");
	}
	free(label_fn);
	free(label_host);
	return s;
}

/* ---- idle cost ---------------------------------------------------------- */

static double stat_num(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	return json_is_number(v) ? json_number_value(v) : -1;
}

/* Memory of p's container after it idled STANDBY_SETTLE_MS; MiB. */
static void idle_cost(struct docker *d, const struct rt_bench *b, double *charge, double *anon)
{
	double s;
	struct runner_parked *p = park(d, b, &s);
	sleep_ns(STANDBY_SETTLE_MS * 1000000LL);
	if (runner_parked_gone(p) != 0)
		die("idle cost", "the parked container exited");
	char *path =
		xasprintf("/containers/%s/stats?stream=false&one-shot=true", runner_parked_id(p));
	struct docker_response r;
	if (docker_request(d, "GET", path, NULL, 0, NULL, 30000, &r) < 0 || r.status != 200)
		die("stats", docker_errmsg(d));
	free(path);
	json_t *o = json_loadb(r.body, r.len, 0, NULL);
	docker_response_free(&r);
	json_t *ms = json_object_get(o, "memory_stats");
	json_t *st = json_object_get(ms, "stats");
	double usage = stat_num(ms, "usage");
	double inactive = stat_num(st, "total_inactive_file"); /* cgroup v1 */
	if (inactive < 0)
		inactive = stat_num(st, "inactive_file"); /* v2 */
	double rss = stat_num(st, "total_rss");
	if (rss < 0)
		rss = stat_num(st, "anon");
	if (usage < 0 || inactive < 0 || rss < 0)
		die("stats", "no memory_stats.usage / inactive_file / rss in the answer");
	*charge = (usage - inactive) / 1048576.0;
	*anon = rss / 1048576.0;
	json_decref(o);
	runner_parked_discard(d, p, 10000);
}

/* ---- set-up ------------------------------------------------------------- */

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (!f)
		die("write", path);
	fputs(text, f);
	fclose(f);
}

/* Builds b's image, reuses it, then builds it again after an edit. */
static void prepare(struct docker *d, struct rt_bench *b)
{
	b->dir = xasprintf("%s/%s", g_dir, b->function);
	if (mkdir(b->dir, 0755) < 0)
		die("mkdir", b->dir);
	char *tpl = xasprintf("%s/template.yaml", b->dir),
	     *src = xasprintf("%s/%s", b->dir, b->file);
	char *yaml = xasprintf("runtime: %s\nevents:\n  - handler: ok.handler\n    pattern: {}\n",
			       b->runtime);
	write_file(tpl, yaml);
	char *text = xasprintf("%s bench run %d %llu\n%s", b->comment, (int)getpid(),
			       (unsigned long long)now_wall_ns(), b->code);
	write_file(src, text);
	const struct runtime *rt = runtime_find(b->runtime);
	char *e = NULL;
	if (image_prepare(d, b->function, b->dir, rt, &b->img, &e) < 0)
		die("build", e);
	built(&b->img);
	if (image_prepare(d, b->function, b->dir, rt, &b->reuse, &e) < 0)
		die("reuse", e);
	if (!b->img.built || b->reuse.built)
		die("build", "unexpected build/reuse flags");
	/* A second source change, to time a build with the daemon's cache warm. */
	char *text2 = xasprintf("%s%s edit\n", text, b->comment);
	write_file(src, text2);
	if (image_prepare(d, b->function, b->dir, rt, &b->rebuild, &e) < 0)
		die("build", e);
	built(&b->rebuild);
	free(tpl);
	free(src);
	free(yaml);
	free(text);
	free(text2);
}

/* One round: park both, then every mode for both runtimes, the order of the
 * modes rotated by round; i < 0 is the warm-up (nothing recorded). */
static void round_run(struct docker *d, struct rt_bench *bs, int nb, int i, int in_fd, int err_fd)
{
	struct runner_parked *p[2];
	struct bare bp[2];
	int64_t at[2], bat[2];
	double ps[2];
	for (int k = 0; k < nb; k++) {
		p[k] = park(d, &bs[k], &ps[k]);
		at[k] = now_mono_ns();
		bp[k] = bare_start(d, bs[k].rebuild.ref, bs[k].function);
		bat[k] = now_mono_ns();
	}
	int rot = i < 0 ? 0 : i;
	for (int m = 0; m < NMODES; m++) {
		enum mode mode = (enum mode)((m + rot) % NMODES);
		for (int k0 = 0; k0 < nb; k0++) {
			/* The runtimes alternate which goes first, too. */
			int k = (k0 + rot / NMODES) % nb;
			double s = 0;
			check_stop();
			switch (mode) {
			case M_STANDBY: s = standby_once(d, &bs[k], p[k], at[k]); break;
			case M_ONDEMAND: s = ondemand_once(d, &bs[k]); break;
			case M_CLI: s = cli_once(&bs[k], in_fd, err_fd); break;
			case M_BARE: s = bare_once(d, bs[k].rebuild.ref, bs[k].function); break;
			case M_BARE_PARKED: s = bare_parked_once(&bs[k], &bp[k], bat[k], i); break;
			case NMODES: break;
			}
			if (i >= 0)
				bs[k].t[mode][i] = s;
		}
	}
	if (i >= 0)
		for (int k = 0; k < nb; k++)
			bs[k].park[i] = ps[k];
}

int main(int argc, char **argv)
{
	int n = 30;
	if (argc > 1) {
		int64_t v;
		if (parse_int64(argv[1], &v) < 0 || v < 1 || v > 10000)
			die("usage", "bench/invoke [N]  (1..10000)");
		n = (int)v;
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);

	char *e = NULL;
	struct docker *d;
	if (docker_open(&d, &e) < 0)
		die("docker", e);
	g_docker = d;
	g_host = xasprintf("relay-bench-invoke-%d", (int)getpid());
	int devnull = open("/dev/null", O_WRONLY);
	log_set_fd(devnull);
	if (!mkdtemp(g_dir))
		die("mkdtemp", g_dir);
	g_dir_made = true;

	struct rt_bench bs[2] = {
		{.label = "Python",
		 .runtime = "python3.14",
		 .function = "bench-invoke-py",
		 .file = "ok.py",
		 .comment = "#",
		 .code = "def handler(event):\n    print('ok', event['id'])\n"},
		{.label = "Node",
		 .runtime = "node24",
		 .function = "bench-invoke-node",
		 .file = "ok.js",
		 .comment = "//",
		 .code = "export function handler(event) {\n  console.log('ok', event.id);\n}\n"},
	};
	const int nb = 2;
	for (int k = 0; k < nb; k++) {
		prepare(d, &bs[k]);
		for (int m = 0; m < NMODES; m++)
			bs[k].t[m] = xcalloc((size_t)n, sizeof(double));
		bs[k].park = xcalloc((size_t)n, sizeof(double));
		bs[k].first = xcalloc((size_t)n, sizeof(double));
		bs[k].eof = xcalloc((size_t)n, sizeof(double));
	}
	char in_path[] = "/tmp/relay-bench-invoke-in-XXXXXX";
	char err_path[] = "/tmp/relay-bench-invoke-err-XXXXXX";
	int in_fd = mkstemp(in_path), err_fd = mkstemp(err_path);
	if (in_fd < 0 || err_fd < 0)
		die("mkstemp", strerror(errno));
	unlink(in_path);
	unlink(err_path);
	if (write_all(in_fd, payload, sizeof payload - 1) < 0)
		die("write", "event file");

	int64_t t0 = now_mono_ns();
	round_run(d, bs, nb, -1, in_fd, err_fd);
	for (int i = 0; i < n; i++)
		round_run(d, bs, nb, i, in_fd, err_fd);
	double wall = since(t0);

	double charge[2], anon[2];
	for (int k = 0; k < nb; k++) {
		check_stop();
		idle_cost(d, &bs[k], &charge[k], &anon[k]);
	}

	printf("bench/invoke: %d rounds (+1 warm-up) in %.0f s; per round each mode ran once per "
	       "runtime, modes in rotated order; ms from dispatch to exit\n",
	       n, wall);
	printf("  %-27s %10s %9s   %10s %9s\n", "", "Python p50", "p95", "Node p50", "p95");
	double p50[2][NMODES], p95[2][NMODES];
	for (int k = 0; k < nb; k++)
		for (int m = 0; m < NMODES; m++) {
			p50[k][m] = pct(bs[k].t[m], n, 0.50);
			p95[k][m] = pct(bs[k].t[m], n, 0.95);
		}
	for (int m = 0; m < NMODES; m++)
		printf("  %-27s %10.1f %9.1f   %10.1f %9.1f\n", mode_names[m], p50[0][m] * 1e3,
		       p95[0][m] * 1e3, p50[1][m] * 1e3, p95[1][m] * 1e3);
	printf("  %-27s %10.1f %9.1f   %10.1f %9.1f\n", "(standby start: runner_park)",
	       pct(bs[0].park, n, 0.50) * 1e3, pct(bs[0].park, n, 0.95) * 1e3,
	       pct(bs[1].park, n, 0.50) * 1e3, pct(bs[1].park, n, 0.95) * 1e3);
	for (int k = 0; k < nb; k++)
		printf("  %-6s bare parked container, p50 from dispatch: first output %.1f ms, "
		       "output EOF %.1f ms, exit status %.1f ms\n",
		       bs[k].label, pct(bs[k].first, n, 0.50) * 1e3, pct(bs[k].eof, n, 0.50) * 1e3,
		       p50[k][M_BARE_PARKED] * 1e3);
	bool ok = true;
	for (int k = 0; k < nb; k++) {
		double sc = p50[k][M_STANDBY] / p50[k][M_CLI];
		double ob = p50[k][M_ONDEMAND] / p50[k][M_BARE];
		printf("  %-6s p50 ratios: standby / docker run %.3f (goal <= %.2f: %s), "
		       "standby / on demand %.3f, on demand / bare API %.3f (goal <= %.2f: %s)\n",
		       bs[k].label, sc, GOAL_STANDBY_VS_CLI,
		       sc <= GOAL_STANDBY_VS_CLI ? "met" : "MISSED",
		       p50[k][M_STANDBY] / p50[k][M_ONDEMAND], ob, GOAL_ONDEMAND_VS_BARE,
		       ob <= GOAL_ONDEMAND_VS_BARE ? "met" : "MISSED");
		ok = ok && sc <= GOAL_STANDBY_VS_CLI && ob <= GOAL_ONDEMAND_VS_BARE;
	}
	for (int k = 0; k < nb; k++)
		printf("  idle cost of one parked %-6s container after %d s: %.1f MiB charged "
		       "(usage - inactive_file), %.1f MiB anonymous (rss)\n",
		       bs[k].label, STANDBY_SETTLE_MS / 1000, charge[k], anon[k]);
	printf("  (memory from GET /containers/ID/stats?stream=false&one-shot=true, "
	       "memory_stats)\n");
	for (int k = 0; k < nb; k++)
		printf("  %-6s image prepare: first build %.2f s, rebuild after an edit %.2f s, "
		       "unchanged (reuse) %.1f ms\n",
		       bs[k].label, bs[k].img.seconds, bs[k].rebuild.seconds,
		       bs[k].reuse.seconds * 1e3);
	fflush(stdout);

	cleanup();
	for (int k = 0; k < nb; k++) {
		image_result_free(&bs[k].img);
		image_result_free(&bs[k].reuse);
		image_result_free(&bs[k].rebuild);
		for (int m = 0; m < NMODES; m++)
			free(bs[k].t[m]);
		free(bs[k].park);
		free(bs[k].first);
		free(bs[k].eof);
		free(bs[k].dir);
	}
	free(g_host);
	g_host = NULL;
	g_docker = NULL;
	docker_close(d);
	close(in_fd);
	close(err_fd);
	close(devnull);
	return ok ? 0 : 1;
}
