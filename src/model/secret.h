/*
 * Secrets: a tiny provider interface and the local file provider.
 *
 * A provider resolves a secret reference name to its value. The interface
 * is one struct of function pointers over an opaque context, so a second
 * provider (Vault, a secrets API) is one new constructor filling it in;
 * templates and the runner do not change. Only get is required; list, set
 * and remove may be NULL for a read-only provider (the wrappers below then
 * fail with a clear message).
 *
 * The file provider keeps one file per secret under <data dir>/secrets/:
 *
 *   - the directory is created on the first write with mode 0700 (missing
 *     parents of it, the data directory included, are created 0700 too);
 *   - each file has mode 0600 and is written atomically: a temporary file
 *     ".<name>.tmp-XXXXXX" in the same directory (O_EXCL), write all,
 *     fsync, rename over the name, fsync the directory;
 *   - before anything is read or written, the directory must be a real
 *     directory (not a symbolic link) owned by the effective uid with no
 *     group/other permission bits, and a secret file a regular file (not a
 *     symbolic link) owned by the effective uid with no group/other bits.
 *     Anything looser is refused with an error naming the path and the
 *     problem; the file is never read;
 *   - values are binary-safe (NUL bytes and newlines are kept) and at most
 *     SECRET_VALUE_MAX bytes; a larger file is refused without reading it.
 *
 * Errors: every function returns 0 or a negative enum secret_status and,
 * on failure, sets *err to a malloc'd one-line message (caller frees). A
 * message may name the secret and its path, never its value.
 *
 * Thread-safety: the file provider keeps only its immutable directory path,
 * so one provider may be used from any number of threads at once. Several
 * processes may write the same store: each write is one rename, so a reader
 * sees either the old or the new value in full.
 */
#ifndef RELAY_SECRET_H
#define RELAY_SECRET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Longest secret name, in bytes. */
#define SECRET_NAME_MAX 63
/* Largest secret value, in bytes (1 MiB). */
#define SECRET_VALUE_MAX (1024 * 1024)

enum secret_status {
	SECRET_OK = 0,
	SECRET_ERROR = -1,	  /* I/O error, refused permissions, too large, ... */
	SECRET_NOT_FOUND = -2,	  /* no secret by that name (get, remove) */
	SECRET_INVALID_NAME = -3, /* the name breaks the naming rule */
	SECRET_UNSUPPORTED = -4,  /* the provider lacks that operation */
};

/* One line describing the naming rule, for error messages. */
#define SECRET_NAME_RULE                                                                    \
	"a secret name starts with a lowercase letter or a digit, uses lowercase letters, " \
	"digits, '.', '_' and '-', does not end with '.', and has at most 63 characters"

/*
 * The rule for secret names, the only place it is decided: the store
 * (secret_get/set/remove/list, relay secret, relay git --webhook-secret)
 * and template validation (secret references in template.yaml) both call
 * it. [a-z0-9][a-z0-9._-]{0,62}, not ending with '.' (the original's rule:
 * "_lead", "-lead" and ".lead" are refused). Pure; any thread.
 */
bool secret_name_ok(const char *name);
/* Same rule; on failure returns SECRET_INVALID_NAME and sets *err to a
 * malloc'd message quoting the name (escaped) and stating the rule. */
int secret_name_check(const char *name, char **err);

struct secret_provider {
	const char *kind; /* "file", ... for messages */
	void *ctx;	  /* the implementation's state, owned by the provider */

	/* Required. On success *value is a malloc'd copy of the value with a
	 * NUL appended (not counted in *len); free it with secret_value_free. */
	int (*get)(void *ctx, const char *name, char **value, size_t *len, char **err);
	/* Optional. On success *names is a malloc'd array of *count malloc'd
	 * names sorted by strcmp; free with secret_names_free. */
	int (*list)(void *ctx, char ***names, size_t *count, char **err);
	/* Optional. Creates or replaces the secret. */
	int (*set)(void *ctx, const char *name, const void *value, size_t len, char **err);
	/* Optional. SECRET_NOT_FOUND when there is no such secret. */
	int (*remove)(void *ctx, const char *name, char **err);
	/* Optional. A value that changes whenever the secret's value may have
	 * changed, found without reading the value (the standby pool compares
	 * it to know when a prepared container's Env is stale). */
	int (*stamp)(void *ctx, const char *name, uint64_t *stamp);
	/* Frees ctx; may be NULL. */
	void (*free_ctx)(void *ctx);
};

/*
 * Wrappers over a provider: they check the name (SECRET_INVALID_NAME, with
 * SECRET_NAME_RULE in the message) and a missing operation
 * (SECRET_UNSUPPORTED) before calling it. Same contracts as the fields.
 */
int secret_get(const struct secret_provider *p, const char *name, char **value, size_t *len,
	       char **err);
int secret_list(const struct secret_provider *p, char ***names, size_t *count, char **err);
int secret_set(const struct secret_provider *p, const char *name, const void *value, size_t len,
	       char **err);
int secret_remove(const struct secret_provider *p, const char *name, char **err);

/* p's stamp of the secret: 0, or -1 when p has none (or the name is
 * invalid): then nothing tells a change, and callers must not cache. */
int secret_stamp(const struct secret_provider *p, const char *name, uint64_t *stamp);

/* Frees a provider (NULL is fine). */
void secret_provider_free(struct secret_provider *p);

/* Zeroes then frees a value from get (NULL is fine). */
void secret_value_free(char *value, size_t len);
void secret_names_free(char **names, size_t count);

/*
 * The local file provider over <data_dir>/secrets. data_dir is copied.
 * Nothing is touched until an operation runs. Never fails.
 */
struct secret_provider *secret_file_provider_new(const char *data_dir);

/*
 * File provider only: checks the metadata of the secret's file (exists,
 * regular file, owner, mode, size) without opening or reading it, exactly
 * as get would before reading. Used by `relay secret ls` to report files
 * that get would refuse. Returns 0, SECRET_NOT_FOUND, SECRET_INVALID_NAME
 * or SECRET_ERROR (also when p is not a file provider).
 */
int secret_file_check(const struct secret_provider *p, const char *name, char **err);

#endif
