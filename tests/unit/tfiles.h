/*
 * Helpers for tests that touch files: temporary directories, their
 * removal, file modes, and Relay's log captured into a file to assert on.
 * Header-only, like t.h; everything is static inline (unused ones cost
 * nothing).
 */
#ifndef RELAY_TFILES_H
#define RELAY_TFILES_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

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

/* Everything logged since t_capture_logs (malloc'd, at most 1 MiB). */
static inline char *t_captured_logs(void)
{
	FILE *f = fopen(t_logcap_()->path, "r");
	struct buf b;
	buf_init(&b, 1 << 20);
	char chunk[4096];
	size_t n;
	while (f && (n = fread(chunk, 1, sizeof chunk, f)) > 0)
		buf_append(&b, chunk, n);
	if (f)
		fclose(f);
	if (!b.data)
		return xstrdup("");
	return buf_steal(&b);
}

/* Back to stderr; the file is removed. */
static inline void t_release_logs(void)
{
	struct t_logcap_ *c = t_logcap_();
	log_set_fd(2);
	close(c->fd);
	unlink(c->path);
}

#endif
