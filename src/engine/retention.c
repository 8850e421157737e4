#include "engine/retention.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/duration.h"
#include "base/log.h"
#include "base/util.h"

struct retention {
	struct redis_uri uri;
	char *stream;
	int64_t retention_ns, first_ns, interval_ns;
	atomic_int stop;
	pthread_t thread;
	bool started; /* thread_start succeeded: stop joins it */
};

int64_t retention_interval_ns(int64_t retention_ns)
{
	int64_t t = retention_ns / 24;
	if (t < NS_PER_MIN)
		t = NS_PER_MIN;
	if (t > NS_PER_HOUR)
		t = NS_PER_HOUR;
	return t;
}

long long retention_trim(struct redis *r, const char *stream, int64_t retention_ns)
{
	int64_t cutoff_ms = (now_wall_ns() - retention_ns) / NS_PER_MS;
	if (cutoff_ms < 0)
		cutoff_ms = 0;
	char minid[32];
	snprintf_(minid, sizeof minid, "%" PRId64 "-0", cutoff_ms);
	redisReply *rep = redis_command(r, "XTRIM %s MINID ~ %s", stream, minid);
	if (!rep) {
		log_warn(LOG_ATTRS("stream", stream, "error", redis_errmsg(r)),
			 "stream trim failed; retrying next tick");
		return -1;
	}
	long long n = -1;
	if (rep->type == REDIS_REPLY_INTEGER) {
		n = rep->integer;
		char ns[24];
		snprintf_(ns, sizeof ns, "%lld", n);
		log_debug(LOG_ATTRS("stream", stream, "minid", minid, "removed", ns),
			  "stream trimmed");
	} else {
		log_warn(LOG_ATTRS("stream", stream, "error",
				   rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply"),
			 "stream trim failed; retrying next tick");
	}
	freeReplyObject(rep);
	return n;
}

static void *retention_main(void *arg)
{
	struct retention *t = arg;
	struct redis *r = redis_new(&t->uri, NULL);
	int64_t wait = t->first_ns;
	while (!atomic_load(&t->stop)) {
		sleep_ms_interruptible(wait / NS_PER_MS, &t->stop);
		wait = t->interval_ns;
		if (atomic_load(&t->stop))
			break;
		if (!redis_is_connected(r) && redis_connect(r) < 0) {
			log_warn(LOG_ATTRS("stream", t->stream, "error", redis_errmsg(r)),
				 "stream trim failed; retrying next tick");
			continue;
		}
		retention_trim(r, t->stream, t->retention_ns);
	}
	redis_free(r);
	return NULL;
}

struct retention *retention_start(const struct redis_uri *uri, const char *stream,
				  int64_t retention_ns, int64_t first_delay_ns, int64_t interval_ns)
{
	struct retention *t = xcalloc(1, sizeof *t);
	redis_uri_copy(&t->uri, uri);
	t->stream = xstrdup(stream);
	t->retention_ns = retention_ns;
	t->first_ns = first_delay_ns > 0 ? first_delay_ns : 5 * NS_PER_SEC;
	t->interval_ns = interval_ns > 0 ? interval_ns : retention_interval_ns(retention_ns);
	char iv[DURATION_STR_MAX], rv[DURATION_STR_MAX];
	log_info(LOG_ATTRS("stream", stream, "retention", duration_format(retention_ns, rv),
			   "interval", duration_format(t->interval_ns, iv)),
		 "stream retention enabled");
	int e = thread_start(&t->thread, "retention", retention_main, t);
	if (e != 0)
		log_warn(LOG_ATTRS("error", strerror(e)),
			 "cannot start the stream retention thread");
	t->started = e == 0;
	return t;
}

void retention_stop(struct retention *t)
{
	if (!t)
		return;
	atomic_store(&t->stop, 1);
	if (t->started)
		pthread_join(t->thread, NULL);
	redis_uri_free(&t->uri);
	free(t->stream);
	free(t);
}
