/*
 * W3C Trace Context on the wire: the `traceparent` and `tracestate` fields
 * of a stream entry, the TRACEPARENT / TRACESTATE of a handler's
 * container (docs/operations.md, "Tracing").
 *
 *   traceparent = 00-<32 hex trace-id>-<16 hex parent-id>-<2 hex flags>
 *
 * Parsing rules (W3C Trace Context level 1, section 3.2):
 * - lowercase hex only; an upper-case digit makes the header invalid;
 * - version 00: exactly 55 bytes;
 * - version ff: invalid;
 * - a higher version (01..fe): its first 55 bytes are read as version 00
 *   and anything after them must start with '-' (the spec's forward
 *   compatibility rule); the context keeps only the sampled flag and is
 *   written out as version 00;
 * - an all-zero trace-id or parent-id is invalid.
 * An invalid traceparent is ignored: the caller starts a new trace.
 *
 * tracestate is passed on as it came when it is at most
 * TRACEPARENT_STATE_MAX bytes of printable ASCII (0x20..0x7e) in at most
 * TRACEPARENT_STATE_MEMBERS comma-separated members; otherwise it is
 * dropped whole (the spec allows dropping it, never half of it).
 *
 * Ids come from getrandom(2) (the kernel's CSPRNG), through a small
 * per-thread buffer so that one message costs one system call only every
 * few messages. Everything here is thread-safe.
 */
#ifndef RELAY_TRACEPARENT_H
#define RELAY_TRACEPARENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TRACEPARENT_LEN 55 /* version 00, without a NUL */
#define TRACEPARENT_STATE_MAX 512
#define TRACEPARENT_STATE_MEMBERS 32
#define TRACEPARENT_FLAG_SAMPLED 0x01

struct traceparent {
	uint8_t trace_id[16];
	uint8_t span_id[8]; /* the parent-id on the wire: the span that is the parent */
	uint8_t flags;
};

/* Parses the n bytes at s by the rules above into *out. 0, or -1 when
 * invalid (*out is then zeroed). */
int traceparent_parse(const char *s, size_t n, struct traceparent *out);

/* Writes tp as a version-00 traceparent and a NUL into out
 * (TRACEPARENT_LEN + 1 bytes). Returns out. */
char *traceparent_format(const struct traceparent *tp, char out[TRACEPARENT_LEN + 1]);

/* Whether the n bytes at s may be passed on as a tracestate (above). */
bool traceparent_state_valid(const char *s, size_t n);

/* n random bytes, never all zero (an all-zero id is invalid). Aborts when
 * the kernel's generator fails, which getrandom(2) never does once seeded. */
void traceparent_random(uint8_t *out, size_t n);

/* A new trace: random trace-id and span-id, flags as given. */
void traceparent_new(struct traceparent *out, uint8_t flags);

#endif
