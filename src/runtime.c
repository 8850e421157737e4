#include "runtime.h"

#include <string.h>

static const struct runtime runtimes[] = {
	{"python3.14", "python:3.14-slim"},
	{"node24", "node:24-alpine"},
};

const struct runtime *runtime_find(const char *name)
{
	for (size_t i = 0; i < sizeof runtimes / sizeof runtimes[0]; i++)
		if (strcmp(runtimes[i].name, name) == 0)
			return &runtimes[i];
	return NULL;
}

const char *runtime_names(void)
{
	return "python3.14, node24";
}
