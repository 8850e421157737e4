/*
 * relay start: the engine, long-running, in the foreground.
 *
 * Startup order (each step logged): configuration → logger → fail fast when
 * Redis or the Docker daemon is unreachable → the consumer name's liveness
 * record (liveness.h: exit 1 when another live process holds it; before
 * anything with side effects, the sweep above all) → state database (never fatal:
 * without it Relay runs and only the CLI views are empty) → webhook server
 * (when GIT_WEBHOOK_ADDR and a git source are set) → orphan sweep →
 * discover and prepare every function (reconcile.h; one failing function
 * never blocks the others) → consumer group → reconciler (which first
 * removes unused old images), stats flush, metrics server, retention →
 * standby pool (STANDBY_MAX > 0, standby.h) → consumer threads → consume
 * until SIGINT/SIGTERM. The first signal stops reading and lets in-flight
 * invocations finish (bounded by their timeouts), removes the standby
 * containers (bounded by STANDBY_STOP_TIMEOUT_MS), stops the reconciler (an image build in progress is not waited
 * for beyond RECONCILER_STOP_MS), writes a final stats snapshot (bounded by
 * FINAL_FLUSH_MS), deletes the liveness record, then exits 0; a second
 * signal stops the running
 * containers and exits at once. runtime_start and runtime_stop below own
 * these two orders; start_exec only waits for the signals between them.
 *
 * Signals: the main thread blocks SIGINT, SIGTERM and SIGHUP before
 * anything starts (threads made with pthread_create, such as the prepare
 * threads, inherit that mask) and every other thread is started with
 * thread_start (util.h), which blocks every signal in it, so no handler
 * runs and the signals stay pending until taken: the first stop signal by
 * the main thread (sigwait), the second by the "signal-watch" thread
 * (second_signal, sigtimedwait). The liveness thread sends SIGTERM to the
 * main thread when another process took the consumer name: the same
 * orderly stop, then exit 1. SIGHUP (a terminal hang-up, or an operator
 * used to it meaning "reload") is taken by the same sigwait, logged and
 * otherwise ignored: functions are reloaded from their directory as it
 * changes (reconcile.h) and the environment is read only at start, so
 * there is nothing to reload. After the first stop signal SIGHUP stays
 * blocked: pending, never acted on.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd/cmd.h"
#include "cmd/health.h"
#include "model/config.h"
#include "engine/consumer.h"
#include "io/docker.h"
#include "base/duration.h"
#include "engine/executor.h"
#include "model/function.h"
#include "git/gitsync.h"
#include "engine/image.h"
#include "engine/liveness.h"
#include "base/log.h"
#include "engine/metrics.h"
#include "engine/reconcile.h"
#include "io/redis.h"
#include "engine/registry.h"
#include "engine/retention.h"
#include "engine/runner.h"
#include "engine/scheduler.h"
#include "model/secret.h"
#include "engine/slots.h"
#include "engine/standby.h"
#include "engine/state.h"
#include "engine/statsflush.h"
#include "engine/trace.h"
#include "base/util.h"
#include "engine/warm.h"
#include "git/webhook.h"

static atomic_int cancel_flag;
static sigset_t stop_signals;
/* Set once shutdown is complete: the watcher below then returns (it polls
 * rather than being cancelled, which sanitizers do not unwind cleanly). */
static atomic_int shutdown_done;
/* After a second signal: at most this long for cancelled invocations to
 * remove their containers and put their markers back. */
#define SECOND_SIGNAL_WAIT_MS 10000

/* After the first signal: a second one cancels running containers and
 * exits at once. */
static void *second_signal(void *arg)
{
	(void)arg;
	int sig;
	const struct timespec tick = {0, 100 * 1000000L};
	while ((sig = sigtimedwait(&stop_signals, NULL, &tick)) < 0)
		if (atomic_load(&shutdown_done))
			return NULL;
	atomic_store(&cancel_flag, 1);
	log_warn(LOG_ATTRS("signal", sig == SIGINT ? "SIGINT" : "SIGTERM"),
		 "second signal: stopping running containers and exiting now");
	/* The runners stop and remove their containers, then the consumer puts
	 * each invocation's marker back and leaves in_flight_invocations: wait
	 * for that (bounded), so the next delivery keeps the attempt number. */
	for (int i = 0; i < SECOND_SIGNAL_WAIT_MS / 20; i++) {
		if (metrics_gauge_value(METRIC_IN_FLIGHT) <= 0)
			_exit(1);
		usleep(20 * 1000);
	}
	log_warn(NULL, "second signal: invocations still running after %d s; exiting anyway",
		 SECOND_SIGNAL_WAIT_MS / 1000);
	_exit(1);
	return NULL;
}

/* Shutdown bounds: an image build is not waited for beyond this, nor a
 * final stats write (the database's busy timeout is 2 s). */
#define RECONCILER_STOP_MS 5000
#define FINAL_FLUSH_MS 3000

/* Everything relay start runs, in start-up order. runtime_start fills it
 * step by step; runtime_stop tears down whatever was started. */
struct relay {
	const struct config *cfg; /* borrowed */
	struct docker *d;	  /* until the reconciler takes it over */
	struct liveness *live;	  /* the consumer name's record, held */
	struct state *state;	  /* NULL: running without the database */
	struct secret_provider *secrets;
	struct webhook *webhook;
	struct registry *reg;
	struct reconciler *rec;
	struct redis_uri uri;
	struct redis *r; /* the consumer group's connection */
	struct statsflush *flush;
	struct retention *retention;
	struct slots *slots;	 /* shared by the consumer and the standby pool */
	struct standby *standby; /* NULL: STANDBY_MAX=0 */
	struct warm *warm;	 /* warm containers of functions with warm: */
	struct executor exec;	 /* the consumer's invoke context */
	struct consumer *consumer;
	struct scheduler *scheduler;
};

/* Logs "Relay starting", then fails fast when Redis or the Docker daemon
 * does not answer. Keeps the Docker connection for the reconciler. */
static int check_dependencies(struct relay *rt)
{
	const struct config *cfg = rt->cfg;
	char info[300];
	char *err = NULL, *addr = NULL;
	log_info(LOG_ATTRS("stream", cfg->redis_stream, "group", cfg->redis_group, "consumer",
			   runner_hostname(), "functions_dir", cfg->functions_dir),
		 "Relay starting");
	int rc = health_check_redis(cfg, &addr, &err);
	if (rc < 0) {
		log_error(LOG_ATTRS("error", err),
			  rc == -2 ? "invalid configuration" : "cannot reach Redis");
		free(err);
		return -1;
	}
	if (docker_open(&rt->d, &err) < 0 || docker_ping(rt->d) < 0) {
		log_error(LOG_ATTRS("error", err ? err : docker_errmsg(rt->d)),
			  "cannot reach the Docker daemon");
		free(err);
		free(addr);
		return -1;
	}
	if (cfg->oci_runtime) {
		if (docker_check_runtime(rt->d, cfg->oci_runtime, &err) < 0) {
			log_error(NULL, "invalid configuration: %s", err);
			free(err);
			free(addr);
			return -1;
		}
		runner_set_oci_runtime(cfg->oci_runtime);
	}
	snprintf_(info, sizeof info, "%s, API %s", docker_endpoint(rt->d),
		  docker_api_version(rt->d));
	log_info(LOG_ATTRS("redis", addr, "docker", info), "dependencies reachable");
	free(addr);
	return 0;
}

/* Runs on the liveness thread: the orderly stop, as for SIGTERM. */
static pthread_t main_thread;
static void liveness_lost_cb(void *ctx)
{
	(void)ctx;
	pthread_kill(main_thread, SIGTERM);
}

/* The consumer name's liveness record, before the sweep and anything else
 * with side effects: -1 (logged) when another live process holds it. */
static int take_consumer_name(struct relay *rt)
{
	const struct config *cfg = rt->cfg;
	char *err = NULL;
	if (config_redis_uri(cfg, &rt->uri, &err) < 0) {
		log_error(LOG_ATTRS("error", err), "invalid REDIS_URI");
		free(err);
		return -1;
	}
	struct liveness_config lc = {
		.uri = &rt->uri,
		.stream = cfg->redis_stream,
		.group = cfg->redis_group,
		.consumer = runner_hostname(),
		.instance = runner_instance_id(),
		.on_lost = liveness_lost_cb,
	};
	if (liveness_acquire(&lc, &rt->live) < 0)
		return -1;
	/* Labels of every container from here on, and the sweep's scope. */
	runner_set_stream_group(cfg->redis_stream, cfg->redis_group);
	return 0;
}

/* Never fatal: without the database Relay runs and only the CLI views are
 * empty. */
static void open_state(struct relay *rt)
{
	char *err = NULL;
	if (state_open(rt->cfg->data_dir, &rt->state, &err) < 0) {
		log_warn(LOG_ATTRS("error", err ? err : ""),
			 "state database unavailable; running without it");
		free(err);
	} else {
		log_info(LOG_ATTRS("path", state_path(rt->state)), "state database ready");
	}
}

/* Containers this host's earlier processes left behind (a crash, a kill
 * -9): this process holds the consumer name, so every other instance with
 * it is gone. Never fatal. */
static void sweep_orphans(struct relay *rt)
{
	size_t swept = 0;
	char *err = NULL;
	if (runner_sweep_orphans(rt->d, NULL, runner_instance_id(), RUNNER_SWEEP_TIMEOUT_MS, &swept,
				 &err) < 0) {
		log_warn(LOG_ATTRS("error", err ? err : ""), "orphan sweep incomplete");
		free(err);
	} else if (swept) {
		char ns[16];
		snprintf_(ns, sizeof ns, "%zu", swept);
		log_info(LOG_ATTRS("removed", ns), "removed orphaned containers of this host");
	}
}

/* Discovers and prepares every function; one failing function never blocks
 * the others (reconcile.h). */
/* Orders the reconciler's on_readable (functions_readable) with the
 * consumer's start and end: a change of the functions directory's
 * readability reaches the consumer's hold exactly once. */
static pthread_mutex_t hold_lock = PTHREAD_MUTEX_INITIALIZER;

static void functions_readable(void *ctx, bool readable)
{
	struct relay *rt = ctx;
	pthread_mutex_lock(&hold_lock);
	consumer_hold(rt->consumer, CONSUMER_HOLD_FUNCTIONS, !readable);
	pthread_mutex_unlock(&hold_lock);
}

/* A new registry snapshot: warm containers of an old version go now, not
 * at the reaper's next tick. rt->warm is set and cleared under hold_lock. */
static void functions_published(void *ctx)
{
	struct relay *rt = ctx;
	pthread_mutex_lock(&hold_lock);
	warm_poke(rt->warm);
	pthread_mutex_unlock(&hold_lock);
}

static void load_functions(struct relay *rt)
{
	rt->reg = registry_new();
	struct reconcile_config rcfg = {
		.functions_dir = rt->cfg->functions_dir,
		.registry = rt->reg,
		.state = rt->state,
		.on_readable = functions_readable,
		.on_published = functions_published,
		.ctx = rt,
	};
	rt->rec = reconciler_new(&rcfg);
	size_t nfns = reconciler_load(rt->rec, rt->d);
	log_info(NULL, "Loaded %zu function(s)", nfns);
}

static int ensure_group(struct relay *rt)
{
	const struct config *cfg = rt->cfg;
	char *err = NULL;
	rt->r = redis_new(&rt->uri, NULL); /* rt->uri: take_consumer_name */
	if (redis_connect(rt->r) < 0 ||
	    consumer_ensure_group(rt->r, cfg->redis_stream, cfg->redis_group, &err) < 0) {
		log_error(LOG_ATTRS("error", err ? err : redis_errmsg(rt->r)),
			  "cannot create the consumer group");
		free(err);
		return -1;
	}
	log_info(LOG_ATTRS("stream", cfg->redis_stream, "group", cfg->redis_group),
		 "consumer group ready");
	return 0;
}

/* The reconciler (which first removes unused old images), stats flush,
 * metrics server and retention, then the consumer and the scheduler. */
static int start_threads(struct relay *rt)
{
	const struct config *cfg = rt->cfg;
	char *err = NULL;
	struct docker *d = rt->d;
	rt->d = NULL; /* the reconciler thread owns it now */
	if (reconciler_start(rt->rec, d, &err) < 0) {
		log_error(LOG_ATTRS("error", err), "cannot start the reconciler");
		free(err);
		return -1;
	}
	log_info(LOG_ATTRS("path", cfg->functions_dir), "watching the functions directory");
	rt->flush = statsflush_start(rt->state, rt->reg, 0);

	if (cfg->metrics_addr)
		metrics_server_start(cfg->metrics_addr);
	if (cfg->stream_retention_ns)
		rt->retention = retention_start(&rt->uri, cfg->redis_stream,
						cfg->stream_retention_ns, 0, 0);

	if (trace_setup(&cfg->otel, &err) < 0) {
		log_error(LOG_ATTRS("error", err), "cannot start the span exporter");
		free(err);
		return -1;
	}
	if (trace_exporting())
		log_info(LOG_ATTRS("endpoint", cfg->otel.traces_url), "span export on (OTLP/HTTP JSON)");
	rt->slots = slots_new((int)cfg->max_concurrency);
	if (cfg->standby_max > 0) {
		struct standby_config sbc = {
			.max = (int)cfg->standby_max,
			.idle_ns = cfg->standby_idle_ns,
			.registry = rt->reg,
			.slots = rt->slots,
			.provider = rt->secrets,
		};
		rt->standby = standby_start(&sbc);
		statsflush_set_standby(rt->flush, statsflush_standby_count, rt->standby);
	}
	struct warm_config wc = {.registry = rt->reg, .provider = rt->secrets};
	struct warm *warm = warm_start(&wc);
	pthread_mutex_lock(&hold_lock);
	rt->warm = warm;
	pthread_mutex_unlock(&hold_lock);
	rt->exec = (struct executor){.provider = rt->secrets,
				     .standby = rt->standby,
				     .warm = rt->warm,
				     .cancel = &cancel_flag};
	struct consumer_config ccfg = {
		.uri = &rt->uri,
		.stream = cfg->redis_stream,
		.group = cfg->redis_group,
		.consumer = runner_hostname(),
		.max_buffered = (int)cfg->max_buffered_events,
		.max_concurrency = (int)cfg->max_concurrency,
		.registry = rt->reg,
		.invoke = executor_invoke,
		.invoke_ctx = &rt->exec,
		.ready = executor_ready,
		.slots = rt->slots,
	};
	pthread_mutex_lock(&hold_lock);
	ccfg.hold = reconciler_readable(rt->rec) ? 0 : CONSUMER_HOLD_FUNCTIONS;
	rt->consumer = consumer_start(&ccfg);
	pthread_mutex_unlock(&hold_lock);
	char mc[24], mb[24], sm[24], si[DURATION_STR_MAX];
	snprintf_(mc, sizeof mc, "%lld", (long long)cfg->max_concurrency);
	snprintf_(mb, sizeof mb, "%lld", (long long)cfg->max_buffered_events);
	snprintf_(sm, sizeof sm, "%lld", (long long)cfg->standby_max);
	duration_format(cfg->standby_idle_ns, si);
	log_info(LOG_ATTRS("max_concurrency", mc, "max_buffered_events", mb, "standby_max", sm,
			   "standby_idle", si),
		 "worker started");
	struct scheduler_config scfg = {
		.uri = &rt->uri, .stream = cfg->redis_stream, .registry = rt->reg};
	rt->scheduler = scheduler_start(&scfg);
	return 0;
}

/*
 * Start-up in the order of the contract at the top of this file, each step
 * logged. Returns 0 once every thread runs, or -1 at the first fatal step
 * (logged); either way runtime_stop(rt) must follow.
 */
static int runtime_start(struct relay *rt, const struct config *cfg)
{
	*rt = (struct relay){.cfg = cfg};
	if (check_dependencies(rt) < 0 || take_consumer_name(rt) < 0)
		return -1;
	open_state(rt);
	rt->secrets = secret_file_provider_new(cfg->data_dir);
	if (webhook_start_git(cfg->webhook_addr, cfg->data_dir, cfg->functions_dir, rt->secrets,
			      &rt->webhook) < 0)
		return -1;
	sweep_orphans(rt);
	load_functions(rt);
	if (ensure_group(rt) < 0)
		return -1;
	return start_threads(rt);
}

/*
 * Teardown of whatever runtime_start started, in this order: the scheduler
 * (publish nothing more while stopping), the consumer (in-flight invocations
 * finish), the standby pool (its containers removed), the liveness record
 * (deleted if still ours), git syncs and the webhook (no sync starts while stopping), the
 * reconciler (bounded by RECONCILER_STOP_MS), the final stats flush
 * (bounded by FINAL_FLUSH_MS), retention, the metrics server, then the
 * memory. A reconciler or flush thread still busy keeps the registry and
 * the state handle it uses: the process is about to exit anyway.
 */
static void runtime_stop(struct relay *rt)
{
	bool leave_shared = false;     /* a thread still uses the registry/state */
	scheduler_stop(rt->scheduler); /* first: publish nothing more while stopping */
	if (rt->consumer)
		consumer_stop(rt->consumer);
	/* No span is made any more: send what is queued (TRACE_FLUSH_NS). */
	trace_shutdown();
	/* No worker takes a standby container any more: remove them all (the
	 * final stats flush no longer counts them: standby_stop frees the pool). */
	statsflush_set_standby(rt->flush, NULL, NULL);
	standby_stop(rt->standby);
	/* Nor a warm one: remove them all ("shutdown"). */
	pthread_mutex_lock(&hold_lock);
	struct warm *warm = rt->warm;
	rt->warm = NULL;
	pthread_mutex_unlock(&hold_lock);
	warm_stop(warm);
	/* No container of this process is left: the name is free. */
	liveness_release(rt->live);
	rt->live = NULL;
	/* A webhook sync in progress ends now (webhook_stop joins it): a stalled
	 * server must not hold up the exit. */
	gitsync_cancel_all(true);
	webhook_stop(rt->webhook); /* no sync starts while stopping */
	if (reconciler_stop(rt->rec, RECONCILER_STOP_MS) < 0)
		leave_shared = true;
	if (statsflush_stop(rt->flush, FINAL_FLUSH_MS) < 0)
		leave_shared = true;
	else
		statsflush_free(rt->flush);
	pthread_mutex_lock(&hold_lock); /* a reconciler left busy may still call */
	consumer_free(rt->consumer);
	rt->consumer = NULL;
	pthread_mutex_unlock(&hold_lock);
	slots_free(rt->slots);
	retention_stop(rt->retention);
	if (rt->cfg->metrics_addr)
		metrics_server_stop();
	secret_provider_free(rt->secrets);
	if (!leave_shared) {
		reconciler_free(rt->rec);
		registry_free(rt->reg);
		state_close(rt->state);
	}
	redis_free(rt->r);
	redis_uri_free(&rt->uri);
	docker_close(rt->d);
}

/* The configuration is loaded (CMD_ENGINE: every variable, REDIS_*
 * required) and the logger set before this runs. */
static int start_exec(const struct cmd *self, const struct cmd_args *args, const struct config *cfg)
{
	sigemptyset(&stop_signals);
	sigaddset(&stop_signals, SIGINT);
	sigaddset(&stop_signals, SIGTERM);
	sigset_t waited = stop_signals; /* and SIGHUP, taken and ignored */
	sigaddset(&waited, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &waited, NULL);
	signal(SIGPIPE, SIG_IGN);

	struct relay rt;
	int rc = 1;
	bool started = false;
	main_thread = pthread_self();
	pthread_t watcher;
	bool watching = false; /* the second-signal watcher runs */
	if (runtime_start(&rt, cfg) == 0) {
		int sig = 0;
		while (sigwait(&waited, &sig) == 0 && sig == SIGHUP)
			log_info(LOG_ATTRS("signal", "SIGHUP"),
				 "SIGHUP ignored: functions are reloaded from their directory "
				 "as it changes, and the environment only by a restart");
		/* The liveness thread's SIGTERM: exit 1 after the same stop. */
		bool lost = liveness_lost(rt.live);
		log_info(lost ? LOG_ATTRS("reason", "consumer name taken by another process")
			      : LOG_ATTRS("signal", sig == SIGINT ? "SIGINT" : "SIGTERM"),
			 "Relay stopping: finishing in-flight invocations");
		watching = thread_start(&watcher, "signal-watch", second_signal, NULL) == 0;
		rc = lost ? 1 : 0;
		started = true;
	}
	runtime_stop(&rt);
	log_info(NULL, started ? "Relay stopped" : "Relay failed to start");
	if (watching) {
		atomic_store(&shutdown_done, 1);
		pthread_join(watcher, NULL);
	}
	return rc;
}

const struct cmd cmd_start = {
	.words = "start",
	.args = "",
	.summary = "start Relay in the foreground",
	.help = "Reads its configuration from the environment (REDIS_URI, REDIS_STREAM, "
		"REDIS_GROUP,\n"
		"REDIS_STREAM_RETENTION, METRICS_ADDR, GIT_WEBHOOK_ADDR, LOG_LEVEL, "
		"MAX_CONCURRENCY,\n"
		"MAX_BUFFERED_EVENTS, RELAY_FUNCTIONS_DIR, RELAY_DATA_DIR) and runs until SIGINT "
		"or SIGTERM.\nSIGHUP is logged and ignored.\n",
	/* A webhook sync replaces function directories and talks to the git
	 * remote; the metrics and webhook servers listen. */
	.touches = CMD_ENGINE | CMD_REDIS | CMD_DOCKER | CMD_STATE_READ | CMD_STATE_WRITE |
		   CMD_DATA_FILES | CMD_FUNCTIONS_READ | CMD_FUNCTIONS_WRITE | CMD_NETWORK,
	.exec = start_exec,
};
