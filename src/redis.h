/*
 * Redis client: Relay's own transport (TCP, or TLS with OpenSSL) carrying
 * hiredis' RESP formatter and reader, because Debian's hiredis 0.14 has no
 * TLS and no URI parser.
 *
 * REDIS_URI forms: "host:port", "redis://[user[:password]@]host[:port][/db]"
 * and "rediss://..." (TLS; the server certificate is verified against the
 * system CAs plus the file named by SSL_CERT_FILE, and its name against the
 * host). The password never appears in any message this module produces.
 *
 * A struct redis is one connection; it is not thread-safe: each thread owns
 * its own. Every call is bounded by a timeout. After a transport error the
 * connection is closed; redis_connect_retry() reconnects with capped,
 * jittered exponential backoff (1 s doubling up to 30 s), logging one WARN
 * line per failure and one INFO line on recovery.
 */
#ifndef RELAY_REDIS_H
#define RELAY_REDIS_H

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct redis_uri {
	char *host; /* without brackets for IPv6 */
	char *port;
	char *user;	/* NULL when absent */
	char *password; /* NULL when absent */
	bool tls;
	int db;
};

/* Parses s. Returns 0, or -1 with *why set to a malloc'd reason (which
 * never contains the password). */
int redis_uri_parse(const char *s, struct redis_uri *out, char **why);
void redis_uri_free(struct redis_uri *u);
/* A deep copy of src into dst (free with redis_uri_free). */
void redis_uri_copy(struct redis_uri *dst, const struct redis_uri *src);
/* s with any password replaced by "xxxxx" (malloc'd), for messages. */
char *redis_uri_redact(const char *s);

/* A reply larger than this is a protocol error: the connection is closed
 * (bound on every Redis reply Relay reads, enforced in redis.c). Readers of
 * data that others write (the stream) must size their requests below it
 * (consumer.h). */
#define REDIS_REPLY_MAX (64u * 1024 * 1024)

struct redis_opts {
	int connect_timeout_ms; /* 0: 5000 */
	int command_timeout_ms; /* 0: 5000 */
};

struct redis;

/* Copies uri; connects lazily. */
struct redis *redis_new(const struct redis_uri *uri, const struct redis_opts *opts);
void redis_free(struct redis *r);

/* One connection attempt (TCP, TLS handshake, AUTH, SELECT). 0 or -1. */
int redis_connect(struct redis *r);
/* Connects, retrying with backoff until connected (0) or *stop (-1). */
int redis_connect_retry(struct redis *r, const volatile int *stop);
bool redis_is_connected(const struct redis *r);
/* The wait before retry number `failures` (1-based): 1 s doubling up to
 * 30 s, jittered within the upper half. Exposed for tests. */
int64_t redis_backoff_ms(int failures);
void redis_disconnect(struct redis *r);

/* "redis://host:port" or "rediss://host:port": for messages, no credentials. */
const char *redis_addr(const struct redis *r);
/* The last error (never NULL, never contains the password). */
const char *redis_errmsg(const struct redis *r);

/*
 * Commands. Each returns the reply (free with freeReplyObject) or NULL on a
 * transport/protocol error, after which the connection is closed. A Redis
 * error reply is a reply of type REDIS_REPLY_ERROR, not NULL. The connection
 * must be up (redis_connect first); a closed connection gives NULL.
 */
redisReply *redis_command(struct redis *r, const char *fmt, ...);
redisReply *redis_command_argv(struct redis *r, int argc, const char **argv, const size_t *lens);

/* Pipelining: queue commands, then read their replies in order.
 * timeout_ms < 0 means the default command timeout. */
int redis_append_argv(struct redis *r, int argc, const char **argv, const size_t *lens);
int redis_append(struct redis *r, const char *fmt, ...);
redisReply *redis_get_reply(struct redis *r, int timeout_ms);
/* Like redis_get_reply, but a timeout is not an error: returns 1 with the
 * reply in *out, 0 when none arrived within timeout_ms (the connection
 * stays up, a partly read reply is kept), -1 on a transport/protocol error
 * (the connection is closed). For connections that wait for pushed
 * messages (a subscriber). */
int redis_wait_reply(struct redis *r, int timeout_ms, redisReply **out);

/*
 * Lua scripts run by their SHA1 (EVALSHA), falling back to EVAL when the
 * server does not know the script (NOSCRIPT: a restarted or flushed
 * server). A struct redis_script is immutable after redis_script_init and
 * may be shared by threads.
 */
struct redis_script {
	const char *text; /* borrowed: a string literal */
	char sha[41];
};
void redis_script_init(struct redis_script *s, const char *text);
/* Queues EVALSHA <sha> argv... (argv[0] is numkeys). */
int redis_append_script(struct redis *r, const struct redis_script *s, int argc, const char **argv,
			const size_t *lens);
/* Whether rep is the NOSCRIPT error of an EVALSHA. */
bool redis_reply_is_noscript(const redisReply *rep);
/* Runs the script (EVALSHA, then EVAL on NOSCRIPT) and returns its reply
 * as redis_command does. */
redisReply *redis_script_run(struct redis *r, const struct redis_script *s, int argc,
			     const char **argv, const size_t *lens);

#endif
