/*
 * Fuzzes template loading from bytes: YAML parsing, core-schema typing,
 * every field rule, pattern compilation, cron and time-zone validation.
 * Whatever the input, template_parse either succeeds or reports at least
 * one error, and frees everything.
 */
#include <stdint.h>
#include <stdlib.h>

#include "template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct strlist errors = {0}, warnings = {0};
	struct template *t = NULL;
	int rc = template_parse((const char *)data, size, &t, &errors, &warnings);
	if ((rc == 0) != (t != NULL) || (rc != 0 && errors.n == 0))
		abort();
	template_free(t);
	strlist_free(&errors);
	strlist_free(&warnings);
	return 0;
}
