/* The warm protocol's frames (warm_frame.h): what each forwarded line is
 * for an invocation's token, the bounds, and the request header. */
#include "t.h"
#include "base/util.h"
#include "io/warm_frame.h"

static const char TOK[] = "0123456789abcdef0123456789abcdef";
static const char OTHER[] = "ffffffffffffffffffffffffffffffff";

static void parse(const char *s, struct warm_frame *f)
{
	warm_frame_parse(s, strlen(s), TOK, f);
}

TEST(plain_lines)
{
	struct warm_frame f;
	parse("hello", &f);
	CHECK_INT(f.kind, WARM_PLAIN);
	CHECK_INT(f.text_len, 5);
	parse("", &f);
	CHECK_INT(f.kind, WARM_PLAIN);
	CHECK_INT(f.text_len, 0);
	/* The marker byte alone, the magic without the token, another token. */
	parse("a\x1e" "b", &f);
	CHECK_INT(f.kind, WARM_PLAIN);
	parse("\x1eRELAY1 end", &f);
	CHECK_INT(f.kind, WARM_PLAIN);
	char *s = xasprintf("\x1eRELAY1 %s end", OTHER);
	parse(s, &f);
	CHECK_INT(f.kind, WARM_PLAIN);
	CHECK_INT(f.text_len, strlen(s));
	free(s);
	/* A shorter token (a prefix of ours) is not ours. */
	s = xasprintf("\x1eRELAY1 %.31s end", TOK);
	parse(s, &f);
	CHECK_INT(f.kind, WARM_PLAIN);
	free(s);
}

TEST(end_and_result_frames)
{
	struct warm_frame f;
	char *s = xasprintf("\x1eRELAY1 %s end", TOK);
	parse(s, &f);
	CHECK_INT(f.kind, WARM_END);
	CHECK_INT(f.text_len, 0);
	free(s);
	s = xasprintf("partial text\x1eRELAY1 %s end", TOK);
	parse(s, &f);
	CHECK_INT(f.kind, WARM_END);
	CHECK_INT(f.text_len, 12);
	free(s);
	s = xasprintf("\x1eRELAY1 %s 0 \"\"", TOK);
	parse(s, &f);
	CHECK_INT(f.kind, WARM_RESULT);
	CHECK_INT(f.status, 0);
	CHECK_STR(f.error, "");
	free(s);
	s = xasprintf("x\x1e y\x1eRELAY1 %s 1 \"relay bootstrap: handler \\\"h.x\\\" raised "
		      "ValueError: b\\u00c3\\u00b6 (h.py:3)\"",
		      TOK);
	parse(s, &f);
	CHECK_INT(f.kind, WARM_RESULT);
	CHECK_INT(f.status, 1);
	CHECK_INT(f.text_len, 4);
	/* Code points are bytes: c3 b6 is the UTF-8 of U+00F6. */
	CHECK_STR(f.error, "relay bootstrap: handler \"h.x\" raised ValueError: b\xc3\xb6 (h.py:3)");
	free(s);
	/* Raw UTF-8 of U+0080..U+00FF (Node's JSON.stringify) decodes alike. */
	s = xasprintf("\x1eRELAY1 %s 1 \"\xc3\x83\xc2\xb6\"", TOK);
	parse(s, &f);
	CHECK_INT(f.kind, WARM_RESULT);
	CHECK_STR(f.error, "\xc3\xb6");
	free(s);
	/* The last frame of the token counts. */
	s = xasprintf("\x1eRELAY1 %s end\x1eRELAY1 %s 0 \"\"", TOK, TOK);
	parse(s, &f);
	CHECK_INT(f.kind, WARM_RESULT);
	free(s);
}

TEST(bad_frames)
{
	const char *tails[] = {
		"2 \"\"",	       /* status not 0 or 1 */
		"0",		       /* no error */
		"0 ",		       /* empty error */
		"0 \"unterminated",    /* invalid JSON */
		"0 \"a\" trailing",    /* more after it */
		"0 42",		       /* not a string */
		"1 \"\\u0100\"",       /* a code point above U+00FF */
		"1 \"\\ud800\"",       /* a lone surrogate */
		"ends",		       /* neither end nor a result */
		"end ",		       /* end with more */
		"",		       /* nothing */
	};
	for (size_t i = 0; i < ARRAY_LEN(tails); i++) {
		struct warm_frame f;
		char *s = xasprintf("pre\x1eRELAY1 %s %s", TOK, tails[i]);
		parse(s, &f);
		if (f.kind != WARM_BAD && !(tails[i][0] == '\0' && f.kind == WARM_PLAIN))
			T_FAIL_("tail \"%s\": kind %d", tails[i], (int)f.kind);
		free(s);
	}
}

TEST(error_is_bounded_and_cut_at_nul)
{
	struct buf b;
	buf_init(&b, 1u << 20);
	buf_appendf(&b, "\x1eRELAY1 %s 1 \"", TOK);
	for (int i = 0; i < 600; i++)
		buf_append(&b, "e", 1);
	buf_append(&b, "\"", 1);
	struct warm_frame f;
	warm_frame_parse(b.data, b.len, TOK, &f);
	CHECK_INT(f.kind, WARM_RESULT);
	CHECK_INT(f.error_len, WARM_ERROR_MAX);
	CHECK_INT(strlen(f.error), WARM_ERROR_MAX);
	buf_free(&b);
	char *s = xasprintf("\x1eRELAY1 %s 1 \"ab\\u0000cd\"", TOK);
	parse(s, &f);
	CHECK_INT(f.kind, WARM_RESULT);
	CHECK_STR(f.error, "ab");
	free(s);
}

TEST(frames_are_looked_for_only_at_the_end)
{
	/* A frame further than WARM_FRAME_MAX from the end is text. */
	struct buf b;
	buf_init(&b, 1u << 20);
	buf_appendf(&b, "\x1eRELAY1 %s end", TOK);
	for (int i = 0; i < WARM_FRAME_MAX; i++)
		buf_append(&b, "z", 1);
	struct warm_frame f;
	warm_frame_parse(b.data, b.len, TOK, &f);
	CHECK_INT(f.kind, WARM_PLAIN);
	CHECK_INT(f.text_len, b.len);
	buf_free(&b);
}

TEST(tail_of_a_cut_piece)
{
	char *full = xasprintf("xxxx\x1eRELAY1 %s 0 \"\"", TOK);
	size_t n = strlen(full);
	/* Every cut inside the frame holds back from the marker byte. */
	for (size_t cut = 5; cut < n; cut++)
		CHECK_INT(warm_frame_tail(full, cut, TOK), 4);
	CHECK_INT(warm_frame_tail(full, 4, TOK), 4);
	CHECK_INT(warm_frame_tail("abc\x1eRELAY2", 10, TOK), 10);
	char *other = xasprintf("ab\x1eRELAY1 %s", OTHER);
	CHECK_INT(warm_frame_tail(other, strlen(other), TOK), strlen(other));
	free(other);
	free(full);
}

TEST(request_header)
{
	char h[WARM_HEADER_MAX];
	size_t n = warm_frame_request_header(h, TOK, 1234);
	char *want = xasprintf("RELAY1 %s 1234\n", TOK);
	CHECK_INT(n, strlen(want));
	CHECK(memcmp(h, want, n) == 0);
	free(want);
	n = warm_frame_request_header(h, TOK, (size_t)-1);
	CHECK(n > 0 && n < WARM_HEADER_MAX);
	char a[WARM_TOKEN_LEN + 1], b[WARM_TOKEN_LEN + 1];
	warm_frame_token_new(a);
	warm_frame_token_new(b);
	CHECK_INT(strlen(a), WARM_TOKEN_LEN);
	CHECK(strspn(a, "0123456789abcdef") == WARM_TOKEN_LEN);
	CHECK(strcmp(a, b) != 0);
}

T_MAIN(T_CASE(plain_lines), T_CASE(end_and_result_frames), T_CASE(bad_frames),
       T_CASE(error_is_bounded_and_cut_at_nul), T_CASE(frames_are_looked_for_only_at_the_end),
       T_CASE(tail_of_a_cut_piece), T_CASE(request_header))
