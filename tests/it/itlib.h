/*
 * Helpers for the in-process integration programs (tests/it/NAME.c): a
 * private redis-server on a free port in a temporary directory, stopped at
 * exit, and a few Redis conveniences. Real servers only.
 */
#ifndef RELAY_ITLIB_H
#define RELAY_ITLIB_H

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/consumer.h"
#include "io/redis.h"
#include "base/util.h"

struct itredis {
	pid_t pid;
	int port;
	char dir[64];
	char portstr[16];
	struct redis_uri uri;
};

static int it_free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	bind(fd, (struct sockaddr *)&a, sizeof a);
	socklen_t len = sizeof a;
	getsockname(fd, (struct sockaddr *)&a, &len);
	close(fd);
	return ntohs(a.sin_port);
}

/* Forks redis-server on port with extra args (NULL-terminated list), in a
 * new temporary directory; does not wait for it to listen. */
static int it_redis_spawn(struct itredis *it, int port, const char *const *extra)
{
	snprintf_(it->dir, sizeof it->dir, "/tmp/relay-itc.XXXXXX");
	if (!mkdtemp(it->dir))
		return -1;
	it->port = port;
	snprintf_(it->portstr, sizeof it->portstr, "%d", it->port);
	const char *argv[40] = {"redis-server", "--bind",     "127.0.0.1",    "--port", it->portstr,
				"--save",	"",	      "--appendonly", "no",	"--dir",
				it->dir,	"--loglevel", "warning"};
	int argc = 13;
	for (int i = 0; extra && extra[i] && argc < 38; i++)
		argv[argc++] = extra[i];
	argv[argc] = NULL;
	it->pid = fork();
	if (it->pid == 0) {
		/* Dies with the test, and never holds the test's output pipes. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 1);
		dup2(null, 2);
		execvp("redis-server", (char *const *)argv);
		_exit(127);
	}
	return it->pid > 0 ? 0 : -1;
}

/* Starts redis-server with extra args (NULL-terminated list) and waits
 * until it answers. */
static int it_redis_start(struct itredis *it, const char *const *extra)
{
	if (it_redis_spawn(it, it_free_port(), extra) < 0)
		return -1;
	memset(&it->uri, 0, sizeof it->uri);
	it->uri.host = "127.0.0.1";
	it->uri.port = it->portstr;
	for (int i = 0; i < 100; i++) {
		struct redis *r = redis_new(&it->uri, NULL);
		int ok = redis_connect(r) == 0;
		redis_free(r);
		if (ok)
			return 0;
		usleep(50000);
	}
	return -1;
}

static void it_redis_stop(struct itredis *it)
{
	if (it->pid > 0) {
		kill(it->pid, SIGTERM);
		waitpid(it->pid, NULL, 0);
		it->pid = 0;
	}
}

static void it_redis_cleanup(struct itredis *it)
{
	it_redis_stop(it);
	char *cmd = xasprintf("rm -rf '%s'", it->dir);
	if (system(cmd) != 0) {
		/* best effort */
	}
	free(cmd);
}

static struct redis *it_conn(struct itredis *it)
{
	struct redis *r = redis_new(&it->uri, NULL);
	if (redis_connect(r) < 0) {
		fprintf(stderr, "cannot connect to the test's redis-server\n");
		redis_free(r);
		return NULL;
	}
	return r;
}

/* consumer_ensure_group: 0, or -1 with its error on stderr (also when r
 * is NULL: it_conn could not connect). */
static inline int it_ensure_group(struct redis *r, const char *stream, const char *group)
{
	if (!r)
		return -1;
	char *err = NULL;
	int rc = consumer_ensure_group(r, stream, group, &err);
	if (rc < 0)
		fprintf(stderr, "cannot create group %s on %s: %s\n", group, stream, err);
	free(err);
	return rc;
}

/* A consumer group as XINFO GROUPS reports it. lag is -1 when Redis
 * cannot tell it (nil after deletions) or the group is missing. */
struct it_group {
	bool found;
	long long lag, pending;
	char last_id[64];
};

static inline struct it_group it_group_info(struct redis *r, const char *stream, const char *group)
{
	struct it_group g = {false, -1, -1, ""};
	redisReply *rep = redis_command(r, "XINFO GROUPS %s", stream);
	for (size_t k = 0; rep && rep->type == REDIS_REPLY_ARRAY && k < rep->elements; k++) {
		const redisReply *e = rep->element[k];
		struct it_group cur = {false, -1, -1, ""};
		for (size_t j = 0; e->type == REDIS_REPLY_ARRAY && j + 1 < e->elements; j += 2) {
			const redisReply *name = e->element[j], *v = e->element[j + 1];
			if (name->type != REDIS_REPLY_STRING)
				continue;
			if (strcmp(name->str, "name") == 0 && v->type == REDIS_REPLY_STRING)
				cur.found = strcmp(v->str, group) == 0;
			else if (strcmp(name->str, "lag") == 0 && v->type == REDIS_REPLY_INTEGER)
				cur.lag = v->integer;
			else if (strcmp(name->str, "pending") == 0 &&
				 v->type == REDIS_REPLY_INTEGER)
				cur.pending = v->integer;
			else if (strcmp(name->str, "last-delivered-id") == 0 &&
				 v->type == REDIS_REPLY_STRING)
				snprintf_(cur.last_id, sizeof cur.last_id, "%s", v->str);
		}
		if (cur.found) {
			g = cur;
			break;
		}
	}
	if (rep)
		freeReplyObject(rep);
	return g;
}

/* True when the group has read the stream up to last_id (the newest entry
 * a test added) and acknowledged everything: last-delivered-id = last_id,
 * lag 0 and nothing pending. Pending 0 alone also holds for a message
 * nobody has read yet. */
static inline bool it_group_done(struct redis *r, const char *stream, const char *group,
				 const char *last_id)
{
	struct it_group g = it_group_info(r, stream, group);
	return g.found && last_id && strcmp(g.last_id, last_id) == 0 && g.lag == 0 &&
	       g.pending == 0;
}

/* XLEN of stream, or -1. */
static inline long long it_xlen(struct redis *r, const char *stream)
{
	redisReply *rep = redis_command(r, "XLEN %s", stream);
	long long n = rep && rep->type == REDIS_REPLY_INTEGER ? rep->integer : -1;
	if (rep)
		freeReplyObject(rep);
	return n;
}

/* How many entries of stream group g has pending (XPENDING), or -1. */
static inline long long it_pending(struct redis *r, const char *stream)
{
	redisReply *rep = redis_command(r, "XPENDING %s g", stream);
	long long n = rep && rep->type == REDIS_REPLY_ARRAY && rep->elements > 0
			      ? rep->element[0]->integer
			      : -1;
	if (rep)
		freeReplyObject(rep);
	return n;
}

#endif
