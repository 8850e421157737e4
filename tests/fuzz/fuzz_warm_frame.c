/*
 * libFuzzer target: the warm protocol's frame parser (warm_frame.h), fed
 * arbitrary lines for a fixed token.
 *
 * Invariants, for every input line L:
 * - warm_frame_parse: text_len <= len(L); a frame (anything but
 *   WARM_PLAIN) starts at text_len with the magic, the token and a space;
 *   WARM_PLAIN only when no such start lies within the last WARM_FRAME_MAX
 *   bytes; a result has status 0 or 1 and a NUL-terminated error of
 *   error_len <= WARM_ERROR_MAX bytes.
 * - warm_frame_tail of L: len(L), or the offset of a marker byte within
 *   the last WARM_FRAME_MAX bytes whose rest agrees with the frame's start.
 * - Round trip: L's bytes as the error of a result frame, encoded as the
 *   bootstraps encode it (every byte a code point, \u00XX outside printable
 *   ASCII), parse back to the same bytes, cut at the first NUL and at
 *   WARM_ERROR_MAX; the same frame cut at any point before its end leaves
 *   a tail at the marker byte (so the runner holds it back whole).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "base/util.h"
#include "io/warm_frame.h"

static const char TOK[] = "0123456789abcdef0123456789abcdef";

static bool starts_frame(const char *p, size_t n)
{
	size_t head = WARM_MAGIC_LEN + WARM_TOKEN_LEN + 1;
	return n >= head && memcmp(p, WARM_MAGIC, WARM_MAGIC_LEN) == 0 &&
	       memcmp(p + WARM_MAGIC_LEN, TOK, WARM_TOKEN_LEN) == 0 && p[head - 1] == ' ';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *l = (const char *)data;
	static struct warm_frame f;
	warm_frame_parse(l, size, TOK, &f);
	CHECK(f.text_len <= size, "text_len %zu > len %zu", f.text_len, size);
	size_t from = size > WARM_FRAME_MAX ? size - WARM_FRAME_MAX : 0;
	if (f.kind == WARM_PLAIN) {
		CHECK(f.text_len == size, "plain: text_len %zu != len %zu", f.text_len, size);
		for (size_t i = from; i < size; i++)
			CHECK(!starts_frame(l + i, size - i), "plain, but a frame starts at %zu", i);
	} else {
		CHECK(f.text_len >= from && starts_frame(l + f.text_len, size - f.text_len),
		      "kind %d: no frame start at %zu", (int)f.kind, f.text_len);
		for (size_t i = f.text_len + 1; i < size; i++)
			CHECK(!starts_frame(l + i, size - i), "a later frame start at %zu", i);
	}
	if (f.kind == WARM_RESULT) {
		CHECK(f.status == 0 || f.status == 1, "status %d", f.status);
		CHECK(f.error_len <= WARM_ERROR_MAX && strlen(f.error) == f.error_len,
		      "error_len %zu, strlen %zu", f.error_len, strlen(f.error));
	}
	size_t t = warm_frame_tail(l, size, TOK);
	CHECK(t <= size, "tail %zu > len %zu", t, size);
	if (t < size)
		CHECK(t >= from && l[t] == '\x1e', "tail %zu not a marker byte", t);

	/* Round trip of the input as an error line. */
	struct buf b;
	buf_init(&b, 16 * size + 256);
	buf_appendf(&b, "text%s%s 1 \"", WARM_MAGIC, TOK);
	size_t frame_at = 4;
	size_t n = size < WARM_ERROR_MAX ? size : WARM_ERROR_MAX;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = data[i];
		if (c == '"' || c == '\\')
			buf_appendf(&b, "\\%c", c);
		else if (c >= 0x20 && c < 0x7f)
			buf_append(&b, &c, 1);
		else
			buf_appendf(&b, "\\u%04x", c);
	}
	buf_append(&b, "\"", 1);
	warm_frame_parse(b.data, b.len, TOK, &f);
	CHECK(f.kind == WARM_RESULT && f.text_len == frame_at, "round trip: kind %d at %zu",
	      (int)f.kind, f.text_len);
	size_t want = strnlen(l, n);
	CHECK(f.error_len == want && memcmp(f.error, data, want) == 0,
	      "round trip: error of %zu bytes, want %zu", f.error_len, want);
	if (b.len - frame_at < WARM_FRAME_MAX) {
		size_t cut = frame_at + 1 + (size % (b.len - frame_at - 1));
		CHECK(warm_frame_tail(b.data, cut, TOK) == frame_at, "cut at %zu: tail %zu", cut,
		      warm_frame_tail(b.data, cut, TOK));
	}
	buf_free(&b);
	return 0;
}
