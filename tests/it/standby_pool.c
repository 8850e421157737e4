/*
 * The standby pool (standby.h) against the real Docker daemon, through its
 * public calls only, the way the executor drives it (standby_begin, take,
 * runner_dispatch, standby_end): what is asserted is what an operator sees,
 * the containers labelled relay.standby=true and relay.hostname=<this
 * run's host> (the daemon's container list, its event stream of create,
 * die and destroy, docker inspect), standby_count and the counter
 * standby_discarded_total{reason}.
 *
 *  - sizing: the target is the recent peak of concurrent invocations, or
 *    what a steady stream uses up during one start when that is more, the
 *    sum is capped at STANDBY_MAX with the most recently used handler
 *    first, and what exceeds a share is removed ("excess");
 *  - a container serves exactly one event: a taken one is dispatched,
 *    exits and is removed, the next take gets another, the pool refills;
 *  - idle expiry no earlier than STANDBY_IDLE ("idle");
 *  - a new version of the function (template.yaml edited: a new image)
 *    replaces the parked container ("version"), and no take of the current
 *    version ever gets the old one;
 *  - a rotated secret replaces it likewise ("secret");
 *  - an import error: the container exits ("exited") and that version
 *    gets no other for STANDBY_RETRY_NS;
 *  - standby_stop removes every parked container ("shutdown").
 *
 * Needs a daemon on DOCKER_HOST and the python:3.14-slim image
 * (scripts/standin-images makes a stand-in). Function names and the host
 * label carry this process id; the images are removed at the end.
 *
 * Bounds: a container start is bounded by RUNNER_SETUP_TIMEOUT_MS (30 s)
 * and the stand-in's starts take about a second, at most STANDBY_STARTERS
 * at once, on 2 cores shared with the other test lanes. WAIT_S (120 s)
 * covers a few such starts with that margin; a bound that only waits
 * for something to happen never makes a passing run slower.
 */
#include <ctype.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "io/docker.h"
#include "base/duration.h"
#include "model/function.h"
#include "engine/image.h"
#include "base/log.h"
#include "engine/metrics.h"
#include "engine/registry.h"
#include "engine/runner.h"
#include "model/runtime.h"
#include "model/secret.h"
#include "engine/slots.h"
#include "engine/standby.h"
#include "t.h"
#include "tfiles.h"
#include "base/util.h"

#define WAIT_S 120

static struct docker *D;
static char root[256], fns[300], data_dir[300], host[64], log_path[320];
static struct secret_provider *SP;
static char fn_a[64], fn_b[64], fn_bad[64], fn_sec[64], secret_name[64];
static char img_a[128], img_b[128], img_bad[128], img_sec[128];
static const char *H = "h.handler";

/* Polls expr every 100 ms for at most secs seconds; true once it holds. */
#define WAIT_UNTIL(secs, expr)                                           \
	({                                                               \
		int64_t end_ = now_mono_ns() + (int64_t)(secs) * NS_PER_SEC; \
		bool ok_;                                                \
		while (!(ok_ = (expr)) && now_mono_ns() < end_)          \
			usleep(100 * 1000);                              \
		ok_;                                                     \
	})

/* ---- the daemon's view ---------------------------------------------------- */

static char *url_enc(const char *s)
{
	struct buf b;
	buf_init(&b, 1u << 16);
	for (; *s; s++)
		if (isalnum((unsigned char)*s) || strchr("-_.~", *s))
			buf_append(&b, s, 1);
		else
			buf_appendf(&b, "%%%02X", (unsigned char)*s);
	char *r = xstrdup(b.data ? b.data : "");
	buf_free(&b);
	return r;
}

static json_t *get_json(const char *path)
{
	struct docker_response r;
	json_t *o = NULL;
	if (docker_request(D, "GET", path, NULL, 0, NULL, 30000, &r) == 0 && r.status == 200)
		o = json_loadb(r.body, r.len, 0, NULL);
	docker_response_free(&r);
	return o;
}

/* Running standby containers of this run's host (of function fn when not
 * NULL): how many, their ids in ids[0..max) (full ids, 65 bytes each). */
static int parked_ids(const char *fn, char (*ids)[72], int max)
{
	json_t *labels = json_pack("[s, s]", "relay.standby=true", "");
	char *hl = xasprintf("relay.hostname=%s", host);
	json_array_set_new(labels, 1, json_string(hl));
	free(hl);
	if (fn) {
		char *fl = xasprintf("relay.function=%s", fn);
		json_array_append_new(labels, json_string(fl));
		free(fl);
	}
	json_t *f = json_pack("{s:o}", "label", labels);
	char *fs = json_dumps(f, JSON_COMPACT);
	char *enc = url_enc(fs);
	char *path = xasprintf("/containers/json?filters=%s", enc);
	json_t *list = get_json(path);
	int n = -1;
	if (json_is_array(list)) {
		n = (int)json_array_size(list);
		for (int i = 0; ids && i < n && i < max; i++)
			strlcpy_(ids[i],
				 json_string_value(json_object_get(json_array_get(list, i), "Id")),
				 sizeof ids[i]);
	}
	json_decref(list);
	free(path);
	free(enc);
	free(fs);
	json_decref(f);
	return n;
}

static int parked_n(const char *fn)
{
	return parked_ids(fn, NULL, 0);
}

/* The container's HTTP status on inspect (200, 404 once removed). */
static long inspect_status(const char *id)
{
	struct docker_response r;
	char *path = xasprintf("/containers/%s/json", id);
	long st = -1;
	if (docker_request(D, "GET", path, NULL, 0, NULL, 10000, &r) == 0)
		st = r.status;
	docker_response_free(&r);
	free(path);
	return st;
}

static bool gone(const char *id)
{
	return inspect_status(id) == 404;
}

/* Config.Image of a container, and whether its Env has entry (NAME=VALUE). */
static bool container_has(const char *id, const char *image, const char *entry)
{
	char *path = xasprintf("/containers/%s/json", id);
	json_t *o = get_json(path);
	free(path);
	json_t *cfg = json_object_get(o, "Config");
	bool ok = o && strcmp(json_string_value(json_object_get(cfg, "Image")) ?: "", image) == 0;
	bool has = !entry;
	size_t i;
	json_t *v;
	json_array_foreach(json_object_get(cfg, "Env"), i, v)
		has = has || strcmp(json_string_value(v) ?: "", entry) == 0;
	json_decref(o);
	return ok && has;
}

/* The daemon's event stream of this host's containers, create, die and destroy,
 * recorded live by a thread of its own from setup on (GET /events without
 * since: a query of past events reads the daemon's ring of its last 256
 * events, which other tests' containers overrun within a minute). */
struct ev {
	char fn[64];
	bool create, die; /* neither: a destroy */
	char id[72];
	int64_t tn; /* the daemon's time of it, ns */
};

static pthread_mutex_t ev_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ev *evs;
static int nev, capev;
static atomic_int ev_stop, ev_done;
static pthread_t ev_thread;
static bool ev_running;
static struct buf ev_part;

static int on_events(const char *data, size_t len, void *ctx)
{
	buf_append(&ev_part, data, len);
	char *nl;
	while (ev_part.data && (nl = memchr(ev_part.data, '\n', ev_part.len))) {
		size_t n = (size_t)(nl - ev_part.data);
		json_t *e = json_loadb(ev_part.data, n, 0, NULL);
		if (e) {
			json_t *actor = json_object_get(e, "Actor");
			const char *fn = json_string_value(
				json_object_get(json_object_get(actor, "Attributes"), "relay.function"));
			const char *act = json_string_value(json_object_get(e, "Action"));
			pthread_mutex_lock(&ev_lock);
			if (nev == capev) {
				capev = capev ? 2 * capev : 64;
				evs = xrealloc(evs, (size_t)capev * sizeof *evs);
			}
			struct ev *x = &evs[nev++];
			memset(x, 0, sizeof *x);
			strlcpy_(x->fn, fn ? fn : "", sizeof x->fn);
			strlcpy_(x->id, json_string_value(json_object_get(actor, "ID")) ?: "",
				 sizeof x->id);
			x->create = act && strcmp(act, "create") == 0;
			x->die = act && strcmp(act, "die") == 0;
			x->tn = (int64_t)json_integer_value(json_object_get(e, "timeNano"));
			pthread_mutex_unlock(&ev_lock);
			json_decref(e);
		}
		memmove(ev_part.data, nl + 1, ev_part.len - n - 1);
		ev_part.len -= n + 1;
		ev_part.data[ev_part.len] = '\0';
	}
	return atomic_load(&ev_stop);
}

static void *ev_main(void *arg)
{
	struct docker *d = NULL;
	char *e = NULL;
	if (docker_open(&d, &e) < 0) {
		printf("  events: %s\n", e);
		free(e);
		atomic_store(&ev_done, 1);
		return NULL;
	}
	char *hl = xasprintf("relay.hostname=%s", host);
	json_t *f = json_pack("{s:[s], s:[s, s, s], s:[s]}", "type", "container", "event",
			      "create", "die", "destroy", "label", hl);
	free(hl);
	char *fs = json_dumps(f, JSON_COMPACT);
	char *enc = url_enc(fs);
	char *path = xasprintf("/events?filters=%s", enc);
	long status = 0;
	docker_request_stream(d, "GET", path, NULL, 0, NULL, 0, on_events, NULL, &status);
	free(path);
	free(enc);
	free(fs);
	json_decref(f);
	docker_close(d);
	atomic_store(&ev_done, 1);
	return NULL;
}

static bool ev_seen(const char *id, bool create)
{
	pthread_mutex_lock(&ev_lock);
	bool seen = false;
	for (int i = nev - 1; i >= 0 && !seen; i--)
		seen = !evs[i].die && evs[i].create == create && strcmp(evs[i].id, id) == 0;
	pthread_mutex_unlock(&ev_lock);
	return seen;
}

/* A barrier in the stream: a container of this host (function "sync",
 * never started) created and removed; once its destroy is recorded, so is
 * every earlier event. Returns how many events came before it. */
static bool ev_barrier(char *id, size_t idsz)
{
	static int seq;
	char *body = xasprintf("{\"Image\":\"%s\",\"Labels\":{\"relay.hostname\":\"%s\","
			       "\"relay.function\":\"sync\"}}",
			       img_a, host);
	char *path = xasprintf("/containers/create?name=%s-sync-%d", host, ++seq);
	struct docker_response r;
	id[0] = '\0';
	if (docker_request(D, "POST", path, body, strlen(body), NULL, 30000, &r) == 0 &&
	    r.status == 201) {
		json_t *o = json_loadb(r.body, r.len, 0, NULL);
		strlcpy_(id, json_string_value(json_object_get(o, "Id")) ?: "", idsz);
		json_decref(o);
	}
	docker_response_free(&r);
	free(path);
	free(body);
	if (!id[0]) {
		T_FAIL_("cannot create the event barrier container");
		return false;
	}
	path = xasprintf("/containers/%s?force=1", id);
	bool ok = docker_request(D, "DELETE", path, NULL, 0, NULL, 30000, &r) == 0 &&
		  r.status == 204;
	if (!ok)
		T_FAIL_("cannot remove the event barrier container %.12s", id);
	docker_response_free(&r);
	free(path);
	return ok;
}

static int ev_sync(void)
{
	char id[72];
	if (!ev_barrier(id, sizeof id))
		return -1;
	/* The daemon sends an event as it happens: seconds at most even on a
	 * loaded machine. */
	if (!WAIT_UNTIL(30, ev_seen(id, false))) {
		T_FAIL_("the event stream did not deliver the barrier within 30 s");
		return -1;
	}
	pthread_mutex_lock(&ev_lock);
	int n = nev;
	pthread_mutex_unlock(&ev_lock);
	return n;
}

/* Once every event so far is recorded: from event number mark (ev_sync's
 * count) on, the creates of fn's containers (every function when NULL; the
 * barriers left out), and the most that were alive at once. */
static void created(int mark, const char *fn, int *creates, int *most)
{
	int end = ev_sync();
	int alive = 0;
	*creates = 0;
	*most = 0;
	if (mark < 0 || end < 0) {
		*creates = *most = -1;
		return;
	}
	pthread_mutex_lock(&ev_lock);
	for (int i = mark; i < end; i++) {
		if (evs[i].die || strcmp(evs[i].fn, "sync") == 0 || (fn && strcmp(evs[i].fn, fn) != 0))
			continue;
		alive += evs[i].create ? 1 : -1;
		*creates += evs[i].create;
		if (alive > *most)
			*most = alive;
	}
	pthread_mutex_unlock(&ev_lock);
}

/* ---- functions, registry, pool ---------------------------------------- */

static const char *handler_py = "import os, sys\n"
				"def handler(event):\n"
				"    print('served', event['id'], os.environ.get('HOSTNAME'))\n";

static void write_fn(const char *fn, const char *py, const char *tail)
{
	char *d = xasprintf("%s/%s", fns, fn);
	char *tpl = xasprintf("runtime: python3.14\nevents:\n  - handler: h.handler\n"
			      "    pattern: {}\n%s",
			      tail ? tail : "");
	t_write_file(d, "template.yaml", tpl);
	t_write_file(d, "h.py", py);
	free(tpl);
	free(d);
}

static bool build(const char *fn, char *ref, size_t refsz)
{
	char *d = xasprintf("%s/%s", fns, fn);
	struct image_result res;
	char *e = NULL;
	bool ok = image_prepare(D, fn, d, runtime_find("python3.14"), &res, &e) == 0;
	if (ok) {
		strlcpy_(ref, res.ref, refsz);
		image_result_free(&res);
	} else {
		printf("  image_prepare %s: %s\n", fn, e);
		free(e);
	}
	free(d);
	return ok;
}

static struct fn_version *load_fv(const char *fn, const char *img)
{
	struct function *f = NULL;
	struct strlist errs = {0}, warns = {0};
	int st = function_load(fns, fn, &f, &errs, &warns);
	for (size_t i = 0; i < errs.n; i++)
		printf("  %s: %s\n", fn, errs.v[i]);
	strlist_free(&errs);
	strlist_free(&warns);
	return st == FUNCTION_OK ? registry_fn_version_new(f, xstrdup(img), NULL) : NULL;
}

/* Publishes fvs[0..n) (copied into the array the registry takes). */
static void publish(struct registry *reg, struct fn_version *const *fvs, size_t n)
{
	struct fn_version **a = xcalloc(n ? n : 1, sizeof *a);
	memcpy(a, fvs, n * sizeof *a);
	registry_publish(reg, a, n);
}

struct pool {
	struct registry *reg;
	struct slots *slots;
	struct standby *sb;
};

static void pool_start(struct pool *p, int max, int64_t idle_ns)
{
	p->reg = registry_new();
	p->slots = slots_new(8);
	struct standby_config cfg = {
		.max = max,
		.idle_ns = idle_ns,
		.registry = p->reg,
		.slots = p->slots,
		.provider = SP,
		.hostname = host,
	};
	p->sb = standby_start(&cfg);
}

/* standby_stop removes every parked container ("shutdown"): checked for
 * every pool. */
static void pool_stop(struct pool *p)
{
	int before = parked_n(NULL);
	uint64_t sd = metrics_standby_discarded_value(METRIC_STANDBY_SHUTDOWN);
	standby_stop(p->sb);
	int left = parked_n(NULL);
	CHECK_INT(left, 0);
	/* None parked escapes the count (before >= 0: the list answered). */
	CHECK(before >= 0);
	CHECK_INT(metrics_standby_discarded_value(METRIC_STANDBY_SHUTDOWN) - sd, before);
	slots_free(p->slots);
	registry_free(p->reg);
}

/* Demand as the executor records it: n invocations of (fv, H) at once,
 * then all ended. */
static void demand(struct pool *p, const struct fn_version *fv, int n)
{
	for (int i = 0; i < n; i++)
		standby_begin(p->sb, fv, H);
	for (int i = 0; i < n; i++)
		standby_end(p->sb, fv, H);
}

static bool no_cancel(void *ctx)
{
	return false;
}

/* Runs event {"id": id} in p (taken for fv) as the executor does; the
 * result's container id in cid. True when it succeeded. */
static bool dispatch(struct runner_parked **pp, const struct fn_version *fv, const char *id,
		     char *cid, size_t cidsz)
{
	char *payload = xasprintf("{\"id\":\"%s\"}", id);
	const struct template *t = fv->fn->tpl;
	struct runner_request in = {
		.function = fv->fn->name,
		.handler = H,
		.image = fv->image,
		.timeout_ns = 30LL * NS_PER_SEC,
		.env = t->env,
		.nenv = t->nenv,
		.secrets = t->secrets,
		.nsecrets = t->nsecrets,
		.provider = SP,
		.payload = payload,
		.payload_len = strlen(payload),
		.message_id = "1700000000000-0",
		.event_id = id,
		.event_name = "INSERT",
		.hostname = host,
		.cancelled = no_cancel,
	};
	struct runner_result r;
	runner_dispatch(D, pp, &in, &r);
	bool ok = r.outcome == RUNNER_SUCCESS && *pp == NULL;
	if (!ok)
		printf("  dispatch %s: outcome %d, %s\n", id, (int)r.outcome,
		       r.error ? r.error : "");
	strlcpy_(cid, r.container_id, cidsz);
	runner_result_free(&r);
	free(payload);
	return ok;
}

/* The log written since the start (handler output included). */
static bool log_has(const char *needle)
{
	char *s = t_read_file(log_path, 64u << 20, NULL);
	bool has = s && strstr(s, needle);
	free(s);
	return has;
}

/* ---- setup ---------------------------------------------------------------- */

static bool tried, ready, cleaned;
static void cleanup(void);

/* The fixture, also run by a case started alone (build-san/it/standby_pool
 * CASE), whose clean-up then runs at exit. */
TEST(setup)
{
	/* Once: a setup that failed part way must not start a second reader
	 * of the event stream when each case asks for it. */
	if (tried)
		return;
	tried = true;
	char *e = NULL;
	signal(SIGPIPE, SIG_IGN);
	int pid = (int)getpid();
	snprintf_(root, sizeof root, "/tmp/relay-it-sbpool-%d", pid);
	snprintf_(fns, sizeof fns, "%s/functions", root);
	snprintf_(data_dir, sizeof data_dir, "%s/data", root);
	snprintf_(log_path, sizeof log_path, "%s/log", root);
	snprintf_(host, sizeof host, "it-sbpool-%d", pid);
	snprintf_(fn_a, sizeof fn_a, "it-sbpool-a-%d", pid);
	snprintf_(fn_b, sizeof fn_b, "it-sbpool-b-%d", pid);
	snprintf_(fn_bad, sizeof fn_bad, "it-sbpool-bad-%d", pid);
	snprintf_(fn_sec, sizeof fn_sec, "it-sbpool-sec-%d", pid);
	snprintf_(secret_name, sizeof secret_name, "sbpool-tok-%d", pid);
	t_write_file(root, "log", "");
	FILE *lf = fopen(log_path, "a");
	REQUIRE(lf);
	log_set_fd(dup(fileno(lf)));
	fclose(lf);
	REQUIRE(docker_open(&D, &e) == 0);
	SP = secret_file_provider_new(data_dir);
	REQUIRE(secret_set(SP, secret_name, "one", 3, &e) == 0);
	write_fn(fn_a, handler_py, NULL);
	write_fn(fn_b, handler_py, NULL);
	write_fn(fn_bad, "raise RuntimeError('broken at import')\n", NULL);
	char *sec = xasprintf("secrets:\n  TOKEN: %s\n", secret_name);
	write_fn(fn_sec, handler_py, sec);
	free(sec);
	REQUIRE(build(fn_a, img_a, sizeof img_a));
	REQUIRE(build(fn_b, img_b, sizeof img_b));
	REQUIRE(build(fn_bad, img_bad, sizeof img_bad));
	REQUIRE(build(fn_sec, img_sec, sizeof img_sec));
	buf_init(&ev_part, 1u << 20);
	pthread_create(&ev_thread, NULL, ev_main, NULL);
	ev_running = true;
	/* The stream is live once a barrier comes through. The daemon sends
	 * only what happens after it took the request, so a barrier made
	 * before then is never seen: make one a second until one is. */
	bool live = false;
	for (int i = 0; i < 30 && !live && !atomic_load(&ev_done); i++) {
		char id[72];
		REQUIRE(ev_barrier(id, sizeof id));
		live = WAIT_UNTIL(1, ev_seen(id, false));
	}
	if (!live)
		T_FAIL_("the event stream delivered none of the barriers within 30 s");
	REQUIRE(live);
	ready = true;
	atexit(cleanup);
}

#define NEED_SETUP()           \
	do {                   \
		setup();       \
		REQUIRE(ready); \
	} while (0)

/* ---- cases ---------------------------------------------------------------- */

/* Three invocations at once: three parked, no more. Each take gets a
 * container of its own that serves that one event and is removed; the
 * pool refills to three, never with a container that served. */
TEST(target_is_the_recent_peak_and_each_container_serves_one_event)
{
	NEED_SETUP();
	int t0 = ev_sync();
	struct pool p;
	pool_start(&p, 8, 600LL * NS_PER_SEC);
	struct fn_version *fv = load_fv(fn_a, img_a);
	REQUIRE(fv);
	publish(p.reg, &fv, 1);
	demand(&p, fv, 3);
	CHECK(WAIT_UNTIL(WAIT_S, standby_count(p.sb, fn_a, H) == 3 && parked_n(fn_a) == 3));
	int creates, most;
	created(t0, fn_a, &creates, &most);
	CHECK_INT(creates, 3); /* none made beyond the target and removed */
	CHECK_INT(most, 3);

	char served[4][72];
	for (int k = 0; k < 4; k++) {
		char id[16], cid[72], line[64];
		snprintf(id, sizeof id, "ev-%d", k);
		standby_begin(p.sb, fv, H);
		struct runner_parked *rp = standby_take(p.sb, fv, H);
		CHECK(rp != NULL);
		if (!rp) {
			standby_end(p.sb, fv, H);
			break;
		}
		char took[72];
		strlcpy_(took, runner_parked_id(rp), sizeof took);
		for (int j = 0; j < k; j++)
			if (strcmp(served[j], took) == 0)
				T_FAIL_("take %d got %.12s, which served ev-%d", k, took, j);
		strlcpy_(served[k], took, sizeof served[k]);
		CHECK(dispatch(&rp, fv, id, cid, sizeof cid));
		standby_end(p.sb, fv, H);
		CHECK_STR(cid, took);
		/* The event reached the handler in that container (its output is
		 * forwarded before runner_dispatch returns) ... */
		snprintf(line, sizeof line, "served %s %.12s", id, took);
		CHECK(log_has(line));
		/* ... which is removed, never parked again, and the pool is back at
		 * three. */
		CHECK(WAIT_UNTIL(WAIT_S, gone(took)));
		/* The daemon runs a container a moment before the pool lists it. */
		CHECK(WAIT_UNTIL(WAIT_S, parked_n(fn_a) == 3 && standby_count(p.sb, fn_a, H) == 3));
	}
	CHECK_INT(standby_count(p.sb, fn_a, H), 3);
	pool_stop(&p);
	/* Once stopped, the pool's whole history is in the event stream: one
	 * create per event served plus the three that were ready, never more
	 * alive than those three and the one serving. */
	created(t0, fn_a, &creates, &most);
	CHECK_INT(creates, 3 + 4);
	CHECK(most <= 3 + 1);
}

/* STANDBY_MAX 3, A's peak 2, then B's peak 2: B (used last) keeps its 2,
 * A is cut to 1 ("excess"); never more than 3 alive at once. */
TEST(standby_max_caps_the_sum_most_recently_used_first)
{
	NEED_SETUP();
	int t0 = ev_sync();
	uint64_t excess = metrics_standby_discarded_value(METRIC_STANDBY_EXCESS);
	struct pool p;
	pool_start(&p, 3, 600LL * NS_PER_SEC);
	struct fn_version *fvs[2] = {load_fv(fn_a, img_a), load_fv(fn_b, img_b)};
	REQUIRE(fvs[0] && fvs[1]);
	publish(p.reg, fvs, 2);
	demand(&p, fvs[0], 2);
	CHECK(WAIT_UNTIL(WAIT_S, parked_n(fn_a) == 2));
	demand(&p, fvs[1], 2);
	CHECK(WAIT_UNTIL(WAIT_S, parked_n(fn_b) == 2 && parked_n(fn_a) == 1 &&
					 standby_count(p.sb, fn_b, H) == 2 &&
					 standby_count(p.sb, fn_a, H) == 1));
	CHECK_INT(standby_count(p.sb, fn_a, H), 1);
	CHECK_INT(standby_count(p.sb, fn_b, H), 2);
	CHECK_INT(metrics_standby_discarded_value(METRIC_STANDBY_EXCESS) - excess, 1);
	pool_stop(&p);
	/* The whole history, once stopped: A's two and B's two, never more
	 * than three alive at once. */
	int creates, most;
	created(t0, NULL, &creates, &most);
	CHECK_INT(creates, 4);
	CHECK_INT(most, 3);
}

/* STANDBY_IDLE 3 s: removed once its handler had no invocation for 3 s,
 * not before ("idle"). */
TEST(idle_expiry_removes_it_no_earlier_than_standby_idle)
{
	NEED_SETUP();
	const int64_t idle = 3 * NS_PER_SEC;
	uint64_t before = metrics_standby_discarded_value(METRIC_STANDBY_IDLE);
	struct pool p;
	pool_start(&p, 4, idle);
	struct fn_version *fv = load_fv(fn_a, img_a);
	REQUIRE(fv);
	publish(p.reg, &fv, 1);
	int64_t last = now_mono_ns();
	demand(&p, fv, 1);
	char ids[1][72];
	CHECK(WAIT_UNTIL(WAIT_S, parked_ids(fn_a, ids, 1) == 1));
	/* The idle clock runs from the last invocation's start. */
	CHECK(WAIT_UNTIL(WAIT_S, gone(ids[0])));
	CHECK(now_mono_ns() - last >= idle);
	CHECK_INT(standby_count(p.sb, fn_a, H), 0);
	CHECK_INT(metrics_standby_discarded_value(METRIC_STANDBY_IDLE) - before, 1);
	pool_stop(&p);
}

/* One invocation at a time, 200 ms apart: a peak of 1, but more than one
 * container used up during each start (a start takes far more than
 * 200 ms here), so the pool keeps at least 2 ready while the stream lasts.
 * Once it stops, its begins age out of the rate's 10 s and the surplus
 * goes ("excess"), back to the peak's 1. */
TEST(a_steady_stream_keeps_more_ready_than_its_peak)
{
	NEED_SETUP();
	uint64_t excess = metrics_standby_discarded_value(METRIC_STANDBY_EXCESS);
	struct pool p;
	pool_start(&p, 8, 600LL * NS_PER_SEC);
	struct fn_version *fv = load_fv(fn_b, img_b);
	REQUIRE(fv);
	publish(p.reg, &fv, 1);
	bool two = false;
	int64_t end = now_mono_ns() + WAIT_S * NS_PER_SEC;
	while (!two && now_mono_ns() < end) {
		demand(&p, fv, 1);
		usleep(200 * 1000);
		two = standby_count(p.sb, fn_b, H) >= 2;
	}
	CHECK(two);
	int64_t stopped = now_mono_ns();
	CHECK(WAIT_UNTIL(WAIT_S, standby_count(p.sb, fn_b, H) == 1 && parked_n(fn_b) == 1));
	/* Not before the stream's begins left the rate's span. */
	CHECK(now_mono_ns() - stopped >= STANDBY_RATE_SPAN_NS - 2 * NS_PER_SEC);
	CHECK(metrics_standby_discarded_value(METRIC_STANDBY_EXCESS) - excess >= 1);
	pool_stop(&p);
}

/* template.yaml edited (a new env entry: a new image): the parked
 * container of the old image is removed ("version") and one of the new
 * image parked; a take for the new version never gets the old one, while
 * work that started on the old version may still take its own. */
TEST(template_change_replaces_the_parked_container)
{
	NEED_SETUP();
	uint64_t before = metrics_standby_discarded_value(METRIC_STANDBY_VERSION);
	struct pool p;
	pool_start(&p, 4, 600LL * NS_PER_SEC);
	struct fn_version *fv1 = load_fv(fn_a, img_a);
	REQUIRE(fv1);
	publish(p.reg, &fv1, 1);
	demand(&p, fv1, 1);
	char old[1][72];
	CHECK(WAIT_UNTIL(WAIT_S, parked_ids(fn_a, old, 1) == 1));
	CHECK(container_has(old[0], img_a, NULL));

	/* Hold the old version, as in-flight work does. */
	struct snapshot *s1 = registry_acquire(p.reg);
	write_fn(fn_a, handler_py, "env:\n  SBPOOL_VERSION: two\n");
	char img2[128];
	REQUIRE(build(fn_a, img2, sizeof img2));
	CHECK(strcmp(img2, img_a) != 0);
	struct fn_version *fv2 = load_fv(fn_a, img2);
	REQUIRE(fv2);
	publish(p.reg, &fv2, 1);
	standby_poke(p.sb);
	/* At once, before the pool thread has looked: the current version's
	 * take is a miss, or a container of the new image. */
	standby_begin(p.sb, fv2, H);
	struct runner_parked *rp = standby_take(p.sb, fv2, H);
	if (rp) {
		CHECK(strcmp(runner_parked_id(rp), old[0]) != 0);
		CHECK(container_has(runner_parked_id(rp), img2, "SBPOOL_VERSION=two"));
		char cid[72];
		CHECK(dispatch(&rp, fv2, "v2-early", cid, sizeof cid));
	}
	standby_end(p.sb, fv2, H);
	CHECK(WAIT_UNTIL(WAIT_S, gone(old[0])));
	char now[1][72];
	CHECK(WAIT_UNTIL(WAIT_S, parked_ids(fn_a, now, 1) == 1));
	CHECK(container_has(now[0], img2, "SBPOOL_VERSION=two"));
	CHECK_INT(metrics_standby_discarded_value(METRIC_STANDBY_VERSION) - before, 1);
	registry_release(p.reg, s1);
	pool_stop(&p);
	/* The next case builds the first version again. */
	write_fn(fn_a, handler_py, NULL);
	char again[128];
	CHECK(build(fn_a, again, sizeof again) && strcmp(again, img_a) == 0);
}

/* The secret a function references is rewritten: the container parked with
 * the old value is removed ("secret"), the take right after the rotation
 * never gets it, and the new one has the new value. */
TEST(secret_rotation_replaces_the_parked_container)
{
	NEED_SETUP();
	char *e = NULL;
	uint64_t before = metrics_standby_discarded_value(METRIC_STANDBY_SECRET);
	struct pool p;
	pool_start(&p, 4, 600LL * NS_PER_SEC);
	struct fn_version *fv = load_fv(fn_sec, img_sec);
	REQUIRE(fv);
	publish(p.reg, &fv, 1);
	demand(&p, fv, 1);
	char old[1][72];
	CHECK(WAIT_UNTIL(WAIT_S, parked_ids(fn_sec, old, 1) == 1));
	CHECK(container_has(old[0], img_sec, "TOKEN=one"));

	REQUIRE(secret_set(SP, secret_name, "two", 3, &e) == 0);
	standby_begin(p.sb, fv, H);
	struct runner_parked *rp = standby_take(p.sb, fv, H);
	if (rp) {
		CHECK(strcmp(runner_parked_id(rp), old[0]) != 0);
		CHECK(container_has(runner_parked_id(rp), img_sec, "TOKEN=two"));
		char cid[72];
		CHECK(dispatch(&rp, fv, "sec-early", cid, sizeof cid));
	}
	standby_end(p.sb, fv, H);
	CHECK(WAIT_UNTIL(WAIT_S, gone(old[0])));
	char now[1][72];
	CHECK(WAIT_UNTIL(WAIT_S, parked_ids(fn_sec, now, 1) == 1));
	CHECK(container_has(now[0], img_sec, "TOKEN=two"));
	CHECK_INT(metrics_standby_discarded_value(METRIC_STANDBY_SECRET) - before, 1);
	pool_stop(&p);
	CHECK(secret_set(SP, secret_name, "one", 3, &e) == 0);
}

/* A module that raises at import: its container exits before any event
 * ("exited") and that version gets no other for STANDBY_RETRY_NS (60 s),
 * while another function's demand is served meanwhile. The back-off starts
 * once the pool saw the container exit, after the daemon's "die" of it, so
 * by the daemon's clock no create may follow that die by less than 60 s;
 * on a machine loaded enough that the rest outlasts 60 s, a later create
 * is right. */
TEST(import_error_exits_and_that_version_backs_off)
{
	NEED_SETUP();
	int t0 = ev_sync();
	uint64_t before = metrics_standby_discarded_value(METRIC_STANDBY_EXITED);
	struct pool p;
	pool_start(&p, 4, 600LL * NS_PER_SEC);
	struct fn_version *fvs[2] = {load_fv(fn_bad, img_bad), load_fv(fn_b, img_b)};
	REQUIRE(fvs[0] && fvs[1]);
	publish(p.reg, fvs, 2);
	demand(&p, fvs[0], 1);
	CHECK(WAIT_UNTIL(WAIT_S,
			 metrics_standby_discarded_value(METRIC_STANDBY_EXITED) - before == 1));
	CHECK_INT(standby_count(p.sb, fn_bad, H), 0);
	/* The barrier: B wants two, then bad is used again (the most recently
	 * used handler is served first). B's second container is parked only
	 * after a pass that would have started bad's, had it not backed off. */
	demand(&p, fvs[1], 2);
	demand(&p, fvs[0], 1);
	CHECK(WAIT_UNTIL(WAIT_S, parked_n(fn_b) == 2));
	CHECK_INT(parked_n(fn_bad), 0);
	pool_stop(&p);
	int end = ev_sync();
	REQUIRE(end >= 0);
	int64_t died = 0;
	int creates = 0;
	pthread_mutex_lock(&ev_lock);
	for (int i = t0; i < end; i++) {
		if (strcmp(evs[i].fn, fn_bad) != 0)
			continue;
		if (evs[i].die && !died)
			died = evs[i].tn;
		if (evs[i].create && ++creates > 1 && (!died || evs[i].tn - died < STANDBY_RETRY_NS))
			T_FAIL_("create %d of %s %.1f s after the first one died, within the back-off",
				creates, fn_bad, died ? (double)(evs[i].tn - died) / NS_PER_SEC : 0.0);
	}
	pthread_mutex_unlock(&ev_lock);
	CHECK(creates >= 1);
	CHECK(died != 0);
}

TEST(cleanup)
{
	if (cleaned || !ready)
		return;
	cleaned = true;
	char *e = NULL;
	if (ev_running) {
		/* An event, so that the stream's callback returns and sees the
		 * stop (the barrier needs img_a: before the images go). */
		atomic_store(&ev_stop, 1);
		char id[72];
		if (ev_barrier(id, sizeof id) && WAIT_UNTIL(30, atomic_load(&ev_done)))
			pthread_join(ev_thread, NULL);
		else
			pthread_detach(ev_thread);
		ev_running = false;
	}
	const char *mine[] = {fn_a, fn_b, fn_bad, fn_sec};
	for (size_t i = 0; i < ARRAY_LEN(mine); i++)
		if (image_gc(D, mine[i], NULL, 0, NULL, &e) < 0) {
			printf("  %s\n", e);
			free(e);
			e = NULL;
		}
	/* Every container of this run's host is gone. */
	CHECK_INT(parked_n(NULL), 0);

	secret_provider_free(SP);
	docker_close(D);
	log_set_fd(2);
	t_rmtree(root);
}

T_MAIN(T_FIXTURE(setup), T_CASE(target_is_the_recent_peak_and_each_container_serves_one_event),
       T_CASE(standby_max_caps_the_sum_most_recently_used_first),
       T_CASE(idle_expiry_removes_it_no_earlier_than_standby_idle),
       T_CASE(a_steady_stream_keeps_more_ready_than_its_peak),
       T_CASE(template_change_replaces_the_parked_container),
       T_CASE(secret_rotation_replaces_the_parked_container),
       T_CASE(import_error_exits_and_that_version_backs_off), T_FIXTURE(cleanup))
