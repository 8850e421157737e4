/*
 * Function images: build contexts, dependency images, reuse and hygiene.
 *
 * Names. A function image is "relay-fn-<function>:<first 16 hex digits of
 * the fingerprint>" (fingerprint.h). A dependency image is
 * "relay-dep-<runtime>-<16 hex>" (tag latest), keyed by SHA-256 over the
 * runtime name, the daemon's architecture, the base image tag, the
 * dependency rule (manifest and command) and the names and contents of the
 * manifest files: functions with identical dependency sets share it, and it
 * is never removed by Relay (other functions may build on it).
 *
 * Builds. Each build context is an in-memory tar (libarchive, owner 0:0,
 * mtime 0, mode 0644 or 0755) posted to POST /build; nothing is written to
 * the functions directory or anywhere else on disk. The function context is
 *
 *   Dockerfile         generated (image_dockerfile_fn)
 *   bootstrap/<file>   the runtime's embedded bootstrap
 *   src/...            the function's files except template.yaml, plus the
 *                      runtime's generated files (Node: package.json with
 *                      {"type":"module"} when the function has none)
 *
 * so neither env values nor secret references nor the template reach an
 * image. The generated Dockerfile creates the uid 10001 user by appending to
 * /etc/passwd and /etc/group (works on Debian and Alpine alike), sets the
 * runtime's image environment (Python: PYTHONDONTWRITEBYTECODE=1), copies
 * the bootstrap to /opt/relay, sets USER 10001:10001 and the bootstrap as
 * ENTRYPOINT, copies the source to /app (owned by root) and ends with the
 * relay.* labels. The steps before the source copy are identical for every
 * function of a runtime, so the daemon's build cache serves them; only the
 * copy and the labels are new steps for each function. The daemon's JSON progress stream is parsed: its
 * output lines are logged at DEBUG; an "error" entry fails the build with
 * the daemon's text even though the HTTP status is 200.
 *
 * Progress. The classic builder announces each Dockerfile step once, as a
 * "Step 3/5 : RUN pip install ..." stream line. Each step is reported once
 * (a step number not above the last one reported is ignored) to the
 * process's progress hook (image_set_progress); the default hook logs it at
 * INFO as "step 3/5: RUN pip install ..." with the function, the image being
 * built and the time elapsed since that build was posted, so a two-minute
 * dependency install is not a silent terminal. The instruction is cut to
 * IMAGE_STEP_TEXT_MAX bytes (at a UTF-8 boundary, "..." appended).
 *
 * Hygiene. image_hold/image_release count in-flight users of an image
 * reference (the runner holds its image for the length of an invocation).
 * image_gc removes relay-fn-<function>:* tags that are neither held nor in
 * the caller's keep list (the active version of every function and the
 * versions still referenced by live registry snapshots), never with force:
 * an image a container still uses is skipped. Nothing else is ever removed:
 * no relay-dep-* image, no other repository.
 *
 * Thread-safety: every function takes a struct docker that the calling
 * thread owns (docker.h); the hold table is process-wide and locked, so
 * image_hold/image_release/image_held are safe from any thread.
 */
#ifndef RELAY_IMAGE_H
#define RELAY_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/docker.h"
#include "model/fingerprint.h"
#include "model/runtime.h"

/* Build contexts are bounded: the function's own files are bounded by
 * FN_TREE_MAX_BYTES / FN_TREE_MAX_FILES; the tar adds headers. */
#define IMAGE_CONTEXT_MAX (FN_TREE_MAX_BYTES + 32u * 1024 * 1024)
/* One build (dependency install included) may take this long. */
#define IMAGE_BUILD_TIMEOUT_MS (15L * 60 * 1000)

#define IMAGE_FN_PREFIX "relay-fn-"
#define IMAGE_DEP_PREFIX "relay-dep-"
/* Uid/gid every execution runs as (baked into each function image). */
#define IMAGE_USER "10001:10001"

/* The outcome of image_prepare. Strings are owned; image_result_free. */
struct image_result {
	char *ref;				   /* "relay-fn-x:0123456789abcdef" */
	char fingerprint[FINGERPRINT_HEX_LEN + 1]; /* all 64 hex digits */
	char *dep_ref;				   /* dependency image, or NULL */
	bool built;				   /* false: existing image reused */
	bool dep_built;				   /* the dependency image was built now */
	double seconds;				   /* wall time of the whole call */
};
void image_result_free(struct image_result *r);

/*
 * Makes sure the image for function `name` (runtime rt, source tree t)
 * exists: reuses relay-fn-<name>:<fp16> when the daemon has it (one GET
 * /images/{ref}/json, no build), else builds the dependency image when the
 * runtime's rules call for one and it is missing, then the function image.
 * When that check is refused (HTTP 403: a Docker socket proxy without
 * IMAGES=1) the image counts as missing and is built; the first refusal in
 * the process is logged as a WARN.
 * When a build ran, metrics_build(name, ok, seconds) is recorded.
 * Returns 0 and fills *out, or -1 with a malloc'd message in *err naming
 * the function and carrying the daemon's own error text. A failure leaves
 * every existing image as it was (the previous version keeps serving).
 */
int image_prepare_tree(struct docker *d, const char *name, const struct runtime *rt,
		       const struct fn_tree *t, struct image_result *out, char **err);
/* Same, loading the tree from dir first. */
int image_prepare(struct docker *d, const char *name, const char *dir, const struct runtime *rt,
		  struct image_result *out, char **err);

/* 1 when the daemon has the image, 0 when not, -1 with *err on error. */
int image_exists(struct docker *d, const char *ref, char **err);

/* ---- hygiene -------------------------------------------------------- */

/* In-flight use of an image reference; counted, thread-safe. */
void image_hold(const char *ref);
void image_release(const char *ref);
bool image_held(const char *ref);

/*
 * Removes relay-fn-<function>:* tags (every relay-fn-* repository when
 * function is NULL) except those in keep[0..nkeep) and those held. An image
 * a container still uses (HTTP 409) or one already gone (404) is skipped.
 * *removed (may be NULL) counts the tags removed. Returns 0, or -1 with *err
 * when listing failed or some removal failed for another reason (the others
 * are still attempted), or IMAGE_GC_DENIED with *err when the listing or a
 * removal was refused (HTTP 403: a Docker socket proxy without IMAGES=1);
 * nothing more is tried then.
 */
#define IMAGE_GC_DENIED (-2)
int image_gc(struct docker *d, const char *function, const char *const *keep, size_t nkeep,
	     size_t *removed, char **err);

/* ---- exposed for tests (pure, no I/O) -------------------------------- */

/* The dependency rule that applies to t, or NULL. */
const struct runtime_dep_rule *image_dep_rule(const struct runtime *rt, const struct fn_tree *t);
/* "relay-dep-<runtime>-<16 hex>" for rule over t on arch. Malloc'd. */
char *image_dep_ref(const struct runtime *rt, const struct runtime_dep_rule *rule,
		    const struct fn_tree *t, const char *arch);
/* "relay-fn-<name>:<first 16 of fingerprint>". Malloc'd. */
char *image_fn_ref(const char *name, const char *fingerprint);

/* Generated Dockerfiles (malloc'd text). from is the dependency image or
 * the runtime's base image. */
char *image_dockerfile_dep(const struct runtime *rt, const struct runtime_dep_rule *rule,
			   const struct fn_tree *t);
char *image_dockerfile_fn(const struct runtime *rt, const char *from, const char *name,
			  const char *fingerprint);

/* The in-memory build contexts (tar bytes in *out, buf capped at
 * IMAGE_CONTEXT_MAX). 0, or -1 with *err. */
struct buf;
int image_context_fn(const struct runtime *rt, const struct fn_tree *t, const char *dockerfile,
		     struct buf *out, char **err);
int image_context_dep(const struct runtime_dep_rule *rule, const struct fn_tree *t,
		      const char *dockerfile, struct buf *out, char **err);

/* ---- build progress ------------------------------------------------- */

#define IMAGE_STEP_TEXT_MAX 120
/* One announced build step; borrowed for the duration of the hook call. */
struct image_step {
	const char *function;
	const char *image;	 /* the reference being built; "" when unknown */
	int step, total;	 /* "Step 3/5": 3 and 5 */
	const char *instruction; /* "RUN pip install ...", cut */
	int64_t elapsed_ns;	 /* since the build was posted */
};
typedef void (*image_progress_fn)(void *ctx, const struct image_step *s);
/* Replaces the default hook (one INFO line per step, image_step_log) for
 * the whole process; fn NULL restores it. Call before any build starts
 * (not synchronised with running builds). The hook runs on the building
 * thread. */
void image_set_progress(image_progress_fn fn, void *ctx);
/* The default hook: log_info "step 3/5: RUN ..." with function, image and
 * elapsed attributes. */
void image_step_log(void *ctx, const struct image_step *s);
/* Parses a classic builder line "Step 3/5 : RUN x" into *step, *total and
 * the instruction's offset in line; false when line is not one. Pure. */
bool image_step_parse(const char *line, size_t len, int *step, int *total, size_t *text_off);

/* Incremental parser of POST /build's JSON stream (one object per line). */
struct image_build_stream {
	const char *function; /* for DEBUG lines; borrowed */
	const char *image;    /* the reference being built; borrowed, may be NULL */
	int64_t started_ns;   /* monotonic, at init */
	int last_step;	      /* highest step reported */
	char *line;	      /* partial line, bounded */
	size_t len, cap;
	char *error;	   /* first "error" seen (malloc'd) */
	char *last_output; /* last non-empty "stream" line (malloc'd) */
	char *image_id;	   /* aux.ID when reported */
};
void image_build_stream_init(struct image_build_stream *s, const char *function);
/* Feeds bytes; always returns 0 (malformed lines are ignored). */
int image_build_stream_feed(struct image_build_stream *s, const char *data, size_t len);
/* Processes a last line without its newline. */
void image_build_stream_finish(struct image_build_stream *s);
void image_build_stream_free(struct image_build_stream *s);

#endif
