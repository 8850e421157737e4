#ifndef RELAY_CMD_HEALTH_H
#define RELAY_CMD_HEALTH_H
#include <stddef.h>
/* Dependency checks shared by relay health and relay start's fail-fast. */

/* 0 when Redis at uri_text answers PING, with *addr its address
 * (malloc'd); -1 with *err (malloc'd): "redis: invalid REDIS_URI: ...",
 * the connection's error, or "redis <addr>: PING failed: ...". */
int health_check_redis(const char *uri_text, char **addr, char **err);
/* 0 when the Docker daemon answers GET /_ping, with *info "<endpoint>, API
 * <version>" (malloc'd); -1 with *err "docker: ..." (malloc'd). */
int health_check_docker(char **info, char **err);
#endif
