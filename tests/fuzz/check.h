/*
 * What a fuzz target does when an invariant breaks: name the invariant and
 * the values involved on stderr, then abort() so libFuzzer saves the input
 * as a crash-* artifact and tests/run reports the target as failed.
 */
#ifndef RELAY_FUZZ_CHECK_H
#define RELAY_FUZZ_CHECK_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

__attribute__((noreturn, format(printf, 3, 4))) static void fuzz_violation(const char *file,
									   int line,
									   const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "\n==== fuzz invariant violated (%s:%d): ", file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}

/* CHECK(cond, "what should hold, with %s values", ...): aborts when !cond. */
#define CHECK(cond, ...)                                                 \
	do {                                                             \
		if (!(cond))                                             \
			fuzz_violation(__FILE__, __LINE__, __VA_ARGS__); \
	} while (0)

#endif
