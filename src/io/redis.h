/*
 * Redis client: Relay's own transport (TCP, or TLS with OpenSSL) carrying
 * hiredis' RESP formatter and reader, because Debian's hiredis 0.14 has no
 * TLS and no URI parser.
 *
 * REDIS_URI forms: "host:port", "redis://[user[:password]@]host[:port][/db]"
 * and "rediss://..." (TLS; the server certificate is verified against the
 * CAs of the file SSL_CERT_FILE names when it is set, which then replace the
 * system's, else against the system's; and its name against the host or
 * address connected to, on every connection: seed, slot owner, redirect
 * target, sentinel, the master a sentinel names); a seed list
 * "redis://[user[:pw]@]h1:7000,h2:7001[/db]" (at most REDIS_HOSTS_MAX
 * hosts); "redis-sentinel://[user[:pw]@]s1:26379,s2/<master>[/db]" and
 * "rediss-sentinel://..." (TLS to the data nodes and, unless sentinel_tls
 * is cleared, to the sentinels; default port 26379; the sentinels are
 * authenticated only with sentinel_user / sentinel_password). The password
 * never appears in any message this module produces.
 *
 * Routing (redis_connect): sentinel mode asks each sentinel in turn for the
 * master's address and confirms it with ROLE. Otherwise the first seed that
 * accepts is asked INFO cluster; on a cluster the slot map (CLUSTER SHARDS,
 * else CLUSTER SLOTS) names the master owning redis_key_slot(route_key)
 * (slot 0 without one) and the connection goes there. The nodes of the last
 * slot map are seeds too when reconnecting.
 *
 * Sentinel mode follows a switch as it is announced: the first connection
 * routed through the sentinels starts one "sentinel-watch" thread per
 * process, subscribed to +switch-master on one sentinel at a time; after a
 * switch of the master, a connection with nothing in flight re-routes
 * before its next command, and a blocking read waiting on the old master
 * is resent on the new one (INFO "the sentinels switched the master;
 * following it"). Without the message (no sentinel reachable), READONLY,
 * UNBLOCKED or a closed connection re-route as below.
 *
 * Credentials go only to nodes Relay knows: a MOVED or ASK naming a node
 * that is neither a seed, nor the node connected to, nor a node of the last
 * slot map has the slot map read again (through the seeds, as a
 * reconnection does); still unknown, it is refused: nothing is sent there,
 * one WARN line, and the caller gets the redirect as its error reply. A
 * MOVED or ASK outside cluster mode is refused the same way.
 *
 * In cluster and sentinel mode only, the connection keeps a copy of every
 * command in flight until its reply is read (bounded like the out queue,
 * REDIS_OUT_MAX). A reply MOVED, ASK, TRYAGAIN, CLUSTERDOWN, LOADING,
 * MASTERDOWN, READONLY or UNBLOCKED means the command did not run: it is
 * resent (after re-routing, through ASKING on the ASK target, or after a
 * bounded backoff), at most REDIS_REDIRECTS_MAX times and within the command
 * timeout, after which the error reply goes to the caller. A command that got
 * any other reply is never resent. In a pipeline the old connection's other
 * replies are read first; the caller gets the replies in the original order
 * (a command after a redirected one may thus have run before it). A resent
 * blocking read (XREADGROUP BLOCK under redis_wait_reply) goes on waiting
 * softly on the new node; other resends are read within the command timeout.
 * One WARN line per redirect episode and one INFO line when served again (an
 * ASK: one WARN per connection, as a migration asks for every moved key).
 * Standalone connections copy nothing. Routing commands bypass the guard.
 * A transport error stays one: the connection is closed and the caller
 * reconnects (redis_connect_retry re-routes).
 *
 * A struct redis is one connection; it is not thread-safe: each thread owns
 * its own. Every call is bounded by a timeout. After a transport error the
 * connection is closed; redis_connect_retry() reconnects (re-routing) with
 * capped, jittered exponential backoff (1 s doubling up to 30 s), logging
 * one WARN line per failure and one INFO line on recovery.
 */
#ifndef RELAY_REDIS_H
#define RELAY_REDIS_H

#include <hiredis/hiredis.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define REDIS_HOSTS_MAX 16    /* hosts in one REDIS_URI */
#define REDIS_REDIRECTS_MAX 5 /* resends of one command */

struct redis_host {
	char *host; /* without brackets for IPv6 */
	char *port;
};

struct redis_uri {
	char *host; /* the first seed; without brackets for IPv6 */
	char *port;
	struct redis_host *hosts; /* every seed (the sentinels in sentinel mode),
				     hosts[0] = host/port; may be NULL (nhosts 0):
				     then host/port is the only seed */
	size_t nhosts;
	char *user;	   /* NULL when absent; for the data nodes */
	char *password;	   /* NULL when absent */
	bool tls;	   /* to the data nodes */
	bool sentinel_tls; /* to the sentinels (rediss-sentinel://, unless
			      REDIS_SENTINEL_TLS=no: config.c) */
	int db;
	char *sentinel_master;			 /* sentinel mode: the master name; else NULL */
	char *sentinel_user, *sentinel_password; /* NULL unless set (config.c) */
	char *route_key; /* the key every connection must serve; NULL: none */
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

/* One connection attempt, routed (see the top of this file): sentinel
 * resolution or seeds, then TCP, TLS handshake, AUTH, SELECT on the node
 * chosen. Dead seeds or sentinels cost at most three connect timeouts in
 * all. 0 or -1 (redis_errmsg: the last seed's or sentinel's failure). */
int redis_connect(struct redis *r);
/* Connects, retrying with backoff until connected (0) or *stop (-1). */
int redis_connect_retry(struct redis *r, const atomic_int *stop);
bool redis_is_connected(const struct redis *r);
/* The wait before retry number `failures` (1-based): 1 s doubling up to
 * 30 s, jittered within the upper half. Exposed for tests. */
int64_t redis_backoff_ms(int failures);
void redis_disconnect(struct redis *r);

enum redis_mode { REDIS_MODE_STANDALONE, REDIS_MODE_CLUSTER, REDIS_MODE_SENTINEL };
/* Known after the first successful connect (standalone before). */
enum redis_mode redis_mode(const struct redis *r);
/* "standalone", "cluster, slot 1234 on 127.0.0.1:7002" or "sentinel master
 * mymaster at 127.0.0.1:6380"; valid until the next connect. */
const char *redis_describe(const struct redis *r);

/* Redis Cluster's hash slot of a key: CRC16 (XMODEM) mod 16384 of its hash
 * tag, or of the whole key when it has none. */
unsigned redis_key_slot(const char *key, size_t len);
/* The hash tag: the bytes between the first '{' and the first '}' after
 * it, when there are any; false otherwise. */
bool redis_hash_tag(const char *key, size_t len, size_t *off, size_t *taglen);

/* A parsed slot map (exposed for tests). */
#define REDIS_NODES_MAX 64    /* nodes kept as seeds */
#define REDIS_SHARDS_MAX 1024 /* shards or slot ranges read */
struct redis_slotmap {
	struct redis_host owner;  /* the master serving the slot */
	struct redis_host *nodes; /* nodes of the map (at most REDIS_NODES_MAX) */
	size_t nnodes;
};
/* Parses a CLUSTER SHARDS (shards) or CLUSTER SLOTS reply and finds the
 * master of slot (tls: the node's tls-port when it has one; self_host: the
 * host of an empty address). 0, or -1 with *why (malloc'd). */
int redis_slotmap_parse(const redisReply *rep, bool shards, unsigned slot, bool tls,
			const char *self_host, struct redis_slotmap *m, char **why);
void redis_slotmap_free(struct redis_slotmap *m);

/* "redis://host:port" or "rediss://host:port": for messages, no credentials.
 * Names the node the connection is on (or was last tried). */
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
 * Reply guard: bounds the elements at one array depth of every reply on a
 * connection without reading them. The bytes are looked at as they arrive,
 * before hiredis buffers them; an element that would grow past max bytes
 * (as sent: every header line, string and CRLF of it) is refused at the
 * header of the string that would take it there (or at a header line that
 * already does), the connection is closed at once (the rest of the reply
 * is never read) and redis_guard_tripped() is true until the next connect.
 * Depth 0 is the reply itself, 1 its elements, and so on: in an XREADGROUP
 * reply ([[stream, [[id, [field, value, ...]], ...]]]) depth 3 is one
 * stream entry. Bytes that are not RESP2 (a RESP3 type, a bad header,
 * nesting deeper than hiredis takes) are refused the same way. With
 * max_elements, a guarded element is also refused at the header of its
 * element past that many (itself, and every array, string or line inside
 * it, at any depth): hiredis allocates an object of some 80 bytes per
 * element, so a million tiny strings in 8 MiB would cost 80 MiB to parse
 * (0: no such bound). max 0 turns the guard off. Set it between replies
 * (before a command, or before connecting): it starts scanning at the
 * next reply.
 */
void redis_set_guard(struct redis *r, int depth, size_t max, size_t max_elements);
bool redis_guard_tripped(const struct redis *r);
/* The first string inside the guarded elements of the refused reply (an
 * XREADGROUP reply: the id of its first entry), or "" when none was passed
 * before the refusal or it was longer than REDIS_GUARD_FIRST_MAX bytes.
 * Valid until the next connect. */
const char *redis_guard_first(const struct redis *r);

/* The guard's scanner, exposed for tests. Its state is a few fixed fields:
 * it stores nothing of what it passes except the first string above. */
#define REDIS_GUARD_STACK 8 /* nested arrays: hiredis refuses a ninth */
#define REDIS_GUARD_FIRST_MAX 63
struct redis_guard {
	int depth;
	size_t max;
	size_t max_elements;		 /* 0: no bound */
	uint64_t elements;		 /* of the guarded element so far */
	int state;			 /* a type byte, a header line, a string, its CRLF */
	char type;			 /* of the line being read */
	bool cr;			 /* the line's last byte was '\r' */
	char num[24];			 /* the line's number ($ * :) */
	size_t numlen;			 /* its digits so far */
	uint64_t linelen;		 /* bytes of the line so far */
	uint64_t skip;			 /* string bytes still to pass */
	size_t caplen;			 /* bytes of this string to copy into first */
	int64_t left[REDIS_GUARD_STACK]; /* elements still to come per open array */
	int sp;				 /* open arrays */
	uint64_t sum;			 /* bytes of the guarded element so far */
	bool in;			 /* inside a guarded element */
	bool first_done;		 /* this reply's first guarded string was seen */
	char first[REDIS_GUARD_FIRST_MAX + 1];
	size_t firstlen;
};
void redis_guard_init(struct redis_guard *g, int depth, size_t max, size_t max_elements);
/* Looks at the next n bytes of the connection's reply stream: 0, or -1
 * when an element is refused or the bytes are not RESP2 (then the scanner
 * is stuck: every later call refuses too). g->first (g->firstlen bytes)
 * is the current reply's first guarded string. */
int redis_guard_feed(struct redis_guard *g, const char *p, size_t n);

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
