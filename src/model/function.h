/*
 * Function discovery: each direct subdirectory of the functions directory
 * is one function, named after the directory. A directory without
 * template.yaml is ignored ("not ready"); an invalid name or template is
 * reported and skipped, never fatal. Functions are returned sorted by name
 * (byte order): that is their execution order.
 */
#ifndef RELAY_FUNCTION_H
#define RELAY_FUNCTION_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "model/template.h"

#define FUNCTION_NAME_MAX 63
/* A function tree larger than this is refused (it would be a build context). */
#define FUNCTION_MAX_FILES 10000
#define FUNCTION_MAX_DEPTH 32

/* The name rule: [a-z0-9][a-z0-9._-]*, at most 63, no trailing dot.
 * Returns 1 when valid; otherwise 0 and, if why is given, a static reason. */
int function_name_valid(const char *name, const char **why);
/* The rule as messages state it after the reason (discovery, relay function
 * new): "invalid function name: <why> (FUNCTION_NAME_RULE)". */
#define FUNCTION_NAME_RULE \
	"the name must match [a-z0-9][a-z0-9._-]*, at most 63 characters, no trailing dot"

/* Directories git sync stages and swaps functions through
 * (".relay-sync-..."): never functions, skipped without a word wherever the
 * functions directory is read. */
#define FUNCTION_STAGING_PREFIX ".relay-sync-"
#define function_dir_staging(name) \
	(strncmp((name), FUNCTION_STAGING_PREFIX, sizeof FUNCTION_STAGING_PREFIX - 1) == 0)

struct function {
	char *name;
	char *dir; /* absolute or as given: <functions dir>/<name> */
	struct template *tpl;
};

/* Outcome of looking at one directory entry. */
enum function_status {
	FUNCTION_OK,
	FUNCTION_NO_TEMPLATE, /* ignored */
	FUNCTION_INVALID,     /* errors say why */
};

/*
 * Loads and validates the function in dir/name. On FUNCTION_OK *out holds
 * a new function (free with function_free). Errors and warnings are plain
 * lines (the caller prefixes the function name).
 */
enum function_status function_load(const char *dir, const char *name, struct function **out,
				   struct strlist *errors, struct strlist *warnings);
void function_free(struct function *f);

/* One entry of a directory scan. */
struct function_entry {
	char *name;
	enum function_status status;
	struct function *fn; /* FUNCTION_OK only */
	struct strlist errors;
	struct strlist warnings;
};

struct function_scan {
	struct function_entry *v; /* sorted by name */
	size_t n;
};

/* Every error of e on one line, "; "-separated (at most 64 KiB: an error
 * that would not fit is left out). malloc'd, "" when there is none. */
char *function_entry_errors(const struct function_entry *e);

/* Logs an entry that cannot be served: one WARN line naming the function
 * and every error ("; "-separated); warnings (unknown keys) one line each.
 * Entries without a template are not logged. */
void function_entry_log(const struct function_entry *e);

/* The direct subdirectories of dir (symlinks followed; git sync's staging
 * directories skipped), sorted by byte order: *names is a malloc'd array
 * of *n malloc'd names (free with function_names_free). 0, or -1 with
 * *err when dir cannot be read. */
int function_dir_names(const char *dir, char ***names, size_t *n, char **err);
void function_names_free(char **names, size_t n);

/* Scans dir. Returns 0, or -1 with *err set when dir cannot be read. */
int function_scan_dir(const char *dir, struct function_scan *out, char **err);
void function_scan_free(struct function_scan *s);

#endif
