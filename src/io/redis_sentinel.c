/*
 * Sentinel mode of the Redis client: routing to the master the sentinels
 * name (confirmed with ROLE), and the +switch-master watcher that moves
 * connections to a new master as soon as it is announced.
 */
#include "io/redis.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/duration.h"
#include "base/log.h"
#include "base/util.h"
#include "io/redis_internal.h"

/*
 * Sentinel mode: the master switch as it happens. The sentinels publish
 * +switch-master the moment they promote a replica; the old master still
 * accepts commands until they demote it (seconds later: their next INFO
 * round), and a read blocked there would wait until then. One thread per
 * process (started by the first connection routed through the sentinels)
 * subscribes on one sentinel at a time and counts the switches of that
 * master in sentinel_epoch; a connection routed at an older epoch moves to
 * the new master before its next command (redis_sentinel_follow), and a
 * blocking read waiting there is resent on it (next_reply, redis.c).
 */
static atomic_uint sentinel_epoch;
static pthread_mutex_t watch_lock = PTHREAD_MUTEX_INITIALIZER;
static bool watch_started;
static struct redis_uri watch_uri; /* the first sentinel URI routed */

#define WATCH_RETRY_MS 1000

/* Whether m is a +switch-master message about master name. */
static bool switch_message(const redisReply *m, const char *name)
{
	if (!m || m->type != REDIS_REPLY_ARRAY || m->elements != 3)
		return false;
	const redisReply *kind = m->element[0], *chan = m->element[1], *body = m->element[2];
	size_t n = strlen(name);
	return kind->type == REDIS_REPLY_STRING && strcmp(kind->str, "message") == 0 &&
	       chan->type == REDIS_REPLY_STRING && strcmp(chan->str, "+switch-master") == 0 &&
	       body->type == REDIS_REPLY_STRING && body->len > n &&
	       strncmp(body->str, name, n) == 0 && body->str[n] == ' ';
}

static void *sentinel_watch(void *arg)
{
	(void)arg;
	struct redis_opts o = {0};
	struct redis probe = {.uri = watch_uri};
	size_t ns = watch_uri.nhosts ? watch_uri.nhosts : 1;
	for (size_t i = 0;; i = (i + 1) % ns) {
		const char *sh = watch_uri.nhosts ? watch_uri.hosts[i].host : watch_uri.host;
		const char *sp = watch_uri.nhosts ? watch_uri.hosts[i].port : watch_uri.port;
		struct redis *a = redis_aux_new(&probe, sh, sp, true);
		a->opts = o;
		a->opts.connect_timeout_ms = 5000;
		a->opts.command_timeout_ms = 5000;
		if (redis_connect(a) == 0 && redis_append(a, "SUBSCRIBE +switch-master") == 0) {
			for (;;) {
				redisReply *m = NULL;
				int w = redis_wait_reply(a, 60000, &m);
				if (w < 0)
					break;
				if (w > 0 && switch_message(m, watch_uri.sentinel_master))
					atomic_fetch_add(&sentinel_epoch, 1);
				if (m)
					freeReplyObject(m);
			}
		}
		redis_free(a);
		sleep_ms_interruptible(WATCH_RETRY_MS, NULL);
	}
	return NULL;
}

static void start_watch(const struct redis *r)
{
	pthread_mutex_lock(&watch_lock);
	if (!watch_started) {
		redis_uri_copy(&watch_uri, &r->uri);
		pthread_t t;
		if (thread_start(&t, "sentinel-watch", sentinel_watch, NULL) == 0) {
			pthread_detach(t);
			watch_started = true;
		} else {
			redis_uri_free(&watch_uri);
		}
	}
	pthread_mutex_unlock(&watch_lock);
}

bool redis_sentinel_switched(const struct redis *r)
{
	return r->mode == REDIS_MODE_SENTINEL && !r->aux && !r->routing && r->fd >= 0 &&
	       atomic_load(&sentinel_epoch) != r->epoch;
}

void redis_sentinel_follow(struct redis *r)
{
	if (!redis_sentinel_switched(r) || r->fl_head != r->fl_n || r->ready_n || r->out.len)
		return;
	char from[sizeof r->addr];
	snprintf_(from, sizeof from, "%s", r->addr);
	if (redis_route(r, NULL, NULL) == 0)
		log_info(LOG_ATTRS("addr", from, "to", r->addr),
			 "the sentinels switched the master; following it");
}

int redis_route_sentinel(struct redis *r)
{
	char lasterr[sizeof r->err] = "";
	const char *name = r->uri.sentinel_master;
	/* Before asking: a switch during the routing routes again. */
	unsigned epoch = atomic_load(&sentinel_epoch);
	size_t ns = r->uri.nhosts ? r->uri.nhosts : 1;
	for (size_t i = 0; i < ns && (i == 0 || now_mono_ns() < r->route_deadline); i++) {
		const char *sh = r->uri.nhosts ? r->uri.hosts[i].host : r->uri.host;
		const char *sp = r->uri.nhosts ? r->uri.hosts[i].port : r->uri.port;
		struct redis *a = redis_aux_new(r, sh, sp, true);
		int64_t left = (r->route_deadline - now_mono_ns()) / NS_PER_MS;
		if (left < a->opts.connect_timeout_ms)
			a->opts.connect_timeout_ms = left > 1 ? (int)left : 1;
		redisReply *rep = NULL;
		if (redis_connect(a) < 0 ||
		    !(rep = redis_command(a, "SENTINEL get-master-addr-by-name %s", name))) {
			snprintf_(lasterr, sizeof lasterr, "sentinel %s", a->err);
			redis_free(a);
			continue;
		}
		char host[256] = "", port[8] = "";
		if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
		    rep->element[0]->type == REDIS_REPLY_STRING &&
		    rep->element[1]->type == REDIS_REPLY_STRING &&
		    redis_valid_host(rep->element[0]->str, rep->element[0]->len) &&
		    redis_valid_port(rep->element[1]->str, rep->element[1]->len)) {
			snprintf_(host, sizeof host, "%s", rep->element[0]->str);
			snprintf_(port, sizeof port, "%s", rep->element[1]->str);
		} else if (rep->type == REDIS_REPLY_NIL) {
			snprintf_(lasterr, sizeof lasterr, "sentinel %s does not know master %s",
				  a->addr, name);
		} else {
			snprintf_(lasterr, sizeof lasterr,
				  "sentinel %s: unexpected reply to SENTINEL "
				  "get-master-addr-by-name%s%.100s",
				  a->addr, rep->type == REDIS_REPLY_ERROR ? ": " : "",
				  rep->type == REDIS_REPLY_ERROR ? rep->str : "");
		}
		freeReplyObject(rep);
		redis_free(a);
		if (!host[0])
			continue;
		if (redis_node_connect(r, host, port) < 0 || !(rep = redis_command(r, "ROLE"))) {
			snprintf_(lasterr, sizeof lasterr, "%s", r->err);
			continue;
		}
		bool master = rep->type == REDIS_REPLY_ARRAY && rep->elements >= 1 &&
			      rep->element[0]->type == REDIS_REPLY_STRING &&
			      strcmp(rep->element[0]->str, "master") == 0;
		char role[32] = "?";
		if (rep->type == REDIS_REPLY_ARRAY && rep->elements >= 1 &&
		    rep->element[0]->type == REDIS_REPLY_STRING)
			snprintf_(role, sizeof role, "%s", rep->element[0]->str);
		freeReplyObject(rep);
		if (!master) {
			redis_fail(r, "the sentinels' master %s is not a master (ROLE: %s)", name,
				   role);
			snprintf_(lasterr, sizeof lasterr, "%s", r->err);
			continue;
		}
		r->mode = REDIS_MODE_SENTINEL;
		r->epoch = epoch;
		start_watch(r);
		char hp[300];
		redis_hostport(hp, sizeof hp, r->host, r->port);
		snprintf_(r->describe, sizeof r->describe, "sentinel master %s at %s", name, hp);
		return 0;
	}
	snprintf_(r->err, sizeof r->err, "%s", lasterr[0] ? lasterr : "no sentinel to ask");
	return -1;
}
