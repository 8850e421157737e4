/*
 * The runtime registry: one table entry per supported runtime. Adding a
 * runtime (python3.15, node26) is one new entry in runtime.c; the engine is
 * reused. The execution issue extends the entry with the bootstrap and the
 * dependency rule.
 */
#ifndef RELAY_RUNTIME_H
#define RELAY_RUNTIME_H

#include <stddef.h>

struct runtime {
	const char *name;       /* "python3.14" */
	const char *base_image; /* "python:3.14-slim" */
};

/* The entry for name, or NULL. Entries are static and immutable. */
const struct runtime *runtime_find(const char *name);
/* "python3.14, node24": for error messages. */
const char *runtime_names(void);

#endif
