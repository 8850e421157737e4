/*
 * Git sync's internals, shared by its parts: only src/git/gitsync*.c
 * include it (everyone else includes gitsync.h, the interface).
 *
 *   gitsync.c           one sync from start to end, under the sync lock;
 *                       removing the source
 *   gitsync_source.c    the persisted source: URL, ref and path checks,
 *                       git/ and source.json, what a pushed ref matches
 *   gitsync_fetch.c     libgit2 and the fetch: the bounded network stream
 *                       and its watchdog, SSH credentials and the host key
 *                       check, the checkout's remote, ref resolution
 *   gitsync_checkout.c  the checkout and the functions directory: trees on
 *                       disk, the bounded copy of every function and the
 *                       swap into place
 */
#ifndef RELAY_GITSYNC_INTERNAL_H
#define RELAY_GITSYNC_INTERNAL_H

#include <git2.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "git/gitsync.h"

/* ---- gitsync_source.c ---- */

/* s as it may appear in a message (it may be anything a user typed). */
char *gitsync_shown(const char *s);
/* s is min to max hex digits, either case, and nothing else. */
bool gitsync_is_hex(const char *s, size_t min, size_t max);
/* refs/heads/NAME or refs/tags/NAME: the name part, else NULL. */
const char *gitsync_explicit_name(const char *ref);
/* <data_dir>/<sub>; "dir" and "dir/" give the same. malloc'd. */
char *gitsync_data_path(const char *data_dir, const char *sub);
/* <data_dir>/git, malloc'd. */
char *gitsync_dir_path(const char *data_dir);
/* Opens and checks git/ into *fd (0700, ours, not a symlink). With create,
 * git/ (and missing parents) are made 0700; without, a missing git/ is
 * -ENOENT (no message). */
int gitsync_open_dir(const char *data_dir, bool create, int *fd, char **err);

/* ---- gitsync_fetch.c ---- */

/* gitsync_cancel_all's flag: Relay is shutting down (see "network bounds"
 * in gitsync_fetch.c). */
extern atomic_bool gitsync_cancelled;

/* libgit2, initialized once per process (idempotent, thread-safe): no
 * global, XDG or system configuration, and every connection through
 * Relay's bounded stream. */
void gitsync_libgit2_init(void);
/* libgit2's last error message, never NULL. */
const char *gitsync_libgit2_error(void);

/* Who a fetch talks to and how: the deploy key (key_path), the known_hosts
 * of ssh_dir for the host key at port, and where a first contact's
 * "Trusted new host" goes (notice, may be NULL). */
struct gitsync_remote {
	const char *ssh_dir;
	const char *key_path;
	int port;
	void (*notice)(void *arg, const char *msg);
	void *notice_arg;
};

/* git/checkout (path) for url: reused when its origin is url, else made
 * anew. 0, or -1 with *err. */
int gitsync_open_checkout(const char *path, const char *url, git_repository **out, char **err);
/* Fetches url's branches (as origin's) and tags into repo over SSH, within
 * the network bounds (gitsync_set_timeouts). 0, or -1 with *err. */
int gitsync_fetch(git_repository *repo, const char *url, const struct gitsync_remote *remote,
		  char **err);
/*
 * ref to a commit (*out) by the rules in gitsync.h, never guessing
 * between kinds; *resolved is what it resolved to: "refs/heads/NAME",
 * "refs/tags/NAME" or the 40-hex id. url is for messages.
 */
int gitsync_resolve_ref(git_repository *repo, const char *url, const char *ref, git_object **out,
			char **resolved, char **err);

/* ---- gitsync_checkout.c ---- */

/* rm -rf that never follows a symbolic link; a missing path is fine. */
int gitsync_rm_tree(const char *path, char **err);
/* Checks commit out detached with a hard reset (untracked and ignored files
 * removed). 0, or -1 with *err. */
int gitsync_checkout_commit(git_repository *repo, git_object *commit, char **err);
/* checkout or checkout/<path>, resolved, a directory inside the checkout
 * (malloc'd), or NULL with *err. */
char *gitsync_source_dir(const char *checkout, const char *path, char **err);
/*
 * Makes fdir hold exactly the functions of src (see gitsync_checkout.c):
 * copy all, then swap each, then remove every other directory. Fills
 * res->functions and res->removed.
 */
int gitsync_replace_functions(const char *src, const char *fdir, struct gitsync_result *res,
			      char **err);

#endif
