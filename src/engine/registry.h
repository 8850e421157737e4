/*
 * The function registry: an immutable, reference-counted snapshot of every
 * function Relay serves (sorted by name), their compiled patterns as one
 * pattern set, and each function's active image. The reconciler builds a new
 * snapshot and publishes it with one pointer swap; each message takes a
 * reference to the snapshot it matched against and drops it when done, so a
 * replaced or removed function finishes its in-flight work on the version it
 * started with (architecture.md, "The registry is a value").
 *
 * Thread-safety: registry_acquire/registry_publish may be called from any
 * thread; a snapshot is read-only once published.
 */
#ifndef RELAY_REGISTRY_H
#define RELAY_REGISTRY_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "model/function.h"
#include "model/pattern.h"

/* One served function version. */
struct fn_version {
	struct function *fn; /* owned */
	char *image;	     /* "relay-fn-name:0123456789abcdef" (owned), or NULL */
	char *fingerprint;   /* full hex (owned), or NULL */
	int refs;	     /* snapshots holding it (guarded by the registry lock) */
};

/* A rule of the snapshot in execution order: functions by name, rules in
 * file order. */
struct rule_ref {
	struct fn_version *fv;
	const struct rule *rule;
};

struct snapshot {
	struct fn_version **fns; /* sorted by name */
	size_t nfns;
	struct rule_ref *rules;
	size_t nrules;
	struct pattern_set *set;     /* pattern i = rules[i] */
	const struct pattern **pats; /* the set borrows this array */
	size_t nkeyed;		     /* functions with key_concurrency (keyorder.h) */
	int refs;
};

struct registry;

struct registry *registry_new(void);
/* Frees the registry and its current snapshot (no references may remain). */
void registry_free(struct registry *r);

/* A new reference to the current snapshot (never NULL: an empty one at
 * first). Release it with registry_release. */
struct snapshot *registry_acquire(struct registry *r);
void registry_release(struct registry *r, struct snapshot *s);

/*
 * Builds and publishes a snapshot of fvs[0..n) (any order; sorted here).
 * Takes ownership of the array; each fn_version may also appear in the
 * previous snapshot (shared, reference-counted) or be new (refs 0).
 */
void registry_publish(struct registry *r, struct fn_version **fvs, size_t n);

/* A new fn_version taking ownership of fn, image and fingerprint. */
struct fn_version *registry_fn_version_new(struct function *fn, char *image, char *fingerprint);

/* Looks up a function by name in a snapshot (NULL when absent). */
struct fn_version *registry_snapshot_find(const struct snapshot *s, const char *name);

/* Calls fn for every image referenced by any live snapshot (current or held
 * by in-flight work), under the registry lock: image GC uses it to know what
 * is still in use. */
void registry_images_in_use(struct registry *r, void (*fn)(const char *image, void *ctx),
			    void *ctx);

#endif
