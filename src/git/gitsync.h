/*
 * Git sync (docs/commands.md, "relay git"): the persisted source, and one sync that
 * materializes the configured repository, ref and path into the functions
 * directory.
 *
 * Layout under the data directory: git/ (0700), git/source.json (0600,
 * written atomically), git/checkout (the managed clone), git/.lock (flock,
 * so two syncs - CLI and webhook, or two CLIs - never interleave).
 *
 * Every name here starts with gitsync_: git_* is libgit2's namespace (it
 * exports a git_checkout_head, for one, which would clash at compile and
 * link time). The implementation: src/git/gitsync*.c (gitsync_internal.h
 * says what lives where).
 */
#ifndef RELAY_GITSYNC_H
#define RELAY_GITSYNC_H

#include <errno.h> /* ENOENT: nothing configured */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The persisted source (git/source.json). */
struct gitsync_source {
	char *repository;     /* SSH URL as given */
	char *ref;	      /* branch, tag or commit; default "main" */
	char *path;	      /* monorepo subdirectory; NULL = repository root */
	char *webhook_secret; /* secret reference name or NULL */
	/* Written by a successful sync; NULL before the first. */
	char *last_sync;   /* RFC 3339 UTC, e.g. 2026-11-30T04:05:06Z */
	char *last_commit; /* 40 hex */
	/* What the last sync resolved ref to: "refs/heads/NAME", "refs/tags/
	 * NAME" or a 40-hex commit id; NULL before the first sync of this ref
	 * (relay git set drops it when the ref changes). */
	char *last_ref;
};

/*
 * SSH URL check and split: scp-like "user@host:path" (user optional) or
 * "ssh://[user@]host[:port]/path". Anything else (https://, http://,
 * git://, file://, a local path, empty parts, whitespace or control
 * characters, > 1024 bytes) is rejected with a message saying only SSH
 * URLs are accepted. Outputs may be NULL; user defaults to "git" when
 * absent, port to 22. Returns 0 or -1 with *err.
 */
int gitsync_url_parse(const char *url, char **user, char **host, int *port, char **path,
		      char **err);

/* "host/path" with the host lowercased, leading '/' and a trailing ".git"
 * or '/' removed: the identity used to compare the configured repository
 * with a webhook payload's ssh_url / clone_url / git_url (these forms also
 * accepted here: https://host/path, git://host/path). NULL when unparseable. */
char *gitsync_repo_identity(const char *url);

/* Checks a --path value: relative, no "..", no empty or "." segments
 * except a lone ".", at most 1024 bytes. Returns 0 or -1 with *err. */
int gitsync_path_check(const char *path, char **err);

/*
 * The configured ref, and what it may resolve to (a branch, tag or
 * commit). Resolution never guesses between kinds, so that
 * whoever can push a branch cannot shadow a pinned tag or commit:
 *
 *   40 hex digits      always that commit, never a branch or tag so named;
 *   refs/heads/NAME    the branch NAME only;
 *   refs/tags/NAME     the tag NAME only;
 *   NAME               the branch or the tag NAME, whichever exists; when
 *                      both do the sync is refused as ambiguous, naming
 *                      both full refs; when neither does and NAME is 4 to
 *                      39 hex digits, the commit it abbreviates (refused as
 *                      ambiguous as well when a branch or tag is so named).
 *
 * gitsync_ref_check: a --ref value as above (at most 255 bytes, no
 * whitespace or control characters, a valid git ref name; "refs/" only as
 * refs/heads/ or refs/tags/). 0, or -1 with *err (err may be NULL).
 */
int gitsync_ref_check(const char *ref, char **err);

/* "branch", "tag" or "commit": the kind of a resolved ref (last_ref);
 * NULL for anything else. */
const char *gitsync_ref_kind(const char *resolved);

/*
 * For the webhook: true only when pushed_ref, the full ref of a push
 * ("refs/heads/main", "refs/tags/v1"), is exactly the ref that ref, the
 * configured --ref, resolves to. A commit id never matches (a push cannot
 * move it); refs/heads/X and refs/tags/X match only themselves; a bare
 * NAME matches what the last sync of that same ref resolved it to, read
 * from <data_dir>/git/source.json (last_ref), and before any such sync
 * (or with data_dir NULL) refs/heads/NAME or refs/tags/NAME: the sync it
 * triggers then resolves the name, or refuses it as ambiguous. Reads at
 * most source.json's 64 KiB bound; thread-safe.
 */
bool gitsync_ref_matches(const char *data_dir, const char *ref, const char *pushed_ref);

/*
 * Bounds on a sync's network phases (the cost model for a git remote):
 * the TCP connect to the server, at most connect_ms (default 30 s); then
 * the SSH handshake, authentication, ref negotiation and the pack
 * transfer, each cut when no byte has come from the server for stall_ms
 * (default 60 s), with a message naming the phase; and the whole fetch,
 * connect included, within GITSYNC_FETCH_TIMEOUT_MS however the server
 * paces its bytes (a byte every 59 s is never a stall). What the server
 * sends is bounded at 1 GiB (GITSYNC_PACK_MAX_BYTES). Process-wide, for
 * every later sync; 0 restores a default. Meant for tests, which cannot
 * wait a minute.
 */
#define GITSYNC_CONNECT_TIMEOUT_MS 30000
#define GITSYNC_STALL_TIMEOUT_MS 60000
/* The most a fetch may download (the pack as received): the functions it
 * can bring are bounded at 512 MiB (GITSYNC_COPY_MAX_BYTES), history
 * included twice that. */
#define GITSYNC_PACK_MAX_BYTES (1024ULL * 1024 * 1024)
/* Bounds on the checkout's functions directory as copied into place. */
#define GITSYNC_COPY_MAX_FILES 20000
#define GITSYNC_COPY_MAX_BYTES (512ULL * 1024 * 1024)
#define GITSYNC_COPY_MAX_DEPTH 64
/* 30 min: a 1 GiB pack at 600 KB/s. */
#define GITSYNC_FETCH_TIMEOUT_MS (30 * 60 * 1000)
void gitsync_set_timeouts(int connect_ms, int stall_ms);
void gitsync_set_fetch_timeout(int fetch_ms);

/*
 * Shutdown (relay start, on its first signal): with on, every gitsync_run
 * running in this process fails promptly with "interrupted: Relay is
 * shutting down" (its connection is cut; the functions directory is not
 * replaced) and every later one fails at once, until called with false.
 * Thread-safe; not for a signal handler.
 */
void gitsync_cancel_all(bool on);

/* Loads git/source.json (at most 64 KiB; every field validated as on save;
 * an absent ref is "main"). 0 loaded; -ENOENT nothing configured (*err
 * not set); -1 unreadable or corrupt (*err names the file and the
 * problem), also when the file or git/ is a symbolic link, not owned by
 * the effective uid or has group or other permission bits (the file is
 * then never read). */
int gitsync_source_load(const char *data_dir, struct gitsync_source *out, char **err);
/* Validates src (URL, ref, path, secret name, last_* formats) and writes it
 * atomically with mode 0600 (git/ and missing parents created 0700). */
int gitsync_source_save(const char *data_dir, const struct gitsync_source *src, char **err);
/* Deletes the checkout, then source.json (under the sync lock; symbolic
 * links in the checkout are removed, never followed). 0 removed; -ENOENT
 * nothing configured (*err not set); -1 with *err: corrupt config or I/O
 * error (nothing deleted when corrupt). The SSH key and the functions directory are not touched. */
int gitsync_source_remove(const char *data_dir, char **err);
void gitsync_source_free(struct gitsync_source *s);

/* HEAD commit of the checkout (40 hex, malloc'd) or NULL when there is no
 * checkout. */
char *gitsync_checkout_head(const char *data_dir);

struct gitsync_result {
	char commit[41];
	size_t functions; /* function directories now in the functions dir */
	size_t removed;	  /* other directories removed from the functions dir
			     (leftovers of an interrupted sync not counted) */
};

/*
 * One sync: source.json must exist (else -ENOENT), the deploy key must exist
 * ("no deploy key: run relay git keygen ..." otherwise). Holds an exclusive
 * flock on git/.lock throughout (waiting for it while another sync holds
 * it, unless gitsync_cancel_all), so syncs never interleave.
 * Clones (or, when the checkout's remote is another repository, deletes and
 * re-clones) into git/checkout over SSH with the deploy key only (never
 * ssh-agent), verifying the host key against ssh/known_hosts (TOFU; a first
 * contact calls notice with "Trusted new host <host> (fingerprint
 * SHA256:...)", <host> being "[host]:port" for a port other than 22; a
 * changed key fails the sync with sshkey_known_hosts_verify's man-in-the-middle
 * message); fetches (network phases bounded: gitsync_set_timeouts;
 * interrupted by gitsync_cancel_all), resolves ref (see gitsync_ref_check;
 * "ref '<ref>' not found in <repository>" when nothing matches), checks it
 * out detached with a hard reset (untracked and ignored files removed);
 * then, unless gitsync_cancel_all was called meanwhile, replaces the functions directory (created 0755 if
 * missing): every direct subdirectory of the source path (not a symbolic
 * link, not hidden) holding a regular template.yaml is copied in (regular
 * files 0755/0644 by their exec bit, directories 0755, symbolic links as
 * links, .git skipped, nothing followed), each through a temporary copy
 * swapped in with one rename; every other directory in the functions
 * directory is removed (regular files and symbolic links there are kept).
 * All copies are made before anything is swapped, so a repository over the
 * bounds (20000 files, 512 MiB, 64 levels of directories) fails with the
 * functions directory untouched. Records last_sync, last_commit and
 * last_ref in source.json. notice (may be NULL) is called on the calling
 * thread.
 * Returns 0, -ENOENT (nothing configured; *err not set), -1 with *err.
 * Thread-safe; any
 * number of processes may call it on the same data directory.
 */
int gitsync_run(const char *data_dir, const char *functions_dir,
		void (*notice)(void *arg, const char *msg), void *notice_arg,
		struct gitsync_result *res, char **err);

#endif
