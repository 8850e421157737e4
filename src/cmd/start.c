/*
 * relay start: the long-running runtime, in the foreground.
 *
 * Startup order (each step logged): configuration → logger → fail fast when
 * Redis or the Docker daemon is unreachable → state database (never fatal:
 * without it Relay runs and only the CLI views are empty) → orphan sweep →
 * discover and prepare every function (reconcile.h; one failing function
 * never blocks the others) → consumer group → reconciler (which first
 * removes unused old images), stats flush, metrics server, retention →
 * consumer threads → consume until SIGINT/SIGTERM. The first signal stops
 * reading and lets in-flight invocations finish (bounded by their
 * timeouts), stops the reconciler (an image build in progress is not waited
 * for beyond RECONCILER_STOP_MS), writes a final stats snapshot (bounded by
 * FINAL_FLUSH_MS), then exits 0; a second signal stops the running
 * containers and exits at once.
 *
 * Signals are blocked in every thread and received with sigwait() by the
 * main thread (and the watcher thread after the first), so no handler runs.
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
#include "config.h"
#include "consumer.h"
#include "docker.h"
#include "duration.h"
#include "executor.h"
#include "function.h"
#include "gitsync.h"
#include "image.h"
#include "log.h"
#include "metrics.h"
#include "reconcile.h"
#include "redis.h"
#include "registry.h"
#include "retention.h"
#include "runner.h"
#include "scheduler.h"
#include "secret.h"
#include "state.h"
#include "statsflush.h"
#include "util.h"
#include "webhook.h"

static volatile int cancel_flag;
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
	cancel_flag = 1;
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

struct sync_target {
	const char *data_dir, *functions_dir;
};

static void log_notice(void *arg, const char *msg)
{
	(void)arg;
	log_info(NULL, "%s", msg);
}

/* One webhook-triggered sync, on the coalescer's thread. The reconciler
 * picks the result up from the functions directory like any other edit. */
static void webhook_sync(void *arg)
{
	const struct sync_target *t = arg;
	struct git_sync_result res;
	char *err = NULL;
	log_info(NULL, "git sync started (webhook)");
	int rc = git_sync(t->data_dir, t->functions_dir, log_notice, NULL, &res, &err);
	if (rc == 0) {
		char nf[24], nr[24];
		snprintf_(nf, sizeof nf, "%zu", res.functions);
		snprintf_(nr, sizeof nr, "%zu", res.removed);
		log_info(LOG_ATTRS("commit", res.commit, "functions", nf, "removed", nr),
			 "git sync complete");
	} else {
		log_error(LOG_ATTRS("error", rc == -2 ? "no git source configured" : err),
			  "git sync failed");
	}
	free(err);
}

/*
 * The GitHub webhook is opt-in twice over: GIT_WEBHOOK_ADDR set and a git
 * source configured (read once here: a source or webhook secret set later
 * needs a restart). Returns -1 only for a bind failure, which is fatal;
 * otherwise 0 with *out NULL when disabled (the reason logged).
 */
static int webhook_maybe_start(const struct config *cfg, const struct secret_provider *secrets,
			       const struct sync_target *target, struct webhook **out)
{
	*out = NULL;
	if (!cfg->webhook_addr) {
		log_info(NULL, "webhook server disabled: GIT_WEBHOOK_ADDR is not set");
		return 0;
	}
	struct git_source src = {0};
	char *err = NULL;
	int rc = git_source_load(cfg->data_dir, &src, &err);
	if (rc == -2) {
		log_info(LOG_ATTRS("addr", cfg->webhook_addr),
			 "webhook server disabled: no git source configured (relay git set)");
		rc = 0;
	} else if (rc < 0) {
		log_warn(LOG_ATTRS("addr", cfg->webhook_addr, "error", err),
			 "webhook server disabled: the git source is unreadable");
		rc = 0;
	} else {
		struct webhook_config wcfg = {
			.listen_addr = cfg->webhook_addr,
			.repository = src.repository,
			.ref = src.ref,
			.data_dir = cfg->data_dir,
			.secret_name = src.webhook_secret,
			.secrets = secrets,
			.sync = webhook_sync,
			.sync_arg = (void *)target,
		};
		free(err);
		err = NULL;
		rc = webhook_start(&wcfg, out, &err);
		if (rc < 0)
			log_error(LOG_ATTRS("addr", cfg->webhook_addr, "error", err),
				  "cannot start the webhook server");
	}
	free(err);
	git_source_free(&src);
	return rc;
}

/* Shutdown bounds: an image build is not waited for beyond this, nor a
 * final stats write (the database's busy timeout is 2 s). */
#define RECONCILER_STOP_MS 5000
#define FINAL_FLUSH_MS 3000

static int start_exec(const struct cmd *self, int argc, char **argv)
{
	CMD_PARSE_OR_RETURN(self, argc, argv, NULL, NULL, 0, 0, NULL);
	struct config cfg;
	if (config_load_or_log(&cfg, CONFIG_NEED_ALL) < 0)
		return 1;

	sigemptyset(&stop_signals);
	sigaddset(&stop_signals, SIGINT);
	sigaddset(&stop_signals, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
	signal(SIGPIPE, SIG_IGN);

	int rc = 1;
	struct docker *d = NULL;
	struct registry *reg = NULL;
	struct secret_provider *secrets = NULL;
	struct consumer *consumer = NULL;
	struct scheduler *scheduler = NULL;
	struct retention *retention = NULL;
	struct redis *r = NULL;
	struct redis_uri uri = {0};
	struct state *state = NULL;
	struct reconciler *rec = NULL;
	struct statsflush *flush = NULL;
	struct webhook *webhook = NULL;
	bool leave_shared = false; /* a thread still uses the registry/state */
	bool watching = false;	   /* the second-signal watcher runs */
	char *err = NULL;
	char why[600], addr[300], info[300];

	log_info(LOG_ATTRS("stream", cfg.redis_stream, "group", cfg.redis_group, "consumer",
			   runner_hostname(), "functions_dir", cfg.functions_dir),
		 "Relay starting");
	if (health_check_redis(cfg.redis_uri, why, sizeof why, addr, sizeof addr) < 0) {
		log_error(LOG_ATTRS("error", why), "cannot reach Redis");
		goto out;
	}
	if (docker_open(&d, &err) < 0 || docker_ping(d) < 0) {
		snprintf_(why, sizeof why, "%s", err ? err : docker_errmsg(d));
		log_error(LOG_ATTRS("error", why), "cannot reach the Docker daemon");
		goto out;
	}
	snprintf_(info, sizeof info, "%s, API %s", docker_endpoint(d), docker_api_version(d));
	log_info(LOG_ATTRS("redis", addr, "docker", info), "dependencies reachable");

	char *sterr = NULL;
	if (state_open(cfg.data_dir, &state, &sterr) < 0) {
		log_warn(LOG_ATTRS("error", sterr ? sterr : ""),
			 "state database unavailable; running without it");
		free(sterr);
	} else {
		log_info(LOG_ATTRS("path", state_path(state)), "state database ready");
	}

	secrets = secret_file_provider_new(cfg.data_dir);
	struct sync_target target = {cfg.data_dir, cfg.functions_dir};
	if (webhook_maybe_start(&cfg, secrets, &target, &webhook) < 0)
		goto out;

	size_t swept = 0;
	char *serr = NULL;
	if (runner_sweep_orphans(d, NULL, RUNNER_SWEEP_TIMEOUT_MS, &swept, &serr) < 0) {
		log_warn(LOG_ATTRS("error", serr ? serr : ""), "orphan sweep incomplete");
		free(serr);
	} else if (swept) {
		char ns[16];
		snprintf_(ns, sizeof ns, "%zu", swept);
		log_info(LOG_ATTRS("removed", ns), "removed orphaned containers of this host");
	}

	reg = registry_new();
	struct reconcile_config rcfg = {
		.functions_dir = cfg.functions_dir,
		.registry = reg,
		.state = state,
	};
	rec = reconciler_new(&rcfg);
	size_t nfns = reconciler_load(rec, d);
	log_info(NULL, "Loaded %zu function(s)", nfns);

	char *uwhy = NULL;
	if (redis_uri_parse(cfg.redis_uri, &uri, &uwhy) < 0) {
		log_error(LOG_ATTRS("error", uwhy), "invalid REDIS_URI");
		free(uwhy);
		goto out;
	}
	r = redis_new(&uri, NULL);
	if (redis_connect(r) < 0 ||
	    consumer_ensure_group(r, cfg.redis_stream, cfg.redis_group, why, sizeof why) < 0) {
		if (!redis_is_connected(r))
			snprintf_(why, sizeof why, "%s", redis_errmsg(r));
		log_error(LOG_ATTRS("error", why), "cannot create the consumer group");
		goto out;
	}
	log_info(LOG_ATTRS("stream", cfg.redis_stream, "group", cfg.redis_group),
		 "consumer group ready");

	char *rerr = NULL;
	struct docker *rd = d;
	d = NULL; /* the reconciler thread owns it now */
	if (reconciler_start(rec, rd, &rerr) < 0) {
		log_error(LOG_ATTRS("error", rerr), "cannot start the reconciler");
		free(rerr);
		goto out;
	}
	log_info(LOG_ATTRS("path", cfg.functions_dir), "watching the functions directory");
	flush = statsflush_start(state, reg, 0);

	if (cfg.metrics_addr)
		metrics_server_start(cfg.metrics_addr);
	if (cfg.stream_retention_ns)
		retention = retention_start(&uri, cfg.redis_stream, cfg.stream_retention_ns, 0, 0);

	struct executor exec = {.provider = secrets, .cancel = &cancel_flag};
	struct consumer_config ccfg = {
		.uri = &uri,
		.stream = cfg.redis_stream,
		.group = cfg.redis_group,
		.consumer = runner_hostname(),
		.max_buffered = (int)cfg.max_buffered_events,
		.max_concurrency = (int)cfg.max_concurrency,
		.registry = reg,
		.invoke = executor_invoke,
		.invoke_ctx = &exec,
	};
	consumer = consumer_start(&ccfg);
	char mc[24], mb[24];
	snprintf_(mc, sizeof mc, "%lld", (long long)cfg.max_concurrency);
	snprintf_(mb, sizeof mb, "%lld", (long long)cfg.max_buffered_events);
	log_info(LOG_ATTRS("max_concurrency", mc, "max_buffered_events", mb), "worker started");
	struct scheduler_config scfg = {.uri = &uri, .stream = cfg.redis_stream, .registry = reg};
	scheduler = scheduler_start(&scfg);

	int sig = 0;
	sigwait(&stop_signals, &sig);
	log_info(LOG_ATTRS("signal", sig == SIGINT ? "SIGINT" : "SIGTERM"),
		 "Relay stopping: finishing in-flight invocations");
	pthread_t watcher;
	watching = pthread_create(&watcher, NULL, second_signal, NULL) == 0;
	scheduler_stop(scheduler); /* first: publish nothing more while stopping */
	consumer_stop(consumer);
	rc = 0;
out:
	/* A webhook sync in progress ends now (webhook_stop joins it): a stalled
	 * server must not hold up the exit. */
	gitsync_cancel_all(true);
	webhook_stop(webhook); /* first: no sync starts while stopping */
	if (reconciler_stop(rec, RECONCILER_STOP_MS) < 0)
		leave_shared = true;
	if (statsflush_stop(flush, FINAL_FLUSH_MS) < 0)
		leave_shared = true;
	else
		statsflush_free(flush);
	if (consumer)
		consumer_free(consumer);
	retention_stop(retention);
	if (cfg.metrics_addr)
		metrics_server_stop();
	secret_provider_free(secrets);
	if (!leave_shared) {
		reconciler_free(rec);
		registry_free(reg);
		state_close(state);
	}
	redis_free(r);
	redis_uri_free(&uri);
	docker_close(d);
	free(err);
	config_free(&cfg);
	log_info(NULL, rc == 0 ? "Relay stopped" : "Relay failed to start");
	if (watching) {
		atomic_store(&shutdown_done, 1);
		pthread_join(watcher, NULL);
	}
	return rc;
}

const struct cmd cmd_start = {
	"start",
	"",
	"start Relay in the foreground",
	"Reads its configuration from the environment (REDIS_URI, REDIS_STREAM, REDIS_GROUP,\n"
	"REDIS_STREAM_RETENTION, METRICS_ADDR, GIT_WEBHOOK_ADDR, LOG_LEVEL, MAX_CONCURRENCY,\n"
	"MAX_BUFFERED_EVENTS, RELAY_FUNCTIONS_DIR, RELAY_DATA_DIR) and runs until SIGINT or "
	"SIGTERM.\n",
	CMD_RUNTIME,
	start_exec,
};
