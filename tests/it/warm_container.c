/*
 * Warm containers (runner_warm_*, docs/warm-protocol.md) against the real
 * Docker daemon, with function images built from the stand-in base images
 * (scripts/standin-images): several invocations in one container, a
 * raised exception failing only its invocation, sys.exit/process.exit
 * ending the container with the fresh-mode result, a timeout removing it,
 * output attributed to its invocation (a partial last line, the frame's
 * marker byte printed by the handler, a fake frame of another token, a
 * line longer than RUNNER_LINE_MAX ending right before the frame), a
 * handler reading stdin, Python and Node. Every function name carries this
 * process id; the images are removed at the end.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "io/docker.h"
#include "engine/image.h"
#include "base/log.h"
#include "engine/runner.h"
#include "model/runtime.h"
#include "t.h"
#include "tfiles.h"
#include "base/util.h"

static struct docker *D;
static char root[256];
static char fn_py[64], fn_node[64];
static char *img_py, *img_node;

/* ---- captured log (as in engine.c) ------------------------------------ */

static int cap_pipe[2];
static pthread_t cap_thread;
static pthread_mutex_t cap_lock = PTHREAD_MUTEX_INITIALIZER;
static struct buf cap;

static void *cap_reader(void *arg)
{
	char chunk[65536];
	for (;;) {
		ssize_t n = read(cap_pipe[0], chunk, sizeof chunk);
		if (n <= 0)
			break;
		pthread_mutex_lock(&cap_lock);
		buf_append(&cap, chunk, (size_t)n);
		pthread_mutex_unlock(&cap_lock);
	}
	return NULL;
}

static void cap_sync(void)
{
	static int seq;
	char mark[48];
	int n = snprintf(mark, sizeof mark, "@@cap-sync-%d@@\n", ++seq);
	if (write(cap_pipe[1], mark, (size_t)n) != n) {
		t_failed_ = 1;
		return;
	}
	for (int i = 0; i < 1000; i++) {
		pthread_mutex_lock(&cap_lock);
		char *at = cap.data ? strstr(cap.data, mark) : NULL;
		if (at) {
			size_t off = (size_t)(at - cap.data);
			memmove(at, at + n, cap.len - off - (size_t)n + 1);
			cap.len -= (size_t)n;
		}
		pthread_mutex_unlock(&cap_lock);
		if (at)
			return;
		usleep(10 * 1000);
	}
	printf("  captured log: the reader did not catch up within 10 s\n");
	t_failed_ = 1;
}

/* Everything logged since the last call, as a copy; the capture restarts. */
static char *take_log(void)
{
	cap_sync();
	pthread_mutex_lock(&cap_lock);
	char *s = xstrdup(cap.data ? cap.data : "");
	buf_reset(&cap);
	pthread_mutex_unlock(&cap_lock);
	return s;
}

/* ---- helpers ------------------------------------------------------------ */

static char *fn_dir(const char *name)
{
	return xasprintf("%s/functions/%s", root, name);
}

static int container_status(const char *id)
{
	struct docker_response r;
	char *path = xasprintf("/containers/%s/json", id);
	int st = -1;
	if (docker_request(D, "GET", path, NULL, 0, NULL, 10000, &r) == 0)
		st = (int)r.status;
	docker_response_free(&r);
	free(path);
	return st;
}

static bool container_gone(const char *id)
{
	for (int i = 0; i < 300; i++) {
		if (container_status(id) == 404)
			return true;
		usleep(100 * 1000);
	}
	return false;
}

static bool no_cancel(void *ctx)
{
	return false;
}

static struct runner_request inv(const char *function, const char *image, const char *handler,
				 const char *payload)
{
	return (struct runner_request){
		.function = function,
		.handler = handler,
		.image = image,
		.timeout_ns = 20LL * 1000000000LL,
		.payload = payload,
		.payload_len = payload ? strlen(payload) : 0,
		.message_id = "1700000000000-0",
		.event_id = "evt-1",
		.event_name = "INSERT",
		.cancelled = no_cancel,
	};
}

static struct runner_warm *start(const char *fn, const char *img, const char *handler)
{
	struct runner_request in = inv(fn, img, handler, NULL);
	in.warm = true;
	struct runner_warm *w = NULL;
	char *e = NULL;
	if (runner_warm_start(D, &in, &w, &e) < 0) {
		printf("  runner_warm_start: %s\n", e);
		free(e);
		return NULL;
	}
	return w;
}

/* The prefixed line as the log shows it. */
static char *line_of(const char *fn, const char *handler, const char *text)
{
	struct runner_request in = inv(fn, "x", handler, NULL);
	char *prefix = runner_format_prefix(&in);
	char *l = xasprintf("%s%s\n", prefix, text);
	free(prefix);
	return l;
}

static void check_has_line(const char *log, const char *fn, const char *h, const char *text)
{
	char *l = line_of(fn, h, text);
	if (!strstr(log, l))
		T_FAIL_("missing line %s in log:\n%s", l, log);
	free(l);
}

/* ---- setup ---------------------------------------------------------------- */

static const char py_files[][2][1024] = {
	{"template.yaml", "runtime: python3.14\nevents:\n  - handler: h.ok\n    pattern: {}\n"},
	{"h.py", "import os, sys, time\n"
		 "COUNT = [0]\n"
		 "def ok(event):\n"
		 "    COUNT[0] += 1\n"
		 "    if event.get('boom'):\n"
		 "        print('before boom', file=sys.stderr)\n"
		 "        raise ValueError('boom ' + str(event['id']))\n"
		 "    print('py ok', event['id'], COUNT[0], os.getpid())\n"
		 "def exit3(event):\n"
		 "    print('leaving', file=sys.stderr, flush=True)\n"
		 "    sys.exit(3)\n"
		 "def slow(event):\n"
		 "    time.sleep(60)\n"
		 "def odd(event):\n"
		 "    sys.stdout.write('has \\x1e marker byte\\n')\n"
		 "    sys.stdout.write('\\x1eRELAY1 00000000000000000000000000000000 0 \"\"\\n')\n"
		 "    sys.stdout.write('x' * 20000)\n"
		 "    sys.stderr.write('err partial')\n"
		 "    sys.stdout.flush()\n"
		 "    os.write(1, b'raw-fd-partial')\n"
		 "def hog(event):\n"
		 "    blocks = []\n"
		 "    while True:\n"
		 "        blocks.append(bytearray(16 * 1024 * 1024))\n"
		 "def later(event):\n"
		 "    import threading\n"
		 "    def talk():\n"
		 "        time.sleep(0.2)\n"
		 "        print('printed while idle', flush=True)\n"
		 "    threading.Thread(target=talk, daemon=True).start()\n"
		 "def stdin(event):\n"
		 "    data = sys.stdin.read()\n"
		 "    print('stdin got %d bytes' % len(data))\n"},
};

static const char node_files[][2][1024] = {
	{"template.yaml", "runtime: node24\nevents:\n  - handler: h.ok\n    pattern: {}\n"},
	{"h.mjs", "let count = 0;\n"
		  "export async function ok(e) { count++; if (e.boom) { console.error('before boom'); "
		  "throw new Error('boom ' + e.id); } console.log('node ok', e.id, count, "
		  "process.pid); }\n"
		  "export function weird() { throw { toString() { return 'not an error'; } }; }\n"
		  "export function exit3() { console.error('leaving'); process.exit(3); }\n"
		  "export function slow() { return new Promise(() => setTimeout(() => {}, 60000)); }\n"
		  "export function odd() { process.stdout.write('has \\x1e marker byte\\n'); "
		  "process.stderr.write('err partial'); process.stdout.write('out partial'); }\n"
		  "export async function stdin() { let s = ''; for await (const c of process.stdin) "
		  "s += c; console.log(`stdin got ${s.length} bytes`); }\n"},
};

static char *build(const char *fn, const char *rt, const char (*files)[2][1024], size_t n)
{
	char *d = fn_dir(fn);
	for (size_t i = 0; i < n; i++)
		t_write_file(d, files[i][0], files[i][1]);
	struct image_result res;
	char *e = NULL;
	char *ref = NULL;
	if (image_prepare(D, fn, d, runtime_find(rt), &res, &e) < 0) {
		printf("  image_prepare %s: %s\n", fn, e);
		free(e);
	} else {
		ref = xstrdup(res.ref);
		image_result_free(&res);
	}
	free(d);
	return ref;
}

TEST(setup)
{
	char *e = NULL;
	signal(SIGPIPE, SIG_IGN);
	int pid = (int)getpid();
	buf_init(&cap, 64u * 1024 * 1024);
	REQUIRE(pipe(cap_pipe) == 0);
	pthread_create(&cap_thread, NULL, cap_reader, NULL);
	log_set_fd(cap_pipe[1]);
	snprintf_(root, sizeof root, "/tmp/relay-it-warm-%d", pid);
	snprintf_(fn_py, sizeof fn_py, "it-warm-py-%d", pid);
	snprintf_(fn_node, sizeof fn_node, "it-warm-node-%d", pid);
	REQUIRE(docker_open(&D, &e) == 0);
	img_py = build(fn_py, "python3.14", py_files, ARRAY_LEN(py_files));
	img_node = build(fn_node, "node24", node_files, ARRAY_LEN(node_files));
	REQUIRE(img_py && img_node);
}

/* ---- cases ---------------------------------------------------------------- */

/* Two invocations in one container, then an exception failing only its
 * invocation (the fresh-mode error), then success again in the same one. */
static void reuse_and_exception(const char *fn, const char *img, const char *label,
				bool python)
{
	const char *okh = "h.ok";
	struct runner_warm *w = start(fn, img, okh);
	REQUIRE(w);
	char id[72];
	strlcpy_(id, runner_warm_id(w), sizeof id);
	free(take_log());
	struct runner_result r;
	for (int i = 1; i <= 2; i++) {
		char payload[64];
		snprintf(payload, sizeof payload, "{\"id\":\"e%d\"}", i);
		struct runner_request in = inv(fn, img, okh, payload);
		CHECK(runner_warm_invoke(D, w, &in, &r) == 0);
		CHECK_INT(r.outcome, RUNNER_SUCCESS);
		CHECK_INT(r.exit_code, 0);
		CHECK_STR(r.container_id, id);
		runner_result_free(&r);
	}
	char *log = take_log();
	char want[64];
	snprintf(want, sizeof want, "%s ok e1 1 ", label);
	CHECK(strstr(log, want) != NULL);
	snprintf(want, sizeof want, "%s ok e2 2 ", label);
	CHECK(strstr(log, want) != NULL);
	CHECK(strstr(log, "RELAY1") == NULL);
	free(log);

	struct runner_request in = inv(fn, img, okh, "{\"id\":\"e3\",\"boom\":true}");
	CHECK(runner_warm_invoke(D, w, &in, &r) < 0);
	CHECK_INT(r.outcome, RUNNER_FAILURE);
	CHECK_INT(r.exit_code, 1);
	char *err = python ? xasprintf("function \"%s\" handler \"%s\" failed: exit status 1: relay "
				       "bootstrap: handler \"%s\" raised ValueError: boom e3 (h.py:7)",
				       fn, okh, okh)
			   : xasprintf("function \"%s\" handler \"%s\" failed: exit status 1: relay "
				       "bootstrap: handler \"%s\" raised Error: boom e3 (h.mjs:2)",
				       fn, okh, okh);
	CHECK_STR(r.error, err);
	free(err);
	runner_result_free(&r);
	CHECK(runner_warm_alive(w));
	CHECK_INT(runner_warm_gone(w), 0);
	log = take_log();
	check_has_line(log, fn, okh, "before boom");
	free(log);

	in = inv(fn, img, okh, "{\"id\":\"e4\"}");
	CHECK(runner_warm_invoke(D, w, &in, &r) == 0);
	CHECK_STR(r.container_id, id);
	runner_result_free(&r);
	log = take_log();
	snprintf(want, sizeof want, "%s ok e4 4 ", label);
	CHECK(strstr(log, want) != NULL);
	free(log);
	runner_warm_discard(D, w, 0);
	CHECK(container_gone(id));
}

TEST(python_reuse_and_exception)
{
	reuse_and_exception(fn_py, img_py, "py", true);
}

TEST(node_reuse_and_exception)
{
	reuse_and_exception(fn_node, img_node, "node", false);
}

TEST(node_throws_a_non_error)
{
	struct runner_warm *w = start(fn_node, img_node, "h.weird");
	REQUIRE(w);
	struct runner_request in = inv(fn_node, img_node, "h.weird", "{}");
	struct runner_result r;
	CHECK(runner_warm_invoke(D, w, &in, &r) < 0);
	char *err = xasprintf("function \"%s\" handler \"h.weird\" failed: exit status 1: relay "
			      "bootstrap: handler \"h.weird\" raised not an error",
			      fn_node);
	CHECK_STR(r.error, err);
	free(err);
	runner_result_free(&r);
	CHECK(runner_warm_alive(w));
	runner_warm_discard(D, w, 0);
}

static void exit3(const char *fn, const char *img)
{
	struct runner_warm *w = start(fn, img, "h.exit3");
	REQUIRE(w);
	char id[72];
	strlcpy_(id, runner_warm_id(w), sizeof id);
	struct runner_request in = inv(fn, img, "h.exit3", "{}");
	struct runner_result r;
	CHECK(runner_warm_invoke(D, w, &in, &r) < 0);
	CHECK_INT(r.outcome, RUNNER_FAILURE);
	CHECK_INT(r.exit_code, 3);
	char *err = xasprintf("function \"%s\" handler \"h.exit3\" failed: exit status 3: leaving",
			      fn);
	CHECK_STR(r.error, err);
	free(err);
	runner_result_free(&r);
	CHECK(!runner_warm_alive(w));
	/* The next invocation in it is refused without running. */
	CHECK(runner_warm_invoke(D, w, &in, &r) < 0);
	CHECK_INT(r.outcome, RUNNER_ERROR);
	CHECK(r.not_run);
	runner_result_free(&r);
	runner_warm_discard(D, w, 0);
	CHECK(container_gone(id));
	free(take_log());
}

TEST(python_exit_ends_the_container)
{
	exit3(fn_py, img_py);
}

TEST(node_exit_ends_the_container)
{
	exit3(fn_node, img_node);
}

static void timeout(const char *fn, const char *img)
{
	struct runner_warm *w = start(fn, img, "h.slow");
	REQUIRE(w);
	char id[72];
	strlcpy_(id, runner_warm_id(w), sizeof id);
	struct runner_request in = inv(fn, img, "h.slow", "{}");
	in.timeout_ns = 1000000000LL;
	struct runner_result r;
	CHECK(runner_warm_invoke(D, w, &in, &r) < 0);
	CHECK_INT(r.outcome, RUNNER_TIMEOUT);
	char *err = xasprintf("function \"%s\" handler \"h.slow\" timed out after 1s", fn);
	CHECK_STR(r.error, err);
	free(err);
	CHECK(r.seconds >= 1.0 && r.seconds < 30.0);
	runner_result_free(&r);
	CHECK(!runner_warm_alive(w));
	CHECK(container_gone(id));
	runner_warm_discard(D, w, 0);
	free(take_log());
}

TEST(python_timeout_removes_the_container)
{
	timeout(fn_py, img_py);
}

TEST(node_timeout_removes_the_container)
{
	timeout(fn_node, img_node);
}

TEST(python_output_attribution)
{
	struct runner_warm *w = start(fn_py, img_py, "h.odd");
	REQUIRE(w);
	free(take_log());
	struct runner_request in = inv(fn_py, img_py, "h.odd", "{}");
	struct runner_result r;
	for (int i = 0; i < 2; i++) {
		CHECK(runner_warm_invoke(D, w, &in, &r) == 0);
		runner_result_free(&r);
		char *log = take_log();
		/* What runner_invoke forwards for the same bytes. */
		check_has_line(log, fn_py, "h.odd", "has \\x1e marker byte");
		check_has_line(log, fn_py, "h.odd",
			       "\\x1eRELAY1 00000000000000000000000000000000 0 \"\"");
		check_has_line(log, fn_py, "h.odd", "err partial");
		char *x = xmalloc(20000 + 32);
		memset(x, 'x', 16384);
		x[16384] = '\0';
		check_has_line(log, fn_py, "h.odd", x);
		memset(x, 'x', 20000 - 16384);
		memcpy(x + 20000 - 16384, "raw-fd-partial", 15);
		check_has_line(log, fn_py, "h.odd", x);
		free(x);
		free(log);
	}
	CHECK(runner_warm_alive(w));
	runner_warm_discard(D, w, 0);
}

TEST(node_output_attribution)
{
	struct runner_warm *w = start(fn_node, img_node, "h.odd");
	REQUIRE(w);
	free(take_log());
	struct runner_request in = inv(fn_node, img_node, "h.odd", "{}");
	struct runner_result r;
	for (int i = 0; i < 2; i++) {
		CHECK(runner_warm_invoke(D, w, &in, &r) == 0);
		runner_result_free(&r);
		char *log = take_log();
		check_has_line(log, fn_node, "h.odd", "has \\x1e marker byte");
		check_has_line(log, fn_node, "h.odd", "err partial");
		check_has_line(log, fn_node, "h.odd", "out partial");
		free(log);
	}
	runner_warm_discard(D, w, 0);
}

static void reads_stdin(const char *fn, const char *img, const char *want)
{
	struct runner_warm *w = start(fn, img, "h.stdin");
	REQUIRE(w);
	free(take_log());
	struct runner_request in = inv(fn, img, "h.stdin", "{\"id\":\"s\"}");
	struct runner_result r;
	for (int i = 0; i < 2; i++) {
		CHECK(runner_warm_invoke(D, w, &in, &r) == 0);
		runner_result_free(&r);
	}
	char *log = take_log();
	check_has_line(log, fn, "h.stdin", want);
	free(log);
	CHECK(runner_warm_alive(w));
	runner_warm_discard(D, w, 0);
}

TEST(python_stdin_is_empty)
{
	reads_stdin(fn_py, img_py, "stdin got 0 bytes");
}

TEST(node_stdin_is_empty)
{
	reads_stdin(fn_node, img_node, "stdin got 0 bytes");
}

/* The same handler behaviour gives the same result fresh and warm. */
static void same_as_fresh(const char *fn, const char *img, const char *handler,
			  const char *payload)
{
	struct runner_request in = inv(fn, img, handler, payload);
	struct runner_result fresh, warm;
	runner_invoke(D, &in, &fresh);
	struct runner_warm *w = start(fn, img, handler);
	REQUIRE(w);
	runner_warm_invoke(D, w, &in, &warm);
	CHECK_INT(warm.outcome, fresh.outcome);
	CHECK_INT(warm.exit_code, fresh.exit_code);
	CHECK_STR(warm.error ? warm.error : "", fresh.error ? fresh.error : "");
	runner_result_free(&fresh);
	runner_result_free(&warm);
	runner_warm_discard(D, w, 0);
	free(take_log());
}

TEST(results_same_as_fresh)
{
	same_as_fresh(fn_py, img_py, "h.ok", "{\"id\":\"f1\"}");
	same_as_fresh(fn_py, img_py, "h.ok", "{\"id\":\"f2\",\"boom\":1}");
	same_as_fresh(fn_py, img_py, "h.ok", "not json");
	same_as_fresh(fn_py, img_py, "h.exit3", "{}");
	same_as_fresh(fn_node, img_node, "h.ok", "{\"id\":\"f3\",\"boom\":1}");
	same_as_fresh(fn_node, img_node, "h.ok", "not json");
	same_as_fresh(fn_node, img_node, "h.weird", "{}");
	same_as_fresh(fn_node, img_node, "h.exit3", "{}");
}

TEST(python_oom_ends_the_container)
{
	struct runner_warm *w = start(fn_py, img_py, "h.hog");
	REQUIRE(w);
	char id[72];
	strlcpy_(id, runner_warm_id(w), sizeof id);
	struct runner_request in = inv(fn_py, img_py, "h.hog", "{}");
	struct runner_result r;
	CHECK(runner_warm_invoke(D, w, &in, &r) < 0);
	CHECK_INT(r.outcome, RUNNER_FAILURE);
	CHECK_INT(r.exit_code, 137);
	CHECK(r.error && strstr(r.error, "exit status 137: killed: out of memory") != NULL);
	runner_result_free(&r);
	CHECK(!runner_warm_alive(w));
	CHECK(container_gone(id));
	runner_warm_discard(D, w, 0);
	free(take_log());
}

static bool yes_cancel(void *ctx)
{
	return true;
}

TEST(cancel_removes_the_container)
{
	struct runner_warm *w = start(fn_py, img_py, "h.slow");
	REQUIRE(w);
	char id[72];
	strlcpy_(id, runner_warm_id(w), sizeof id);
	struct runner_request in = inv(fn_py, img_py, "h.slow", "{}");
	in.cancelled = yes_cancel;
	struct runner_result r;
	CHECK(runner_warm_invoke(D, w, &in, &r) < 0);
	CHECK_INT(r.outcome, RUNNER_CANCELLED);
	runner_result_free(&r);
	CHECK(!runner_warm_alive(w));
	CHECK(container_gone(id));
	runner_warm_discard(D, w, 0);
}

/* Output a handler's thread prints while the container is idle is
 * forwarded by runner_warm_gone with the function/handler prefix. */
TEST(idle_output_is_forwarded)
{
	struct runner_warm *w = start(fn_py, img_py, "h.later");
	REQUIRE(w);
	free(take_log());
	struct runner_request in = inv(fn_py, img_py, "h.later", "{}");
	struct runner_result r;
	CHECK(runner_warm_invoke(D, w, &in, &r) == 0);
	runner_result_free(&r);
	char *want = line_of(fn_py, "h.later", "printed while idle");
	bool seen = false;
	struct buf all;
	buf_init(&all, 1u << 20);
	for (int i = 0; i < 300 && !seen; i++) {
		CHECK_INT(runner_warm_gone(w), 0);
		char *log = take_log();
		buf_appendf(&all, "%s", log);
		free(log);
		seen = all.data && strstr(all.data, want);
		if (!seen)
			usleep(50 * 1000);
	}
	CHECK(seen);
	free(want);
	buf_free(&all);
	/* Still serves the next invocation. */
	CHECK(runner_warm_invoke(D, w, &in, &r) == 0);
	runner_result_free(&r);
	runner_warm_discard(D, w, 0);
	free(take_log());
}

/* Bounded while idle, lifted by the next invocation. */
static long long nano_cpus(const char *id)
{
	struct docker_response r;
	char *path = xasprintf("/containers/%s/json", id);
	long long v = -1;
	if (docker_request(D, "GET", path, NULL, 0, NULL, 10000, &r) == 0 && r.status == 200) {
		json_t *o = json_loadb(r.body, r.len, 0, NULL);
		v = json_integer_value(
			json_object_get(json_object_get(o, "HostConfig"), "NanoCpus"));
		json_decref(o);
	}
	docker_response_free(&r);
	free(path);
	return v;
}

TEST(bound_while_idle_lifted_for_the_invocation)
{
	struct runner_warm *w = start(fn_py, img_py, "h.ok");
	REQUIRE(w);
	CHECK(runner_warm_bound(D, w, 10000) == 0);
	CHECK_INT(nano_cpus(runner_warm_id(w)), RUNNER_PARKED_NANO_CPUS);
	struct runner_request in = inv(fn_py, img_py, "h.ok", "{\"id\":\"b\"}");
	struct runner_result r;
	CHECK(runner_warm_invoke(D, w, &in, &r) == 0);
	runner_result_free(&r);
	CHECK_INT(nano_cpus(runner_warm_id(w)), RUNNER_NANO_CPUS);
	runner_warm_discard(D, w, 0);
	free(take_log());
}

TEST(labels_and_env)
{
	struct runner_warm *w = start(fn_py, img_py, "h.ok");
	REQUIRE(w);
	struct docker_response r;
	char *path = xasprintf("/containers/%s/json", runner_warm_id(w));
	REQUIRE(docker_request(D, "GET", path, NULL, 0, NULL, 10000, &r) == 0);
	json_t *o = json_loadb(r.body, r.len, 0, NULL);
	json_t *labels = json_object_get(json_object_get(o, "Config"), "Labels");
	CHECK_STR(json_string_value(json_object_get(labels, "relay.warm")), "true");
	CHECK(strstr(json_string_value(json_object_get(o, "Name")), "-warm-") != NULL);
	bool has = false;
	size_t i;
	json_t *v;
	json_array_foreach(json_object_get(json_object_get(o, "Config"), "Env"), i, v)
		has = has || strcmp(json_string_value(v), "RELAY_WARM=1") == 0;
	CHECK(has);
	json_decref(o);
	docker_response_free(&r);
	free(path);
	runner_warm_discard(D, w, 0);
}

TEST(cleanup)
{
	char *e = NULL;
	const char *mine[] = {fn_py, fn_node};
	for (size_t i = 0; i < ARRAY_LEN(mine); i++)
		if (image_gc(D, mine[i], NULL, 0, NULL, &e) < 0) {
			printf("  %s\n", e);
			free(e);
			e = NULL;
		}
	char *rm = xasprintf("rm -rf '%s'", root);
	CHECK(system(rm) == 0);
	free(rm);
	free(img_py);
	free(img_node);
	docker_close(D);
	log_set_fd(2);
	close(cap_pipe[1]);
	pthread_join(cap_thread, NULL);
	buf_free(&cap);
}

T_MAIN(T_FIXTURE(setup), T_CASE(python_reuse_and_exception), T_CASE(node_reuse_and_exception),
       T_CASE(node_throws_a_non_error), T_CASE(python_exit_ends_the_container),
       T_CASE(node_exit_ends_the_container), T_CASE(python_timeout_removes_the_container),
       T_CASE(node_timeout_removes_the_container), T_CASE(python_output_attribution),
       T_CASE(node_output_attribution), T_CASE(python_stdin_is_empty),
       T_CASE(node_stdin_is_empty), T_CASE(results_same_as_fresh),
       T_CASE(python_oom_ends_the_container), T_CASE(cancel_removes_the_container),
       T_CASE(idle_output_is_forwarded), T_CASE(bound_while_idle_lifted_for_the_invocation),
       T_CASE(labels_and_env), T_FIXTURE(cleanup))
