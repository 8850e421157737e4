/*
 * Liveness record: one live Relay process per consumer name.
 *
 * The consumer name is the hostname (README "Running"), and the
 * startup orphan sweep removes every execution container of this hostname
 * (runner.h). A second `relay start` under the same hostname (a second
 * terminal, an overlapping restart under a supervisor, two units on one
 * machine) would remove the first one's running containers and then
 * consume under the same name. This record makes that impossible:
 *
 *   key    relay:consumer:<keys_encode(stream)>:<pct(group)>:<pct(consumer)>
 *          (keys_encode, keys_pct_encode, invocation.h; like relay:invocation:*)
 *   value  "instance=<32 hex> pid=<pid> started=<RFC3339 UTC> machine=<id>"
 *          (liveness_record_encode): which process holds the name and where
 *   TTL    LIVENESS_TTL_MS, renewed every LIVENESS_REFRESH_MS by the
 *          holder's "liveness" thread
 *
 * Start-up (liveness_acquire, before the orphan sweep and before anything
 * with side effects): SET NX PX takes a free name at once. A name that is
 * held is watched (PTTL every LIVENESS_POLL_MS): a holder that renews its
 * record, or a new holder, is alive, and this process refuses with one
 * ERROR line naming the consumer, the holder's pid, start time and machine,
 * and how to run several workers on one host. A record that is not renewed
 * belongs to a process that is gone (kill -9, a power cut): it expires
 * within one TTL and this process takes it then (one WARN line once a
 * refresh interval passed without a renewal). Holding the record, this
 * process knows that every other instance with this consumer name is gone,
 * which is what lets the sweep remove their containers (relay.instance).
 *
 * Running: the liveness thread renews the record by compare-and-set (a
 * script that renews only the record holding this process's value), so a
 * process never renews or deletes another's record. A record found gone
 * (Redis restarted without persistence, flushed, or unreachable for longer
 * than the TTL) is taken again with SET NX and one WARN: nobody else holds
 * the name then. A record held by another instance means two processes
 * share the name: one ERROR line, liveness_lost() turns true and the
 * on_lost callback runs (once, on the liveness thread), after which the
 * caller stops consuming. Redis unreachable is not that: the thread keeps
 * trying every interval (one WARN per outage, one INFO on recovery).
 *
 * Stop: liveness_release stops the thread and deletes the record if it
 * still holds this process's value (compare-and-delete), so the next start
 * under this name takes it at once. A process that exits without it (a
 * second signal, kill -9) leaves the record to expire: the next start
 * waits at most one TTL.
 *
 * Scope: the key holds the stream and group, so Relays of other groups may
 * run under the same hostname; each one's sweep then leaves the others'
 * containers alone (relay.stream and relay.group labels, runner.h).
 *
 * Redis commands (inside EVAL/EVALSHA scripts on the one key): SET (NX PX),
 * GET, PTTL, PEXPIRE, DEL.
 *
 * Thread-safety: liveness_acquire and liveness_release are called by one
 * thread (relay start's main thread); liveness_lost may be called from any.
 */
#ifndef RELAY_LIVENESS_H
#define RELAY_LIVENESS_H

#include <stdbool.h>
#include <stddef.h>

#include "io/redis.h"

#define LIVENESS_TTL_MS 15000
#define LIVENESS_REFRESH_MS 2000
#define LIVENESS_POLL_MS 250
/* A record value longer than this is not one of ours. */
#define LIVENESS_VALUE_MAX 256

/* What a record says about its holder. */
struct liveness_record {
	char instance[33]; /* 32 lowercase hex digits */
	long long pid;
	char started[32]; /* RFC3339 UTC, whole seconds */
	char machine[33]; /* /etc/machine-id (at most 32 bytes), or "-" */
};

/* The record's key (malloc'd). */
char *liveness_key(const char *stream, const char *group, const char *consumer);
/* rec as the record's value into out (outsz >= LIVENESS_VALUE_MAX): 0, or
 * -1 when a field is not valid (an instance that is not 32 hex digits, a
 * started or machine with spaces or empty). */
int liveness_record_encode(const struct liveness_record *rec, char *out, size_t outsz);
/* Parses a value made by liveness_record_encode (fields after the four
 * known ones are ignored): 0, or -1 when s is not such a value. */
int liveness_record_parse(const char *s, struct liveness_record *out);

struct liveness_config {
	const struct redis_uri *uri; /* copied */
	const char *stream, *group, *consumer;
	const char *instance; /* runner_instance_id() */
	/* Called once, on the liveness thread, when another instance holds
	 * the record; may be NULL. */
	void (*on_lost)(void *ctx);
	void *ctx;
};

struct liveness;

/* Takes the record (waiting up to one TTL for a record nobody renews) and
 * starts the liveness thread. 0 with *out, or -1 after logging one ERROR
 * line (another live process holds the name, or Redis failed). */
int liveness_acquire(const struct liveness_config *cfg, struct liveness **out);
/* True once another instance was found holding the record. */
bool liveness_lost(const struct liveness *l);
/* Stops the thread, deletes the record if it is still this process's, and
 * frees l (NULL is fine). */
void liveness_release(struct liveness *l);

#endif
