/* A function's source tree in memory; the contract is in fn_tree.h. */
#include "model/fn_tree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"

struct loader {
	struct fn_tree *t;
	size_t cap;
	char *err;
};

static void tree_push(struct loader *l, char *path, enum fn_entry_kind kind, char *data, size_t len)
{
	struct fn_tree *t = l->t;
	if (t->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 32;
		t->v = xrealloc(t->v, l->cap * sizeof *t->v);
	}
	t->v[t->n++] = (struct fn_entry){.path = path, .kind = kind, .data = data, .len = len};
	t->bytes += len;
}

/* Adds the entry name of dfd (st: its lstat), a symbolic link or a regular
 * file, to the tree as path, which it takes (kept or freed). Anything else,
 * or more than the tree's bounds, is -1 with l->err. */
static int load_leaf(struct loader *l, int dfd, const char *name, const struct stat *st, char *path)
{
	char *data = NULL;
	size_t len = 0;
	int fd = -1;
	if (l->t->n >= FN_TREE_MAX_FILES) {
		l->err = xasprintf("more than %d files", FN_TREE_MAX_FILES);
		goto fail;
	}
	size_t room = FN_TREE_MAX_BYTES - l->t->bytes;
	if (S_ISLNK(st->st_mode)) {
		char target[4096];
		ssize_t n = readlinkat(dfd, name, target, sizeof target);
		if (n < 0 || (size_t)n >= sizeof target) {
			l->err = xasprintf("%s: cannot read symbolic link: %s", path,
					   n < 0 ? strerror(errno) : "target too long");
			goto fail;
		}
		if ((size_t)n > room)
			goto too_big;
		tree_push(l, path, FN_ENTRY_SYMLINK, xstrndup(target, (size_t)n), (size_t)n);
		return 0;
	}
	if (!S_ISREG(st->st_mode)) {
		l->err = xasprintf("%s: not a regular file, directory or symbolic link", path);
		goto fail;
	}
	fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		l->err = xasprintf("%s: cannot open: %s", path, strerror(errno));
		goto fail;
	}
	if (read_fd_bounded(fd, room, 0, &data, &len) < 0) {
		if (errno == EFBIG)
			goto too_big;
		l->err = xasprintf("%s: read error: %s", path, strerror(errno));
		goto fail;
	}
	close(fd);
	tree_push(l, path, (st->st_mode & 0111) ? FN_ENTRY_EXEC : FN_ENTRY_FILE, data, len);
	return 0;
too_big:
	l->err = xasprintf("the function's files exceed %u bytes in total (at %s)",
			   FN_TREE_MAX_BYTES, path);
fail:
	if (fd >= 0)
		close(fd);
	free(path);
	return -1;
}

/* Reads the directory dfd, which it owns: every return closes it (and
 * whatever else it opened), so a walk that stops early leaks nothing. */
static int load_dir(struct loader *l, int dfd, const char *rel, int depth)
{
	int rc = -1;
	DIR *d = NULL;
	char *path = NULL;

	if (depth > FN_TREE_MAX_DEPTH) {
		l->err = xasprintf("%s: nested deeper than %d directories", rel, FN_TREE_MAX_DEPTH);
		close(dfd);
		goto out;
	}
	d = fdopendir(dfd);
	if (!d) {
		l->err = xasprintf("%s: cannot read directory: %s", *rel ? rel : ".",
				   strerror(errno));
		close(dfd);
		goto out;
	}
	struct dirent *e;
	for (;;) {
		errno = 0;
		e = readdir(d);
		if (!e) {
			if (errno) {
				l->err = xasprintf("%s: cannot read directory: %s",
						   *rel ? rel : ".", strerror(errno));
				goto out;
			}
			break;
		}
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		free(path);
		path = *rel ? xasprintf("%s/%s", rel, e->d_name) : xstrdup(e->d_name);
		struct stat st;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			l->err = xasprintf("%s: %s", path, strerror(errno));
			goto out;
		}
		if (S_ISDIR(st.st_mode)) {
			/* Too deep: refused before the directory is even opened. */
			if (depth + 1 > FN_TREE_MAX_DEPTH) {
				l->err = xasprintf("%s: nested deeper than %d directories", path,
						   FN_TREE_MAX_DEPTH);
				goto out;
			}
			int sub = openat(dirfd(d), e->d_name,
					 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0) {
				l->err = xasprintf("%s: cannot open directory: %s", path,
						   strerror(errno));
				goto out;
			}
			if (load_dir(l, sub, path, depth + 1) < 0)
				goto out;
			continue;
		}
		int r = load_leaf(l, dirfd(d), e->d_name, &st, path);
		path = NULL; /* load_leaf took it */
		if (r < 0)
			goto out;
	}
	rc = 0;
out:
	free(path);
	if (d)
		closedir(d);
	return rc;
}

static int entry_cmp(const void *a, const void *b)
{
	return strcmp(((const struct fn_entry *)a)->path, ((const struct fn_entry *)b)->path);
}

int fn_tree_load(const char *dir, struct fn_tree *out, char **err)
{
	memset(out, 0, sizeof *out);
	struct loader l = {.t = out};
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		*err = xasprintf("%s: cannot open directory: %s", dir, strerror(errno));
		return -1;
	}
	if (load_dir(&l, dfd, "", 0) < 0) {
		fn_tree_free(out);
		*err = l.err;
		return -1;
	}
	if (out->n)
		qsort(out->v, out->n, sizeof *out->v, entry_cmp);
	return 0;
}

void fn_tree_put(struct fn_tree *t, const char *path, enum fn_entry_kind kind, const void *data,
		 size_t len)
{
	char *copy = xmalloc(len + 1);
	if (len)
		memcpy(copy, data, len);
	copy[len] = '\0';
	for (size_t i = 0; i < t->n; i++) {
		if (strcmp(t->v[i].path, path) == 0) {
			t->bytes -= t->v[i].len;
			free(t->v[i].data);
			t->v[i].data = copy;
			t->v[i].len = len;
			t->v[i].kind = kind;
			t->bytes += len;
			return;
		}
	}
	t->v = xrealloc(t->v, (t->n + 1) * sizeof *t->v);
	t->v[t->n++] =
		(struct fn_entry){.path = xstrdup(path), .kind = kind, .data = copy, .len = len};
	t->bytes += len;
	qsort(t->v, t->n, sizeof *t->v, entry_cmp);
}

const struct fn_entry *fn_tree_get(const struct fn_tree *t, const char *path)
{
	struct fn_entry key = {.path = (char *)path};
	if (!t->n)
		return NULL;
	return bsearch(&key, t->v, t->n, sizeof *t->v, entry_cmp);
}

void fn_tree_free(struct fn_tree *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->n; i++) {
		free(t->v[i].path);
		free(t->v[i].data);
	}
	free(t->v);
	memset(t, 0, sizeof *t);
}
