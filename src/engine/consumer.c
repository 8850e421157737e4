/*
 * Stream consumer: the reclaim, retrier, sampler, prober, acker and worker
 * threads, the local buffer and the holds; the reader thread is
 * consumer_read.c's and what happens to one message delivery.c's. See consumer.h for the thread layout; the design notes
 * that matter when changing this file:
 *
 * - The buffer counts messages read (or reclaimed) and not yet released.
 *   A message is released when its ACK is confirmed, when it was
 *   dead-lettered and ACKed, or when it is left pending. The reader and the
 *   reclaim loop only ask Redis for as many messages as there is room for,
 *   so a full buffer leaves the backlog in Redis.
 * - How a message walks through: the reader (or the reclaim) copies it
 *   into a struct delivery_msg and queues it; a worker takes it and hands
 *   it to delivery_process (delivery.c: decode, resolve, state, slots,
 *   claim, invoke through cfg.invoke, retries, DLQ), which answers what to
 *   do with it (struct delivery_end): acknowledge it (ack_push: the acker
 *   batches the XACK and the DEL of its invocation state), release its
 *   buffer slot (dead-lettered, or left pending), or nothing yet (parked
 *   for a concurrency slot). A worker looks at the parked plans
 *   (delivery_take_locked) before it takes a new message, and every slot
 *   release wakes one (slot_released).
 * - A message that matches nothing is acknowledged by the reader itself,
 *   with the XACK pipelined ahead of its next read (matches_nothing).
 */
#include "engine/consumer.h"
#include "engine/consumer_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/duration.h"
#include "io/event.h"
#include "engine/invocation.h"
#include "engine/keyorder.h"
#include "engine/liveness.h"
#include "base/log.h"
#include "engine/metrics.h"
#include "base/rfc3339.h"
#include "engine/consumer_scripts.h"
#include "engine/delivery.h"
#include "engine/schedule.h"
#include "engine/slots.h"
#include "base/util.h"

/* ---- small helpers ----------------------------------------------------- */

void consumer_timed_wait(pthread_cond_t *cv, pthread_mutex_t *m, int64_t ns)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	int64_t t = (int64_t)ts.tv_sec * NS_PER_SEC + ts.tv_nsec + ns;
	ts.tv_sec = t / NS_PER_SEC;
	ts.tv_nsec = t % NS_PER_SEC;
	pthread_cond_timedwait(cv, m, &ts);
}

bool consumer_held_locked(struct consumer *c, const char *id)
{
	for (size_t i = 0; i < c->nheld; i++)
		if (strcmp(c->held[i], id) == 0)
			return true;
	return false;
}

/* Counts a message in the local buffer until release(); lock held. */
void consumer_hold_locked(struct consumer *c, const char *id)
{
	if (c->nheld == c->capheld) {
		c->capheld = c->capheld ? c->capheld * 2 : 32;
		c->held = xrealloc(c->held, c->capheld * sizeof *c->held);
	}
	c->held[c->nheld++] = xstrdup(id);
	c->buffered++;
}

/* Queues a message for the workers (takes ownership); lock held. */
void consumer_enqueue_locked(struct consumer *c, struct delivery_msg *m)
{
	consumer_hold_locked(c, m->id);
	m->next = NULL;
	if (c->tail)
		c->tail->next = m;
	else
		c->head = m;
	c->tail = m;
	metrics_gauge_set(METRIC_BUFFERED_EVENTS, c->buffered);
	pthread_cond_signal(&c->work);
}

/* Releases the buffer slots of n messages: one lock and one wake-up for a
 * whole ACK batch, so the reader is not woken (and the lock not contended)
 * once per message. */
void consumer_release_ids(struct consumer *c, const char *const *ids, size_t n)
{
	pthread_mutex_lock(&c->lock);
	for (size_t k = 0; k < n; k++) {
		for (size_t i = 0; i < c->nheld; i++) {
			if (strcmp(c->held[i], ids[k]) == 0) {
				free(c->held[i]);
				c->held[i] = c->held[--c->nheld];
				break;
			}
		}
		if (c->buffered > 0)
			c->buffered--;
	}
	metrics_gauge_set(METRIC_BUFFERED_EVENTS, c->buffered);
	pthread_cond_broadcast(&c->space);
	pthread_mutex_unlock(&c->lock);
}

/* Releases a message's buffer slot. */
static void release(struct consumer *c, const char *id)
{
	const char *ids[1] = {id};
	consumer_release_ids(c, ids, 1);
}

/* Whether a field is one Relay reads: the read scripts' WANTED (the
 * event, the replay fields relay dlq replay adds, copied into a DLQ
 * entry so that a replay count survives a second dead-lettering, and the
 * W3C trace context, trace.h). */
static bool field_wanted(const redisReply *f)
{
	static const char *const wanted[] = {"event", "relay_replays", "relay_replay_of",
					     "traceparent", "tracestate"};
	for (size_t i = 0; f->type == REDIS_REPLY_STRING && i < ARRAY_LEN(wanted); i++)
		if (f->len == strlen(wanted[i]) && memcmp(f->str, wanted[i], f->len) == 0)
			return true;
	return false;
}

/*
 * A message from one entry ({id, fields}) of an XREADGROUP reply or a read
 * script's answer, with only the fields Relay reads, in order, duplicates
 * too (at most 32 fields from a plain read, the guard's bound; a script has
 * already kept only the last of each), and in *cost what they cost
 * (CONSUMER_ENTRY_COST, as measure() counts it). NULL for a deleted entry
 * (nil fields) or one that is not an entry.
 */
struct delivery_msg *consumer_msg_from_entry(const redisReply *e, size_t *cost)
{
	if (e->type != REDIS_REPLY_ARRAY || e->elements < 2 ||
	    e->element[0]->type != REDIS_REPLY_STRING)
		return NULL;
	const redisReply *f = e->element[1];
	if (f->type != REDIS_REPLY_ARRAY)
		return NULL; /* a deleted entry (nil fields) */
	struct delivery_msg *m = xcalloc(1, sizeof *m);
	m->id = xstrndup(e->element[0]->str, e->element[0]->len);
	m->fields = xcalloc(f->elements + 1, sizeof *m->fields);
	m->lens = xcalloc(f->elements + 1, sizeof *m->lens);
	size_t bytes = 0;
	for (size_t i = 0; i + 1 < f->elements; i += 2) {
		if (!field_wanted(f->element[i]))
			continue;
		for (size_t k = i; k < i + 2; k++) {
			const redisReply *v = f->element[k];
			if (v->type == REDIS_REPLY_STRING || v->type == REDIS_REPLY_STATUS) {
				m->fields[m->nfields] = xstrndup(v->str, v->len);
				m->lens[m->nfields] = v->len;
				bytes += v->len;
			}
			m->nfields++;
		}
	}
	*cost = CONSUMER_ENTRY_COST(bytes, m->nfields);
	return m;
}

struct redis *consumer_conn_new(struct consumer *c, int command_timeout_ms)
{
	struct redis_opts o = {.connect_timeout_ms = 5000,
			       .command_timeout_ms = command_timeout_ms};
	return redis_new(&c->uri, &o);
}

/* Connected, or -1 when stopping. */
int consumer_ensure_conn(struct consumer *c, struct redis *r)
{
	if (redis_is_connected(r))
		return 0;
	return redis_connect_retry(r, &c->stop);
}

/* Queues XACK <stream> <group> <ids...> on r (the reply is read later).
 * Returns redis_append_argv's result. */
int consumer_append_xack(const struct consumer *c, struct redis *r, const char *const *ids, size_t n)
{
	const char **argv = xcalloc(n + 3, sizeof *argv);
	argv[0] = "XACK";
	argv[1] = c->stream;
	argv[2] = c->group;
	for (size_t i = 0; i < n; i++)
		argv[3 + i] = ids[i];
	int rc = redis_append_argv(r, (int)n + 3, argv, NULL);
	free(argv);
	return rc;
}

int consumer_ensure_group(struct redis *r, const char *stream, const char *group, char **err)
{
	redisReply *rep = redis_command(r, "XGROUP CREATE %s %s 0 MKSTREAM", stream, group);
	if (!rep) {
		*err = xstrdup(redis_errmsg(r));
		return -1;
	}
	int rc = 0;
	if (rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "BUSYGROUP", 9) != 0) {
		*err = xasprintf("XGROUP CREATE %s %s: %s", stream, group, rep->str);
		rc = -1;
	}
	freeReplyObject(rep);
	return rc;
}

/* At most room entries, and only as many as the byte budget holds at
 * CONSUMER_ENTRY_MAX each (at least one). */
int consumer_read_count(const struct consumer *c, int room)
{
	size_t fit = c->budget / CONSUMER_ENTRY_MAX;
	return fit < 1 ? 1 : fit < (size_t)room ? (int)fit : room;
}


void consumer_read_args_fill(int n, struct consumer_read_args *a)
{
	snprintf_(a->count, sizeof a->count, "%d", n);
	snprintf_(a->emax, sizeof a->emax, "%d", CONSUMER_ENTRY_MAX);
	rfc3339_format_utc(now_wall_ns(), a->ts);
}

/*
 * Entries a script dead-lettered as too large ({id, size, error}): each is
 * a message read and done with, never transferred. fresh: from a read of
 * new messages (counted as received).
 */
void consumer_report_too_large(struct consumer *c, const redisReply *big, bool fresh)
{
	for (size_t i = 0; big && i < big->elements; i++) {
		const redisReply *e = big->element[i];
		if (e->type != REDIS_REPLY_ARRAY || e->elements != 3 ||
		    e->element[0]->type != REDIS_REPLY_STRING ||
		    e->element[1]->type != REDIS_REPLY_INTEGER ||
		    e->element[2]->type != REDIS_REPLY_STRING)
			continue;
		const char *id = e->element[0]->str, *err = e->element[2]->str;
		char size[24], limit[24];
		snprintf_(size, sizeof size, "%lld", e->element[1]->integer);
		snprintf_(limit, sizeof limit, "%d", CONSUMER_ENTRY_MAX);
		if (fresh)
			metrics_inc(METRIC_EVENTS_RECEIVED);
		if (err[0]) {
			log_error(LOG_ATTRS("message_id", id, "size", size, "dlq", c->dlq, "error",
					    err),
				  "DLQ write failed for an event too large to read; the message "
				  "stays pending and the write is retried");
			continue;
		}
		log_warn(LOG_ATTRS("message_id", id, "size", size, "limit", limit, "dlq", c->dlq),
			 "event too large: sent to the dead-letter stream without reading it");
		metrics_inc(METRIC_DLQ_ENTRIES);
		metrics_inc(METRIC_EVENTS_PROCESSED);
	}
}

/* ---- holds ------------------------------------------------------------- */

static const char *const hold_start_msg[] = {
	"cannot reach the Docker daemon; not reading new events until it answers",
	"the functions directory cannot be read; not reading new events until it can",
};
static const char *const hold_end_msg[] = {
	"the Docker daemon answers again; reading resumes",
	"the functions directory can be read again; reading resumes",
};

void consumer_hold(struct consumer *c, unsigned hold, bool on)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->gate_lock);
	for (int i = 0; i < 2; i++) {
		unsigned bit = 1u << i;
		if (!(hold & bit) || !(c->hold & bit) == !on)
			continue;
		if (on) {
			c->hold |= bit;
			c->hold_since[i] = now_mono_ns();
			log_warn(NULL, "%s", hold_start_msg[i]);
		} else {
			c->hold &= ~bit;
			char d[DURATION_STR_MAX];
			duration_format((now_mono_ns() - c->hold_since[i]) / NS_PER_MS * NS_PER_MS,
					d);
			log_info(LOG_ATTRS("after", d), "%s", hold_end_msg[i]);
		}
	}
	pthread_cond_broadcast(&c->gate_cond);
	pthread_mutex_unlock(&c->gate_lock);
}

bool consumer_holding(struct consumer *c, unsigned mask)
{
	pthread_mutex_lock(&c->gate_lock);
	bool held = (c->hold & mask) != 0;
	pthread_mutex_unlock(&c->gate_lock);
	return held;
}

/* The reader's gate: returns once no hold is in force (or at stop). */
void consumer_gate_pass(struct consumer *c)
{
	pthread_mutex_lock(&c->gate_lock);
	while (c->hold && !atomic_load(&c->stop))
		consumer_timed_wait(&c->gate_cond, &c->gate_lock, 500 * NS_PER_MS);
	pthread_mutex_unlock(&c->gate_lock);
}

/*
 * The prober thread (with cfg.ready): asks cfg.ready every
 * CONSUMER_WATCH_NS, and every CONSUMER_PROBE_NS while CONSUMER_HOLD_DOCKER
 * is set. A "no" sets that hold (a hung daemon is found even when no
 * invocation runs into it), a "yes" lifts it. Each answer takes at most
 * the ping's own bound (DOCKER_OPEN_TIMEOUT_MS), outside every lock.
 */
static void *prober_main(void *arg)
{
	struct consumer *c = arg;
	while (!atomic_load(&c->stop)) {
		bool held = consumer_holding(c, CONSUMER_HOLD_DOCKER);
		pthread_mutex_lock(&c->gate_lock);
		if (!atomic_load(&c->stop))
			consumer_timed_wait(&c->gate_cond, &c->gate_lock,
				   held ? CONSUMER_PROBE_NS : CONSUMER_WATCH_NS);
		held = (c->hold & CONSUMER_HOLD_DOCKER) != 0;
		pthread_mutex_unlock(&c->gate_lock);
		if (atomic_load(&c->stop))
			break;
		bool ok = c->cfg.ready(c->cfg.invoke_ctx);
		if (ok == held)
			consumer_hold(c, CONSUMER_HOLD_DOCKER, !ok);
	}
	return NULL;
}

/* A worker whose invocation found the daemon unreachable: waits until the
 * reader's probe lifts CONSUMER_HOLD_DOCKER. False at stop. */
static bool docker_wait(struct consumer *c)
{
	pthread_mutex_lock(&c->gate_lock);
	while ((c->hold & CONSUMER_HOLD_DOCKER) && !atomic_load(&c->stop))
		consumer_timed_wait(&c->gate_cond, &c->gate_lock, 500 * NS_PER_MS);
	pthread_mutex_unlock(&c->gate_lock);
	return !atomic_load(&c->stop);
}

/*
 * Room for a retrier or reclaim batch of at most want, reserved from the
 * reader meanwhile: waits up to wait_ns for the buffer to have some.
 * Returns the room (0: none came); the caller gives the reservation back
 * with room_done once its batch is queued. As before the retrier, a read
 * already in flight is not counted: the buffer can exceed
 * MAX_BUFFERED_EVENTS by that read for a moment.
 */
static int room_reserve(struct consumer *c, int want, int64_t wait_ns)
{
	int64_t end = now_mono_ns() + wait_ns;
	pthread_mutex_lock(&c->lock);
	c->reserved += want;
	int room;
	while ((room = c->cfg.max_buffered - c->buffered) <= 0 &&
	       !atomic_load(&c->stop) && now_mono_ns() < end)
		consumer_timed_wait(&c->space, &c->lock, end - now_mono_ns());
	pthread_mutex_unlock(&c->lock);
	return room < 0 ? 0 : room > want ? want : room;
}

static void room_done(struct consumer *c, int want)
{
	pthread_mutex_lock(&c->lock);
	c->reserved -= want;
	pthread_cond_broadcast(&c->space);
	pthread_mutex_unlock(&c->lock);
}

/* ---- reclaim ----------------------------------------------------------- */

/*
 * Pending messages whose stream entry is gone (retention trimmed it, or an
 * XDEL): nothing can run them any more. The reclaim script finds them
 * (XRANGE of the id is empty) and lists them; they are acknowledged here
 * (XACK of an id no longer pending is a no-op). Their invocation state
 * goes with them, so nothing waits for its 7-day TTL, and no DLQ entry is
 * written: there is no payload left to dead-letter. One WARN per message.
 * gone: the script's array of their ids.
 */
void consumer_drop_gone(struct consumer *c, struct redis *r, const redisReply *gone)
{
	size_t n = 0;
	const char **ids = xcalloc(gone->elements + 1, sizeof *ids);
	const char **del = xcalloc(gone->elements + 1, sizeof *del);
	del[0] = "DEL";
	for (size_t i = 0; i < gone->elements; i++) {
		if (gone->element[i]->type != REDIS_REPLY_STRING)
			continue;
		const char *id = gone->element[i]->str;
		ids[n] = id;
		del[1 + n] = invocation_key(c->stream, c->group, id);
		n++;
		log_warn(LOG_ATTRS("stream", c->stream, "group", c->group, "message_id", id),
			 "pending message no longer in the stream (trimmed or deleted); dropped "
			 "without running or dead-lettering it");
	}
	int sent = 0;
	if (n > 0 && consumer_append_xack(c, r, ids, n) == 0) {
		sent++;
		if (redis_append_argv(r, (int)n + 1, del, NULL) == 0)
			sent++;
	}
	for (int i = 0; i < sent; i++) {
		redisReply *rep = redis_get_reply(r, -1);
		if (!rep)
			break;
		if (rep->type == REDIS_REPLY_ERROR)
			log_warn(LOG_ATTRS("error", rep->str),
				 "cannot clean up the dropped message(s)");
		freeReplyObject(rep);
	}
	for (size_t i = 0; i < n; i++)
		free((char *)del[1 + i]);
	free(del);
	free(ids);
}

/*
 * Queues the entries the reclaim script answered, except those this
 * process holds already; returns how many. Like the reader's, the copies are
 * made (and the duplicates freed) outside the consumer lock, which is taken
 * once to check and queue them: checking and queueing under one hold, so a
 * message is never queued twice.
 */
static int take_reclaimed(struct consumer *c, const redisReply *entries, bool due)
{
	size_t n = entries->elements, k = 0;
	struct delivery_msg **ms = xcalloc(n + 1, sizeof *ms);
	for (size_t i = 0; i < n; i++) {
		size_t cost;
		struct delivery_msg *m = consumer_msg_from_entry(entries->element[i], &cost);
		if (m) {
			m->retry_due = due;
			ms[k++] = m;
		}
	}
	int claimed = 0;
	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < k; i++) {
		/* One held already is still ours and in progress here: the
		 * running marker protects it; no second local copy (freed below). */
		if (consumer_held_locked(c, ms[i]->id))
			continue;
		log_debug(LOG_ATTRS("message_id", ms[i]->id),
			  due ? "due retry claimed" : "message reclaimed");
		consumer_enqueue_locked(c, ms[i]);
		ms[i] = NULL;
		claimed++;
	}
	pthread_mutex_unlock(&c->lock);
	for (size_t i = 0; i < k; i++)
		delivery_msg_free(ms[i]);
	free(ms);
	return claimed;
}

/*
 * One reclaim pass: from where the last pass stopped, at most 100 calls of
 * the script (each looking at most at 10 x its batch of pending entries),
 * until the whole pending list was looked at. Each batch waits for buffer
 * room (reserved from the reader, so sustained traffic cannot starve it)
 * for at most a second; a pass that gets none stops and the next one goes
 * on from the cursor.
 */
static void consumers_prune(struct consumer *c, struct redis *r);

static void reclaim_once(struct consumer *c, struct redis *r)
{
	char idle[32];
	snprintf_(idle, sizeof idle, "%" PRId64, (int64_t)(c->cfg.min_pending_idle_ns / NS_PER_MS));
	for (int rounds = 0; rounds < 100 && !atomic_load(&c->stop); rounds++) {
		int want = consumer_read_count(c, c->cfg.max_buffered);
		int room = room_reserve(c, want, NS_PER_SEC);
		if (room <= 0) {
			room_done(c, want);
			log_debug(NULL, "reclaim paused: no buffer room within a second");
			return;
		}
		struct consumer_read_args a;
		consumer_read_args_fill(room, &a);
		const char *argv[] = {"3",	 c->stream, c->dlq,  c->retry_key, c->group,
				      c->name,	 a.count,   a.emax,  a.ts,	   idle,
				      c->reclaim_cursor};
		redisReply *rep = redis_script_run(r, consumer_scripts_reclaim(),
						   (int)ARRAY_LEN(argv), argv, NULL);
		if (!rep) {
			room_done(c, want);
			log_warn(LOG_ATTRS("error", redis_errmsg(r)), "reclaim failed");
			return;
		}
		if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 4 ||
		    rep->element[0]->type != REDIS_REPLY_STRING ||
		    rep->element[1]->type != REDIS_REPLY_ARRAY ||
		    rep->element[2]->type != REDIS_REPLY_ARRAY ||
		    rep->element[3]->type != REDIS_REPLY_ARRAY) {
			room_done(c, want);
			log_warn(LOG_ATTRS("error",
					   rep->type == REDIS_REPLY_ERROR
						   ? rep->str
						   : "unexpected reply to the reclaim script"),
				 "reclaim failed");
			freeReplyObject(rep);
			return;
		}
		snprintf_(c->reclaim_cursor, sizeof c->reclaim_cursor, "%.*s",
			  (int)rep->element[0]->len, rep->element[0]->str);
		int claimed = take_reclaimed(c, rep->element[1], false);
		room_done(c, want);
		consumer_report_too_large(c, rep->element[2], false);
		consumer_drop_gone(c, r, rep->element[3]);
		freeReplyObject(rep);
		if (claimed)
			log_debug(NULL, "reclaimed %d idle message(s)", claimed);
		if (strcmp(c->reclaim_cursor, "0-0") == 0)
			return;
	}
}

static void *reclaim_main(void *arg)
{
	struct consumer *c = arg;
	struct redis *r = consumer_conn_new(c, 10000);
	while (!atomic_load(&c->stop)) {
		sleep_ms_interruptible(c->cfg.reclaim_interval_ns / NS_PER_MS, &c->stop);
		if (atomic_load(&c->stop) || consumer_ensure_conn(c, r) < 0)
			break;
		if (consumer_holding(c, ~0u)) {
			log_debug(NULL, "reclaim skipped: reading is on hold");
		} else {
			reclaim_once(c, r);
			consumers_prune(c, r);
		}
	}
	redis_free(r);
	return NULL;
}

/* ---- consumers of gone workers ----------------------------------------- */

/*
 * Consumer names are host names (pod names under Kubernetes) and nothing
 * else deletes one, so the group's consumer list, which XPENDING and XINFO
 * walk, would grow forever. After each reclaim pass, a consumer other than
 * this one with no pending entry whose liveness record (liveness.h) is gone
 * is deleted, by a script that checks both again atomically: a consumer
 * that still owns entries, or whose worker is alive, is never deleted (a
 * worker that comes back under the name is created again by its first
 * read). At most CONSUMER_PRUNE_MAX a pass; one INFO line each.
 */
static const char prune_lua[] =
	"if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end\n"
	"local p = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])\n"
	"if #p > 0 then return 0 end\n"
	"return redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2]) >= 0 and 1 or 0\n";
static struct redis_script prune_script;
static pthread_once_t prune_once = PTHREAD_ONCE_INIT;

static void prune_init(void)
{
	redis_script_init(&prune_script, prune_lua);
}

/* The value after `key` in an XINFO CONSUMERS entry (a flat map), or NULL. */
static const redisReply *xinfo_field(const redisReply *e, const char *key)
{
	for (size_t i = 0; i + 1 < e->elements; i += 2)
		if (e->element[i]->type == REDIS_REPLY_STRING && strcmp(e->element[i]->str, key) == 0)
			return e->element[i + 1];
	return NULL;
}

static void consumers_prune(struct consumer *c, struct redis *r)
{
	pthread_once(&prune_once, prune_init);
	redisReply *rep = redis_command(r, "XINFO CONSUMERS %s %s", c->stream, c->group);
	if (!rep || rep->type != REDIS_REPLY_ARRAY) {
		freeReplyObject(rep);
		return;
	}
	int done = 0;
	for (size_t i = 0; i < rep->elements && done < CONSUMER_PRUNE_MAX; i++) {
		const redisReply *e = rep->element[i];
		if (e->type != REDIS_REPLY_ARRAY)
			continue;
		const redisReply *name = xinfo_field(e, "name"), *pend = xinfo_field(e, "pending");
		if (!name || name->type != REDIS_REPLY_STRING || !pend ||
		    pend->type != REDIS_REPLY_INTEGER || pend->integer != 0 ||
		    strcmp(name->str, c->name) == 0)
			continue;
		char *live = liveness_key(c->stream, c->group, name->str);
		const char *argv[] = {"2", c->stream, live, c->group, name->str};
		redisReply *d = redis_script_run(r, &prune_script, (int)ARRAY_LEN(argv), argv, NULL);
		if (d && d->type == REDIS_REPLY_INTEGER && d->integer == 1) {
			done++;
			metrics_inc(METRIC_CONSUMERS_DELETED);
			log_info(LOG_ATTRS("stream", c->stream, "group", c->group, "consumer",
					   name->str),
				 "deleted the consumer of a gone worker (no pending entry, no "
				 "liveness record)");
		}
		freeReplyObject(d);
		free(live);
	}
	freeReplyObject(rep);
}

/* ---- retrier -------------------------------------------------------------- */

static int64_t now_wall_ms(void)
{
	return now_wall_ns() / NS_PER_MS;
}

/* Wakes the retrier by due_ms (wall) at the latest. */
static void retry_wake_by(struct consumer *c, int64_t due_ms)
{
	pthread_mutex_lock(&c->lock);
	if (due_ms < c->retry_wake_ms) {
		c->retry_wake_ms = due_ms;
		pthread_cond_signal(&c->retry_cond);
	}
	pthread_mutex_unlock(&c->lock);
}

/* delivery_config.retry_scheduled: this worker recorded a retry due at
 * due_ms, so its retrier claims it then (another worker's may first). */
static void retry_scheduled(void *arg, int64_t due_ms)
{
	retry_wake_by(arg, due_ms);
}

/*
 * One call of the retry script: claims up to want due retries (0: only
 * learns when the next is due) and queues them. Returns the next due time
 * (wall ms; 0 when none waits), or -1 on an error; *looked is how many
 * members were due and looked at.
 */
static int64_t retry_once(struct consumer *c, struct redis *r, int want, int *looked)
{
	struct consumer_read_args a;
	consumer_read_args_fill(want, &a);
	const char *argv[] = {"5",	     c->stream,	      c->dlq, c->retry_key,
			      c->keys->lease, c->keys->held, c->group, c->name,
			      a.count,	     a.emax,	      a.ts};
	redisReply *rep =
		redis_script_run(r, consumer_scripts_retry(), (int)ARRAY_LEN(argv), argv, NULL);
	if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 5 ||
	    rep->element[0]->type != REDIS_REPLY_STRING ||
	    rep->element[1]->type != REDIS_REPLY_ARRAY ||
	    rep->element[2]->type != REDIS_REPLY_ARRAY ||
	    rep->element[3]->type != REDIS_REPLY_ARRAY ||
	    rep->element[4]->type != REDIS_REPLY_INTEGER) {
		log_warn(LOG_ATTRS("error", !rep ? redis_errmsg(r)
					    : rep->type == REDIS_REPLY_ERROR
						    ? rep->str
						    : "unexpected reply to the retry script"),
			 "retry claim failed");
		freeReplyObject(rep);
		return -1;
	}
	int claimed = take_reclaimed(c, rep->element[1], true);
	if (claimed)
		log_debug(NULL, "claimed %d due retry(ies)", claimed);
	consumer_report_too_large(c, rep->element[2], false);
	consumer_drop_gone(c, r, rep->element[3]);
	*looked = (int)rep->element[4]->integer;
	int64_t next = rep->element[0]->len ? strtoll(rep->element[0]->str, NULL, 10) : 0;
	freeReplyObject(rep);
	return next < 0 ? 0 : next;
}

/* Whether any function loaded has key_concurrency. */
static bool keyed(struct consumer *c)
{
	struct snapshot *snap = registry_acquire(c->cfg.registry);
	bool k = snap->nkeyed > 0;
	registry_release(c->cfg.registry, snap);
	return k;
}

/* Copies of the ids this process holds, under the lock once. */
static char **held_copy(struct consumer *c, size_t *n)
{
	pthread_mutex_lock(&c->lock);
	char **ids = xcalloc(c->nheld + 1, sizeof *ids);
	for (size_t i = 0; i < c->nheld; i++)
		ids[i] = xstrdup(c->held[i]);
	*n = c->nheld;
	pthread_mutex_unlock(&c->lock);
	return ids;
}

/*
 * The leases of this process's messages (keyorder.h): renewed (keep =
 * false), or at a stop given back so that another worker takes them at
 * once and in order (keep = true). Only while a function is keyed.
 */
static void leases(struct consumer *c, struct redis *r, bool keep)
{
	if (!keyed(c))
		return;
	size_t n;
	char **ids = held_copy(c, &n);
	if (n && (keep ? keyorder_keep : keyorder_renew)(c->keys, r, (const char *const *)ids, n) < 0)
		log_warn(LOG_ATTRS("error", redis_errmsg(r)),
			 keep ? "cannot hand the per-key places of unstarted messages over; "
				"they are taken over when their leases end"
			      : "cannot renew the per-key leases of running messages");
	for (size_t i = 0; i < n; i++)
		free(ids[i]);
	free(ids);
}

/*
 * The retrier: claims each retry of the retry index (invocation.h) when it
 * falls due, whoever scheduled it. It sleeps until the earliest due time
 * the index answered, CONSUMER_RETRY_POLL_MS at most (a retry another
 * worker schedules earlier is seen by then), or until this worker
 * schedules an earlier one (retry_scheduled). With a retry due it reserves
 * buffer room from the reader and waits for some, so sustained traffic
 * cannot hold retries back. Idle, it costs one small script call a poll,
 * whatever the number of waiting retries.
 */
static void *retrier_main(void *arg)
{
	struct consumer *c = arg;
	struct redis *r = consumer_conn_new(c, 10000);
	int64_t due = 0; /* the next due time the index answered; 0: none */
	int64_t renewed = 0;
	while (!atomic_load(&c->stop)) {
		pthread_mutex_lock(&c->lock);
		int64_t wake;
		while (!atomic_load(&c->stop) && (wake = c->retry_wake_ms) > now_wall_ms())
			consumer_timed_wait(&c->retry_cond, &c->lock, (wake - now_wall_ms()) * NS_PER_MS);
		c->retry_wake_ms = now_wall_ms() + CONSUMER_RETRY_POLL_MS;
		pthread_mutex_unlock(&c->lock);
		if (atomic_load(&c->stop) || consumer_ensure_conn(c, r) < 0)
			break;
		if (consumer_holding(c, ~0u))
			continue;
		int want = consumer_read_count(c, c->cfg.max_buffered), looked = 0;
		bool known_due = due > 0 && due <= now_wall_ms();
		int room = room_reserve(c, want, known_due ? NS_PER_SEC : 0);
		int64_t next = retry_once(c, r, room, &looked);
		room_done(c, want);
		if (now_mono_ns() - renewed >= CONSUMER_RETRY_POLL_MS * NS_PER_MS) {
			leases(c, r, false);
			renewed = now_mono_ns();
		}
		if (next < 0) {
			due = 0;
			continue; /* polled again in CONSUMER_RETRY_POLL_MS */
		}
		due = next;
		int64_t now = now_wall_ms();
		if (room > 0 && looked == room)
			retry_wake_by(c, now); /* maybe more due: at once */
		else if (next > 0)
			/* At least 100 ms on: a worker clock ahead of Redis's
			 * would otherwise spin on a retry not due by TIME. */
			retry_wake_by(c, next > now + 100 ? next : now + 100);
	}
	redis_free(r);
	return NULL;
}

/* ---- backlog sampler ------------------------------------------------------ */

/* pending_entries and pending_oldest_age_seconds, from the group's PEL:
 * XPENDING summary (count, smallest id); the age is now minus the smallest
 * pending id's millisecond time, i.e. how long the oldest unacknowledged
 * message has existed. Sampled, not per event. */
static void sample_backlog(struct consumer *c, struct redis *r)
{
	redisReply *rep = redis_command(r, "XPENDING %s %s", c->stream, c->group);
	if (!rep)
		return;
	if (rep->type == REDIS_REPLY_ARRAY && rep->elements >= 2 &&
	    rep->element[0]->type == REDIS_REPLY_INTEGER) {
		long long count = rep->element[0]->integer;
		double age = 0;
		if (count > 0 && rep->element[1]->type == REDIS_REPLY_STRING) {
			long long ms = strtoll(rep->element[1]->str, NULL, 10);
			double now_ms = (double)(now_wall_ns() / NS_PER_MS);
			if (ms > 0 && now_ms > (double)ms)
				age = (now_ms - (double)ms) / 1000.0;
		}
		metrics_gauge_set(METRIC_PENDING_ENTRIES, (double)count);
		metrics_gauge_set(METRIC_PENDING_OLDEST_AGE, age);
	}
	freeReplyObject(rep);
	/* Not the messages waiting for their key (scored +inf, keyorder.h). */
	rep = redis_command(r, "ZCOUNT %s -inf (+inf", c->retry_key);
	if (rep && rep->type == REDIS_REPLY_INTEGER)
		metrics_gauge_set(METRIC_RETRIES_SCHEDULED, (double)rep->integer);
	freeReplyObject(rep);
}

static void *sampler_main(void *arg)
{
	struct consumer *c = arg;
	struct redis *r = consumer_conn_new(c, 10000);
	while (!atomic_load(&c->stop)) {
		if (redis_is_connected(r) || redis_connect(r) == 0)
			sample_backlog(c, r);
		sleep_ms_interruptible(c->cfg.sample_interval_ns / NS_PER_MS, &c->stop);
	}
	redis_free(r);
	return NULL;
}

/* ---- acker ------------------------------------------------------------- */

static void ack_push(struct consumer *c, const char *id, const char *key, bool keyed)
{
	pthread_mutex_lock(&c->ack_lock);
	if (c->nacks == c->capacks) {
		c->capacks = c->capacks ? c->capacks * 2 : 64;
		c->acks = xrealloc(c->acks, c->capacks * sizeof *c->acks);
	}
	c->acks[c->nacks].id = xstrdup(id);
	c->acks[c->nacks].key = key ? xstrdup(key) : NULL;
	c->acks[c->nacks].keyed = keyed;
	c->nacks++;
	pthread_cond_signal(&c->ack_cond);
	pthread_mutex_unlock(&c->ack_lock);
}

/* The keyed ones of an ACK batch leave their per-key queues first
 * (keyorder.h), one script call for the batch; the messages that wake are
 * claimed by this worker's retrier at once. On a failure the leases end
 * them (their messages, acknowledged, are then no longer pending). */
static void release_keys(struct consumer *c, struct redis *r, const struct ack *batch, size_t n)
{
	const char **ids = xcalloc(n + 1, sizeof *ids);
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (batch[i].keyed)
			ids[k++] = batch[i].id;
	int woken = 0;
	if (k && ((!redis_is_connected(r) && redis_connect(r) < 0) ||
		  (woken = keyorder_release(c->keys, r, ids, k)) < 0))
		log_warn(LOG_ATTRS("error", redis_errmsg(r)),
			 "cannot release the per-key places of acknowledged messages; the next "
			 "messages of their keys run once their leases end");
	if (woken > 0)
		retry_wake_by(c, now_wall_ms());
	free(ids);
}

static void *acker_main(void *arg)
{
	struct consumer *c = arg;
	struct redis *r = consumer_conn_new(c, 10000);
	for (;;) {
		pthread_mutex_lock(&c->ack_lock);
		while (c->nacks == 0 && !c->ack_stop)
			consumer_timed_wait(&c->ack_cond, &c->ack_lock, 500 * NS_PER_MS);
		if (c->nacks == 0 && c->ack_stop) {
			pthread_mutex_unlock(&c->ack_lock);
			break;
		}
		struct ack *batch = c->acks;
		size_t n = c->nacks;
		c->acks = NULL;
		c->nacks = c->capacks = 0;
		pthread_mutex_unlock(&c->ack_lock);

		release_keys(c, r, batch, n);
		/* XACK <stream> <group> id... then DEL key...: one round trip. */
		const char **ids = xcalloc(n + 1, sizeof *ids);
		const char **dargv = xcalloc(n + 1, sizeof *dargv);
		int nd = 1;
		dargv[0] = "DEL";
		for (size_t i = 0; i < n; i++) {
			ids[i] = batch[i].id;
			if (batch[i].key)
				dargv[nd++] = batch[i].key;
		}
		bool sent = false;
		for (int attempt = 0; attempt < 3 && !sent; attempt++) {
			if (!redis_is_connected(r) && redis_connect(r) < 0) {
				log_warn(LOG_ATTRS("error", redis_errmsg(r)),
					 "cannot acknowledge: redis unreachable");
				sleep_ms_interruptible(500, NULL);
				continue;
			}
			if (consumer_append_xack(c, r, ids, n) < 0 ||
			    (nd > 1 && redis_append_argv(r, nd, dargv, NULL) < 0))
				continue;
			redisReply *rep = redis_get_reply(r, -1);
			if (!rep)
				continue;
			if (rep->type == REDIS_REPLY_ERROR)
				log_warn(LOG_ATTRS("error", rep->str), "XACK failed");
			freeReplyObject(rep);
			if (nd > 1) {
				rep = redis_get_reply(r, -1);
				if (rep)
					freeReplyObject(rep);
			}
			sent = true;
		}
		if (!sent)
			log_warn(LOG_ATTRS("error", redis_errmsg(r)),
				 "acknowledgement lost; %zu message(s) stay pending and will be "
				 "reclaimed",
				 n);
		consumer_release_ids(c, ids, n);
		for (size_t i = 0; i < n; i++) {
			free(batch[i].id);
			free(batch[i].key);
		}
		free(batch);
		free(ids);
		free(dargv);
	}
	redis_free(r);
	return NULL;
}

/* ---- workers ----------------------------------------------------------- */

/* delivery_config.docker_wait: an invocation found the daemon unreachable;
 * sets the Docker hold and waits until the prober lifts it. False at
 * stop. */
static bool docker_hold_wait(void *arg)
{
	struct consumer *c = arg;
	consumer_hold(c, CONSUMER_HOLD_DOCKER, true);
	return docker_wait(c);
}

/* slots_on_release: a slot is free, a parked plan may take it. */
static void slot_released(void *arg)
{
	struct consumer *c = arg;
	pthread_mutex_lock(&c->lock);
	if (delivery_parked_locked(c->delivery))
		pthread_cond_signal(&c->work);
	pthread_mutex_unlock(&c->lock);
}

/* Does what a delivery decided (delivery.h) and frees its strings. */
static void settle(struct consumer *c, struct delivery_end *e)
{
	if (e->verdict == DELIVERY_ACK)
		ack_push(c, e->id, e->key, e->keyed);
	else if (e->verdict == DELIVERY_RELEASE)
		release(c, e->id);
	free(e->id);
	free(e->key);
}

static void *worker_main(void *arg)
{
	struct consumer *c = arg;
	struct redis *r = consumer_conn_new(c, 10000);
	for (;;) {
		/* A parked plan that can take a slot now goes before new
		 * messages. */
		struct delivery_plan *p = NULL;
		struct delivery_msg *m = NULL;
		pthread_mutex_lock(&c->lock);
		while (!atomic_load(&c->stop)) {
			if ((p = delivery_take_locked(c->delivery)))
				break;
			if (c->head) {
				m = c->head;
				c->head = m->next;
				if (!c->head)
					c->tail = NULL;
				break;
			}
			consumer_timed_wait(&c->work, &c->lock, 500 * NS_PER_MS);
		}
		pthread_mutex_unlock(&c->lock);
		struct delivery_end e;
		if (p)
			delivery_resume(c->delivery, r, p, &e);
		else if (m)
			delivery_process(c->delivery, r, m, &e);
		else
			break;
		settle(c, &e);
	}
	redis_free(r);
	return NULL;
}

/* ---- lifecycle --------------------------------------------------------- */

/* thread_start (named, every signal blocked), or the process ends: a
 * consumer missing a thread would neither read nor stop cleanly. */
static void start_thread(pthread_t *t, const char *name, void *(*fn)(void *), void *arg)
{
	int e = thread_start(t, name, fn, arg);
	if (e != 0) {
		log_error(LOG_ATTRS("thread", name, "error", strerror(e)),
			  "cannot start a consumer thread");
		abort();
	}
}

struct consumer *consumer_start(const struct consumer_config *cfg)
{
	struct consumer *c = xcalloc(1, sizeof *c);
	c->cfg = *cfg;
	redis_uri_copy(&c->uri, cfg->uri);
	c->cfg.uri = &c->uri;
	c->stream = xstrdup(cfg->stream);
	c->group = xstrdup(cfg->group);
	c->name = xstrdup(cfg->consumer);
	c->dlq = xasprintf("relay:%s:dlq", cfg->stream);
	c->retry_key = invocation_retry_key(cfg->stream, cfg->group);
	c->keys = keyorder_new(cfg->stream, cfg->group);
	snprintf_(c->reclaim_cursor, sizeof c->reclaim_cursor, "0-0");
	c->cfg.stream = c->stream;
	c->cfg.group = c->group;
	c->cfg.consumer = c->name;
	if (c->cfg.max_buffered <= 0)
		c->cfg.max_buffered = 16;
	if (c->cfg.max_concurrency <= 0)
		c->cfg.max_concurrency = 8;
	if (c->cfg.reclaim_interval_ns <= 0)
		c->cfg.reclaim_interval_ns = CONSUMER_RECLAIM_INTERVAL_NS;
	if (c->cfg.min_pending_idle_ns <= 0)
		c->cfg.min_pending_idle_ns = CONSUMER_MIN_PENDING_IDLE_NS;
	if (c->cfg.block_ms <= 0)
		c->cfg.block_ms = CONSUMER_BLOCK_MS;
	if (c->cfg.sample_interval_ns <= 0)
		c->cfg.sample_interval_ns = CONSUMER_SAMPLE_INTERVAL_NS;
	c->budget = c->cfg.read_budget ? c->cfg.read_budget : CONSUMER_READ_BUDGET;
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->ack_lock, NULL);
	pthread_mutex_init(&c->gate_lock, NULL);
	cond_init_monotonic(&c->gate_cond);
	cond_init_monotonic(&c->work);
	cond_init_monotonic(&c->space);
	cond_init_monotonic(&c->ack_cond);
	cond_init_monotonic(&c->retry_cond);
	c->slots = c->cfg.slots ? c->cfg.slots : slots_new(c->cfg.max_concurrency);
	c->delivery = delivery_new(&(struct delivery_config){
		.stream = c->stream,
		.group = c->group,
		.consumer = c->name,
		.dlq = c->dlq,
		.registry = c->cfg.registry,
		.slots = c->slots,
		.invoke = c->cfg.invoke,
		.invoke_ctx = c->cfg.invoke_ctx,
		.backoff_ns = {c->cfg.backoff_ns[0], c->cfg.backoff_ns[1], c->cfg.backoff_ns[2],
			       c->cfg.backoff_ns[3]},
		.stop = &c->stop,
		.lock = &c->lock,
		.docker_wait = c->cfg.ready ? docker_hold_wait : NULL,
		.retry_scheduled = retry_scheduled,
		.retry_key = c->retry_key,
		.keys = c->keys,
		.ctx = c,
	});
	slots_on_release(c->slots, slot_released, c);
	c->nworkers = c->cfg.max_concurrency;
	c->workers = xcalloc((size_t)c->nworkers, sizeof *c->workers);
	consumer_hold(c, c->cfg.hold, true);
	start_thread(&c->acker, "acker", acker_main, c);
	for (int i = 0; i < c->nworkers; i++) {
		char name[16];
		snprintf_(name, sizeof name, "worker-%d", i + 1);
		start_thread(&c->workers[i], name, worker_main, c);
	}
	start_thread(&c->reader, "reader", consumer_reader_main, c);
	start_thread(&c->reclaimer, "reclaim", reclaim_main, c);
	start_thread(&c->retrier, "retrier", retrier_main, c);
	start_thread(&c->sampler, "sampler", sampler_main, c);
	if (c->cfg.ready)
		start_thread(&c->prober, "prober", prober_main, c);
	return c;
}

void consumer_stop(struct consumer *c)
{
	atomic_store(&c->stop, 1);
	pthread_mutex_lock(&c->lock);
	pthread_cond_broadcast(&c->work);
	pthread_cond_broadcast(&c->space);
	pthread_cond_broadcast(&c->retry_cond);
	pthread_mutex_unlock(&c->lock);
	pthread_mutex_lock(&c->gate_lock);
	pthread_cond_broadcast(&c->gate_cond);
	pthread_mutex_unlock(&c->gate_lock);
	slots_wake(c->slots);
	pthread_join(c->reader, NULL);
	pthread_join(c->reclaimer, NULL);
	pthread_join(c->retrier, NULL);
	pthread_join(c->sampler, NULL);
	if (c->cfg.ready)
		pthread_join(c->prober, NULL);
	for (int i = 0; i < c->nworkers; i++)
		pthread_join(c->workers[i], NULL);
	pthread_mutex_lock(&c->ack_lock);
	c->ack_stop = 1;
	pthread_cond_broadcast(&c->ack_cond);
	pthread_mutex_unlock(&c->ack_lock);
	pthread_join(c->acker, NULL);
	slots_on_release(c->slots, NULL, NULL);
	/* Parked for a slot, never claimed: they stay pending, nothing
	 * charged. */
	delivery_drop_deferred(c->delivery);
	/* Buffered but never started: they stay pending in Redis, and their
	 * per-key places go to another worker at once. */
	if (c->nheld) {
		struct redis *r = consumer_conn_new(c, 2000);
		if (consumer_ensure_conn(c, r) == 0)
			leases(c, r, true);
		redis_free(r);
	}
	while (c->head) {
		struct delivery_msg *m = c->head;
		c->head = m->next;
		delivery_msg_free(m);
	}
	c->tail = NULL;
}

int consumer_buffered(struct consumer *c)
{
	pthread_mutex_lock(&c->lock);
	int n = c->buffered;
	pthread_mutex_unlock(&c->lock);
	return n;
}

void consumer_free(struct consumer *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->nheld; i++)
		free(c->held[i]);
	free(c->held);
	free(c->acks);
	if (!c->cfg.slots)
		slots_free(c->slots);
	free(c->workers);
	delivery_free(c->delivery);
	pthread_cond_destroy(&c->work);
	pthread_cond_destroy(&c->space);
	pthread_cond_destroy(&c->ack_cond);
	pthread_cond_destroy(&c->retry_cond);
	pthread_mutex_destroy(&c->lock);
	pthread_mutex_destroy(&c->ack_lock);
	pthread_cond_destroy(&c->gate_cond);
	pthread_mutex_destroy(&c->gate_lock);
	redis_uri_free(&c->uri);
	free(c->stream);
	free(c->group);
	free(c->name);
	free(c->dlq);
	free(c->retry_key);
	keyorder_free(c->keys);
	free(c);
}
