/*
 * Stream consumer. See consumer.h for the thread layout; the design notes
 * that matter when changing this file:
 *
 * - The buffer counts messages read (or reclaimed) and not yet released.
 *   A message is released when its ACK is confirmed, when it was
 *   dead-lettered and ACKed, or when it is left pending. The reader and the
 *   reclaim loop only ask Redis for as many messages as there is room for,
 *   so a full buffer leaves the backlog in Redis.
 * - Per message, matching invocations run in order; the first that does not
 *   succeed stops the rest (abort on first failure). Each is gated by its
 *   invocation-state marker and claimed with a compare-and-set before it
 *   runs, so a redelivery elsewhere skips live or backing-off work.
 * - No worker waits for a concurrency slot. A plan (one message's work)
 *   whose next invocation gets no slot (slots_try_acquire: MAX_CONCURRENCY
 *   or the function's concurrency) is parked on the deferred list, still
 *   held (it keeps its buffer slot, so deferred plans count against
 *   MAX_BUFFERED_EVENTS: the reader's room), matched, its state loaded and
 *   nothing charged; the worker goes on with other messages. Every slot
 *   release wakes a worker (slots_on_release), and a worker looks at the
 *   deferred list before it takes a new message: the oldest plan whose
 *   function can take a slot now resumes at the claim, whose
 *   compare-and-set against the marker as last seen protects against a
 *   reclaim elsewhere meanwhile. While the list is not empty a new plan
 *   parks too at its slot step, so the oldest runnable plan always goes
 *   first (per function, and across functions for the global slots).
 *   At shutdown deferred plans are dropped: their messages stay pending,
 *   no attempt charged.
 * - A fresh message (struct msg) reads no state: a first-attempt success
 *   costs the claim and the outcome write (HSET+EXPIRE pipelined), two round
 *   trips, plus its share of the batched XACK+DEL. The ok marker is always
 *   written before the XACK is queued.
 * - Bookkeeping errors fail open: an unreadable state is treated as absent,
 *   a failed claim write still runs the invocation.
 * - What a message runs is resolved first (resolve_work): a scheduled
 *   occurrence (schedule.h) is first proven genuine (else dead-lettered as
 *   forged), then runs exactly its schedule's handler and is never
 *   pattern-matched; an event runs its matching rules. From then on
 *   both take the same path (state, slots, timeout, retries, DLQ, handler
 *   metrics), except that scheduled occurrences never move the event
 *   counters, and one whose function or schedule handler is gone is
 *   acknowledged as obsolete.
 */
#include "engine/consumer.h"

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
#include "base/log.h"
#include "engine/metrics.h"
#include "base/rfc3339.h"
#include "engine/schedule.h"
#include "engine/slots.h"
#include "base/util.h"

/* How long the reader waits for more room before a small read. */
#define READ_COALESCE_NS (1 * NS_PER_MS)

struct msg {
	char *id;
	char **fields; /* alternating names and values (copies; NULL = not a string) */
	size_t *lens;
	size_t nfields;
	struct event *ev; /* decoded by the reader, or NULL: the worker decodes */
	/* First delivered by a plain XREADGROUP ">" (not recovered, not
	 * reclaimed): it can have no invocation state, so plan_load skips the
	 * HGETALL and every claim compares against "absent". A state key left
	 * by an earlier life of the group (a recreated group delivering an id
	 * again) only makes that claim lose its compare-and-set: the message
	 * stays pending and the reclaim, which loads the state, settles it. */
	bool fresh;
	struct msg *next;
};

struct plan;

struct ack {
	char *id;
	char *key; /* invocation-state key to delete, or NULL */
};

struct consumer {
	struct consumer_config cfg;
	struct redis_uri uri;
	char *stream, *group, *name, *dlq;
	size_t budget; /* bytes per read reply (CONSUMER_READ_BUDGET) */

	pthread_mutex_t lock;
	pthread_cond_t work;  /* a message was queued / stop */
	pthread_cond_t space; /* buffer room / stop */
	struct msg *head, *tail;
	int buffered;
	char **held; /* ids held locally, for reclaim dedup */
	size_t nheld, capheld;
	/* Plans parked for a concurrency slot, oldest first (see above). */
	struct plan *dhead, *dtail;
	int ndeferred;

	pthread_mutex_t ack_lock;
	pthread_cond_t ack_cond;
	struct ack *acks;
	size_t nacks, capacks;
	int ack_stop;

	atomic_int stop;
	struct slots *slots;

	/* Holds (consumer_hold): the bits in force, since when each started
	 * (monotonic), and whose turn it is to probe the daemon. */
	pthread_mutex_t gate_lock;
	pthread_cond_t gate_cond;
	unsigned hold;
	int64_t hold_since[2];

	pthread_t reader, reclaimer, acker, sampler, prober;
	pthread_t *workers;
	int nworkers;
};

/* ---- small helpers ----------------------------------------------------- */

static void msg_free(struct msg *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->nfields; i++)
		free(m->fields[i]);
	free(m->fields);
	free(m->lens);
	free(m->id);
	event_free(m->ev);
	free(m);
}

static void timed_wait(pthread_cond_t *cv, pthread_mutex_t *m, int64_t ns)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	int64_t t = (int64_t)ts.tv_sec * NS_PER_SEC + ts.tv_nsec + ns;
	ts.tv_sec = t / NS_PER_SEC;
	ts.tv_nsec = t % NS_PER_SEC;
	pthread_cond_timedwait(cv, m, &ts);
}

static bool held_locked(struct consumer *c, const char *id)
{
	for (size_t i = 0; i < c->nheld; i++)
		if (strcmp(c->held[i], id) == 0)
			return true;
	return false;
}

/* Counts a message in the local buffer until release(); lock held. */
static void hold_locked(struct consumer *c, const char *id)
{
	if (c->nheld == c->capheld) {
		c->capheld = c->capheld ? c->capheld * 2 : 32;
		c->held = xrealloc(c->held, c->capheld * sizeof *c->held);
	}
	c->held[c->nheld++] = xstrdup(id);
	c->buffered++;
}

/* Queues a message for the workers (takes ownership); lock held. */
static void enqueue_locked(struct consumer *c, struct msg *m)
{
	hold_locked(c, m->id);
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
static void release_ids(struct consumer *c, const char *const *ids, size_t n)
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
	release_ids(c, ids, 1);
}

/* Whether a field is one Relay reads: the read scripts' WANTED (the
 * event, and the replay fields relay dlq replay adds, copied into a DLQ
 * entry so that a replay count survives a second dead-lettering). */
static bool field_wanted(const redisReply *f)
{
	static const char *const wanted[] = {"event", "relay_replays", "relay_replay_of"};
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
static struct msg *msg_from_entry(const redisReply *e, size_t *cost)
{
	if (e->type != REDIS_REPLY_ARRAY || e->elements < 2 ||
	    e->element[0]->type != REDIS_REPLY_STRING)
		return NULL;
	const redisReply *f = e->element[1];
	if (f->type != REDIS_REPLY_ARRAY)
		return NULL; /* a deleted entry (nil fields) */
	struct msg *m = xcalloc(1, sizeof *m);
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

/* The last field `name` of a message (borrowed, *len bytes), or NULL. */
static const char *msg_field(const struct msg *m, const char *name, size_t *len)
{
	const char *v = NULL;
	size_t n = strlen(name);
	for (size_t i = 0; i + 1 < m->nfields; i += 2) {
		if (m->fields[i] && m->fields[i + 1] && m->lens[i] == n &&
		    memcmp(m->fields[i], name, n) == 0) {
			v = m->fields[i + 1];
			*len = m->lens[i + 1];
		}
	}
	return v;
}

static struct redis *conn_new(struct consumer *c, int command_timeout_ms)
{
	struct redis_opts o = {.connect_timeout_ms = 5000,
			       .command_timeout_ms = command_timeout_ms};
	return redis_new(&c->uri, &o);
}

/* Connected, or -1 when stopping. */
static int ensure_conn(struct consumer *c, struct redis *r)
{
	if (redis_is_connected(r))
		return 0;
	return redis_connect_retry(r, &c->stop);
}

/* Queues XACK <stream> <group> <ids...> on r (the reply is read later).
 * Returns redis_append_argv's result. */
static int append_xack(const struct consumer *c, struct redis *r, const char *const *ids, size_t n)
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

/* ---- the read scripts ---------------------------------------------------- */

/*
 * New messages are read with a plain XREADGROUP on a guarded connection
 * (reader_main); the scripts here read what that cannot, looking at every
 * entry inside Redis before anything is transferred (consumer.h, cost
 * model): the batch of a read the guard refused, an entry the guard let
 * through that still costs more than CONSUMER_ENTRY_MAX (recover_lua), and
 * the idle pending messages of any consumer (reclaim_lua). Shared part:
 * KEYS[1] stream, KEYS[2] DLQ; ARGV[1] group, ARGV[2] consumer, ARGV[3] at
 * most this many entries, ARGV[4] CONSUMER_ENTRY_MAX, ARGV[5] timestamp
 * (RFC 3339) for DLQ entries.
 *
 * measure() keeps only the fields Relay reads, the last of each in order
 * (the one Relay uses: the last `event` wins, as in payload_of; from a
 * plain read, msg_from_entry keeps them all, at most 32 fields), and answers their bytes, names and values, and
 * what they cost in a reply (CONSUMER_ENTRY_COST). An entry costing more
 * than the limit is dead-lettered by too_large() without its body and
 * acknowledged; a failed DLQ write leaves it pending (retried by the next
 * reclaim, like any DLQ write) and is reported, not raised, so the entries
 * after it are still read. Each script answers its entries in XREADGROUP's
 * shape ({id, fields}, with only the fields kept) and the too-large ones as
 * {id, size, DLQ error or ""}.
 */
/* The framing allowance is spelled out in the scripts. */
_Static_assert(CONSUMER_ENTRY_FRAMING == 64 && CONSUMER_STRING_FRAMING == 16,
	       "the read scripts count 64 + 16 per string");
/* clang-format off */
#define READ_LUA_PRELUDE \
	"local WANTED = {event = true, relay_replays = true, relay_replay_of = true}\n" \
	"local function measure(e)\n" \
	"  local f, size, n, last, all = e[2], 0, 0, {}, true\n" \
	"  for i = 1, #f - 1, 2 do\n" \
	"    if WANTED[f[i]] then\n" \
	"      size = size + #f[i] + #f[i + 1]\n" \
	"      n = n + 2\n" \
	"      if last[f[i]] then all = false end\n" \
	"      last[f[i]] = i\n" \
	"    else\n" \
	"      all = false\n" \
	"    end\n" \
	"  end\n" \
	"  if not all then\n" \
	"    local keep = {}\n" \
	"    for i = 1, #f - 1, 2 do\n" \
	"      if last[f[i]] == i then\n" \
	"        keep[#keep + 1] = f[i]\n" \
	"        keep[#keep + 1] = f[i + 1]\n" \
	"      end\n" \
	"    end\n" \
	"    e[2] = keep\n" \
	"  end\n" \
	"  return size, size + 64 + 16 * n\n" \
	"end\n" \
	"local function too_large(id, size)\n" \
	"  local r = redis.pcall('XADD', KEYS[2], '*', 'original_stream', KEYS[1],\n" \
	"    'original_id', id, 'group', ARGV[1], 'consumer', ARGV[2], 'event', '',\n" \
	"    'reason', 'event too large', 'attempts', '0', 'timestamp', ARGV[5],\n" \
	"    'size', string.format('%d', size), 'function', '', 'handler', '')\n" \
	"  if type(r) == 'table' and r.err then return r.err end\n" \
	"  redis.call('XACK', KEYS[1], ARGV[1], id)\n" \
	"  return ''\n" \
	"end\n" \
	"local count, emax = tonumber(ARGV[3]), tonumber(ARGV[4])\n"
/* clang-format on */

/*
 * Recover: a read of new messages was refused by the reply guard (an entry
 * over CONSUMER_ENTRY_SENT_MAX as sent), so its whole batch is pending for
 * this consumer and was never read; or an entry the guard let through
 * costs more than the limit. ARGV[6] is the first id of that batch (or
 * the entry's id), ARGV[3] the batch's count (1 for one entry). This
 * consumer's pending entries from that id on (XPENDING <id> + count
 * <consumer>: ids a read with ">" delivers are newer than any delivered
 * before, so these are that batch) are read with XRANGE one at a time and
 * measured: too-large ones dead-lettered, gone (trimmed or deleted) ones
 * reported, the others answered with the fields kept. Nothing is claimed:
 * they are this consumer's already, delivered once. Answers
 * {{stream, entries}, too_large, gone}: the entries at depth 3, where the
 * reader's guard bounds them as it bounds a read's (within it: each costs
 * at most the limit).
 */
static const char recover_lua[] = READ_LUA_PRELUDE
	"local pend = redis.pcall('XPENDING', KEYS[1], ARGV[1], ARGV[6], '+', count, ARGV[2])\n"
	"if pend.err then return pend end\n"
	"local out, big, gone = {}, {}, {}\n"
	"for _, p in ipairs(pend) do\n"
	"  local id = p[1]\n"
	"  local e = redis.call('XRANGE', KEYS[1], id, id)[1]\n"
	"  if not e then\n"
	"    gone[#gone + 1] = id\n"
	"  else\n"
	"    local size, cost = measure(e)\n"
	"    if cost > emax then\n"
	"      big[#big + 1] = {id, size, too_large(id, size)}\n"
	"    else\n"
	"      out[#out + 1] = e\n"
	"    end\n"
	"  end\n"
	"end\n"
	"return {{KEYS[1], out}, big, gone}\n";

/*
 * Reclaim: XAUTOCLAIM's job, measured first. ARGV[6] MinPendingIdle (ms),
 * ARGV[7] cursor: the last pending id looked at ("0-0": from the start).
 * For each message idle that long (XPENDING IDLE, in id order, at most
 * ARGV[3]) the entry is read with XRANGE, one at a time: gone (trimmed or
 * deleted) ones are reported, too-large ones dead-lettered, the others
 * claimed with XCLAIM ... RETRYCOUNT <deliveries + 1> JUSTID, which is what
 * XAUTOCLAIM does (new owner, idle reset, one more delivery) without
 * copying the entry again. A too-large one whose DLQ write failed is
 * claimed too, so it is retried once per MinPendingIdle like any message
 * whose DLQ write failed. Answers {cursor, entries, too_large, gone}; the
 * cursor is "0-0" once the whole PEL was looked at.
 */
static const char reclaim_lua[] = READ_LUA_PRELUDE
	"local start = ARGV[7] == '0-0' and '-' or ('(' .. ARGV[7])\n"
	"local pend = redis.pcall('XPENDING', KEYS[1], ARGV[1], 'IDLE', ARGV[6], start, '+',\n"
	"  count)\n"
	"if pend.err then return pend end\n"
	"local out, big, gone, cursor = {}, {}, {}, '0-0'\n"
	"for _, p in ipairs(pend) do\n"
	"  local id = p[1]\n"
	"  local e = redis.call('XRANGE', KEYS[1], id, id)[1]\n"
	"  if not e then\n"
	"    gone[#gone + 1] = id\n"
	"  else\n"
	"    local size, cost = measure(e)\n"
	"    if cost > emax then\n"
	"      local err = too_large(id, size)\n"
	"      if err ~= '' then\n"
	"        redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[6], id,\n"
	"          'RETRYCOUNT', p[4] + 1, 'JUSTID')\n"
	"      end\n"
	"      big[#big + 1] = {id, size, err}\n"
	"    elseif #redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[6], id,\n"
	"        'RETRYCOUNT', p[4] + 1, 'JUSTID') == 1 then\n"
	"      out[#out + 1] = e\n"
	"    end\n"
	"  end\n"
	"end\n"
	"if #pend == count then cursor = pend[#pend][1] end\n"
	"return {cursor, out, big, gone}\n";

static struct redis_script recover_script, reclaim_script;
static pthread_once_t scripts_once = PTHREAD_ONCE_INIT;

static void scripts_init(void)
{
	redis_script_init(&recover_script, recover_lua);
	redis_script_init(&reclaim_script, reclaim_lua);
}

/* At most room entries, and only as many as the byte budget holds at
 * CONSUMER_ENTRY_MAX each (at least one). */
static int read_count(const struct consumer *c, int room)
{
	size_t fit = c->budget / CONSUMER_ENTRY_MAX;
	return fit < 1 ? 1 : fit < (size_t)room ? (int)fit : room;
}

/* The arguments the scripts share (after "2", the number of keys). */
struct read_args {
	char count[16], emax[24], ts[RFC3339_STR_MAX];
};

static void read_args_fill(int n, struct read_args *a)
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
static void report_too_large(struct consumer *c, const redisReply *big, bool fresh)
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
			    struct msg *m, bool *scheduled)
{
	*scheduled = false;
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
	if (pattern_set_match(snap->set, ev, now_wall_ns(), ids) == 0) {
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

/*
 * Takes in the entries of one read, or those the recover script answered
 * (recovered: the ones this process holds already are left alone; each
 * entry is counted as received once either way). Decodes and matches each
 * outside the lock, then takes the lock once to count them in the buffer
 * and queue those that match (the others join *fast, to be acknowledged
 * with the next read). An entry of a read whose fields cost more than
 * CONSUMER_ENTRY_MAX (it can be within the guard's bound as sent, see
 * consumer.h) is not taken: its id joins *over, for the recover script
 * to dead-letter.
 */
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

static void take_batch(struct consumer *c, struct redis *r, const redisReply *entries,
		       bool recovered, struct idlist *fast, struct idlist *over)
{
	size_t n = entries->elements, k = 0;
	struct msg **ms = xcalloc(n + 1, sizeof *ms);
	bool *skip = xcalloc(n + 1, sizeof *skip);
	for (size_t i = 0; i < n; i++) {
		size_t cost;
		struct msg *m = msg_from_entry(entries->element[i], &cost);
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
			msg_free(m);
			continue;
		}
		ms[k++] = m;
	}
	if (recovered) {
		/* Still in progress here: the running marker protects it; no
		 * second local copy. */
		pthread_mutex_lock(&c->lock);
		for (size_t i = 0; i < k; i++)
			if (held_locked(c, ms[i]->id)) {
				msg_free(ms[i]);
				ms[i] = NULL;
			}
		pthread_mutex_unlock(&c->lock);
	}
	struct snapshot *snap = registry_acquire(c->cfg.registry);
	uint32_t *ids = xcalloc(snap->nrules + 1, sizeof *ids);
	for (size_t i = 0; i < k; i++) {
		struct msg *m = ms[i];
		if (!m)
			continue;
		log_debug(LOG_ATTRS("message_id", m->id),
			  recovered ? "message read (recovered)" : "message read");
		bool scheduled;
		skip[i] = matches_nothing(c, snap, ids, m, &scheduled);
		/* Scheduled occurrences are not events. */
		size_t rlen;
		if (!scheduled)
			metrics_inc(METRIC_EVENTS_RECEIVED);
		if (!scheduled && msg_field(m, "relay_replay_of", &rlen) &&
		    replayed_by_relay(c, r, m->id))
			metrics_inc(METRIC_DLQ_REPLAYED);
	}
	free(ids);
	registry_release(c->cfg.registry, snap);

	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < k; i++) {
		struct msg *m = ms[i];
		if (!m)
			continue;
		if (!skip[i]) {
			m->fresh = !recovered;
			enqueue_locked(c, m);
			continue;
		}
		log_debug(LOG_ATTRS("message_id", m->id), "no rule matched; acknowledging");
		metrics_inc(METRIC_EVENTS_PROCESSED);
		hold_locked(c, m->id);
		idlist_push(fast, m->id);
		m->id = NULL;
		msg_free(m);
	}
	metrics_gauge_set(METRIC_BUFFERED_EVENTS, c->buffered);
	pthread_mutex_unlock(&c->lock);
	free(ms);
	free(skip);
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

static bool holding(struct consumer *c, unsigned mask)
{
	pthread_mutex_lock(&c->gate_lock);
	bool held = (c->hold & mask) != 0;
	pthread_mutex_unlock(&c->gate_lock);
	return held;
}

/* The reader's gate: returns once no hold is in force (or at stop). */
static void gate_pass(struct consumer *c)
{
	pthread_mutex_lock(&c->gate_lock);
	while (c->hold && !atomic_load(&c->stop))
		timed_wait(&c->gate_cond, &c->gate_lock, 500 * NS_PER_MS);
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
		bool held = holding(c, CONSUMER_HOLD_DOCKER);
		pthread_mutex_lock(&c->gate_lock);
		if (!atomic_load(&c->stop))
			timed_wait(&c->gate_cond, &c->gate_lock,
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
		timed_wait(&c->gate_cond, &c->gate_lock, 500 * NS_PER_MS);
	pthread_mutex_unlock(&c->gate_lock);
	return !atomic_load(&c->stop);
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
		if (atomic_load(&c->stop) || holding(c, ~0u)) {
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

static void drop_gone(struct consumer *c, struct redis *r, const redisReply *gone);

/*
 * Runs the recover script from id over at most n of this consumer's pending
 * entries and takes in its answer like a read's: the entries it returns
 * are queued (or acknowledged with the next read when they match nothing),
 * the too-large ones reported, the gone ones dropped. On a failure they
 * stay pending and come back through the reclaim once idle long enough.
 */
static void recover(struct consumer *c, struct redis *r, const char *id, int n, struct idlist *fast)
{
	struct read_args a;
	read_args_fill(n, &a);
	const char *argv[] = {"2", c->stream, c->dlq, c->group, c->name, a.count, a.emax, a.ts, id};
	redisReply *rep = redis_script_run(r, &recover_script, (int)ARRAY_LEN(argv), argv, NULL);
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
	take_batch(c, r, rep->element[0]->element[1], true, fast, NULL);
	report_too_large(c, rep->element[1], true);
	drop_gone(c, r, rep->element[2]);
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
	if (ensure_conn(c, r) < 0)
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
	while (c->buffered - (int)nfast >= c->cfg.max_buffered && !atomic_load(&c->stop))
		timed_wait(&c->space, &c->lock, 500 * NS_PER_MS);
	/* Less than half the buffer free: wait a moment for the ACKs in
	 * flight to free more, so one read fetches a batch rather than a
	 * message or two (bench/consume). */
	if (c->cfg.max_buffered - (c->buffered - (int)nfast) < (c->cfg.max_buffered + 1) / 2 &&
	    !atomic_load(&c->stop))
		timed_wait(&c->space, &c->lock, READ_COALESCE_NS);
	int room = c->cfg.max_buffered - (c->buffered - (int)nfast);
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
 * One round trip: the XACK of the fast ones (if any), then XREADGROUP of at
 * most n new entries. Returns the read's reply, NULL on failure. The fast
 * ones' buffer slots are released either way: ACKed or, on a dropped
 * connection, left pending for the reclaim.
 */
static redisReply *reader_read(struct reader *rd, int n)
{
	struct consumer *c = rd->c;
	char count[16];
	snprintf_(count, sizeof count, "%d", n);
	const char *argv[] = {"XREADGROUP", "GROUP",   c->group,  c->name,   "COUNT", count,
			      "BLOCK",	    rd->block, "STREAMS", c->stream, ">"};
	if (rd->fast.n)
		append_xack(c, rd->r, (const char *const *)rd->fast.v, rd->fast.n);
	redisReply *rep = NULL;
	if (redis_append_argv(rd->r, (int)ARRAY_LEN(argv), argv, NULL) == 0) {
		if (rd->fast.n)
			reader_ack_reply(rd);
		if (redis_is_connected(rd->r))
			rep = read_reply(c, rd->r);
	}
	release_ids(c, (const char *const *)rd->fast.v, rd->fast.n);
	idlist_clear(&rd->fast);
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
		else if (!atomic_load(&c->stop) && !holding(c, ~0u))
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
		take_batch(c, rd->r, rep->element[0]->element[1], false, &rd->fast, &rd->over);
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
		append_xack(rd->c, rd->r, (const char *const *)rd->fast.v, rd->fast.n);
		redisReply *ack = redis_get_reply(rd->r, -1);
		if (ack)
			freeReplyObject(ack);
	}
	release_ids(rd->c, (const char *const *)rd->fast.v, rd->fast.n);
	idlist_clear(&rd->fast);
	free(rd->fast.v);
	free(rd->over.v);
	redis_free(rd->r);
}

static void *reader_main(void *arg)
{
	struct consumer *c = arg;
	struct reader rd = {.c = c, .r = conn_new(c, c->cfg.block_ms + 10000)};
	/* Every entry of a read bounded as sent (consumer.h, cost model). */
	redis_set_guard(rd.r, 3, CONSUMER_ENTRY_SENT_MAX, CONSUMER_ENTRY_SENT_ELEMENTS);
	snprintf_(rd.block, sizeof rd.block, "%d", c->cfg.block_ms);
	while (!atomic_load(&c->stop)) {
		gate_pass(c);
		if (atomic_load(&c->stop) || ensure_conn(c, rd.r) < 0)
			break;
		int room = reader_room(c, rd.fast.n);
		if (atomic_load(&c->stop))
			break;
		int n = read_count(c, room);
		reader_take(&rd, reader_read(&rd, n), n);
	}
	reader_finish(&rd);
	return NULL;
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
static void drop_gone(struct consumer *c, struct redis *r, const redisReply *gone)
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
	if (n > 0 && append_xack(c, r, ids, n) == 0) {
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
 * process holds already; returns how many. Like take_batch, the copies are
 * made (and the duplicates freed) outside the consumer lock, which is taken
 * once to check and queue them: checking and queueing under one hold, so a
 * message is never queued twice.
 */
static int take_reclaimed(struct consumer *c, const redisReply *entries)
{
	size_t n = entries->elements, k = 0;
	struct msg **ms = xcalloc(n + 1, sizeof *ms);
	for (size_t i = 0; i < n; i++) {
		size_t cost;
		struct msg *m = msg_from_entry(entries->element[i], &cost);
		if (m)
			ms[k++] = m;
	}
	int claimed = 0;
	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < k; i++) {
		/* One held already is still ours and in progress here: the
		 * running marker protects it; no second local copy (freed below). */
		if (held_locked(c, ms[i]->id))
			continue;
		log_debug(LOG_ATTRS("message_id", ms[i]->id), "message reclaimed");
		enqueue_locked(c, ms[i]);
		ms[i] = NULL;
		claimed++;
	}
	pthread_mutex_unlock(&c->lock);
	for (size_t i = 0; i < k; i++)
		msg_free(ms[i]);
	free(ms);
	return claimed;
}

static void reclaim_once(struct consumer *c, struct redis *r)
{
	char cursor[64] = "0-0", idle[32];
	snprintf_(idle, sizeof idle, "%" PRId64, (int64_t)(c->cfg.min_pending_idle_ns / NS_PER_MS));
	for (int rounds = 0; rounds < 100 && !atomic_load(&c->stop); rounds++) {
		pthread_mutex_lock(&c->lock);
		int room = c->cfg.max_buffered - c->buffered;
		pthread_mutex_unlock(&c->lock);
		if (room <= 0) {
			log_debug(NULL, "reclaim skipped: local buffer full");
			return;
		}
		struct read_args a;
		read_args_fill(read_count(c, room), &a);
		const char *argv[] = {"2",     c->stream, c->dlq, c->group, c->name,
				      a.count, a.emax,	  a.ts,	  idle,	    cursor};
		redisReply *rep =
			redis_script_run(r, &reclaim_script, (int)ARRAY_LEN(argv), argv, NULL);
		if (!rep) {
			log_warn(LOG_ATTRS("error", redis_errmsg(r)), "reclaim failed");
			return;
		}
		if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 4 ||
		    rep->element[0]->type != REDIS_REPLY_STRING ||
		    rep->element[1]->type != REDIS_REPLY_ARRAY ||
		    rep->element[2]->type != REDIS_REPLY_ARRAY ||
		    rep->element[3]->type != REDIS_REPLY_ARRAY) {
			log_warn(LOG_ATTRS("error",
					   rep->type == REDIS_REPLY_ERROR
						   ? rep->str
						   : "unexpected reply to the reclaim script"),
				 "reclaim failed");
			freeReplyObject(rep);
			return;
		}
		snprintf_(cursor, sizeof cursor, "%.*s", (int)rep->element[0]->len,
			  rep->element[0]->str);
		int claimed = take_reclaimed(c, rep->element[1]);
		report_too_large(c, rep->element[2], false);
		drop_gone(c, r, rep->element[3]);
		freeReplyObject(rep);
		if (claimed)
			log_debug(NULL, "reclaimed %d idle message(s)", claimed);
		if (strcmp(cursor, "0-0") == 0)
			return;
	}
}

static void *reclaim_main(void *arg)
{
	struct consumer *c = arg;
	struct redis *r = conn_new(c, 10000);
	while (!atomic_load(&c->stop)) {
		sleep_ms_interruptible(c->cfg.reclaim_interval_ns / NS_PER_MS, &c->stop);
		if (atomic_load(&c->stop) || ensure_conn(c, r) < 0)
			break;
		if (holding(c, ~0u))
			log_debug(NULL, "reclaim skipped: reading is on hold");
		else
			reclaim_once(c, r);
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
}

static void *sampler_main(void *arg)
{
	struct consumer *c = arg;
	struct redis *r = conn_new(c, 10000);
	while (!atomic_load(&c->stop)) {
		if (redis_is_connected(r) || redis_connect(r) == 0)
			sample_backlog(c, r);
		sleep_ms_interruptible(c->cfg.sample_interval_ns / NS_PER_MS, &c->stop);
	}
	redis_free(r);
	return NULL;
}

/* ---- acker ------------------------------------------------------------- */

static void ack_push(struct consumer *c, const char *id, const char *key)
{
	pthread_mutex_lock(&c->ack_lock);
	if (c->nacks == c->capacks) {
		c->capacks = c->capacks ? c->capacks * 2 : 64;
		c->acks = xrealloc(c->acks, c->capacks * sizeof *c->acks);
	}
	c->acks[c->nacks].id = xstrdup(id);
	c->acks[c->nacks].key = key ? xstrdup(key) : NULL;
	c->nacks++;
	pthread_cond_signal(&c->ack_cond);
	pthread_mutex_unlock(&c->ack_lock);
}

static void *acker_main(void *arg)
{
	struct consumer *c = arg;
	struct redis *r = conn_new(c, 10000);
	for (;;) {
		pthread_mutex_lock(&c->ack_lock);
		while (c->nacks == 0 && !c->ack_stop)
			timed_wait(&c->ack_cond, &c->ack_lock, 500 * NS_PER_MS);
		if (c->nacks == 0 && c->ack_stop) {
			pthread_mutex_unlock(&c->ack_lock);
			break;
		}
		struct ack *batch = c->acks;
		size_t n = c->nacks;
		c->acks = NULL;
		c->nacks = c->capacks = 0;
		pthread_mutex_unlock(&c->ack_lock);

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
			if (append_xack(c, r, ids, n) < 0 ||
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
		release_ids(c, ids, n);
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

/* ---- processing -------------------------------------------------------- */

/*
 * A message a worker took goes through process() in five phases, each a
 * function over one struct plan:
 *   decode   plan_decode: the event; malformed → DLQ; a scheduled
 *            occurrence must be genuine (occurrence_genuine);
 *   resolve  plan_resolve: its targets (resolve_work); an obsolete
 *            occurrence or an unmatched event is acknowledged here;
 *   load     plan_load: its invocation state, one marker per target;
 *   run      plan_run: each target in order (run_target: matched line,
 *            eligibility, slot, claim, invoke, record) until one does not
 *            succeed;
 *   settle   plan_settle: ACK / DLQ / leave pending.
 */

/* The last `event` field of a message (its payload as text), or NULL. */
static const char *payload_of(const struct msg *m, size_t *len)
{
	const char *p = NULL;
	for (size_t i = 0; i + 1 < m->nfields; i += 2) {
		if (m->fields[i] && m->lens[i] == 5 && memcmp(m->fields[i], "event", 5) == 0) {
			p = m->fields[i + 1];
			*len = m->lens[i + 1];
		}
	}
	return p;
}

/* How a DLQ write ended (invocation_dead_letter's result and *written). */
enum dlq_result {
	DLQ_WRITTEN,	 /* written and acknowledged */
	DLQ_NOT_PENDING, /* the message was no longer pending: nothing written */
	DLQ_FAILED,	 /* the write failed: it stays pending, a later reclaim retries it */
};

/*
 * Writes m's DLQ entry: the spec's fields, then `function` and `handler`
 * (the exhausted invocation; "" when none ran: a malformed or forged
 * event), then `relay_replays` and `relay_replay_of` when the message
 * carried them (a replayed message: relay dlq replay counts on them).
 */
static enum dlq_result dead_letter(struct consumer *c, struct redis *r, const struct msg *m,
				   const char *payload, size_t plen, const char *reason,
				   int attempts, const char *function, const char *handler)
{
	char ts[RFC3339_STR_MAX], att[16];
	char *why = NULL;
	rfc3339_format_utc(now_wall_ns(), ts);
	snprintf_(att, sizeof att, "%d", attempts);
	enum { EVENT_VALUE = 9, FIXED = 20 }; /* the payload: binary-safe, its own length */
	/* clang-format off */
	const char *entry[FIXED + 4] = {
		"original_stream", c->stream,
		"original_id", m->id,
		"group", c->group,
		"consumer", c->name,
		"event", payload ? payload : "",
		"reason", reason,
		"attempts", att,
		"timestamp", ts,
		"function", function ? function : "",
		"handler", handler ? handler : "",
	};
	/* clang-format on */
	size_t lens[FIXED + 4], n = FIXED;
	for (size_t i = 0; i < FIXED; i++)
		lens[i] = i == EVENT_VALUE ? (payload ? plen : 0) : strlen(entry[i]);
	static const char *const carried[] = {"relay_replays", "relay_replay_of"};
	for (size_t k = 0; k < ARRAY_LEN(carried); k++) {
		size_t vlen = 0;
		const char *v = msg_field(m, carried[k], &vlen);
		if (!v)
			continue;
		entry[n] = carried[k];
		lens[n++] = strlen(carried[k]);
		entry[n] = v;
		lens[n++] = vlen;
	}
	bool written = false;
	int rc = -1;
	if (ensure_conn(c, r) == 0)
		rc = invocation_dead_letter(r, c->stream, c->group, c->dlq, m->id, entry, lens, n,
					    &written, &why);
	else
		why = xstrdup(redis_errmsg(r));
	if (rc == 0 && !written)
		log_debug(LOG_ATTRS("message_id", m->id),
			  "message acknowledged meanwhile; not dead-lettered again");
	else if (rc < 0)
		log_error(LOG_ATTRS("message_id", m->id, "dlq", c->dlq, "error", why),
			  "DLQ write failed; the message stays pending and the write is retried");
	free(why);
	return rc < 0 ? DLQ_FAILED : written ? DLQ_WRITTEN : DLQ_NOT_PENDING;
}

/* What became of one target's invocation: as loaded, then as this
 * delivery left it. */
enum inv_state { INV_PENDING, INV_OK, INV_EXHAUSTED };

/* One invocation of a message's work list, in execution order. */
struct target {
	/* From resolve_work (borrowed from the plan's snapshot): */
	const struct fn_version *fv;
	const char *handler;
	int64_t timeout_ns;
	int retries;
	/* From plan_load: */
	char *field;	      /* "<function>/<handler>" in the invocation hash */
	struct marker loaded; /* its marker as loaded for this delivery */
	char *raw;	      /* the field's current value, for compare-and-set; NULL: absent */
	enum inv_state state;
};

/*
 * One message's work, phase by phase (see above). Owns everything it points
 * to except m (the worker's) and what the targets borrow from snap, held
 * until plan_free.
 */
struct plan {
	struct msg *m;
	const char *payload; /* the last `event` field, borrowed from m */
	size_t plen;
	struct event *ev;
	bool scheduled;		     /* a genuine scheduled occurrence */
	struct schedule_route route; /* when scheduled (borrows from ev) */
	char *sched_stdin;	     /* when scheduled: the handler's payload */
	struct snapshot *snap;
	struct target *t;
	size_t n;
	const char *event_id, *event_name; /* may be NULL */
	char *key;			   /* invocation-state key */
	char last_error[600];		   /* the last failed invocation's error */
	/* Progress, so that a parked plan resumes where it stopped: */
	size_t cur;	    /* the target running (plan_run) */
	bool said;	    /* its "matched" line is printed */
	int attempt;	    /* its attempt number, when parked */
	bool slotted;	    /* resumed holding its slot: goes on at the claim */
	struct plan *dnext; /* on the deferred list */
};

/* function_events_total: once per message and matched function, counted
 * when the message is done (ACKed or dead-lettered), not per delivery.
 * Never for scheduled occurrences. */
static void count_function_events(const struct target *t, size_t n)
{
	const char *last = NULL;
	for (size_t i = 0; i < n; i++) {
		const char *f = t[i].fv->fn->name;
		if (!last || strcmp(last, f) != 0)
			metrics_function_event(f);
		last = f;
	}
}

/* The counters of a message done with (ACKed or dead-lettered): none for a
 * scheduled occurrence. */
static void count_done(const struct plan *p)
{
	if (p->scheduled)
		return;
	count_function_events(p->t, p->n);
	metrics_inc(METRIC_EVENTS_PROCESSED);
}

/* A top-level string field of the event, for logs and labels. */
static const char *event_str(const struct event *ev, const char *key)
{
	const struct event_value *v = event_get(event_root(ev), key, strlen(key));
	return v && v->type == EVENT_STRING ? v->u.str : NULL;
}

/*
 * What a message runs. A scheduled occurrence (route non-NULL) runs its
 * function's schedule handler, found by name in snap, never through
 * pattern matching; *obsolete is set when the function or the handler is
 * gone. An event runs its matching rules in execution order. Returns the
 * number of targets in *out (a new array, even when empty).
 */
static size_t resolve_work(const struct snapshot *snap, const struct event *ev,
			   const struct schedule_route *route, struct target **out, bool *obsolete)
{
	*obsolete = false;
	if (route) {
		*out = xcalloc(1, sizeof **out);
		const struct fn_version *fv = snapshot_find(snap, route->function);
		const struct schedule *sc = schedule_find(fv, route->handler);
		if (!sc) {
			*obsolete = true;
			return 0;
		}
		(*out)[0] = (struct target){.fv = fv,
					    .handler = sc->handler,
					    .timeout_ns = sc->timeout_ns,
					    .retries = sc->retries};
		return 1;
	}
	uint32_t *ids = xcalloc(snap->nrules + 1, sizeof *ids);
	size_t n = pattern_set_match(snap->set, ev, now_wall_ns(), ids);
	*out = xcalloc(n + 1, sizeof **out);
	for (size_t i = 0; i < n; i++) {
		const struct rule_ref *rr = &snap->rules[ids[i]];
		(*out)[i] = (struct target){.fv = rr->fv,
					    .handler = rr->rule->handler,
					    .timeout_ns = rr->rule->timeout_ns,
					    .retries = rr->rule->retries};
	}
	free(ids);
	return n;
}

/*
 * A message that claims to be a scheduled occurrence runs only once proven
 * genuine (schedule.h: schedule_envelope_check, schedule_verify). Returns
 * true with *route filled when it is; false when it was dealt with here:
 * dead-lettered as forged (never run), or left pending when it could not
 * be checked (Redis error: retried by a later reclaim, never run
 * unverified).
 */
static bool occurrence_genuine(struct consumer *c, struct redis *r, struct msg *m,
			       const struct event *ev, struct schedule_route *route,
			       const char *payload, size_t plen)
{
	char *why = NULL;
	enum schedule_verdict g = schedule_envelope_check(ev, route, &why);
	if (g == SCHEDULE_GENUINE)
		g = ensure_conn(c, r) < 0 ? SCHEDULE_VERIFY_FAILED
					  : schedule_verify(r, c->stream, route, &why);
	if (g == SCHEDULE_GENUINE)
		return true;
	if (g == SCHEDULE_VERIFY_FAILED) {
		log_warn(LOG_ATTRS("message_id", m->id, "error", why ? why : redis_errmsg(r)),
			 "cannot verify a scheduled occurrence; it stays pending");
	} else if (dead_letter(c, r, m, payload, plen, "forged schedule occurrence", 0, NULL,
			       NULL) == DLQ_WRITTEN) {
		log_warn(LOG_ATTRS("message_id", m->id, "reason", why),
			 "forged schedule occurrence sent to the dead-letter stream without "
			 "running any handler");
		metrics_inc(METRIC_DLQ_ENTRIES);
	}
	free(why);
	release(c, m->id);
	return false;
}

/*
 * Decode: the event (the reader decoded it when it matched something
 * there). A malformed one is dead-lettered with the reason; a scheduled
 * occurrence must be genuine. False when the message was dealt with here.
 */
static bool plan_decode(struct consumer *c, struct redis *r, struct plan *p)
{
	struct msg *m = p->m;
	p->payload = payload_of(m, &p->plen);
	p->ev = m->ev;
	m->ev = NULL;
	char *why = NULL;
	int derr = p->ev ? EVENT_OK
			 : event_decode((const char *const *)m->fields, m->lens, m->nfields, &p->ev,
					&why);
	if (derr != EVENT_OK) {
		char reason[600];
		snprintf_(reason, sizeof reason, "malformed event (%s): %s", event_err_name(derr),
			  why ? why : "");
		free(why);
		if (dead_letter(c, r, m, p->payload, p->plen, reason, 0, NULL, NULL) ==
		    DLQ_WRITTEN) {
			log_warn(LOG_ATTRS("message_id", m->id, "reason", reason),
				 "malformed event sent to the dead-letter stream without running "
				 "any handler");
			metrics_inc(METRIC_DLQ_ENTRIES);
			metrics_inc(METRIC_EVENTS_PROCESSED);
		}
		release(c, m->id);
		return false;
	}
	p->scheduled = schedule_claimed(p->ev);
	if (p->scheduled && !occurrence_genuine(c, r, m, p->ev, &p->route, p->payload, p->plen))
		return false;
	/* A scheduled handler reads the occurrence's payload, not the entry. */
	if (p->scheduled)
		p->sched_stdin = schedule_payload(p->route.at_s);
	return true;
}

/*
 * Resolve: what the message runs, from the registry snapshot held until
 * plan_free. False when there is nothing to run, acknowledged here: a
 * scheduled occurrence whose function or schedule handler is gone
 * (obsolete), or an event no rule matches.
 */
static bool plan_resolve(struct consumer *c, struct plan *p)
{
	struct msg *m = p->m;
	bool obsolete = false;
	p->snap = registry_acquire(c->cfg.registry);
	p->n = resolve_work(p->snap, p->ev, p->scheduled ? &p->route : NULL, &p->t, &obsolete);
	/* A scheduled occurrence's event id is its occurrence id. */
	p->event_id = p->scheduled ? p->route.occurrence_id : event_str(p->ev, "event_id");
	p->event_name = p->scheduled ? NULL : event_str(p->ev, "event_name");
	if (obsolete) {
		/* Removed on purpose: terminal, never retried or dead-lettered.
		 * Any state from an earlier delivery goes with the ACK. */
		log_info(LOG_ATTRS("function", p->route.function, "handler", p->route.handler,
				   "message_id", m->id, "occurrence_id",
				   p->event_id ? p->event_id : ""),
			 "scheduled occurrence obsolete: its function or schedule handler no "
			 "longer exists; acknowledging");
		p->key = invocation_key(c->stream, c->group, m->id);
		ack_push(c, m->id, p->key);
		return false;
	}
	if (p->n == 0) {
		log_debug(LOG_ATTRS("message_id", m->id), "no rule matched; acknowledging");
		metrics_inc(METRIC_EVENTS_PROCESSED);
		ack_push(c, m->id, NULL);
		return false;
	}
	return true;
}

/* Load: the message's invocation state, one marker per target. Fails
 * open: an unreadable state is treated as empty. A fresh message (struct
 * msg) has none: no round trip. */
static void plan_load(struct consumer *c, struct redis *r, struct plan *p)
{
	if (!p->key)
		p->key = invocation_key(c->stream, c->group, p->m->id);
	struct invocation_state st = {0};
	bool up = ensure_conn(c, r) == 0;
	if (up && p->m->fresh) {
		/* nothing to read */
	} else if (!up || invocation_state_load(r, p->key, &st) < 0) {
		log_warn(LOG_ATTRS("message_id", p->m->id, "error", redis_errmsg(r)),
			 "cannot read invocation state; treating it as empty");
		memset(&st, 0, sizeof st);
	}
	for (size_t i = 0; i < p->n; i++) {
		struct target *t = &p->t[i];
		if (!t->field)
			t->field = xasprintf("%s/%s", t->fv->fn->name, t->handler);
		free(t->raw);
		t->raw = NULL;
		t->loaded = invocation_state_get(&st, t->field);
		t->state = t->loaded.kind == MARK_OK	      ? INV_OK
			   : t->loaded.kind == MARK_EXHAUSTED ? INV_EXHAUSTED
							      : INV_PENDING;
		for (size_t k = 0; k < st.n; k++)
			if (strcmp(st.fields[k], t->field) == 0) {
				free(t->raw);
				t->raw = xstrdup(st.values[k]);
			}
	}
	invocation_state_free(&st);
}

/* A field's value is now value (NULL: absent), for every target sharing
 * it (a rule repeating an earlier rule's handler). */
static void plan_set_raw(struct plan *p, const char *field, const char *value)
{
	for (size_t k = 0; k < p->n; k++)
		if (strcmp(p->t[k].field, field) == 0) {
			free(p->t[k].raw);
			p->t[k].raw = value ? xstrdup(value) : NULL;
		}
}

/*
 * How running one target ended. Only TARGET_DONE_BEFORE and
 * TARGET_SUCCEEDED let the next target run (abort on first failure).
 */
enum target_outcome {
	TARGET_GO_ON,		  /* between run_target's steps only: the next step runs */
	TARGET_DONE_BEFORE,	  /* succeeded on an earlier delivery: skipped */
	TARGET_SUCCEEDED,	  /* ran and succeeded */
	TARGET_FAILED,		  /* ran and failed: retried later, or exhausted */
	TARGET_EXHAUSTED_BEFORE,  /* exhausted on an earlier delivery: terminal */
	TARGET_NOT_ELIGIBLE,	  /* running elsewhere or backing off */
	TARGET_DEFERRED,	  /* no slot free: the plan is parked (deferred list) */
	TARGET_RELOADED,	  /* a fresh message's claim lost: state loaded, look again */
	TARGET_ACKED_MEANWHILE,	  /* the message is no longer pending */
	TARGET_CLAIMED_ELSEWHERE, /* another worker changed the marker first */
	TARGET_CANCELLED,	  /* interrupted by shutdown: not an attempt */
	TARGET_UNAVAILABLE,	  /* the daemon was unreachable: not an attempt, runs again */
};

/* The claim, invocation_try_start's 1 / 0 / 2 / -1. */
enum claim {
	CLAIM_TAKEN,	  /* the running marker is written */
	CLAIM_LOST,	  /* someone else changed the marker first */
	CLAIM_ACKED,	  /* the message was acknowledged meanwhile */
	CLAIM_UNRECORDED, /* a Redis error: runs anyway (bookkeeping fails open) */
};

static enum claim claim_invocation(struct consumer *c, struct redis *r, const struct plan *p,
				   const struct target *t, const char *next)
{
	/* A plan resumed from the deferred list comes here on another
	 * worker's connection, maybe never connected yet. */
	int rc = ensure_conn(c, r) < 0 ? -1
				       : invocation_try_start(r, p->key, t->field, t->raw, next,
							      c->stream, c->group, p->m->id);
	return rc < 0	 ? CLAIM_UNRECORDED
	       : rc == 0 ? CLAIM_LOST
	       : rc == 2 ? CLAIM_ACKED
			 : CLAIM_TAKEN;
}

/*
 * Whether a target may run in this delivery, from its state as loaded (a
 * rule repeating an earlier rule's handler in this delivery still runs:
 * no deduplication). Complete on an earlier delivery: skipped. Exhausted
 * is terminal and, invocations being sequential, leaves every later target
 * unrunnable: the message is routed to the DLQ. TARGET_GO_ON with
 * *attempt set when it may run.
 */
static enum target_outcome target_ready(struct plan *p, const struct target *t, int *attempt)
{
	const char *fname = t->fv->fn->name, *handler = t->handler, *id = p->m->id;
	if (!p->said)
		log_say(fname, p->scheduled ? "schedule" : "rule", handler, " matched event \"%s\"",
			id);
	p->said = true;
	if (t->state == INV_OK) {
		log_say(fname, "handler", handler, " already succeeded for event \"%s\"; skipping",
			id);
		return TARGET_DONE_BEFORE;
	}
	if (t->state == INV_EXHAUSTED) {
		log_say(fname, "handler", handler, " exhausted for event \"%s\"; skipping", id);
		return TARGET_EXHAUSTED_BEFORE;
	}
	struct marker mk = t->loaded;
	int64_t now = now_wall_ns();
	if (!marker_eligible(&mk, now)) {
		/* Whole seconds, rounded up: "eligible in 0s" would read as
		 * eligible. */
		char in[DURATION_STR_MAX];
		int64_t left = mk.deadline_ns - now;
		left = (left + NS_PER_SEC - 1) / NS_PER_SEC * NS_PER_SEC;
		log_say(fname, "handler", handler,
			" not eligible for event \"%s\" (running or waiting for retry; "
			"eligible in %s)",
			id, duration_format(left, in));
		log_debug(LOG_ATTRS("function", fname, "handler", handler, "message_id", id,
				    "marker", t->raw ? t->raw : ""),
			  "invocation running elsewhere or backing off; leaving the "
			  "message pending");
		return TARGET_NOT_ELIGIBLE;
	}
	*attempt = (mk.kind == MARK_RUNNING || mk.kind == MARK_NEXT_ATTEMPT) ? mk.attempts + 1 : 1;
	log_debug(LOG_ATTRS("function", fname, "handler", handler, "message_id", id, "event_id",
			    p->event_id ? p->event_id : "", "event_name",
			    p->event_name ? p->event_name : ""),
		  p->scheduled ? "scheduled occurrence" : "rule matched");
	return TARGET_GO_ON;
}

/*
 * A concurrency slot of the target's function, without waiting: taken
 * (TARGET_GO_ON), or the plan is parked on the deferred list
 * (TARGET_DEFERRED: from then on another worker may resume it at any
 * moment, so the caller touches p no more). While older plans are parked
 * this one parks behind them, so the oldest runnable goes first
 * (deferred_take_locked).
 */
static enum target_outcome target_slot(struct consumer *c, struct plan *p, const struct target *t,
				       int attempt)
{
	const char *fname = t->fv->fn->name;
	int limit = (int)t->fv->fn->tpl->concurrency;
	pthread_mutex_lock(&c->lock);
	if (!c->dhead && slots_try_acquire(c->slots, fname, limit) == 0) {
		pthread_mutex_unlock(&c->lock);
		return TARGET_GO_ON;
	}
	metrics_inc(METRIC_CONCURRENCY_WAITS);
	log_debug(LOG_ATTRS("function", fname, "handler", t->handler, "message_id", p->m->id),
		  "no concurrency slot free; the invocation waits locally for one");
	p->attempt = attempt;
	p->dnext = NULL;
	if (c->dtail)
		c->dtail->dnext = p;
	else
		c->dhead = p;
	c->dtail = p;
	c->ndeferred++;
	slots_defer(c->slots, fname, limit, 1);
	pthread_mutex_unlock(&c->lock);
	return TARGET_DEFERRED;
}

/* The oldest parked plan whose function can take a slot now, unlinked,
 * holding that slot (slotted); NULL when none can. Lock held. */
static struct plan *deferred_take_locked(struct consumer *c)
{
	struct plan *prev = NULL;
	for (struct plan *p = c->dhead; p; prev = p, p = p->dnext) {
		const struct fn_version *fv = p->t[p->cur].fv;
		int limit = (int)fv->fn->tpl->concurrency;
		if (slots_try_acquire(c->slots, fv->fn->name, limit) < 0)
			continue;
		if (prev)
			prev->dnext = p->dnext;
		else
			c->dhead = p->dnext;
		if (c->dtail == p)
			c->dtail = prev;
		p->dnext = NULL;
		c->ndeferred--;
		slots_defer(c->slots, fv->fn->name, limit, -1);
		p->slotted = true;
		return p;
	}
	return NULL;
}

/* slots_on_release: a slot is free, a parked plan may take it. */
static void slot_released(void *arg)
{
	struct consumer *c = arg;
	pthread_mutex_lock(&c->lock);
	if (c->dhead)
		pthread_cond_signal(&c->work);
	pthread_mutex_unlock(&c->lock);
}

/*
 * Claims the target with its running marker (compare-and-set on the value
 * as last seen); a lost claim gives the slot back. *prev: the marker it
 * replaced (NULL: absent), to put back if shutdown cancels the run.
 */
static void plan_load(struct consumer *c, struct redis *r, struct plan *p);

static enum target_outcome target_claim(struct consumer *c, struct redis *r, struct plan *p,
					const struct target *t, int attempt, char **prev)
{
	const char *fname = t->fv->fn->name;
	/* The deadline counts from now (after any slot wait) and outlives
	 * every path the invocation can take (invocation_running_deadline,
	 * runner.h "Time bounds"), so no reclaim runs it concurrently. */
	struct marker running = {
		MARK_RUNNING, invocation_running_deadline(now_wall_ns(), t->timeout_ns), attempt};
	char next[64];
	marker_format(&running, next, sizeof next);
	enum claim cl = claim_invocation(c, r, p, t, next);
	if (cl == CLAIM_LOST && p->m->fresh) {
		/* A state key from an earlier life of the group: load it now
		 * (no longer fresh) and look at the target again. */
		slots_release(c->slots, fname);
		p->m->fresh = false;
		plan_load(c, r, p);
		return TARGET_RELOADED;
	}
	if (cl == CLAIM_ACKED || cl == CLAIM_LOST) {
		slots_release(c->slots, fname);
		log_debug(
			LOG_ATTRS("function", fname, "handler", t->handler, "message_id", p->m->id),
			cl == CLAIM_ACKED
				? "message acknowledged meanwhile; dropping the local copy"
				: "invocation claimed by another worker; leaving the message "
				  "pending");
		return cl == CLAIM_ACKED ? TARGET_ACKED_MEANWHILE : TARGET_CLAIMED_ELSEWHERE;
	}
	if (cl == CLAIM_UNRECORDED)
		log_warn(LOG_ATTRS("function", fname, "handler", t->handler, "message_id", p->m->id,
				   "error", redis_errmsg(r)),
			 "cannot record the running marker; running anyway");
	*prev = t->raw ? xstrdup(t->raw) : NULL;
	plan_set_raw(p, t->field, next);
	return TARGET_GO_ON;
}

/* A finished invocation's log attributes (attrs points into the struct). */
struct run_attrs {
	char att[16], dur[DURATION_STR_MAX], code[16];
	const char *attrs[17];
};

/* Runs the handler (cfg.invoke) in the claimed slot, then gives the slot
 * back. Returns how long it took, in seconds (handler metrics). */
static double target_invoke(struct consumer *c, const struct plan *p, const struct target *t,
			    int attempt, struct invoke_result *out, struct run_attrs *a)
{
	struct invoke_request req = {
		.fv = t->fv,
		.handler = t->handler,
		.timeout_ns = t->timeout_ns,
		.payload = p->sched_stdin ? p->sched_stdin : p->payload,
		.payload_len = p->sched_stdin ? strlen(p->sched_stdin) : p->plen,
		.message_id = p->m->id,
		.event_id = p->event_id,
		.event_name = p->event_name,
		.attempt = attempt,
	};
	int64_t t0 = now_mono_ns();
	metrics_gauge_add(METRIC_IN_FLIGHT, 1);
	c->cfg.invoke(c->cfg.invoke_ctx, &req, out);
	/* A cancelled or unrun one leaves the gauge up until its marker is
	 * back (target_record). */
	if (out->outcome != INVOKE_CANCELLED && out->outcome != INVOKE_UNAVAILABLE)
		metrics_gauge_add(METRIC_IN_FLIGHT, -1);
	double secs = (double)(now_mono_ns() - t0) / 1e9;
	slots_release(c->slots, t->fv->fn->name);
	duration_format((now_mono_ns() - t0) / NS_PER_MS * NS_PER_MS, a->dur);
	snprintf_(a->att, sizeof a->att, "%d", attempt);
	snprintf_(a->code, sizeof a->code, "%d", out->exit_code);
	const char *const attrs[] = {"function",   t->fv->fn->name,
				     "handler",	   t->handler,
				     "message_id", p->m->id,
				     "event_id",   p->event_id ? p->event_id : "",
				     "event_name", p->event_name ? p->event_name : "",
				     "attempt",	   a->att,
				     "duration",   a->dur,
				     "exit_code",  a->code,
				     NULL};
	_Static_assert(ARRAY_LEN(attrs) == ARRAY_LEN(a->attrs), "run_attrs.attrs");
	memcpy(a->attrs, attrs, sizeof attrs);
	return secs;
}

/* The marker a finished (not cancelled) invocation leaves, with its
 * metrics and logs: ok, the next attempt's backoff, or exhausted. */
static struct marker target_judge(struct consumer *c, struct plan *p, struct target *t, int attempt,
				  const struct invoke_result *out, double secs,
				  const char *const *attrs)
{
	const char *fname = t->fv->fn->name, *handler = t->handler;
	struct marker after = {MARK_OK, 0, attempt};
	if (out->outcome == INVOKE_OK) {
		metrics_handler_invocation(fname, handler, METRIC_OUTCOME_SUCCESS, secs);
		log_say(fname, "handler", handler, " executed for event \"%s\"", p->m->id);
		log_debug(attrs, "handler executed");
		t->state = INV_OK;
		return after;
	}
	metrics_handler_invocation(fname, handler,
				   out->outcome == INVOKE_TIMEOUT ? METRIC_OUTCOME_TIMEOUT
								  : METRIC_OUTCOME_FAILURE,
				   secs);
	snprintf_(p->last_error, sizeof p->last_error, "%s", out->error);
	log_say(fname, "handler", handler, " execution failed for event \"%s\": %s", p->m->id,
		out->error);
	if (attempt >= 1 + t->retries) {
		after.kind = MARK_EXHAUSTED;
		t->state = INV_EXHAUSTED;
		log_debug(attrs, "handler failed; attempts exhausted: %s", out->error);
	} else {
		after.kind = MARK_NEXT_ATTEMPT;
		int64_t b = invocation_backoff_ns(attempt, c->cfg.backoff_ns);
		after.deadline_ns = now_wall_ns() + b;
		char bs[DURATION_STR_MAX];
		log_debug(attrs, "handler failed; retrying in %s: %s", duration_format(b, bs),
			  out->error);
	}
	return after;
}

/*
 * Records what the invocation came to. Cancelled by shutdown: not an
 * attempt, the marker it replaced (prev) is put back so the next delivery
 * runs it with the same number. Otherwise its outcome marker.
 */
static enum target_outcome target_record(struct consumer *c, struct redis *r, struct plan *p,
					 struct target *t, int attempt, const char *prev,
					 const struct invoke_result *out, double secs,
					 const char *const *attrs)
{
	if (out->outcome == INVOKE_CANCELLED || out->outcome == INVOKE_UNAVAILABLE) {
		if (invocation_restore(r, p->key, t->field, prev) < 0)
			log_warn(attrs, "cannot restore the invocation marker");
		plan_set_raw(p, t->field, prev);
		if (out->outcome == INVOKE_CANCELLED)
			log_info(attrs,
				 "invocation cancelled by shutdown; the message stays pending");
		else
			log_info(attrs, "invocation not run: the Docker daemon is unreachable; it "
					"runs once the daemon answers");
		/* Only now: after a second signal, relay start exits once this
		 * gauge is 0, so the marker must be back first. */
		metrics_gauge_add(METRIC_IN_FLIGHT, -1);
		return out->outcome == INVOKE_CANCELLED ? TARGET_CANCELLED : TARGET_UNAVAILABLE;
	}
	struct marker after = target_judge(c, p, t, attempt, out, secs, attrs);
	char mark[64];
	marker_format(&after, mark, sizeof mark);
	if (invocation_set(r, p->key, t->field, mark) < 0)
		log_warn(LOG_ATTRS("function", t->fv->fn->name, "handler", t->handler, "message_id",
				   p->m->id, "error", redis_errmsg(r)),
			 "cannot record the invocation outcome");
	plan_set_raw(p, t->field, mark);
	return out->outcome == INVOKE_OK ? TARGET_SUCCEEDED : TARGET_FAILED;
}

/* One target: matched line, eligibility, slot, claim, invoke, record. */
static enum target_outcome run_target_once(struct consumer *c, struct redis *r, struct plan *p,
					   struct target *t)
{
	int attempt = 1;
	char *prev = NULL;
	/* Resumed from the deferred list: ready, holding its slot. */
	bool resumed = p->slotted;
	p->slotted = false;
	if (resumed)
		attempt = p->attempt;
	enum target_outcome o;
	do {
		o = resumed ? TARGET_GO_ON : target_ready(p, t, &attempt);
		if (o == TARGET_GO_ON && !resumed)
			o = target_slot(c, p, t, attempt);
		if (o == TARGET_DEFERRED)
			return o; /* p is the deferred list's now */
		resumed = false;
		if (o == TARGET_GO_ON)
			o = target_claim(c, r, p, t, attempt, &prev);
	} while (o == TARGET_RELOADED);
	if (o != TARGET_GO_ON)
		return o;
	if (attempt > 1)
		metrics_function_retry(t->fv->fn->name);
	struct invoke_result out = {INVOKE_FAILED, -1, ""};
	struct run_attrs a;
	double secs = target_invoke(c, p, t, attempt, &out, &a);
	o = target_record(c, r, p, t, attempt, prev, &out, secs, a.attrs);
	free(prev);
	return o;
}

/* Run: the targets in order until one does not succeed (abort on first
 * failure) or the consumer stops. */
/* run_target_once, again after each time the daemon was unreachable, once
 * it answers (the reader's probe); at stop, cancelled. */
static enum target_outcome run_target(struct consumer *c, struct redis *r, struct plan *p,
				      struct target *t)
{
	for (;;) {
		enum target_outcome o = run_target_once(c, r, p, t);
		if (o != TARGET_UNAVAILABLE)
			return o;
		p->said = false; /* its run again says "matched" again */
		if (!c->cfg.ready)
			return TARGET_CANCELLED;
		consumer_hold(c, CONSUMER_HOLD_DOCKER, true);
		if (!docker_wait(c))
			return TARGET_CANCELLED;
	}
}

/* From p->cur on. True when the plan was parked (the deferred list owns
 * it now: the caller touches it no more). */
static bool plan_run(struct consumer *c, struct redis *r, struct plan *p)
{
	while (p->cur < p->n && !atomic_load(&c->stop)) {
		enum target_outcome o = run_target(c, r, p, &p->t[p->cur]);
		if (o == TARGET_DEFERRED)
			return true;
		if (o != TARGET_DONE_BEFORE && o != TARGET_SUCCEEDED)
			break;
		p->cur++;
		p->said = false;
	}
	if (p->slotted) { /* resumed at stop: never claimed */
		slots_release(c->slots, p->t[p->cur].fv->fn->name);
		p->slotted = false;
	}
	return false;
}

/* An exhausted target (first, the first not complete) routes the message
 * to the DLQ, with what its last failure said. */
static void plan_dead_letter(struct consumer *c, struct redis *r, struct plan *p,
			     const struct target *first)
{
	struct marker mk =
		marker_parse(first->raw ? first->raw : "", first->raw ? strlen(first->raw) : 0);
	int max_attempts = mk.kind == MARK_EXHAUSTED ? mk.attempts : 0;
	struct buf reason;
	buf_init(&reason, 4096);
	buf_appendf(&reason, "%s exhausted after %d attempt(s)", first->field, max_attempts);
	if (p->last_error[0])
		buf_appendf(&reason, ": %s", p->last_error);
	if (dead_letter(c, r, p->m, p->payload, p->plen, reason.data ? reason.data : "exhausted",
			max_attempts, first->fv->fn->name, first->handler) == DLQ_WRITTEN) {
		log_error(LOG_ATTRS("message_id", p->m->id, "event_id",
				    p->event_id ? p->event_id : "", "reason",
				    reason.data ? reason.data : ""),
			  "message sent to the dead-letter stream");
		for (size_t i = 0; i < p->n; i++)
			if (p->t[i].state == INV_EXHAUSTED)
				metrics_function_dlq(p->t[i].fv->fn->name);
		count_done(p);
	}
	release(c, p->m->id);
	buf_free(&reason);
}

/*
 * Settle: the first target (in execution order) that is not complete
 * decides: none → ACK (and DEL of the state); exhausted → DLQ (nothing
 * after it can run); otherwise the message stays pending.
 */
static void plan_settle(struct consumer *c, struct redis *r, struct plan *p)
{
	const struct target *first = NULL;
	for (size_t i = 0; i < p->n && !first; i++)
		if (p->t[i].state != INV_OK)
			first = &p->t[i];
	if (!first) {
		count_done(p);
		ack_push(c, p->m->id, p->key);
	} else if (first->state == INV_EXHAUSTED) {
		plan_dead_letter(c, r, p, first);
	} else {
		release(c, p->m->id);
	}
}

/* Frees the plan and its message. */
static void plan_free(struct consumer *c, struct plan *p)
{
	for (size_t i = 0; i < p->n; i++) {
		free(p->t[i].field);
		free(p->t[i].raw);
	}
	free(p->t);
	free(p->key);
	free(p->sched_stdin);
	if (p->snap)
		registry_release(c->cfg.registry, p->snap);
	event_free(p->ev);
	msg_free(p->m);
	free(p);
}

/* A message taken from the buffer (owned from here on). */
static void process(struct consumer *c, struct redis *r, struct msg *m)
{
	struct plan *p = xcalloc(1, sizeof *p);
	p->m = m;
	if (plan_decode(c, r, p) && plan_resolve(c, p)) {
		plan_load(c, r, p);
		if (plan_run(c, r, p))
			return;
		plan_settle(c, r, p);
	}
	plan_free(c, p);
}

/* A plan taken from the deferred list, holding its slot. */
static void resume(struct consumer *c, struct redis *r, struct plan *p)
{
	if (plan_run(c, r, p))
		return;
	plan_settle(c, r, p);
	plan_free(c, p);
}

static void *worker_main(void *arg)
{
	struct consumer *c = arg;
	struct redis *r = conn_new(c, 10000);
	for (;;) {
		/* A parked plan that can take a slot now goes before new
		 * messages. */
		struct plan *p = NULL;
		struct msg *m = NULL;
		pthread_mutex_lock(&c->lock);
		while (!atomic_load(&c->stop)) {
			if (c->dhead && (p = deferred_take_locked(c)))
				break;
			if (c->head) {
				m = c->head;
				c->head = m->next;
				if (!c->head)
					c->tail = NULL;
				break;
			}
			timed_wait(&c->work, &c->lock, 500 * NS_PER_MS);
		}
		pthread_mutex_unlock(&c->lock);
		if (p)
			resume(c, r, p);
		else if (m)
			process(c, r, m);
		else
			break;
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
	pthread_once(&scripts_once, scripts_init);
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->ack_lock, NULL);
	pthread_mutex_init(&c->gate_lock, NULL);
	cond_init_monotonic(&c->gate_cond);
	cond_init_monotonic(&c->work);
	cond_init_monotonic(&c->space);
	cond_init_monotonic(&c->ack_cond);
	c->slots = c->cfg.slots ? c->cfg.slots : slots_new(c->cfg.max_concurrency);
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
	start_thread(&c->reader, "reader", reader_main, c);
	start_thread(&c->reclaimer, "reclaim", reclaim_main, c);
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
	pthread_mutex_unlock(&c->lock);
	pthread_mutex_lock(&c->gate_lock);
	pthread_cond_broadcast(&c->gate_cond);
	pthread_mutex_unlock(&c->gate_lock);
	slots_wake(c->slots);
	pthread_join(c->reader, NULL);
	pthread_join(c->reclaimer, NULL);
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
	while (c->dhead) {
		struct plan *p = c->dhead;
		c->dhead = p->dnext;
		const struct fn_version *fv = p->t[p->cur].fv;
		slots_defer(c->slots, fv->fn->name, (int)fv->fn->tpl->concurrency, -1);
		log_debug(LOG_ATTRS("message_id", p->m->id),
			  "shutdown: an invocation waiting for a slot is left pending");
		plan_free(c, p);
	}
	c->dtail = NULL;
	c->ndeferred = 0;
	/* Buffered but never started: they stay pending in Redis. */
	while (c->head) {
		struct msg *m = c->head;
		c->head = m->next;
		msg_free(m);
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
	pthread_cond_destroy(&c->work);
	pthread_cond_destroy(&c->space);
	pthread_cond_destroy(&c->ack_cond);
	pthread_mutex_destroy(&c->lock);
	pthread_mutex_destroy(&c->ack_lock);
	pthread_cond_destroy(&c->gate_cond);
	pthread_mutex_destroy(&c->gate_lock);
	redis_uri_free(&c->uri);
	free(c->stream);
	free(c->group);
	free(c->name);
	free(c->dlq);
	free(c);
}
