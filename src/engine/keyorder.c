/* Per-key concurrency and order; the contract is in keyorder.h. */
#include "engine/keyorder.h"

#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "engine/invocation.h"
#include "engine/keys.h"
#include "model/function.h"
#include "model/keyconc.h"

#define STR_(x) #x
#define STR(x) STR_(x)

/* clang-format off */
/* The scripts' common part: KEYS[1] is the stream and ARGV[1] the group in
 * every one of them; `now` is Redis's clock in ms. */
#define KEYORDER_LUA_COMMON \
	"local TTL = 604800000\n" \
	"local t = redis.call('TIME')\n" \
	"local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n" \
	KEYORDER_LUA_PRELUDE
/* clang-format on */

static const char register_lua[] = KEYORDER_LUA_COMMON
	/* KEYS[2] mark, [3] lease, [4] held, [5..] queues; ARGV[2] first,
	 * [3] last, [4] force, then per queue: id, limit, lease ms. */
	"local function idlt(a, b)\n"
	"  local am, as = string.match(a, '^(%d+)-(%d+)$')\n"
	"  local bm, bs = string.match(b, '^(%d+)-(%d+)$')\n"
	"  if not am or not bm then return a < b end\n"
	"  if #am ~= #bm then return #am < #bm end\n"
	"  if am ~= bm then return am < bm end\n"
	"  if #as ~= #bs then return #as < #bs end\n"
	"  return as < bs\n"
	"end\n"
	"local mark = redis.call('GET', KEYS[2])\n"
	"if mark and ARGV[4] ~= '1' and idlt(mark, ARGV[2]) then\n"
	"  local gap = redis.pcall('XRANGE', KEYS[1], '(' .. mark, '(' .. ARGV[2], 'COUNT', 1)\n"
	"  if type(gap) == 'table' and not gap.err and #gap > 0 then return {1, {}} end\n"
	"end\n"
	"if not mark or idlt(mark, ARGV[3]) then\n"
	"  redis.call('SET', KEYS[2], ARGV[3], 'PX', TTL)\n"
	"end\n"
	"local out, i = {}, 5\n"
	"while i <= #KEYS do\n"
	"  local a = 5 + (i - 5) * 3\n"
	"  local id, all, j, held = ARGV[a], true, i, ''\n"
	"  while j <= #KEYS and ARGV[5 + (j - 5) * 3] == id do\n"
	"    local q, lim = KEYS[j], tonumber(ARGV[6 + (j - 5) * 3])\n"
	"    local rank = enter(q, id, false)\n"
	"    local line = q .. '\\t' .. lim .. '\\n'\n"
	"    if not string.find(held, line, 1, true) then held = held .. line end\n"
	"    if not (rank and rank < lim) and not within(q, id, lim) then all = false end\n"
	"    j = j + 1\n"
	"  end\n"
	"  if redis.call('HSETNX', KEYS[4], id, held) == 0 then\n"
	"    local cur = redis.call('HGET', KEYS[4], id)\n"
	"    for line in string.gmatch(held, '[^\\n]+\\n') do\n"
	"      if not string.find(cur, line, 1, true) then cur = cur .. line end\n"
	"    end\n"
	"    redis.call('HSET', KEYS[4], id, cur)\n"
	"  end\n"
	"  if all then redis.call('ZADD', KEYS[3], now + tonumber(ARGV[a + 2]), id) end\n"
	"  for _ = i, j - 1 do out[#out + 1] = all and 1 or 0 end\n"
	"  i = j\n"
	"end\n"
	"redis.call('PEXPIRE', KEYS[3], TTL)\n"
	"redis.call('PEXPIRE', KEYS[4], TTL)\n"
	"return {0, out}\n";

static const char acquire_lua[] = KEYORDER_LUA_COMMON
	/* KEYS[2] retry index, [3] lease, [4] held, [5..] queues; ARGV[2]
	 * id, [3] lease ms, [4..] the queues' limits. */
	"local id, blocked = ARGV[2], nil\n"
	"for i = 5, #KEYS do\n"
	"  local lim = tonumber(ARGV[i - 1])\n"
	"  enter(KEYS[i], id, false)\n"
	"  note(KEYS[4], id, KEYS[i], lim)\n"
	"  if not blocked and not within(KEYS[i], id, lim) then\n"
	"    blocked = {i - 5, redis.call('ZRANGE', KEYS[i], 0, 0)[1] or ''}\n"
	"  end\n"
	"end\n"
	"redis.call('PEXPIRE', KEYS[3], TTL)\n"
	"if blocked then\n"
	"  redis.call('ZADD', KEYS[2], '+inf', id)\n"
	"  redis.call('ZADD', KEYS[3], now + " STR(KEYORDER_RECHECK_MS) ", id)\n"
	"  return {0, blocked[1], blocked[2]}\n"
	"end\n"
	"redis.call('ZADD', KEYS[3], now + tonumber(ARGV[3]), id)\n"
	"return {1}\n";

static const char release_lua[] = KEYORDER_LUA_COMMON
	/* KEYS[2] retry index, [3] lease, [4] held; ARGV[2..] ids. */
	"local n = 0\n"
	"for i = 2, #ARGV do\n"
	"  local id = ARGV[i]\n"
	"  redis.call('ZREM', KEYS[3], id)\n"
	"  for _, e in ipairs(queues(KEYS[4], id)) do\n"
	"    redis.call('ZREM', e[1], id)\n"
	"    n = n + wake(e[1], e[2], KEYS[2], now)\n"
	"  end\n"
	"  redis.call('HDEL', KEYS[4], id)\n"
	"end\n"
	"return n\n";

static const char renew_lua[] = KEYORDER_LUA_COMMON
	/* KEYS[2] lease; ARGV[2..] ids. */
	"for i = 2, #ARGV do\n"
	"  redis.call('ZADD', KEYS[2], 'XX', 'GT', now + " STR(KEYORDER_RENEW_MS) ", ARGV[i])\n"
	"end\n"
	"return 0\n";

static const char keep_lua[] = KEYORDER_LUA_COMMON
	/* KEYS[2] retry index, [3] lease; ARGV[2..] ids: each leased one is
	 * made due at once (another worker's retrier claims it) and its lease
	 * ends without its places being given up. */
	"local n = 0\n"
	"for i = 2, #ARGV do\n"
	"  if redis.call('ZREM', KEYS[3], ARGV[i]) == 1 and pending(ARGV[i]) then\n"
	"    redis.call('ZADD', KEYS[2], 'NX', now, ARGV[i])\n"
	"    n = n + 1\n"
	"  end\n"
	"end\n"
	"return n\n";

static const char status_lua[] = KEYORDER_LUA_COMMON
	/* KEYS[2] held; ARGV[2] id: {queue, behind} of the first queue it
	 * waits in, or {}. */
	"for _, e in ipairs(queues(KEYS[2], ARGV[2])) do\n"
	"  local r = redis.call('ZRANK', e[1], ARGV[2])\n"
	"  if r and r >= e[2] then\n"
	"    return {e[1], redis.call('ZRANGE', e[1], 0, 0)[1] or ''}\n"
	"  end\n"
	"end\n"
	"return {}\n";

static struct redis_script register_script, acquire_script, release_script, renew_script,
	keep_script, status_script;
static pthread_once_t scripts_once = PTHREAD_ONCE_INIT;

static void scripts_init(void)
{
	redis_script_init(&register_script, register_lua);
	redis_script_init(&acquire_script, acquire_lua);
	redis_script_init(&release_script, release_lua);
	redis_script_init(&renew_script, renew_lua);
	redis_script_init(&keep_script, keep_lua);
	redis_script_init(&status_script, status_lua);
}

static char *named(const char *what, const char *stream, const char *group)
{
	char *s = keys_encode(stream), *g = keys_pct_encode(group);
	char *k = xasprintf("relay:%s:%s:%s", what, s, g);
	free(s);
	free(g);
	return k;
}

struct keyorder *keyorder_new(const char *stream, const char *group)
{
	pthread_once(&scripts_once, scripts_init);
	struct keyorder *k = xcalloc(1, sizeof *k);
	k->queue = named("keyq", stream, group);
	k->stream = xstrdup(stream);
	k->group = xstrdup(group);
	k->mark = named("keymark", stream, group);
	k->lease = named("keylease", stream, group);
	k->held = named("keyheld", stream, group);
	k->retry = invocation_retry_key(stream, group);
	return k;
}

void keyorder_free(struct keyorder *k)
{
	if (!k)
		return;
	free(k->stream);
	free(k->group);
	free(k->mark);
	free(k->lease);
	free(k->held);
	free(k->retry);
	free(k->queue);
	free(k);
}

char *keyorder_queue_key(const struct keyorder *k, const char *function, const char *value,
			 size_t len)
{
	char *f = keys_pct_encode(function), *v;
	if (len > KEYCONC_VALUE_MAX || memchr(value, '\0', len)) {
		unsigned char md[32];
		unsigned int mdlen = 0;
		EVP_Digest(value, len, md, &mdlen, EVP_sha256(), NULL);
		v = xmalloc(2 * sizeof md + 8);
		memcpy(v, "sha256:", 7);
		for (size_t i = 0; i < sizeof md; i++)
			snprintf_(v + 7 + 2 * i, 3, "%02x", md[i]);
	} else {
		char *z = xstrndup(value, len);
		v = keys_pct_encode(z);
		free(z);
	}
	char *q = xasprintf("%s:%s:%s", k->queue, f, v);
	free(f);
	free(v);
	return q;
}

static int hexval(char c)
{
	return c >= '0' && c <= '9'   ? c - '0'
	       : c >= 'A' && c <= 'F' ? c - 'A' + 10
	       : c >= 'a' && c <= 'f' ? c - 'a' + 10
				      : -1;
}

char *keyorder_queue_value(const char *queue)
{
	const char *v = strrchr(queue, ':');
	v = v ? v + 1 : queue;
	if (v > queue + 7 && strncmp(v - 7, "sha256:", 7) == 0)
		return xasprintf("sha256:%s", v);
	char *out = xmalloc(strlen(v) + 1);
	size_t o = 0;
	for (size_t i = 0; v[i]; i++) {
		int hi, lo;
		if (v[i] == '%' && (hi = hexval(v[i + 1])) >= 0 && (lo = hexval(v[i + 2])) >= 0) {
			out[o++] = (char)(hi << 4 | lo);
			i += 2;
		} else {
			out[o++] = v[i];
		}
	}
	out[o] = '\0';
	return out;
}

int64_t keyorder_lease_ms(int64_t timeout_ns)
{
	int64_t ms = timeout_ns / 1000000;
	return ms < KEYORDER_LEASE_MIN_MS ? KEYORDER_LEASE_MIN_MS
	       : ms > KEYORDER_LEASE_MAX_MS ? KEYORDER_LEASE_MAX_MS
					    : ms;
}

void keyorder_regs_add(const struct keyorder *k, struct keyorder_regs *rs, const char *id,
		       const struct function *fn, const struct event *ev, int64_t timeout_ns)
{
	const struct keyconc *kc = &fn->tpl->key;
	if (!kc->path)
		return;
	for (size_t i = rs->n; i-- > 0 && rs->v[i].id == id;)
		if (strcmp(rs->v[i].function, fn->name) == 0) {
			rs->v[i].timeout_ns += timeout_ns;
			rs->v[i].lease_ms = keyorder_lease_ms(rs->v[i].timeout_ns);
			return;
		}
	size_t len;
	char *value = keyconc_value(kc, ev, &len);
	if (!value)
		return;
	if (rs->n == rs->cap) {
		rs->cap = rs->cap ? rs->cap * 2 : 16;
		rs->v = xrealloc(rs->v, rs->cap * sizeof *rs->v);
	}
	rs->v[rs->n++] = (struct keyorder_reg){
		.id = id,
		.function = fn->name,
		.queue = keyorder_queue_key(k, fn->name, value, len),
		.limit = kc->limit,
		.timeout_ns = timeout_ns,
		.lease_ms = keyorder_lease_ms(timeout_ns),
	};
	free(value);
}

void keyorder_regs_clear(struct keyorder_regs *rs)
{
	for (size_t i = 0; i < rs->n; i++)
		free(rs->v[i].queue);
	rs->n = 0;
}

void keyorder_regs_free(struct keyorder_regs *rs)
{
	keyorder_regs_clear(rs);
	free(rs->v);
	rs->v = NULL;
	rs->cap = 0;
}

/* A script's reply: an array, or NULL with *err (when non-NULL) saying why. */
static redisReply *run(struct redis *r, const struct redis_script *s, int argc, const char **argv,
		       char **err)
{
	redisReply *rep = redis_script_run(r, s, argc, argv, NULL);
	if (rep && (rep->type == REDIS_REPLY_ARRAY || rep->type == REDIS_REPLY_INTEGER))
		return rep;
	if (err)
		*err = xstrdup(!rep				 ? redis_errmsg(r)
			       : rep->type == REDIS_REPLY_ERROR ? rep->str
								: "unexpected reply");
	if (rep)
		freeReplyObject(rep);
	return NULL;
}

/* The arguments of a register call (argv borrows regs and the strings). */
struct register_args {
	const char **argv;
	size_t argc;
	char (*nums)[2][24];
	char nkeys[16];
};

static void register_args(const struct keyorder *k, const char *first, const char *last,
			  bool force, const struct keyorder_reg *regs, size_t n,
			  struct register_args *a)
{
	a->argc = 1 + 4 + n + 4 + 3 * n;
	a->argv = xcalloc(a->argc, sizeof *a->argv);
	a->nums = xcalloc(n + 1, sizeof *a->nums);
	snprintf_(a->nkeys, sizeof a->nkeys, "%zu", 4 + n);
	size_t i = 0;
	a->argv[i++] = a->nkeys;
	a->argv[i++] = k->stream;
	a->argv[i++] = k->mark;
	a->argv[i++] = k->lease;
	a->argv[i++] = k->held;
	for (size_t j = 0; j < n; j++)
		a->argv[i++] = regs[j].queue;
	a->argv[i++] = k->group;
	a->argv[i++] = first;
	a->argv[i++] = last;
	a->argv[i++] = force ? "1" : "0";
	for (size_t j = 0; j < n; j++) {
		snprintf_(a->nums[j][0], sizeof a->nums[j][0], "%d", regs[j].limit);
		snprintf_(a->nums[j][1], sizeof a->nums[j][1], "%lld", (long long)regs[j].lease_ms);
		a->argv[i++] = regs[j].id;
		a->argv[i++] = a->nums[j][0];
		a->argv[i++] = a->nums[j][1];
	}
}

static void register_args_free(struct register_args *a)
{
	free(a->argv);
	free(a->nums);
}

int keyorder_register_append(const struct keyorder *k, struct redis *r, const char *first,
			     const char *last, struct keyorder_reg *regs, size_t n)
{
	struct register_args a;
	register_args(k, first, last, false, regs, n, &a);
	int rc = redis_append_script(r, &register_script, (int)a.argc, a.argv, NULL);
	register_args_free(&a);
	return rc;
}

int keyorder_register_take(redisReply *rep, struct keyorder_reg *regs, size_t n, char **err)
{
	if (redis_reply_is_noscript(rep)) {
		freeReplyObject(rep);
		return -2;
	}
	int rc = -1;
	if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
	    rep->element[0]->type == REDIS_REPLY_INTEGER &&
	    rep->element[1]->type == REDIS_REPLY_ARRAY) {
		rc = (int)rep->element[0]->integer;
		const redisReply *out = rep->element[1];
		for (size_t i = 0; i < n && rc == 0; i++)
			regs[i].acquired = i < out->elements &&
					   out->element[i]->type == REDIS_REPLY_INTEGER &&
					   out->element[i]->integer == 1;
	}
	if (rc < 0 && err)
		*err = xstrdup(!rep				 ? "no reply"
			       : rep->type == REDIS_REPLY_ERROR ? rep->str
								: "unexpected reply");
	if (rep)
		freeReplyObject(rep);
	return rc;
}

int keyorder_register(const struct keyorder *k, struct redis *r, const char *first,
		      const char *last, bool force, struct keyorder_reg *regs, size_t n,
		      char **err)
{
	struct register_args a;
	register_args(k, first, last, force, regs, n, &a);
	redisReply *rep = redis_script_run(r, &register_script, (int)a.argc, a.argv, NULL);
	register_args_free(&a);
	if (!rep && err)
		*err = xstrdup(redis_errmsg(r));
	return rep ? keyorder_register_take(rep, regs, n, err) : -1;
}

int keyorder_acquire(const struct keyorder *k, struct redis *r, const char *id,
		     const struct keyorder_reg *regs, size_t n, char **behind, size_t *which)
{
	size_t argc = 1 + 4 + n + 3 + n;
	const char **argv = xcalloc(argc, sizeof *argv);
	char (*lims)[24] = xcalloc(n + 1, sizeof *lims);
	char nkeys[16], lease[24];
	snprintf_(nkeys, sizeof nkeys, "%zu", 4 + n);
	int64_t lease_ms = 0;
	for (size_t i = 0; i < n; i++)
		if (regs[i].lease_ms > lease_ms)
			lease_ms = regs[i].lease_ms;
	snprintf_(lease, sizeof lease, "%lld", (long long)lease_ms);
	size_t a = 0;
	argv[a++] = nkeys;
	argv[a++] = k->stream;
	argv[a++] = k->retry;
	argv[a++] = k->lease;
	argv[a++] = k->held;
	for (size_t i = 0; i < n; i++)
		argv[a++] = regs[i].queue;
	argv[a++] = k->group;
	argv[a++] = id;
	argv[a++] = lease;
	for (size_t i = 0; i < n; i++) {
		snprintf_(lims[i], sizeof lims[i], "%d", regs[i].limit);
		argv[a++] = lims[i];
	}
	redisReply *rep = run(r, &acquire_script, (int)argc, argv, NULL);
	free(argv);
	free(lims);
	if (!rep)
		return -1;
	int rc = -1;
	if (rep->type == REDIS_REPLY_ARRAY && rep->elements >= 1 &&
	    rep->element[0]->type == REDIS_REPLY_INTEGER) {
		rc = rep->element[0]->integer == 1 ? 1 : 0;
		if (rc == 0 && rep->elements == 3 && rep->element[1]->type == REDIS_REPLY_INTEGER &&
		    rep->element[2]->type == REDIS_REPLY_STRING) {
			if (which)
				*which = (size_t)rep->element[1]->integer;
			if (behind)
				*behind = xstrndup(rep->element[2]->str, rep->element[2]->len);
		}
	}
	freeReplyObject(rep);
	return rc;
}


/* renew and keep: a script over ids, after nkeys keys. */
static int over_ids(const struct keyorder *k, struct redis *r, const struct redis_script *s,
		    const char *const *keys, size_t nkeys, const char *const *ids, size_t n)
{
	if (n == 0)
		return 0;
	size_t argc = 1 + nkeys + 1 + n;
	const char **argv = xcalloc(argc, sizeof *argv);
	char nk[16];
	snprintf_(nk, sizeof nk, "%zu", nkeys);
	size_t a = 0;
	argv[a++] = nk;
	for (size_t i = 0; i < nkeys; i++)
		argv[a++] = keys[i];
	argv[a++] = k->group;
	for (size_t i = 0; i < n; i++)
		argv[a++] = ids[i];
	redisReply *rep = run(r, s, (int)argc, argv, NULL);
	free(argv);
	if (!rep)
		return -1;
	int rc = rep->type == REDIS_REPLY_INTEGER ? (int)rep->integer : -1;
	freeReplyObject(rep);
	return rc;
}

int keyorder_release(const struct keyorder *k, struct redis *r, const char *const *ids, size_t n)
{
	const char *keys[] = {k->stream, k->retry, k->lease, k->held};
	return over_ids(k, r, &release_script, keys, ARRAY_LEN(keys), ids, n);
}

int keyorder_renew(const struct keyorder *k, struct redis *r, const char *const *ids, size_t n)
{
	const char *keys[] = {k->stream, k->lease};
	return over_ids(k, r, &renew_script, keys, ARRAY_LEN(keys), ids, n);
}

int keyorder_keep(const struct keyorder *k, struct redis *r, const char *const *ids, size_t n)
{
	const char *keys[] = {k->stream, k->retry, k->lease};
	return over_ids(k, r, &keep_script, keys, ARRAY_LEN(keys), ids, n);
}

char *keyorder_status(const struct keyorder *k, struct redis *r, const char *id)
{
	const char *argv[] = {"2", k->stream, k->held, k->group, id};
	redisReply *rep = run(r, &status_script, (int)ARRAY_LEN(argv), argv, NULL);
	if (!rep)
		return NULL;
	char *out = NULL;
	if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
	    rep->element[0]->type == REDIS_REPLY_STRING &&
	    rep->element[1]->type == REDIS_REPLY_STRING) {
		char *v = keyorder_queue_value(rep->element[0]->str);
		out = xasprintf("waiting for key %s (behind %s)", v, rep->element[1]->str);
		free(v);
	}
	freeReplyObject(rep);
	return out;
}
