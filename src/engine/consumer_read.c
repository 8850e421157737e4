/*
 * The consumer's reader thread: reads new messages (XREADGROUP, the XACK of
 * those that match nothing pipelined ahead of it), decodes and matches
 * them, registers them for per-key order when a function is keyed
 * (keyorder.h), queues them for the workers, and recovers the entries of a
 * read the reply guard refused. The shared state is consumer_internal.h's;
 * the design notes are at the top of consumer.c.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/duration.h"
#include "base/log.h"
#include "base/util.h"
#include "engine/consumer_internal.h"
#include "engine/consumer_scripts.h"
#include "engine/keyorder.h"
#include "engine/metrics.h"
#include "engine/registry.h"
#include "engine/schedule.h"
#include "io/event.h"

/* How long the reader waits for more room before a small read. */
#define READ_COALESCE_NS (1 * NS_PER_MS)

/* ---- reader ------------------------------------------------------------ */

/*
 * Whether a freshly read message matches nothing: then the reader
 * acknowledges it itself, with the XACK pipelined ahead of its next read
 * (architecture.md: "an XACK can travel with the next XREADGROUP"). No
 * hand-off to a worker and no extra round trip keeps the no-match path
 * close to a bare XREADGROUP + XACK loop (bench/consume). A message that
 * matches, or claims to be a scheduled occurrence (*scheduled set), takes
 * its decoded event to the worker; a malformed one is decoded again by the
 * worker, which dead-letters it with the reason. Called without the
 * consumer lock: decoding a large event takes a while.
 */
static bool matches_nothing(struct consumer *c, const struct snapshot *snap, uint32_t *ids,
			    struct delivery_msg *m, bool *scheduled, size_t *nids)
{
	*scheduled = false;
	*nids = 0;
	if (c->cfg.test_before_decode)
		c->cfg.test_before_decode(c->cfg.test_ctx);
	struct event *ev = NULL;
	if (event_decode((const char *const *)m->fields, m->lens, m->nfields, &ev, NULL) !=
	    EVENT_OK)
		return false;
	if (schedule_claimed(ev)) {
		*scheduled = true;
		m->ev = ev;
		return false;
	}
	if ((*nids = pattern_set_match(snap->set, ev, now_wall_ns(), ids)) == 0) {
		event_free(ev);
		return true;
	}
	m->ev = ev;
	return false;
}

/* Message ids (owned strings). */
struct idlist {
	char **v;
	size_t n, cap;
};

static void idlist_push(struct idlist *l, char *id)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 32;
		l->v = xrealloc(l->v, l->cap * sizeof *l->v);
	}
	l->v[l->n++] = id;
}

static void idlist_clear(struct idlist *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	l->n = 0;
}

/* Whether message id is one relay dlq replay published: its script records
 * each in relay:<stream>:replays, taken off here, so a producer's own
 * relay_replay_of is not counted (nor a redelivery twice). */
static bool replayed_by_relay(const struct consumer *c, struct redis *r, const char *id)
{
	redisReply *rep = redis_command(r, "HDEL relay:%s:replays %s", c->stream, id);
	bool yes = rep && rep->type == REDIS_REPLY_INTEGER && rep->integer == 1;
	if (rep)
		freeReplyObject(rep);
	return yes;
}

/*
 * A batch of messages read, decoded and matched (take_batch), not yet
 * queued: with key_concurrency its messages first take their places in
 * their keys' queues (keyorder.h), once every batch read before it has
 * (batch_register). A fresh read's registration travels with the next
 * read (reader_read), so it costs no round trip of its own.
 */
struct batch {
	struct delivery_msg **ms; /* k of them, NULL where dropped */
	bool *skip;		  /* matches nothing: acknowledged with the next read */
	size_t k;
	bool recovered;
	struct keyorder_regs regs; /* regs.n > 0 or keyed: to register */
	bool keyed;
	char first[48], last[48]; /* the read's first and last entry ids */
};

static void batch_free(struct batch *b)
{
	if (!b)
		return;
	for (size_t i = 0; i < b->k; i++)
		delivery_msg_free(b->ms[i]);
	free(b->ms);
	free(b->skip);
	keyorder_regs_free(&b->regs);
	free(b);
}

/* Sets keys_acquired on each message all of whose places the
 * registration found within their limits. */
static void batch_acquired(struct batch *b)
{
	for (size_t i = 0, j = 0; i < b->k; i++) {
		if (!b->ms[i])
			continue;
		bool any = false, all = true;
		for (; j < b->regs.n && b->regs.v[j].id == b->ms[i]->id; j++) {
			any = true;
			all = all && b->regs.v[j].acquired;
		}
		b->ms[i]->keys_acquired = any && all;
		b->ms[i]->keys_registered = any;
	}
}

/*
 * Registers b on r, waiting up to KEYORDER_GAP_WAIT_MS for a batch another
 * worker read earlier to be registered first (then registering anyway).
 * A failure leaves its messages to ask when they run (at the back).
 */
static void batch_register(struct consumer *c, struct redis *r, struct batch *b)
{
	int64_t end = now_mono_ns() + KEYORDER_GAP_WAIT_MS * NS_PER_MS, pause = 1;
	char *err = NULL;
	int rc;
	bool force = false;
	while ((rc = keyorder_register(c->keys, r, b->first, b->last, force, b->regs.v, b->regs.n,
				       &err)) == 1 &&
	       !atomic_load(&c->stop)) {
		if (now_mono_ns() >= end) {
			log_warn(LOG_ATTRS("message_id", b->first),
				 "an earlier read of the group was not registered for per-key "
				 "order in time (its worker stopped?); registering this one "
				 "without it");
			force = true;
			continue;
		}
		sleep_ms_interruptible(pause, &c->stop);
		pause = pause < 32 ? pause * 2 : pause;
	}
	if (rc < 0) {
		log_warn(LOG_ATTRS("message_id", b->first, "error", err ? err : ""),
			 "cannot register a read for per-key order; its messages ask when they run");
		free(err);
		return;
	}
	batch_acquired(b);
}

/* Queues b's messages for the workers and puts those that match nothing
 * on *fast (acknowledged with the next read); frees b. */
static void batch_commit(struct consumer *c, struct batch *b, struct idlist *fast)
{
	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < b->k; i++) {
		struct delivery_msg *m = b->ms[i];
		if (!m)
			continue;
		b->ms[i] = NULL;
		if (!b->skip[i]) {
			m->fresh = !b->recovered;
			consumer_enqueue_locked(c, m);
			continue;
		}
		log_debug(LOG_ATTRS("message_id", m->id), "no rule matched; acknowledging");
		metrics_inc(METRIC_EVENTS_PROCESSED);
		consumer_hold_locked(c, m->id);
		idlist_push(fast, m->id);
		m->id = NULL;
		delivery_msg_free(m);
	}
	metrics_gauge_set(METRIC_BUFFERED_EVENTS, c->buffered);
	pthread_mutex_unlock(&c->lock);
	batch_free(b);
}

/* An entry's id (the first element of {id, fields}), or "". */
static const char *entry_id(const redisReply *e)
{
	return e->type == REDIS_REPLY_ARRAY && e->elements == 2 &&
			       e->element[0]->type == REDIS_REPLY_STRING
		       ? e->element[0]->str
		       : "";
}

/* Decodes and matches each message of b (outside the lock), counting them
 * as received, and collects their places in per-key queues. */
static void batch_match(struct consumer *c, struct redis *r, struct batch *b)
{
	struct snapshot *snap = registry_acquire(c->cfg.registry);
	uint32_t *ids = xcalloc(snap->nrules + 1, sizeof *ids);
	b->keyed = snap->nkeyed > 0;
	for (size_t i = 0; i < b->k; i++) {
		struct delivery_msg *m = b->ms[i];
		if (!m)
			continue;
		log_debug(LOG_ATTRS("message_id", m->id),
			  b->recovered ? "message read (recovered)" : "message read");
		bool scheduled;
		size_t nids;
		b->skip[i] = matches_nothing(c, snap, ids, m, &scheduled, &nids);
		for (size_t j = 0; b->keyed && !scheduled && j < nids; j++)
			keyorder_regs_add(c->keys, &b->regs, m->id, snap->rules[ids[j]].fv->fn,
					  m->ev, snap->rules[ids[j]].rule->timeout_ns);
		/* Scheduled occurrences are not events. */
		size_t rlen;
		if (!scheduled)
			metrics_inc(METRIC_EVENTS_RECEIVED);
		if (!scheduled && delivery_msg_field(m, "relay_replay_of", &rlen) &&
		    replayed_by_relay(c, r, m->id))
			metrics_inc(METRIC_DLQ_REPLAYED);
	}
	free(ids);
	registry_release(c->cfg.registry, snap);
}

/*
 * Takes in the entries of one read, or those the recover script answered
 * (recovered: the ones this process holds already are left alone; each
 * entry is counted as received once either way). Decodes and matches each
 * outside the lock (batch_match), registers the batch for per-key order
 * when a function is keyed, then queues the messages (batch_commit). An
 * entry of a read whose fields cost more than CONSUMER_ENTRY_MAX (it can
 * be within the guard's bound as sent, see consumer.h) is not taken: its
 * id joins *over, for the recover script to dead-letter. With defer
 * non-NULL (a fresh read), a batch to register is left in *defer instead,
 * for the next read to carry (unless entries went to *over: those are
 * recovered at once, after it).
 */
static void take_batch(struct consumer *c, struct redis *r, const redisReply *entries,
		       bool recovered, struct idlist *fast, struct idlist *over,
		       struct batch **defer)
{
	size_t n = entries->elements, nover = over ? over->n : 0;
	struct batch *b = xcalloc(1, sizeof *b);
	b->ms = xcalloc(n + 1, sizeof *b->ms);
	b->skip = xcalloc(n + 1, sizeof *b->skip);
	b->recovered = recovered;
	if (n) {
		snprintf_(b->first, sizeof b->first, "%s", entry_id(entries->element[0]));
		snprintf_(b->last, sizeof b->last, "%s", entry_id(entries->element[n - 1]));
	}
	for (size_t i = 0; i < n; i++) {
		size_t cost;
		struct delivery_msg *m = consumer_msg_from_entry(entries->element[i], &cost);
		if (!m)
			continue;
		if (cost > CONSUMER_ENTRY_MAX) {
			if (!recovered) {
				idlist_push(over, m->id);
				m->id = NULL;
			} else { /* the script measured it: cannot happen */
				log_warn(LOG_ATTRS("message_id", m->id),
					 "recovered entry over the limit left pending");
			}
			delivery_msg_free(m);
			continue;
		}
		b->ms[b->k++] = m;
	}
	if (recovered) {
		/* Still in progress here: the running marker protects it; no
		 * second local copy. */
		pthread_mutex_lock(&c->lock);
		for (size_t i = 0; i < b->k; i++)
			if (consumer_held_locked(c, b->ms[i]->id)) {
				delivery_msg_free(b->ms[i]);
				b->ms[i] = NULL;
			}
		pthread_mutex_unlock(&c->lock);
	}
	batch_match(c, r, b);
	if (b->keyed && n && b->first[0] && b->last[0]) {
		if (defer && (!over || over->n == nover)) {
			*defer = b;
			return;
		}
		batch_register(c, r, b);
	}
	batch_commit(c, b, fast);
}

/* A read's error reply: NOGROUP recreates the group, anything else waits. */
static void read_failed(struct consumer *c, struct redis *r, redisReply *rep)
{
	char err[256];
	snprintf_(err, sizeof err, "%s", rep->str);
	freeReplyObject(rep);
	if (strncmp(err, "NOGROUP", 7) == 0) {
		/* Redis lost the group (restarted without persistence):
		 * recreate it rather than stop consuming. */
		char *why = NULL;
		log_warn(LOG_ATTRS("stream", c->stream, "group", c->group, "error", err),
			 "consumer group missing; recreating it");
		if (consumer_ensure_group(r, c->stream, c->group, &why) < 0)
			log_warn(LOG_ATTRS("error", why), "cannot recreate the consumer group");
		free(why);
	} else {
		log_warn(LOG_ATTRS("error", err), "reading the stream failed");
	}
	sleep_ms_interruptible(1000, &c->stop);
}

/* Between looks at the stop flag while a read blocks in Redis. */
#define READ_STOP_SLICE_MS 200

/*
 * The reply to the read just queued, which may block in Redis for up to
 * block_ms (plus the usual margin). Waits in slices so that a stop or a
 * hold is prompt: either abandons the read by closing the connection
 * (entries Redis delivers at that instant stay pending for this consumer
 * and come back through the reclaim, as after a crash). NULL on failure.
 */
static redisReply *read_reply(struct consumer *c, struct redis *r)
{
	int64_t end = now_mono_ns() + (int64_t)(c->cfg.block_ms + 10000) * NS_PER_MS;
	for (;;) {
		if (atomic_load(&c->stop) || consumer_holding(c, ~0u)) {
			redis_disconnect(r);
			return NULL;
		}
		int64_t left = (end - now_mono_ns()) / NS_PER_MS;
		if (left <= READ_STOP_SLICE_MS)
			return redis_get_reply(r, left > 0 ? (int)left : 1);
		redisReply *rep = NULL;
		if (redis_wait_reply(r, READ_STOP_SLICE_MS, &rep) != 0)
			return rep;
	}
}


/*
 * Runs the recover script from id over at most n of this consumer's pending
 * entries and takes in its answer like a read's: the entries it returns
 * are queued (or acknowledged with the next read when they match nothing),
 * the too-large ones reported, the gone ones dropped. On a failure they
 * stay pending and come back through the reclaim once idle long enough.
 */
static void recover(struct consumer *c, struct redis *r, const char *id, int n, struct idlist *fast)
{
	struct consumer_read_args a;
	consumer_read_args_fill(n, &a);
	const char *argv[] = {"2", c->stream, c->dlq, c->group, c->name, a.count, a.emax, a.ts, id};
	redisReply *rep = redis_script_run(r, consumer_scripts_recover(), (int)ARRAY_LEN(argv), argv, NULL);
	if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 3 ||
	    rep->element[0]->type != REDIS_REPLY_ARRAY || rep->element[0]->elements != 2 ||
	    rep->element[0]->element[1]->type != REDIS_REPLY_ARRAY ||
	    rep->element[1]->type != REDIS_REPLY_ARRAY ||
	    rep->element[2]->type != REDIS_REPLY_ARRAY) {
		log_warn(LOG_ATTRS("message_id", id, "error",
				   !rep				    ? redis_errmsg(r)
				   : rep->type == REDIS_REPLY_ERROR ? rep->str
								    : "unexpected reply"),
			 "cannot read the entries of a refused read through the recover "
			 "script; they stay pending and come back through the reclaim");
		if (rep)
			freeReplyObject(rep);
		return;
	}
	take_batch(c, r, rep->element[0]->element[1], true, fast, NULL, NULL);
	consumer_report_too_large(c, rep->element[1], true);
	consumer_drop_gone(c, r, rep->element[2]);
	freeReplyObject(rep);
}

/* A read of n entries the guard refused (redis_set_guard): the batch is
 * pending for this consumer and unread. Reconnects and recovers it from
 * its first id. */
static void recover_refused(struct consumer *c, struct redis *r, int n, struct idlist *fast)
{
	char first[REDIS_GUARD_FIRST_MAX + 1];
	snprintf_(first, sizeof first, "%s", redis_guard_first(r));
	if (!first[0]) {
		log_warn(LOG_ATTRS("error", redis_errmsg(r)),
			 "a read was refused before its first entry id; its entries stay "
			 "pending and come back through the reclaim");
		return;
	}
	log_debug(LOG_ATTRS("message_id", first, "error", redis_errmsg(r)),
		  "read refused by the reply guard; reading its batch through the recover "
		  "script");
	if (consumer_ensure_conn(c, r) < 0)
		return;
	recover(c, r, first, n, fast);
}

/* The reader thread's state between reads. */
struct reader {
	struct consumer *c;
	struct redis *r;
	char block[16];
	/* No-match messages read last time, acknowledged with the next read;
	 * entries of the last read that cost more than the limit. */
	struct idlist fast, over;
	/* The last read's batch, registered for per-key order with the next
	 * read and queued then (take_batch), or NULL. */
	struct batch *pending;
};

/*
 * Room for the next read, waiting until the buffer has some. The consumer
 * lock is held only for these waits: decoding and matching happen in
 * take_batch, outside it. The fast ones do not count: they are ACKed
 * before the next read executes.
 */
static int reader_room(struct consumer *c, size_t nfast)
{
	pthread_mutex_lock(&c->lock);
	/* Room reserved by a waiting retrier or reclaim is theirs. */
	while (c->buffered + c->reserved - (int)nfast >= c->cfg.max_buffered &&
	       !atomic_load(&c->stop))
		consumer_timed_wait(&c->space, &c->lock, 500 * NS_PER_MS);
	/* Less than half the buffer free: wait a moment for the ACKs in
	 * flight to free more, so one read fetches a batch rather than a
	 * message or two (bench/consume). */
	if (c->cfg.max_buffered - (c->buffered + c->reserved - (int)nfast) <
		    (c->cfg.max_buffered + 1) / 2 &&
	    !atomic_load(&c->stop))
		consumer_timed_wait(&c->space, &c->lock, READ_COALESCE_NS);
	int room = c->cfg.max_buffered - (c->buffered + c->reserved - (int)nfast);
	if (room < 1)
		room = 1; /* a reservation came meanwhile: one more at most */
	pthread_mutex_unlock(&c->lock);
	return room;
}


/* The reply to the fast ones' XACK, sent ahead of a read. */
static void reader_ack_reply(struct reader *rd)
{
	redisReply *ack = redis_get_reply(rd->r, -1);
	/* A read the guard refused came after the XACK was done. */
	if ((!ack && !redis_guard_tripped(rd->r)) || (ack && ack->type == REDIS_REPLY_ERROR))
		log_warn(LOG_ATTRS("error", ack ? ack->str : redis_errmsg(rd->r)),
			 "acknowledgement lost; the messages stay pending and will be reclaimed");
	if (ack)
		freeReplyObject(ack);
}

/*
 * One round trip: the XACK of the fast ones (if any), the registration of
 * the last read's batch (if one waits: rd->pending), then XREADGROUP of at
 * most n new entries, without BLOCK while a batch waits. Returns the
 * read's reply, NULL on failure. The fast ones' buffer slots are released
 * either way: ACKed or, on a dropped connection, left pending for the
 * reclaim. The waiting batch is queued either way, registered by a call of
 * its own when the pipelined one did not do it (an earlier batch not yet
 * registered, a failure).
 */
static redisReply *reader_read(struct reader *rd, int n)
{
	struct consumer *c = rd->c;
	struct batch *b = rd->pending;
	char count[16];
	snprintf_(count, sizeof count, "%d", n);
	const char *argv[] = {"XREADGROUP", "GROUP",   c->group,  c->name,   "COUNT", count,
			      "BLOCK",	    rd->block, "STREAMS", c->stream, ">"};
	const char *nb[] = {"XREADGROUP", "GROUP",   c->group,	c->name,
			    "COUNT",	  count,     "STREAMS", c->stream, ">"};
	if (rd->fast.n)
		consumer_append_xack(c, rd->r, (const char *const *)rd->fast.v, rd->fast.n);
	bool reg = b && keyorder_register_append(c->keys, rd->r, b->first, b->last, b->regs.v,
						 b->regs.n) == 0;
	int regrc = -1;
	redisReply *rep = NULL;
	if ((b ? redis_append_argv(rd->r, (int)ARRAY_LEN(nb), nb, NULL)
	       : redis_append_argv(rd->r, (int)ARRAY_LEN(argv), argv, NULL)) == 0) {
		if (rd->fast.n)
			reader_ack_reply(rd);
		if (reg)
			regrc = keyorder_register_take(redis_get_reply(rd->r, -1), b->regs.v,
						       b->regs.n, NULL);
		if (redis_is_connected(rd->r))
			rep = read_reply(c, rd->r);
	}
	consumer_release_ids(c, (const char *const *)rd->fast.v, rd->fast.n);
	idlist_clear(&rd->fast);
	if (b) {
		rd->pending = NULL;
		if (regrc == 0)
			batch_acquired(b);
		else if (consumer_ensure_conn(c, rd->r) == 0)
			batch_register(c, rd->r, b);
		batch_commit(c, b, &rd->fast);
	}
	return rep;
}

/*
 * Takes in (and frees) the reply to a read of n entries: its entries go to
 * take_batch, then those over the limit through the recover script; a read
 * the guard refused is recovered whole; an error is logged (read_failed).
 */
static void reader_take(struct reader *rd, redisReply *rep, int n)
{
	struct consumer *c = rd->c;
	if (!rep) {
		if (redis_guard_tripped(rd->r))
			recover_refused(c, rd->r, n, &rd->fast);
		else if (!atomic_load(&c->stop) && !consumer_holding(c, ~0u))
			log_warn(LOG_ATTRS("error", redis_errmsg(rd->r)),
				 "redis read failed; reconnecting");
		return;
	}
	if (rep->type == REDIS_REPLY_ERROR) {
		read_failed(c, rd->r, rep);
		return;
	}
	/* [[stream, entries]], or nil when BLOCK ran out. */
	if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 1 &&
	    rep->element[0]->type == REDIS_REPLY_ARRAY && rep->element[0]->elements == 2 &&
	    rep->element[0]->element[1]->type == REDIS_REPLY_ARRAY)
		take_batch(c, rd->r, rep->element[0]->element[1], false, &rd->fast, &rd->over,
			   &rd->pending);
	else if (rep->type != REDIS_REPLY_NIL)
		log_warn(NULL, "unexpected reply to XREADGROUP");
	freeReplyObject(rep);
	for (size_t i = 0; i < rd->over.n && !atomic_load(&c->stop); i++)
		recover(c, rd->r, rd->over.v[i], 1, &rd->fast);
	idlist_clear(&rd->over);
}

/* Stopping with no-match messages read: acknowledges them now. */
static void reader_finish(struct reader *rd)
{
	if (rd->fast.n && redis_is_connected(rd->r)) {
		consumer_append_xack(rd->c, rd->r, (const char *const *)rd->fast.v, rd->fast.n);
		redisReply *ack = redis_get_reply(rd->r, -1);
		if (ack)
			freeReplyObject(ack);
	}
	consumer_release_ids(rd->c, (const char *const *)rd->fast.v, rd->fast.n);
	idlist_clear(&rd->fast);
	/* Read, never queued: they stay pending for the reclaim. */
	batch_free(rd->pending);
	free(rd->fast.v);
	free(rd->over.v);
	redis_free(rd->r);
}

void *consumer_reader_main(void *arg)
{
	struct consumer *c = arg;
	struct reader rd = {.c = c, .r = consumer_conn_new(c, c->cfg.block_ms + 10000)};
	/* Every entry of a read bounded as sent (consumer.h, cost model). */
	redis_set_guard(rd.r, 3, CONSUMER_ENTRY_SENT_MAX, CONSUMER_ENTRY_SENT_ELEMENTS);
	snprintf_(rd.block, sizeof rd.block, "%d", c->cfg.block_ms);
	while (!atomic_load(&c->stop)) {
		/* A hold stops the reading, not what was read already. */
		if (rd.pending && consumer_holding(c, ~0u) && consumer_ensure_conn(c, rd.r) == 0) {
			batch_register(c, rd.r, rd.pending);
			batch_commit(c, rd.pending, &rd.fast);
			rd.pending = NULL;
		}
		consumer_gate_pass(c);
		if (atomic_load(&c->stop) || consumer_ensure_conn(c, rd.r) < 0)
			break;
		int room = reader_room(c, rd.fast.n);
		if (atomic_load(&c->stop))
			break;
		/* The waiting batch is queued before this read's entries. */
		if (rd.pending)
			room = room > (int)rd.pending->k ? room - (int)rd.pending->k : 1;
		int n = consumer_read_count(c, room);
		reader_take(&rd, reader_read(&rd, n), n);
	}
	reader_finish(&rd);
	return NULL;
}
