/*
 * Per-key concurrency and order across the fleet (template key
 * key_concurrency, model/keyconc.h; docs/execution.md "Per-key concurrency
 * and order"). All state lives in Redis, changed only by the Lua scripts
 * in keyorder.c, under keys that carry the stream's hash tag on Redis
 * Cluster (keys.h) and expire on their own:
 *
 *   relay:keyq:<stream>:<group>:<function>:<value>
 *            one queue per function and key value: a sorted set of the
 *            message ids registered with it, scored in registration order.
 *            A message may run while it is among the first `limit`
 *            members; it leaves when it is done (acknowledged or
 *            dead-lettered). A member waiting out a retry stays, so later
 *            events of its key wait behind it.
 *   relay:keyheld:<stream>:<group>
 *            hash: message id -> the queues it is in ("<queue>\t<limit>\n"
 *            each), for release and for relay event status
 *   relay:keylease:<stream>:<group>
 *            sorted set: message id -> when its lease ends (Redis time, ms).
 *            A message that took its place is leased; the worker holding
 *            it renews the lease every second. A lease that ends means the
 *            worker is gone: the message gives its place up (it goes to the
 *            back of its queues, recovered later like any crashed
 *            invocation) and the next ones may run. A waiting message has
 *            a lease too: when it ends, the message is looked at again.
 *   relay:keymark:<stream>:<group>
 *            the last message id of the read batches registered so far
 *
 * Order: every worker registers each batch it reads before running any of
 * it, and a batch is registered only once every entry before its first one
 * has been (the entries in between belong to a batch another worker read
 * first), so queue order is stream order. A batch whose worker died before
 * registering is waited for at most KEYORDER_GAP_WAIT_MS.
 *
 * Waiting: a message that may not run yet is put in the retry index
 * (invocation.h) with the score +inf: the reclaim leaves it alone and no
 * attempt is charged. Whoever frees a place wakes the messages now within
 * the limit by making them due at once; the retrier claims them.
 *
 * Thread-safety: a struct keyorder is immutable after keyorder_new; the
 * calls run on any thread, each with its own Redis connection.
 */
#ifndef RELAY_KEYORDER_H
#define RELAY_KEYORDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/redis.h"

/* How long a batch waits for an earlier one to be registered. */
#define KEYORDER_GAP_WAIT_MS 2000
/* A renewed lease lasts at least this long; a waiting message is looked at
 * again after KEYORDER_RECHECK_MS. */
#define KEYORDER_RENEW_MS 5000
#define KEYORDER_RECHECK_MS 60000
/* A first lease lasts the rule's timeout, within these bounds. */
#define KEYORDER_LEASE_MIN_MS 5000
#define KEYORDER_LEASE_MAX_MS 60000

struct function;
struct event;

struct keyorder {
	char *stream, *group;
	char *mark, *lease, *held, *retry; /* the keys above, and the retry index */
	char *queue;			   /* the queues' common prefix */
};

/* One queue a message takes its place in. */
struct keyorder_reg {
	const char *id;	      /* the message (borrowed) */
	const char *function; /* its name (borrowed) */
	char *queue;	      /* keyorder_queue_key (owned) */
	int limit;	      /* key_concurrency.limit */
	int64_t timeout_ns;   /* the function's runs for the message, summed */
	int64_t lease_ms;     /* its first lease (keyorder_lease_ms) */
	bool acquired;	      /* out: keyorder_register found the message may run */
};

/* A growing list of them (a read batch's, or one message's). */
struct keyorder_regs {
	struct keyorder_reg *v;
	size_t n, cap;
};

/* Message id's place in fn's queue for ev's key value: none when fn has no
 * key_concurrency or ev no key value (such an event is not limited). A
 * function already in rs for id only has timeout_ns added to its runs. */
void keyorder_regs_add(const struct keyorder *k, struct keyorder_regs *rs, const char *id,
		       const struct function *fn, const struct event *ev, int64_t timeout_ns);
/* Empties rs (n = 0), keeping its array; keyorder_regs_free frees it. */
void keyorder_regs_clear(struct keyorder_regs *rs);
void keyorder_regs_free(struct keyorder_regs *rs);

struct keyorder *keyorder_new(const char *stream, const char *group);
void keyorder_free(struct keyorder *k);

/* The queue key of a function's key value (len bytes; a value over
 * KEYCONC_VALUE_MAX bytes is named by its SHA-256). malloc'd. */
char *keyorder_queue_key(const struct keyorder *k, const char *function, const char *value,
			 size_t len);
/* The key value a queue key names: decoded, or "sha256:<hex>" (malloc'd). */
char *keyorder_queue_value(const char *queue);
/* The first lease of a message whose runs take timeout_ns (summed). */
int64_t keyorder_lease_ms(int64_t timeout_ns);

/*
 * Registers a read batch whose entries run from first to last: regs (a
 * message's queues consecutive, in stream order) take their places. 0:
 * done, each reg's acquired set (all of a message's or none); 1: an
 * earlier batch is not registered yet (try again; force registers
 * anyway); -1: a Redis error, *err (malloc'd) says which.
 */
int keyorder_register(const struct keyorder *k, struct redis *r, const char *first,
		      const char *last, bool force, struct keyorder_reg *regs, size_t n,
		      char **err);
/* The same in a pipeline (never forced): queued here, its reply taken by
 * keyorder_register_take (which frees it; -2: the server does not know
 * the script, so register with keyorder_register). */
int keyorder_register_append(const struct keyorder *k, struct redis *r, const char *first,
			     const char *last, struct keyorder_reg *regs, size_t n);
int keyorder_register_take(redisReply *rep, struct keyorder_reg *regs, size_t n, char **err);

/*
 * Whether message id may run now in each of its queues (regs[0..n), all of
 * the one message): 1 yes (leased); 0 it waits (marked waiting; *behind
 * the id holding the first queue it waits in, *which that queue's index,
 * both when non-NULL); -1 a Redis error.
 */
int keyorder_acquire(const struct keyorder *k, struct redis *r, const char *id,
		     const struct keyorder_reg *regs, size_t n, char **behind, size_t *which);

/* Messages ids[0..n) are done (acknowledged or dead-lettered): they leave
 * their queues and the next ones wake. Returns how many woke (due now in
 * the retry index), -1 on error. */
int keyorder_release(const struct keyorder *k, struct redis *r, const char *const *ids, size_t n);

/* Renews the leases of the messages this worker holds (ids[0..n)). */
int keyorder_renew(const struct keyorder *k, struct redis *r, const char *const *ids, size_t n);

/* At a graceful stop: the leases of messages left pending unrun end
 * without their places being given up (another worker takes them in
 * order through the reclaim). */
int keyorder_keep(const struct keyorder *k, struct redis *r, const char *const *ids, size_t n);

/* clang-format off */
/*
 * The Lua functions the scripts share (keyorder.c, and the retry script in
 * consumer_scripts.c, which ends leases): each script defines TTL (the
 * keys' life, ms) and has the stream in KEYS[1], the group in ARGV[1].
 *   pending(id)       the message is still pending in the group
 *   enter(q, id, xx)  id at the back of queue q (xx: only if in it: moved);
 *                     0 when it made the queue (nil: look with within)
 *   note(h, id, q, l) the held hash lists q (limit l) for id
 *   prune(q, l)       stale members (no longer pending) among q's first l
 *                     removed, at most 16 looked at
 *   within(q, id, l)  id is among q's first l members (after prune)
 *   wake(q, l, w, now) the waiting members (score +inf in retry index w)
 *                     now within q's first l are made due now; how many.
 *                     A queue's life (TTL) starts when it is made and again
 *                     at each wake, so a queue in use does not expire
 *   queues(h, id)     the {queue, limit} pairs the held hash lists for id
 */
#define KEYORDER_LUA_PRELUDE \
	"local function pending(id)\n" \
	"  local p = redis.pcall('XPENDING', KEYS[1], ARGV[1], id, id, 1)\n" \
	"  return type(p) == 'table' and not p.err and p[1] ~= nil\n" \
	"end\n" \
	"local function enter(q, id, xx)\n" \
	"  local last = redis.call('ZRANGE', q, -1, -1, 'WITHSCORES')\n" \
	"  if last[1] == id then return nil end\n" \
	"  if not last[1] then\n" \
	"    if xx then return nil end\n" \
	"    redis.call('ZADD', q, 0, id)\n" \
	"    redis.call('PEXPIRE', q, TTL)\n" \
	"    return 0\n" \
	"  end\n" \
	"  redis.call('ZADD', q, xx and 'XX' or 'NX', tonumber(last[2]) + 1, id)\n" \
	"  return nil\n" \
	"end\n" \
	"local function note(h, id, q, l)\n" \
	"  local cur = redis.call('HGET', h, id) or ''\n" \
	"  local line = q .. '\\t' .. l .. '\\n'\n" \
	"  if not string.find(cur, line, 1, true) then redis.call('HSET', h, id, cur .. line) end\n" \
	"  redis.call('PEXPIRE', h, TTL)\n" \
	"end\n" \
	"local function prune(q, l)\n" \
	"  local i, looked = 0, 0\n" \
	"  while i < l and looked < 16 do\n" \
	"    local h = redis.call('ZRANGE', q, i, i)[1]\n" \
	"    if not h then break end\n" \
	"    looked = looked + 1\n" \
	"    if pending(h) then i = i + 1 else redis.call('ZREM', q, h) end\n" \
	"  end\n" \
	"end\n" \
	"local function within(q, id, l)\n" \
	"  local r = redis.call('ZRANK', q, id)\n" \
	"  if r and r < l then return true end\n" \
	"  prune(q, l)\n" \
	"  r = redis.call('ZRANK', q, id)\n" \
	"  return r and r < l\n" \
	"end\n" \
	"local function wake(q, l, w, now)\n" \
	"  if not redis.call('ZRANGE', q, 0, 0)[1] then return 0 end\n" \
	"  redis.call('PEXPIRE', q, TTL)\n" \
	"  prune(q, l)\n" \
	"  local from, n = l - 17, 0\n" \
	"  if from < 0 then from = 0 end\n" \
	"  for _, id in ipairs(redis.call('ZRANGE', q, from, l - 1)) do\n" \
	"    if redis.call('ZSCORE', w, id) == 'inf' then\n" \
	"      redis.call('ZADD', w, now, id)\n" \
	"      n = n + 1\n" \
	"    end\n" \
	"  end\n" \
	"  return n\n" \
	"end\n" \
	"local function queues(h, id)\n" \
	"  local out, list = {}, redis.call('HGET', h, id)\n" \
	"  if list then\n" \
	"    for q, l in string.gmatch(list, '([^\\t\\n]+)\\t(%d+)\\n') do\n" \
	"      out[#out + 1] = {q, tonumber(l)}\n" \
	"    end\n" \
	"  end\n" \
	"  return out\n" \
	"end\n"

/*
 * Leases ended by Redis's clock, at most `count` (the retry script runs it
 * first: KEYS[3] the retry index, KEYS[4] the lease set, KEYS[5] the held
 * hash, `now` and `count` defined). A waiting message's lease ended: it is
 * looked at again (due now). A message waiting out a retry: nothing (its
 * retry brings it back). Any other: its worker is gone, so it gives its
 * places up (to the back of its queues, or out of them once no longer
 * pending) and the messages now within the limits wake.
 */
#define KEYORDER_EXPIRE_LUA \
	"for _, id in ipairs(redis.call('ZRANGE', KEYS[4], '-inf', now, 'BYSCORE', 'LIMIT', 0,\n" \
	"    count)) do\n" \
	"  redis.call('ZREM', KEYS[4], id)\n" \
	"  local w = redis.call('ZSCORE', KEYS[3], id)\n" \
	"  if w == 'inf' then\n" \
	"    redis.call('ZADD', KEYS[3], now, id)\n" \
	"  elseif not w then\n" \
	"    local live = pending(id)\n" \
	"    for _, e in ipairs(queues(KEYS[5], id)) do\n" \
	"      if live then enter(e[1], id, true) else redis.call('ZREM', e[1], id) end\n" \
	"      wake(e[1], e[2], KEYS[3], now)\n" \
	"    end\n" \
	"    if not live then redis.call('HDEL', KEYS[5], id) end\n" \
	"  end\n" \
	"end\n"
/* clang-format on */

/* What relay event status says of a message: "waiting for key <value>
 * (behind <id>)" for the first queue it waits in, or NULL (not keyed, or
 * within the limit). malloc'd; the value is raw (escape it to print). */
char *keyorder_status(const struct keyorder *k, struct redis *r, const char *id);

#endif
