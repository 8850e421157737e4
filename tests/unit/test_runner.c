/* The runner's pure parts (runner.h): label bounding, the output prefix,
 * stream demultiplexing and line splitting, wait answers, container names
 * and the time bounds as enforced. That the running marker outlives them is
 * tested with the marker, in test_invocation.c. */
#include "io/docker.h"
#include "base/duration.h"
#include "engine/runner.h"
#include "t.h"
#include "base/util.h"

TEST(label_values_are_bounded)
{
	char out[RUNNER_LABEL_MAX + 1];
	CHECK_STR(runner_label_value("user-events", out, sizeof out), "user-events");
	CHECK_STR(runner_label_value(NULL, out, sizeof out), "");
	CHECK_STR(runner_label_value("a\nb\tc\x7f", out, sizeof out), "a?b?c?");
	CHECK_STR(runner_label_value("bad\xff\xfe utf8 \xc3\xa9", out, sizeof out),
		  "bad?? utf8 \xc3\xa9");
	CHECK_STR(runner_label_value("overlong \xc0\xaf", out, sizeof out), "overlong ??");
	char big[1000];
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	CHECK_INT(strlen(runner_label_value(big, out, sizeof out)), RUNNER_LABEL_MAX);
	/* A multi-byte character straddling the bound is dropped whole. */
	char s[RUNNER_LABEL_MAX + 8];
	memset(s, 'y', RUNNER_LABEL_MAX - 1);
	memcpy(s + RUNNER_LABEL_MAX - 1, "\xe2\x82\xac", 4); /* € */
	runner_label_value(s, out, sizeof out);
	CHECK_INT(strlen(out), RUNNER_LABEL_MAX - 1);
	/* A small output buffer bounds it too. */
	char small[8];
	CHECK_STR(runner_label_value("abcdefghij", small, sizeof small), "abcdefg");
}

TEST(prefix_format)
{
	struct runner_request in = {.function = "welcome-email-node", .handler = "handler.handler"};
	char *p = runner_format_prefix(&in);
	CHECK_STR(p, "relay: function \"welcome-email-node\" handler \"handler.handler\": ");
	free(p);
	/* The ids are not part of it: they are on the matched/executed lines. */
	in.message_id = "1700000000000-0";
	in.event_id = "evt_123";
	p = runner_format_prefix(&in);
	CHECK_STR(p, "relay: function \"welcome-email-node\" handler \"handler.handler\": ");
	free(p);
	in.handler = "ha\"nd\\ler\n.x";
	p = runner_format_prefix(&in);
	CHECK_STR(p, "relay: function \"welcome-email-node\" handler \"ha\\\"nd\\\\ler\\n.x\": ");
	free(p);
}

struct lines {
	struct buf out;
	int count[3];
	size_t longest;
};

static void collect(void *ctx, int stream, const char *line, size_t len)
{
	struct lines *l = ctx;
	buf_appendf(&l->out, "%d:", stream);
	buf_append(&l->out, line, len);
	buf_append(&l->out, "|", 1);
	l->count[stream]++;
	if (len > l->longest)
		l->longest = len;
}

static void frame(struct buf *b, int stream, const char *p, size_t n)
{
	unsigned char h[8] = {(unsigned char)stream,
			      0,
			      0,
			      0,
			      (unsigned char)(n >> 24),
			      (unsigned char)(n >> 16),
			      (unsigned char)(n >> 8),
			      (unsigned char)n};
	buf_append(b, h, 8);
	buf_append(b, p, n);
}

/* The lines of the framed stream in, through one demultiplexer fed a first
 * piece of cut bytes, then pieces of at most step bytes; l->out is the
 * caller's to free. */
static void demux(const struct buf *in, size_t cut, size_t step, struct lines *l)
{
	*l = (struct lines){0};
	buf_init(&l->out, 16u << 20);
	struct runner_demux m;
	runner_demux_init(&m, collect, l);
	runner_demux_feed(&m, in->data, cut);
	for (size_t off = cut; off < in->len; off += step)
		runner_demux_feed(&m, in->data + off, in->len - off < step ? in->len - off : step);
	runner_demux_flush(&m);
	runner_demux_free(&m);
}

TEST(demux_every_split_point)
{
	struct buf in;
	buf_init(&in, 1 << 20);
	frame(&in, 1, "out 0\nout", 9);
	frame(&in, 2, "err 0\n", 6);
	frame(&in, 1, " 1\n", 3);
	frame(&in, 2, "err 1\nerr 2", 11);
	frame(&in, 1, "", 0);
	const char *want = "1:out 0|2:err 0|1:out 1|2:err 1|2:err 2|";
	/* Cut the byte stream at every position: the result never changes. */
	for (size_t cut = 0; cut <= in.len; cut++) {
		struct lines l;
		demux(&in, cut, in.len, &l);
		if (strcmp(l.out.data ? l.out.data : "", want) != 0)
			T_FAIL_("cut %zu: %s", cut, l.out.data ? l.out.data : "");
		buf_free(&l.out);
	}
	/* Byte by byte. */
	struct lines l;
	demux(&in, 0, 1, &l);
	CHECK_STR(l.out.data, want);
	buf_free(&l.out);
	buf_free(&in);
}

TEST(long_lines_are_split)
{
	/* 40000 bytes without a newline, then a newline: 16384+16384+7232. */
	size_t n = 40000;
	char *big = xmalloc(n + 1);
	memset(big, 'x', n);
	big[n] = '\n';
	struct buf in;
	buf_init(&in, 1 << 20);
	frame(&in, 1, big, n + 1);
	struct lines l;
	demux(&in, in.len, 1, &l);
	CHECK_INT(l.count[1], 3);
	CHECK_INT(l.longest, RUNNER_LINE_MAX);
	buf_free(&l.out);
	buf_free(&in);

	/* A 3-byte character across the 16 KiB boundary is not cut. */
	memset(big, 'y', n);
	memcpy(big + RUNNER_LINE_MAX - 1, "\xe2\x82\xac", 3);
	buf_init(&in, 1 << 20);
	frame(&in, 2, big, RUNNER_LINE_MAX + 10);
	demux(&in, in.len, 1, &l);
	CHECK_INT(l.count[2], 2);
	CHECK_INT(l.longest, RUNNER_LINE_MAX - 1);
	CHECK(strstr(l.out.data, "|2:\xe2\x82\xacyy") != NULL);
	buf_free(&l.out);
	buf_free(&in);
	free(big);
}

TEST(full_line_with_newline_in_the_next_frame)
{
	/* A line of exactly RUNNER_LINE_MAX bytes whose newline comes in a
	 * later frame is one line, not that line and an empty one. */
	char *big = xmalloc(RUNNER_LINE_MAX);
	memset(big, 'x', RUNNER_LINE_MAX);
	struct buf in;
	buf_init(&in, 1 << 20);
	frame(&in, 1, big, RUNNER_LINE_MAX);
	frame(&in, 1, "\nnext\n", 6);
	struct lines l;
	demux(&in, in.len, 1, &l);
	CHECK_INT(l.count[1], 2);
	CHECK_INT(l.longest, RUNNER_LINE_MAX);
	CHECK(strstr(l.out.data, "x|1:next|") != NULL);
	buf_free(&l.out);
	buf_free(&in);
	free(big);
}

TEST(huge_output_memory_is_bounded)
{
	/* 8 MiB on stderr in one frame, no newline: pieces, never a big buffer. */
	size_t n = 8u << 20;
	char *junk = xmalloc(n);
	memset(junk, 'z', n);
	struct buf in;
	buf_init(&in, n + 64);
	frame(&in, 2, junk, n);
	struct lines l;
	demux(&in, 0, 65536, &l);
	CHECK_INT(l.count[2], n / RUNNER_LINE_MAX);
	CHECK_INT(l.longest, RUNNER_LINE_MAX);
	buf_free(&l.out);
	buf_free(&in);
	free(junk);
}

TEST(wait_answers)
{
	int st = -7;
	char *err = NULL;
	const char *chunked = "1e\r\n{\"Error\":null,\"StatusCode\":3}\n\r\n0\r\n\r\n";
	CHECK_INT(runner_parse_wait(chunked, strlen(chunked), &st, &err), 1);
	CHECK_INT(st, 3);
	CHECK(err == NULL);
	/* Incomplete: more bytes needed. */
	CHECK_INT(runner_parse_wait(chunked, 10, &st, &err), 0);
	CHECK_INT(runner_parse_wait("", 0, &st, &err), 0);
	const char *plain = "{\"StatusCode\":0}";
	CHECK_INT(runner_parse_wait(plain, strlen(plain), &st, &err), 1);
	CHECK_INT(st, 0);
	const char *witherr = "{\"StatusCode\":137,\"Error\":{\"Message\":\"oom\"}}";
	CHECK_INT(runner_parse_wait(witherr, strlen(witherr), &st, &err), 1);
	CHECK_INT(st, 137);
	CHECK_STR(err, "oom");
	free(err);
	CHECK_INT(runner_parse_wait("zz\r\n", 4, &st, &err), -1);
	const char *nocode = "{\"Nope\":1}";
	CHECK_INT(runner_parse_wait(nocode, strlen(nocode), &st, &err), -1);
}

TEST(outcome_names)
{
	CHECK_STR(runner_outcome_name(RUNNER_SUCCESS), "success");
	CHECK_STR(runner_outcome_name(RUNNER_TIMEOUT), "timeout");
	CHECK_STR(runner_outcome_name(RUNNER_CANCELLED), "cancelled");
}

/* Docker's rule for container names: [a-zA-Z0-9][a-zA-Z0-9_.-]+ */
static bool docker_name_ok(const char *s)
{
	size_t n = strlen(s);
	if (n < 2)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		bool alnum =
			(c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
		if (!alnum && (i == 0 || (c != '_' && c != '.' && c != '-')))
			return false;
	}
	return true;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

TEST(container_names)
{
	char name[RUNNER_NAME_MAX + 1];
	struct runner_request in = {.function = "user-events",
				    .handler = "events.created.handler",
				    .message_id = "1700000000000-0"};
	runner_container_name(&in, name);
	CHECK(str_has_prefix(name, "relay-user-events-events.created.handler-1700000000000-0-"));
	CHECK_INT(strlen(name),
		  strlen("relay-user-events-events.created.handler-1700000000000-0-") + 16);
	CHECK(docker_name_ok(name));

	/* Anything outside Docker's alphabet becomes '_'; each part is cut;
	 * no message id is "none". */
	char big[300];
	memset(big, 'f', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	const struct runner_request odd[] = {
		{.function = "f/../x y", .handler = "h\xc3\xa9;$(rm)", .message_id = "a:b\n"},
		{.function = big, .handler = big, .message_id = big},
		{.function = "f", .handler = "h", .message_id = NULL},
		{.function = "f", .handler = "h", .message_id = ""},
		{.function = NULL, .handler = NULL},
	};
	for (size_t i = 0; i < ARRAY_LEN(odd); i++) {
		runner_container_name(&odd[i], name);
		if (!docker_name_ok(name) || strlen(name) > RUNNER_NAME_MAX)
			T_FAIL_("case %zu: bad name %s", i, name);
	}
	runner_container_name(&odd[0], name);
	CHECK(str_has_prefix(name, "relay-f_.._x_y-h_____rm_-a_b_-"));
	runner_container_name(&odd[2], name);
	CHECK(str_has_prefix(name, "relay-f-h-none-"));
	runner_container_name(&odd[1], name);
	CHECK_INT(strlen(name), 6 + 32 + 1 + 32 + 1 + 24 + 1 + 16);
	/* A standby container has no message yet: "standby" in its place. */
	struct runner_request sb = in;
	sb.standby = true;
	runner_container_name(&sb, name);
	CHECK(str_has_prefix(name, "relay-user-events-events.created.handler-standby-"));
	CHECK(docker_name_ok(name));

	/* Fresh each time: 2000 names for the same invocation, all distinct. */
	enum { N = 2000 };
	char **names = xcalloc(N, sizeof *names);
	for (int i = 0; i < N; i++)
		names[i] = xstrdup(runner_container_name(&in, name));
	qsort(names, N, sizeof *names, cmp_str);
	int dups = 0;
	for (int i = 1; i < N; i++)
		dups += strcmp(names[i - 1], names[i]) == 0;
	CHECK_INT(dups, 0);
	for (int i = 0; i < N; i++)
		free(names[i]);
	free(names);
}

TEST(timeouts_as_enforced)
{
	CHECK_INT(runner_timeout_ns(0), TEMPLATE_DEFAULT_TIMEOUT_NS);
	CHECK_INT(runner_timeout_ns(-5), TEMPLATE_DEFAULT_TIMEOUT_NS);
	CHECK_INT(runner_timeout_ns(20 * NS_PER_SEC), 20 * NS_PER_SEC);
	CHECK_INT(runner_timeout_ns(TEMPLATE_MAX_TIMEOUT_NS), TEMPLATE_MAX_TIMEOUT_NS);
	CHECK_INT(runner_timeout_ns(INT64_MAX), TEMPLATE_MAX_TIMEOUT_NS);
	/* The runner's own bound: setup + handler + teardown + local slack. */
	CHECK_INT(runner_worst_case_ns(NULL),
		  (RUNNER_SETUP_TIMEOUT_MS + RUNNER_TEARDOWN_TIMEOUT_MS + RUNNER_LOCAL_SLACK_MS) *
				  NS_PER_MS +
			  TEMPLATE_DEFAULT_TIMEOUT_NS);
	/* Per-invocation bounds only ever shorten it. */
	struct runner_request in = {
		.timeout_ns = NS_PER_SEC, .setup_timeout_ms = 2000, .teardown_timeout_ms = 3000};
	CHECK_INT(runner_worst_case_ns(&in),
		  (2000 + 3000 + RUNNER_LOCAL_SLACK_MS) * NS_PER_MS + NS_PER_SEC);
	in.setup_timeout_ms = 100 * RUNNER_SETUP_TIMEOUT_MS;
	in.teardown_timeout_ms = 100 * RUNNER_TEARDOWN_TIMEOUT_MS;
	in.timeout_ns = 0;
	CHECK_INT(runner_worst_case_ns(&in), runner_worst_case_ns(NULL));
}

T_MAIN(T_CASE(label_values_are_bounded), T_CASE(prefix_format), T_CASE(demux_every_split_point),
       T_CASE(long_lines_are_split), T_CASE(full_line_with_newline_in_the_next_frame),
       T_CASE(huge_output_memory_is_bounded), T_CASE(wait_answers), T_CASE(outcome_names),
       T_CASE(container_names), T_CASE(timeouts_as_enforced))
