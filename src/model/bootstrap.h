/*
 * The embedded handler bootstraps (Python and Node), as NUL-terminated
 * source text. Immutable; safe from any thread. runtime.c ties each to its
 * runtime; see bootstrap.c for the contract they implement.
 */
#ifndef RELAY_BOOTSTRAP_H
#define RELAY_BOOTSTRAP_H

extern const char bootstrap_python[];
extern const char bootstrap_node[];

#endif
