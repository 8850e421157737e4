/* The consumer's read scripts; the contract is in consumer_scripts.h. */
#include "engine/consumer_scripts.h"

#include <pthread.h>

#include "engine/consumer.h"

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
 * (the one Relay uses: the last `event` wins, as in payload_of,
 * delivery.c; from a plain read, msg_from_entry keeps them all, at most 32
 * fields), and answers their bytes, names and values, and what they cost
 * in a reply (CONSUMER_ENTRY_COST). An entry costing more
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

