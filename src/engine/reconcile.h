/*
 * The reconciler: keeps the served function registry in step with the
 * functions directory, live (docs/functions.md, "Hot reload").
 *
 * Startup (reconciler_load, on the caller's thread, before consuming):
 * every direct subdirectory is looked at once (name rule, template.yaml,
 * validation); the valid ones become the state database's function set
 * (pending), then each is fingerprinted and its image prepared (reused
 * when it exists); a failure is logged and skips only that function. Up
 * to reconcile_prepare_threads(n) images are prepared at once (the calling
 * thread and short-lived preparer threads with their own Docker
 * connections, all joined before reconciler_load returns); the results are
 * logged and recorded in name order, as one at a time would. The prepared
 * versions are published as the first snapshot.
 *
 * Live (reconciler_start: one thread, named "reconcile", that owns its
 * struct docker): inotify watches the functions directory and every real
 * directory below each function (new nested directories are added as they
 * appear). An event marks its function dirty; the function is looked at
 * once no event has arrived for RECONCILE_DEBOUNCE_NS (a burst of editor
 * saves is one look), or at the latest RECONCILE_DEBOUNCE_MAX_NS after the
 * first event of a burst. Every RECONCILE_RESCAN_NS a full pass looks at
 * every function as a backstop, and watches again whatever is not watched;
 * an inotify queue overflow (IN_Q_OVERFLOW) starts one at once. Each full
 * pass, once it has looked at every function, logs "functions directory
 * rescanned" at DEBUG with its reason (periodic, overflow, moved, retry).
 *
 * The functions directory itself:
 *   moved away, removed or    its watches are dropped; every function
 *   cannot be listed          keeps serving what is already read (nothing
 *                             is unpublished while the directory is
 *                             missing), on_readable(false) holds the
 *                             consumer's reading; its return is looked for
 *                             every second, and on_readable(true) follows
 *                             the first full pass that could read it
 *   unreadable at startup     no function is served and the previous run's
 *                             images are not collected; the same every-
 *                             second looks (reconciler_readable)
 *   back (recreated, renamed  watched again with every function's tree;
 *   into place)               a full pass reconciles it: functions it
 *                             lacks are removed, new or changed ones built
 *   replaced unseen (a        found by the next periodic pass, which
 *   symlink pointed at        watches the new directory and reconciles it
 *   another directory)
 *
 * Looking at a function:
 *   directory gone            unpublished; state row removed; its images
 *                             are removed once no snapshot or container
 *                             uses them
 *   invalid name              logged once, never served
 *   no template.yaml          "not ready": logged once; an active version
 *                             keeps serving
 *   fingerprint unchanged     nothing (not even a template parse)
 *   fingerprint = last failed nothing: a failing version is retried on the
 *                             next change; a failed image build (which may
 *                             be transient) also after a backoff of 1m,
 *                             doubling up to 30m
 *   changed                   template parsed and validated, image
 *                             prepared, then the new version is published
 *                             (swap only after the image is ready) and
 *                             older images of the function collected. A
 *                             failure keeps the previous version serving
 *                             and is recorded as a failed reconcile.
 *
 * Relay never writes into the functions directory: a function's tree is
 * read into memory once per look (fingerprint.h) and the build context is
 * made from that copy.
 *
 * Thread-safety: reconciler_new/load/start/stop/free are called from one
 * thread (main). The reconciler is the registry's only publisher. The state
 * database handle is shared with other writers (state.h serializes calls).
 */
#ifndef RELAY_RECONCILE_H
#define RELAY_RECONCILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/docker.h"
#include "engine/registry.h"
#include "engine/state.h"

#define RECONCILE_DEBOUNCE_NS (750LL * 1000000LL)
#define RECONCILE_DEBOUNCE_MAX_NS (10LL * 1000000000LL)
#define RECONCILE_RESCAN_NS (30LL * 1000000000LL)
/* How often unused old images of replaced or removed versions are looked
 * for while some snapshot or container still holds them. */
#define RECONCILE_GC_RETRY_NS (2LL * 1000000000LL)

/* At most this many image preparations at once at startup. The Docker
 * daemon itself serializes part of each build, so more buys little. */
#define RECONCILE_PREPARE_MAX 4

struct reconcile_config {
	const char *functions_dir; /* borrowed for the reconciler's life */
	struct registry *registry; /* borrowed; the reconciler is its only publisher */
	struct state *state;	   /* borrowed; NULL: run without the state database */
	/* Called by the reconciler thread each time the functions directory
	 * becomes unreadable (missing, or cannot be listed) or readable again
	 * (a full pass has looked at, and prepared, every function in it). */
	void (*on_readable)(void *ctx, bool readable);
	/* Called (when set) after each publish of the registry, from whichever
	 * thread published (the loader, then the reconciler thread): pools of
	 * containers made for a version (warm.h) are poked to retire stale
	 * ones at once. */
	void (*on_published)(void *ctx);
	void *ctx;
	/* Zero fields fall back to the defaults above (tests may shorten them). */
	int64_t debounce_ns;
	int64_t rescan_ns;
};

struct reconciler;

/* A new reconciler; sets up the inotify watch of the functions directory
 * (a failure is logged: the periodic pass still works). Never NULL. */
struct reconciler *reconciler_new(const struct reconcile_config *cfg);

/*
 * The startup pass described above, on the calling thread with its docker
 * handle d (borrowed). Publishes the first snapshot and returns the number
 * of functions it serves. Call once, before reconciler_start.
 */
size_t reconciler_load(struct reconciler *rc, struct docker *d);

/* Whether the last look could read the functions directory (false after a
 * reconciler_load that could not: then nothing should be read from the
 * stream until on_readable says true). Thread-safe. */
bool reconciler_readable(struct reconciler *rc);

/*
 * Starts the reconciler thread, which takes ownership of d (closed when the
 * thread ends). Its first job is removing the unused relay-fn-<name>:*
 * images of every function it knows (functions directory and previous state
 * database). Returns 0, or -1 with a malloc'd *err (d is then closed).
 */
int reconciler_start(struct reconciler *rc, struct docker *d, char **err);

/*
 * Asks the thread to stop and waits up to timeout_ms for it (an image build
 * in progress is not interrupted). Returns 0 once the thread is gone (or was
 * never started), -1 when it is still busy: the reconciler must then not be
 * freed (the process is about to exit anyway).
 */
int reconciler_stop(struct reconciler *rc, int64_t timeout_ms);

/* How many images the startup pass prepares at once for n functions: the
 * online cores (at least 2), at most RECONCILE_PREPARE_MAX and n. */
size_t reconcile_prepare_threads(size_t n);

/* Frees the reconciler (stopped, or never started). NULL is fine. */
void reconciler_free(struct reconciler *rc);

#endif
