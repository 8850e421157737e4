/*
 * relay health: the container healthcheck. Redis PING (AUTH and TLS as
 * REDIS_URI says) and Docker GET /_ping; exit 0 when both answer, else 1
 * with the first failing check on stderr. Never reads functions or the
 * state database, never starts anything.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cmd.h"
#include "cmd/health.h"
#include "config.h"
#include "docker.h"
#include "redis.h"
#include "util.h"

/* 0 when Redis answers PING; otherwise fills why. */
int health_check_redis(const char *uri_text, char *why, size_t whylen, char *addr, size_t addrlen)
{
	struct redis_uri uri;
	char *err = NULL;
	if (redis_uri_parse(uri_text, &uri, &err) < 0) {
		snprintf_(why, whylen, "redis: invalid REDIS_URI: %s", err);
		free(err);
		return -1;
	}
	struct redis *r = redis_new(&uri, NULL);
	redis_uri_free(&uri);
	snprintf_(addr, addrlen, "%s", redis_addr(r));
	int rc = -1;
	if (redis_connect(r) < 0) {
		snprintf_(why, whylen, "%s", redis_errmsg(r));
		goto out;
	}
	redisReply *rep = redis_command(r, "PING");
	if (!rep) {
		snprintf_(why, whylen, "%s", redis_errmsg(r));
		goto out;
	}
	if (rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, "PONG") == 0)
		rc = 0;
	else
		snprintf_(why, whylen, "redis %s: PING failed: %s", redis_addr(r),
			  rep->type == REDIS_REPLY_ERROR || rep->type == REDIS_REPLY_STATUS
				  ? rep->str
				  : "unexpected reply");
	freeReplyObject(rep);
out:
	redis_free(r);
	return rc;
}

int health_check_docker(char *why, size_t whylen, char *info, size_t infolen)
{
	struct docker *d = NULL;
	char *err = NULL;
	if (docker_open(&d, &err) < 0) {
		snprintf_(why, whylen, "docker: %s", err ? err : "cannot connect");
		free(err);
		return -1;
	}
	int rc = docker_ping(d);
	if (rc < 0)
		snprintf_(why, whylen, "docker: %s", docker_errmsg(d));
	else
		snprintf_(info, infolen, "%s, API %s", docker_endpoint(d), docker_api_version(d));
	docker_close(d);
	return rc;
}

/* The configuration is loaded (CMD_REDIS: REDIS_URI required) before this
 * runs. */
static int health_exec(const struct cmd *self, const struct cmd_args *args,
		       const struct config *cfg)
{
	char why[600], addr[300], info[300];
	int rc = health_check_redis(cfg->redis_uri, why, sizeof why, addr, sizeof addr);
	if (rc < 0)
		return cmd_fail("health: %s", why);
	if (health_check_docker(why, sizeof why, info, sizeof info) < 0)
		return cmd_fail("health: %s", why);
	printf("redis: ok (%s)\ndocker: ok (%s)\n", addr, info);
	return 0;
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
