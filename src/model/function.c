#include "model/function.h"

#include "base/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int function_name_valid(const char *name, const char **why)
{
	const char *w = NULL;
	size_t n = strlen(name);
	if (n == 0)
		w = "empty";
	else if (n > FUNCTION_NAME_MAX)
		w = "longer than 63 characters";
	else if (!((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= '0' && name[0] <= '9')))
		w = "must start with a lowercase letter or a digit";
	else if (name[n - 1] == '.')
		w = "must not end with a dot";
	else
		for (size_t i = 0; i < n && !w; i++)
			if (!((name[i] >= 'a' && name[i] <= 'z') ||
			      (name[i] >= '0' && name[i] <= '9') || name[i] == '.' ||
			      name[i] == '_' || name[i] == '-'))
				w = "only lowercase letters, digits, '.', '_' and '-' are allowed";
	if (why)
		*why = w;
	return w == NULL;
}

static bool path_within(const char *path, const char *root)
{
	size_t n = strlen(root);
	return strncmp(path, root, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

/* Walks the function's tree: every symlink must resolve inside it, and the
 * tree is bounded in files and depth. */
static void check_tree(const char *root_real, const char *dir, const char *rel, int depth,
		       size_t *files, struct strlist *errors)
{
	if (depth > FUNCTION_MAX_DEPTH) {
		strlist_addf(errors, "%s: nested deeper than %d directories", rel,
			     FUNCTION_MAX_DEPTH);
		return;
	}
	DIR *d = opendir(dir);
	if (!d) {
		strlist_addf(errors, "%s: cannot read directory: %s", *rel ? rel : ".",
			     strerror(errno));
		return;
	}
	struct dirent *e;
	while ((e = readdir(d))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (++*files > FUNCTION_MAX_FILES) {
			strlist_addf(errors, "more than %d files", FUNCTION_MAX_FILES);
			break;
		}
		char *path = xasprintf("%s/%s", dir, e->d_name);
		char *r = *rel ? xasprintf("%s/%s", rel, e->d_name) : xstrdup(e->d_name);
		struct stat st;
		if (lstat(path, &st) < 0) {
			strlist_addf(errors, "%s: %s", r, strerror(errno));
		} else if (S_ISLNK(st.st_mode)) {
			char *target = realpath(path, NULL);
			if (!target)
				strlist_addf(errors, "%s: symlink does not resolve: %s", r,
					     strerror(errno));
			else if (!path_within(target, root_real))
				strlist_addf(errors,
					     "%s: symlink points outside the function directory",
					     r);
			free(target);
		} else if (S_ISDIR(st.st_mode)) {
			check_tree(root_real, path, r, depth + 1, files, errors);
		} else if (!S_ISREG(st.st_mode)) {
			strlist_addf(errors, "%s: not a regular file or directory", r);
		}
		free(path);
		free(r);
	}
	closedir(d);
}

/* Reads at most max bytes of path, a regular file; -1 with errno-based
 * message. O_NONBLOCK and fstat on the descriptor: a FIFO put in place
 * after the tree was checked is refused, never waited on. */
static int read_file(const char *path, size_t max, char **data, size_t *len, char **why)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		*why = xasprintf("cannot open: %s", strerror(errno));
		return -1;
	}
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		*why = xstrdup("not a regular file");
		close(fd);
		return -1;
	}
	int rc = read_fd_bounded(fd, max, 0, data, len);
	if (rc < 0 && errno == EFBIG)
		*why = xasprintf("larger than %zu bytes", max);
	else if (rc < 0)
		*why = xasprintf("read error: %s", strerror(errno));
	close(fd);
	return rc;
}

enum function_status function_load(const char *dir, const char *name, struct function **out,
				   struct strlist *errors, struct strlist *warnings)
{
	*out = NULL;
	char *fdir = xasprintf("%s/%s", dir, name);
	char *tpath = xasprintf("%s/template.yaml", fdir);
	enum function_status st = FUNCTION_INVALID;
	struct stat sb;
	char *text = NULL;
	size_t len = 0;

	if (lstat(tpath, &sb) < 0 && errno == ENOENT) {
		st = FUNCTION_NO_TEMPLATE;
		goto out;
	}
	const char *why = NULL;
	size_t nerr0 = errors->n;
	if (!function_name_valid(name, &why))
		strlist_addf(errors, "invalid function name: %s (" FUNCTION_NAME_RULE ")", why);

	char *root_real = realpath(fdir, NULL);
	if (!root_real) {
		strlist_addf(errors, "cannot resolve directory: %s", strerror(errno));
		goto out;
	}
	size_t files = 0;
	check_tree(root_real, fdir, "", 0, &files, errors);
	/* The template is read through its real path, which must lie inside
	 * the function (a symlinked template.yaml within the tree is fine). */
	char *real = realpath(tpath, NULL);
	char *rwhy = NULL;
	int rc = -1;
	if (!real || !path_within(real, root_real))
		rwhy = xstrdup("must be a regular file inside the function directory");
	else
		rc = read_file(real, TEMPLATE_MAX_BYTES, &text, &len, &rwhy);
	free(real);
	free(root_real);
	if (rc < 0) {
		strlist_addf(errors, "template.yaml: %s", rwhy);
		free(rwhy);
		goto out;
	}
	struct template *tpl = NULL;
	if (template_parse(text, len, &tpl, errors, warnings) == 0 && errors->n == nerr0) {
		struct function *f = xcalloc(1, sizeof *f);
		f->name = xstrdup(name);
		f->dir = fdir;
		fdir = NULL;
		f->tpl = tpl;
		*out = f;
		st = FUNCTION_OK;
	} else {
		template_free(tpl);
	}
out:
	free(text);
	free(tpath);
	free(fdir);
	return st;
}

void function_free(struct function *f)
{
	if (!f)
		return;
	free(f->name);
	free(f->dir);
	template_free(f->tpl);
	free(f);
}

char *function_entry_errors(const struct function_entry *e)
{
	struct buf b;
	buf_init(&b, 64 * 1024); /* an error that would not fit is left out (util.h) */
	for (size_t i = 0; i < e->errors.n; i++) {
		if (i)
			buf_append(&b, "; ", 2);
		buf_append(&b, e->errors.v[i], strlen(e->errors.v[i]));
	}
	return buf_steal(&b);
}

void function_entry_log(const struct function_entry *e)
{
	for (size_t i = 0; i < e->warnings.n; i++)
		log_warn(LOG_ATTRS("function", e->name, "warning", e->warnings.v[i]),
			 "template has an unknown key");
	if (e->status != FUNCTION_INVALID)
		return;
	char *errors = function_entry_errors(e);
	log_warn(LOG_ATTRS("function", e->name, "errors", errors), "invalid function skipped");
	free(errors);
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int function_dir_names(const char *dir, char ***out, size_t *n, char **err)
{
	*out = NULL;
	*n = 0;
	DIR *d = opendir(dir);
	if (!d) {
		*err = xasprintf("cannot read functions directory %s: %s", dir, strerror(errno));
		return -1;
	}
	struct dirent *e;
	size_t cap = 0;
	while ((e = readdir(d))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
		    function_dir_staging(e->d_name))
			continue;
		char *p = xasprintf("%s/%s", dir, e->d_name);
		struct stat st;
		/* Direct subdirectories only; a symlinked function directory is
		 * followed (a mounted /functions often is one). */
		bool isdir = stat(p, &st) == 0 && S_ISDIR(st.st_mode);
		free(p);
		if (!isdir)
			continue;
		if (*n == cap) {
			cap = cap ? cap * 2 : 16;
			*out = xrealloc(*out, cap * sizeof **out);
		}
		(*out)[(*n)++] = xstrdup(e->d_name);
	}
	closedir(d);
	if (*n)
		qsort(*out, *n, sizeof **out, name_cmp);
	return 0;
}

void function_names_free(char **names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

int function_scan_dir(const char *dir, struct function_scan *out, char **err)
{
	out->v = NULL;
	out->n = 0;
	char **names;
	size_t n;
	if (function_dir_names(dir, &names, &n, err) < 0)
		return -1;
	out->v = xcalloc(n + 1, sizeof *out->v);
	out->n = n;
	for (size_t i = 0; i < n; i++)
		out->v[i].name = names[i]; /* the entry owns it now */
	free(names);
	for (size_t i = 0; i < out->n; i++) {
		struct function_entry *fe = &out->v[i];
		fe->status = function_load(dir, fe->name, &fe->fn, &fe->errors, &fe->warnings);
	}
	return 0;
}

void function_scan_free(struct function_scan *s)
{
	for (size_t i = 0; i < s->n; i++) {
		free(s->v[i].name);
		function_free(s->v[i].fn);
		strlist_free(&s->v[i].errors);
		strlist_free(&s->v[i].warnings);
	}
	free(s->v);
	s->v = NULL;
	s->n = 0;
}
