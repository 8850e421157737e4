/*
 * Secrets: provider wrappers and the local file provider (see secret.h).
 *
 * Every operation of the file provider opens the secrets directory once
 * (O_DIRECTORY | O_NOFOLLOW), checks it through the descriptor, and then
 * works relative to that descriptor (fstatat, openat, renameat, unlinkat),
 * so the checked directory is the one used even if the path is swapped
 * meanwhile. A secret file is checked with fstatat before it is opened and
 * again with fstat after (same device and inode), so a file refused for its
 * permissions is never read and a file swapped in between is not either.
 *
 * Values are copied into exactly sized buffers and zeroed before being
 * freed; error messages are built from names and paths only.
 */
#include "model/secret.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "base/util.h"

#define SECRETS_SUBDIR "secrets"
#define OPEN_ATTEMPTS 10

bool secret_name_ok(const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || n > SECRET_NAME_MAX || name[n - 1] == '.' ||
	    !((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= '0' && name[0] <= '9')))
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
		      c == '-'))
			return false;
	}
	return true;
}

static int invalid_name(const char *name, char **err)
{
	char *shown = str_for_message(name, 80);
	*err = xasprintf("invalid secret name \"%s\": %s", shown, SECRET_NAME_RULE);
	free(shown);
	return SECRET_INVALID_NAME;
}

int secret_name_check(const char *name, char **err)
{
	return secret_name_ok(name) ? 0 : invalid_name(name, err);
}

static int unsupported(const struct secret_provider *p, const char *what, char **err)
{
	*err = xasprintf("the %s secret provider cannot %s secrets", p->kind, what);
	return SECRET_UNSUPPORTED;
}

int secret_get(const struct secret_provider *p, const char *name, char **value, size_t *len,
	       char **err)
{
	*value = NULL;
	*len = 0;
	if (!secret_name_ok(name))
		return invalid_name(name, err);
	return p->get(p->ctx, name, value, len, err);
}

int secret_list(const struct secret_provider *p, char ***names, size_t *count, char **err)
{
	*names = NULL;
	*count = 0;
	if (!p->list)
		return unsupported(p, "list", err);
	return p->list(p->ctx, names, count, err);
}

int secret_set(const struct secret_provider *p, const char *name, const void *value, size_t len,
	       char **err)
{
	if (!secret_name_ok(name))
		return invalid_name(name, err);
	if (!p->set)
		return unsupported(p, "store", err);
	if (len > SECRET_VALUE_MAX) {
		*err = xasprintf(
			"secret \"%s\": value of %zu bytes exceeds the maximum of %d bytes", name,
			len, SECRET_VALUE_MAX);
		return SECRET_ERROR;
	}
	return p->set(p->ctx, name, value, len, err);
}

int secret_remove(const struct secret_provider *p, const char *name, char **err)
{
	if (!secret_name_ok(name))
		return invalid_name(name, err);
	if (!p->remove)
		return unsupported(p, "remove", err);
	return p->remove(p->ctx, name, err);
}

void secret_provider_free(struct secret_provider *p)
{
	if (!p)
		return;
	if (p->free_ctx)
		p->free_ctx(p->ctx);
	free(p);
}

void secret_value_free(char *value, size_t len)
{
	if (!value)
		return;
	explicit_bzero(value, len);
	free(value);
}

void secret_names_free(char **names, size_t count)
{
	for (size_t i = 0; i < count; i++)
		free(names[i]);
	free(names);
}

/* ---- the file provider ---- */

struct file_store {
	char *data_dir;
	char *dir; /* <data_dir>/secrets */
};

/* Refuses anything but a directory owned by us without group/other bits. */
static int check_dir_stat(const struct stat *st, const char *path, char **err)
{
	if (!S_ISDIR(st->st_mode)) {
		*err = xasprintf("secrets directory %s: not a directory", path);
		return SECRET_ERROR;
	}
	if (check_owner_mode(st, 077, "secrets directory", path, "use", err) < 0)
		return SECRET_ERROR;
	return 0;
}

/* Refuses anything but a regular file owned by us without group/other
 * bits and within the size limit. */
static int check_file_stat(const struct stat *st, const char *path, char **err)
{
	if (S_ISLNK(st->st_mode)) {
		*err = xasprintf("secret file %s: is a symbolic link; refusing to read it", path);
		return SECRET_ERROR;
	}
	if (!S_ISREG(st->st_mode)) {
		*err = xasprintf("secret file %s: not a regular file; refusing to read it", path);
		return SECRET_ERROR;
	}
	if (check_owner_mode(st, 077, "secret file", path, "read", err) < 0)
		return SECRET_ERROR;
	if (st->st_size > SECRET_VALUE_MAX) {
		*err = xasprintf("secret file %s: size %lld bytes exceeds the maximum of %d bytes; "
				 "refusing to read it",
				 path, (long long)st->st_size, SECRET_VALUE_MAX);
		return SECRET_ERROR;
	}
	return 0;
}

/*
 * Opens and checks the secrets directory into *fd. Without create, a
 * missing directory gives SECRET_NOT_FOUND (no message). With create, it is
 * made (and its parents) with mode 0700.
 */
static int open_dir(const struct file_store *fs, bool create, int *fd, char **err)
{
	*fd = -1;
	bool created = false;
	if (create) {
		if (!*fs->data_dir) {
			*err = xstrdup("the data directory path is empty");
			return SECRET_ERROR;
		}
		if (mkdir_p(fs->data_dir, 0700, 0, NULL, NULL, err) < 0)
			return SECRET_ERROR;
		if (mkdir(fs->dir, 0700) == 0)
			created = true;
		else if (errno != EEXIST)
			return sys_error(err, "cannot create secrets directory", fs->dir, errno);
	}
	int d = open(fs->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (d < 0) {
		int e = errno;
		struct stat st;
		if (e == ENOENT && !create)
			return SECRET_NOT_FOUND;
		if ((e == ELOOP || e == ENOTDIR) && lstat(fs->dir, &st) == 0 &&
		    S_ISLNK(st.st_mode)) {
			*err = xasprintf(
				"secrets directory %s: is a symbolic link; refusing to use it",
				fs->dir);
			return SECRET_ERROR;
		}
		return sys_error(err, "cannot open secrets directory", fs->dir, e);
	}
	struct stat st;
	int rc = 0;
	/* A directory we just made gets exactly 0700 whatever the umask. */
	if (created && fchmod(d, 0700) < 0) {
		rc = sys_error(err, "cannot set the mode of", fs->dir, errno);
		goto out;
	}
	if (fstat(d, &st) < 0) {
		rc = sys_error(err, "cannot stat", fs->dir, errno);
		goto out;
	}
	rc = check_dir_stat(&st, fs->dir, err);
out:
	if (rc < 0)
		close(d);
	else
		*fd = d;
	return rc;
}

static int not_found(const char *name, char **err)
{
	*err = xasprintf("secret \"%s\" not found", name);
	return SECRET_NOT_FOUND;
}

/* The store's directory for an operation on secret name: no store yet is
 * that secret not found. */
static int open_dir_for(const struct file_store *fs, const char *name, int *dfd, char **err)
{
	int rc = open_dir(fs, false, dfd, err);
	return rc == SECRET_NOT_FOUND ? not_found(name, err) : rc;
}

/* fstatat + checks of one secret file; path for messages. */
static int check_entry(int dfd, const char *name, const char *path, struct stat *st, char **err)
{
	if (fstatat(dfd, name, st, AT_SYMLINK_NOFOLLOW) < 0) {
		if (errno == ENOENT)
			return not_found(name, err);
		return sys_error(err, "cannot stat secret file", path, errno);
	}
	return check_file_stat(st, path, err);
}

static int file_get(void *ctx, const char *name, char **value, size_t *len, char **err)
{
	const struct file_store *fs = ctx;
	char *path = xasprintf("%s/%s", fs->dir, name);
	int dfd = -1, fd = -1;
	int rc = open_dir_for(fs, name, &dfd, err);
	if (rc < 0)
		goto out;
	/* A concurrent set renames a new file over the name between the check
	 * and the open: check again, a few times, rather than fail. */
	struct stat before, after;
	for (int attempt = 0;; attempt++) {
		if ((rc = check_entry(dfd, name, path, &before, err)) < 0)
			goto out;
		fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
		if (fd < 0) {
			rc = errno == ENOENT
				     ? not_found(name, err)
				     : sys_error(err, "cannot open secret file", path, errno);
			goto out;
		}
		if (fstat(fd, &after) < 0) {
			rc = sys_error(err, "cannot stat secret file", path, errno);
			goto out;
		}
		if (after.st_dev == before.st_dev && after.st_ino == before.st_ino)
			break;
		close(fd);
		fd = -1;
		if (attempt == OPEN_ATTEMPTS) {
			*err = xasprintf("secret file %s: replaced while being opened; try again",
					 path);
			rc = SECRET_ERROR;
			goto out;
		}
	}
	if ((rc = check_file_stat(&after, path, err)) < 0)
		goto out;
	/* The file may have grown since the check: read_fd_bounded reads up
	 * to one byte past the limit to notice it. */
	if (read_fd_bounded(fd, SECRET_VALUE_MAX, READ_WIPE, value, len) < 0) {
		if (errno == EFBIG)
			*err = xasprintf("secret file %s: larger than the maximum of %d bytes",
					 path, SECRET_VALUE_MAX);
		else
			sys_error(err, "cannot read secret file", path, errno);
		rc = SECRET_ERROR;
		goto out;
	}
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	if (dfd >= 0)
		close(dfd);
	free(path);
	return rc;
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int file_list(void *ctx, char ***names, size_t *count, char **err)
{
	const struct file_store *fs = ctx;
	char **v = NULL;
	size_t n = 0, cap = 0;
	DIR *dir = NULL;
	int dfd = -1;
	int rc = open_dir(fs, false, &dfd, err);
	if (rc == SECRET_NOT_FOUND) {
		rc = 0; /* no store yet: no secrets */
		goto out;
	}
	if (rc < 0)
		goto out;
	dir = fdopendir(dfd);
	if (!dir) {
		rc = sys_error(err, "cannot read secrets directory", fs->dir, errno);
		goto out;
	}
	dfd = -1; /* owned by dir now */
	for (;;) {
		errno = 0;
		struct dirent *de = readdir(dir);
		if (!de) {
			if (errno) {
				rc = sys_error(err, "cannot read secrets directory", fs->dir,
					       errno);
				goto out;
			}
			break;
		}
		/* Skips ".", "..", temporary files (leading '.') and strays. */
		if (!secret_name_ok(de->d_name))
			continue;
		struct stat st;
		if (fstatat(dirfd(dir), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISDIR(st.st_mode))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			v = xrealloc(v, cap * sizeof *v);
		}
		v[n++] = xstrdup(de->d_name);
	}
	if (n)
		qsort(v, n, sizeof *v, cmp_names);
out:
	if (dir)
		closedir(dir);
	if (dfd >= 0)
		close(dfd);
	if (rc < 0) {
		secret_names_free(v, n);
		v = NULL;
		n = 0;
	}
	*names = v;
	*count = n;
	return rc;
}

static int file_set(void *ctx, const char *name, const void *value, size_t len, char **err)
{
	const struct file_store *fs = ctx;
	int dfd = -1;
	int rc = open_dir(fs, true, &dfd, err);
	if (rc < 0)
		return rc;
	rc = write_file_atomic(dfd, fs->dir, name, value, len, 0600, false, err) < 0 ? SECRET_ERROR
										     : 0;
	close(dfd);
	return rc;
}

static int file_remove(void *ctx, const char *name, char **err)
{
	const struct file_store *fs = ctx;
	char *path = xasprintf("%s/%s", fs->dir, name);
	int dfd = -1;
	int rc = open_dir_for(fs, name, &dfd, err);
	if (rc < 0)
		goto out;
	struct stat st;
	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		rc = errno == ENOENT ? not_found(name, err)
				     : sys_error(err, "cannot stat secret file", path, errno);
		goto out;
	}
	if (S_ISDIR(st.st_mode)) {
		/* list() does not show directories either. */
		rc = not_found(name, err);
		goto out;
	}
	if (unlinkat(dfd, name, 0) < 0) {
		rc = errno == ENOENT ? not_found(name, err)
				     : sys_error(err, "cannot remove secret file", path, errno);
		goto out;
	}
	if (fsync(dfd) < 0) {
		rc = sys_error(err, "cannot sync secrets directory", fs->dir, errno);
		goto out;
	}
	rc = 0;
out:
	if (dfd >= 0)
		close(dfd);
	free(path);
	return rc;
}

static void file_free(void *ctx)
{
	struct file_store *fs = ctx;
	if (!fs)
		return;
	free(fs->data_dir);
	free(fs->dir);
	free(fs);
}

/* The file's identity and times, mixed (FNV-1a over the fields): a set
 * renames a new file over the name (new inode, new times), a remove makes
 * it absent. */
static int file_stamp(void *ctx, const char *name, uint64_t *stamp)
{
	const struct file_store *fs = ctx;
	char *path = xasprintf("%s/%s", fs->dir, name);
	struct stat st;
	int rc = lstat(path, &st);
	free(path);
	if (rc < 0) {
		*stamp = errno == ENOENT ? 1 : 2;
		return 0;
	}
	const uint64_t fields[] = {(uint64_t)st.st_dev,		(uint64_t)st.st_ino,
				   (uint64_t)st.st_size,	(uint64_t)st.st_mode,
				   (uint64_t)st.st_mtim.tv_sec, (uint64_t)st.st_mtim.tv_nsec,
				   (uint64_t)st.st_ctim.tv_sec, (uint64_t)st.st_ctim.tv_nsec};
	uint64_t h = 0xcbf29ce484222325ULL;
	for (size_t i = 0; i < ARRAY_LEN(fields); i++)
		for (int b = 0; b < 64; b += 8) {
			h ^= (fields[i] >> b) & 0xff;
			h *= 0x100000001b3ULL;
		}
	*stamp = h;
	return 0;
}

int secret_stamp(const struct secret_provider *p, const char *name, uint64_t *stamp)
{
	if (!p || !p->stamp || !secret_name_ok(name))
		return -1;
	return p->stamp(p->ctx, name, stamp);
}

struct secret_provider *secret_file_provider_new(const char *data_dir)
{
	struct file_store *fs = xcalloc(1, sizeof *fs);
	fs->data_dir = xstrdup(data_dir);
	/* "dir/" and "dir" both give "dir/secrets". */
	size_t n = strlen(data_dir);
	while (n > 1 && data_dir[n - 1] == '/')
		n--;
	fs->dir = xasprintf("%.*s/%s", (int)n, data_dir, SECRETS_SUBDIR);
	struct secret_provider *p = xcalloc(1, sizeof *p);
	p->kind = "file";
	p->ctx = fs;
	p->get = file_get;
	p->list = file_list;
	p->set = file_set;
	p->remove = file_remove;
	p->stamp = file_stamp;
	p->free_ctx = file_free;
	return p;
}

int secret_file_check(const struct secret_provider *p, const char *name, char **err)
{
	if (!secret_name_ok(name))
		return invalid_name(name, err);
	if (p->get != file_get) {
		*err = xasprintf("the %s secret provider has no files to check", p->kind);
		return SECRET_ERROR;
	}
	const struct file_store *fs = p->ctx;
	char *path = xasprintf("%s/%s", fs->dir, name);
	int dfd = -1;
	int rc = open_dir_for(fs, name, &dfd, err);
	if (rc < 0)
		goto out;
	struct stat st;
	rc = check_entry(dfd, name, path, &st, err);
out:
	if (dfd >= 0)
		close(dfd);
	free(path);
	return rc;
}
