/*
 * Tracing of relay start (docs/operations.md, "Tracing"): the trace
 * context of each message and invocation, and their spans.
 *
 * Propagation always happens: a message continues the trace of its
 * `traceparent` field (or the one stored in its invocation state by an
 * earlier delivery, invocation.h), else starts a new one; every log record
 * about it carries trace_id, and the handler gets TRACEPARENT (the
 * invocation span as parent) and TRACESTATE, set by the bootstrap from a
 * line before the event on stdin (executor.c, bootstrap.h). Spans are built only
 * when export is on (trace_setup with an OTLP endpoint) and the sampler
 * said yes: otherwise trace_msg_end and trace_inv_end build nothing.
 *
 * The spans:
 *   message     kind CONSUMER, "process <stream>", from when a worker takes
 *               the message to its verdict (acknowledged, left pending for
 *               a retry, dead-lettered), with the messaging.* attributes;
 *               parent: the incoming traceparent, else the first
 *               delivery's message span (retries), else none (a root);
 *   invocation  kind INTERNAL, "invoke <function>/<handler>", child of
 *               the message span, around one attempt's container run,
 *               with relay.function, relay.handler, relay.attempt,
 *               relay.exit_code, relay.outcome, relay.start_mode; status
 *               ERROR with the reason when the attempt failed.
 *
 * Thread-safety: trace_setup and trace_shutdown run on the main thread
 * before the workers start and after they stop; everything else on any
 * thread (each struct trace_msg belongs to one delivery).
 */
#ifndef RELAY_TRACE_H
#define RELAY_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/traceparent.h"
#include "model/otel.h"

/* The flush bound at shutdown. */
#define TRACE_FLUSH_NS (5LL * 1000000000LL)
/* The exporter's queue, batches and delay: the OTEL_BSP_* settings
 * (model/otel.h; a zero field of the settings takes the default). */

/* Starts the exporter when s has an endpoint (s is copied where kept).
 * 0, or -1 with *why (malloc'd). */
int trace_setup(const struct otel_settings *s, char **why);
/* Flushes (at most TRACE_FLUSH_NS) and stops the exporter. */
void trace_shutdown(void);
/* Whether spans are exported. */
bool trace_exporting(void);

/* One message's trace context and span. */
struct trace_msg {
	struct traceparent ctx; /* trace-id, this message span's id, flags */
	uint8_t parent_id[8];
	bool has_parent;
	bool recording;	   /* exporting and sampled: a span is built at the end */
	bool from_entry;   /* continued from the entry's own traceparent */
	char *state;	   /* tracestate to pass on (malloc'd), or NULL */
	char trace_id[33]; /* hex, for log records */
	/* What the invocation state keeps for the next delivery. */
	char stored[TRACEPARENT_LEN + 1];
	int64_t start_ns; /* wall clock */
};

/* Begins a message's context from its entry's traceparent / tracestate
 * (either may be NULL). */
void trace_msg_begin(struct trace_msg *t, const char *tp, size_t tplen, const char *ts,
		     size_t tslen);
/* An earlier delivery's stored context (the invocation state's field):
 * adopted when the entry carried no valid traceparent, so that retries
 * stay in one trace. */
void trace_msg_adopt(struct trace_msg *t, const char *stored);
/* Ends the message span: outcome "acknowledged", "pending" or
 * "dead_lettered"; error (may be NULL) sets its status to ERROR. */
void trace_msg_end(struct trace_msg *t, const char *stream, const char *group,
		   const char *message_id, const char *outcome, const char *error);
void trace_msg_free(struct trace_msg *t);

/* One attempt's span context, child of its message's. */
struct trace_inv {
	struct traceparent ctx;
	int64_t start_ns;
	char traceparent[TRACEPARENT_LEN + 1]; /* TRACEPARENT for the container */
};

void trace_inv_begin(const struct trace_msg *m, struct trace_inv *out);

/* What one attempt came to, for its span. */
struct trace_inv_result {
	const char *function, *handler;
	int attempt, exit_code;
	const char *outcome;	/* "success", "failure", "timeout", ... */
	const char *start_mode; /* "on_demand", "standby", "warm", or NULL */
	const char *error;	/* NULL when it succeeded */
};
void trace_inv_end(const struct trace_msg *m, const struct trace_inv *inv,
		   const struct trace_inv_result *r);

#endif
