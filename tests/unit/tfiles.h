/*
 * Helpers for tests that touch files: temporary directories, their
 * removal, files written into them, file modes, and Relay's log captured
 * into a file to assert on, with the searches such text is checked with.
 * Header-only, like t.h; everything is static inline (unused ones cost
 * nothing).
 */
#ifndef RELAY_TFILES_H
#define RELAY_TFILES_H

#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"

/* A fresh directory under /tmp (malloc'd); exits when none can be made. */
static inline char *t_tmpdir(void)
{
	char *d = xstrdup("/tmp/relay-test.XXXXXX");
	if (!mkdtemp(d)) {
		perror("mkdtemp");
		exit(1);
	}
	return d;
}

/* Removes d and everything below it, modes a test tightened included. */
static inline void t_rmtree(const char *d)
{
	char *cmd = xasprintf("chmod -R u+rwx '%s' 2>/dev/null; rm -rf '%s'", d, d);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", d);
	free(cmd);
}

/* Writes text to dir/rel, making the directories on the way as mkdir -p
 * does (masked by the umask); aborts when it cannot. */
static inline void t_write_file(const char *dir, const char *rel, const char *text)
{
	char *path = xasprintf("%s/%s", dir, rel);
	char *slash = strrchr(path, '/');
	char *err = NULL;
	*slash = '\0';
	if (mkdir_p(path, 0777, 0, NULL, NULL, &err) < 0) {
		fprintf(stderr, "%s\n", err);
		abort();
	}
	*slash = '/';
	FILE *f = fopen(path, "w");
	if (!f)
		abort();
	fputs(text, f);
	fclose(f);
	free(path);
}

/* Replaces whatever is at path (a symlink is removed, not followed) by a
 * file of len bytes with exactly mode; exits when it cannot. */
static inline void t_write_mode(const char *path, const void *data, size_t len, mode_t mode)
{
	unlink(path);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || write(fd, data, len) != (ssize_t)len || fchmod(fd, mode) < 0) {
		perror(path);
		exit(1);
	}
	close(fd);
}

/* Entries of dir whose name starts with '.', other than . and .. (the
 * temporary files a writer may have left behind); -1 when dir cannot be
 * read. */
static inline int t_hidden_entries(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)))
		if (de->d_name[0] == '.' && strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

/* The permission bits of path (not following a symlink), or -1. */
static inline int t_mode_of(const char *path)
{
	struct stat st;
	if (lstat(path, &st) < 0)
		return -1;
	return (int)(st.st_mode & 07777);
}

struct t_logcap_ {
	char path[64];
	int fd;
};
static inline struct t_logcap_ *t_logcap_(void)
{
	static struct t_logcap_ c = {"", -1};
	return &c;
}

/* Sends Relay's log to a temporary file until t_release_logs. */
static inline void t_capture_logs(void)
{
	struct t_logcap_ *c = t_logcap_();
	strlcpy_(c->path, "/tmp/relay-test-log-XXXXXX", sizeof c->path);
	c->fd = mkstemp(c->path);
	log_set_fd(c->fd);
}

/* The file at path (malloc'd, NUL-terminated, its first max bytes at
 * most), its length in *len (may be NULL); NULL when it cannot be opened. */
static inline char *t_read_file(const char *path, size_t max, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	struct buf b;
	buf_init(&b, max);
	char chunk[4096];
	size_t n;
	while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
		buf_append(&b, chunk, n);
	fclose(f);
	if (len)
		*len = b.len;
	return buf_steal(&b);
}

/* Everything logged since t_capture_logs (malloc'd, at most 1 MiB). */
static inline char *t_captured_logs(void)
{
	char *s = t_read_file(t_logcap_()->path, 1 << 20, NULL);
	return s ? s : xstrdup("");
}

/* Back to stderr; the file is removed. */
static inline void t_release_logs(void)
{
	struct t_logcap_ *c = t_logcap_();
	log_set_fd(2);
	close(c->fd);
	unlink(c->path);
}

/* Whether hay (NULL: no) contains needle. */
static inline bool t_contains(const char *hay, const char *needle)
{
	return hay && strstr(hay, needle) != NULL;
}

/* Occurrences of what in s, overlapping ones included: for asserting that
 * something was said exactly once, or never. */
static inline int t_count(const char *s, const char *what)
{
	int n = 0;
	for (const char *p = strstr(s, what); p; p = strstr(p + 1, what))
		n++;
	return n;
}

/* How many lines of the file at path (read in pieces of at most 4095
 * bytes) contain needle; -1 when it cannot be opened. */
static inline int t_count_lines_with(const char *path, const char *needle)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	char line[4096];
	int n = 0;
	while (fgets(line, sizeof line, f))
		if (strstr(line, needle))
			n++;
	fclose(f);
	return n;
}

/* Whether text contains line as a whole line. */
static inline bool t_has_line(const char *text, const char *line)
{
	size_t n = strlen(line);
	for (const char *p = text; p && *p;) {
		const char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);
		if (len == n && memcmp(p, line, n) == 0)
			return true;
		p = nl ? nl + 1 : NULL;
	}
	return false;
}

#endif
