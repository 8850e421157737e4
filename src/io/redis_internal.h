/*
 * The inside of the Redis client, shared by its files: only src/io/redis*.c
 * include this header; everyone else uses io/redis.h, the interface.
 *
 * Here are the connection itself (struct redis) and the functions one of
 * those files calls in another, grouped by the file that defines them:
 * redis.c (the connection: transport, TLS, replies, commands, AUTH and
 * SELECT, routing), redis_cluster.c (slot map, routing through the seeds,
 * redirects), redis_sentinel.c (the master through the sentinels, the
 * +switch-master watcher) and redis_uri.c (URIs, and the checks of a host
 * and a port that a server names). redis_guard.c (the reply guard's
 * scanner) needs none of it.
 */
#ifndef RELAY_REDIS_INTERNAL_H
#define RELAY_REDIS_INTERNAL_H

#include <openssl/ssl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/util.h"
#include "io/redis.h"

/* REDIS_REPLY_MAX (redis.h) bounds every reply read; REDIS_OUT_MAX every
 * queue of outgoing commands. */
#define REDIS_OUT_MAX (64u * 1024 * 1024)

/* A command in flight (cluster and sentinel mode): its bytes in pend. */
struct inflight {
	size_t len;
	int tries; /* resends so far */
};

struct redis {
	struct redis_uri uri;
	struct redis_opts opts;
	bool aux; /* a helper connection (sentinel, ASK target): no routing */
	enum redis_mode mode;
	bool track;		 /* keep copies of the commands in flight */
	char host[256], port[8]; /* the node connected to (or last tried) */
	unsigned slot;		 /* cluster mode: the slot of route_key */
	char describe[400];
	struct redis_host *known; /* the nodes of the last slot map */
	size_t nknown;
	struct buf pend; /* bytes of the commands in flight, from pend_off */
	size_t pend_off;
	struct inflight *fl; /* fl[fl_head..fl_n) */
	size_t fl_head, fl_n, fl_cap;
	redisReply **ready; /* replies read ahead (a redirect in a pipeline) */
	size_t ready_head, ready_n;
	bool episode;		/* a redirect was logged; INFO when served again */
	bool asked;		/* an ASK was logged on this connection */
	int64_t route_deadline; /* bounds one routing (every seed, sentinel, node) */
	int slot_pin;		/* without route_key: the slot a MOVED led to, or -1 */
	unsigned epoch;		/* sentinel mode: sentinel_epoch when last routed */
	bool routing;		/* inside redis_route(): its own commands never re-route */
	char addr[300];
	char err[512];
	int fd;
	SSL *ssl;
	redisReader *reader;
	size_t fed; /* bytes fed to the reader since its last complete reply */
	struct buf out;
	struct redis_guard guard; /* max 0: off */
	bool tripped;
	char first[REDIS_GUARD_FIRST_MAX + 1]; /* the refused reply's (redis_guard_first) */
};

/* ---- redis.c ------------------------------------------------------------- */

/* Records "redis <addr>: <message>" as the error, keeping the connection. */
void redis_set_err(struct redis *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Transport failure: record why and drop the connection. */
void redis_fail(struct redis *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The next reply on the wire: 1 (in *out), 0 when soft and none arrived
 * by the deadline, -1 on a transport/protocol error (connection closed). */
int redis_read_one(struct redis *r, int64_t deadline, bool soft, redisReply **out);
/* Keeps a copy of the command cmd[0..len) sent (tries: its resends so
 * far) until its reply is read: 0, or -1 past REDIS_OUT_MAX. */
int redis_fl_push(struct redis *r, const char *cmd, size_t len, int tries);
/* The command at the head of the in-flight queue got its reply: forgets it. */
void redis_fl_pop(struct redis *r);
/* A copy of n bytes (commands may hold NUL bytes). */
char *redis_memdup(const char *p, size_t n);
/* A helper connection with the data nodes' credentials (or the sentinels'). */
struct redis *redis_aux_new(const struct redis *r, const char *host, const char *port,
			    bool sentinel);
/* Frees h, an array of n hosts, with their strings. */
void redis_hosts_free(struct redis_host *h, size_t n);
/* "host:port" into dst (n bytes), an IPv6 host in brackets. */
void redis_hostport(char *dst, size_t n, const char *host, const char *port);
/* Frees rep: 0 unless it is missing or an error, which fails r with
 * "<what>: <error>". */
int redis_reply_not_error(struct redis *r, redisReply *rep, const char *what);
/* Connects to host:port (TCP, TLS, AUTH, SELECT), closing any connection. */
int redis_node_connect(struct redis *r, const char *host, const char *port);
/* Routes r and connects it: a helper connection to its own node, sentinel
 * mode through the sentinels, else through the seeds (hint_host:hint_port
 * first when set). The routing's own commands are neither tracked, guarded
 * nor routed; dead seeds or sentinels cost at most three connect timeouts
 * in all. 0, or -1 with the connection closed and r->err saying why. */
int redis_route(struct redis *r, const char *hint_host, const char *hint_port);

/* ---- redis_cluster.c ----------------------------------------------------- */

/* What a reply says of its command: RD_NONE (no redirect: it ran), RD_MOVED,
 * RD_ASK, RD_WAIT (TRYAGAIN, CLUSTERDOWN, LOADING, MASTERDOWN: resent after
 * a backoff) or RD_REROUTE (READONLY, UNBLOCKED: resent after routing). */
enum { RD_NONE, RD_MOVED, RD_ASK, RD_WAIT, RD_REROUTE };
/* The kind of rep: RD_NONE unless it is an error reply saying that its
 * command did not run here. */
int redis_redirect_kind(const redisReply *rep);
/*
 * *rep, the reply to the command at the head of the in-flight queue, is a
 * redirect. Returns 1 with *rep the final reply of that command (the
 * replies of the rest of the pipeline read ahead into r->ready), 2 when
 * the command was resent on this connection and its reply is still to be
 * read (soft, one command in flight), -1 on a transport error.
 */
int redis_redirect(struct redis *r, redisReply **rep, bool soft, int64_t deadline);
/* A command was served: the INFO line ending a redirect episode, if any. */
void redis_served_again(struct redis *r);
/* Seeds (hint first, then the URI's, then the last slot map's): the first
 * that accepts tells the mode; on a cluster, the slot's master. */
int redis_route_seeds(struct redis *r, const char *hint_host, const char *hint_port);

/* ---- redis_sentinel.c ---------------------------------------------------- */

/* The master through the sentinels, confirmed with ROLE. */
int redis_route_sentinel(struct redis *r);
/* Whether the sentinels switched r's master since r was routed. */
bool redis_sentinel_switched(const struct redis *r);
/* Before a command on a connection with nothing in flight: a master the
 * sentinels replaced is left for the new one. On failure the connection
 * is closed (the caller's append fails and it reconnects). */
void redis_sentinel_follow(struct redis *r);

/* ---- redis_uri.c --------------------------------------------------------- */

/* Whether p[0..n) is a port: digits, 1 to 65535. */
int redis_valid_port(const char *p, size_t n);
/* Whether s[0..n) may be a host that a server names (a slot map, a
 * redirect, a sentinel): 1 to 255 bytes of printable ASCII, none of them a
 * space, '/', '@' or ','. */
bool redis_valid_host(const char *s, size_t n);

#endif
