/*
 * relay health: the container healthcheck. Redis PING (AUTH and TLS as
 * REDIS_URI says; on Redis Cluster at the master of REDIS_STREAM's slot,
 * behind Sentinel at the master the sentinels name) and Docker GET /_ping;
 * exit 0 when both answer, else 1 with the first failing check on stderr. Never reads functions or the
 * state database, never starts anything.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cmd/cmd.h"
#include "cmd/health.h"
#include "engine/invocation.h"
#include "engine/keys.h"
#include "io/docker.h"
#include "io/redis.h"
#include "model/config.h"

int health_check_redis(const struct config *cfg, char **where, char **err)
{
	struct redis_uri uri;
	char *why = NULL;
	*where = NULL;
	if (config_redis_uri(cfg, &uri, &why) < 0) {
		*err = xasprintf("redis: invalid REDIS_URI: %s", why);
		free(why);
		return -1;
	}
	struct redis *r = redis_new(&uri, NULL);
	redis_uri_free(&uri);
	int rc = -1;
	if (redis_connect(r) < 0) {
		*err = xstrdup(redis_errmsg(r));
		goto out;
	}
	if (redis_mode(r) == REDIS_MODE_CLUSTER)
		keys_set_cluster(true); /* before any key is named (invocation.h) */
	if (cfg->redis_stream && keys_stream_slot_check(r, cfg->redis_stream, &why) < 0) {
		*err = xasprintf("redis: %s", why);
		free(why);
		rc = -2;
		goto out;
	}
	redisReply *rep = redis_command(r, "PING");
	if (!rep) {
		*err = xstrdup(redis_errmsg(r));
		goto out;
	}
	if (rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, "PONG") == 0) {
		if (redis_mode(r) == REDIS_MODE_STANDALONE)
			*where = xstrdup(redis_addr(r));
		else if (redis_mode(r) == REDIS_MODE_CLUSTER && !cfg->redis_stream)
			/* No slot of its own: say why it is slot 0's. */
			*where = xasprintf("%s (REDIS_STREAM unset)", redis_describe(r));
		else
			*where = xstrdup(redis_describe(r));
		rc = 0;
	} else {
		*err = xasprintf("redis %s: PING failed: %s", redis_addr(r),
				 rep->type == REDIS_REPLY_ERROR || rep->type == REDIS_REPLY_STATUS
					 ? rep->str
					 : "unexpected reply");
	}
	freeReplyObject(rep);
out:
	redis_free(r);
	return rc;
}

int health_check_docker(char **info, char **err)
{
	struct docker *d = NULL;
	char *why = NULL;
	*info = NULL;
	if (docker_open(&d, &why) < 0) {
		*err = xasprintf("docker: %s", why ? why : "cannot connect");
		free(why);
		return -1;
	}
	int rc = docker_ping(d);
	if (rc < 0)
		*err = xasprintf("docker: %s", docker_errmsg(d));
	else
		*info = xasprintf("%s, API %s", docker_endpoint(d), docker_api_version(d));
	docker_close(d);
	return rc;
}

/* The configuration is loaded (CMD_REDIS: REDIS_URI required) before this
 * runs. */
static int health_exec(const struct cmd *self, const struct cmd_args *args,
		       const struct config *cfg)
{
	char *addr = NULL, *info = NULL, *err = NULL;
	int status = 0;
	if (health_check_redis(cfg, &addr, &err) < 0 || health_check_docker(&info, &err) < 0)
		status = cmd_fail("health: %s", err);
	else
		printf("redis: ok (%s)\ndocker: ok (%s)\n", addr, info);
	free(addr);
	free(info);
	free(err);
	return status;
}

const struct cmd cmd_health = {
	.words = "health",
	.args = "",
	.summary = "check that Redis and the Docker daemon answer",
	.help = "Sends PING to REDIS_URI and GET /_ping to the Docker daemon (DOCKER_HOST).\n"
		"Exit status 0 when both answer, 1 otherwise with the first failing check on "
		"stderr.\n",
	.touches = CMD_REDIS | CMD_DOCKER,
	.exec = health_exec,
};
