/*
 * Cluster mode of the Redis client: hash slots, the slot map (CLUSTER
 * SHARDS, else CLUSTER SLOTS), routing through the seeds to the master of
 * the connection's slot; and the redirects of every mode, a reply saying a
 * command did not run (MOVED, ASK, TRYAGAIN, CLUSTERDOWN, LOADING,
 * MASTERDOWN, READONLY, UNBLOCKED), on which the command is resent.
 */
#include "io/redis.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/duration.h"
#include "base/log.h"
#include "base/util.h"
#include "io/redis_internal.h"

/* ---- cluster slots -------------------------------------------------------- */

static uint16_t crc16_xmodem(const char *p, size_t n)
{
	uint16_t crc = 0;
	for (size_t i = 0; i < n; i++) {
		crc ^= (uint16_t)((unsigned char)p[i] << 8);
		for (int k = 0; k < 8; k++)
			crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021)
					     : (uint16_t)(crc << 1);
	}
	return crc;
}

bool redis_hash_tag(const char *key, size_t len, size_t *off, size_t *taglen)
{
	const char *open = memchr(key, '{', len);
	if (!open)
		return false;
	size_t start = (size_t)(open - key) + 1;
	const char *close = memchr(key + start, '}', len - start);
	if (!close || close == key + start)
		return false;
	*off = start;
	*taglen = (size_t)(close - (key + start));
	return true;
}

unsigned redis_key_slot(const char *key, size_t len)
{
	size_t off = 0, n = len;
	if (!redis_hash_tag(key, len, &off, &n))
		off = 0, n = len;
	return crc16_xmodem(key + off, n) & 16383u;
}

static bool rstr(const redisReply *e, const char *want)
{
	return e && (e->type == REDIS_REPLY_STRING || e->type == REDIS_REPLY_STATUS) &&
	       strcmp(e->str, want) == 0;
}

/* A port: an integer or a string of digits. */
static bool rport(const redisReply *e, char out[8])
{
	if (e->type == REDIS_REPLY_INTEGER && e->integer >= 1 && e->integer <= 65535) {
		snprintf_(out, 8, "%lld", (long long)e->integer);
		return true;
	}
	if (e->type == REDIS_REPLY_STRING && redis_valid_port(e->str, e->len)) {
		snprintf_(out, 8, "%s", e->str);
		return true;
	}
	return false;
}

static void map_add(struct redis_slotmap *m, const char *host, const char *port)
{
	if (m->nnodes >= REDIS_NODES_MAX)
		return;
	for (size_t i = 0; i < m->nnodes; i++)
		if (strcmp(m->nodes[i].host, host) == 0 && strcmp(m->nodes[i].port, port) == 0)
			return;
	if (!m->nodes)
		m->nodes = xcalloc(REDIS_NODES_MAX, sizeof *m->nodes);
	m->nodes[m->nnodes].host = xstrdup(host);
	m->nodes[m->nnodes].port = xstrdup(port);
	m->nnodes++;
}

static void map_owner(struct redis_slotmap *m, const char *host, const char *port)
{
	free(m->owner.host);
	free(m->owner.port);
	m->owner.host = xstrdup(host);
	m->owner.port = xstrdup(port);
}

/* The host of a node: the endpoint, else the ip, an empty one the node
 * asked. false when unknown or not a host name. */
static bool node_host(const redisReply *e, const char *self_host, char out[256])
{
	if (!e || e->type != REDIS_REPLY_STRING)
		return false;
	if (e->len == 0) {
		snprintf_(out, 256, "%s", self_host ? self_host : "");
		return out[0] != '\0';
	}
	if (!redis_valid_host(e->str, e->len) || strcmp(e->str, "?") == 0)
		return false;
	snprintf_(out, 256, "%s", e->str);
	return true;
}

#define MAP_FIELDS_MAX 64 /* fields of a shard or node map */

/* One shard of CLUSTER SHARDS: 0, or -1 with why. */
static int parse_shard(const redisReply *sh, size_t idx, unsigned slot, bool tls,
		       const char *self_host, struct redis_slotmap *m, int *best, char **why)
{
	if (sh->type != REDIS_REPLY_ARRAY || sh->elements % 2 || sh->elements > MAP_FIELDS_MAX) {
		*why = xasprintf("shard %zu is not a map", idx + 1);
		return -1;
	}
	const redisReply *slots = NULL, *nodes = NULL;
	for (size_t i = 0; i < sh->elements; i += 2) {
		if (rstr(sh->element[i], "slots"))
			slots = sh->element[i + 1];
		else if (rstr(sh->element[i], "nodes"))
			nodes = sh->element[i + 1];
	}
	if (!slots || slots->type != REDIS_REPLY_ARRAY || slots->elements % 2 ||
	    slots->elements > 2 * 16384) {
		*why = xasprintf("shard %zu has no valid slots", idx + 1);
		return -1;
	}
	if (!nodes || nodes->type != REDIS_REPLY_ARRAY || nodes->elements > MAP_FIELDS_MAX) {
		*why = xasprintf("shard %zu has no valid nodes", idx + 1);
		return -1;
	}
	bool owns = false;
	for (size_t i = 0; i < slots->elements; i += 2) {
		const redisReply *a = slots->element[i], *b = slots->element[i + 1];
		if (a->type != REDIS_REPLY_INTEGER || b->type != REDIS_REPLY_INTEGER ||
		    a->integer < 0 || b->integer > 16383 || a->integer > b->integer) {
			*why = xasprintf("shard %zu has an invalid slot range", idx + 1);
			return -1;
		}
		if ((long long)slot >= a->integer && (long long)slot <= b->integer)
			owns = true;
	}
	for (size_t k = 0; k < nodes->elements; k++) {
		const redisReply *n = nodes->element[k];
		if (n->type != REDIS_REPLY_ARRAY || n->elements % 2 ||
		    n->elements > MAP_FIELDS_MAX) {
			*why = xasprintf("shard %zu: node %zu is not a map", idx + 1, k + 1);
			return -1;
		}
		const redisReply *ip = NULL, *endpoint = NULL, *port = NULL, *tport = NULL,
				 *role = NULL, *health = NULL;
		for (size_t i = 0; i < n->elements; i += 2) {
			const redisReply *key = n->element[i], *v = n->element[i + 1];
			if (rstr(key, "ip"))
				ip = v;
			else if (rstr(key, "endpoint"))
				endpoint = v;
			else if (rstr(key, "port"))
				port = v;
			else if (rstr(key, "tls-port"))
				tport = v;
			else if (rstr(key, "role"))
				role = v;
			else if (rstr(key, "health"))
				health = v;
		}
		char host[256], p[8];
		/* The endpoint (what clients are told), else the ip. */
		const redisReply *addr =
			endpoint && endpoint->type == REDIS_REPLY_STRING && endpoint->len ? endpoint
											  : ip;
		if (!node_host(addr, self_host, host))
			continue; /* an unknown address: not usable */
		if (!((tls && tport && rport(tport, p)) || (port && rport(port, p))))
			continue;
		map_add(m, host, p);
		if (owns && rstr(role, "master")) {
			int score = rstr(health, "online") ? 2 : 1;
			if (score > *best) {
				*best = score;
				map_owner(m, host, p);
			}
		}
	}
	return 0;
}

/* One range of CLUSTER SLOTS: [start, end, master, replicas...]. */
static int parse_range(const redisReply *e, size_t idx, unsigned slot, const char *self_host,
		       struct redis_slotmap *m, int *best, char **why)
{
	if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->elements > MAP_FIELDS_MAX ||
	    e->element[0]->type != REDIS_REPLY_INTEGER ||
	    e->element[1]->type != REDIS_REPLY_INTEGER || e->element[0]->integer < 0 ||
	    e->element[1]->integer > 16383 || e->element[0]->integer > e->element[1]->integer) {
		*why = xasprintf("entry %zu is not a slot range", idx + 1);
		return -1;
	}
	bool owns = (long long)slot >= e->element[0]->integer &&
		    (long long)slot <= e->element[1]->integer;
	for (size_t k = 2; k < e->elements; k++) {
		const redisReply *n = e->element[k];
		char host[256], p[8];
		if (n->type != REDIS_REPLY_ARRAY || n->elements < 2 || !rport(n->element[1], p)) {
			*why = xasprintf("entry %zu: node %zu is not [host, port, ...]", idx + 1,
					 k - 1);
			return -1;
		}
		if (!node_host(n->element[0], self_host, host))
			continue;
		map_add(m, host, p);
		if (k == 2 && owns && *best == 0) {
			*best = 2;
			map_owner(m, host, p);
		}
	}
	return 0;
}

void redis_slotmap_free(struct redis_slotmap *m)
{
	free(m->owner.host);
	free(m->owner.port);
	redis_hosts_free(m->nodes, m->nnodes);
	memset(m, 0, sizeof *m);
}

int redis_slotmap_parse(const redisReply *rep, bool shards, unsigned slot, bool tls,
			const char *self_host, struct redis_slotmap *m, char **why)
{
	memset(m, 0, sizeof *m);
	*why = NULL;
	const char *what = shards ? "CLUSTER SHARDS" : "CLUSTER SLOTS";
	char *inner = NULL;
	int best = 0;
	if (!rep || rep->type != REDIS_REPLY_ARRAY) {
		inner = xstrdup("not an array");
	} else if (rep->elements > REDIS_SHARDS_MAX) {
		inner = xasprintf("more than %d entries", REDIS_SHARDS_MAX);
	} else {
		for (size_t i = 0; i < rep->elements && !inner; i++) {
			if (shards)
				parse_shard(rep->element[i], i, slot, tls, self_host, m, &best,
					    &inner);
			else
				parse_range(rep->element[i], i, slot, self_host, m, &best, &inner);
		}
	}
	if (inner) {
		*why = xasprintf("malformed %s reply: %s", what, inner);
		free(inner);
		redis_slotmap_free(m);
		return -1;
	}
	if (!m->owner.host) {
		*why = xasprintf("slot %u is served by no master in %s (is the cluster down?)",
				 slot, what);
		redis_slotmap_free(m);
		return -1;
	}
	return 0;
}

/* ---- routing through the seeds ------------------------------------------ */

/* On a cluster node: the slot map, the master of r->slot. 0 with *owner
 * (malloc'd), or -1 with the connection closed. */
static int cluster_owner(struct redis *r, struct redis_host *owner)
{
	bool shards = true;
	redisReply *rep = redis_command(r, "CLUSTER SHARDS");
	if (!rep)
		return -1;
	if (rep->type == REDIS_REPLY_ERROR) {
		/* Before Redis 7.0. */
		freeReplyObject(rep);
		shards = false;
		rep = redis_command(r, "CLUSTER SLOTS");
		if (!rep)
			return -1;
		if (rep->type == REDIS_REPLY_ERROR)
			return redis_reply_not_error(r, rep, "CLUSTER SLOTS failed");
	}
	struct redis_slotmap m;
	char *why = NULL;
	int rc = redis_slotmap_parse(rep, shards, r->slot, r->uri.tls, r->host, &m, &why);
	freeReplyObject(rep);
	if (rc < 0) {
		redis_fail(r, "%s", why);
		free(why);
		return -1;
	}
	redis_hosts_free(r->known, r->nknown);
	r->known = m.nodes;
	r->nknown = m.nnodes;
	*owner = m.owner;
	return 0;
}

static void add_cand(struct redis_host *c, size_t *n, size_t max, const char *host,
		     const char *port)
{
	if (!host || !port || *n >= max)
		return;
	for (size_t i = 0; i < *n; i++)
		if (strcmp(c[i].host, host) == 0 && strcmp(c[i].port, port) == 0)
			return;
	c[*n].host = xstrdup(host);
	c[*n].port = xstrdup(port);
	(*n)++;
}

int redis_route_seeds(struct redis *r, const char *hint_host, const char *hint_port)
{
	size_t max = 1 + REDIS_HOSTS_MAX + REDIS_NODES_MAX, nc = 0;
	struct redis_host *c = xcalloc(max, sizeof *c);
	add_cand(c, &nc, max, hint_host, hint_port);
	if (r->uri.nhosts == 0)
		add_cand(c, &nc, max, r->uri.host, r->uri.port);
	for (size_t i = 0; i < r->uri.nhosts; i++)
		add_cand(c, &nc, max, r->uri.hosts[i].host, r->uri.hosts[i].port);
	for (size_t i = 0; i < r->nknown; i++)
		add_cand(c, &nc, max, r->known[i].host, r->known[i].port);
	r->slot = r->uri.route_key   ? redis_key_slot(r->uri.route_key, strlen(r->uri.route_key))
		  : r->slot_pin >= 0 ? (unsigned)r->slot_pin
				     : 0;
	char lasterr[sizeof r->err] = "";
	int rc = -1;
	for (size_t i = 0; i < nc && rc < 0 && (i == 0 || now_mono_ns() < r->route_deadline); i++) {
		if (redis_node_connect(r, c[i].host, c[i].port) < 0) {
			snprintf_(lasterr, sizeof lasterr, "%s", r->err);
			continue;
		}
		redisReply *rep = redis_command(r, "INFO cluster");
		if (!rep) {
			snprintf_(lasterr, sizeof lasterr, "%s", r->err);
			continue;
		}
		/* An error (INFO refused by an ACL): standalone. */
		bool cluster = rep->type == REDIS_REPLY_STRING && rep->str &&
			       strstr(rep->str, "cluster_enabled:1");
		freeReplyObject(rep);
		if (!cluster) {
			r->mode = REDIS_MODE_STANDALONE;
			snprintf_(r->describe, sizeof r->describe, "standalone");
			rc = 0;
			break;
		}
		struct redis_host owner = {0};
		if (cluster_owner(r, &owner) < 0) {
			snprintf_(lasterr, sizeof lasterr, "%s", r->err);
			continue;
		}
		int ok = strcmp(owner.host, r->host) == 0 && strcmp(owner.port, r->port) == 0
				 ? 0
				 : redis_node_connect(r, owner.host, owner.port);
		free(owner.host);
		free(owner.port);
		if (ok < 0) {
			snprintf_(lasterr, sizeof lasterr, "%s", r->err);
			continue;
		}
		r->mode = REDIS_MODE_CLUSTER;
		char hp[300];
		redis_hostport(hp, sizeof hp, r->host, r->port);
		snprintf_(r->describe, sizeof r->describe, "cluster, slot %u on %s", r->slot, hp);
		rc = 0;
	}
	redis_hosts_free(c, nc);
	if (rc < 0)
		snprintf_(r->err, sizeof r->err, "%s",
			  lasterr[0] ? lasterr : "no host to connect to");
	return rc;
}

/* ---- redirects (cluster and sentinel mode) ------------------------------ */

static bool err_word(const char *s, const char *w)
{
	size_t n = strlen(w);
	return strncmp(s, w, n) == 0 && (s[n] == ' ' || s[n] == '\0');
}

int redis_redirect_kind(const redisReply *rep)
{
	if (!rep || rep->type != REDIS_REPLY_ERROR || !rep->str)
		return RD_NONE;
	const char *s = rep->str;
	if (err_word(s, "MOVED"))
		return RD_MOVED;
	if (err_word(s, "ASK"))
		return RD_ASK;
	if (err_word(s, "TRYAGAIN") || err_word(s, "CLUSTERDOWN") || err_word(s, "LOADING") ||
	    err_word(s, "MASTERDOWN"))
		return RD_WAIT;
	if (err_word(s, "READONLY") || err_word(s, "UNBLOCKED"))
		return RD_REROUTE;
	return RD_NONE;
}

/* "MOVED <slot> <host>:<port>" / "ASK ...": the slot and the node (an
 * empty host is the node that answered). */
static bool redirect_target(const struct redis *r, const char *s, unsigned *slot, char *host,
			    char *port)
{
	const char *sp = strchr(s, ' ');
	if (!sp)
		return false;
	char *end;
	errno = 0;
	unsigned long v = strtoul(sp + 1, &end, 10);
	if (end == sp + 1 || *end != ' ' || v > 16383 || errno)
		return false;
	*slot = (unsigned)v;
	const char *a = end + 1;
	const char *colon = strrchr(a, ':');
	if (!colon || !redis_valid_port(colon + 1, strlen(colon + 1)))
		return false;
	size_t hl = (size_t)(colon - a);
	if (hl == 0) {
		snprintf_(host, 256, "%s", r->host);
	} else {
		if (a[0] == '[' && hl > 2 && a[hl - 1] == ']') {
			a++;
			hl -= 2;
		}
		if (!redis_valid_host(a, hl))
			return false;
		snprintf_(host, 256, "%.*s", (int)hl, a);
	}
	snprintf_(port, 8, "%s", colon + 1);
	return true;
}

/* Whether a MOVED for slot moves this connection: the slot is its own, or
 * it has no route_key and follows the keys it is sent (then it pins the
 * slot for the next routing). Otherwise one command is served elsewhere. */
static bool follows(struct redis *r, unsigned slot)
{
	if (r->mode != REDIS_MODE_CLUSTER || slot == r->slot)
		return true;
	if (r->uri.route_key)
		return false;
	r->slot_pin = (int)slot;
	return true;
}

static bool same_node(const struct redis_host *h, const char *host, const char *port)
{
	return strcmp(h->host, host) == 0 && strcmp(h->port, port) == 0;
}

/* Whether host:port is a node of the cluster as Relay knows it: the node
 * connected to, a seed of the URI, or a node of the last slot map. */
static bool known_node(const struct redis *r, const char *host, const char *port)
{
	if (strcmp(r->host, host) == 0 && strcmp(r->port, port) == 0)
		return true;
	struct redis_host first = {.host = r->uri.host, .port = r->uri.port};
	if (r->uri.nhosts == 0 && same_node(&first, host, port))
		return true;
	for (size_t i = 0; i < r->uri.nhosts; i++)
		if (same_node(&r->uri.hosts[i], host, port))
			return true;
	for (size_t i = 0; i < r->nknown; i++)
		if (same_node(&r->known[i], host, port))
			return true;
	return false;
}

/* Whether a MOVED or ASK to host:port may be followed, which sends the
 * credentials there: 1 for a known node (after the slot map is read again
 * through the seeds, when it was not: a node that joined since), 0 when
 * refused (logged; outside cluster mode always), -1 when reading the map
 * again failed (the connection is closed, r->err says why). */
static int redirect_allowed(struct redis *r, const char *host, const char *port)
{
	if (r->mode == REDIS_MODE_CLUSTER && known_node(r, host, port))
		return 1;
	if (r->mode == REDIS_MODE_CLUSTER) {
		if (redis_route(r, NULL, NULL) < 0)
			return -1;
		if (r->mode == REDIS_MODE_CLUSTER && known_node(r, host, port))
			return 1;
	}
	char to[300];
	snprintf_(to, sizeof to, "%s%s%s:%s", strchr(host, ':') ? "[" : "", host,
		  strchr(host, ':') ? "]" : "", port);
	log_warn(LOG_ATTRS("addr", r->addr, "to", to),
		 "redis redirect to a node outside the cluster refused: not a seed of REDIS_URI "
		 "nor a node of the cluster's slot map");
	return 0;
}

static void sleep_until(int64_t ms, int64_t deadline)
{
	int64_t left = (deadline - now_mono_ns()) / NS_PER_MS;
	if (ms > left)
		ms = left;
	if (ms > 0)
		poll(NULL, 0, (int)ms);
}

/* Before resend number tries + 1 of a command the server could not run
 * yet (TRYAGAIN, CLUSTERDOWN, LOADING, MASTERDOWN): 100 ms doubling up to
 * 1 s, never past the deadline. */
static void wait_backoff(int tries, int64_t deadline)
{
	int64_t ms = 100;
	for (int i = 0; i < tries && ms < 1000; i++)
		ms *= 2;
	sleep_until(ms > 1000 ? 1000 : ms, deadline);
}

static void warn_redirect(struct redis *r, const char *from, const char *to, const char *why)
{
	if (r->episode)
		return;
	r->episode = true;
	char reason[160];
	snprintf_(reason, sizeof reason, "%s", why);
	log_warn(LOG_ATTRS("addr", from, "to", to, "reason", reason),
		 "redis command redirected; resending it");
}

void redis_served_again(struct redis *r)
{
	if (!r->episode)
		return;
	r->episode = false;
	log_info(LOG_ATTRS("addr", r->addr), "redis commands served again after a redirect");
}

/* Runs cmd once on a helper connection to host:port (after ASKING when
 * asking). 1 with its reply, or -1 (r->err says why). */
static int side_run(struct redis *r, const char *host, const char *port, bool asking,
		    const char *cmd, size_t len, int64_t deadline, redisReply **out)
{
	struct redis *a = redis_aux_new(r, host, port, false);
	int rc = -1;
	redisReply *ask = NULL;
	if (redis_connect(a) < 0)
		goto done;
	if (asking && redis_append(a, "ASKING") < 0)
		goto done;
	if (buf_append(&a->out, cmd, len) < 0) {
		redis_set_err(a, "pipeline larger than %u bytes", REDIS_OUT_MAX);
		goto done;
	}
	if (asking && redis_read_one(a, deadline, false, &ask) < 0)
		goto done;
	if (redis_read_one(a, deadline, false, out) < 0)
		goto done;
	rc = 1;
done:
	if (rc < 0)
		snprintf_(r->err, sizeof r->err, "%s", a->err);
	if (ask)
		freeReplyObject(ask);
	redis_free(a);
	return rc;
}

/* Acts on the redirect e (kind) of a command, then resends the command
 * (tries: its resends before this one): 1 with the new reply in *out, or
 * -1 on a transport error. Logs the episode's WARN. */
static int resend(struct redis *r, const redisReply *e, int kind, int tries, bool rerouted,
		  const char *cmd, size_t len, int64_t deadline, redisReply **out)
{
	char from[sizeof r->addr];
	snprintf_(from, sizeof from, "%s", r->addr);
	char host[256], port[8];
	unsigned slot;
	if (kind == RD_ASK || kind == RD_MOVED) {
		if (!redirect_target(r, e->str, &slot, host, port)) {
			/* Unreadable: the caller gets the error reply as it is. */
			*out = NULL;
			return 0;
		}
		int allowed = redirect_allowed(r, host, port);
		if (allowed <= 0) {
			/* Refused: the caller gets the error reply as it is. */
			*out = NULL;
			return allowed;
		}
		if (kind == RD_MOVED && strcmp(host, r->host) == 0 && strcmp(port, r->port) == 0 &&
		    r->fd >= 0) {
			/* Already there (a pipeline's later command). */
			kind = RD_WAIT;
			tries = -1;
		} else if (kind == RD_ASK || !follows(r, slot)) {
			/* Another slot than the connection's, or a slot in
			 * migration: that node serves this one command. */
			char to[300];
			snprintf_(to, sizeof to, "%s:%s", host, port);
			if (kind == RD_MOVED) {
				warn_redirect(r, from, to, e->str);
			} else if (!r->asked) {
				/* Once per connection: a migration asks often. */
				r->asked = true;
				char reason[160];
				snprintf_(reason, sizeof reason, "%s", e->str);
				log_warn(LOG_ATTRS("addr", from, "to", to, "reason", reason),
					 "redis slot migrating: commands for the keys already "
					 "moved go to the target node (ASKING)");
			}
			if (side_run(r, host, port, kind == RD_ASK, cmd, len, deadline, out) < 0) {
				char why[sizeof r->err];
				snprintf_(why, sizeof why, "%s", r->err);
				redis_disconnect(r);
				snprintf_(r->err, sizeof r->err, "%s", why);
				return -1;
			}
			return 1;
		}
	}
	if (kind == RD_WAIT && tries >= 0) {
		wait_backoff(tries, deadline);
		warn_redirect(r, from, from, e->str);
	} else if (kind == RD_REROUTE && rerouted) {
		/* This episode found the master already. */
	} else if (kind != RD_WAIT) {
		char why[200];
		snprintf_(why, sizeof why, "%s", e->str);
		if (redis_route(r, kind == RD_MOVED ? host : NULL, kind == RD_MOVED ? port : NULL) <
		    0)
			return -1;
		warn_redirect(r, from, r->addr, why);
	}
	if (buf_append(&r->out, cmd, len) < 0) {
		redis_fail(r, "pipeline larger than %u bytes", REDIS_OUT_MAX);
		return -1;
	}
	return redis_read_one(r, deadline, false, out);
}

/* The deadline of the resends: a soft read's own, and at least the command
 * timeout from now. */
static int64_t resend_deadline(const struct redis *r, bool soft, int64_t deadline)
{
	if (!soft)
		return deadline;
	int64_t d = now_mono_ns() + (int64_t)r->opts.command_timeout_ms * NS_PER_MS;
	return d > deadline ? d : deadline;
}

/* A blocking read, alone in flight, got the redirect *rep (kind; host:port
 * the target of a MOVED, "" otherwise): it is resent on this connection,
 * after a backoff or a routing, to go on waiting softly. 2 when resent, 1
 * with *rep for the caller (resent too often, or a MOVED refused), -1 on a
 * transport error. */
static int resend_blocking(struct redis *r, redisReply **rep, int kind, const char *host,
			   const char *port, int64_t hard)
{
	struct inflight f = r->fl[r->fl_head];
	if (f.tries >= REDIS_REDIRECTS_MAX) {
		redis_fl_pop(r);
		return 1;
	}
	char *cmd = redis_memdup(r->pend.data + r->pend_off, f.len);
	char from[sizeof r->addr];
	snprintf_(from, sizeof from, "%s", r->addr);
	if (host[0]) {
		/* A MOVED: to a node the cluster has, or the caller gets
		 * it. Reading the map again reconnects (nothing in flight
		 * then: the command is in cmd). */
		int allowed = redirect_allowed(r, host, port);
		if (allowed <= 0) {
			if (r->fl_head < r->fl_n)
				redis_fl_pop(r);
			free(cmd);
			if (allowed == 0)
				return 1;
			freeReplyObject(*rep);
			*rep = NULL;
			return -1;
		}
	}
	int rc = 0;
	if (kind == RD_WAIT) {
		wait_backoff(f.tries, hard);
		warn_redirect(r, from, from, (*rep)->str);
		redis_fl_pop(r);
	} else {
		char why[200];
		snprintf_(why, sizeof why, "%s", (*rep)->str);
		rc = redis_route(r, host[0] ? host : NULL, host[0] ? port : NULL);
		if (rc == 0)
			warn_redirect(r, from, r->addr, why);
	}
	if (rc == 0 && (buf_append(&r->out, cmd, f.len) < 0 ||
			redis_fl_push(r, cmd, f.len, f.tries + 1) < 0)) {
		redis_fail(r, "pipeline larger than %u bytes", REDIS_OUT_MAX);
		rc = -1;
	}
	free(cmd);
	freeReplyObject(*rep);
	*rep = NULL;
	return rc < 0 ? -1 : 2;
}

/* A command of a redirected pipeline, until it has its answer. */
struct redo {
	char *cmd;
	size_t len;
	int tries;
	redisReply *rep; /* the answer, NULL until there is one */
	redisReply *err; /* the last redirect */
};

/* Copies of the n commands in flight; *rep, the first one's redirect, is
 * taken as its err. */
static struct redo *redo_take(struct redis *r, size_t n, redisReply **rep)
{
	struct redo *it = xcalloc(n, sizeof *it);
	size_t off = r->pend_off;
	for (size_t i = 0; i < n; i++) {
		struct inflight f = r->fl[r->fl_head + i];
		it[i].cmd = redis_memdup(r->pend.data + off, f.len);
		it[i].len = f.len;
		it[i].tries = f.tries;
		off += f.len;
	}
	it[0].err = *rep;
	*rep = NULL;
	return it;
}

/* The old connection's replies to the rest of the pipeline, it[1..n): those
 * that ran stay. Then nothing is in flight. 0, or -1 on a transport error. */
static int redo_read_rest(struct redis *r, struct redo *it, size_t n, int64_t hard)
{
	for (size_t i = 1; i < n; i++) {
		redisReply *x = NULL;
		if (redis_read_one(r, hard, false, &x) < 0)
			return -1;
		if (redis_redirect_kind(x) != RD_NONE)
			it[i].err = x;
		else
			it[i].rep = x;
	}
	buf_reset(&r->pend);
	r->pend_off = 0;
	r->fl_head = r->fl_n = 0;
	return 0;
}

/* Resends it until it has an answer (its last redirect once it has been
 * resent REDIS_REDIRECTS_MAX times, or past hard, or when the redirect is
 * refused): 0, or -1 on a transport error. *rerouted: a READONLY or
 * UNBLOCKED of this pipeline re-routed already; *served: a resend was
 * answered. */
static int redo_one(struct redis *r, struct redo *it, int64_t hard, bool *rerouted, bool *served)
{
	while (!it->rep) {
		int k = redis_redirect_kind(it->err);
		redisReply *x = NULL;
		int s = 0;
		if (it->tries < REDIS_REDIRECTS_MAX && now_mono_ns() < hard)
			s = resend(r, it->err, k, it->tries, *rerouted, it->cmd, it->len, hard, &x);
		if (k == RD_REROUTE && s > 0)
			*rerouted = true;
		if (s < 0)
			return -1;
		if (s == 0) { /* give up: the caller gets the error */
			it->rep = it->err;
			it->err = NULL;
			break;
		}
		it->tries++;
		if (redis_redirect_kind(x) != RD_NONE) {
			freeReplyObject(it->err);
			it->err = x;
		} else {
			it->rep = x;
			*served = true;
		}
	}
	return 0;
}

/* Each redirected command of it[0..n), in order, each answered before the
 * next: 0, or -1 on a transport error. */
static int redo_all(struct redis *r, struct redo *it, size_t n, int64_t hard)
{
	bool rerouted = false, served = false;
	for (size_t i = 0; i < n; i++)
		if (redo_one(r, &it[i], hard, &rerouted, &served) < 0)
			return -1;
	if (served)
		redis_served_again(r);
	return 0;
}

/* The answers: the first in *rep, the others read ahead into r->ready. */
static void redo_hand_out(struct redis *r, struct redo *it, size_t n, redisReply **rep)
{
	*rep = it[0].rep;
	it[0].rep = NULL;
	if (n == 1)
		return;
	r->ready = xcalloc(n - 1, sizeof *r->ready);
	for (size_t i = 1; i < n; i++) {
		r->ready[i - 1] = it[i].rep;
		it[i].rep = NULL;
	}
	r->ready_head = 0;
	r->ready_n = n - 1;
}

static void redo_free(struct redo *it, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(it[i].cmd);
		if (it[i].rep)
			freeReplyObject(it[i].rep);
		if (it[i].err)
			freeReplyObject(it[i].err);
	}
	free(it);
}

int redis_redirect(struct redis *r, redisReply **rep, bool soft, int64_t deadline)
{
	size_t n = r->fl_n - r->fl_head;
	int64_t hard = resend_deadline(r, soft, deadline);
	int kind = redis_redirect_kind(*rep);
	char host[256] = "", port[8] = "";
	unsigned slot = 0;
	bool movable = kind == RD_WAIT || kind == RD_REROUTE;
	if (kind == RD_MOVED && redirect_target(r, (*rep)->str, &slot, host, port))
		movable = follows(r, slot);
	if (n == 1 && soft && movable)
		return resend_blocking(r, rep, kind, host, port, hard);
	/* Otherwise (a pipeline, a read that is not soft, an ASK, a MOVED of
	 * another slot): each command resent in its turn. */
	struct redo *it = redo_take(r, n, rep);
	int rc = -1;
	if (redo_read_rest(r, it, n, hard) == 0 && redo_all(r, it, n, hard) == 0) {
		redo_hand_out(r, it, n, rep);
		rc = 1;
	}
	redo_free(it, n);
	if (rc < 0 && r->fd >= 0)
		redis_fail(r, "%s", "connection lost during a redirect");
	return rc;
}
