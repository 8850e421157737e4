#ifndef RELAY_CMD_HEALTH_H
#define RELAY_CMD_HEALTH_H
#include <stddef.h>
/* Dependency checks shared by relay health and relay start's fail-fast. */
int health_check_redis(const char *uri_text, char *why, size_t whylen, char *addr, size_t addrlen);
int health_check_docker(char *why, size_t whylen, char *info, size_t infolen);
#endif
