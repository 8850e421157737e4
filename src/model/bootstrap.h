/*
 * The embedded handler bootstraps (Python and Node), as NUL-terminated
 * source text. Immutable; safe from any thread. runtime.c ties each to its
 * runtime; see bootstrap.c for the contract they implement.
 */
#ifndef RELAY_BOOTSTRAP_H
#define RELAY_BOOTSTRAP_H

/* The line that may precede an event on a handler's stdin:
 * BOOTSTRAP_TRACE_LINE "<traceparent>[ <tracestate>]\n" (bootstrap.c). */
#define BOOTSTRAP_TRACE_LINE "\x1etrace "

extern const char bootstrap_python[];
extern const char bootstrap_node[];

#endif
