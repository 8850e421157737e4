/*
 * The Redis module on a real Redis Cluster (3 masters, 3 replicas, from
 * redis-cli --cluster create) and behind real sentinels (one master, one
 * replica, three sentinels), all private redis-server processes on
 * loopback: routing to the slot's master from a seed that is not it, ASK
 * during a slot migration, MOVED after the slot moved and after a manual
 * failover, a pipeline whose first command is redirected (replies in
 * order, nothing run twice), XADD and XACK resent after ASK and MOVED
 * taking effect once (the stream's entries, XPENDING), sentinel
 * resolution and re-resolution after SENTINEL FAILOVER. The nodes are driven with plain hiredis connections
 * (redisConnect), never through the module under test.
 */
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <time.h>

#include "base/duration.h"
#include "itlib.h"
#include "base/log.h"
#include "t.h"
#include "tfiles.h"

#define NODES 6
static struct itredis N[NODES];
static bool cluster_up;

/* Sentinel set-up: a master, a replica, three sentinels. */
static struct itredis SM, SR;
static pid_t spid[3];
static int sport[3];
static char sdir[64];
static bool sentinel_up;

static redisContext *node(int port)
{
	struct timeval tv = {5, 0};
	redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
	if (!c || c->err) {
		if (c)
			redisFree(c);
		return NULL;
	}
	redisSetTimeout(c, tv);
	return c;
}

/* One command on the node at port; the reply (free it) or NULL. */
static redisReply *on(int port, const char *fmt, ...)
{
	redisContext *c = node(port);
	if (!c)
		return NULL;
	va_list ap;
	va_start(ap, fmt);
	redisReply *rep = redisvCommand(c, fmt, ap);
	va_end(ap);
	redisFree(c);
	return rep;
}

/* The reply as a string, for checks ("(nil)", "(int) 3", "ERR..."). */
static const char *show(const redisReply *rep, char *buf, size_t n)
{
	if (!rep)
		snprintf(buf, n, "(null)");
	else if (rep->type == REDIS_REPLY_INTEGER)
		snprintf(buf, n, "(int) %lld", rep->integer);
	else if (rep->type == REDIS_REPLY_NIL)
		snprintf(buf, n, "(nil)");
	else if (rep->str)
		snprintf(buf, n, "%s", rep->str);
	else
		snprintf(buf, n, "(array %zu)", rep->elements);
	return buf;
}

static bool on_ok(int port, const char *fmt, const char *a, const char *b)
{
	redisReply *rep = on(port, fmt, a, b);
	bool ok = rep && rep->type == REDIS_REPLY_STATUS;
	if (!ok) {
		char s[200];
		printf("  on %d: %s\n", port, show(rep, s, sizeof s));
	}
	if (rep)
		freeReplyObject(rep);
	return ok;
}

static void wait_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

static bool info_has(int port, const char *section, const char *what)
{
	redisReply *rep = on(port, "INFO %s", section);
	bool yes = rep && rep->type == REDIS_REPLY_STRING && strstr(rep->str, what);
	if (rep)
		freeReplyObject(rep);
	return yes;
}

/* The port of the master owning slot, as node `port` sees it; 0 if none. */
static int owner_of(int port, unsigned slot)
{
	redisReply *rep = on(port, "CLUSTER SHARDS");
	struct redis_slotmap m;
	char *why = NULL;
	int p = 0;
	if (rep && redis_slotmap_parse(rep, true, slot, false, "127.0.0.1", &m, &why) == 0) {
		p = atoi(m.owner.port);
		redis_slotmap_free(&m);
	}
	free(why);
	if (rep)
		freeReplyObject(rep);
	return p;
}

static char *node_id(int port)
{
	redisReply *rep = on(port, "CLUSTER MYID");
	char *id = rep && rep->type == REDIS_REPLY_STRING ? xstrdup(rep->str) : NULL;
	if (rep)
		freeReplyObject(rep);
	return id;
}

/* Until every node agrees that slot is served by owner (0: any) and the
 * cluster is ok; false after 15 s. */
static bool settled(unsigned slot, int owner)
{
	for (int t = 0; t < 300; t++) {
		bool all = true;
		for (int i = 0; i < NODES && all; i++) {
			redisReply *rep = on(N[i].port, "CLUSTER INFO");
			all = rep && rep->type == REDIS_REPLY_STRING &&
			      strstr(rep->str, "cluster_state:ok");
			if (rep)
				freeReplyObject(rep);
			int o = owner_of(N[i].port, slot);
			if (!o || (owner && o != owner))
				all = false;
		}
		if (all)
			return true;
		wait_ms(50);
	}
	return false;
}

static struct redis *cluster_client(const char *seeds, const char *route_key)
{
	struct redis_uri u;
	char *why = NULL;
	if (redis_uri_parse(seeds, &u, &why) < 0) {
		printf("  %s: %s\n", seeds, why);
		free(why);
		return NULL;
	}
	u.route_key = route_key ? xstrdup(route_key) : NULL;
	struct redis_opts o = {.connect_timeout_ms = 2000, .command_timeout_ms = 8000};
	struct redis *r = redis_new(&u, &o);
	redis_uri_free(&u);
	if (redis_connect(r) < 0) {
		printf("  connect %s: %s\n", seeds, redis_errmsg(r));
		redis_free(r);
		return NULL;
	}
	return r;
}

static int port_of_addr(const struct redis *r)
{
	const char *c = strrchr(redis_addr(r), ':');
	return c ? atoi(c + 1) : 0;
}

static unsigned slot_of(const char *k)
{
	return redis_key_slot(k, strlen(k));
}

/* A master that does not own slot. */
static int other_master(int owner, unsigned slot_hint)
{
	for (int i = 0; i < NODES; i++) {
		if (N[i].port == owner)
			continue;
		if (info_has(N[i].port, "replication", "role:master"))
			return N[i].port;
	}
	(void)slot_hint;
	return 0;
}

/* rep (freed here), the reply of r to what, shows as want. */
static void check_reply(struct redis *r, redisReply *rep, const char *what, const char *want)
{
	char s[300];
	show(rep, s, sizeof s);
	if (strcmp(s, want) != 0)
		T_FAIL_("%s: got %s (%s), want %s", what, s, rep ? "reply" : redis_errmsg(r), want);
	if (rep)
		freeReplyObject(rep);
}

static void check_cmd(struct redis *r, const char *fmt, const char *arg, const char *want)
{
	char what[200];
	snprintf(what, sizeof what, "%s %s", fmt, arg);
	check_reply(r, redis_command(r, fmt, arg), what, want);
}

/* The next reply of r's pipeline shows as want. */
static void check_next(struct redis *r, const char *what, const char *want)
{
	check_reply(r, redis_get_reply(r, -1), what, want);
}

TEST(routes_to_the_slot_master_from_a_seed_that_is_not_it)
{
	REQUIRE(cluster_up);
	unsigned slot = slot_of("{events}");
	int owner = owner_of(N[0].port, slot);
	int other = other_master(owner, slot);
	REQUIRE(owner && other);
	/* A dead seed first, then a master that does not own the slot. */
	char *seeds = xasprintf("redis://127.0.0.1:1,127.0.0.1:%d", other);
	struct redis *r = cluster_client(seeds, "{events}");
	free(seeds);
	seeds = NULL;
	REQUIRE(r != NULL);
	CHECK_INT(redis_mode(r), REDIS_MODE_CLUSTER);
	CHECK_INT(port_of_addr(r), owner);
	char want[100];
	snprintf(want, sizeof want, "cluster, slot 9102 on 127.0.0.1:%d", owner);
	CHECK_STR(redis_describe(r), want);
	check_cmd(r, "SET %s 1", "{events}:route", "OK");
	/* Stored on the owner itself. */
	redisReply *rep = on(owner, "GET {events}:route");
	CHECK(rep && rep->type == REDIS_REPLY_STRING && strcmp(rep->str, "1") == 0);
	if (rep)
		freeReplyObject(rep);
	/* A key of another slot: answered (MOVED, served by its master once),
	 * the connection stays on the stream's slot. */
	char fkey[32] = "";
	unsigned fslot = 0;
	int fowner = 0;
	for (char c = 'a'; c <= 'z' && (!fowner || fowner == owner || fslot == 0); c++) {
		snprintf(fkey, sizeof fkey, "{%c}:x", c);
		fslot = slot_of(fkey);
		fowner = owner_of(N[0].port, fslot);
	}
	if (!fowner || fowner == owner) {
		redis_free(r);
		REQUIRE(!"a key of another master");
	}
	check_cmd(r, "SET %s 2", fkey, "OK");
	CHECK_INT(port_of_addr(r), owner);
	rep = on(fowner, "GET %s", fkey);
	CHECK(rep && rep->type == REDIS_REPLY_STRING && strcmp(rep->str, "2") == 0);
	if (rep)
		freeReplyObject(rep);
	redis_free(r);

	/* Without a route key: slot 0's master, then wherever MOVED leads. */
	seeds = xasprintf("redis://127.0.0.1:%d", other);
	r = cluster_client(seeds, NULL);
	free(seeds);
	REQUIRE(r != NULL);
	CHECK_INT(port_of_addr(r), owner_of(N[0].port, 0));
	check_cmd(r, "GET %s", fkey, "2");
	CHECK_INT(port_of_addr(r), fowner);
	snprintf(want, sizeof want, "cluster, slot %u on 127.0.0.1:%d", fslot, fowner);
	CHECK_STR(redis_describe(r), want);
	redis_free(r);

	/* Standalone stays standalone. */
	struct itredis S;
	REQUIRE(it_redis_start(&S, NULL) == 0);
	char *u = xasprintf("redis://127.0.0.1:%d", S.port);
	r = cluster_client(u, "{events}");
	free(u);
	if (r) {
		CHECK_INT(redis_mode(r), REDIS_MODE_STANDALONE);
		CHECK_STR(redis_describe(r), "standalone");
		redis_free(r);
	} else {
		T_FAIL_("standalone connect failed");
	}
	struct redis *sr = it_conn(&S);
	CHECK(sr && redis_mode(sr) == REDIS_MODE_STANDALONE);
	redis_free(sr);
	it_redis_cleanup(&S);
}

TEST(ask_during_a_migration_then_moved_after_it)
{
	REQUIRE(cluster_up);
	const char *tag = "{mig}";
	unsigned slot = slot_of(tag);
	int src = owner_of(N[0].port, slot);
	int dst = other_master(src, slot);
	REQUIRE(src && dst);
	char *sid = node_id(src), *did = node_id(dst);
	REQUIRE(sid && did);
	char *seeds = xasprintf("redis://127.0.0.1:%d", dst);
	struct redis *r = cluster_client(seeds, tag);
	REQUIRE(r != NULL);
	CHECK_INT(port_of_addr(r), src);
	/* A second client, a blocking reader, stays on the source too. */
	struct redis *rd = cluster_client(seeds, tag);
	free(seeds);
	REQUIRE(rd != NULL);
	check_cmd(r, "SET %s 10", "{mig}:a", "OK");
	check_cmd(r, "SET %s 20", "{mig}:b", "OK");

	char slotstr[16];
	snprintf(slotstr, sizeof slotstr, "%u", slot);
	CHECK(on_ok(dst, "CLUSTER SETSLOT %s IMPORTING %s", slotstr, sid));
	CHECK(on_ok(src, "CLUSTER SETSLOT %s MIGRATING %s", slotstr, did));
	char dport[16];
	snprintf(dport, sizeof dport, "%d", dst);
	CHECK(on_ok(src, "MIGRATE 127.0.0.1 %s {mig}:a 0 5000", dport, NULL));

	/* Keys on both sides: TRYAGAIN, resent with a bounded backoff, then
	 * the error goes to the caller (100+200+400+800+1000 ms). */
	int64_t t0 = now_mono_ns();
	redisReply *rep = redis_command(r, "MGET {mig}:a {mig}:b");
	int64_t took = (now_mono_ns() - t0) / NS_PER_MS;
	CHECK(rep && rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "TRYAGAIN", 8) == 0);
	if (rep)
		freeReplyObject(rep);
	if (took < 2000 || took > 4000)
		T_FAIL_("TRYAGAIN given up after %" PRId64 " ms, want about 2500", took);
	CHECK(redis_is_connected(r));
	check_cmd(r, "GET %s", "{mig}:b", "20");

	t_capture_logs();
	/* {mig}:a is on dst now: the source answers ASK, the module asks dst. */
	check_cmd(r, "GET %s", "{mig}:a", "10");
	check_cmd(r, "INCR %s", "{mig}:a", "(int) 11");
	check_cmd(r, "GET %s", "{mig}:b", "20");
	/* A pipeline whose first command is redirected (ASK) and whose second
	 * runs on the source: both once, replies in order. */
	CHECK_INT(redis_append(r, "INCR %s", "{mig}:a"), 0);
	CHECK_INT(redis_append(r, "INCR %s", "{mig}:b"), 0);
	check_next(r, "INCR {mig}:a (ASK)", "(int) 12");
	check_next(r, "INCR {mig}:b", "(int) 21");
	CHECK_INT(port_of_addr(r), src); /* ASK does not move the connection */

	/* Finish the migration: the slot is dst's. */
	CHECK(on_ok(src, "MIGRATE 127.0.0.1 %s {mig}:b 0 5000", dport, NULL));
	CHECK(on_ok(dst, "CLUSTER SETSLOT %s NODE %s", slotstr, did));
	CHECK(on_ok(src, "CLUSTER SETSLOT %s NODE %s", slotstr, did));
	for (int i = 0; i < NODES; i++)
		if (N[i].port != src && N[i].port != dst &&
		    info_has(N[i].port, "replication", "role:master"))
			CHECK(on_ok(N[i].port, "CLUSTER SETSLOT %s NODE %s", slotstr, did));
	REQUIRE(settled(slot, dst));
	/* MOVED: the module re-reads the map and follows the slot; a pipeline
	 * of two, both moved, each runs exactly once. */
	CHECK_INT(redis_append(r, "INCR %s", "{mig}:a"), 0);
	CHECK_INT(redis_append(r, "INCR %s", "{mig}:b"), 0);
	check_next(r, "INCR {mig}:a (MOVED)", "(int) 13");
	check_next(r, "INCR {mig}:b (MOVED)", "(int) 22");
	CHECK_INT(port_of_addr(r), dst);
	char *logs = t_captured_logs();
	t_release_logs();
	/* One WARN for the migration (the first ASK on the connection), one
	 * WARN for the MOVED episode (a pipeline of two) and its INFO. */
	char line[400];
	snprintf(line, sizeof line,
		 "level=WARN msg=\"redis slot migrating: commands for the keys already moved go "
		 "to the target node (ASKING)\" addr=redis://127.0.0.1:%d to=127.0.0.1:%d "
		 "reason=\"ASK %u 127.0.0.1:%d\"",
		 src, dst, slot, dst);
	CHECK_INT(t_count(logs, line), 1);
	CHECK_INT(t_count(logs, "level=WARN"), 2);
	snprintf(line, sizeof line,
		 "level=WARN msg=\"redis command redirected; resending it\" "
		 "addr=redis://127.0.0.1:%d to=redis://127.0.0.1:%d reason=\"MOVED %u "
		 "127.0.0.1:%d\"",
		 src, dst, slot, dst);
	CHECK_INT(t_count(logs, line), 1);
	snprintf(line, sizeof line,
		 "level=INFO msg=\"redis commands served again after a redirect\" "
		 "addr=redis://127.0.0.1:%d",
		 dst);
	CHECK_INT(t_count(logs, line), 1);
	CHECK_INT(t_count(logs, "level=INFO"), 1);
	if (t_failed_)
		printf("%s", logs);
	free(logs);
	/* The blocking read through redis_wait_reply's short soft waits:
	 * MOVED, re-routed, resent, and its answer read as before. */
	rep = on(dst, "XADD {mig}:s 1-1 f v");
	if (rep)
		freeReplyObject(rep);
	rep = on(dst, "XGROUP CREATE {mig}:s g 0");
	if (rep)
		freeReplyObject(rep);
	CHECK_INT(
		redis_append(rd, "XREADGROUP GROUP g c COUNT 5 BLOCK 2000 STREAMS %s >", "{mig}:s"),
		0);
	rep = NULL;
	int w = 0;
	for (int t = 0; t < 50 && w == 0; t++)
		w = redis_wait_reply(rd, 200, &rep);
	CHECK_INT(w, 1);
	CHECK(rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 1 &&
	      rep->element[0]->elements == 2 && rep->element[0]->element[1]->elements == 1 &&
	      strcmp(rep->element[0]->element[1]->element[0]->element[0]->str, "1-1") == 0);
	if (rep)
		freeReplyObject(rep);
	CHECK_INT(port_of_addr(rd), dst);
	/* Nothing waits: a soft timeout is 0 with the connection kept. */
	CHECK_INT(
		redis_append(rd, "XREADGROUP GROUP g c COUNT 5 BLOCK 300 STREAMS %s >", "{mig}:s"),
		0);
	rep = NULL;
	CHECK_INT(redis_wait_reply(rd, 100, &rep), 0);
	CHECK_INT(redis_wait_reply(rd, 1000, &rep), 1);
	CHECK(rep && rep->type == REDIS_REPLY_NIL);
	if (rep)
		freeReplyObject(rep);
	redis_free(rd);
	rep = on(dst, "MGET {mig}:a {mig}:b");
	CHECK(rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 && rep->element[0]->str &&
	      strcmp(rep->element[0]->str, "13") == 0 && rep->element[1]->str &&
	      strcmp(rep->element[1]->str, "22") == 0);
	if (rep)
		freeReplyObject(rep);
	redis_free(r);
	free(sid);
	free(did);
}

/* How many entries of stream key (on the node at port) have field n = v. */
static int entries_with(int port, const char *key, const char *v)
{
	redisReply *rep = on(port, "XRANGE %s - +", key);
	int n = -1;
	if (rep && rep->type == REDIS_REPLY_ARRAY) {
		n = 0;
		for (size_t i = 0; i < rep->elements; i++) {
			const redisReply *kv = rep->element[i]->element[1];
			for (size_t j = 0; j + 1 < kv->elements; j += 2)
				n += strcmp(kv->element[j]->str, "n") == 0 &&
				     strcmp(kv->element[j + 1]->str, v) == 0;
		}
	}
	if (rep)
		freeReplyObject(rep);
	return n;
}

/* The ids group g of key has pending (on the node at port), ","-joined. */
static char *pending_ids(int port, const char *key)
{
	redisReply *rep = on(port, "XPENDING %s g - + 100", key);
	struct buf b;
	buf_init(&b, 4096);
	buf_appendf(&b, "%s", "");
	for (size_t i = 0; rep && rep->type == REDIS_REPLY_ARRAY && i < rep->elements; i++)
		buf_appendf(&b, "%s%s", i ? "," : "", rep->element[i]->element[0]->str);
	if (!rep || rep->type != REDIS_REPLY_ARRAY)
		buf_appendf(&b, "(no reply)");
	if (rep)
		freeReplyObject(rep);
	return buf_steal(&b);
}

/* The next reply of r is an XADD's: a new entry id. */
static void check_added(struct redis *r, redisReply *rep, const char *what)
{
	if (!rep || rep->type != REDIS_REPLY_STRING || !strchr(rep->str, '-')) {
		char s[200];
		T_FAIL_("%s: got %s (%s), want an entry id", what, show(rep, s, sizeof s),
			rep ? "reply" : redis_errmsg(r));
	}
	if (rep)
		freeReplyObject(rep);
}

/* XADD and XACK, the consumer's writes, resent after ASK (a migration
 * under way) and after MOVED (the slot moved): each takes effect exactly
 * once. An XADD run twice would add a second entry (its id is '*'); an
 * XACK run twice would answer 0 the second time, and one sent to the wrong
 * node would leave its entry pending. The stream's entries and its group's
 * pending list are read from the node that owns the slot at the end. */
TEST(xadd_and_xack_resent_after_ask_and_moved_take_effect_once)
{
	REQUIRE(cluster_up);
	const char *key = "{xr}:s";
	unsigned slot = slot_of(key);
	int src = owner_of(N[0].port, slot);
	int dst = other_master(src, slot);
	REQUIRE(src && dst);
	char *sid = node_id(src), *did = node_id(dst);
	REQUIRE(sid && did);
	/* Five entries read by the group and so pending: 1-1 .. 1-5. */
	redisReply *rep = on(src, "XGROUP CREATE %s g 0 MKSTREAM", key);
	CHECK(rep && rep->type == REDIS_REPLY_STATUS);
	if (rep)
		freeReplyObject(rep);
	for (int i = 1; i <= 5; i++) {
		char id[16];
		snprintf(id, sizeof id, "1-%d", i);
		rep = on(src, "XADD %s %s f p", key, id);
		CHECK(rep && rep->type == REDIS_REPLY_STRING);
		if (rep)
			freeReplyObject(rep);
	}
	rep = on(src, "XREADGROUP GROUP g c COUNT 10 STREAMS %s >", key);
	CHECK(rep && rep->type == REDIS_REPLY_ARRAY);
	if (rep)
		freeReplyObject(rep);
	char *pend = pending_ids(src, key);
	CHECK_STR(pend, "1-1,1-2,1-3,1-4,1-5");
	free(pend);

	char *seeds = xasprintf("redis://127.0.0.1:%d", dst);
	struct redis *r = cluster_client(seeds, key);
	/* A second client, left on the source until MOVED sends it on. */
	struct redis *r2 = cluster_client(seeds, key);
	free(seeds);
	REQUIRE(r && r2);
	CHECK_INT(port_of_addr(r), src);
	CHECK_INT(port_of_addr(r2), src);
	check_added(r, redis_command(r, "XADD %s * n 0", key), "XADD n 0 (no redirect)");

	/* Migration under way, the stream already on dst: the source answers
	 * ASK for it. */
	char slotstr[16], dport[16];
	snprintf(slotstr, sizeof slotstr, "%u", slot);
	snprintf(dport, sizeof dport, "%d", dst);
	CHECK(on_ok(dst, "CLUSTER SETSLOT %s IMPORTING %s", slotstr, sid));
	CHECK(on_ok(src, "CLUSTER SETSLOT %s MIGRATING %s", slotstr, did));
	CHECK(on_ok(src, "MIGRATE 127.0.0.1 %s {xr}:s 0 5000", dport, NULL));
	/* The premise: the source no longer serves the key. */
	rep = on(src, "XLEN %s", key);
	CHECK(rep && rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "ASK ", 4) == 0);
	if (rep)
		freeReplyObject(rep);
	t_capture_logs();
	check_added(r, redis_command(r, "XADD %s * n 1", key), "XADD n 1 (ASK)");
	check_cmd(r, "XACK {xr}:s g %s", "1-1", "(int) 1");
	/* A pipeline, both redirected: each once, replies in order. */
	CHECK_INT(redis_append(r, "XADD %s * n 2", key), 0);
	CHECK_INT(redis_append(r, "XACK {xr}:s g %s", "1-2"), 0);
	check_added(r, redis_get_reply(r, -1), "XADD n 2 (ASK, pipelined)");
	check_next(r, "XACK 1-2 (ASK, pipelined)", "(int) 1");
	CHECK_INT(port_of_addr(r), src); /* ASK does not move the connection */
	char *logs = t_captured_logs();
	t_release_logs();
	CHECK(t_count(logs, "reason=\"ASK ") >= 1);
	if (t_failed_)
		printf("%s", logs);
	free(logs);

	/* The slot is dst's: MOVED. */
	CHECK(on_ok(dst, "CLUSTER SETSLOT %s NODE %s", slotstr, did));
	CHECK(on_ok(src, "CLUSTER SETSLOT %s NODE %s", slotstr, did));
	for (int i = 0; i < NODES; i++)
		if (N[i].port != src && N[i].port != dst &&
		    info_has(N[i].port, "replication", "role:master"))
			CHECK(on_ok(N[i].port, "CLUSTER SETSLOT %s NODE %s", slotstr, did));
	REQUIRE(settled(slot, dst));
	t_capture_logs();
	CHECK_INT(redis_append(r, "XADD %s * n 3", key), 0);
	CHECK_INT(redis_append(r, "XACK {xr}:s g %s", "1-3"), 0);
	check_added(r, redis_get_reply(r, -1), "XADD n 3 (MOVED, pipelined)");
	check_next(r, "XACK 1-3 (MOVED, pipelined)", "(int) 1");
	check_cmd(r2, "XACK {xr}:s g %s", "1-4", "(int) 1");
	check_added(r2, redis_command(r2, "XADD %s * n 4", key), "XADD n 4 (after MOVED)");
	CHECK_INT(port_of_addr(r), dst);
	CHECK_INT(port_of_addr(r2), dst);
	logs = t_captured_logs();
	t_release_logs();
	/* The premise: both clients were sent on by MOVED. */
	CHECK_INT(t_count(logs, "reason=\"MOVED "), 2);
	if (t_failed_)
		printf("%s", logs);
	free(logs);

	/* Each XADD once, the five set-up entries kept; only 1-5 pending. */
	for (int i = 0; i <= 4; i++) {
		char v[16];
		snprintf(v, sizeof v, "%d", i);
		int n = entries_with(dst, key, v);
		if (n != 1)
			T_FAIL_("entries with n = %s on the slot's owner: %d, want 1", v, n);
	}
	rep = on(dst, "XLEN %s", key);
	CHECK(rep && rep->type == REDIS_REPLY_INTEGER && rep->integer == 5 + 5);
	if (rep)
		freeReplyObject(rep);
	pend = pending_ids(dst, key);
	CHECK_STR(pend, "1-5");
	free(pend);
	redis_free(r);
	redis_free(r2);
	free(sid);
	free(did);
}

/* The replica of the master at port, or 0. */
static int replica_of(int port)
{
	char *id = node_id(port);
	if (!id)
		return 0;
	redisReply *rep = on(port, "CLUSTER REPLICAS %s", id);
	free(id);
	int p = 0;
	if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements > 0 &&
	    rep->element[0]->type == REDIS_REPLY_STRING) {
		const char *c = strchr(rep->element[0]->str, ':');
		p = c ? atoi(c + 1) : 0;
	}
	if (rep)
		freeReplyObject(rep);
	return p;
}

TEST(moved_after_a_manual_failover_pipeline_runs_once)
{
	REQUIRE(cluster_up);
	const char *tag = "{fo}";
	unsigned slot = slot_of(tag);
	int master = owner_of(N[0].port, slot);
	REQUIRE(master);
	int replica = replica_of(master);
	REQUIRE(replica);
	struct redis *r = cluster_client("redis://127.0.0.1:1,127.0.0.1:"
					 "1",
					 tag);
	CHECK(r == NULL); /* no seed answers: a clear error, no crash */
	char *seeds = xasprintf("redis://127.0.0.1:%d", N[0].port);
	r = cluster_client(seeds, tag);
	free(seeds);
	REQUIRE(r != NULL);
	CHECK_INT(port_of_addr(r), master);
	check_cmd(r, "SET %s 0", "{fo}:n", "OK");
	/* The replica must have it before the failover. */
	for (int t = 0; t < 100; t++) {
		redisReply *rep = on(replica, "READONLY");
		if (rep)
			freeReplyObject(rep);
		if (info_has(replica, "replication", "master_link_status:up"))
			break;
		wait_ms(50);
	}
	/* A reader blocked on the master through the failover (the master
	 * unblocks it: UNBLOCKED, or its next command gets MOVED). */
	redisReply *rep = on(master, "XGROUP CREATE {fo}:s g $ MKSTREAM");
	CHECK(rep && rep->type == REDIS_REPLY_STATUS);
	if (rep)
		freeReplyObject(rep);
	seeds = xasprintf("redis://127.0.0.1:%d", N[0].port);
	struct redis *rd = cluster_client(seeds, tag);
	free(seeds);
	REQUIRE(rd != NULL);
	CHECK_INT(
		redis_append(rd, "XREADGROUP GROUP g c COUNT 5 BLOCK 20000 STREAMS %s >", "{fo}:s"),
		0);
	rep = NULL;
	CHECK_INT(redis_wait_reply(rd, 200, &rep), 0);
	for (int t = 0; t < 100; t++) {
		if (info_has(replica, "replication", "master_link_status:up"))
			break;
		wait_ms(50);
	}
	rep = on(replica, "CLUSTER FAILOVER");
	CHECK(rep && rep->type == REDIS_REPLY_STATUS);
	if (rep)
		freeReplyObject(rep);
	bool promoted = false;
	for (int t = 0; t < 200 && !promoted; t++) {
		promoted = info_has(replica, "replication", "role:master");
		if (!promoted)
			wait_ms(50);
	}
	REQUIRE(promoted);
	REQUIRE(settled(slot, replica));
	t_capture_logs();
	CHECK_INT(redis_append(r, "INCR %s", "{fo}:n"), 0);
	CHECK_INT(redis_append(r, "INCR %s", "{fo}:m"), 0);
	const char *bin[] = {"SET", "{fo}:bin", "x\0y"};
	const size_t binlen[] = {3, 8, 3};
	CHECK_INT(redis_append_argv(r, 3, bin, binlen), 0);
	check_next(r, "INCR {fo}:n", "(int) 1");
	check_next(r, "INCR {fo}:m", "(int) 1");
	check_next(r, "SET {fo}:bin x\\0y", "OK");
	rep = on(replica, "STRLEN {fo}:bin");
	CHECK(rep && rep->type == REDIS_REPLY_INTEGER && rep->integer == 3);
	if (rep)
		freeReplyObject(rep);
	CHECK_INT(port_of_addr(r), replica);
	char *logs = t_captured_logs();
	t_release_logs();
	CHECK_INT(t_count(logs, "level=WARN msg=\"redis command redirected; resending it\""), 1);
	CHECK_INT(t_count(logs, "reason=\"MOVED "), 1);
	CHECK_INT(t_count(logs, "level=INFO msg=\"redis commands served again after a redirect\""),
		  1);
	if (t_failed_)
		printf("%s", logs);
	free(logs);
	rep = on(replica, "MGET {fo}:n {fo}:m");
	CHECK(rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 && rep->element[0]->str &&
	      strcmp(rep->element[0]->str, "1") == 0 && rep->element[1]->str &&
	      strcmp(rep->element[1]->str, "1") == 0);
	if (rep)
		freeReplyObject(rep);
	/* The blocked reader follows the slot and gets the new entry. */
	rep = on(replica, "XADD {fo}:s 5-1 f v");
	if (rep)
		freeReplyObject(rep);
	int w = 0;
	rep = NULL;
	for (int t = 0; t < 100 && w == 0; t++)
		w = redis_wait_reply(rd, 200, &rep);
	CHECK_INT(w, 1);
	CHECK(rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 1 &&
	      rep->element[0]->elements == 2 && rep->element[0]->element[1]->elements == 1 &&
	      strcmp(rep->element[0]->element[1]->element[0]->element[0]->str, "5-1") == 0);
	if (!rep || rep->type == REDIS_REPLY_ERROR)
		printf("  reader: %s\n", rep ? rep->str : redis_errmsg(rd));
	if (rep)
		freeReplyObject(rep);
	CHECK_INT(port_of_addr(rd), replica);
	redis_free(rd);
	/* A script after the redirect: the new master may lack it (NOSCRIPT
	 * then EVAL). */
	struct redis_script sc;
	redis_script_init(&sc, "return redis.call('INCR', KEYS[1])");
	const char *argv[] = {"1", "{fo}:n"};
	check_reply(r, redis_script_run(r, &sc, 2, argv, NULL), "EVALSHA INCR {fo}:n", "(int) 2");
	redis_free(r);
}

/* ---- sentinel ------------------------------------------------------------ */

static pid_t spawn_sentinel(const char *conf, int port)
{
	char portstr[16];
	snprintf(portstr, sizeof portstr, "%d", port);
	pid_t pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 1);
		dup2(null, 2);
		execlp("redis-server", "redis-server", conf, "--sentinel", "--port", portstr,
		       "--bind", "127.0.0.1", (char *)NULL);
		_exit(127);
	}
	return pid;
}

/* The master port sentinel s names, or 0. */
static int sentinel_master(int s)
{
	redisReply *rep = on(s, "SENTINEL get-master-addr-by-name relaymaster");
	int p = rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2
			? atoi(rep->element[1]->str)
			: 0;
	if (rep)
		freeReplyObject(rep);
	return p;
}

static int start_sentinels(void)
{
	if (it_redis_start(&SM, NULL) < 0)
		return -1;
	const char *rep_args[] = {"--replicaof", "127.0.0.1", SM.portstr, NULL};
	if (it_redis_start(&SR, rep_args) < 0)
		return -1;
	snprintf_(sdir, sizeof sdir, "/tmp/relay-itc.XXXXXX");
	if (!mkdtemp(sdir))
		return -1;
	for (int i = 0; i < 3; i++) {
		sport[i] = it_free_port();
		char *conf = xasprintf("%s/s%d.conf", sdir, i);
		FILE *f = fopen(conf, "w");
		if (!f)
			return -1;
		fprintf(f,
			"dir %s\nsentinel monitor relaymaster 127.0.0.1 %d 2\n"
			"sentinel down-after-milliseconds relaymaster 2000\n"
			"sentinel failover-timeout relaymaster 10000\n",
			sdir, SM.port);
		fclose(f);
		spid[i] = spawn_sentinel(conf, sport[i]);
		free(conf);
	}
	/* Every sentinel knows the master and the replica; the replica is in sync. */
	for (int t = 0; t < 400; t++) {
		bool ok = info_has(SR.port, "replication", "master_link_status:up");
		for (int i = 0; i < 3 && ok; i++) {
			ok = sentinel_master(sport[i]) == SM.port;
			redisReply *rep = on(sport[i], "SENTINEL replicas relaymaster");
			ok = ok && rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 1;
			if (rep)
				freeReplyObject(rep);
			rep = on(sport[i], "SENTINEL sentinels relaymaster");
			ok = ok && rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2;
			if (rep)
				freeReplyObject(rep);
		}
		if (ok)
			return 0;
		wait_ms(50);
	}
	return -1;
}

TEST(sentinel_resolves_and_follows_a_failover)
{
	if (!sentinel_up) {
		T_FAIL_("the sentinels did not come up");
		return;
	}
	char *uri = xasprintf("redis-sentinel://127.0.0.1:1,127.0.0.1:%d,127.0.0.1:%d/relaymaster",
			      sport[0], sport[1]);
	struct redis *r = cluster_client(uri, NULL);
	REQUIRE(r != NULL);
	CHECK_INT(redis_mode(r), REDIS_MODE_SENTINEL);
	CHECK_INT(port_of_addr(r), SM.port);
	char want[120];
	snprintf(want, sizeof want, "sentinel master relaymaster at 127.0.0.1:%d", SM.port);
	CHECK_STR(redis_describe(r), want);
	check_cmd(r, "INCR %s", "k", "(int) 1");
	/* Wait until the replica has it, then fail over. */
	for (int t = 0; t < 100; t++) {
		redisReply *rep = on(SR.port, "GET k");
		bool there = rep && rep->type == REDIS_REPLY_STRING;
		if (rep)
			freeReplyObject(rep);
		if (there)
			break;
		wait_ms(50);
	}
	t_capture_logs();
	redisReply *rep = on(sport[0], "SENTINEL FAILOVER relaymaster");
	CHECK(rep && rep->type == REDIS_REPLY_STATUS);
	if (rep)
		freeReplyObject(rep);
	bool moved = false;
	for (int t = 0; t < 400 && !moved; t++) {
		moved = sentinel_master(sport[0]) == SR.port &&
			info_has(SR.port, "replication", "role:master") &&
			info_has(SM.port, "replication", "role:slave");
		if (!moved)
			wait_ms(50);
	}
	REQUIRE(moved);
	/* The connection follows +switch-master, or the old master refuses
	 * the write (READONLY) or dropped the connection: either way the INCR
	 * runs once, on the new master. */
	rep = redis_command(r, "INCR %s", "k");
	bool dropped = rep == NULL;
	if (dropped) {
		printf("  (the old master closed the connection: %s)\n", redis_errmsg(r));
		REQUIRE(redis_connect(r) == 0);
		rep = redis_command(r, "INCR %s", "k");
	}
	check_reply(r, rep, "INCR k", "(int) 2");
	CHECK_INT(port_of_addr(r), SR.port);
	snprintf(want, sizeof want, "sentinel master relaymaster at 127.0.0.1:%d", SR.port);
	CHECK_STR(redis_describe(r), want);
	char *logs = t_captured_logs();
	t_release_logs();
	if (!dropped) {
		/* The sentinels' +switch-master (redis_sentinel.c "Sentinel
		 * mode") moved the connection before the command; had it not
		 * arrived yet, the old master's READONLY would have. */
		int followed = t_count(logs, "level=INFO msg=\"the sentinels switched the master; "
					     "following it\"");
		int redirected = t_count(logs, "level=WARN msg=\"redis command redirected; "
					       "resending it\"");
		CHECK_INT(followed + redirected, 1);
		CHECK(followed == 1 || strstr(logs, "reason=\"READONLY ") != NULL);
		printf("  (followed the switch %s)\n",
		       followed ? "on +switch-master" : "on READONLY");
	}
	free(logs);
	redis_free(r);
	free(uri);
}

TEST(sentinel_without_the_master_is_a_clear_error)
{
	if (!sentinel_up) {
		T_FAIL_("the sentinels did not come up");
		return;
	}
	char *uri = xasprintf("redis-sentinel://127.0.0.1:%d/nosuchmaster", sport[2]);
	struct redis_uri u;
	char *why = NULL;
	REQUIRE(redis_uri_parse(uri, &u, &why) == 0);
	struct redis *r = redis_new(&u, NULL);
	redis_uri_free(&u);
	CHECK_INT(redis_connect(r), -1);
	char want[200];
	snprintf(want, sizeof want,
		 "sentinel redis://127.0.0.1:%d does not know master nosuchmaster", sport[2]);
	CHECK_STR(redis_errmsg(r), want);
	redis_free(r);
	free(uri);
}

static bool port_free(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				.sin_port = htons((uint16_t)port)};
	bool ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
	close(fd);
	return ok;
}

/* A cluster node (it_redis_start would route its probe: no slot is served
 * before the cluster is created). */
static int start_node(struct itredis *it)
{
	/* The cluster bus listens on port + 10000. */
	int port;
	do
		port = it_free_port();
	while (port + 10000 > 65535 || !port_free(port + 10000));
	static const char *const cluster[] = {"--cluster-enabled",
					      "yes",
					      "--cluster-config-file",
					      "nodes.conf",
					      "--cluster-node-timeout",
					      "2000",
					      NULL};
	if (it_redis_spawn(it, port, cluster) < 0)
		return -1;
	for (int i = 0; i < 100; i++) {
		redisReply *rep = on(it->port, "PING");
		bool ok = rep != NULL;
		if (rep)
			freeReplyObject(rep);
		if (ok)
			return 0;
		wait_ms(50);
	}
	return -1;
}

static int start_cluster(void)
{
	for (int i = 0; i < NODES; i++)
		if (start_node(&N[i]) < 0) {
			fprintf(stderr, "cannot start a cluster node on port %d\n", N[i].port);
			return -1;
		}
	char cmd[600];
	int n = snprintf(cmd, sizeof cmd, "redis-cli --cluster create");
	for (int i = 0; i < NODES; i++)
		n += snprintf(cmd + n, sizeof cmd - (size_t)n, " 127.0.0.1:%d", N[i].port);
	snprintf(cmd + n, sizeof cmd - (size_t)n,
		 " --cluster-replicas 1 --cluster-yes >/dev/null 2>&1");
	if (system(cmd) != 0) {
		fprintf(stderr, "failed: %s\n", cmd);
		return -1;
	}
	if (!settled(0, 0)) {
		fprintf(stderr, "the cluster did not settle\n");
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	cluster_up = start_cluster() == 0;
	if (!cluster_up)
		fprintf(stderr, "cannot start the cluster\n");
	sentinel_up = start_sentinels() == 0;
	static const struct t_case cases[] = {
		T_CASE(routes_to_the_slot_master_from_a_seed_that_is_not_it),
		T_CASE(ask_during_a_migration_then_moved_after_it),
		T_CASE(moved_after_a_manual_failover_pipeline_runs_once),
		T_CASE(xadd_and_xack_resent_after_ask_and_moved_take_effect_once),
		T_CASE(sentinel_resolves_and_follows_a_failover),
		T_CASE(sentinel_without_the_master_is_a_clear_error),
	};
	int rc = t_run_(__FILE__, cases, sizeof cases / sizeof cases[0], argc, argv);
	for (int i = 0; i < 3; i++)
		if (spid[i] > 0) {
			kill(spid[i], SIGTERM);
			waitpid(spid[i], NULL, 0);
		}
	it_redis_cleanup(&SM);
	it_redis_cleanup(&SR);
	if (sdir[0])
		t_rmtree(sdir);
	for (int i = 0; i < NODES; i++)
		it_redis_cleanup(&N[i]);
	return rc;
}
