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
 * no hash tag (keys_stream_slot_check, invocation.h). */
int health_check_redis(const struct config *cfg, char **where, char **err);
/* 0 when the Docker daemon answers GET /_ping, with *info "<endpoint>, API
 * <version>" (malloc'd); -1 with *err "docker: ..." (malloc'd). */
int health_check_docker(char **info, char **err);
#endif
