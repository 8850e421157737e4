/*
 * Git sync's checkout and the functions directory (see gitsync.h): the
 * commit checked out in git/checkout, the directory of it that holds the
 * functions (--path), and the functions directory made to hold exactly
 * those functions.
 *
 * Every function of the source directory is first copied into a temporary
 * directory next to its destination (phase 1, all bounds checked here, so
 * a repository over the limits leaves the functions directory exactly as
 * it was), then swapped in with one renameat2(RENAME_EXCHANGE) each (or two
 * renames where the file system lacks it), then every other directory is
 * removed.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "git/gitsync.h"
#include "git/gitsync_internal.h"
#include "model/function.h"
#include "base/util.h"

#define SYNC_PREFIX FUNCTION_STAGING_PREFIX

/* ---- small helpers ---- */

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void strv_free(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

/* ---- trees on disk ---- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	return (flag == FTW_DP || flag == FTW_DNR ? rmdir(path) : unlink(path)) < 0 &&
			       errno != ENOENT
		       ? errno
		       : 0;
}

int gitsync_rm_tree(const char *path, char **err)
{
	struct stat st;
	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : sys_error(err, "cannot stat", path, errno);
	if (!S_ISDIR(st.st_mode))
		return unlink(path) < 0 && errno != ENOENT
			       ? sys_error(err, "cannot remove", path, errno)
			       : 0;
	int e = nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
	if (e != 0)
		return sys_error(err, "cannot remove", path, e > 0 ? e : errno);
	return 0;
}

/* ---- the checkout ---- */

int gitsync_checkout_commit(git_repository *repo, git_object *commit, char **err)
{
	git_checkout_options co;
	git_checkout_options_init(&co, GIT_CHECKOUT_OPTIONS_VERSION);
	co.checkout_strategy =
		GIT_CHECKOUT_FORCE | GIT_CHECKOUT_REMOVE_UNTRACKED | GIT_CHECKOUT_REMOVE_IGNORED;
	if (git_checkout_tree(repo, commit, &co) < 0 ||
	    git_repository_set_head_detached(repo, git_object_id(commit)) < 0) {
		*err = xasprintf("cannot check out %s: %s", git_oid_tostr_s(git_object_id(commit)),
				 gitsync_libgit2_error());
		return -1;
	}
	return 0;
}

char *gitsync_source_dir(const char *checkout, const char *path, char **err)
{
	char *root = realpath(checkout, NULL), *want = NULL, *real = NULL;
	if (!root) {
		sys_error(err, "cannot resolve", checkout, errno);
		return NULL;
	}
	want = path ? xasprintf("%s/%s", root, path) : xstrdup(root);
	real = realpath(want, NULL);
	struct stat st;
	size_t n = strlen(root);
	if (!real && errno != ENOENT) {
		sys_error(err, "cannot resolve", want, errno);
	} else if (!real) {
		char *s = gitsync_shown(path ? path : ".");
		*err = xasprintf("path '%s' does not exist in the repository", s);
		free(s);
	} else if (strncmp(real, root, n) != 0 || (real[n] != '/' && real[n] != '\0')) {
		char *s = gitsync_shown(path);
		*err = xasprintf("path '%s' leads outside the repository (symbolic link)", s);
		free(s);
		free(real);
		real = NULL;
	} else if (stat(real, &st) < 0 || !S_ISDIR(st.st_mode)) {
		char *s = gitsync_shown(path ? path : ".");
		*err = xasprintf("path '%s' is not a directory in the repository", s);
		free(s);
		free(real);
		real = NULL;
	}
	free(want);
	free(root);
	return real;
}

char *gitsync_checkout_head(const char *data_dir)
{
	gitsync_libgit2_init();
	char *dir = gitsync_dir_path(data_dir);
	char *path = xasprintf("%s/checkout", dir);
	git_repository *repo = NULL;
	git_oid oid;
	char *hex = NULL;
	struct stat st;
	if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode) &&
	    git_repository_open_ext(&repo, path, GIT_REPOSITORY_OPEN_NO_SEARCH, NULL) == 0 &&
	    git_reference_name_to_id(&oid, repo, "HEAD") == 0)
		hex = xstrdup(git_oid_tostr_s(&oid));
	git_repository_free(repo);
	free(path);
	free(dir);
	return hex;
}

/* ---- the functions directory ---- */

struct copy_ctx {
	const char *fn; /* function name, for messages */
	size_t files;
	unsigned long long bytes;
	char *err;
};

static int copy_fail(struct copy_ctx *c, const char *rel, const char *what, int e)
{
	char tmp[128];
	if (!c->err)
		c->err = e ? xasprintf("function %s: %s: %s: %s", c->fn, rel, what,
				       strerror_r(e, tmp, sizeof tmp))
			   : xasprintf("function %s: %s: %s", c->fn, rel, what);
	return -1;
}

static int copy_file(struct copy_ctx *c, int sfd, int dfd, const char *name, const char *rel,
		     const struct stat *st)
{
	mode_t mode = st->st_mode & 0111 ? 0755 : 0644;
	char buf[65536];
	int rc = -1, out = -1;
	int in = openat(sfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (in < 0)
		return copy_fail(c, rel, "cannot open", errno);
	out = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
	if (out < 0) {
		copy_fail(c, rel, "cannot create the copy", errno);
		goto out;
	}
	for (;;) {
		ssize_t n = read(in, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			copy_fail(c, rel, "cannot read", errno);
			goto out;
		}
		if (n == 0)
			break;
		c->bytes += (unsigned long long)n;
		if (c->bytes > GITSYNC_COPY_MAX_BYTES) {
			copy_fail(c, rel, "the functions exceed 512 MiB in total", 0);
			goto out;
		}
		if (write_all(out, buf, (size_t)n) < 0) {
			copy_fail(c, rel, "cannot write the copy", errno);
			goto out;
		}
	}
	if (fchmod(out, mode) < 0) {
		copy_fail(c, rel, "cannot set the mode of the copy", errno);
		goto out;
	}
	int cfd = out;
	out = -1;
	if (close(cfd) < 0) {
		copy_fail(c, rel, "cannot write the copy", errno);
		goto out;
	}
	rc = 0;
out:
	if (out >= 0)
		close(out);
	close(in);
	return rc;
}

/* Copies the contents of directory sfd into the (empty) directory dfd.
 * Both descriptors stay owned by the caller. */
static int copy_dir(struct copy_ctx *c, int sfd, int dfd, const char *rel, int depth)
{
	int rc = 0;
	int dup_fd = dup(sfd);
	DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
	if (!d) {
		if (dup_fd >= 0)
			close(dup_fd);
		return copy_fail(c, rel, "cannot read directory", errno);
	}
	struct dirent *de;
	while (rc == 0 && (errno = 0, de = readdir(d))) {
		const char *name = de->d_name;
		if (!strcmp(name, ".") || !strcmp(name, "..") || !strcmp(name, ".git"))
			continue;
		char *r = xasprintf("%s/%s", rel, name);
		struct stat st;
		if (fstatat(sfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			rc = copy_fail(c, r, "cannot stat", errno);
		} else if (S_ISDIR(st.st_mode)) {
			if (depth + 1 > GITSYNC_COPY_MAX_DEPTH) {
				rc = copy_fail(c, r, "nested deeper than 64 directories", 0);
			} else if (mkdirat(dfd, name, 0755) < 0 ||
				   fchmodat(dfd, name, 0755, 0) < 0) {
				rc = copy_fail(c, r, "cannot create the copy", errno);
			} else {
				int s2 = openat(sfd, name,
						O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
				int d2 = openat(dfd, name,
						O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
				if (s2 < 0 || d2 < 0)
					rc = copy_fail(c, r, "cannot open directory", errno);
				else
					rc = copy_dir(c, s2, d2, r, depth + 1);
				if (s2 >= 0)
					close(s2);
				if (d2 >= 0)
					close(d2);
			}
		} else if (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) {
			if (++c->files > GITSYNC_COPY_MAX_FILES) {
				rc = copy_fail(c, r, "the functions hold more than 20000 files", 0);
			} else if (S_ISREG(st.st_mode)) {
				rc = copy_file(c, sfd, dfd, name, r, &st);
			} else {
				char target[PATH_MAX];
				ssize_t n = readlinkat(sfd, name, target, sizeof target - 1);
				if (n < 0)
					rc = copy_fail(c, r, "cannot read the symbolic link",
						       errno);
				else if ((target[n] = '\0', symlinkat(target, dfd, name) < 0))
					rc = copy_fail(c, r, "cannot create the symbolic link",
						       errno);
			}
		}
		free(r);
	}
	if (rc == 0 && errno)
		rc = copy_fail(c, rel, "cannot read directory", errno);
	closedir(d);
	return rc;
}

/* The functions of src: direct subdirectories (not symbolic links) with a
 * regular template.yaml, sorted. Hidden directories (".git", ".github",
 * never valid function names) are skipped. */
static int list_functions(const char *src, char ***out, size_t *count, char **err)
{
	char **v = NULL;
	size_t n = 0, cap = 0;
	DIR *d = opendir(src);
	*out = NULL;
	*count = 0;
	if (!d)
		return sys_error(err, "cannot read the source directory", src, errno);
	struct dirent *de;
	while ((errno = 0, de = readdir(d))) {
		struct stat st;
		if (de->d_name[0] == '.' ||
		    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISDIR(st.st_mode))
			continue;
		char *t = xasprintf("%s/template.yaml", de->d_name);
		bool fn =
			fstatat(dirfd(d), t, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
		free(t);
		if (!fn)
			continue;
		if (n == cap)
			v = xrealloc(v, (cap = cap ? cap * 2 : 16) * sizeof *v);
		v[n++] = xstrdup(de->d_name);
	}
	int e = errno;
	closedir(d);
	if (e) {
		strv_free(v, n);
		return sys_error(err, "cannot read the source directory", src, e);
	}
	if (n)
		qsort(v, n, sizeof *v, cmp_str);
	*out = v;
	*count = n;
	return 0;
}

/* Moves tmp (a finished copy) to dst, atomically where the file system
 * allows: the reconciler never sees the function missing. */
static int swap_in(const char *fdir, const char *name, const char *tmp, char **err)
{
	char *dst = xasprintf("%s/%s", fdir, name);
	char *old = NULL;
	int rc = -1;
	struct stat st;
	if (lstat(dst, &st) < 0) {
		if (rename(tmp, dst) < 0)
			sys_error(err, "cannot rename a copy to", dst, errno);
		else
			rc = 0;
		goto out;
	}
	if (renameat2(AT_FDCWD, tmp, AT_FDCWD, dst, RENAME_EXCHANGE) == 0) {
		rc = gitsync_rm_tree(tmp, err); /* now the previous version */
		goto out;
	}
	if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) {
		sys_error(err, "cannot replace", dst, errno);
		goto out;
	}
	old = xasprintf("%s/" SYNC_PREFIX "old-%.64s-%08llx", fdir, name,
			(unsigned long long)rand_below(UINT64_C(1) << 32));
	if (rename(dst, old) < 0) {
		sys_error(err, "cannot move aside", dst, errno);
		goto out;
	}
	if (rename(tmp, dst) < 0) {
		sys_error(err, "cannot rename a copy to", dst, errno);
		rename(old, dst);
		goto out;
	}
	rc = gitsync_rm_tree(old, err);
out:
	free(old);
	free(dst);
	return rc;
}

/* Copies the function name of the open directory sfd into a new temporary
 * directory of fdir, *tmp (left for the caller to swap in or remove). */
static int copy_function(struct copy_ctx *c, int sfd, const char *fdir, const char *name,
			 char **tmp, char **err)
{
	*tmp = xasprintf("%s/" SYNC_PREFIX "%.64s.tmp-XXXXXX", fdir, name);
	if (!mkdtemp(*tmp) || chmod(*tmp, 0755) < 0) {
		sys_error(err, "cannot create a temporary directory in", fdir, errno);
		free(*tmp);
		*tmp = NULL;
		return -1;
	}
	c->fn = name;
	int s2 = openat(sfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int d2 = open(*tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int crc = s2 < 0 || d2 < 0 ? copy_fail(c, ".", "cannot open directory", errno)
				   : copy_dir(c, s2, d2, ".", 1);
	if (s2 >= 0)
		close(s2);
	if (d2 >= 0)
		close(d2);
	if (crc < 0) {
		*err = c->err;
		c->err = NULL;
	}
	return crc < 0 ? -1 : 0;
}

/* Removes every directory of fdir but the n sorted names, stale temporary
 * copies included; res->removed counts the functions among them. */
static int remove_others(const char *fdir, char **names, size_t n, struct gitsync_result *res,
			 char **err)
{
	char **stale = NULL;
	size_t nstale = 0, cap = 0;
	int rc = -1;
	DIR *d = opendir(fdir);
	if (!d)
		return sys_error(err, "cannot read", fdir, errno);
	struct dirent *de;
	while ((de = readdir(d))) {
		struct stat st;
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISDIR(st.st_mode) ||
		    (n > 0 &&
		     bsearch(&(const char *){de->d_name}, names, n, sizeof *names, cmp_str)))
			continue;
		if (nstale == cap)
			stale = xrealloc(stale, (cap = cap ? cap * 2 : 8) * sizeof *stale);
		stale[nstale++] = xstrdup(de->d_name);
	}
	closedir(d);
	for (size_t i = 0; i < nstale; i++) {
		char *p = xasprintf("%s/%s", fdir, stale[i]);
		int r = gitsync_rm_tree(p, err);
		free(p);
		if (r < 0)
			goto out;
		if (!str_has_prefix(stale[i], SYNC_PREFIX))
			res->removed++;
	}
	rc = 0;
out:
	strv_free(stale, nstale);
	return rc;
}

int gitsync_replace_functions(const char *src, const char *fdir, struct gitsync_result *res,
			      char **err)
{
	char **names = NULL, **tmps = NULL;
	size_t n = 0;
	struct copy_ctx c = {0};
	int sfd = -1, rc = -1;
	if (list_functions(src, &names, &n, err) < 0)
		return -1;
	tmps = xcalloc(n + 1, sizeof *tmps);
	if (mkdir_p(fdir, 0755, 0, NULL, NULL, err) < 0)
		goto out;
	sfd = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sfd < 0) {
		sys_error(err, "cannot open", src, errno);
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		if (copy_function(&c, sfd, fdir, names[i], &tmps[i], err) < 0)
			goto out;
	for (size_t i = 0; i < n; i++) {
		if (swap_in(fdir, names[i], tmps[i], err) < 0)
			goto out;
		free(tmps[i]);
		tmps[i] = NULL;
	}
	res->functions = n;
	rc = remove_others(fdir, names, n, res, err);
out:
	for (size_t i = 0; i < n; i++) {
		if (tmps[i]) {
			char *ignored = NULL;
			gitsync_rm_tree(tmps[i], &ignored);
			free(ignored);
		}
		free(tmps[i]);
	}
	free(tmps);
	free(c.err);
	if (sfd >= 0)
		close(sfd);
	strv_free(names, n);
	return rc;
}
