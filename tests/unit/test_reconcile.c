/* The reconciler's startup pass (reconcile.h) where it needs no image:
 * what is never served (an invalid name, no template.yaml, an invalid
 * template, git sync's staging directories, plain files) and never reaches
 * Docker, a valid function whose image cannot be prepared (logged, skipped,
 * recorded as a failed reconcile), the state database's function set
 * replaced by the valid ones, many functions prepared concurrently and
 * finished in name order, a missing functions directory, and a stop
 * before any start. Docker is a fake on loopback (Relay's own HTTP
 * server) that answers GET /version and refuses everything else, counting
 * what reached it. The live thread (inotify, passes, image GC) is tested
 * against a real daemon in tests/it/reconcile.c. */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include "io/docker.h"
#include "io/http.h"
#include "base/log.h"
#include "engine/reconcile.h"
#include "engine/registry.h"
#include "engine/state.h"
#include "t.h"
#include "tfiles.h"
#include "base/util.h"

/* ---- a fake daemon ----------------------------------------------------- */

static atomic_int other_requests;   /* anything but GET /version */
static atomic_int version_requests; /* GET /version: one per docker_open */
static pthread_mutex_t paths_lock = PTHREAD_MUTEX_INITIALIZER;
static char paths[4096];

static void fake_docker(const struct http_request *req, struct http_response *resp, void *arg)
{
	if (strcmp(req->method, "GET") == 0 && strstr(req->path, "/version")) {
		atomic_fetch_add(&version_requests, 1);
		http_response_text(resp, 200, "application/json",
				   "{\"ApiVersion\":\"1.41\",\"Version\":\"fake\"}");
		return;
	}
	atomic_fetch_add(&other_requests, 1);
	pthread_mutex_lock(&paths_lock);
	size_t n = strlen(paths);
	snprintf_(paths + n, sizeof paths - n, "%s %s\n", req->method, req->path);
	pthread_mutex_unlock(&paths_lock);
	http_response_text(resp, 500, "application/json", "{\"message\":\"fake daemon refuses\"}");
}

struct rig {
	char *root, *fdir;
	struct http_server *fake;
	struct docker *d;
	struct state *st;
	struct registry *reg;
	struct reconciler *rc;
};

static void rig_new(struct rig *r, bool with_state)
{
	memset(r, 0, sizeof *r);
	r->root = t_tmpdir();
	r->fdir = xasprintf("%s/functions", r->root);
	struct http_server_config cfg = {
		.name = "Fake Docker", .listen_addr = "127.0.0.1:0", .handler = fake_docker};
	char *err = NULL;
	if (http_server_start(&cfg, &r->fake, &err) < 0) {
		printf("  fake daemon: %s\n", err);
		exit(1);
	}
	char *host = xasprintf("tcp://127.0.0.1:%d", http_server_port(r->fake));
	setenv("DOCKER_HOST", host, 1);
	unsetenv("DOCKER_TLS_VERIFY");
	unsetenv("DOCKER_API_VERSION");
	free(host);
	if (docker_open(&r->d, &err) < 0) {
		printf("  docker_open on the fake: %s\n", err);
		exit(1);
	}
	if (with_state && state_open(r->root, &r->st, &err) < 0) {
		printf("  state_open: %s\n", err);
		exit(1);
	}
	r->reg = registry_new();
	atomic_store(&other_requests, 0);
	atomic_store(&version_requests, 0);
	paths[0] = '\0';
}

static void rig_free(struct rig *r)
{
	if (r->rc)
		CHECK_INT(reconciler_stop(r->rc, 1000), 0); /* never started: at once */
	reconciler_free(r->rc);
	registry_free(r->reg);
	state_close(r->st);
	docker_close(r->d);
	http_server_stop(r->fake);
	t_rmtree(r->root);
	free(r->root);
	free(r->fdir);
}

/* A Python function in the functions directory: main.py, and template
 * text unless tpl is NULL (not ready). */
static void put_function(struct rig *r, const char *name, const char *tpl)
{
	char *rel = xasprintf("%s/main.py", name);
	t_write_file(r->fdir, rel, "def handler(e):\n    pass\n");
	free(rel);
	if (tpl) {
		rel = xasprintf("%s/template.yaml", name);
		t_write_file(r->fdir, rel, tpl);
		free(rel);
	}
}

/* The startup pass, as relay start runs it on its main thread: a new
 * reconciler loads the functions directory. Nothing may come out served
 * here. Returns what was logged (malloc'd). */
static char *load_serving_nothing(struct rig *r)
{
	struct reconcile_config cfg = {
		.functions_dir = r->fdir, .registry = r->reg, .state = r->st};
	t_capture_logs();
	r->rc = reconciler_new(&cfg);
	CHECK_INT(reconciler_load(r->rc, r->d), 0);
	char *logs = t_captured_logs();
	t_release_logs();
	struct snapshot *s = registry_acquire(r->reg);
	CHECK(s != NULL && s->nfns == 0 && s->nrules == 0 && s->set != NULL);
	registry_release(r->reg, s);
	return logs;
}

#define GOOD_TPL "runtime: python3.14\nevents:\n  - handler: main.handler\n    pattern: {a: [1]}\n"
#define BAD_TPL "runtime: cobol\nevents:\n  - handler: main.handler\n    pattern: {a: [1]}\n"

/* ---- tests ------------------------------------------------------------- */

/* Nothing here can be served: logged once each, never built, not one
 * request to Docker, an empty first snapshot, and the state database's
 * function set (a previous run's included) replaced by nothing. */
TEST(unservable_functions_never_reach_docker)
{
	struct rig r;
	rig_new(&r, true);
	REQUIRE(mkdir(r.fdir, 0755) == 0);
	put_function(&r, "Bad_Name", GOOD_TPL);
	put_function(&r, "not-ready", NULL);
	put_function(&r, "broken", BAD_TPL);
	t_write_file(r.fdir, ".relay-sync-123/x/template.yaml", GOOD_TPL);
	t_write_file(r.fdir, "plain-file", "not a function\n");
	static const struct state_handler h[] = {{"main.handler", 0}};
	const struct state_function prev = {"old-fn", "python3.14", h, 1,    NULL,
					    0,	      NULL,	    0, NULL, 0, false};
	char *err = NULL;
	REQUIRE(state_put_pending(r.st, &prev, 1, &err) == 0);
	char *logs = load_serving_nothing(&r);
	CHECK_INT(atomic_load(&other_requests), 0);
	CHECK(reconciler_readable(r.rc)); /* none servable, but the directory was read */
	CHECK_INT(t_count(logs, "msg=\"invalid function skipped\" function=Bad_Name "), 1);
	CHECK_INT(t_count(logs, "msg=\"invalid function skipped\" function=broken "), 1);
	CHECK_INT(t_count(logs, "level=INFO msg=\"directory has no template.yaml yet; not ready\" "
				"function=not-ready\n"),
		  1);
	CHECK_INT(t_count(logs, "relay-sync"), 0);
	CHECK_INT(t_count(logs, "plain-file"), 0);
	CHECK_INT(t_count(logs, "building function image"), 0);
	struct state_function_info *fs = NULL;
	size_t n = 99;
	REQUIRE(state_list_functions(r.st, &fs, &n, &err) == 0);
	CHECK_INT(n, 0);
	state_function_infos_free(fs, n);
	if (t_failed_)
		printf("%s", logs);
	free(logs);
	rig_free(&r);
}

/* A valid function whose image cannot be prepared is skipped and logged,
 * recorded in the state database as pending with a failed reconcile; the
 * others are served as before (here: none), and only Docker's image
 * requests were made. */
TEST(image_failure_at_startup_skips_only_that_function)
{
	struct rig r;
	rig_new(&r, true);
	REQUIRE(mkdir(r.fdir, 0755) == 0);
	put_function(&r, "good", GOOD_TPL);
	put_function(&r, "broken", BAD_TPL);
	char *logs = load_serving_nothing(&r);
	CHECK(atomic_load(&other_requests) >= 1);
	pthread_mutex_lock(&paths_lock);
	CHECK(strstr(paths, "relay-fn-good") != NULL);
	CHECK(strstr(paths, "broken") == NULL);
	pthread_mutex_unlock(&paths_lock);
	CHECK_INT(t_count(logs, "level=ERROR msg=\"image build failed; function unavailable\" "
				"function=good error="),
		  1);
	CHECK(strstr(logs, "fake daemon refuses") != NULL);
	struct state_function_info *f = NULL;
	char *err = NULL;
	REQUIRE(state_get_function(r.st, "good", &f, &err) == 0 && f);
	CHECK_STR(f->status, "pending");
	CHECK_STR(f->runtime, "python3.14");
	CHECK(f->image == NULL);
	CHECK_STR(f->last_reconcile_status, "failed");
	CHECK(f->last_error && strstr(f->last_error, "fake daemon refuses") != NULL);
	state_function_info_free(f);
	REQUIRE(state_get_function(r.st, "broken", &f, &err) == 0);
	CHECK(f == NULL);
	if (t_failed_)
		printf("%s", logs);
	free(logs);
	rig_free(&r);
}

/* The pool's size: min(online cores at least 2, RECONCILE_PREPARE_MAX, n). */
TEST(prepare_pool_size)
{
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	size_t want = cores < 2 ? 2 : (size_t)cores;
	if (want > RECONCILE_PREPARE_MAX)
		want = RECONCILE_PREPARE_MAX;
	CHECK_INT(reconcile_prepare_threads(0), 0);
	CHECK_INT(reconcile_prepare_threads(1), 1);
	CHECK_INT(reconcile_prepare_threads(2), 2);
	CHECK_INT(reconcile_prepare_threads(1000), want);
}

/* Nine functions prepared concurrently, every build refused: each failure
 * is logged once and recorded, in name order as one at a time would, the
 * daemon saw every function's image, and each preparer thread opened its
 * own connection (one GET /version each; the loading thread uses its own
 * handle, opened before). */
TEST(concurrent_startup_finishes_in_name_order)
{
	struct rig r;
	rig_new(&r, true);
	REQUIRE(mkdir(r.fdir, 0755) == 0);
	char name[16];
	for (int i = 1; i <= 9; i++) {
		snprintf_(name, sizeof name, "fn-%d", i);
		put_function(&r, name, GOOD_TPL);
	}
	atomic_store(&version_requests, 0);
	char *logs = load_serving_nothing(&r);
	CHECK_INT(atomic_load(&version_requests), (int)reconcile_prepare_threads(9) - 1);
	const char *at = logs;
	for (int i = 1; i <= 9; i++) {
		char *line =
			xasprintf("level=ERROR msg=\"image build failed; function unavailable\" "
				  "function=fn-%d error=",
				  i);
		CHECK_INT(t_count(logs, line), 1);
		const char *p = strstr(at, line);
		CHECK(p != NULL); /* after fn-(i-1)'s */
		if (p)
			at = p;
		free(line);
		snprintf_(name, sizeof name, "relay-fn-fn-%d", i);
		pthread_mutex_lock(&paths_lock);
		CHECK(strstr(paths, name) != NULL);
		pthread_mutex_unlock(&paths_lock);
		struct state_function_info *f = NULL;
		char *err = NULL;
		snprintf_(name, sizeof name, "fn-%d", i);
		REQUIRE(state_get_function(r.st, name, &f, &err) == 0 && f);
		CHECK_STR(f->status, "pending");
		CHECK_STR(f->last_reconcile_status, "failed");
		state_function_info_free(f);
	}
	if (t_failed_)
		printf("%s", logs);
	free(logs);
	rig_free(&r);
}

/* No functions directory: an ERROR, nothing served, still a snapshot. */
TEST(missing_functions_directory)
{
	struct rig r;
	rig_new(&r, false);
	char *logs = load_serving_nothing(&r);
	CHECK_INT(atomic_load(&other_requests), 0);
	char *want = xasprintf("level=WARN msg=\"cannot read the functions directory; waiting for "
			       "it\" path=%s error=\"cannot read functions directory %s: No such "
			       "file or directory\"",
			       r.fdir, r.fdir);
	CHECK(strstr(logs, want) != NULL);
	/* Not "no functions": the consumer must hold its reading. */
	CHECK(!reconciler_readable(r.rc));
	free(want);
	if (t_failed_)
		printf("%s", logs);
	free(logs);
	rig_free(&r);
	reconciler_free(NULL);
}

T_MAIN(T_CASE(unservable_functions_never_reach_docker),
       T_CASE(image_failure_at_startup_skips_only_that_function), T_CASE(prepare_pool_size),
       T_CASE(concurrent_startup_finishes_in_name_order), T_CASE(missing_functions_directory))
