/*
 * A growable list of malloc'd strings: the errors and warnings a parser
 * collects (template.c, function.c) so that all of them are shown at once.
 * Not thread-safe; a zeroed struct strlist is an empty list.
 */
#ifndef RELAY_STRLIST_H
#define RELAY_STRLIST_H

#include <stddef.h>

struct strlist {
	char **v;
	size_t n;
};

/* Appends s, taking ownership. */
void strlist_add(struct strlist *l, char *s);
/* Appends a formatted string. */
void strlist_addf(struct strlist *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Frees every string and empties l (usable again). */
void strlist_free(struct strlist *l);

#endif
