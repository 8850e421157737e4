/* OTLP/HTTP JSON export (io/otlp.h): the encoding of a span, the
 * key=value lists, and the exporter's bounds against collectors that do
 * not answer. */
#include <arpa/inet.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/duration.h"
#include "base/util.h"
#include "io/otlp.h"
#include "t.h"

static void fill(uint8_t *p, size_t n, uint8_t first)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(first + i);
}

TEST(encode_exact)
{
	struct otlp_span s = {.name = {"process ", "events"}, .kind = OTLP_KIND_CONSUMER};
	fill(s.trace_id, 16, 0xa0);
	fill(s.span_id, 8, 0x10);
	fill(s.parent_id, 8, 0x01);
	s.has_parent = true;
	s.trace_state = "k=v";
	s.start_ns = 1700000000000000001LL;
	s.end_ns = 1700000000500000000LL;
	otlp_span_attr_str(&s, "messaging.system", "redis");
	otlp_span_attr_int(&s, "relay.attempt", 2);
	otlp_span_attr_int(&s, "relay.exit_code", -1);
	s.status = OTLP_STATUS_ERROR;
	s.status_message = "exit \"1\"\n\x01";
	struct otlp_span root = {.name = {"r"}, .kind = OTLP_KIND_INTERNAL};
	fill(root.trace_id, 16, 1);
	fill(root.span_id, 8, 2);
	struct otlp_kv res[] = {{"service.name", "relay"}, {"deployment.environment", "test"}};
	char *spans[] = {otlp_span_encode(&s), otlp_span_encode(&root)};
	char *got = otlp_encode(res, 2, spans, 2);
	CHECK_STR(got,
		  "{\"resourceSpans\":[{\"resource\":{\"attributes\":["
		  "{\"key\":\"service.name\",\"value\":{\"stringValue\":\"relay\"}},"
		  "{\"key\":\"deployment.environment\",\"value\":{\"stringValue\":\"test\"}}]},"
		  "\"scopeSpans\":[{\"scope\":{\"name\":\"relay\"},\"spans\":["
		  "{\"traceId\":\"a0a1a2a3a4a5a6a7a8a9aaabacadaeaf\",\"spanId\":\"1011121314151617\","
		  "\"parentSpanId\":\"0102030405060708\",\"traceState\":\"k=v\","
		  "\"name\":\"process events\",\"kind\":5,"
		  "\"startTimeUnixNano\":\"1700000000000000001\","
		  "\"endTimeUnixNano\":\"1700000000500000000\",\"attributes\":["
		  "{\"key\":\"messaging.system\",\"value\":{\"stringValue\":\"redis\"}},"
		  "{\"key\":\"relay.attempt\",\"value\":{\"intValue\":\"2\"}},"
		  "{\"key\":\"relay.exit_code\",\"value\":{\"intValue\":\"-1\"}}],"
		  "\"status\":{\"code\":2,\"message\":\"exit \\\"1\\\"\\n\\u0001\"}},"
		  "{\"traceId\":\"0102030405060708090a0b0c0d0e0f10\",\"spanId\":\"0203040506070809\","
		  "\"name\":\"r\",\"kind\":1,\"startTimeUnixNano\":\"0\",\"endTimeUnixNano\":\"0\","
		  "\"attributes\":[],\"status\":{}}]}]}]}");
	free(got);
	free(spans[0]);
	free(spans[1]);
}

TEST(encode_invalid_utf8_escaped)
{
	struct otlp_span s = {.name = {"invoke ", "bad \xff", "/", "name"}};
	char *got = otlp_span_encode(&s);
	CHECK(strstr(got, "\"name\":\"invoke bad \\\\xff/name\"") != NULL);
	free(got);
}

TEST(attrs_bounded)
{
	struct otlp_span s = {.name = {"n"}};
	for (int i = 0; i < OTLP_SPAN_ATTRS + 5; i++)
		otlp_span_attr_int(&s, "k", i);
	CHECK_INT(s.nattrs, OTLP_SPAN_ATTRS);
}

static const struct {
	const char *in;
	int rc;
	const char *want; /* "k=v|k=v" */
} kv_cases[] = {
	{"", 0, ""},
	{"api-key=secret", 0, "api-key=secret"},
	{" a = 1 , b=x%20y%2Cz ,,", 0, "a=1|b=x y,z"},
	{"Authorization=Basic%20dXNlcg==", 0, "Authorization=Basic dXNlcg=="},
	{"a=1,novalue", -1, NULL},
	{"=v", -1, NULL},
	{"a=%zz", -1, NULL},
	{"a=%4", -1, NULL},
	{"a=x%0Ay", -1, NULL}, /* a line break would split the header */
	{"a b=c", -1, NULL},
};

TEST(kv_table)
{
	for (size_t i = 0; i < ARRAY_LEN(kv_cases); i++) {
		struct otlp_kv *kv;
		size_t n;
		char *why = NULL;
		int rc = otlp_kv_parse(kv_cases[i].in, &kv, &n, &why);
		CHECK_INT(rc, kv_cases[i].rc);
		if (rc < 0) {
			CHECK(why != NULL && strstr(why, "entry") != NULL);
			free(why);
			continue;
		}
		struct buf b;
		buf_init(&b, 4096);
		buf_appendf(&b, "%s", "");
		for (size_t k = 0; k < n; k++)
			buf_appendf(&b, "%s%s=%s", k ? "|" : "", kv[k].key, kv[k].value);
		CHECK_STR(b.data ? b.data : "", kv_cases[i].want);
		buf_free(&b);
		otlp_kv_free(kv, n);
	}
}

TEST(kv_error_never_shows_a_value)
{
	struct otlp_kv *kv;
	size_t n;
	char *why = NULL;
	CHECK_INT(otlp_kv_parse("token=s3cr%zzet", &kv, &n, &why), -1);
	CHECK(why && !strstr(why, "s3cr"));
	free(why);
}

TEST(kv_bounds)
{
	struct buf b;
	buf_init(&b, 1 << 16);
	for (int i = 0; i <= OTLP_KV_MAX; i++)
		buf_appendf(&b, "%sk%d=v", i ? "," : "", i);
	struct otlp_kv *kv;
	size_t n;
	char *why = NULL;
	CHECK_INT(otlp_kv_parse(b.data, &kv, &n, &why), -1);
	CHECK(why && strstr(why, "more than 64 entries"));
	free(why);
	buf_free(&b);
}

/* A listening socket that accepts nothing: connections queue in the
 * backlog and every request hangs until its timeout. */
static int hanging_listener(int *port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof a;
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 16) < 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &len) < 0)
		return -1;
	*port = ntohs(a.sin_port);
	return fd;
}

TEST(queue_bound_drops_and_counts)
{
	int port;
	int fd = hanging_listener(&port);
	REQUIRE(fd >= 0);
	char url[64];
	snprintf_(url, sizeof url, "http://127.0.0.1:%d/v1/traces", port);
	struct otlp_exporter_config cfg = {.url = url,
					   .timeout_ns = 300 * NS_PER_MS,
					   .queue_max = 8,
					   .batch_max = 4,
					   .interval_ns = 50 * NS_PER_MS};
	char *why = NULL;
	uint64_t dropped0 = otlp_spans_dropped(), failed0 = otlp_export_failures();
	struct otlp_exporter *e = otlp_exporter_start(&cfg, &why);
	REQUIRE(e != NULL);
	/* 100 spans into a queue of 8 whose consumer hangs on the first batch:
	 * submitting never waits for the network. */
	int64_t t0 = now_mono_ns();
	struct otlp_span s = {.name = {"s"}, .kind = OTLP_KIND_INTERNAL};
	for (int i = 0; i < 100; i++)
		otlp_exporter_submit(e, &s);
	int64_t took = now_mono_ns() - t0;
	/* 100 mutex holds: far below one request's 300 ms timeout. */
	CHECK(took < 100 * NS_PER_MS);
	/* At stop: the bound holds although the collector never answers
	 * (300 ms per request; a 500 ms bound, 1.5 s for a loaded machine). */
	t0 = now_mono_ns();
	otlp_exporter_stop(e, 500 * NS_PER_MS);
	took = now_mono_ns() - t0;
	CHECK(took < 1500 * NS_PER_MS);
	/* Every span is accounted for: none exported, all 100 dropped (queue
	 * full, failed requests, or abandoned at stop). */
	CHECK_INT(otlp_spans_dropped() - dropped0, 100);
	CHECK(otlp_export_failures() - failed0 >= 1);
	CHECK_INT(otlp_spans_exported(), 0);
	close(fd);
}

TEST(refused_connection_counts_a_failure)
{
	int port;
	int fd = hanging_listener(&port);
	REQUIRE(fd >= 0);
	close(fd); /* nothing listens there now: connection refused */
	char url[64];
	snprintf_(url, sizeof url, "http://127.0.0.1:%d/v1/traces", port);
	struct otlp_exporter_config cfg = {.url = url, .timeout_ns = NS_PER_SEC};
	char *why = NULL;
	uint64_t dropped0 = otlp_spans_dropped(), failed0 = otlp_export_failures();
	struct otlp_exporter *e = otlp_exporter_start(&cfg, &why);
	REQUIRE(e != NULL);
	struct otlp_span s = {.name = {"s"}, .kind = OTLP_KIND_INTERNAL};
	for (int i = 0; i < 3; i++)
		otlp_exporter_submit(e, &s);
	otlp_exporter_stop(e, 2 * NS_PER_SEC);
	CHECK_INT(otlp_export_failures() - failed0, 1);
	CHECK_INT(otlp_spans_dropped() - dropped0, 3);
}

/* A collector on loopback: reads each request whole, checks that its body
 * is a JSON ExportTraceServiceRequest, counts its spans (and the spans
 * whose name is the one expected) and answers 200. */
struct collector {
	int fd, port;
	pthread_t thread;
	atomic_int requests, spans, bad;
};

static void collector_request(struct collector *c, const char *body, size_t len)
{
	json_error_t err;
	json_t *doc = json_loadb(body, len, 0, &err);
	json_t *spans = json_object_get(
		json_array_get(json_object_get(json_array_get(json_object_get(doc, "resourceSpans"),
								0),
					       "scopeSpans"),
			       0),
		"spans");
	size_t i;
	json_t *sp;
	if (!json_is_array(spans))
		atomic_fetch_add(&c->bad, 1);
	json_array_foreach(spans, i, sp)
	{
		const char *name = json_string_value(json_object_get(sp, "name"));
		if (!name || strcmp(name, "invoke fn/h.handler") != 0)
			atomic_fetch_add(&c->bad, 1);
		atomic_fetch_add(&c->spans, 1);
	}
	atomic_fetch_add(&c->requests, 1);
	json_decref(doc);
}

static void *collector_main(void *arg)
{
	struct collector *c = arg;
	static char buf[1 << 22];
	int fd;
	while ((fd = accept(c->fd, NULL, NULL)) >= 0) {
		size_t have = 0;
		for (;;) {
			char *end = memmem(buf, have, "\r\n\r\n", 4);
			char *cl = end ? strcasestr(buf, "Content-Length:") : NULL;
			size_t need = cl ? (size_t)(end - buf) + 4 + strtoul(cl + 15, NULL, 10) : 0;
			if (cl && have >= need) {
				collector_request(c, end + 4, need - (size_t)(end + 4 - buf));
				static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
				if (write(fd, ok, sizeof ok - 1) < 0)
					break;
				memmove(buf, buf + need, have - need);
				have -= need;
				continue;
			}
			ssize_t n = have < sizeof buf - 1 ? read(fd, buf + have, sizeof buf - 1 - have) : 0;
			if (n <= 0)
				break;
			have += (size_t)n;
			buf[have] = '\0';
		}
		close(fd);
	}
	return NULL;
}

TEST(batches_reach_the_collector_whole)
{
	struct collector c = {0};
	c.fd = hanging_listener(&c.port);
	REQUIRE(c.fd >= 0);
	REQUIRE(pthread_create(&c.thread, NULL, collector_main, &c) == 0);
	char url[64];
	snprintf_(url, sizeof url, "http://127.0.0.1:%d/v1/traces", c.port);
	/* Four batches of 50 in the queue: 1,000 spans in rounds of 150 make
	 * every batch's buffer go out and come back several times. */
	struct otlp_exporter_config cfg = {.url = url,
					   .timeout_ns = 5 * NS_PER_SEC,
					   .queue_max = 200,
					   .batch_max = 50,
					   .interval_ns = 20 * NS_PER_MS};
	char *why = NULL;
	uint64_t exported0 = otlp_spans_exported(), dropped0 = otlp_spans_dropped();
	struct otlp_exporter *e = otlp_exporter_start(&cfg, &why);
	REQUIRE(e != NULL);
	struct otlp_span s = {.name = {"invoke ", "fn", "/", "h.handler"},
			      .kind = OTLP_KIND_INTERNAL};
	otlp_span_attr_str(&s, "relay.function", "fn");
	int sent = 0;
	while (sent < 1000) {
		for (int i = 0; i < 150 && sent < 1000; i++, sent++)
			otlp_exporter_submit(e, &s);
		int64_t until = now_mono_ns() + 10 * NS_PER_SEC;
		while (otlp_spans_exported() - exported0 < (uint64_t)sent && now_mono_ns() < until)
			usleep(2000);
	}
	otlp_exporter_stop(e, 5 * NS_PER_SEC);
	CHECK_INT(otlp_spans_exported() - exported0, 1000);
	CHECK_INT(otlp_spans_dropped() - dropped0, 0);
	CHECK_INT(atomic_load(&c.spans), 1000);
	CHECK_INT(atomic_load(&c.bad), 0);
	CHECK(atomic_load(&c.requests) >= 20); /* at most 50 spans a request */
	shutdown(c.fd, SHUT_RDWR);
	close(c.fd);
	pthread_join(c.thread, NULL);
}

T_MAIN(T_CASE(encode_exact), T_CASE(encode_invalid_utf8_escaped), T_CASE(attrs_bounded),
       T_CASE(kv_table), T_CASE(kv_error_never_shows_a_value), T_CASE(kv_bounds),
       T_CASE(queue_bound_drops_and_counts), T_CASE(refused_connection_counts_a_failure),
       T_CASE(batches_reach_the_collector_whole))
