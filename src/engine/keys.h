/*
 * How Relay names its Redis keys after the stream and group they belong
 * to: percent-encoding, and what changes on Redis Cluster.
 *
 * On Redis Cluster every key Relay uses must live in the stream's hash
 * slot, so a key that names the stream must keep its hash tag:
 * once keys_set_cluster(true) (relay start and the CLI, after their first
 * connection found a cluster: redis_mode), keys_encode() leaves '{' and '}'
 * as they are (the encoded name still has no ':' and stays unambiguous, and
 * its first "{...}" is the stream's tag), and schedule keys gain the tag
 * (schedule.h). Otherwise every key is named as on a single server. The
 * mode is set once, before any key is built, and read by every thread.
 */
#ifndef RELAY_KEYS_H
#define RELAY_KEYS_H

#include <stdbool.h>

#include "io/redis.h"

/* Percent-encodes everything but [A-Za-z0-9._~-] (malloc'd). */
char *keys_pct_encode(const char *s);
void keys_set_cluster(bool on);
bool keys_cluster(void);
/* Hence on Redis Cluster the stream needs a hash tag: 0 when r (connected)
 * is not a cluster or stream has one, else -1 with *why (malloc'd) saying
 * so with an example. */
int keys_stream_slot_check(const struct redis *r, const char *stream, char **why);
/* keys_pct_encode, or with keys_cluster() the same but '{' and '}' kept. */
char *keys_encode(const char *s);

#endif
