/*
 * libFuzzer target: the demultiplexer of Docker's attach stream
 * (runner_demux_*), fed arbitrary bytes: frame headers with any stream byte
 * and any length, payloads with or without newlines, invalid UTF-8, a frame
 * or header cut off at the end.
 *
 * The first 8 bytes (when there are more) seed how the rest is split into
 * feeds; the rest is the stream. It is fed three ways: in one call, in
 * pieces of sizes the seed picks (1 byte to 128 KiB), and one byte at a
 * time (1 to 64 bytes at a time beyond 8 KiB, for speed). Each must give, per output stream, exactly the lines of a reference
 * written here from runner.h's description:
 *
 * - a frame's payload goes to stderr when its stream byte is 2 (or 3,
 *   Docker's "systemerr"), else to stdout; a header or payload cut off by
 *   the end of the input delivers what arrived;
 * - each stream's text is cut at '\n' into lines (without the '\n'); a line
 *   longer than RUNNER_LINE_MAX is forwarded in pieces of at most that size,
 *   each piece the longest that does not end inside a UTF-8 sequence whose
 *   lead byte it holds (a whole RUNNER_LINE_MAX piece when no such cut
 *   exists); a last line without '\n' is forwarded when flushed, if not
 *   empty.
 *
 * How the input is split must not change the output, and no piece may
 * exceed RUNNER_LINE_MAX; the demultiplexer never buffers more than that
 * per stream (checked after every feed).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine/runner.h"
#include "base/util.h"

/* What came out: per stream, each line as a 4-byte length and its bytes. */
struct out {
	struct buf s[2];
	size_t lines;
};

static void out_init(struct out *o)
{
	/* Each line costs at most its bytes plus 4, and a line is at least one
	 * input byte (its '\n') or a piece of RUNNER_LINE_MAX/4 bytes. */
	buf_init(&o->s[0], 64u << 20);
	buf_init(&o->s[1], 64u << 20);
	o->lines = 0;
}

static void out_free(struct out *o)
{
	buf_free(&o->s[0]);
	buf_free(&o->s[1]);
}

static void out_line(struct out *o, int stream, const char *line, size_t len)
{
	uint32_t n = (uint32_t)len;
	CHECK(buf_append(&o->s[stream - 1], &n, 4) == 0 &&
		      buf_append(&o->s[stream - 1], line, len) == 0,
	      "output grows past 64 MiB");
	o->lines++;
}

static void on_line(void *ctx, int stream, const char *line, size_t len)
{
	CHECK(stream == 1 || stream == 2, "line on stream %d", stream);
	CHECK(len <= RUNNER_LINE_MAX, "a %zu-byte line piece (the cap is %d)", len,
	      RUNNER_LINE_MAX);
	CHECK(len == 0 || line != NULL, "NULL line of %zu bytes", len);
	CHECK(!memchr(line, '\n', len), "a forwarded line holds a newline");
	out_line(ctx, stream, line, len);
}

/* ---- the reference ---------------------------------------------------- */

/* Length of the UTF-8 sequence a lead byte starts, 1 for anything else. */
static size_t seq_len(unsigned char c)
{
	return c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
}

/* Where to cut a line longer than the cap: before the last lead byte of the
 * first RUNNER_LINE_MAX bytes when its sequence does not fit (it and at
 * most three continuation bytes after it end the window), else at the cap. */
static size_t ref_cut(const unsigned char *l)
{
	size_t n = RUNNER_LINE_MAX, i = n;
	while (i > 0 && n - i < 4 && (l[i - 1] & 0xc0) == 0x80)
		i--;
	if (i > 0 && n - i < 4 && l[i - 1] >= 0xc0 && seq_len(l[i - 1]) > n - i + 1 && i - 1 > 0)
		return i - 1;
	return n;
}

static void ref_lines(struct out *o, int stream, const struct buf *text)
{
	const unsigned char *p = (const unsigned char *)text->data;
	size_t n = text->len;
	while (n > 0) {
		const unsigned char *nl = memchr(p, '\n', n);
		size_t len = nl ? (size_t)(nl - p) : n;
		while (len > RUNNER_LINE_MAX) {
			size_t cut = ref_cut(p);
			out_line(o, stream, (const char *)p, cut);
			p += cut;
			n -= cut;
			len -= cut;
		}
		out_line(o, stream, (const char *)p, len); /* the unterminated rest, too */
		p += len + (nl != NULL);
		n -= len + (nl != NULL);
	}
}

static void reference(const uint8_t *d, size_t n, struct out *o)
{
	struct buf text[2];
	buf_init(&text[0], n);
	buf_init(&text[1], n);
	size_t i = 0;
	while (i + 8 <= n) {
		int s = d[i] == 2 || d[i] == 3 ? 1 : 0;
		size_t len = (size_t)d[i + 4] << 24 | (size_t)d[i + 5] << 16 |
			     (size_t)d[i + 6] << 8 | d[i + 7];
		i += 8;
		if (len > n - i)
			len = n - i;
		buf_append(&text[s], d + i, len);
		i += len;
	}
	ref_lines(o, 1, &text[0]);
	ref_lines(o, 2, &text[1]);
	buf_free(&text[0]);
	buf_free(&text[1]);
}

/* ---- the three feeds -------------------------------------------------- */

static uint64_t next(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static void check_bounded(const struct runner_demux *m)
{
	CHECK(m->line_len[0] <= RUNNER_LINE_MAX && m->line_len[1] <= RUNNER_LINE_MAX &&
		      m->hdr_len < 8,
	      "demux holds %zu + %zu line bytes, %zu header bytes", m->line_len[0], m->line_len[1],
	      m->hdr_len);
}

/* how 0: in one call; 1: in pieces of 1 byte (up to 8 KiB of input, else
 * of 1 to 64 bytes, which costs less); 2: in pieces the seed picks. */
static void run(const uint8_t *d, size_t n, uint64_t seed, int how, struct out *o)
{
	struct runner_demux m;
	runner_demux_init(&m, on_line, o);
	for (size_t i = 0; i < n;) {
		size_t k = n - i;
		if (how == 1 && n <= 8192) {
			k = 1;
		} else if (how == 1) {
			size_t piece = 1 + (size_t)(next(&seed) & 63);
			if (piece < k)
				k = piece;
		} else if (how == 2) {
			uint64_t r = next(&seed);
			size_t piece = 1 + (size_t)((r >> 8) % ((size_t)1 << (r % 18)));
			if (piece < k)
				k = piece;
		}
		runner_demux_feed(&m, d + i, k);
		check_bounded(&m);
		i += k;
	}
	runner_demux_flush(&m);
	CHECK(m.line_len[0] == 0 && m.line_len[1] == 0, "flush left %zu + %zu bytes", m.line_len[0],
	      m.line_len[1]);
	runner_demux_free(&m);
}

static void same(const struct out *got, const struct out *want, const char *how)
{
	for (int s = 0; s < 2; s++) {
		const struct buf *g = &got->s[s], *w = &want->s[s];
		if (g->len == w->len && (g->len == 0 || memcmp(g->data, w->data, g->len) == 0))
			continue;
		size_t at = 0;
		while (at < g->len && at < w->len && g->data[at] == w->data[at])
			at++;
		CHECK(0,
		      "fed %s, %s differs from the reference at output byte %zu of %zu "
		      "(reference %zu bytes; %zu lines in all)",
		      how, s ? "stderr" : "stdout", at, g->len, w->len, got->lines);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint64_t seed = 0;
	if (size > 8) {
		memcpy(&seed, data, 8);
		data += 8;
		size -= 8;
	}
	struct out want, got;
	out_init(&want);
	reference(data, size, &want);
	static const char *const hows[] = {"in one call", "in pieces of 1 (to 64) bytes",
					   "in seeded pieces"};
	for (int how = 0; how < 3; how++) {
		out_init(&got);
		run(data, size, seed, how, &got);
		same(&got, &want, hows[how]);
		out_free(&got);
	}
	out_free(&want);
	return 0;
}
