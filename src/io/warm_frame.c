/* The warm protocol's frames; the contract is in warm_frame.h. */
#include "io/warm_frame.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

/* Whether p[0..n) agrees with the first n bytes of magic + token + " ". */
static bool frame_prefix(const char *p, size_t n, const char *token)
{
	size_t head = WARM_MAGIC_LEN + WARM_TOKEN_LEN + 1;
	for (size_t i = 0; i < n && i < head; i++) {
		char want = i < WARM_MAGIC_LEN		       ? WARM_MAGIC[i]
			    : i < WARM_MAGIC_LEN + WARM_TOKEN_LEN ? token[i - WARM_MAGIC_LEN]
								  : ' ';
		if (p[i] != want)
			return false;
	}
	return true;
}

/* Decodes a JSON string whose code points are bytes into f->error. */
static bool decode_error(const char *p, size_t n, struct warm_frame *f)
{
	json_error_t je;
	json_t *s = json_loadb(p, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
	if (!json_is_string(s)) {
		json_decref(s);
		return false;
	}
	const unsigned char *u = (const unsigned char *)json_string_value(s);
	size_t len = json_string_length(s), o = 0;
	bool ok = true, cut = false;
	for (size_t i = 0; i < len;) {
		unsigned cp;
		if (u[i] < 0x80) {
			cp = u[i];
			i++;
		} else if ((u[i] & 0xe0) == 0xc0 && i + 1 < len) {
			cp = (unsigned)(u[i] & 0x1f) << 6 | (u[i + 1] & 0x3f);
			i += 2;
		} else {
			ok = false; /* above U+07FF: no byte */
			break;
		}
		if (cp > 0xff) {
			ok = false;
			break;
		}
		if (cp == 0)
			cut = true;
		if (!cut && o < WARM_ERROR_MAX)
			f->error[o++] = (char)cp;
	}
	json_decref(s);
	f->error[o] = '\0';
	f->error_len = o;
	return ok;
}

void warm_frame_parse(const char *line, size_t len, const char *token, struct warm_frame *f)
{
	f->kind = WARM_PLAIN;
	f->text_len = len;
	f->status = 0;
	f->error[0] = '\0';
	f->error_len = 0;
	size_t head = WARM_MAGIC_LEN + WARM_TOKEN_LEN + 1;
	size_t from = len > WARM_FRAME_MAX ? len - WARM_FRAME_MAX : 0;
	size_t at = len;
	for (size_t i = len; i-- > from;) {
		if (line[i] == '\x1e' && len - i >= head && frame_prefix(line + i, head, token)) {
			at = i;
			break;
		}
	}
	if (at == len)
		return;
	f->text_len = at;
	const char *r = line + at + head;
	size_t n = len - at - head;
	if (n == 3 && memcmp(r, "end", 3) == 0) {
		f->kind = WARM_END;
		return;
	}
	f->kind = WARM_BAD;
	if (n < 3 || (r[0] != '0' && r[0] != '1') || r[1] != ' ')
		return;
	if (!decode_error(r + 2, n - 2, f)) {
		f->error[0] = '\0';
		f->error_len = 0;
		return;
	}
	f->status = r[0] - '0';
	f->kind = WARM_RESULT;
}

size_t warm_frame_tail(const char *p, size_t len, const char *token)
{
	size_t from = len > WARM_FRAME_MAX ? len - WARM_FRAME_MAX : 0;
	for (size_t i = from; i < len; i++)
		if (p[i] == '\x1e' && frame_prefix(p + i, len - i, token))
			return i;
	return len;
}

size_t warm_frame_request_header(char *out, const char *token, size_t payload_len)
{
	int n = snprintf(out, WARM_HEADER_MAX, "RELAY1 %.*s %zu\n", WARM_TOKEN_LEN, token,
			 payload_len);
	return n > 0 && n < WARM_HEADER_MAX ? (size_t)n : 0;
}

void warm_frame_token_new(char *token)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char b[WARM_TOKEN_LEN / 2];
	if (getrandom(b, sizeof b, GRND_NONBLOCK) != (ssize_t)sizeof b) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		static unsigned counter;
		uint64_t v = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
			     ((uint64_t)getpid() << 48) ^ (uint64_t)++counter * 0x9e3779b97f4a7c15ULL;
		for (size_t i = 0; i < sizeof b; i++)
			b[i] = (unsigned char)(v >> (8 * (i % 8))) ^ (unsigned char)(i * 37);
	}
	for (size_t i = 0; i < sizeof b; i++) {
		token[2 * i] = hex[b[i] >> 4];
		token[2 * i + 1] = hex[b[i] & 15];
	}
	token[WARM_TOKEN_LEN] = '\0';
}
