/* The shared helpers (util.h): allocation wrappers, bounded copies, the
 * capped buffer, strict integer parsing, UTF-8 decoding and printable
 * copies, string helpers, write_all, the atomic file write, clocks, the
 * interruptible sleep and the thread-local random numbers. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "t.h"
#include "tfiles.h"
#include "base/util.h"

TEST(allocation_wrappers)
{
	char *p = xmalloc(0); /* never NULL, even for nothing */
	CHECK(p != NULL);
	free(p);
	int *z = xcalloc(16, sizeof *z);
	for (int i = 0; i < 16; i++)
		CHECK_INT(z[i], 0);
	z[15] = 7;
	z = xrealloc(z, 1000 * sizeof *z);
	CHECK_INT(z[15], 7);
	free(z);
	char *s = xstrndup("abcdef", 3);
	CHECK_STR(s, "abc");
	free(s);
	s = xstrndup("a\0b", 3); /* n bytes, whatever they are */
	CHECK(memcmp(s, "a\0b", 4) == 0);
	free(s);
	s = xstrdup("");
	CHECK_STR(s, "");
	free(s);
	s = xasprintf("%s-%d-%05d", "x", -3, 42);
	CHECK_STR(s, "x--3-00042");
	free(s);
	char big[5000];
	memset(big, 'q', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	s = xasprintf("<%s>", big);
	CHECK_INT(strlen(s), sizeof big + 1);
	CHECK(s[0] == '<' && s[sizeof big] == '>');
	free(s);
}

TEST(bounded_copies)
{
	char out[6];
	memset(out, 'x', sizeof out);
	strlcpy_(out, "hello world", sizeof out);
	CHECK_STR(out, "hello");
	strlcpy_(out, "hi", sizeof out);
	CHECK_STR(out, "hi");
	strlcpy_(out, "exact", sizeof out);
	CHECK_STR(out, "exact");
	memset(out, 'x', sizeof out);
	strlcpy_(out, "abc", 0); /* nothing written at all */
	CHECK(out[0] == 'x');
	strlcpy_(out, "abc", 1);
	CHECK_STR(out, "");

	snprintf_(out, sizeof out, "%d-%s", 12345, "tail");
	CHECK_STR(out, "12345");
	snprintf_(out, sizeof out, "%s", "");
	CHECK_STR(out, "");
	snprintf_(out, sizeof out, "%c%c", 'o', 'k');
	CHECK_STR(out, "ok");
}

TEST(buffer_cap)
{
	struct buf b;
	buf_init(&b, 10);
	CHECK(b.data == NULL);
	CHECK_INT(b.len, 0);
	CHECK_INT(buf_append(&b, "hello", 5), 0);
	CHECK_STR(b.data, "hello");
	CHECK_INT(buf_append(&b, "world", 5), 0); /* exactly the cap */
	CHECK_STR(b.data, "helloworld");
	CHECK_INT(b.len, 10);
	CHECK_INT(buf_append(&b, "!", 1), -1); /* one byte past it */
	CHECK_INT(b.len, 10);
	CHECK_STR(b.data, "helloworld");
	CHECK_INT(buf_append(&b, "", 0), 0); /* nothing always fits */
	CHECK(b.cap <= 11);		     /* never allocates past max + NUL */
	buf_reset(&b);
	CHECK_INT(b.len, 0);
	CHECK_STR(b.data, "");
	CHECK_INT(buf_appendf(&b, "%d:%s", 42, "abc"), 0);
	CHECK_STR(b.data, "42:abc");
	CHECK_INT(buf_appendf(&b, "%s", "12345"), -1); /* 11 > 10: nothing appended */
	CHECK_STR(b.data, "42:abc");
	CHECK_INT(buf_appendf(&b, "%s", "1234"), 0);
	CHECK_STR(b.data, "42:abc1234");
	buf_free(&b);
	CHECK(b.data == NULL);
	CHECK_INT(b.len, 0);

	/* binary data, NULs included, stays NUL-terminated after it */
	buf_init(&b, 1 << 20);
	CHECK_INT(buf_append(&b, "a\0b", 3), 0);
	CHECK_INT(b.len, 3);
	CHECK(memcmp(b.data, "a\0b\0", 4) == 0);
	/* growth across many appends keeps every byte */
	for (int i = 0; i < 1000; i++)
		CHECK_INT(buf_appendf(&b, "%03d", i), 0);
	CHECK_INT(b.len, 3 + 3000);
	CHECK(memcmp(b.data + 3, "000001002", 9) == 0);
	CHECK(memcmp(b.data + b.len - 3, "999", 4) == 0);
	char *s = buf_steal(&b);
	CHECK(b.data == NULL && b.len == 0);
	CHECK_INT(s[0], 'a');
	free(s);
	/* stealing an empty buffer gives "", never NULL */
	buf_init(&b, 10);
	s = buf_steal(&b);
	CHECK_STR(s, "");
	free(s);
	/* a zero cap holds nothing */
	buf_init(&b, 0);
	CHECK_INT(buf_append(&b, "x", 1), -1);
	CHECK(b.data == NULL);
	buf_free(&b);
}

TEST(strict_integers)
{
	static const struct {
		const char *in;
		int64_t want;
	} ok[] = {
		{"0", 0},
		{"42", 42},
		{"-5", -5},
		{"+7", 7},
		{"007", 7},
		{"9223372036854775807", INT64_MAX},
		{"-9223372036854775808", INT64_MIN},
	};
	for (size_t i = 0; i < ARRAY_LEN(ok); i++) {
		int64_t v = -1;
		if (parse_int64(ok[i].in, &v) != 0 || v != ok[i].want)
			T_FAIL_("\"%s\": %" PRId64, ok[i].in, v);
	}
	static const char *const bad[] = {"",
					  "-",
					  "+",
					  "--1",
					  " 1",
					  "1 ",
					  "1a",
					  "0x10",
					  "1.0",
					  "1e3",
					  "\t7",
					  "7\n",
					  "+-1",
					  "- 1",
					  "９",
					  "9223372036854775808",
					  "-9223372036854775809",
					  "99999999999999999999"};
	for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
		int64_t v = 123;
		if (parse_int64(bad[i], &v) != -1 || v != 123)
			T_FAIL_("\"%s\" accepted (or *out written): %" PRId64, bad[i], v);
	}
	int64_t v = 123;
	CHECK_INT(parse_int64(NULL, &v), -1);
	CHECK_INT(v, 123);
}

TEST(utf8_sequences)
{
	static const struct {
		const char *in;
		size_t n; /* bytes available */
		size_t len;
		uint32_t rune;
	} cases[] = {
		{"A", 1, 1, 'A'},
		{"\x7f", 1, 1, 0x7f},
		{"\xc3\xa9", 2, 2, 0xe9},
		{"\xdf\xbf", 2, 2, 0x7ff},
		{"\xe2\x82\xac", 3, 3, 0x20ac},
		{"\xef\xbf\xbf", 3, 3, 0xffff},
		{"\xf0\x9f\x98\x80", 4, 4, 0x1f600},
		{"\xf4\x8f\xbf\xbf", 4, 4, 0x10ffff},
		/* invalid: 0 */
		{"\x80", 1, 0, 0},		   /* a lone continuation byte */
		{"\xc0\xaf", 2, 0, 0},		   /* overlong '/' */
		{"\xc1\xbf", 2, 0, 0},		   /* overlong */
		{"\xe0\x80\xaf", 3, 0, 0},	   /* overlong */
		{"\xf0\x80\x80\xaf", 4, 0, 0},	   /* overlong */
		{"\xed\xa0\x80", 3, 0, 0},	   /* surrogate U+D800 */
		{"\xed\xbf\xbf", 3, 0, 0},	   /* surrogate U+DFFF */
		{"\xf4\x90\x80\x80", 4, 0, 0},	   /* U+110000 */
		{"\xf8\x88\x80\x80\x80", 5, 0, 0}, /* 5-byte form */
		{"\xff", 1, 0, 0},
		{"\xc3\x28", 2, 0, 0},	       /* bad continuation */
		{"\xe2\x82\x28", 3, 0, 0},     /* bad last continuation */
		{"\xc3\xa9", 1, 0, 0},	       /* cut short by n */
		{"\xf0\x9f\x98\x80", 3, 0, 0}, /* cut short by n */
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		uint32_t r = 0xdeadbeef;
		size_t len = utf8_decode((const unsigned char *)cases[i].in, cases[i].n, &r);
		if (len != cases[i].len || (len && r != cases[i].rune))
			T_FAIL_("case %zu: len %zu rune %#x, want %zu %#x", i, len, (unsigned)r,
				cases[i].len, (unsigned)cases[i].rune);
	}
}

TEST(printable_copies)
{
	char out[32];
	CHECK_STR(printable_copy(NULL, out, sizeof out, 100), "");
	CHECK_STR(printable_copy("plain text", out, sizeof out, 100), "plain text");
	CHECK(printable_copy("x", out, sizeof out, 100) == out);
	CHECK_STR(printable_copy("a\nb\tc\x7f\x1b", out, sizeof out, 100), "a?b?c??");
	CHECK_STR(printable_copy("caf\xc3\xa9 \xe2\x82\xac", out, sizeof out, 100),
		  "caf\xc3\xa9 \xe2\x82\xac");
	CHECK_STR(printable_copy("bad\xff\xc0\xaf", out, sizeof out, 100), "bad???");
	/* C1 (CSI U+009B) and bidi controls are not printable either */
	CHECK_STR(printable_copy("c1\xc2\x9b"
				 "2J \xe2\x80\xae \xe2\x81\xa6",
				 out, sizeof out, 100),
		  "c1?2J ? ?");
	/* the bound: max bytes, and never past outsz - 1 */
	CHECK_STR(printable_copy("abcdef", out, sizeof out, 3), "abc");
	CHECK_STR(printable_copy("abcdef", out, 4, 100), "abc");
	/* a multi-byte character is never cut in half */
	CHECK_STR(printable_copy("a\xc3\xa9", out, sizeof out, 2), "a");
	CHECK_STR(printable_copy("a\xe2\x82\xac", out, sizeof out, 3), "a");
	CHECK_STR(printable_copy("a\xe2\x82\xac", out, sizeof out, 4), "a\xe2\x82\xac");
	CHECK_STR(printable_copy("\n\n\n\n", out, sizeof out, 2), "??");
}

/* The one escaping routine: each row an input (n bytes), max_cols, flags
 * and what reaches the terminal. */
TEST(text_escape_covers_every_control)
{
	static const struct {
		const char *in;
		size_t n, max; /* n 0: strlen */
		unsigned flags;
		const char *want;
	} cases[] = {
		/* normal text, UTF-8 included, passes unchanged */
		{"plain", 0, 0, 0, "plain"},
		{"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xe4\xb8\xad\xe3\x80\x80", 0, 0,
		 TEXT_VERBATIM,
		 "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xe4\xb8\xad\xe3\x80\x80"},
		{"nbsp\xc2\xa0x", 0, 0, 0, "nbsp\xc2\xa0x"},
		{"C:\\dir\tx \"q\"", 0, 0, TEXT_VERBATIM, "C:\\dir\tx \"q\""},
		/* ESC and the other C0 controls, DEL */
		{"\x1b[31mred\x1b]0;t\x07", 0, 0, 0, "\\x1b[31mred\\x1b]0;t\\x07"},
		{"a\nb\tc\rd\\e", 0, 0, 0, "a\\nb\\tc\\rd\\\\e"},
		{"nul\0x\x01\x1f\x7f", 8, 0, 0, "nul\\x00x\\x01\\x1f\\x7f"},
		{"a\nb\x1b", 0, 0, TEXT_VERBATIM, "a\\nb\\x1b"},
		/* C1 controls as UTF-8: U+0080, U+0085, CSI U+009B, U+009F */
		{"\xc2\x80\xc2\x85\xc2\x9b"
		 "2J\xc2\x9f",
		 0, 0, TEXT_VERBATIM, "\\u0080\\u0085\\u009b2J\\u009f"},
		/* bidi controls U+202A..U+202E, U+2066..U+2069, and marks */
		{"\xe2\x80\xaa\xe2\x80\xab\xe2\x80\xac\xe2\x80\xad\xe2\x80\xae", 0, 0,
		 TEXT_VERBATIM, "\\u202a\\u202b\\u202c\\u202d\\u202e"},
		{"\xe2\x81\xa6\xe2\x81\xa7\xe2\x81\xa8\xe2\x81\xa9", 0, 0, TEXT_VERBATIM,
		 "\\u2066\\u2067\\u2068\\u2069"},
		{"\xe2\x80\x8e\xe2\x80\x8f\xd8\x9c\xe2\x80\xa8", 0, 0, 0,
		 "\\u200e\\u200f\\u061c\\u2028"},
		/* invalid UTF-8: each byte; a C1 byte alone is invalid too */
		{"bad\xff\xc3\x28\x9b\xed\xa0\x80\xc0\xaf", 0, 0, TEXT_VERBATIM,
		 "bad\\xff\\xc3(\\x9b\\xed\\xa0\\x80\\xc0\\xaf"},
		/* quotes with TEXT_QUOTE; Go's extra set with TEXT_GO */
		{"say \"hi\"", 0, 0, TEXT_QUOTE, "say \\\"hi\\\""},
		{"\a\xc2\xa0\xef\xbb\xbf", 0, 0, TEXT_GO, "\\a\\u00a0\\ufeff"},
		{"\xf3\xb0\x80\x80", 0, 0, TEXT_GO, "\\U000f0000"},
		/* cutting: columns, "..." when cut, never half an escape or rune */
		{"0123456789", 0, 10, 0, "0123456789"},
		{"0123456789a", 0, 10, 0, "0123456..."},
		{"abcde\x01xyz", 0, 10, 0, "abcde..."},
		{"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", 0, 4, 0, "\xc3\xa9..."},
		{"abcdef", 0, 2, 0, "..."},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		size_t n = cases[i].n ? cases[i].n : strlen(cases[i].in);
		char *got = text_escaped(cases[i].in, n, cases[i].max, cases[i].flags);
		if (strcmp(got, cases[i].want) != 0)
			T_FAIL_("case %zu: got \"%s\", want \"%s\"", i, got, cases[i].want);
		if (cases[i].max == 0 && text_escape_needed(cases[i].in, n, cases[i].flags) !=
						 (strcmp(got, cases[i].in) != 0))
			T_FAIL_("case %zu: text_escape_needed", i);
		free(got);
	}
	/* every C1 control, each bidi control: never raw */
	for (unsigned r = 0x80; r <= 0x9f; r++) {
		char in[2] = {(char)(0xc0 | (r >> 6)), (char)(0x80 | (r & 0x3f))}, want[8];
		snprintf(want, sizeof want, "\\u%04x", r);
		char *got = text_escaped(in, 2, 0, TEXT_VERBATIM);
		CHECK_STR(got, want);
		free(got);
	}
	/* the cap of b cuts between units */
	struct buf b;
	buf_init(&b, 5);
	text_escape(&b, "ab\x1b", 3, 0, 0);
	CHECK_STR(b.data, "ab");
	buf_free(&b);
}

/* JSON as an encoder wrote it: DEL, C1 and bidi \u-escaped, the rest kept. */
TEST(text_escape_json_keeps_json_valid)
{
	static const struct {
		const char *in, *want;
	} cases[] = {
		{"{\n  \"a\": \"x\\u001B[31m\"\n}", "{\n  \"a\": \"x\\u001B[31m\"\n}"},
		{"\"caf\xc3\xa9 \xe2\x82\xac\"", "\"caf\xc3\xa9 \xe2\x82\xac\""},
		{"\"\xc2\x9b"
		 "2J \xe2\x80\xae \xe2\x81\xa9 \x7f\"",
		 "\"\\u009B2J \\u202E \\u2069 \\u007F\""},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		struct buf b;
		buf_init(&b, 1024);
		text_escape_json(&b, cases[i].in, strlen(cases[i].in));
		CHECK_STR(b.data, cases[i].want);
		buf_free(&b);
	}
}

TEST(small_string_helpers)
{
	const char digits[] = "0123456789abcdefABCDEF";
	for (size_t i = 0; digits[i]; i++)
		CHECK_INT(hex_digit(digits[i]), i < 16 ? (int)i : (int)i - 6);
	static const int no[] = {'g', 'G', '/', ':', '@', '`', ' ', '\0', -1, 0x100 + '0', 0xe9};
	for (size_t i = 0; i < ARRAY_LEN(no); i++)
		if (hex_digit(no[i]) != -1)
			T_FAIL_("hex_digit(%#x) = %d", no[i], hex_digit(no[i]));

	static const struct {
		const char *in, *want;
	} trims[] = {
		{"", ""},	{"   ", ""},	{"a", "a"},	    {"  a b \t\n", "a b"},
		{"\r\na", "a"}, {"a\v\f", "a"}, {" x  y ", "x  y"},
	};
	for (size_t i = 0; i < ARRAY_LEN(trims); i++) {
		char *s = xstrdup(trims[i].in);
		CHECK(str_trim(s) == s);
		CHECK_STR(s, trims[i].want);
		free(s);
	}

	CHECK(str_has_prefix("relay-fn-x", "relay-fn-"));
	CHECK(str_has_prefix("abc", ""));
	CHECK(str_has_prefix("abc", "abc"));
	CHECK(!str_has_prefix("ab", "abc"));
	CHECK(!str_has_prefix("Abc", "a"));
}

TEST(strings_for_messages)
{
	static const struct {
		const char *in;
		size_t max;
		const char *want;
	} cases[] = {
		{"", 10, ""},
		{"abc", 10, "abc"},
		{"abc", 3, "abc"},
		{"abcdef", 3, "abc..."},
		{"abc", 0, "..."},
		{"a'b\"c\\d", 20, "a\\x27b\\x22c\\x5cd"},
		{"tab\there\n", 20, "tab\\x09here\\x0a"},
		{"\x7f\xff\xc3\xa9", 20, "\\x7f\\xff\\xc3\\xa9"},
		{"\x01\x02\x03\x04", 4, "\\x01\\x02\\x03\\x04"},
		{"\x01\x02\x03\x04\x05", 4, "\\x01\\x02\\x03\\x04..."},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		char *s = str_for_message(cases[i].in, cases[i].max);
		CHECK_STR(s, cases[i].want);
		free(s);
	}
}

TEST(write_all_and_sys_error)
{
	char *dir = t_tmpdir();
	char *path = xasprintf("%s/out", dir);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	REQUIRE(fd >= 0);
	size_t n = 3 << 20;
	char *data = xmalloc(n);
	for (size_t i = 0; i < n; i++)
		data[i] = (char)(i * 7);
	CHECK_INT(write_all(fd, data, n), 0);
	CHECK_INT(write_all(fd, data, 0), 0);
	close(fd);
	struct stat st;
	CHECK(stat(path, &st) == 0 && (size_t)st.st_size == n);
	FILE *f = fopen(path, "rb");
	char *back = xmalloc(n);
	CHECK(f && fread(back, 1, n, f) == n && memcmp(back, data, n) == 0);
	if (f)
		fclose(f);
	free(back);
	free(data);
	errno = 0;
	CHECK_INT(write_all(-1, "x", 1), -1);
	CHECK_INT(errno, EBADF);

	char *err = NULL;
	CHECK_INT(sys_error(&err, "cannot open", "/x/y", ENOENT), -1);
	CHECK_STR(err, "cannot open /x/y: No such file or directory");
	free(err);
	free(path);
	t_rmtree(dir);
	free(dir);
}

/* The names in dir other than "." and "..", sorted, joined with ' '. */
static char *listing(const char *dir)
{
	struct dirent **ents;
	int n = scandir(dir, &ents, NULL, alphasort);
	struct buf b;
	buf_init(&b, 1 << 16);
	for (int i = 0; i < n; i++) {
		if (strcmp(ents[i]->d_name, ".") && strcmp(ents[i]->d_name, ".."))
			buf_appendf(&b, "%s%s", b.len ? " " : "", ents[i]->d_name);
		free(ents[i]);
	}
	if (n >= 0)
		free(ents);
	return buf_steal(&b);
}

/* The contents of a small file in dir (malloc'd; "" when unreadable). */
static char *slurp(const char *dir, const char *name)
{
	char *p = xasprintf("%s/%s", dir, name);
	char text[64];
	int fd = open(p, O_RDONLY);
	ssize_t n = fd >= 0 ? read(fd, text, sizeof text) : -1;
	if (fd >= 0)
		close(fd);
	free(p);
	return xstrndup(text, n > 0 ? (size_t)n : 0);
}

TEST(atomic_file_write)
{
	char *dir = t_tmpdir();
	int dfd = open(dir, O_RDONLY | O_DIRECTORY);
	REQUIRE(dfd >= 0);
	mode_t old_umask = umask(077);
	char *err = NULL;
	CHECK_INT(write_file_atomic(dfd, dir, "a", "first", 5, 0644, false, &err), 0);
	char *s = slurp(dir, "a");
	CHECK_STR(s, "first");
	free(s);
	char *p = xasprintf("%s/a", dir);
	CHECK_INT(t_mode_of(p), 0644); /* exactly the mode, whatever the umask */
	/* replaced as a whole */
	CHECK_INT(write_file_atomic(dfd, dir, "a", "2nd", 3, 0600, false, &err), 0);
	s = slurp(dir, "a");
	CHECK_STR(s, "2nd");
	free(s);
	CHECK_INT(t_mode_of(p), 0600);
	/* noreplace keeps what is there: -EEXIST, no message */
	err = NULL;
	CHECK_INT(write_file_atomic(dfd, dir, "a", "third", 5, 0644, true, &err), -EEXIST);
	CHECK(err == NULL);
	s = slurp(dir, "a");
	CHECK_STR(s, "2nd");
	free(s);
	CHECK_INT(write_file_atomic(dfd, dir, "b", "", 0, 0640, true, &err), 0);
	/* a failed rename (a directory in the way) leaves no temporary file */
	char *sub = xasprintf("%s/sub", dir);
	REQUIRE(mkdir(sub, 0700) == 0);
	CHECK_INT(write_file_atomic(dfd, dir, "sub", "x", 1, 0644, false, &err), -1);
	char *want = xasprintf("cannot write a file in %s: ", dir);
	CHECK(err && str_has_prefix(err, want));
	free(want);
	free(err);
	s = listing(dir);
	CHECK_STR(s, "a b sub");
	free(s);
	/* not a directory: no temporary file can be made */
	int ffd = open(p, O_RDONLY);
	CHECK_INT(write_file_atomic(ffd, p, "c", "x", 1, 0644, false, &err), -1);
	want = xasprintf("cannot create a temporary file in %s: Not a directory", p);
	CHECK_STR(err, want);
	free(want);
	free(err);
	close(ffd);
	umask(old_umask);
	close(dfd);
	free(sub);
	free(p);
	t_rmtree(dir);
	free(dir);
}

static void *set_after_50ms(void *arg)
{
	usleep(50 * 1000);
	atomic_store((atomic_int *)arg, 1);
	return NULL;
}

TEST(clocks_and_interruptible_sleep)
{
	int64_t m0 = now_mono_ns();
	int64_t w = now_wall_ns();
	CHECK(w / 1000000000LL - (int64_t)time(NULL) <= 1 &&
	      (int64_t)time(NULL) - w / 1000000000LL <= 1);
	sleep_ms_interruptible(120, NULL);
	int64_t m1 = now_mono_ns();
	CHECK(m1 - m0 >= 120 * 1000000LL);
	atomic_int stop = 1;
	sleep_ms_interruptible(60 * 1000, &stop); /* already stopping: at once */
	int64_t m2 = now_mono_ns();
	CHECK(m2 - m1 < 1000 * 1000000LL);
	atomic_store(&stop, 0);
	sleep_ms_interruptible(0, &stop);
	sleep_ms_interruptible(-5, &stop);
	CHECK(now_mono_ns() - m2 < 1000 * 1000000LL);
	/* stopped from another thread: noticed within its 100 ms step */
	pthread_t t;
	REQUIRE(pthread_create(&t, NULL, set_after_50ms, (void *)&stop) == 0);
	int64_t m3 = now_mono_ns();
	sleep_ms_interruptible(60 * 1000, &stop);
	int64_t slept = now_mono_ns() - m3;
	pthread_join(t, NULL);
	CHECK(slept >= 40 * 1000000LL && slept < 2000 * 1000000LL);
}

TEST(random_below)
{
	CHECK_INT(rand_below(0), 0);
	CHECK_INT(rand_below(1), 0);
	int seen[10] = {0};
	for (int i = 0; i < 2000; i++) {
		uint64_t r = rand_below(10);
		REQUIRE(r < 10);
		seen[r]++;
	}
	for (int i = 0; i < 10; i++)
		if (seen[i] < 100) /* 200 expected; 100 is far out in the tail */
			T_FAIL_("value %d drawn %d times of 2000", i, seen[i]);
	uint64_t a = rand_below(UINT64_MAX), b = rand_below(UINT64_MAX);
	CHECK(a != b);
}

TEST(hex_encode_and_digit)
{
	static const unsigned char b[] = {0x00, 0x01, 0x7f, 0x80, 0xab, 0xff};
	char out[2 * sizeof b + 1];
	CHECK_STR(hex_encode(b, sizeof b, out), "00017f80abff");
	for (int i = 0; i < 12; i++)
		CHECK_INT(hex_digit(out[i]), (b[i / 2] >> (i % 2 ? 0 : 4)) & 15);
	CHECK_STR(hex_encode(b, 0, out), "");
	CHECK_INT(hex_digit('F'), 15);
	CHECK_INT(hex_digit('g'), -1);
	CHECK_INT(hex_digit('/'), -1);
}

TEST(mkdir_p_makes_each_missing_directory)
{
	char *d = t_tmpdir();
	char *p = xasprintf("%s/a/b/c", d), *err = NULL;
	bool created = false;
	mode_t old = umask(022);
	CHECK_INT(mkdir_p(p, 0750, 0, NULL, &created, &err), 0);
	CHECK(created);
	char *a = xasprintf("%s/a", d);
	CHECK_INT(t_mode_of(a), 0750);
	CHECK_INT(t_mode_of(p), 0750);
	/* Again: nothing to make, not created, existing modes kept. */
	CHECK_INT(mkdir_p(p, 0700, 0, NULL, &created, &err), 0);
	CHECK(!created);
	CHECK_INT(t_mode_of(p), 0750);
	/* A trailing slash and doubled slashes are fine. */
	char *q = xasprintf("%s//x//y/", d);
	CHECK_INT(mkdir_p(q, 0700, 0, NULL, NULL, &err), 0);
	/* The umask applies unless MKDIR_EXACT_MODE. */
	umask(077);
	char *u = xasprintf("%s/u/v", d), *e = xasprintf("%s/e/f", d), *ee = xasprintf("%s/e", d);
	CHECK_INT(mkdir_p(u, 0750, 0, NULL, NULL, &err), 0);
	CHECK_INT(t_mode_of(u), 0700);
	CHECK_INT(mkdir_p(e, 0750, MKDIR_EXACT_MODE, NULL, NULL, &err), 0);
	CHECK_INT(t_mode_of(e), 0750);
	CHECK_INT(t_mode_of(ee), 0750);
	umask(old);
	free(u);
	free(e);
	free(ee);
	free(q);
	free(a);
	free(p);
	t_rmtree(d);
	free(d);
}

TEST(mkdir_p_names_the_component_that_failed)
{
	char *d = t_tmpdir();
	char *f = xasprintf("%s/file", d), *p = xasprintf("%s/file/sub/dir", d), *err = NULL;
	FILE *fp = fopen(f, "w");
	REQUIRE(fp);
	fclose(fp);
	CHECK_INT(mkdir_p(p, 0700, 0, NULL, NULL, &err), -1);
	char *want = xasprintf("cannot create directory %s/sub: Not a directory", f);
	CHECK_STR(err, want);
	free(err);
	free(want);
	err = NULL;
	CHECK_INT(mkdir_p(p, 0700, 0, "state database: create directory", NULL, &err), -1);
	want = xasprintf("state database: create directory %s/sub: Not a directory", f);
	CHECK_STR(err, want);
	free(err);
	free(want);
	err = NULL;
	CHECK_INT(mkdir_p("", 0700, 0, NULL, NULL, &err), -1);
	CHECK_STR(err, "cannot create directory : No such file or directory");
	free(err);
	free(p);
	free(f);
	t_rmtree(d);
	free(d);
}

/* A file of n bytes 'x' in d; its open descriptor. */
static int file_of(const char *d, size_t n)
{
	char *p = xasprintf("%s/f%zu", d, n);
	int fd = open(p, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	char *b = xmalloc(n + 1);
	memset(b, 'x', n);
	if (fd >= 0 && write_all(fd, b, n) == 0)
		lseek(fd, 0, SEEK_SET);
	free(b);
	free(p);
	return fd;
}

TEST(read_fd_bounded_takes_up_to_max)
{
	char *d = t_tmpdir();
	static const size_t maxes[] = {0, 1, 100, 8190, 8191, 8192, 20000};
	for (size_t m = 0; m < ARRAY_LEN(maxes); m++) {
		size_t max = maxes[m];
		size_t sizes[] = {0, max > 0 ? max - 1 : 0, max, max + 1, max + 9000};
		for (size_t k = 0; k < ARRAY_LEN(sizes); k++) {
			for (unsigned flags = 0; flags <= READ_WIPE; flags += READ_WIPE) {
				int fd = file_of(d, sizes[k]);
				REQUIRE(fd >= 0);
				char *data = NULL;
				size_t len = 12345;
				errno = 0;
				int rc = read_fd_bounded(fd, max, flags, &data, &len);
				if (sizes[k] <= max) {
					CHECK_INT(rc, 0);
					CHECK_INT(len, sizes[k]);
					CHECK(data && data[len] == '\0' &&
					      strspn(data, "x") == sizes[k]);
				} else {
					CHECK_INT(rc, -1);
					CHECK_INT(errno, EFBIG);
					CHECK(!data);
					CHECK_INT(len, 12345);
					/* Never more than one byte past max was read. */
					CHECK_INT(lseek(fd, 0, SEEK_CUR), max + 1);
				}
				free(data);
				close(fd);
			}
		}
	}
	t_rmtree(d);
	free(d);
}

TEST(read_fd_bounded_read_error)
{
	char *data = NULL;
	size_t len = 0;
	int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	REQUIRE(fd >= 0);
	CHECK_INT(read_fd_bounded(fd, 100, 0, &data, &len), -1);
	CHECK_INT(errno, EISDIR);
	CHECK(!data);
	close(fd);
}

TEST(owner_and_mode_checks)
{
	struct stat st = {0};
	char *err = NULL;
	st.st_uid = geteuid();
	st.st_mode = S_IFDIR | 0700;
	CHECK(owner_mode_ok(&st, 077));
	CHECK_INT(check_owner_mode(&st, 077, "git directory", "/d", "use", &err), 0);
	st.st_mode = S_IFDIR | 0750;
	CHECK(!owner_mode_ok(&st, 077));
	CHECK(owner_mode_ok(&st, 022));
	CHECK_INT(check_owner_mode(&st, 077, "git directory", "/d", "use", &err), -1);
	CHECK_STR(err, "git directory /d: permissions 0750 are too open (want 0700); refusing "
		       "to use it");
	free(err);
	st.st_mode = S_IFREG | 0604;
	CHECK_INT(check_owner_mode(&st, 077, "secret file", "/f", "read", &err), -1);
	CHECK_STR(err, "secret file /f: permissions 0604 are too open (want 0600); refusing to "
		       "read it");
	free(err);
	st.st_mode = S_IFREG | 0600;
	st.st_uid = geteuid() + 1;
	CHECK(!owner_mode_ok(&st, 077));
	CHECK_INT(check_owner_mode(&st, 077, "secret file", "/f", "read", &err), -1);
	char *want = xasprintf("secret file /f: owned by uid %u, not by the current user (uid "
			       "%u); refusing to read it",
			       geteuid() + 1, geteuid());
	CHECK_STR(err, want);
	free(want);
	free(err);
}

static void *report_mask(void *arg)
{
	sigset_t now;
	pthread_sigmask(SIG_SETMASK, NULL, &now);
	int *blocked = arg;
	blocked[0] = sigismember(&now, SIGTERM) == 1 && sigismember(&now, SIGINT) == 1 &&
		     sigismember(&now, SIGHUP) == 1;
	char name[32] = "";
	pthread_getname_np(pthread_self(), name, sizeof name);
	blocked[1] = strcmp(name, "a-long-thread-n") == 0; /* cut to 15 bytes */
	return NULL;
}

TEST(thread_start_blocks_signals_and_names)
{
	sigset_t before, after;
	pthread_sigmask(SIG_SETMASK, NULL, &before);
	int seen[2] = {0, 0};
	pthread_t t;
	REQUIRE(thread_start(&t, "a-long-thread-name", report_mask, seen) == 0);
	pthread_join(t, NULL);
	CHECK(seen[0]);
	CHECK(seen[1]);
	pthread_sigmask(SIG_SETMASK, NULL, &after);
	for (int s = 1; s < SIGRTMIN; s++)
		CHECK_INT(sigismember(&after, s), sigismember(&before, s));
}

T_MAIN(T_CASE(allocation_wrappers), T_CASE(bounded_copies), T_CASE(buffer_cap),
       T_CASE(strict_integers), T_CASE(utf8_sequences), T_CASE(printable_copies),
       T_CASE(text_escape_covers_every_control), T_CASE(text_escape_json_keeps_json_valid),
       T_CASE(small_string_helpers), T_CASE(strings_for_messages), T_CASE(write_all_and_sys_error),
       T_CASE(atomic_file_write), T_CASE(clocks_and_interruptible_sleep), T_CASE(random_below),
       T_CASE(hex_encode_and_digit), T_CASE(mkdir_p_makes_each_missing_directory),
       T_CASE(mkdir_p_names_the_component_that_failed), T_CASE(read_fd_bounded_takes_up_to_max),
       T_CASE(read_fd_bounded_read_error), T_CASE(owner_and_mode_checks),
       T_CASE(thread_start_blocks_signals_and_names))
