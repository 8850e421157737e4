/*
 * bench/invoke: latency of one handler invocation through Relay's runner
 * versus the same container settings driven by bare Engine API calls, plus
 * the time to prepare a function image when it exists (reuse) and when its
 * source changed (build).
 *
 *   build/bench/invoke [N]     (default N = 30; needs Docker and the
 *                               python:3.14-slim image)
 *
 * Both paths use the same image, the same HostConfig and the same call
 * sequence the daemon needs for a correct AutoRemove run: create, attach,
 * wait (condition=next-exit, registered before start), start, stdin +
 * half-close, read output to EOF, exit status. The bare path skips
 * everything Relay adds: secret resolution, label bounding, line splitting
 * and forwarding, metrics, image holds. Runs alternate (relay, bare, relay,
 * ...) after one warm-up each, so daemon drift hits both alike. Relay's
 * forwarded output goes to /dev/null.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "docker.h"
#include "image.h"
#include "log.h"
#include "runner.h"
#include "runtime.h"
#include "util.h"

static const char payload[] = "{\"id\":\"bench\"}";

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

static void die(const char *what, const char *why)
{
	fprintf(stderr, "bench/invoke: %s: %s\n", what, why);
	exit(1);
}

/* One bare run; returns seconds, exits on error. */
static double bare_once(struct docker *d, const char *image)
{
	int64_t t0 = now_mono_ns();
	json_t *body = json_pack(
		"{s:s, s:s, s:[s], s:b, s:b, s:b, s:b, s:b, s:b, s:{s:b, s:I, s:I, s:I, s:I, "
		"s:[s], "
		"s:b, s:{s:s}, s:[s]}}",
		"Image", image, "User", "10001:10001", "Env", "RELAY_HANDLER=ok.handler",
		"AttachStdin", 1, "AttachStdout", 1, "AttachStderr", 1, "OpenStdin", 1, "StdinOnce",
		1, "Tty", 0, "HostConfig", "AutoRemove", 1, "Memory", (json_int_t)134217728,
		"MemorySwap", (json_int_t)134217728, "NanoCpus", (json_int_t)1000000000,
		"PidsLimit", (json_int_t)128, "CapDrop", "ALL", "ReadonlyRootfs", 1, "Tmpfs",
		"/tmp", "rw,noexec,nosuid,size=64m", "SecurityOpt", "no-new-privileges");
	char *text = json_dumps(body, JSON_COMPACT);
	json_decref(body);
	struct docker_response r;
	if (docker_request(d, "POST", "/containers/create", text, strlen(text), NULL, 30000, &r) <
		    0 ||
	    r.status != 201)
		die("create", docker_errmsg(d));
	free(text);
	json_t *o = json_loadb(r.body, r.len, 0, NULL);
	char *id = xstrdup(json_string_value(json_object_get(o, "Id")));
	json_decref(o);
	docker_response_free(&r);
	struct docker_conn *a, *w;
	char *path = xasprintf("/containers/%s/attach?stream=1&stdin=1&stdout=1&stderr=1", id);
	if (docker_hijack(d, path, &a) < 0)
		die("attach", docker_errmsg(d));
	free(path);
	path = xasprintf("/containers/%s/wait?condition=next-exit", id);
	if (docker_hijack(d, path, &w) < 0)
		die("wait", docker_errmsg(d));
	free(path);
	path = xasprintf("/containers/%s/start", id);
	if (docker_request(d, "POST", path, NULL, 0, NULL, 30000, &r) < 0 || r.status != 204)
		die("start", docker_errmsg(d));
	docker_response_free(&r);
	free(path);
	docker_conn_write(a, payload, sizeof payload - 1);
	docker_conn_close_write(a);
	char buf[65536];
	while (docker_conn_read(a, buf, sizeof buf, 30000) > 0)
		;
	struct buf wb;
	buf_init(&wb, 65536);
	int status = -1, p = 0;
	char *err = NULL;
	while (p == 0) {
		long n = docker_conn_read(w, buf, sizeof buf, 30000);
		if (n <= 0)
			die("wait", "no exit status");
		buf_append(&wb, buf, (size_t)n);
		p = runner_parse_wait(wb.data, wb.len, &status, &err);
	}
	if (p < 0 || status != 0)
		die("bare run", "non-zero exit");
	buf_free(&wb);
	free(err);
	docker_conn_free(a);
	docker_conn_free(w);
	free(id);
	return (double)(now_mono_ns() - t0) / 1e9;
}

static double relay_once(struct docker *d, const char *image)
{
	struct invocation in = {
		.function = "bench-invoke",
		.handler = "ok.handler",
		.image = image,
		.timeout_ns = 30LL * 1000000000LL,
		.payload = payload,
		.payload_len = sizeof payload - 1,
		.message_id = "1700000000000-0",
		.event_id = "bench",
		.event_name = "BENCH",
	};
	struct invocation_result r;
	int64_t t0 = now_mono_ns();
	if (runner_invoke(d, &in, &r) < 0)
		die("relay run", r.error ? r.error : "failed");
	double s = (double)(now_mono_ns() - t0) / 1e9;
	invocation_result_free(&r);
	return s;
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (!f)
		die("write", path);
	fputs(text, f);
	fclose(f);
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
	char *e = NULL;
	struct docker *d;
	if (docker_open(&d, &e) < 0)
		die("docker", e);
	int devnull = open("/dev/null", O_WRONLY);
	log_set_fd(devnull);

	char dir[] = "/tmp/relay-bench-invoke-XXXXXX";
	if (!mkdtemp(dir))
		die("mkdtemp", dir);
	char *tpl = xasprintf("%s/template.yaml", dir), *ok = xasprintf("%s/ok.py", dir);
	write_file(tpl, "runtime: python3.14\nevents:\n  - handler: ok.handler\n    pattern: {}\n");
	char *src = xasprintf(
		"# bench run %d %llu\ndef handler(event):\n    print('ok', event['id'])\n",
		(int)getpid(), (unsigned long long)now_wall_ns());
	write_file(ok, src);
	const struct runtime *rt = runtime_find("python3.14");

	/* Image preparation: a changed source builds, an unchanged one reuses. */
	struct image_result built, reused;
	if (image_prepare(d, "bench-invoke", dir, rt, &built, &e) < 0)
		die("build", e);
	if (image_prepare(d, "bench-invoke", dir, rt, &reused, &e) < 0)
		die("reuse", e);
	if (!built.built || reused.built)
		die("build", "unexpected build/reuse flags");
	/* A second source change, to time a build with the daemon's cache warm. */
	char *src2 = xasprintf("%s# edit\n", src);
	write_file(ok, src2);
	struct image_result built2;
	if (image_prepare(d, "bench-invoke", dir, rt, &built2, &e) < 0)
		die("build", e);

	double *rel = xcalloc((size_t)n, sizeof *rel), *bare = xcalloc((size_t)n, sizeof *bare);
	relay_once(d, built2.ref);
	bare_once(d, built2.ref);
	for (int i = 0; i < n; i++) {
		rel[i] = relay_once(d, built2.ref);
		bare[i] = bare_once(d, built2.ref);
	}
	double r50 = pct(rel, n, 0.50), r95 = pct(rel, n, 0.95);
	double b50 = pct(bare, n, 0.50), b95 = pct(bare, n, 0.95);
	printf("bench/invoke: %d invocations each of a trivial Python handler (%s)\n", n,
	       built2.ref);
	printf("  relay runner   p50 %7.1f ms   p95 %7.1f ms\n", r50 * 1e3, r95 * 1e3);
	printf("  bare API calls p50 %7.1f ms   p95 %7.1f ms\n", b50 * 1e3, b95 * 1e3);
	printf("  ratio relay/bare  p50 %.3f   p95 %.3f   (target p50 <= 1.10)\n", r50 / b50,
	       r95 / b95);
	printf("  image prepare: first build %.2f s, rebuild after an edit %.2f s, "
	       "unchanged (reuse) %.1f ms\n",
	       built.seconds, built2.seconds, reused.seconds * 1e3);

	const char *keep[] = {NULL};
	image_gc(d, "bench-invoke", keep, 0, NULL, &e);
	image_result_free(&built);
	image_result_free(&built2);
	image_result_free(&reused);
	char *rm = xasprintf("rm -rf '%s'", dir);
	if (system(rm) != 0)
		fprintf(stderr, "bench/invoke: could not remove %s\n", dir);
	free(rm);
	free(tpl);
	free(ok);
	free(src);
	free(src2);
	free(rel);
	free(bare);
	docker_close(d);
	close(devnull);
	return r50 / b50 <= 1.10 ? 0 : 1;
}
