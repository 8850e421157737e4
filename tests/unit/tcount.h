/*
 * How many times a string occurs in a text (a captured log, a listing),
 * for tests that assert something was said exactly once, or never.
 * Header-only, like t.h. (It belongs beside t_captured_logs in tfiles.h.)
 */
#ifndef RELAY_TCOUNT_H
#define RELAY_TCOUNT_H

#include <string.h>

/* Occurrences of what in s, overlapping ones included. */
static inline int t_count(const char *s, const char *what)
{
	int n = 0;
	for (const char *p = strstr(s, what); p; p = strstr(p + 1, what))
		n++;
	return n;
}

#endif
