/* The consumer's read scripts; the contract is in consumer_scripts.h. */
#include "engine/consumer_scripts.h"

#include <pthread.h>

#include "engine/consumer.h"
#include "engine/keyorder.h"

/*
 * New messages are read with a plain XREADGROUP on a guarded connection
 * (consumer_read.c); the scripts here read what that cannot, looking at every
 * entry inside Redis before anything is transferred (consumer.h, cost
 * model): the batch of a read the guard refused, an entry the guard let
 * through that still costs more than CONSUMER_ENTRY_MAX (recover_lua), and
 * the idle pending messages of any consumer (reclaim_lua). Shared part:
 * KEYS[1] stream, KEYS[2] DLQ; ARGV[1] group, ARGV[2] consumer, ARGV[3] at
 * most this many entries, ARGV[4] CONSUMER_ENTRY_MAX, ARGV[5] timestamp
 * (RFC 3339) for DLQ entries.
 *
 * measure() keeps only the fields Relay reads, the last of each in order
 * (the one Relay uses: the last `event` wins, as in payload_of,
 * delivery.c; from a plain read, msg_from_entry keeps them all, at most 32
 * fields), and answers their bytes, names and values, and what they cost
 * in a reply (CONSUMER_ENTRY_COST). An entry costing more
 * than the limit is dead-lettered by too_large() without its body and
 * acknowledged; a failed DLQ write leaves it pending (retried by the next
 * reclaim, like any DLQ write) and is reported, not raised, so the entries
 * after it are still read. Each script answers its entries in XREADGROUP's
 * shape ({id, fields}, with only the fields kept) and the too-large ones as
 * {id, size, DLQ error or ""}; fetch(id) reads and measures one pending
 * entry, reporting it in gone or big (dead-lettering a too-large one), and
 * answers the entry, or nil and the DLQ write's error ('' when none).
 */
/* The framing allowance is spelled out in the scripts. */
_Static_assert(CONSUMER_ENTRY_FRAMING == 64 && CONSUMER_STRING_FRAMING == 16,
	       "the read scripts count 64 + 16 per string");
/* clang-format off */
#define READ_LUA_PRELUDE \
	"local WANTED = {event = true, relay_replays = true, relay_replay_of = true,\n" \
	"  traceparent = true, tracestate = true}\n" \
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
	"local count, emax = tonumber(ARGV[3]), tonumber(ARGV[4])\n" \
	"local out, big, gone = {}, {}, {}\n" \
	"local function fetch(id)\n" \
	"  local e = redis.call('XRANGE', KEYS[1], id, id)[1]\n" \
	"  if not e then\n" \
	"    gone[#gone + 1] = id\n" \
	"    return nil, ''\n" \
	"  end\n" \
	"  local size, cost = measure(e)\n" \
	"  if cost <= emax then return e end\n" \
	"  local err = too_large(id, size)\n" \
	"  big[#big + 1] = {id, size, err}\n" \
	"  return nil, err\n" \
	"end\n"
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
	"for _, p in ipairs(pend) do\n"
	"  local e = fetch(p[1])\n"
	"  if e then out[#out + 1] = e end\n"
	"end\n"
	"return {{KEYS[1], out}, big, gone}\n";

/*
 * Reclaim: XAUTOCLAIM's job, measured first, for the messages nobody will
 * run otherwise (a crashed worker's, a delivery that ended without a
 * verdict). ARGV[6] MinPendingIdle (ms), ARGV[7] cursor: the last pending
 * id looked at ("0-0": from the start); KEYS[3] the retry index. At most
 * 10 x ARGV[3] pending entries are looked at per call (XPENDING without
 * IDLE, which would skip any number of busy entries inside one call: the
 * bound XAUTOCLAIM keeps too), in id order from the cursor. For each one
 * idle that long and not in the retry index (a message waiting out its
 * backoff is the retrier's, claimed when due and not before), the entry is
 * read with XRANGE, one at a time: gone (trimmed or deleted) ones are
 * reported, too-large ones dead-lettered, the others claimed with XCLAIM
 * ... RETRYCOUNT <deliveries + 1> JUSTID, which is what XAUTOCLAIM does
 * (new owner, idle reset, one more delivery) without copying the entry
 * again, at most ARGV[3]. A too-large one whose DLQ write failed is
 * claimed too, so it is retried once per MinPendingIdle like any message
 * whose DLQ write failed. Answers {cursor, entries, too_large, gone}; the
 * cursor is "0-0" once the whole PEL was looked at.
 */
static const char reclaim_lua[] = READ_LUA_PRELUDE
	"local start = ARGV[7] == '0-0' and '-' or ('(' .. ARGV[7])\n"
	"local scan = count * 10\n"
	"local pend = redis.pcall('XPENDING', KEYS[1], ARGV[1], start, '+', scan)\n"
	"if pend.err then return pend end\n"
	"local idle = tonumber(ARGV[6])\n"
	"local last = nil\n"
	"for _, p in ipairs(pend) do\n"
	"  if #out >= count then break end\n"
	"  local id = p[1]\n"
	"  last = id\n"
	"  if p[3] >= idle and not redis.call('ZSCORE', KEYS[3], id) then\n"
	"    local e, err = fetch(id)\n"
	"    if (e or err ~= '') and #redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[6],\n"
	"        id, 'RETRYCOUNT', p[4] + 1, 'JUSTID') == 1 and e then\n"
	"      out[#out + 1] = e\n"
	"    end\n"
	"  end\n"
	"end\n"
	"local cursor = '0-0'\n"
	"if last and (#pend == scan or last ~= pend[#pend][1]) then cursor = last end\n"
	"return {cursor, out, big, gone}\n";

/*
 * Retry: the due members of the retry index (invocation.h), at most
 * ARGV[3] (0: only the answer's next). KEYS[3] the index. First, the
 * per-key leases that ended (KEYS[4] the lease set, KEYS[5] the held
 * hash: KEYORDER_EXPIRE_LUA, keyorder.h), at most 100. By Redis's own clock
 * (TIME, so no worker's clock decides), each member due is removed, and
 * its message, when still pending, read with XRANGE and measured like the
 * reclaim's: gone ones reported, too-large ones dead-lettered, the others
 * claimed (XCLAIM ... 0 ... RETRYCOUNT <deliveries + 1> JUSTID: whoever
 * owned it). A member whose message is no longer pending (acknowledged or
 * dead-lettered meanwhile) is only removed. Answers {next, entries,
 * too_large, gone, count}: next the score of the earliest member left (""
 * when none), count how many ids were looked at.
 */
static const char retry_lua[] = READ_LUA_PRELUDE "local TTL = 604800000\n" KEYORDER_LUA_PRELUDE
	"local t = redis.call('TIME')\n"
	"local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
	"do\n"
	"  local count = 100\n"
	KEYORDER_EXPIRE_LUA
	"end\n"
	"local ids = redis.call('ZRANGE', KEYS[3], '-inf', now, 'BYSCORE', 'LIMIT', 0, count)\n"
	"for _, id in ipairs(ids) do\n"
	"  redis.call('ZREM', KEYS[3], id)\n"
	"  local p = redis.pcall('XPENDING', KEYS[1], ARGV[1], id, id, 1)\n"
	"  if type(p) == 'table' and not p.err and p[1] then\n"
	"    local e = fetch(id)\n"
	"    if e and #redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, id,\n"
	"        'RETRYCOUNT', p[1][4] + 1, 'JUSTID') == 1 then\n"
	"      out[#out + 1] = e\n"
	"    end\n"
	"  end\n"
	"end\n"
	"local nxt = redis.call('ZRANGE', KEYS[3], '-inf', '+inf', 'BYSCORE', 'LIMIT', 0, 1,\n"
	"  'WITHSCORES')\n"
	"return {nxt[2] or '', out, big, gone, #ids}\n";

static struct redis_script recover_script, reclaim_script, retry_script;
static pthread_once_t scripts_once = PTHREAD_ONCE_INIT;

static void scripts_init(void)
{
	redis_script_init(&recover_script, recover_lua);
	redis_script_init(&reclaim_script, reclaim_lua);
	redis_script_init(&retry_script, retry_lua);
}

const struct redis_script *consumer_scripts_recover(void)
{
	pthread_once(&scripts_once, scripts_init);
	return &recover_script;
}

const struct redis_script *consumer_scripts_reclaim(void)
{
	pthread_once(&scripts_once, scripts_init);
	return &reclaim_script;
}


const struct redis_script *consumer_scripts_retry(void)
{
	pthread_once(&scripts_once, scripts_init);
	return &retry_script;
}
