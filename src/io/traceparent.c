/*
 * W3C traceparent / tracestate: see traceparent.h for the rules.
 */
#include "io/traceparent.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"

/* Lowercase hex only (the spec: "HEXDIGLC"). */
static int lchex(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* n bytes from 2n lowercase hex digits at s; -1 on any other byte. */
static int unhex(const char *s, uint8_t *out, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int hi = lchex((unsigned char)s[2 * i]), lo = lchex((unsigned char)s[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

int traceparent_parse(const char *s, size_t n, struct traceparent *out)
{
	memset(out, 0, sizeof *out);
	uint8_t version;
	if (n < TRACEPARENT_LEN || unhex(s, &version, 1) < 0 || version == 0xff)
		goto bad;
	if (version == 0 ? n != TRACEPARENT_LEN : n > TRACEPARENT_LEN && s[TRACEPARENT_LEN] != '-')
		goto bad;
	if (s[2] != '-' || s[35] != '-' || s[52] != '-')
		goto bad;
	if (unhex(s + 3, out->trace_id, 16) < 0 || unhex(s + 36, out->span_id, 8) < 0 ||
	    unhex(s + 53, &out->flags, 1) < 0)
		goto bad;
	if (all_zero(out->trace_id, 16) || all_zero(out->span_id, 8))
		goto bad;
	/* A later version's flags may mean more; only "sampled" is known. */
	if (version != 0)
		out->flags &= TRACEPARENT_FLAG_SAMPLED;
	return 0;
bad:
	memset(out, 0, sizeof *out);
	return -1;
}

char *traceparent_format(const struct traceparent *tp, char out[TRACEPARENT_LEN + 1])
{
	char tid[33], sid[17], fl[3];
	hex_encode(tp->trace_id, 16, tid);
	hex_encode(tp->span_id, 8, sid);
	hex_encode(&tp->flags, 1, fl);
	snprintf_(out, TRACEPARENT_LEN + 1, "00-%s-%s-%s", tid, sid, fl);
	return out;
}

bool traceparent_state_valid(const char *s, size_t n)
{
	if (n == 0 || n > TRACEPARENT_STATE_MAX)
		return false;
	size_t members = 1;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c < 0x20 || c > 0x7e)
			return false;
		if (c == ',' && ++members > TRACEPARENT_STATE_MEMBERS)
			return false;
	}
	return true;
}

/* Per thread: getrandom(2) once per sizeof pool bytes. */
static _Thread_local uint8_t pool[256];
static _Thread_local size_t pool_left;

static void pool_fill(void)
{
	if (random_fill(pool, sizeof pool) < sizeof pool) {
		log_error(NULL, "getrandom failed: %s", strerror(errno));
		abort();
	}
	pool_left = sizeof pool;
}

void traceparent_random(uint8_t *out, size_t n)
{
	do {
		for (size_t i = 0; i < n; i++) {
			if (pool_left == 0)
				pool_fill();
			out[i] = pool[sizeof pool - pool_left];
			pool[sizeof pool - pool_left] = 0; /* never handed out twice */
			pool_left--;
		}
	} while (all_zero(out, n));
}

void traceparent_new(struct traceparent *out, uint8_t flags)
{
	traceparent_random(out->trace_id, sizeof out->trace_id);
	traceparent_random(out->span_id, sizeof out->span_id);
	out->flags = flags;
}
