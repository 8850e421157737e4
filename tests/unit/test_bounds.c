/*
 * docs/limits.md's "Limits" table against the constants that enforce each bound
 * (src/bounds.h): every row of RELAY_LIMITS is in the table, in order, with
 * the value the constant really has, and the table has no other rows.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bounds.h"
#include "t.h"
#include "base/util.h"

struct row {
	const char *input, *bound, *constant, *text;
	long long value, want;
};

#define ROW(input, bound, constant, value, text) \
	{input, bound, #constant, text, (long long)(constant), (long long)(value)},
static const struct row rows[] = {RELAY_LIMITS(ROW)};

/* The lines of docs/limits.md's "# Limits" section (up to the next heading)
 * that are table rows (start with "| "), header and separator excluded. */
static char **limits_rows(size_t *n)
{
	const char *root = getenv("ROOT");
	char path[4096];
	snprintf(path, sizeof path, "%s/docs/limits.md", root ? root : ".");
	FILE *f = fopen(path, "r");
	*n = 0;
	if (!f)
		return NULL;
	char **v = calloc(256, sizeof *v);
	char line[4096];
	int in = 0, seen = 0;
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = '\0';
		if (line[0] == '#')
			in = strcmp(line, "# Limits") == 0;
		if (!in || line[0] != '|')
			continue;
		if (seen++ < 2) /* header, separator */
			continue;
		if (*n < 256)
			v[(*n)++] = strdup(line);
	}
	fclose(f);
	return v;
}

TEST(constants_have_the_values_the_table_states)
{
	for (size_t i = 0; i < ARRAY_LEN(rows); i++)
		if (rows[i].value != rows[i].want)
			T_FAIL_("%s is %lld, the Limits row \"%s | %s\" says %s (%lld)",
				rows[i].constant, rows[i].value, rows[i].input, rows[i].bound,
				rows[i].text, rows[i].want);
}

TEST(limits_table_lists_every_bound_in_order)
{
	size_t n;
	char **lines = limits_rows(&n);
	REQUIRE(lines != NULL);
	CHECK(n == ARRAY_LEN(rows));
	for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
		char want[512];
		snprintf(want, sizeof want, "| %s | %s | %s |", rows[i].input, rows[i].bound,
			 rows[i].text);
		if (i >= n) {
			T_FAIL_("docs/limits.md's Limits table lacks row %zu: %s", i + 1, want);
			continue;
		}
		if (strncmp(lines[i], want, strlen(want)) != 0)
			T_FAIL_("Limits row %zu is\n    %s\n  want it to start with\n    %s", i + 1,
				lines[i], want);
	}
	for (size_t i = 0; i < n; i++)
		free(lines[i]);
	free(lines);
}

T_MAIN(T_CASE(constants_have_the_values_the_table_states),
       T_CASE(limits_table_lists_every_bound_in_order))
