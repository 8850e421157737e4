/*
 * Git sync (see gitsync.h and docs/commands.md, "relay git"): one sync from start to
 * end, the sync lock it holds, and the removal of the source under that
 * lock. The steps live in the other parts (gitsync_internal.h lists them).
 *
 * One sync, under an exclusive flock on git/.lock:
 *
 *   1. source.json is (re)loaded under the lock, the deploy key checked
 *      (gitsync_source.c);
 *   2. git/checkout is opened, or deleted and re-created when its "origin"
 *      remote is another repository (or it is not a usable repository);
 *   3. fetch over SSH with libgit2, the deploy key the only credential and
 *      the host key checked against Relay's known_hosts (TOFU), within the
 *      network bounds (2 and 3: gitsync_fetch.c);
 *   4. ref is resolved (origin branch, tag, commit id: gitsync_fetch.c) and
 *      checked out detached with a forced checkout that also drops
 *      untracked and ignored files: a hard reset, never a merge;
 *   5. every function of the source directory is copied next to its
 *      destination, all bounds checked before anything is swapped in, then
 *      every other directory is removed (4 and 5: gitsync_checkout.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <git2.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "git/gitsync.h"
#include "git/gitsync_internal.h"
#include "base/rfc3339.h"
#include "git/sshkey.h"
#include "base/util.h"

/* A wait for the sync lock looks for gitsync_cancel_all this often. */
#define LOCK_POLL_MS 50

/* Takes the exclusive sync lock; returns the descriptor. Waits while
 * another sync holds it (that one ends within its own bounds), but not
 * past gitsync_cancel_all. */
static int lock_git_dir(int dfd, const char *data_dir, char **err)
{
	int fd = openat(dfd, ".lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		char *dir = gitsync_dir_path(data_dir);
		sys_error(err, "cannot open the lock file in", dir, errno);
		free(dir);
		return -1;
	}
	while (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		if (errno == EWOULDBLOCK && !atomic_load(&gitsync_cancelled)) {
			struct timespec ts = {0, LOCK_POLL_MS * 1000000L};
			nanosleep(&ts, NULL);
			continue;
		}
		if (errno == EINTR)
			continue;
		if (errno == EWOULDBLOCK) {
			*err = xstrdup("interrupted: Relay is shutting down");
		} else {
			char *dir = gitsync_dir_path(data_dir);
			sys_error(err, "cannot lock", dir, errno);
			free(dir);
		}
		close(fd);
		return -1;
	}
	return fd;
}

int gitsync_source_remove(const char *data_dir, char **err)
{
	struct gitsync_source src;
	int rc = gitsync_source_load(data_dir, &src, err);
	if (rc < 0)
		return rc;
	gitsync_source_free(&src);
	char *dir = gitsync_dir_path(data_dir);
	char *checkout = xasprintf("%s/checkout", dir);
	int dfd = -1, lfd = -1;
	if ((rc = gitsync_open_dir(data_dir, false, &dfd, err)) < 0)
		goto out;
	rc = -1;
	if ((lfd = lock_git_dir(dfd, data_dir, err)) < 0)
		goto out;
	/* The checkout first: a failure part-way leaves the config, and the
	 * next sync re-clones a checkout it cannot open. */
	if (gitsync_rm_tree(checkout, err) < 0)
		goto out;
	if (unlinkat(dfd, "source.json", 0) < 0 && errno != ENOENT) {
		sys_error(err, "cannot remove", dir, errno);
		goto out;
	}
	fsync(dfd);
	rc = 0;
out:
	if (lfd >= 0)
		close(lfd);
	if (dfd >= 0)
		close(dfd);
	free(checkout);
	free(dir);
	return rc;
}

/* The deploy key must exist and be readable before any network access. */
static int check_deploy_key(const char *ssh_dir, const char *key, char **err)
{
	char *pub = NULL, *fp = NULL, *kerr = NULL;
	int k = sshkey_public(ssh_dir, &pub, &fp, &kerr);
	free(pub);
	free(fp);
	if (k == -ENOENT) {
		*err = xasprintf("no deploy key: run relay git keygen (%s does not exist)", key);
		free(kerr);
	} else if (k < 0) {
		*err = kerr;
	}
	return k < 0 ? -1 : 0;
}

/* Writes the sync's outcome (now, commit, what ref resolved to: taken from
 * *resolved) into source.json. */
static int record_sync(const char *data_dir, struct gitsync_source *src, const char *commit,
		       char **resolved, char **err)
{
	char now[RFC3339_STR_MAX];
	free(src->last_sync);
	free(src->last_commit);
	src->last_sync = xstrdup(rfc3339_format_utc(now_wall_ns(), now));
	src->last_commit = xstrdup(commit);
	free(src->last_ref);
	src->last_ref = *resolved;
	*resolved = NULL;
	return gitsync_source_save(data_dir, src, err);
}

int gitsync_run(const char *data_dir, const char *functions_dir,
		void (*notice)(void *arg, const char *msg), void *notice_arg,
		struct gitsync_result *res, char **err)
{
	struct gitsync_source src = {0};
	char *dir = gitsync_dir_path(data_dir);
	char *checkout = xasprintf("%s/checkout", dir);
	char *ssh_dir = gitsync_data_path(data_dir, "ssh");
	char *key = NULL, *srcdir = NULL, *resolved = NULL;
	struct gitsync_remote remote = {
		.ssh_dir = ssh_dir, .notice = notice, .notice_arg = notice_arg};
	git_repository *repo = NULL;
	git_object *commit = NULL;
	int dfd = -1, lfd = -1;
	memset(res, 0, sizeof *res);
	/* A cheap answer for "nothing configured" before creating a lock. */
	int rc = gitsync_source_load(data_dir, &src, err);
	if (rc < 0)
		goto out;
	gitsync_source_free(&src);
	/* git/ gone meanwhile: nothing configured any more. */
	if ((rc = gitsync_open_dir(data_dir, false, &dfd, err)) < 0)
		goto out;
	rc = -1;
	if ((lfd = lock_git_dir(dfd, data_dir, err)) < 0)
		goto out;
	/* Again under the lock: a `git set` may have run meanwhile. */
	if ((rc = gitsync_source_load(data_dir, &src, err)) < 0)
		goto out;
	rc = -1;
	if (gitsync_url_parse(src.repository, NULL, NULL, &remote.port, NULL, err) < 0)
		goto out;
	key = sshkey_path(ssh_dir);
	remote.key_path = key;
	if (check_deploy_key(ssh_dir, key, err) < 0)
		goto out;
	gitsync_libgit2_init();
	if (gitsync_open_checkout(checkout, src.repository, &repo, err) < 0 ||
	    gitsync_fetch(repo, src.repository, &remote, err) < 0 ||
	    gitsync_resolve_ref(repo, src.repository, src.ref, &commit, &resolved, err) < 0 ||
	    gitsync_checkout_commit(repo, commit, err) < 0 ||
	    !(srcdir = gitsync_source_dir(checkout, src.path, err)))
		goto out;
	/* Shutting down: the functions directory stays as it is. */
	if (atomic_load(&gitsync_cancelled)) {
		*err = xstrdup("interrupted: Relay is shutting down");
		goto out;
	}
	if (gitsync_replace_functions(srcdir, functions_dir, res, err) < 0)
		goto out;
	git_oid_tostr(res->commit, sizeof res->commit, git_object_id(commit));
	if (record_sync(data_dir, &src, res->commit, &resolved, err) < 0)
		goto out;
	rc = 0;
out:
	git_object_free(commit);
	git_repository_free(repo);
	if (lfd >= 0)
		close(lfd);
	if (dfd >= 0)
		close(dfd);
	gitsync_source_free(&src);
	free(resolved);
	free(srcdir);
	free(key);
	free(ssh_dir);
	free(checkout);
	free(dir);
	return rc;
}
