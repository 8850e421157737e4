/* Redis Cluster and Sentinel: URI forms, hash slots, slot-map parsing,
 * and whom a redirect may reach (fake cluster nodes on loopback). The
 * routing itself runs against real servers in tests/it/redis_cluster_ha.c. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "io/redis.h"
#include "t.h"
#include "tfiles.h"
#include "base/util.h"

static struct redis_uri parse_ok(const char *s)
{
	struct redis_uri u;
	char *why = NULL;
	if (redis_uri_parse(s, &u, &why) < 0) {
		T_FAIL_("%s rejected: %s", s, why);
		free(why);
		memset(&u, 0, sizeof u);
	}
	return u;
}

TEST(seed_lists)
{
	struct redis_uri u = parse_ok("redis://u:p%2Cw,@@h1:7000,[::1]:7001,h3/2");
	REQUIRE(u.nhosts == 3);
	CHECK_STR(u.host, "h1");
	CHECK_STR(u.port, "7000");
	CHECK_STR(u.hosts[0].host, "h1");
	CHECK_STR(u.hosts[1].host, "::1");
	CHECK_STR(u.hosts[1].port, "7001");
	CHECK_STR(u.hosts[2].host, "h3");
	CHECK_STR(u.hosts[2].port, "6379");
	CHECK_STR(u.user, "u");
	CHECK_STR(u.password, "p,w,@");
	CHECK_INT(u.db, 2);
	CHECK(u.sentinel_master == NULL);
	struct redis_uri c = {0};
	u.route_key = xstrdup("{events}");
	u.sentinel_password = xstrdup("spw");
	redis_uri_copy(&c, &u);
	redis_uri_free(&u);
	REQUIRE(c.nhosts == 3);
	CHECK_STR(c.hosts[2].host, "h3");
	CHECK_STR(c.route_key, "{events}");
	CHECK_STR(c.sentinel_password, "spw");
	CHECK_STR(c.password, "p,w,@");
	redis_uri_free(&c);

	u = parse_ok("h:1");
	CHECK_INT((int)u.nhosts, 1);
	CHECK_STR(u.hosts[0].port, "1");
	redis_uri_free(&u);
	u = parse_ok("rediss://a:1,b:2");
	CHECK_INT(u.tls, 1);
	CHECK_INT((int)u.nhosts, 2);
	redis_uri_free(&u);
}

TEST(sentinel_uris)
{
	struct redis_uri u = parse_ok("redis-sentinel://u:pw@s1,s2:26380/mymaster/3");
	REQUIRE(u.nhosts == 2);
	CHECK_STR(u.hosts[0].port, "26379");
	CHECK_STR(u.hosts[1].port, "26380");
	CHECK_STR(u.sentinel_master, "mymaster");
	CHECK_STR(u.user, "u");
	CHECK_STR(u.password, "pw");
	CHECK_INT(u.db, 3);
	CHECK_INT(u.tls, 0);
	CHECK_INT(u.sentinel_tls, 0);
	redis_uri_free(&u);
	/* TLS to the sentinels too: their answer picks who gets the password. */
	u = parse_ok("rediss-sentinel://s1/m");
	CHECK_INT(u.tls, 1);
	CHECK_INT(u.sentinel_tls, 1);
	CHECK_STR(u.sentinel_master, "m");
	CHECK_INT(u.db, 0);
	struct redis_uri c = {0};
	redis_uri_copy(&c, &u);
	CHECK_INT(c.sentinel_tls, 1);
	redis_uri_free(&c);
	redis_uri_free(&u);
	u = parse_ok("rediss://h:1");
	CHECK_INT(u.sentinel_tls, 0);
	redis_uri_free(&u);
	u = parse_ok("redis-sentinel://s1/m/");
	CHECK_STR(u.sentinel_master, "m");
	redis_uri_free(&u);
}

TEST(uri_errors_are_exact)
{
	static const struct {
		const char *in, *why;
	} rows[] = {
		{"redis-sentinel://s1:26379", "missing master name: the form is "
					      "redis-sentinel://host:26379,.../<master-name>[/db]"},
		{"redis-sentinel://s1:26379/",
		 "missing master name: the form is "
		 "redis-sentinel://host:26379,.../<master-name>[/db]"},
		{"redis-sentinel://s1/m/x", "the path must be a database number, e.g. /0"},
		{"redis-sentinel://s1/m%01x", NULL},
		/* Fuzz findings: the master name error told the password apart. */
		{"redis-sentinel://s-sp/::+e@h:@\177223PPPR@PPPP",
		 "'@' after the host list: a password holding '/' must be percent-encoded as %2F"},
		{"rediss-sentinel://sDEt/2.in:%@@@\023@@@",
		 "'@' after the host list: a password holding '/' must be percent-encoded as %2F"},
		{"redis://u:pa/ss@h", "'@' after the host list: a password holding '/' must be "
				      "percent-encoded as %2F"},
		{"redis://h1:7000,h!2:7001", "host 2 of the list: invalid character '!' in host"},
		{"redis://h1:7000,h2:0",
		 "host 2 of the list: port must be a number from 1 to 65535"},
		{"redis://h1:7000,,h3", "empty entry 2 in the host list"},
		{"redis://h1:7000,", "empty entry 2 in the host list"},
		{"redis://h1,h2,h3,h4,h5,h6,h7,h8,h9,h10,h11,h12,h13,h14,h15,h16,h17",
		 "at most 16 hosts are allowed in the list, not 17"},
		{"h1:1,h2:2", "a host list needs the redis:// form, e.g. redis://h1:7000,h2:7001"},
		{"redis-cluster://h", "unsupported scheme 'redis-cluster'"},
		{"redis://h!", "invalid character '!' in host"},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		struct redis_uri u;
		char *why = NULL;
		if (redis_uri_parse(rows[i].in, &u, &why) == 0) {
			if (rows[i].why)
				T_FAIL_("accepted %s", rows[i].in);
			redis_uri_free(&u);
			continue;
		}
		if (rows[i].why)
			CHECK_STR(why, rows[i].why);
		else
			T_FAIL_("%s rejected: %s", rows[i].in, why);
		free(why);
	}
	/* 16 hosts are fine. */
	struct redis_uri u =
		parse_ok("redis://h1,h2,h3,h4,h5,h6,h7,h8,h9,h10,h11,h12,h13,h14,h15,h16");
	CHECK_INT((int)u.nhosts, 16);
	redis_uri_free(&u);
}

TEST(redact_hides_every_password)
{
	char *s = redis_uri_redact("redis-sentinel://u:s3cret@s1,s2/m");
	CHECK_STR(s, "redis-sentinel://u:xxxxx@s1,s2/m");
	free(s);
	s = redis_uri_redact("redis://u:s3,cr@et@h1:1,h2:2");
	CHECK_STR(s, "redis://u:xxxxx@h1:1,h2:2");
	free(s);
}

static unsigned slot_of(const char *k)
{
	return redis_key_slot(k, strlen(k));
}

TEST(key_slots_as_redis_cluster)
{
	/* The cluster spec's CRC16 check value: crc16("123456789") = 0x31C3. */
	CHECK_INT((int)slot_of("123456789"), 0x31C3 % 16384);
	CHECK_INT((int)slot_of("123456789"), 12739);
	/* Verified with CLUSTER KEYSLOT on redis-server 7.0. */
	CHECK_INT((int)slot_of("foo"), 12182);
	CHECK_INT((int)slot_of(""), 0);
	CHECK_INT((int)slot_of("{user1000}.following"), 3443);
	CHECK_INT((int)slot_of("foo{}{bar}"), 8363);
	CHECK_INT((int)slot_of("foo{{bar}}zap"), 4015);
	CHECK_INT((int)slot_of("foo{bar}{zap}"), 5061);
	CHECK_INT((int)slot_of("relay:{events}:dlq"), 9102);
	CHECK_INT((int)slot_of("{events}"), (int)slot_of("events"));
	CHECK_INT((int)slot_of("relay:{events}:dlq"), (int)slot_of("events"));
	CHECK_INT((int)slot_of("{user1000}.following"), (int)slot_of("{user1000}.followers"));
	CHECK_INT((int)slot_of("foo{}{bar}"), (int)redis_key_slot("foo{}{bar}", 10));
	CHECK((int)slot_of("foo{}{bar}") != (int)slot_of("bar"));
	CHECK_INT((int)slot_of("foo{{bar}}zap"), (int)slot_of("{bar"));
	CHECK_INT((int)slot_of("foo{bar}{zap}"), (int)slot_of("bar"));
	/* Embedded NUL bytes count (the length rules). */
	CHECK((int)redis_key_slot("a\0b", 3) != (int)slot_of("a"));
}

TEST(hash_tags)
{
	static const struct {
		const char *key, *tag; /* tag NULL: none */
	} rows[] = {
		{"{user1000}.following", "user1000"},
		{"foo{}{bar}", NULL},
		{"foo{{bar}}zap", "{bar"},
		{"foo{bar}{zap}", "bar"},
		{"events", NULL},
		{"{events", NULL},
		{"events}", NULL},
		{"}{x}", "x"},
		{"orders{relay}", "relay"},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		size_t off = 99, n = 99;
		bool has = redis_hash_tag(rows[i].key, strlen(rows[i].key), &off, &n);
		if (!rows[i].tag) {
			if (has)
				T_FAIL_("%s: tag at %zu+%zu, want none", rows[i].key, off, n);
			continue;
		}
		REQUIRE(has);
		char got[64];
		snprintf(got, sizeof got, "%.*s", (int)n, rows[i].key + off);
		CHECK_STR(got, rows[i].tag);
	}
}

/* ---- replies built by hand ---- */

static redisReply *r_new(int type)
{
	redisReply *r = xcalloc(1, sizeof *r);
	r->type = type;
	return r;
}

static redisReply *r_str(const char *s)
{
	redisReply *r = r_new(REDIS_REPLY_STRING);
	r->str = xstrdup(s);
	r->len = strlen(s);
	return r;
}

static redisReply *r_int(long long v)
{
	redisReply *r = r_new(REDIS_REPLY_INTEGER);
	r->integer = v;
	return r;
}

/* An array of n elements given as arguments. */
static redisReply *r_arr(size_t n, ...)
{
	redisReply *r = r_new(REDIS_REPLY_ARRAY);
	r->elements = n;
	r->element = xcalloc(n ? n : 1, sizeof *r->element);
	va_list ap;
	va_start(ap, n);
	for (size_t i = 0; i < n; i++)
		r->element[i] = va_arg(ap, redisReply *);
	va_end(ap);
	return r;
}

static redisReply *shard_node(const char *ip, const char *endpoint, long long port,
			      const char *role, const char *health)
{
	return r_arr(12, r_str("id"), r_str("abc"), r_str("port"), r_int(port), r_str("ip"),
		     r_str(ip), r_str("endpoint"), r_str(endpoint), r_str("role"), r_str(role),
		     r_str("health"), r_str(health));
}

/* Three shards as Redis 7.0 sends them; shard 2 (5461-10922 and 16000-16383)
 * has a failed old master and the promoted replica. */
static redisReply *three_shards(void)
{
	return r_arr(
		3,
		r_arr(4, r_str("slots"), r_arr(2, r_int(0), r_int(5460)), r_str("nodes"),
		      r_arr(2, shard_node("127.0.0.1", "127.0.0.1", 7000, "master", "online"),
			    shard_node("127.0.0.1", "127.0.0.1", 7003, "replica", "online"))),
		r_arr(4, r_str("slots"),
		      r_arr(4, r_int(5461), r_int(10922), r_int(16000), r_int(16383)),
		      r_str("nodes"),
		      r_arr(2, shard_node("127.0.0.1", "127.0.0.1", 7001, "master", "fail"),
			    shard_node("", "", 7004, "master", "online"))),
		r_arr(4, r_str("nodes"),
		      r_arr(1, shard_node("10.0.0.9", "node9.example", 7002, "master", "online")),
		      r_str("slots"), r_arr(2, r_int(10923), r_int(15999))));
}

TEST(slot_map_from_cluster_shards)
{
	redisReply *rep = three_shards();
	static const struct {
		unsigned slot;
		const char *host, *port;
	} rows[] = {
		{0, "127.0.0.1", "7000"}, {5460, "127.0.0.1", "7000"},	    {5461, "self", "7004"},
		{16383, "self", "7004"},  {10923, "node9.example", "7002"},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		struct redis_slotmap m;
		char *why = NULL;
		if (redis_slotmap_parse(rep, true, rows[i].slot, false, "self", &m, &why) < 0) {
			T_FAIL_("slot %u: %s", rows[i].slot, why);
			free(why);
			continue;
		}
		CHECK_STR(m.owner.host, rows[i].host);
		CHECK_STR(m.owner.port, rows[i].port);
		CHECK_INT((int)m.nnodes, 5);
		redis_slotmap_free(&m);
	}
	freeReplyObject(rep);
}

TEST(slot_map_from_cluster_slots)
{
	redisReply *rep =
		r_arr(2,
		      r_arr(4, r_int(0), r_int(8191),
			    r_arr(3, r_str("127.0.0.1"), r_int(7000), r_str("id")),
			    r_arr(2, r_str("127.0.0.1"), r_int(7003))),
		      r_arr(3, r_int(8192), r_int(16383), r_arr(2, r_str(""), r_int(7001))));
	struct redis_slotmap m;
	char *why = NULL;
	REQUIRE(redis_slotmap_parse(rep, false, 9000, false, "h", &m, &why) == 0);
	CHECK_STR(m.owner.host, "h");
	CHECK_STR(m.owner.port, "7001");
	CHECK_INT((int)m.nnodes, 3);
	redis_slotmap_free(&m);
	REQUIRE(redis_slotmap_parse(rep, false, 8191, false, "h", &m, &why) == 0);
	CHECK_STR(m.owner.port, "7000");
	redis_slotmap_free(&m);
	freeReplyObject(rep);
}

static void check_bad(redisReply *rep, bool shards, const char *want)
{
	struct redis_slotmap m;
	char *why = NULL;
	if (redis_slotmap_parse(rep, shards, 100, false, "h", &m, &why) == 0) {
		T_FAIL_("accepted; want %s", want);
		redis_slotmap_free(&m);
	} else {
		CHECK_STR(why, want);
		free(why);
	}
	CHECK(m.owner.host == NULL && m.nodes == NULL);
	freeReplyObject(rep);
}

TEST(odd_slot_maps_are_clear_errors)
{
	check_bad(r_str("x"), true, "malformed CLUSTER SHARDS reply: not an array");
	check_bad(r_arr(0), true,
		  "slot 100 is served by no master in CLUSTER SHARDS (is the "
		  "cluster down?)");
	check_bad(r_arr(1, r_arr(3, r_str("slots"), r_arr(0), r_str("nodes"))), true,
		  "malformed CLUSTER SHARDS reply: shard 1 is not a map");
	check_bad(r_arr(1, r_arr(2, r_str("nodes"), r_arr(0))), true,
		  "malformed CLUSTER SHARDS reply: shard 1 has no valid slots");
	check_bad(r_arr(1, r_arr(4, r_str("slots"), r_arr(2, r_int(5), r_int(1)), r_str("nodes"),
				 r_arr(0))),
		  true, "malformed CLUSTER SHARDS reply: shard 1 has an invalid slot range");
	check_bad(r_arr(1, r_arr(4, r_str("slots"), r_arr(2, r_int(0), r_int(16384)),
				 r_str("nodes"), r_arr(0))),
		  true, "malformed CLUSTER SHARDS reply: shard 1 has an invalid slot range");
	check_bad(r_arr(1, r_arr(4, r_str("slots"), r_arr(2, r_str("0"), r_int(10)), r_str("nodes"),
				 r_arr(0))),
		  true, "malformed CLUSTER SHARDS reply: shard 1 has an invalid slot range");
	check_bad(r_arr(1, r_arr(4, r_str("slots"), r_arr(2, r_int(0), r_int(200)), r_str("nodes"),
				 r_str("n"))),
		  true, "malformed CLUSTER SHARDS reply: shard 1 has no valid nodes");
	check_bad(r_arr(1, r_arr(4, r_str("slots"), r_arr(2, r_int(0), r_int(200)), r_str("nodes"),
				 r_arr(1, r_arr(1, r_str("ip"))))),
		  true, "malformed CLUSTER SHARDS reply: shard 1: node 1 is not a map");
	/* Unusable addresses (unknown, port 0, a space in the host) are skipped. */
	check_bad(r_arr(1, r_arr(4, r_str("slots"), r_arr(2, r_int(0), r_int(200)), r_str("nodes"),
				 r_arr(3, shard_node("?", "?", 7000, "master", "online"),
				       shard_node("a b", "", 7000, "master", "online"),
				       shard_node("1.2.3.4", "", 0, "master", "online")))),
		  true, "slot 100 is served by no master in CLUSTER SHARDS (is the cluster down?)");
	check_bad(r_arr(1, r_int(3)), false,
		  "malformed CLUSTER SLOTS reply: entry 1 is not a slot range");
	check_bad(r_arr(1, r_arr(3, r_int(0), r_int(200), r_arr(1, r_str("h")))), false,
		  "malformed CLUSTER SLOTS reply: entry 1: node 1 is not [host, port, ...]");
	check_bad(r_arr(1, r_arr(3, r_int(0), r_int(200), r_arr(2, r_str("h"), r_int(70000)))),
		  false, "malformed CLUSTER SLOTS reply: entry 1: node 1 is not [host, port, ...]");
	/* Too many entries. */
	redisReply *big = r_new(REDIS_REPLY_ARRAY);
	big->elements = REDIS_SHARDS_MAX + 1;
	big->element = xcalloc(big->elements, sizeof *big->element);
	for (size_t i = 0; i < big->elements; i++)
		big->element[i] = r_int(1);
	check_bad(big, true, "malformed CLUSTER SHARDS reply: more than 1024 entries");
}

/* Every one-element change to a valid map: a clear error or a map, never
 * a crash (run under ASan). */
TEST(mutated_slot_maps_never_crash)
{
	static const int types[] = {REDIS_REPLY_STRING, REDIS_REPLY_INTEGER, REDIS_REPLY_NIL,
				    REDIS_REPLY_ARRAY};
	for (int which = 0; which < 40; which++) {
		for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
			redisReply *rep = three_shards();
			/* Walk to the which-th element in depth-first order. */
			redisReply *stack[64];
			int sp = 0, seen = 0;
			stack[sp++] = rep;
			redisReply *target = NULL;
			while (sp && !target) {
				redisReply *e = stack[--sp];
				if (seen++ == which)
					target = e;
				if (e->type == REDIS_REPLY_ARRAY)
					for (size_t i = e->elements; i-- > 0 && sp < 64;)
						stack[sp++] = e->element[i];
			}
			if (target && target != rep) {
				if (target->type == REDIS_REPLY_ARRAY) {
					for (size_t i = 0; i < target->elements; i++)
						freeReplyObject(target->element[i]);
					free(target->element);
					target->element = NULL;
					target->elements = 0;
				}
				free(target->str);
				target->str = NULL;
				target->len = 0;
				target->type = types[t];
				if (types[t] == REDIS_REPLY_STRING) {
					target->str = xstrdup("");
				} else if (types[t] == REDIS_REPLY_ARRAY) {
					target->element = xcalloc(1, sizeof *target->element);
				}
			}
			for (int shards = 0; shards < 2; shards++) {
				struct redis_slotmap m;
				char *why = NULL;
				if (redis_slotmap_parse(rep, shards, 7000, true, "h", &m, &why) ==
				    0) {
					CHECK(m.owner.host != NULL);
					redis_slotmap_free(&m);
				} else {
					CHECK(why != NULL && (strncmp(why, "malformed", 9) == 0 ||
							      strncmp(why, "slot", 4) == 0));
					free(why);
				}
			}
			freeReplyObject(rep);
		}
	}
}

/* ---- fake cluster nodes: whom a MOVED or ASK may reach ---- */

/*
 * Each fake node listens on loopback and answers what Relay's routing asks:
 * AUTH (counted), INFO (cluster_enabled:1), CLUSTER SHARDS (one shard with
 * every slot: maps[0] for the first ask, maps[1] after; each a list of
 * nodes, the first the master) and GET (get_reply, raw RESP). One thread
 * serves every node and connection.
 */
#define FAKE_NODES 3
#define FAKE_CONNS 16
#define FAKE_MAP 3

struct fake_node {
	int lfd, port;
	struct fake_node *maps[2][FAKE_MAP]; /* NULL-ended */
	char get_reply[128];
	atomic_int accepts, auths, shards;
};

static struct fake_node fake[FAKE_NODES];
static atomic_int fake_stop;

static void fake_listen(struct fake_node *n)
{
	memset(n, 0, sizeof *n);
	n->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof a;
	if (n->lfd < 0 || bind(n->lfd, (struct sockaddr *)&a, sizeof a) < 0 ||
	    listen(n->lfd, 8) < 0 || getsockname(n->lfd, (struct sockaddr *)&a, &len) < 0) {
		perror("fake node");
		exit(1);
	}
	n->port = ntohs(a.sin_port);
}

static void fake_send(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w <= 0)
			return;
		p += w;
		n -= (size_t)w;
	}
}

static void fake_put(struct buf *b, const char *s)
{
	buf_appendf(b, "$%zu\r\n%s\r\n", strlen(s), s);
}

static void fake_shards(struct fake_node *n, struct buf *b)
{
	struct fake_node **map = n->maps[atomic_fetch_add(&n->shards, 1) ? 1 : 0];
	size_t k = 0;
	while (k < FAKE_MAP && map[k])
		k++;
	buf_appendf(b, "*1\r\n*4\r\n");
	fake_put(b, "slots");
	buf_appendf(b, "*2\r\n:0\r\n:16383\r\n");
	fake_put(b, "nodes");
	buf_appendf(b, "*%zu\r\n", k);
	for (size_t i = 0; i < k; i++) {
		buf_appendf(b, "*8\r\n");
		fake_put(b, "ip");
		fake_put(b, "127.0.0.1");
		fake_put(b, "port");
		buf_appendf(b, ":%d\r\n", map[i]->port);
		fake_put(b, "role");
		fake_put(b, i == 0 ? "master" : "replica");
		fake_put(b, "health");
		fake_put(b, "online");
	}
}

static void fake_answer(struct fake_node *n, int fd, const redisReply *req)
{
	struct buf b;
	buf_init(&b, 1 << 20);
	const char *cmd = req->type == REDIS_REPLY_ARRAY && req->elements &&
					  req->element[0]->type == REDIS_REPLY_STRING
				  ? req->element[0]->str
				  : "";
	if (strcasecmp(cmd, "AUTH") == 0) {
		atomic_fetch_add(&n->auths, 1);
		buf_appendf(&b, "+OK\r\n");
	} else if (strcasecmp(cmd, "INFO") == 0) {
		fake_put(&b, "cluster_enabled:1");
	} else if (strcasecmp(cmd, "CLUSTER") == 0) {
		fake_shards(n, &b);
	} else if (strcasecmp(cmd, "GET") == 0) {
		buf_appendf(&b, "%s", n->get_reply);
	} else {
		buf_appendf(&b, "+OK\r\n");
	}
	fake_send(fd, b.data, b.len);
	buf_free(&b);
}

static void *fake_serve(void *arg)
{
	(void)arg;
	struct {
		int fd;
		struct fake_node *n;
		redisReader *rd;
	} c[FAKE_CONNS];
	size_t nc = 0;
	while (!atomic_load(&fake_stop)) {
		struct pollfd p[FAKE_NODES + FAKE_CONNS];
		for (int i = 0; i < FAKE_NODES; i++)
			p[i] = (struct pollfd){.fd = fake[i].lfd, .events = POLLIN};
		for (size_t i = 0; i < nc; i++)
			p[FAKE_NODES + i] = (struct pollfd){.fd = c[i].fd, .events = POLLIN};
		if (poll(p, FAKE_NODES + nc, 50) <= 0)
			continue;
		for (int i = 0; i < FAKE_NODES; i++) {
			if (!(p[i].revents & POLLIN) || nc == FAKE_CONNS)
				continue;
			int fd = accept4(fake[i].lfd, NULL, NULL, SOCK_CLOEXEC);
			if (fd < 0)
				continue;
			atomic_fetch_add(&fake[i].accepts, 1);
			c[nc].fd = fd;
			c[nc].n = &fake[i];
			c[nc].rd = redisReaderCreate();
			nc++;
		}
		for (size_t i = 0; i < nc; i++) {
			if (!(p[FAKE_NODES + i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			char chunk[4096];
			ssize_t r = recv(c[i].fd, chunk, sizeof chunk, 0);
			void *req = NULL;
			bool bad = r <= 0 || redisReaderFeed(c[i].rd, chunk, (size_t)r) != REDIS_OK;
			while (!bad && redisReaderGetReply(c[i].rd, &req) == REDIS_OK && req) {
				fake_answer(c[i].n, c[i].fd, req);
				freeReplyObject(req);
				req = NULL;
			}
			if (bad) {
				close(c[i].fd);
				redisReaderFree(c[i].rd);
				c[i] = c[--nc];
				p[FAKE_NODES + i] = p[FAKE_NODES + nc];
				i--;
			}
		}
	}
	for (size_t i = 0; i < nc; i++) {
		close(c[i].fd);
		redisReaderFree(c[i].rd);
	}
	return NULL;
}

static pthread_t fake_thread;

static void fake_start(void)
{
	atomic_store(&fake_stop, 0);
	pthread_create(&fake_thread, NULL, fake_serve, NULL);
}

static void fake_end(void)
{
	atomic_store(&fake_stop, 1);
	pthread_join(fake_thread, NULL);
	for (int i = 0; i < FAKE_NODES; i++)
		close(fake[i].lfd);
}

/* A cluster connection with a password to the fake node A's port. */
static struct redis *fake_client(const struct fake_node *a)
{
	char *s = xasprintf("redis://relay:s3cret@127.0.0.1:%d", a->port);
	struct redis_uri u = parse_ok(s);
	free(s);
	struct redis_opts o = {.connect_timeout_ms = 2000, .command_timeout_ms = 2000};
	struct redis *r = redis_new(&u, &o);
	redis_uri_free(&u);
	return r;
}

/* A node outside the cluster is never sent the credentials: a MOVED or an
 * ASK naming it is refused (after the slot map is read again, and it still
 * does not name it), and the caller gets the redirect as its error. */
TEST(a_redirect_outside_the_cluster_is_refused)
{
	struct fake_node *A = &fake[0], *E = &fake[1];
	for (int i = 0; i < FAKE_NODES; i++)
		fake_listen(&fake[i]);
	A->maps[0][0] = A->maps[1][0] = A;
	E->maps[0][0] = E->maps[1][0] = E; /* E says it is a cluster too */
	snprintf(E->get_reply, sizeof E->get_reply, "$4\r\nevil\r\n");
	unsigned slot = redis_key_slot("k", 1);
	fake_start();
	t_capture_logs();
	/* A MOVED, an ASK, and a MOVED to a blocking read (redis_wait_reply). */
	for (int way = 0; way < 3; way++) {
		bool ask = way == 1;
		snprintf(A->get_reply, sizeof A->get_reply, "-%s %u 127.0.0.1:%d\r\n",
			 ask ? "ASK" : "MOVED", slot, E->port);
		struct redis *r = fake_client(A);
		REQUIRE(redis_connect(r) == 0);
		CHECK(redis_mode(r) == REDIS_MODE_CLUSTER);
		int shards = atomic_load(&A->shards);
		redisReply *rep = NULL;
		if (way < 2) {
			rep = redis_command(r, "GET %s", "k");
		} else {
			REQUIRE(redis_append(r, "GET %s", "k") == 0);
			CHECK_INT(redis_wait_reply(r, 2000, &rep), 1);
		}
		REQUIRE(rep != NULL);
		CHECK_INT(rep->type, REDIS_REPLY_ERROR);
		CHECK(strncmp(rep->str, ask ? "ASK " : "MOVED ", ask ? 4 : 6) == 0);
		freeReplyObject(rep);
		/* The map was read again before refusing. */
		CHECK(atomic_load(&A->shards) > shards);
		CHECK_INT(atomic_load(&E->accepts), 0);
		CHECK_INT(atomic_load(&E->auths), 0);
		/* The connection still serves (on a node of the cluster). */
		CHECK(redis_is_connected(r));
		redis_free(r);
	}
	char *out = t_captured_logs();
	t_release_logs();
	char *want = xasprintf("to=127.0.0.1:%d", E->port);
	CHECK(t_count(out, "redis redirect to a node outside the cluster refused") >= 3);
	CHECK(strstr(out, want) != NULL);
	CHECK(strstr(out, "s3cret") == NULL);
	free(want);
	free(out);
	fake_end();
}

/* A node that joined since the last slot map: the map read again names it,
 * and the redirect is followed. */
TEST(a_redirect_to_a_node_the_new_map_names_is_followed)
{
	struct fake_node *A = &fake[0], *B = &fake[1];
	for (int i = 0; i < FAKE_NODES; i++)
		fake_listen(&fake[i]);
	A->maps[0][0] = A;
	A->maps[1][0] = B; /* B took every slot */
	A->maps[1][1] = A;
	B->maps[0][0] = B->maps[1][0] = B;
	B->maps[0][1] = B->maps[1][1] = A;
	snprintf(A->get_reply, sizeof A->get_reply, "-MOVED %u 127.0.0.1:%d\r\n",
		 redis_key_slot("k", 1), B->port);
	snprintf(B->get_reply, sizeof B->get_reply, "$3\r\nbar\r\n");
	fake_start();
	t_capture_logs();
	struct redis *r = fake_client(A);
	REQUIRE(redis_connect(r) == 0);
	CHECK_INT(atomic_load(&B->accepts), 0);
	redisReply *rep = redis_command(r, "GET %s", "k");
	REQUIRE(rep != NULL);
	CHECK_INT(rep->type, REDIS_REPLY_STRING);
	if (rep->type == REDIS_REPLY_STRING)
		CHECK_STR(rep->str, "bar");
	freeReplyObject(rep);
	CHECK(atomic_load(&B->auths) >= 1);
	char *want = xasprintf("127.0.0.1:%d", B->port);
	CHECK(strstr(redis_describe(r), want) != NULL);
	free(want);
	redis_free(r);
	char *out = t_captured_logs();
	t_release_logs();
	CHECK(t_count(out, "outside the cluster") == 0);
	free(out);
	fake_end();
}

T_MAIN(T_CASE(seed_lists), T_CASE(sentinel_uris), T_CASE(uri_errors_are_exact),
       T_CASE(redact_hides_every_password), T_CASE(key_slots_as_redis_cluster), T_CASE(hash_tags),
       T_CASE(slot_map_from_cluster_shards), T_CASE(slot_map_from_cluster_slots),
       T_CASE(odd_slot_maps_are_clear_errors), T_CASE(mutated_slot_maps_never_crash),
       T_CASE(a_redirect_outside_the_cluster_is_refused),
       T_CASE(a_redirect_to_a_node_the_new_map_names_is_followed))
