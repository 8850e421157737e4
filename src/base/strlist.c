/* A growable list of malloc'd strings; the contract is in strlist.h. */
#include "base/strlist.h"

#include <stdarg.h>
#include <stdlib.h>

#include "base/util.h"

void strlist_add(struct strlist *l, char *s)
{
	l->v = xrealloc(l->v, sizeof(char *) * (l->n + 1));
	l->v[l->n++] = s;
}

void strlist_addf(struct strlist *l, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	strlist_add(l, xvasprintf(fmt, ap));
	va_end(ap);
}

void strlist_free(struct strlist *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	l->v = NULL;
	l->n = 0;
}
