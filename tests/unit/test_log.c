#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include "base/log.h"
#include "t.h"

static struct tm fixed_tm(void)
{
	struct tm tm = {0};
	tm.tm_year = 2026 - 1900;
	tm.tm_mon = 8;
	tm.tm_mday = 13;
	tm.tm_hour = 22;
	tm.tm_min = 47;
	tm.tm_sec = 41;
	return tm;
}

static char *render(long gmtoff, enum log_level lvl, const char *const *attrs, const char *msg)
{
	struct buf b;
	buf_init(&b, 1 << 20);
	struct tm tm = fixed_tm();
	log_render(&b, &tm, gmtoff, lvl, attrs, msg);
	return buf_steal(&b);
}

TEST(spec_example)
{
	char *s = render(7200, LOG_INFO, LOG_ATTRS("function", "user-events-python"),
			 "Loaded 3 function(s)");
	CHECK_STR(s, "time=2026-09-13T22:47:41+02:00 level=INFO msg=\"Loaded 3 function(s)\" "
		     "function=user-events-python");
	free(s);
}

TEST(utc_and_negative_offsets)
{
	char *s = render(0, LOG_WARN, NULL, "x");
	CHECK_STR(s, "time=2026-09-13T22:47:41Z level=WARN msg=x");
	free(s);
	s = render(-(3 * 3600 + 30 * 60), LOG_ERROR, NULL, "x");
	CHECK_STR(s, "time=2026-09-13T22:47:41-03:30 level=ERROR msg=x");
	free(s);
	s = render(5 * 3600 + 45 * 60, LOG_DEBUG, NULL, "x");
	CHECK_STR(s, "time=2026-09-13T22:47:41+05:45 level=DEBUG msg=x");
	free(s);
}

/* Each row: a value and how slog's text handler renders it. */
static const struct {
	const char *in;
	const char *out;
} quoting[] = {
	{"plain", "plain"},
	{"", "\"\""},
	{"has space", "\"has space\""},
	{"a=b", "\"a=b\""},
	{"say \"hi\"", "\"say \\\"hi\\\"\""},
	{"back\\slash", "back\\slash"},
	{"line\nbreak", "\"line\\nbreak\""},
	{"tab\there", "\"tab\\there\""},
	{"cr\r", "\"cr\\r\""},
	{"bell\a", "\"bell\\a\""},
	{"nul-free\x01", "\"nul-free\\x01\""},
	{"del\x7f", "\"del\\x7f\""},
	{"bad utf8 \xff", "\"bad utf8 \\xff\""},
	{"\xc3\x28", "\"\\xc3(\""},
	{"caf\xc3\xa9", "caf\xc3\xa9"},
	{"\xe2\x82\xac"
	 "5",
	 "\xe2\x82\xac"
	 "5"},
	{"nbsp\xc2\xa0x", "\"nbsp\\u00a0x\""},
	{"ls\xe2\x80\xa8", "\"ls\\u2028\""},
	{"quote\"only", "\"quote\\\"only\""},
	{"path/with:colon", "path/with:colon"},
	{"12.5", "12.5"},
	{"unicode \xf0\x9f\x98\x80", "\"unicode \xf0\x9f\x98\x80\""},
	{"\xf0\x9f\x98\x80", "\xf0\x9f\x98\x80"},
	{"c1\xc2\x85", "\"c1\\u0085\""},
	{"csi\xc2\x9b"
	 "2J",
	 "\"csi\\u009b2J\""},
	{"esc\x1b[31m", "\"esc\\x1b[31m\""},
	{"rlo\xe2\x80\xae"
	 "x",
	 "\"rlo\\u202ex\""},
	{"lri\xe2\x81\xa6"
	 "x",
	 "\"lri\\u2066x\""},
	{"brace{}[]", "brace{}[]"},
};

TEST(value_quoting)
{
	for (size_t i = 0; i < sizeof quoting / sizeof quoting[0]; i++) {
		struct buf b;
		buf_init(&b, 4096);
		log_append_value(&b, quoting[i].in);
		CHECK_STR(b.data, quoting[i].out);
		buf_free(&b);
	}
}

TEST(keys_are_quoted_too)
{
	char *s = render(0, LOG_INFO, LOG_ATTRS("odd key", "v", "k", ""), "m");
	CHECK_STR(s, "time=2026-09-13T22:47:41Z level=INFO msg=m \"odd key\"=v k=\"\"");
	free(s);
}

TEST(parse_level)
{
	static const struct {
		const char *in;
		int ok;
		enum log_level want;
	} rows[] = {
		{"DEBUG", 1, LOG_DEBUG},
		{"debug", 1, LOG_DEBUG},
		{"Info", 1, LOG_INFO},
		{" warn ", 1, LOG_WARN},
		{"\tERROR\n", 1, LOG_ERROR},
		{"WARNING", 0, 0},
		{"", 0, 0},
		{"   ", 0, 0},
		{"TRACE", 0, 0},
		{"INFO2", 0, 0},
		{"IN FO", 0, 0},
		{"0", 0, 0},
		{"fatal", 0, 0},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		enum log_level l = LOG_ERROR;
		int rc = log_parse_level(rows[i].in, &l);
		if (rows[i].ok) {
			if (rc != 0 || l != rows[i].want)
				T_FAIL_("log_parse_level(\"%s\") rc=%d level=%d", rows[i].in, rc,
					l);
		} else if (rc == 0) {
			T_FAIL_("log_parse_level(\"%s\") accepted", rows[i].in);
		}
	}
}

/* Captures what log_record writes, through a pipe. */
static char *capture(enum log_level set, void (*emit)(void))
{
	int fds[2];
	if (pipe(fds) < 0)
		return NULL;
	log_set_fd(fds[1]);
	log_set_level(set);
	emit();
	log_set_fd(2);
	log_set_level(LOG_INFO);
	close(fds[1]);
	static char out[8192];
	size_t n = 0;
	ssize_t r;
	while ((r = read(fds[0], out + n, sizeof out - 1 - n)) > 0)
		n += (size_t)r;
	close(fds[0]);
	out[n] = '\0';
	return out;
}

static void emit_all(void)
{
	log_debug(NULL, "d%d", 1);
	log_info(NULL, "i");
	log_warn(NULL, "w");
	log_error(LOG_ATTRS("k", "v"), "e");
}

static int count_lines(const char *s, const char *needle)
{
	int n = 0;
	for (const char *p = s; (p = strstr(p, needle)); p++)
		n++;
	return n;
}

TEST(level_filter)
{
	const char *out = capture(LOG_WARN, emit_all);
	REQUIRE(out);
	CHECK_INT(count_lines(out, "\n"), 2);
	CHECK(strstr(out, "level=WARN msg=w\n") != NULL);
	CHECK(strstr(out, "level=ERROR msg=e k=v\n") != NULL);
	CHECK(strstr(out, "level=INFO") == NULL);

	out = capture(LOG_DEBUG, emit_all);
	CHECK_INT(count_lines(out, "\n"), 4);
	CHECK(strstr(out, "level=DEBUG msg=d1\n") != NULL);

	out = capture(LOG_ERROR, emit_all);
	CHECK_INT(count_lines(out, "\n"), 1);
}

static void emit_huge(void)
{
	char *big = xmalloc(200000);
	memset(big, 'a', 199999);
	big[199999] = '\0';
	log_info(LOG_ATTRS("big", big), "huge");
	free(big);
}

TEST(long_record_is_cut_but_one_line)
{
	int fds[2];
	REQUIRE(pipe(fds) == 0);
	fcntl(fds[1], F_SETPIPE_SZ, 1 << 20);
	log_set_fd(fds[1]);
	emit_huge();
	log_set_fd(2);
	close(fds[1]);
	char *out = xmalloc(1 << 20);
	size_t n = 0;
	ssize_t r;
	while ((r = read(fds[0], out + n, (1 << 20) - 1 - n)) > 0)
		n += (size_t)r;
	close(fds[0]);
	out[n] = '\0';
	CHECK(n <= 64 * 1024);
	CHECK(n > 1000);
	CHECK_INT(count_lines(out, "\n"), 1);
	CHECK(out[n - 1] == '\n');
	CHECK(strstr(out, "...[truncated] ") == NULL);
	CHECK(strstr(out, "...[truncated]\n") != NULL);
	free(out);
}

static void emit_say(void)
{
	log_say("user-events-python", "rule", "events.created.handler", " matched event \"%s\"",
		"1700000000000-0");
	log_say("f\"x", "handler", "h\\\n.y", " execution failed for event \"%s\": %s", "1-0",
		"exit 1:\nTraceback\t(most recent call last)");
	log_say("f\xc2\x9b"
		"2J",
		"rule", "r\xe2\x80\xae.h\x1b[0m", " matched event \"%s\"",
		"caf\xc3\xa9 \xe2\x81\xa6\x7f\xff");
}

/* The Try-it lines: exact text, whatever the level, one line each. */
TEST(say_lines)
{
	const char *want =
		"relay: function \"user-events-python\" rule "
		"\"events.created.handler\" matched event \"1700000000000-0\"\n"
		"relay: function \"f\\\"x\" handler \"h\\\\\\n.y\" execution failed for "
		"event \"1-0\": exit 1:\\nTraceback\t(most recent call last)\n"
		"relay: function \"f\\u009b2J\" rule \"r\\u202e.h\\x1b[0m\" matched event "
		"\"caf\xc3\xa9 \\u2066\\x7f\\xff\"\n";
	CHECK_STR(capture(LOG_ERROR, emit_say), want);
	CHECK_STR(capture(LOG_DEBUG, emit_say), want);
}

/* Forwarded lines reach 16 KiB, past PIPE_BUF: threads writing them to one
 * pipe at once must still give whole lines. */
#define WHOLE_LINE 16384
#define WHOLE_LINES 100
#define WHOLE_WRITERS 4

static void *write_lines(void *arg)
{
	char *line = xmalloc(WHOLE_LINE);
	memset(line, *(const char *)arg, WHOLE_LINE - 1);
	line[WHOLE_LINE - 1] = '\n';
	for (int i = 0; i < WHOLE_LINES; i++)
		log_raw(line, WHOLE_LINE);
	free(line);
	return NULL;
}

struct drain {
	int fd;
	struct buf b;
};

static void *drain_pipe(void *arg)
{
	struct drain *d = arg;
	char chunk[1000]; /* small reads: the writers block often */
	ssize_t r;
	while ((r = read(d->fd, chunk, sizeof chunk)) > 0)
		buf_append(&d->b, chunk, (size_t)r);
	return NULL;
}

TEST(long_lines_from_threads_never_interleave)
{
	int fds[2];
	REQUIRE(pipe(fds) == 0);
	struct drain d = {.fd = fds[0]};
	buf_init(&d.b, 2 * WHOLE_LINE * WHOLE_LINES * WHOLE_WRITERS);
	pthread_t reader, w[WHOLE_WRITERS];
	static const char letters[WHOLE_WRITERS] = {'a', 'b', 'c', 'd'};
	REQUIRE(pthread_create(&reader, NULL, drain_pipe, &d) == 0);
	log_set_fd(fds[1]);
	for (int i = 0; i < WHOLE_WRITERS; i++)
		REQUIRE(pthread_create(&w[i], NULL, write_lines, (void *)&letters[i]) == 0);
	for (int i = 0; i < WHOLE_WRITERS; i++)
		pthread_join(w[i], NULL);
	log_set_fd(2);
	close(fds[1]);
	pthread_join(reader, NULL);
	close(fds[0]);
	CHECK_INT((long)d.b.len, (long)WHOLE_LINE * WHOLE_LINES * WHOLE_WRITERS);
	int mixed = 0;
	for (size_t off = 0; off + WHOLE_LINE <= d.b.len; off += WHOLE_LINE) {
		const char *l = d.b.data + off;
		bool whole = l[WHOLE_LINE - 1] == '\n';
		for (size_t i = 1; whole && i < WHOLE_LINE - 1; i++)
			whole = l[i] == l[0];
		mixed += !whole;
	}
	CHECK_INT(mixed, 0);
	buf_free(&d.b);
}

T_MAIN(T_CASE(spec_example), T_CASE(utc_and_negative_offsets), T_CASE(value_quoting),
       T_CASE(keys_are_quoted_too), T_CASE(parse_level), T_CASE(level_filter),
       T_CASE(long_record_is_cut_but_one_line), T_CASE(say_lines),
       T_CASE(long_lines_from_threads_never_interleave))
