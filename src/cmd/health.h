#ifndef RELAY_CMD_HEALTH_H
#define RELAY_CMD_HEALTH_H
#include <stddef.h>
/* Dependency checks shared by relay health and relay start's fail-fast. */

struct config;
struct redis;

/* 0 when Redis at REDIS_URI answers PING, with *where (malloc'd) its
 * address ("redis://127.0.0.1:6379"), or in Redis Cluster "cluster, slot
 * 1234 on 127.0.0.1:7002", behind Sentinel "sentinel master mymaster at
 * 127.0.0.1:6380"; -1 with *err (malloc'd): "redis: invalid REDIS_URI:
 * ...", the connection's error, or "redis <addr>: PING failed: ..."; -2
 * with *err when the server is a cluster and REDIS_STREAM (when set) has
 * no hash tag (health_stream_slot_check). */
int health_check_redis(const struct config *cfg, char **where, char **err);
/* In Redis Cluster every key Relay uses lives in the stream's hash slot, so
 * the stream needs a hash tag: 0 when r (connected) is not a cluster or
 * stream has one, else -1 with *why (malloc'd) saying so with an example. */
int health_stream_slot_check(const struct redis *r, const char *stream, char **why);
/* 0 when the Docker daemon answers GET /_ping, with *info "<endpoint>, API
 * <version>" (malloc'd); -1 with *err "docker: ..." (malloc'd). */
int health_check_docker(char **info, char **err);
#endif
