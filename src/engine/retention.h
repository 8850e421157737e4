/*
 * Stream retention (REDIS_STREAM_RETENTION): one thread trims the stream
 * with XTRIM <stream> MINID ~ <now-retention in ms>-0, once shortly after
 * startup and then every retention/24 clamped to [1m, 1h]. Failures are
 * logged and retried on the next tick; they never stop the worker.
 */
#ifndef RELAY_RETENTION_H
#define RELAY_RETENTION_H

#include <stdint.h>

#include "io/redis.h"

struct retention;

/* The tick for a retention window: retention/24 clamped to [1m, 1h]. */
int64_t retention_interval_ns(int64_t retention_ns);

/* first_delay_ns / interval_ns of 0 use 5 s / retention_interval_ns(). */
struct retention *retention_start(const struct redis_uri *uri, const char *stream,
				  int64_t retention_ns, int64_t first_delay_ns,
				  int64_t interval_ns);
void retention_stop(struct retention *r);

/* One trim now (exposed for tests). Returns entries removed or -1. */
long long retention_trim(struct redis *r, const char *stream, int64_t retention_ns);

#endif
