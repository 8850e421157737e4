/*
 * relay start: the long-running runtime, in the foreground.
 *
 * Startup order: configuration → logger → fail fast when Redis or Docker is
 * unreachable → (later issues: state database, orphan sweep, functions,
 * consumer group, background threads) → consume until SIGINT/SIGTERM.
 * Signal handling: the signals are blocked in every thread and received
 * with sigwait() by the main thread, so no handler ever runs async code.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cmd/cmd.h"
#include "cmd/health.h"
#include "config.h"
#include "log.h"

static int start_exec(const struct cmd *self, int argc, char **argv)
{
	CMD_PARSE_OR_RETURN(self, argc, argv, NULL, NULL, 0, 0, NULL);
	struct config cfg;
	if (config_load_or_log(&cfg, CONFIG_NEED_ALL) < 0)
		return 1;

	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);

	log_info(LOG_ATTRS("stream", cfg.redis_stream, "group", cfg.redis_group, "functions_dir",
			   cfg.functions_dir),
		 "Relay starting");
	char why[600], addr[300], info[300];
	if (health_check_redis(cfg.redis_uri, why, sizeof why, addr, sizeof addr) < 0) {
		log_error(LOG_ATTRS("error", why), "cannot reach Redis");
		config_free(&cfg);
		return 1;
	}
	if (health_check_docker(why, sizeof why, info, sizeof info) < 0) {
		log_error(LOG_ATTRS("error", why), "cannot reach the Docker daemon");
		config_free(&cfg);
		return 1;
	}
	log_info(LOG_ATTRS("redis", addr, "docker", info), "dependencies reachable");

	int sig = 0;
	sigwait(&sigs, &sig);
	log_info(LOG_ATTRS("signal", sig == SIGINT ? "SIGINT" : "SIGTERM"), "Relay stopping");
	config_free(&cfg);
	log_info(NULL, "Relay stopped");
	return 0;
}

const struct cmd cmd_start = {
	"start", "", "start Relay in the foreground",
	"Reads its configuration from the environment (REDIS_URI, REDIS_STREAM, REDIS_GROUP,\n"
	"REDIS_STREAM_RETENTION, METRICS_ADDR, GIT_WEBHOOK_ADDR, LOG_LEVEL, MAX_CONCURRENCY,\n"
	"MAX_BUFFERED_EVENTS, RELAY_FUNCTIONS_DIR, RELAY_DATA_DIR) and runs until SIGINT or SIGTERM.\n",
	CMD_RUNTIME, start_exec,
};
