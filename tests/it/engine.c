/*
 * The execution engine against the real Docker daemon: runtimes and
 * bootstraps, image builds and reuse, hardened containers, output
 * forwarding, timeouts, hygiene, the orphan sweep, env and secret injection;
 * through a socket proxy that holds the daemon's answers, the time bounds of
 * every phase and the removal of a container whose create timed out; through
 * a consumer on a private redis-server, the in_flight_invocations gauge and
 * the running marker while a handler runs.
 *
 * Needs a daemon on DOCKER_HOST and the python:3.14-slim and node:24-alpine
 * images (scripts/standin-images makes stand-ins). Every function name
 * carries this process id, so parallel runs never share images or
 * containers; each image built here is removed at the end (the shared
 * example images excepted). Images are built once and shared between cases.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <jansson.h>

#include "engine/consumer.h"
#include "io/docker.h"
#include "base/duration.h"
#include "engine/executor.h"
#include "model/fingerprint.h"
#include "model/function.h"
#include "engine/image.h"
#include "engine/invocation.h"
#include "itlib.h"
#include "base/log.h"
#include "engine/metrics.h"
#include "engine/registry.h"
#include "engine/runner.h"
#include "model/runtime.h"
#include "model/secret.h"
#include "t.h"
#include "tfiles.h"
#include "base/util.h"

/* ---- fixture ---------------------------------------------------------- */

static struct docker *D;
static char root[256]; /* temporary directory of this run */
static char data_dir[300];
static struct secret_provider *SP;
static int pid;
static char canary[64];

/* Names of this run's functions. */
static char fn_py[64], fn_node[64], fn_cjs[64], fn_req1[64], fn_req2[64], fn_edit[64];
/* Image refs once built. */
static char img_py[128], img_node[128], img_cjs[128];
static char dep_ref_req[128];

/* Captured log output: everything Relay writes through log.h. */
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

/* Waits until the reader has everything written so far: a marker line
 * written into the same pipe comes after every earlier write, so once the
 * reader has it, nothing before it is still in flight. The marker is
 * removed again. */
static void cap_sync(void)
{
	static int seq;
	char mark[48];
	int n = snprintf(mark, sizeof mark, "@@cap-sync-%d@@\n", ++seq);
	if (write(cap_pipe[1], mark, (size_t)n) != n) {
		fprintf(stdout, "  captured log: cannot write the sync marker\n");
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
	fprintf(stdout, "  captured log: the reader did not catch up within 10 s\n");
	t_failed_ = 1;
}

/* Everything logged so far, as a copy. */
static char *captured(void)
{
	cap_sync();
	pthread_mutex_lock(&cap_lock);
	char *s = xstrdup(cap.data ? cap.data : "");
	pthread_mutex_unlock(&cap_lock);
	return s;
}

static void cap_reset(void)
{
	cap_sync();
	pthread_mutex_lock(&cap_lock);
	buf_reset(&cap);
	pthread_mutex_unlock(&cap_lock);
}

static char *fn_dir(const char *name)
{
	return xasprintf("%s/functions/%s", root, name);
}

static const char py_template[] = "runtime: python3.14\nevents:\n  - handler: ok.handler\n"
				  "    pattern: {}\n";
static const char node_template[] = "runtime: node24\nevents:\n  - handler: ok.sync\n"
				    "    pattern: {}\n";

static void make_python_function(const char *name)
{
	char *d = fn_dir(name);
	t_write_file(d, "template.yaml", py_template);
	t_write_file(d, "ok.py", "def handler(event):\n    print('py sync ok', event['id'])\n");
	t_write_file(d, "aio.py",
		     "import asyncio\n"
		     "async def handler(event):\n"
		     "    await asyncio.sleep(0.01)\n"
		     "    print('py async ok', event['id'])\n");
	t_write_file(d, "fail.py",
		     "import sys\n"
		     "def exit3(event):\n    sys.exit(3)\n"
		     "def boom(event):\n    raise ValueError('boom ' + str(event['id']))\n");
	t_write_file(d, "events/created.py",
		     "def handler(event):\n    print('nested created', event['id'])\n");
	t_write_file(d, "out.py",
		     "import sys\n"
		     "def handler(event):\n"
		     "    for i in range(3):\n"
		     "        print('out', i, flush=True)\n"
		     "        print('err', i, file=sys.stderr, flush=True)\n"
		     "    sys.stdout.write('x' * 40000 + '\\n')\n"
		     "    sys.stdout.write('tail-without-newline')\n");
	t_write_file(d, "slow.py", "import time\ndef handler(event):\n    time.sleep(60)\n");
	t_write_file(d, "envdump.py",
		     "import os\n"
		     "def handler(event):\n"
		     "    print('API_URL=' + os.environ.get('API_URL', '<unset>'))\n"
		     "    print('DB_URL=' + os.environ.get('DB_URL', '<unset>'))\n"
		     "    print('UID=%d' % os.getuid())\n"
		     "    print('HANDLER=' + os.environ['RELAY_HANDLER'])\n");
	free(d);
}

static void make_node_function(const char *name)
{
	char *d = fn_dir(name);
	t_write_file(d, "template.yaml", node_template);
	/* `export` in a .js file: only valid because Relay injects
	 * {"type":"module"} (the function has no package.json). */
	t_write_file(d, "ok.js",
		     "export function sync(event) { console.log('node sync ok', event.id); }\n"
		     "export async function aio(event) {\n"
		     "  await new Promise((r) => setTimeout(r, 10));\n"
		     "  console.log('node async ok', event.id);\n"
		     "}\n");
	t_write_file(d, "fail.js",
		     "export function exit4() { process.exit(4); }\n"
		     "export function boom() { throw new TypeError('node boom'); }\n"
		     "export async function reject() { throw new Error('node rejected'); }\n");
	t_write_file(d, "events/created.js",
		     "export const handler = (event) => console.log('node nested created', "
		     "event.id);\n");
	t_write_file(d, "out.js",
		     "export function handler() {\n"
		     "  for (let i = 0; i < 3; i++) { console.log('out', i); console.error('err', "
		     "i); }\n"
		     "}\n");
	t_write_file(d, "slow.js",
		     "export function handler() { return new Promise(() => setTimeout(() => {}, "
		     "60000)); }\n");
	free(d);
}

static void make_cjs_function(const char *name)
{
	char *d = fn_dir(name);
	t_write_file(d, "template.yaml", node_template);
	t_write_file(d, "package.json", "{\"name\": \"cjs-handler\", \"version\": \"1.0.0\"}\n");
	t_write_file(
		d, "h.js",
		"const path = require('path');\n"
		"exports.handler = function (event) {\n"
		"  console.log('cjs ok', event.id, typeof require, path.basename('/a/b.txt'));\n"
		"};\n");
	free(d);
}

static int prepare(const char *name, const char *rtname, struct image_result *res, char **err)
{
	char *d = fn_dir(name);
	int rc = image_prepare(D, name, d, runtime_find(rtname), res, err);
	free(d);
	return rc;
}

/* prepare, printing the error when it fails: for a build the test needs. */
static int prepare_said(const char *name, const char *rtname, struct image_result *res)
{
	char *e = NULL;
	int rc = prepare(name, rtname, res, &e);
	if (rc < 0)
		printf("  %s\n", e);
	free(e);
	return rc;
}

static bool no_cancel(void *ctx)
{
	return false;
}

static struct runner_request inv(const char *function, const char *image, const char *handler)
{
	static const char payload[] = "{\"id\":\"evt-1\",\"event_name\":\"INSERT\"}";
	return (struct runner_request){
		.function = function,
		.handler = handler,
		.image = image,
		.timeout_ns = 20LL * 1000000000LL,
		.payload = payload,
		.payload_len = sizeof payload - 1,
		.message_id = "1700000000000-0",
		.event_id = "evt-1",
		.event_name = "INSERT",
		.cancelled = no_cancel,
	};
}

/* The invocation gets API_URL as a plain variable. */
static void with_api_env(struct runner_request *in)
{
	static const struct env_var env[] = {{"API_URL", "https://api.example.com"}};
	in->env = env;
	in->nenv = 1;
}

/* The invocation gets the secret "it-db" (set by the test) as DB_URL. */
static void with_db_secret(struct runner_request *in)
{
	static const struct env_var secrets[] = {{"DB_URL", "it-db"}};
	in->secrets = secrets;
	in->nsecrets = 1;
	in->provider = SP;
}

static int invoke(const char *function, const char *image, const char *handler,
		  struct runner_result *res)
{
	struct runner_request in = inv(function, image, handler);
	return runner_invoke(D, &in, res);
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

/* Waits up to 30 s for the container to be gone (AutoRemove is async and
 * slow on a loaded machine). */
static bool container_gone(const char *id)
{
	for (int i = 0; i < 300; i++) {
		if (container_status(id) == 404)
			return true;
		usleep(100 * 1000);
	}
	return false;
}

/* Containers labelled relay.function=<name> (all states, or only running
 * ones), as a JSON array (NULL when the daemon did not answer). */
static json_t *labelled_containers_in(const char *name, bool all)
{
	char *q = xasprintf("{\"label\":[\"relay.function=%s\"]}", name);
	struct buf enc;
	buf_init(&enc, 4096);
	for (const char *p = q; *p; p++) {
		if ((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '.')
			buf_append(&enc, p, 1);
		else
			buf_appendf(&enc, "%%%02X", (unsigned char)*p);
	}
	char *path = xasprintf("/containers/json?%sfilters=%s", all ? "all=1&" : "", enc.data);
	struct docker_response r;
	json_t *a = NULL;
	if (docker_request(D, "GET", path, NULL, 0, NULL, 10000, &r) == 0 && r.status == 200) {
		a = json_loadb(r.body, r.len, 0, NULL);
		if (!json_is_array(a)) {
			json_decref(a);
			a = NULL;
		}
	}
	docker_response_free(&r);
	free(path);
	buf_free(&enc);
	free(q);
	return a;
}

/* Containers (all states) labelled relay.function=<name>. */
static json_t *labelled_containers(const char *name)
{
	return labelled_containers_in(name, true);
}

static int count_containers(const char *name)
{
	json_t *a = labelled_containers(name);
	int n = a ? (int)json_array_size(a) : -1;
	json_decref(a);
	return n;
}

/* How many containers labelled relay.function=name are left once there
 * are none, or after tries * 100 ms (AutoRemove takes its time). */
static int containers_left(const char *name, int tries)
{
	int n = -1;
	for (int i = 0; i < tries; i++) {
		n = count_containers(name);
		if (n == 0)
			break;
		usleep(100 * 1000);
	}
	return n;
}

/* ---- setup ------------------------------------------------------------ */

TEST(setup)
{
	char *e = NULL;
	/* As in relay start: a write to a connection the other side closed
	 * (the runner drops a timed-out container's attach stream before its
	 * removal) is an EPIPE, not the end of the process (the socket
	 * proxy's forwarding threads write so). */
	signal(SIGPIPE, SIG_IGN);
	pid = (int)getpid();
	buf_init(&cap, 64u * 1024 * 1024);
	REQUIRE(pipe(cap_pipe) == 0);
	pthread_create(&cap_thread, NULL, cap_reader, NULL);
	log_set_fd(cap_pipe[1]);
	snprintf_(root, sizeof root, "/tmp/relay-it-engine-%d", pid);
	snprintf_(data_dir, sizeof data_dir, "%s/data", root);
	snprintf_(canary, sizeof canary, "canary-%d-%lu", pid, (unsigned long)now_wall_ns());
	snprintf_(fn_py, sizeof fn_py, "it-eng-py-%d", pid);
	snprintf_(fn_node, sizeof fn_node, "it-eng-node-%d", pid);
	snprintf_(fn_cjs, sizeof fn_cjs, "it-eng-cjs-%d", pid);
	snprintf_(fn_req1, sizeof fn_req1, "it-eng-req1-%d", pid);
	snprintf_(fn_req2, sizeof fn_req2, "it-eng-req2-%d", pid);
	snprintf_(fn_edit, sizeof fn_edit, "it-eng-edit-%d", pid);
	REQUIRE(docker_open(&D, &e) == 0);
	SP = secret_file_provider_new(data_dir);
	make_python_function(fn_py);
	make_node_function(fn_node);
	make_cjs_function(fn_cjs);
	REQUIRE(image_exists(D, "python:3.14-slim", &e) == 1);
	REQUIRE(image_exists(D, "node:24-alpine", &e) == 1);
}

TEST(build_python_and_reuse)
{
	struct image_result a, b;
	REQUIRE(prepare_said(fn_py, "python3.14", &a) == 0);
	CHECK(a.built);
	CHECK(a.dep_ref == NULL);
	CHECK(strlen(a.fingerprint) == 64);
	char *want = xasprintf("relay-fn-%s:%.16s", fn_py, a.fingerprint);
	CHECK_STR(a.ref, want);
	free(want);
	strlcpy_(img_py, a.ref, sizeof img_py);
	/* Unchanged function: the existing image is reused, nothing built. */
	REQUIRE(prepare_said(fn_py, "python3.14", &b) == 0);
	CHECK(!b.built);
	CHECK_STR(b.ref, a.ref);
	image_result_free(&a);
	image_result_free(&b);
}

TEST(build_node_and_cjs)
{
	struct image_result a, b;
	REQUIRE(prepare_said(fn_node, "node24", &a) == 0);
	CHECK(a.built);
	strlcpy_(img_node, a.ref, sizeof img_node);
	REQUIRE(prepare_said(fn_cjs, "node24", &b) == 0);
	/* A package.json means dependencies: npm install --omit=dev. */
	CHECK(b.dep_ref != NULL && str_has_prefix(b.dep_ref, "relay-dep-node24-"));
	strlcpy_(img_cjs, b.ref, sizeof img_cjs);
	image_result_free(&a);
	image_result_free(&b);
}

/* ---- Python handlers --------------------------------------------------- */

struct expect {
	const char *handler;
	enum runner_outcome outcome;
	int exit_code;
	const char *output; /* substring of the forwarded output, or NULL */
	const char *error;  /* substring of the error, or NULL */
};

static void run_table(const char *fn, const char *img, const struct expect *x, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		cap_reset();
		struct runner_result r;
		invoke(fn, img, x[i].handler, &r);
		char *out = captured();
		if (r.outcome != x[i].outcome || r.exit_code != x[i].exit_code ||
		    (x[i].output && !t_contains(out, x[i].output)) ||
		    (x[i].error && !t_contains(r.error, x[i].error))) {
			T_FAIL_("%s: outcome %s exit %d error [%s]\n    output: %s", x[i].handler,
				runner_outcome_name(r.outcome), r.exit_code, r.error ? r.error : "",
				out);
		}
		if (x[i].outcome != RUNNER_SUCCESS && !t_contains(r.error, x[i].handler))
			T_FAIL_("%s: error does not name the handler: %s", x[i].handler,
				r.error ? r.error : "(null)");
		if (r.error && !t_contains(r.error, fn))
			T_FAIL_("%s: error does not name the function: %s", x[i].handler, r.error);
		free(out);
		runner_result_free(&r);
	}
}

TEST(python_handlers)
{
	REQUIRE(img_py[0]);
	char *p = xasprintf("relay: function \"%s\" handler \"ok.handler\": "
			    "py sync ok evt-1\n",
			    fn_py);
	const struct expect x[] = {
		{"ok.handler", RUNNER_SUCCESS, 0, p, NULL},
		{"aio.handler", RUNNER_SUCCESS, 0, "py async ok evt-1", NULL},
		{"events.created.handler", RUNNER_SUCCESS, 0, "nested created evt-1", NULL},
		{"fail.exit3", RUNNER_FAILURE, 3, NULL, "exit status 3"},
		{"fail.boom", RUNNER_FAILURE, 1, "raised ValueError: boom evt-1 (fail.py:5)",
		 "ValueError: boom evt-1"},
		{"nosuch.handler", RUNNER_FAILURE, 1, NULL, "module \"nosuch\" not found"},
		{"ok.nosuch", RUNNER_FAILURE, 1, NULL, "module \"ok\" has no function \"nosuch\""},
	};
	run_table(fn_py, img_py, x, ARRAY_LEN(x));
	free(p);
}

TEST(node_handlers)
{
	REQUIRE(img_node[0]);
	const struct expect x[] = {
		{"ok.sync", RUNNER_SUCCESS, 0, "node sync ok evt-1", NULL},
		{"ok.aio", RUNNER_SUCCESS, 0, "node async ok evt-1", NULL},
		{"events.created.handler", RUNNER_SUCCESS, 0, "node nested created evt-1", NULL},
		{"fail.exit4", RUNNER_FAILURE, 4, NULL, "exit status 4"},
		{"fail.boom", RUNNER_FAILURE, 1, NULL, "raised TypeError: node boom (fail.js:2)"},
		{"fail.reject", RUNNER_FAILURE, 1, NULL, "raised Error: node rejected"},
		{"nosuch.handler", RUNNER_FAILURE, 1, NULL, "module \"nosuch\" not found"},
		{"ok.nosuch", RUNNER_FAILURE, 1, NULL, "module \"ok\" has no function \"nosuch\""},
	};
	run_table(fn_node, img_node, x, ARRAY_LEN(x));
}

TEST(node_commonjs_package_json)
{
	REQUIRE(img_cjs[0]);
	const struct expect x[] = {
		{"h.handler", RUNNER_SUCCESS, 0, "cjs ok evt-1 function b.txt", NULL},
	};
	run_table(fn_cjs, img_cjs, x, ARRAY_LEN(x));
}

/* stdout and stderr lines forwarded with their prefix, in order per
 * stream; a 40000-byte line arrives in 16 KiB pieces; an unterminated last
 * line is still forwarded. */
static void check_streams(const char *fn, const char *img, bool python)
{
	cap_reset();
	struct runner_result r;
	invoke(fn, img, "out.handler", &r);
	CHECK_INT(r.outcome, RUNNER_SUCCESS);
	runner_result_free(&r);
	char *out = captured();
	char *pre = xasprintf("relay: function \"%s\" handler \"out.handler\": ", fn);
	const char *last_out = out, *last_err = out;
	for (int i = 0; i < 3; i++) {
		char *lo = xasprintf("%sout %d\n", pre, i);
		char *le = xasprintf("%serr %d\n", pre, i);
		const char *po = strstr(out, lo), *pe = strstr(out, le);
		CHECK(po != NULL && po >= last_out);
		CHECK(pe != NULL && pe >= last_err);
		if (po)
			last_out = po;
		if (pe)
			last_err = pe;
		free(lo);
		free(le);
	}
	if (python) {
		/* 40000 x's: 16384 + 16384 + 7232, each piece its own line. */
		size_t pieces = 0, total = 0;
		for (const char *p = strstr(out, pre); p; p = strstr(p + 1, pre)) {
			const char *v = p + strlen(pre);
			size_t n = strspn(v, "x");
			if (n && v[n] == '\n') {
				pieces++;
				total += n;
				CHECK(n <= RUNNER_LINE_MAX);
			}
		}
		CHECK_INT(pieces, 3);
		CHECK_INT(total, 40000);
		char *tail = xasprintf("%stail-without-newline\n", pre);
		CHECK(t_contains(out, tail));
		free(tail);
	}
	free(pre);
	free(out);
}

TEST(output_forwarding)
{
	REQUIRE(img_py[0] && img_node[0]);
	check_streams(fn_py, img_py, true);
	check_streams(fn_node, img_node, false);
}

static void check_timeout(const char *fn, const char *img)
{
	struct runner_request in = inv(fn, img, "slow.handler");
	in.timeout_ns = 1000000000LL;
	struct runner_result r;
	int64_t t0 = now_mono_ns();
	runner_invoke(D, &in, &r);
	double secs = (double)(now_mono_ns() - t0) / 1e9;
	CHECK_INT(r.outcome, RUNNER_TIMEOUT);
	CHECK(t_contains(r.error, "timed out after 1s"));
	CHECK(t_contains(r.error, "slow.handler"));
	/* Not before the timeout, and well before the handler's own 60 s end
	 * (stopping and removing the container may take seconds on a loaded
	 * machine). */
	CHECK(secs >= 1.0 && secs < 30.0);
	CHECK(r.container_id[0]);
	CHECK(container_gone(r.container_id));
	runner_result_free(&r);
}

TEST(timeouts)
{
	REQUIRE(img_py[0] && img_node[0]);
	check_timeout(fn_py, img_py);
	check_timeout(fn_node, img_node);
}

/* ---- hardening and labels ---------------------------------------------- */

struct bg {
	struct runner_request in;
	struct runner_result r;
	atomic_int stop;
	struct docker *d;
};

static bool bg_cancelled(void *ctx)
{
	return atomic_load(&((struct bg *)ctx)->stop) != 0;
}

static void *bg_run(void *arg)
{
	struct bg *b = arg;
	runner_invoke(b->d, &b->in, &b->r);
	return NULL;
}

/* The id of the running container labelled relay.function=fn, waiting up
 * to tries * 100 ms for it to appear; NULL if none did. */
static char *wait_running(const char *fn, int tries)
{
	char *id = NULL;
	for (int i = 0; i < tries && !id; i++) {
		json_t *a = labelled_containers_in(fn, false);
		const char *s = json_string_value(json_object_get(json_array_get(a, 0), "Id"));
		if (s)
			id = xstrdup(s);
		json_decref(a);
		if (!id)
			usleep(100 * 1000);
	}
	return id;
}

TEST(hardening_labels_and_secret_placement)
{
	REQUIRE(img_py[0]);
	char *e = NULL;
	REQUIRE(secret_set(SP, "it-db", canary, strlen(canary), &e) == 0);
	struct bg b = {.in = inv(fn_py, img_py, "slow.handler")};
	b.in.cancelled = bg_cancelled;
	b.in.cancel_ctx = &b;
	with_api_env(&b.in);
	with_db_secret(&b.in);
	b.in.event_id = "evt-\x01with-control-and-a-very-long-tail-"
			"0123456789012345678901234567890123456789012345678901234567890123456789"
			"0123456789012345678901234567890123456789";
	REQUIRE(docker_open(&b.d, &e) == 0);
	pthread_t th;
	pthread_create(&th, NULL, bg_run, &b);
	char *id = wait_running(fn_py, 100);
	CHECK(id != NULL);
	if (id) {
		struct docker_response r;
		char *path = xasprintf("/containers/%s/json", id);
		REQUIRE(docker_request(D, "GET", path, NULL, 0, NULL, 10000, &r) == 0);
		json_t *c = json_loadb(r.body, r.len, 0, NULL);
		json_t *hc = json_object_get(c, "HostConfig");
		json_t *cfg = json_object_get(c, "Config");
		CHECK(json_is_true(json_object_get(hc, "AutoRemove")));
		CHECK_INT(json_integer_value(json_object_get(hc, "Memory")), 134217728);
		CHECK_INT(json_integer_value(json_object_get(hc, "NanoCpus")), 1000000000);
		CHECK_INT(json_integer_value(json_object_get(hc, "PidsLimit")), 128);
		CHECK_STR(json_string_value(json_array_get(json_object_get(hc, "CapDrop"), 0)),
			  "ALL");
		CHECK_INT(json_array_size(json_object_get(hc, "CapDrop")), 1);
		CHECK(json_is_true(json_object_get(hc, "ReadonlyRootfs")));
		CHECK_STR(json_string_value(json_object_get(json_object_get(hc, "Tmpfs"), "/tmp")),
			  "rw,noexec,nosuid,size=64m");
		CHECK_STR(json_string_value(json_array_get(json_object_get(hc, "SecurityOpt"), 0)),
			  "no-new-privileges");
		CHECK_STR(json_string_value(json_object_get(cfg, "User")), "10001:10001");
		CHECK(json_is_false(json_object_get(cfg, "Tty")));
		CHECK(json_is_true(json_object_get(cfg, "OpenStdin")));
		CHECK(json_is_true(json_object_get(cfg, "StdinOnce")));
		json_t *l = json_object_get(cfg, "Labels");
		CHECK_STR(json_string_value(json_object_get(l, "relay.function")), fn_py);
		CHECK_STR(json_string_value(json_object_get(l, "relay.handler")), "slow.handler");
		CHECK_STR(json_string_value(json_object_get(l, "relay.message_id")),
			  "1700000000000-0");
		CHECK_STR(json_string_value(json_object_get(l, "relay.event_name")), "INSERT");
		CHECK_STR(json_string_value(json_object_get(l, "relay.hostname")),
			  runner_hostname());
		CHECK_STR(json_string_value(json_object_get(l, "relay.image")), img_py);
		CHECK_STR(json_string_value(json_object_get(l, "relay.instance")),
			  runner_instance_id());
		const char *ev = json_string_value(json_object_get(l, "relay.event_id"));
		CHECK(ev && strlen(ev) == RUNNER_LABEL_MAX && str_has_prefix(ev, "evt-?with"));
		/* Labels carry no secret; Env carries it (and only Env). */
		char *labels = json_dumps(l, 0);
		CHECK(labels && !t_contains(labels, canary));
		free(labels);
		bool env_secret = false, env_handler = false, env_api = false;
		size_t i;
		json_t *v;
		json_array_foreach(json_object_get(cfg, "Env"), i, v)
		{
			const char *s = json_string_value(v);
			char *want = xasprintf("DB_URL=%s", canary);
			env_secret |= s && strcmp(s, want) == 0;
			env_handler |= s && strcmp(s, "RELAY_HANDLER=slow.handler") == 0;
			env_api |= s && strcmp(s, "API_URL=https://api.example.com") == 0;
			free(want);
		}
		CHECK(env_secret && env_handler && env_api);
		json_decref(c);
		docker_response_free(&r);
		free(path);
	}
	atomic_store(&b.stop, 1);
	pthread_join(th, NULL);
	CHECK_INT(b.r.outcome, RUNNER_CANCELLED);
	CHECK(b.r.container_id[0] && container_gone(b.r.container_id));
	runner_result_free(&b.r);
	docker_close(b.d);
	free(id);
}

/* ---- env and secrets ---------------------------------------------------- */

TEST(env_and_secret_injection)
{
	REQUIRE(img_py[0]);
	char *e = NULL;
	REQUIRE(secret_set(SP, "it-db", "postgres://v1", 13, &e) == 0);
	struct runner_request in = inv(fn_py, img_py, "envdump.handler");
	with_api_env(&in);
	with_db_secret(&in);
	struct runner_result r;

	cap_reset();
	CHECK(runner_invoke(D, &in, &r) == 0);
	runner_result_free(&r);
	char *out = captured();
	CHECK(t_contains(out, "envdump.handler\": "
			      "API_URL=https://api.example.com\n"));
	CHECK(t_contains(out, ": DB_URL=postgres://v1\n"));
	CHECK(t_contains(out, ": UID=10001\n"));
	CHECK(t_contains(out, ": HANDLER=envdump.handler\n"));
	free(out);

	/* Rotation: the next invocation sees the new value, same image. */
	REQUIRE(secret_set(SP, "it-db", "postgres://v2", 13, &e) == 0);
	cap_reset();
	CHECK(runner_invoke(D, &in, &r) == 0);
	runner_result_free(&r);
	out = captured();
	CHECK(t_contains(out, ": DB_URL=postgres://v2\n"));
	CHECK(!t_contains(out, "postgres://v1"));
	free(out);
	struct image_result ir;
	REQUIRE(prepare(fn_py, "python3.14", &ir, &e) == 0);
	CHECK(!ir.built);
	CHECK_STR(ir.ref, img_py);
	image_result_free(&ir);

	/* A missing secret fails the invocation, naming the reference. */
	static const struct env_var missing[] = {{"DB_URL", "it-missing-ref"}};
	in.secrets = missing;
	CHECK(runner_invoke(D, &in, &r) < 0);
	CHECK_INT(r.outcome, RUNNER_ERROR);
	CHECK(t_contains(r.error, "secret \"it-missing-ref\""));
	CHECK(t_contains(r.error, "not found"));
	CHECK(t_contains(r.error, fn_py) && t_contains(r.error, "envdump.handler"));
	CHECK(!r.container_id[0]);
	runner_result_free(&r);
}

static bool scan_contains;
static char scan_tail[128];

static int scan_chunk(const char *data, size_t len, void *ctx)
{
	const char *needle = ctx;
	size_t nl = strlen(needle);
	/* Join the tail of the previous chunk so a match across chunks counts. */
	size_t tl = strlen(scan_tail);
	char *joined = xmalloc(tl + len + 1);
	memcpy(joined, scan_tail, tl);
	memcpy(joined + tl, data, len);
	joined[tl + len] = '\0';
	if (memmem(joined, tl + len, needle, nl))
		scan_contains = true;
	size_t keep = tl + len < nl ? tl + len : nl - 1;
	memcpy(scan_tail, joined + tl + len - keep, keep);
	scan_tail[keep] = '\0';
	free(joined);
	return 0;
}

TEST(canary_never_in_images_or_logs)
{
	REQUIRE(img_py[0]);
	char *e = NULL;
	/* Relay's own log at DEBUG while the canary is injected. */
	REQUIRE(secret_set(SP, "it-db", canary, strlen(canary), &e) == 0);
	log_set_level(LOG_DEBUG);
	struct runner_request in = inv(fn_py, img_py, "ok.handler");
	with_db_secret(&in);
	struct runner_result r;
	cap_reset();
	CHECK(runner_invoke(D, &in, &r) == 0);
	runner_result_free(&r);
	log_set_level(LOG_INFO);
	char *out = captured();
	CHECK(t_contains(out, "py sync ok"));
	CHECK(!t_contains(out, canary));
	free(out);

	/* docker image inspect */
	struct docker_response ins;
	char *path = xasprintf("/images/%s/json", img_py);
	REQUIRE(docker_request(D, "GET", path, NULL, 0, NULL, 10000, &ins) == 0);
	CHECK_INT(ins.status, 200);
	CHECK(!t_contains(ins.body, canary));
	CHECK(!t_contains(ins.body, "it-db")); /* not even the reference */
	docker_response_free(&ins);
	free(path);

	/* every layer: docker save */
	path = xasprintf("/images/%s/get", img_py);
	long status = 0;
	scan_contains = false;
	scan_tail[0] = '\0';
	REQUIRE(docker_request_stream(D, "GET", path, NULL, 0, NULL, 120000, scan_chunk, canary,
				      &status) == 0);
	CHECK_INT(status, 200);
	CHECK(!scan_contains);
	/* the scanner itself works: the bootstrap text is in the layers */
	scan_contains = false;
	scan_tail[0] = '\0';
	REQUIRE(docker_request_stream(D, "GET", path, NULL, 0, NULL, 120000, scan_chunk,
				      (void *)"relay bootstrap: ", &status) == 0);
	CHECK(scan_contains);
	free(path);
}

/* ---- images: dependencies, edits, failures, hygiene -------------------- */

TEST(dependency_image_shared)
{
	char *req = xasprintf("# no dependencies (run %d)\n", pid);
	char *d1 = fn_dir(fn_req1), *d2 = fn_dir(fn_req2);
	t_write_file(d1, "template.yaml", py_template);
	t_write_file(d1, "ok.py", "def handler(event):\n    print('req1')\n");
	t_write_file(d1, "requirements.txt", req);
	t_write_file(d2, "template.yaml", py_template);
	t_write_file(d2, "ok.py", "def handler(event):\n    print('req2')\n");
	t_write_file(d2, "requirements.txt", req);
	struct image_result a, b;
	char *e = NULL;
	REQUIRE(prepare_said(fn_req1, "python3.14", &a) == 0);
	CHECK(a.built && a.dep_built);
	REQUIRE(a.dep_ref && str_has_prefix(a.dep_ref, "relay-dep-python3.14-"));
	CHECK_INT(strlen(a.dep_ref), strlen("relay-dep-python3.14-") + 16);
	strlcpy_(dep_ref_req, a.dep_ref, sizeof dep_ref_req);
	CHECK(image_exists(D, a.dep_ref, &e) == 1);
	/* Same manifest, another function: the dependency image is reused. */
	REQUIRE(prepare(fn_req2, "python3.14", &b, &e) == 0);
	CHECK(b.built && !b.dep_built);
	CHECK_STR(b.dep_ref, a.dep_ref);
	struct runner_result r;
	cap_reset();
	CHECK(invoke(fn_req2, b.ref, "ok.handler", &r) == 0);
	runner_result_free(&r);
	char *out = captured();
	CHECK(t_contains(out, ": req2\n"));
	free(out);
	image_result_free(&a);
	image_result_free(&b);
	free(req);
	free(d1);
	free(d2);
}

TEST(edit_rebuild_gc_and_failed_build)
{
	char *d = fn_dir(fn_edit);
	char *e = NULL;
	t_write_file(d, "template.yaml", py_template);
	t_write_file(d, "ok.py", "def handler(event):\n    print('version one')\n");
	struct image_result v1, v2, v3;
	REQUIRE(prepare(fn_edit, "python3.14", &v1, &e) == 0);
	CHECK(v1.built);
	t_write_file(d, "ok.py", "def handler(event):\n    print('version two')\n");
	REQUIRE(prepare(fn_edit, "python3.14", &v2, &e) == 0);
	CHECK(v2.built);
	CHECK(strcmp(v1.ref, v2.ref) != 0);
	CHECK(image_exists(D, v1.ref, &e) == 1);

	/* v1 is still in use by an in-flight execution: GC keeps it. */
	size_t removed = 99;
	const char *keep[] = {v2.ref};
	image_hold(v1.ref);
	CHECK(image_gc(D, fn_edit, keep, 1, &removed, &e) == 0);
	CHECK_INT(removed, 0);
	CHECK(image_exists(D, v1.ref, &e) == 1);
	image_release(v1.ref);
	/* Unused now: removed; the active version and other images stay. */
	CHECK(image_gc(D, fn_edit, keep, 1, &removed, &e) == 0);
	CHECK_INT(removed, 1);
	CHECK(image_exists(D, v1.ref, &e) == 0);
	CHECK(image_exists(D, v2.ref, &e) == 1);
	CHECK(image_exists(D, img_py, &e) == 1);
	CHECK(image_exists(D, "python:3.14-slim", &e) == 1);

	/* A failing build: the error is the daemon's, v2 keeps serving. */
	t_write_file(d, "requirements.txt", "-r /nonexistent-relay-requirements.txt\n");
	CHECK(prepare(fn_edit, "python3.14", &v3, &e) < 0);
	CHECK(t_contains(e, fn_edit));
	CHECK(t_contains(e, "returned a non-zero code"));
	if (!t_contains(e, "returned a non-zero code"))
		printf("  error: %s\n", e);
	free(e);
	e = NULL;
	CHECK(image_exists(D, v2.ref, &e) == 1);
	struct runner_result r;
	cap_reset();
	CHECK(invoke(fn_edit, v2.ref, "ok.handler", &r) == 0);
	/* The daemon refuses to remove an image while its auto-removed
	 * container is still being removed. */
	CHECK(r.container_id[0] && container_gone(r.container_id));
	runner_result_free(&r);
	char *out = captured();
	CHECK(t_contains(out, ": version two\n"));
	free(out);

	/* Function removal: all of its images go. */
	CHECK(image_gc(D, fn_edit, NULL, 0, &removed, &e) == 0);
	CHECK_INT(removed, 1);
	CHECK(image_exists(D, v2.ref, &e) == 0);
	image_result_free(&v1);
	image_result_free(&v2);
	free(d);
}

TEST(fifty_invocations_leave_no_container)
{
	REQUIRE(img_py[0]);
	int ok = 0;
	for (int i = 0; i < 50; i++) {
		struct runner_result r;
		if (invoke(fn_py, img_py, i % 2 ? "ok.handler" : "fail.exit3", &r) == 0 ||
		    r.outcome == RUNNER_FAILURE)
			ok++;
		runner_result_free(&r);
	}
	CHECK_INT(ok, 50);
	CHECK_INT(containers_left(fn_py, 50), 0);
}

/* instance NULL: no relay.instance label; group NULL: no relay.stream and
 * relay.group labels (a container made by a Relay from before them); with
 * a group, the stream is "events". */
static char *create_labelled(const char *function, const char *host, const char *instance,
			     const char *group, bool start)
{
	json_t *body = json_pack("{s:s, s:[s,s], s:{s:s, s:s}}", "Image", "python:3.14-slim", "Cmd",
				 "sleep", "300", "Labels", "relay.function", function,
				 "relay.hostname", host);
	if (instance)
		json_object_set_new(json_object_get(body, "Labels"), "relay.instance",
				    json_string(instance));
	if (group) {
		json_object_set_new(json_object_get(body, "Labels"), "relay.stream",
				    json_string("events"));
		json_object_set_new(json_object_get(body, "Labels"), "relay.group",
				    json_string(group));
	}
	char *text = json_dumps(body, 0);
	json_decref(body);
	struct docker_response r;
	char *id = NULL;
	if (docker_request(D, "POST", "/containers/create", text, strlen(text), NULL, 10000, &r) ==
		    0 &&
	    r.status == 201) {
		json_t *o = json_loadb(r.body, r.len, 0, NULL);
		id = xstrdup(json_string_value(json_object_get(o, "Id")));
		json_decref(o);
	}
	docker_response_free(&r);
	free(text);
	if (id && start) {
		char *path = xasprintf("/containers/%s/start", id);
		docker_request(D, "POST", path, NULL, 0, NULL, 10000, &r);
		docker_response_free(&r);
		free(path);
	}
	return id;
}

TEST(orphan_sweep)
{
	/* A made-up hostname for "this host", so the sweep cannot touch any
	 * other test's live containers on this machine. */
	char host[64], other[64], fn[64];
	snprintf_(host, sizeof host, "it-sweep-%d-here", pid);
	snprintf_(other, sizeof other, "it-sweep-%d-elsewhere", pid);
	snprintf_(fn, sizeof fn, "it-eng-orphan-%d", pid);
	/* "mine": this process's instance; "dead": another instance of this
	 * host (the caller holds the consumer name, so it is gone); no label:
	 * a Relay from before the label. */
	const char *mine = "0123456789abcdef0123456789abcdef";
	const char *dead = "fedcba9876543210fedcba9876543210";
	char *running = create_labelled(fn, host, NULL, NULL, true);
	char *created = create_labelled(fn, host, NULL, NULL, false);
	char *foreign = create_labelled(fn, other, dead, "g1", true);
	char *own = create_labelled(fn, host, mine, "g1", true);
	char *gone = create_labelled(fn, host, dead, "g1", true);
	/* Another group's Relay under this hostname: its own record. */
	char *group2 = create_labelled(fn, host, dead, "g2", true);
	REQUIRE(running && created && foreign && own && gone && group2);
	size_t removed = 0;
	char *e = NULL;
	int64_t t0 = now_mono_ns();
	runner_set_stream_group("events", "g1");
	int rc = runner_sweep_orphans(D, host, mine, RUNNER_SWEEP_TIMEOUT_MS, &removed, &e);
	if (rc < 0)
		printf("  %s\n", e);
	CHECK(rc == 0);
	CHECK(now_mono_ns() - t0 < 30LL * 1000000000LL);
	CHECK_INT(removed, 3);
	CHECK_INT(container_status(running), 404);
	CHECK_INT(container_status(created), 404);
	CHECK_INT(container_status(gone), 404);
	CHECK_INT(container_status(foreign), 200);
	CHECK_INT(container_status(own), 200);
	CHECK_INT(container_status(group2), 200);
	/* Without a scope or an instance to keep: every container of the host. */
	runner_set_stream_group(NULL, NULL);
	CHECK(runner_sweep_orphans(D, host, NULL, RUNNER_SWEEP_TIMEOUT_MS, &removed, &e) == 0);
	CHECK_INT(removed, 2);
	CHECK_INT(container_status(own), 404);
	CHECK_INT(container_status(group2), 404);
	/* Idempotent removal: twice is fine. */
	CHECK(runner_remove_container(D, foreign, &e) == 0);
	CHECK(runner_remove_container(D, foreign, &e) == 0);
	CHECK_INT(container_status(foreign), 404);
	free(running);
	free(created);
	free(foreign);
	free(own);
	free(gone);
	free(group2);
}

/* ---- a Docker socket proxy that holds answers ------------------------- */

/*
 * Sits between a runner and the daemon's unix socket and forwards bytes both
 * ways (half-closes included: the attach stream's stdin EOF is one). A
 * request whose bytes contain `hold` still reaches the daemon, which acts on
 * it, but its answer and everything after it on that connection are read
 * and dropped: the runner never hears back, as from a daemon that takes
 * longer than any bound. Counts the held requests and the held answers that
 * were "201 Created" (the daemon made the container).
 */
#define PROXY_MAX_CONNS 256

struct proxy {
	char path[108];
	char upstream[108];
	char hold[64];
	int lfd;
	pthread_t accept_th;
	atomic_int stop;
	atomic_int held, held_201;
	pthread_mutex_t lock;
	pthread_t conns[PROXY_MAX_CONNS];
	int nconns;
};

struct proxy_conn {
	struct proxy *p;
	int cfd;
};

static int unix_connect(const char *path)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	strlcpy_(a.sun_path, path, sizeof a.sun_path);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
		return fd;
	if (fd >= 0)
		close(fd);
	return -1;
}

static void *proxy_conn_main(void *arg)
{
	struct proxy_conn *pc = arg;
	struct proxy *p = pc->p;
	int cfd = pc->cfd;
	free(pc);
	int ufd = unix_connect(p->upstream);
	char *chunk = xmalloc(65536);
	char carry[64];
	size_t carry_len = 0, hl = strlen(p->hold);
	bool c_eof = false, u_eof = false, holding = false, status_seen = false;
	while (ufd >= 0 && !atomic_load(&p->stop) && !(c_eof && u_eof)) {
		struct pollfd f[2] = {{c_eof ? -1 : cfd, POLLIN, 0}, {u_eof ? -1 : ufd, POLLIN, 0}};
		if (poll(f, 2, 100) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (f[0].revents) {
			ssize_t n = read(cfd, chunk, 65536);
			if (n < 0)
				break;
			if (n == 0) {
				c_eof = true;
				shutdown(ufd, SHUT_WR);
			} else {
				/* The pattern may straddle two reads. */
				struct buf look;
				buf_init(&look, sizeof carry + 65536);
				buf_append(&look, carry, carry_len);
				buf_append(&look, chunk, (size_t)n);
				if (!holding && memmem(look.data, look.len, p->hold, hl)) {
					holding = true;
					atomic_fetch_add(&p->held, 1);
				}
				carry_len = look.len < sizeof carry ? look.len : sizeof carry;
				memcpy(carry, look.data + look.len - carry_len, carry_len);
				buf_free(&look);
				if (write_all(ufd, chunk, (size_t)n) < 0)
					break;
			}
		}
		if (f[1].revents) {
			ssize_t n = read(ufd, chunk, 65536);
			if (n < 0)
				break;
			if (n == 0) {
				u_eof = true;
				if (!holding)
					shutdown(cfd, SHUT_WR);
			} else if (holding) {
				if (!status_seen && n >= 12 && memcmp(chunk + 9, "201", 3) == 0)
					atomic_fetch_add(&p->held_201, 1);
				status_seen = true;
			} else if (write_all(cfd, chunk, (size_t)n) < 0) {
				break;
			}
		}
	}
	free(chunk);
	if (ufd >= 0)
		close(ufd);
	close(cfd);
	return NULL;
}

static void *proxy_accept_main(void *arg)
{
	struct proxy *p = arg;
	while (!atomic_load(&p->stop)) {
		struct pollfd f = {p->lfd, POLLIN, 0};
		if (poll(&f, 1, 100) <= 0)
			continue;
		int cfd = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (cfd < 0)
			continue;
		pthread_mutex_lock(&p->lock);
		if (p->nconns == PROXY_MAX_CONNS) {
			pthread_mutex_unlock(&p->lock);
			close(cfd);
			continue;
		}
		struct proxy_conn *pc = xmalloc(sizeof *pc);
		*pc = (struct proxy_conn){p, cfd};
		pthread_create(&p->conns[p->nconns++], NULL, proxy_conn_main, pc);
		pthread_mutex_unlock(&p->lock);
	}
	return NULL;
}

/* A proxy in front of this machine's daemon socket holding answers to
 * requests containing hold; NULL (and *why) when the daemon is not on a
 * unix socket. */
static struct proxy *proxy_start(const char *hold, const char **why)
{
	struct docker_host h;
	char *e = NULL;
	if (docker_host_parse(getenv("DOCKER_HOST"), &h, &e) < 0 ||
	    h.transport != DOCKER_TRANSPORT_UNIX) {
		*why = "the Docker daemon is not on a unix socket";
		free(e);
		docker_host_clear(&h);
		return NULL;
	}
	static int seq;
	struct proxy *p = xcalloc(1, sizeof *p);
	pthread_mutex_init(&p->lock, NULL);
	strlcpy_(p->upstream, h.path, sizeof p->upstream);
	docker_host_clear(&h);
	strlcpy_(p->hold, hold, sizeof p->hold);
	snprintf_(p->path, sizeof p->path, "%s/proxy-%d.sock", root, ++seq);
	unlink(p->path);
	p->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	strlcpy_(a.sun_path, p->path, sizeof a.sun_path);
	if (p->lfd < 0 || bind(p->lfd, (struct sockaddr *)&a, sizeof a) < 0 ||
	    listen(p->lfd, 64) < 0) {
		*why = "cannot listen on the proxy socket";
		if (p->lfd >= 0)
			close(p->lfd);
		free(p);
		return NULL;
	}
	pthread_create(&p->accept_th, NULL, proxy_accept_main, p);
	return p;
}

static void proxy_stop(struct proxy *p)
{
	if (!p)
		return;
	atomic_store(&p->stop, 1);
	pthread_join(p->accept_th, NULL);
	for (int i = 0; i < p->nconns; i++)
		pthread_join(p->conns[i], NULL);
	close(p->lfd);
	unlink(p->path);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

/* A Docker handle whose requests go through the proxy. */
static struct docker *open_via(const struct proxy *p)
{
	const char *old = getenv("DOCKER_HOST");
	char *saved = old ? xstrdup(old) : NULL;
	char *v = xasprintf("unix://%s", p->path);
	setenv("DOCKER_HOST", v, 1);
	struct docker *d = NULL;
	char *e = NULL;
	if (docker_open(&d, &e) < 0) {
		printf("  through the proxy: %s\n", e);
		free(e);
	}
	if (saved)
		setenv("DOCKER_HOST", saved, 1);
	else
		unsetenv("DOCKER_HOST");
	free(saved);
	free(v);
	return d;
}

/* Forced removal, on the direct handle, of every container labelled
 * relay.function=fn; returns how many there were. */
static int remove_labelled(const char *fn)
{
	json_t *a = labelled_containers(fn), *c;
	size_t i;
	int n = 0;
	json_array_foreach(a, i, c)
	{
		char *e = NULL;
		const char *id = json_string_value(json_object_get(c, "Id"));
		if (id && runner_remove_container(D, id, &e) < 0)
			free(e);
		n++;
	}
	json_decref(a);
	return n;
}

/* The create request reaches the daemon, which creates the
 * container with the secret in its Env, but its answer never reaches the
 * runner. Once the invocation has failed, no container of it is left, by
 * label or by name: nothing for docker inspect to show the secret from. */
TEST(create_timeout_leaves_no_container)
{
	REQUIRE(img_py[0]);
	const char *why = NULL;
	struct proxy *p = proxy_start("/containers/create?", &why);
	if (!p) {
		/* Never a skip: the test command starts the daemon on its unix
		 * socket, so a missing proxy is a failure to look at. */
		T_FAIL_("%s", why);
		return;
	}
	struct docker *pd = open_via(p);
	REQUIRE(pd);
	char fn[64];
	snprintf_(fn, sizeof fn, "it-eng-ctmo-%d", pid);
	char *e = NULL;
	REQUIRE(secret_set(SP, "it-db", canary, strlen(canary), &e) == 0);
	struct runner_request in = inv(fn, img_py, "ok.handler");
	with_db_secret(&in);
	in.setup_timeout_ms = 3000;
	struct runner_result r;
	CHECK(runner_invoke(pd, &in, &r) < 0);
	CHECK_INT(r.outcome, RUNNER_ERROR);
	CHECK(t_contains(r.error, "creating container"));
	CHECK(!t_contains(r.error, canary));
	CHECK_INT(atomic_load(&p->held), 1);
	/* The daemon did create it (the held answer was 201 Created): wait
	 * for that answer, the runner may have given up first. */
	for (int i = 0; i < 300 && atomic_load(&p->held_201) == 0; i++)
		usleep(100 * 1000);
	CHECK_INT(atomic_load(&p->held_201), 1);
	CHECK_INT(containers_left(fn, 300), 0);
	CHECK(str_has_prefix(r.container_name, "relay-it-eng-ctmo-"));
	if (r.container_name[0])
		CHECK_INT(container_status(r.container_name), 404);
	runner_result_free(&r);
	docker_close(pd);
	proxy_stop(p);
	remove_labelled(fn);
}

/* A daemon that never answers one kind of call, phase by phase: every path
 * still ends within the runner's worst case (setup + timeout + teardown +
 * local slack), the bound the running marker is computed from, not a
 * bound per call. */
TEST(slow_daemon_every_phase_within_bound)
{
	REQUIRE(img_py[0]);
	static const struct {
		const char *hold;
		enum runner_outcome want;
	} phases[] = {
		{"/containers/create?", RUNNER_ERROR}, /* setup */
		{"/attach?stream", RUNNER_ERROR},      /* setup */
		{"/wait?condition", RUNNER_ERROR},     /* setup */
		{"/start HTTP", RUNNER_ERROR},	       /* handler */
		{"DELETE /", RUNNER_TIMEOUT},	       /* teardown after the timeout */
	};
	char fn[64];
	snprintf_(fn, sizeof fn, "it-eng-slowd-%d", pid);
	for (size_t i = 0; i < ARRAY_LEN(phases); i++) {
		const char *why = NULL;
		struct proxy *p = proxy_start(phases[i].hold, &why);
		if (!p) {
			T_FAIL_("%s", why); /* never a skip: see above */
			return;
		}
		struct docker *pd = open_via(p);
		REQUIRE(pd);
		struct runner_request in = inv(fn, img_py, "slow.handler");
		in.timeout_ns = NS_PER_SEC;
		in.setup_timeout_ms = 2000;
		in.teardown_timeout_ms = 2000;
		struct runner_result r;
		int64_t t0 = now_mono_ns();
		runner_invoke(pd, &in, &r);
		int64_t took = now_mono_ns() - t0;
		if (atomic_load(&p->held) < 1)
			T_FAIL_("%s: the runner never reached this call", phases[i].hold);
		if (took > runner_worst_case_ns(&in))
			T_FAIL_("%s: took %lld ms, the bound is %lld ms", phases[i].hold,
				(long long)(took / NS_PER_MS),
				(long long)(runner_worst_case_ns(&in) / NS_PER_MS));
		if (r.outcome != phases[i].want)
			T_FAIL_("%s: outcome %s: %s", phases[i].hold,
				runner_outcome_name(r.outcome), r.error ? r.error : "");
		runner_result_free(&r);
		docker_close(pd);
		proxy_stop(p);
		remove_labelled(fn);
	}
}

/* ---- through the consumer ---------------------------------------------- */

/* One real handler running through the consumer and the executor: the
 * in_flight_invocations gauge reads 1 while it runs and 0 once it is done,
 * and the running marker written when it was claimed lasts at least as
 * long as the longest path
 * (invocation_running_deadline from the moment the event was added). */
static double inflight_during = -1, inflight_after = -1;
static char inflight_text_during[64], inflight_text_after[64];
static struct marker marker_during;
static int64_t marker_claim_floor, marker_timeout_ns;
static bool consumer_ran;

/* The "in_flight_invocations N" line of the exposition text. */
static void gauge_line(char *out, size_t outsz)
{
	struct buf b;
	buf_init(&b, 16u << 20);
	metrics_render(&b);
	const char *l = b.data ? strstr(b.data, "\nin_flight_invocations ") : NULL;
	size_t n = l ? strcspn(l + 1, "\n") : 0;
	snprintf_(out, outsz, "%.*s", (int)n, l ? l + 1 : "");
	buf_free(&b);
}

TEST(consumer_one_handler_in_flight)
{
	REQUIRE(img_py[0]);
	struct itredis R = {0};
	if (it_redis_start(&R, NULL) < 0) {
		/* Never a skip: the test command installs redis-server. */
		T_FAIL_("cannot start redis-server");
		return;
	}
	char fn[64], stream[80], fns[320];
	snprintf_(fn, sizeof fn, "it-eng-inflight-%d", pid);
	snprintf_(stream, sizeof stream, "it-eng-inflight-%d", pid);
	snprintf_(fns, sizeof fns, "%s/consumer-fns", root);
	char *d = xasprintf("%s/%s", fns, fn);
	/* slow.handler sleeps 60 s; the rule allows 1m, so only the test
	 * ends it. The image is the Python function's (it has slow.py). */
	t_write_file(d, "template.yaml",
		     "runtime: python3.14\nevents:\n  - handler: slow.handler\n"
		     "    pattern: {}\n    timeout: 1m\n");
	t_write_file(d, "slow.py", "import time\ndef handler(event):\n    time.sleep(60)\n");
	free(d);
	struct function *f = NULL;
	struct strlist errs = {0}, warns = {0};
	int st = function_load(fns, fn, &f, &errs, &warns);
	strlist_free(&errs);
	strlist_free(&warns);
	REQUIRE(st == FUNCTION_OK);
	marker_timeout_ns = f->tpl->rules[0].timeout_ns;
	struct registry *reg = registry_new();
	struct fn_version **fvs = xcalloc(1, sizeof *fvs);
	fvs[0] = registry_fn_version_new(f, xstrdup(img_py), NULL);
	registry_publish(reg, fvs, 1);

	static atomic_int cancel;
	struct executor ex = {.provider = SP, .cancel = &cancel};
	struct consumer_config cfg = {
		.uri = &R.uri,
		.stream = stream,
		.group = "g",
		.consumer = "worker-1",
		.max_buffered = 4,
		.max_concurrency = 2,
		.backoff_ns = {3600 * NS_PER_SEC, 3600 * NS_PER_SEC, 3600 * NS_PER_SEC,
			       3600 * NS_PER_SEC},
		.block_ms = 100,
		.registry = reg,
		.invoke = executor_invoke,
		.invoke_ctx = &ex,
	};
	struct redis *rc = it_conn(&R);
	REQUIRE(rc);
	REQUIRE(it_ensure_group(rc, stream, "g") == 0);
	CHECK(metrics_gauge_value(METRIC_IN_FLIGHT) == 0);
	struct consumer *c = consumer_start(&cfg);
	REQUIRE(c);
	marker_claim_floor = now_wall_ns();
	redisReply *rep = redis_command(rc, "XADD %s * event %s", stream, "{\"id\":\"evt-if\"}");
	char *id = rep && rep->type == REDIS_REPLY_STRING ? xstrdup(rep->str) : NULL;
	if (rep)
		freeReplyObject(rep);
	REQUIRE(id);
	char *key = invocation_key(stream, "g", id);
	char *field = xasprintf("%s/slow.handler", fn);

	/* Running: its container is up. */
	char *cid = wait_running(fn, 600);
	CHECK(cid != NULL);
	if (cid) {
		inflight_during = metrics_gauge_value(METRIC_IN_FLIGHT);
		gauge_line(inflight_text_during, sizeof inflight_text_during);
		rep = redis_command(rc, "HGET %s %s", key, field);
		if (rep && rep->type == REDIS_REPLY_STRING)
			marker_during = invocation_marker_parse(rep->str, rep->len);
		if (rep)
			freeReplyObject(rep);
		/* End it from outside: a failure, recorded with a backoff. */
		char *e = NULL;
		CHECK(runner_remove_container(D, cid, &e) == 0);
		free(e);
	}
	bool recorded = false;
	for (int i = 0; i < 600 && !recorded; i++) {
		rep = redis_command(rc, "HGET %s %s", key, field);
		recorded = rep && rep->type == REDIS_REPLY_STRING &&
			   str_has_prefix(rep->str, "next_attempt_at:");
		if (rep)
			freeReplyObject(rep);
		if (!recorded)
			usleep(100 * 1000);
	}
	CHECK(recorded);
	inflight_after = metrics_gauge_value(METRIC_IN_FLIGHT);
	gauge_line(inflight_text_after, sizeof inflight_text_after);
	consumer_ran = cid != NULL && recorded;

	CHECK(inflight_during == 1);
	CHECK_STR(inflight_text_during, "in_flight_invocations 1");
	CHECK(inflight_after == 0);
	CHECK_STR(inflight_text_after, "in_flight_invocations 0");

	consumer_stop(c);
	consumer_free(c);
	registry_free(reg);
	redis_free(rc);
	it_redis_cleanup(&R);
	remove_labelled(fn);
	free(cid);
	free(id);
	free(key);
	free(field);
}

/* The running marker the consumer wrote for that invocation (read while
 * the handler ran) outlives every path of it. */
TEST(consumer_running_marker_outlives_the_container)
{
	REQUIRE(consumer_ran);
	CHECK_INT(marker_during.kind, MARK_RUNNING);
	int64_t want = invocation_running_deadline(marker_claim_floor, marker_timeout_ns);
	if (marker_during.deadline_ns < want)
		T_FAIL_("the running marker expires %lld ms too early (it should last at least "
			"claim + %lld ms)",
			(long long)((want - marker_during.deadline_ns) / NS_PER_MS),
			(long long)((want - marker_claim_floor) / NS_PER_MS));
}

/* ---- the examples ------------------------------------------------------- */

TEST(examples_try_it)
{
	static const char event[] =
		"{\"event_id\":\"evt_123\",\"event_name\":\"INSERT\",\"table_name\":\"users\","
		"\"new_image\":{\"id\":\"user_123\",\"name\":\"John "
		"Doe\",\"email\":\"john@example.com\"}}";
	const char *dir = getenv("RELAY_EXAMPLES_DIR");
	char *base = dir ? xstrdup(dir) : xstrdup("examples/functions");
	struct {
		const char *name, *runtime, *handler, *line;
	} ex[] = {
		{"user-events-python", "python3.14", "events.created.handler",
		 "relay: function \"user-events-python\" handler \"events.created.handler\": "
		 "User created: user_123\n"},
		{"welcome-email-node", "node24", "handler.handler",
		 "relay: function \"welcome-email-node\" handler \"handler.handler\": "
		 "Sending welcome email to john@example.com\n"},
	};
	for (size_t i = 0; i < ARRAY_LEN(ex); i++) {
		char *d = xasprintf("%s/%s", base, ex[i].name);
		struct image_result ir;
		char *e = NULL;
		int rc = image_prepare(D, ex[i].name, d, runtime_find(ex[i].runtime), &ir, &e);
		if (rc < 0)
			printf("  %s\n", e);
		CHECK(rc == 0);
		if (rc == 0) {
			struct runner_request in = inv(ex[i].name, ir.ref, ex[i].handler);
			in.payload = event;
			in.payload_len = sizeof event - 1;
			in.event_id = "evt_123";
			in.timeout_ns = 0; /* the 6s default */
			struct runner_result r;
			cap_reset();
			CHECK(runner_invoke(D, &in, &r) == 0);
			runner_result_free(&r);
			char *out = captured();
			if (!t_contains(out, ex[i].line))
				T_FAIL_("missing line %s in:\n%s", ex[i].line, out);
			free(out);
		}
		image_result_free(&ir);
		free(d);
	}
	free(base);
}

TEST(cleanup)
{
	const char *mine[] = {fn_py, fn_node, fn_cjs, fn_req1, fn_req2, fn_edit};
	char *e = NULL;
	for (size_t i = 0; i < ARRAY_LEN(mine); i++) {
		if (image_gc(D, mine[i], NULL, 0, NULL, &e) < 0) {
			printf("  %s\n", e);
			free(e);
			e = NULL;
		}
	}
	/* Dependency images are never removed by Relay; these two were
	 * created by this run only (their manifests carry its pid). */
	const char *deps[] = {dep_ref_req, NULL};
	for (size_t i = 0; deps[i]; i++) {
		if (!deps[i][0])
			continue;
		struct docker_response r;
		char *path = xasprintf("/images/%s", deps[i]);
		docker_request(D, "DELETE", path, NULL, 0, NULL, 30000, &r);
		docker_response_free(&r);
		free(path);
	}
	char *rm = xasprintf("rm -rf '%s'", root);
	CHECK(system(rm) == 0);
	free(rm);
	secret_provider_free(SP);
	docker_close(D);
	log_set_fd(2);
	close(cap_pipe[1]);
	pthread_join(cap_thread, NULL);
	close(cap_pipe[0]);
	buf_free(&cap);
}

T_MAIN(T_FIXTURE(setup), T_CASE(build_python_and_reuse), T_CASE(build_node_and_cjs),
       T_CASE(python_handlers), T_CASE(node_handlers), T_CASE(node_commonjs_package_json),
       T_CASE(output_forwarding), T_CASE(timeouts), T_CASE(hardening_labels_and_secret_placement),
       T_CASE(env_and_secret_injection), T_CASE(canary_never_in_images_or_logs),
       T_CASE(dependency_image_shared), T_CASE(edit_rebuild_gc_and_failed_build),
       T_CASE(fifty_invocations_leave_no_container), T_CASE(orphan_sweep),
       T_CASE(create_timeout_leaves_no_container), T_CASE(slow_daemon_every_phase_within_bound),
       T_CASE(consumer_one_handler_in_flight),
       T_CASE(consumer_running_marker_outlives_the_container), T_CASE(examples_try_it),
       T_FIXTURE(cleanup))
