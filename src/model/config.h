/*
 * Relay's configuration, read from the environment once at startup.
 *
 * One declarative table in config.c lists every variable with its rule and
 * default (redis config.c style). config_load() validates all of them and
 * reports every bad one, each as one line naming the variable, the bad
 * value (redacted where it can hold a password) and what is accepted.
 */
#ifndef RELAY_CONFIG_H
#define RELAY_CONFIG_H

#include <stdint.h>

#include "base/log.h"
#include "model/otel.h"

/* The defaults of the optional settings, each stated only here: config.c's
 * table sets them and writes its "(default X)" texts from them. */
#define DEFAULT_FUNCTIONS_DIR "/functions"
#define DEFAULT_DATA_DIR "/var/lib/relay"
#define DEFAULT_LOG_LEVEL LOG_INFO
#define DEFAULT_MAX_CONCURRENCY 8
#define DEFAULT_MAX_BUFFERED_EVENTS 16
/* A Go duration, as a user writes it: config.c parses it like a set value. */
#define DEFAULT_STANDBY_IDLE "10m"
/* STANDBY_MAX has no constant: its default is MAX_CONCURRENCY's value. */

/* The largest STANDBY_MAX accepted (a plain number: config.c's message
 * text is made from it). */
#define STANDBY_MAX_LIMIT 1000

/* The longest RELAY_OCI_RUNTIME accepted (a plain number, as above). */
#define OCI_RUNTIME_NAME_MAX 64

/* A yes/no setting's value; 0 is unset. */
enum { CONFIG_YES = 1, CONFIG_NO = 2 };

struct config {
	char *redis_uri;
	/* redis-sentinel:// only: the sentinels' credentials (NULL: no AUTH to
	 * the sentinels; REDIS_URI's userinfo is the data nodes'). */
	char *redis_sentinel_user;
	char *redis_sentinel_password;
	/* REDIS_SENTINEL_TLS: CONFIG_YES, CONFIG_NO or 0, unset (the scheme
	 * decides: TLS to the sentinels for rediss-sentinel://). */
	int redis_sentinel_tls;
	char *redis_stream;
	char *redis_group;
	int64_t stream_retention_ns; /* 0: retention disabled */
	char *metrics_addr;	     /* NULL: metrics server disabled */
	char *webhook_addr;	     /* NULL: webhook server disabled */
	enum log_level log_level;
	int64_t max_concurrency;
	int64_t max_buffered_events;
	int64_t standby_max;	 /* 0 to STANDBY_MAX_LIMIT; 0: no standby containers */
	int64_t standby_idle_ns; /* > 0: a handler idle this long keeps none */
	/* RELAY_OCI_RUNTIME: HostConfig.Runtime of every execution container;
	 * NULL: none sent, the daemon's default runtime. relay start checks it
	 * against the daemon's GET /info "Runtimes" before anything runs. */
	char *oci_runtime;
	char *functions_dir;
	char *data_dir;
	/* The OTEL_* variables (otel.h), validated with the others. */
	struct otel_settings otel;
};

/* Which variables a command needs: the rest are still validated when set. */
enum config_need {
	CONFIG_NEED_ALL = 0,	  /* relay start: REDIS_URI, REDIS_STREAM, REDIS_GROUP required */
	CONFIG_NEED_REDIS_URI = 1 /* relay health: only REDIS_URI required */
};

/*
 * Reads and validates the environment into c. Returns 0, or -1 with *errs
 * set to a malloc'd array of *nerrs malloc'd one-line messages (free with
 * config_errors_free). c is zeroed on failure and must be freed with
 * config_free on success.
 */
int config_load(struct config *c, enum config_need need, char ***errs, int *nerrs);
/* Only the directories (RELAY_DATA_DIR, RELAY_FUNCTIONS_DIR), by
 * config_load's rules (a K_PATH is never refused), for the commands that
 * need nothing else; the other fields of c (zeroed by the caller) stay
 * zero. */
void config_load_dirs(struct config *c);
void config_free(struct config *c);
void config_errors_free(char **errs, int nerrs);

/*
 * REDIS_URI parsed for a connection (redis.h): the sentinels' credentials
 * added, and REDIS_STREAM as the route key (in Redis Cluster every
 * connection serves the stream's hash slot). 0, or -1 with *why
 * (malloc'd, no password). Free u with redis_uri_free.
 */
struct redis_uri;
int config_redis_uri(const struct config *c, struct redis_uri *u, char **why);

/* Validates a Go-style listen address: ":9090", "127.0.0.1:9090",
 * "[::1]:9090", "localhost:9090". Returns 0 or -1. The rule is
 * http_parse_listen_addr's (http.h), the one the servers start with. */
int config_valid_listen_addr(const char *s);

/* A RELAY_OCI_RUNTIME value: 1 to OCI_RUNTIME_NAME_MAX bytes of
 * [A-Za-z0-9._-]. Returns 0 or -1. */
int config_valid_runtime_name(const char *s);

/* Loads the configuration for a command; on failure logs every error at
 * ERROR level (regardless of LOG_LEVEL) and returns -1. Also sets the
 * logger's level on success. */
int config_load_or_log(struct config *c, enum config_need need);

#endif
