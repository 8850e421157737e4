/*
 * A function's source tree in memory.
 *
 * fn_tree_load() reads a function directory once: every regular file and
 * symbolic link below it (directories themselves, being implied by their
 * files, are not entries), with each file's contents, sorted by relative
 * path in byte order. The fingerprint and the image build context are both
 * made from that one snapshot, so an image tag always names exactly the
 * bytes that went into it, even if the directory changes meanwhile.
 * Bounds: FN_TREE_MAX_FILES entries, FN_TREE_MAX_BYTES of contents in
 * total, FN_TREE_MAX_DEPTH nested directories (a deeper one is refused
 * before it is opened); symbolic links are recorded (their target text),
 * never followed; any other kind of file (FIFO, socket, device) is an
 * error. Descriptors: at most FN_TREE_MAX_DEPTH + 2 open at once (one per
 * directory level and the file being read), every one closed on every
 * return, error or not.
 *
 * Thread-safety: a loaded tree is immutable; reading it is safe from any
 * thread.
 */
#ifndef RELAY_FN_TREE_H
#define RELAY_FN_TREE_H

#include <stddef.h>

#define FN_TREE_MAX_FILES 10000
#define FN_TREE_MAX_BYTES (256u * 1024 * 1024)
#define FN_TREE_MAX_DEPTH 32

enum fn_entry_kind { FN_ENTRY_FILE = 'f', FN_ENTRY_EXEC = 'x', FN_ENTRY_SYMLINK = 'l' };

struct fn_entry {
	char *path; /* relative, "events/created.py" */
	enum fn_entry_kind kind;
	char *data; /* contents, or the link target; NUL-terminated */
	size_t len;
};

struct fn_tree {
	struct fn_entry *v; /* sorted by path (strcmp) */
	size_t n;
	size_t bytes; /* sum of len */
};

/* Reads dir into *out. Returns 0, or -1 with a malloc'd message (naming the
 * offending relative path) in *err and *out empty. */
int fn_tree_load(const char *dir, struct fn_tree *out, char **err);
/* Adds or replaces one entry (tests and tools); keeps the order. Takes
 * copies. */
void fn_tree_put(struct fn_tree *t, const char *path, enum fn_entry_kind kind, const void *data,
		 size_t len);
/* The entry at path, or NULL. */
const struct fn_entry *fn_tree_get(const struct fn_tree *t, const char *path);
void fn_tree_free(struct fn_tree *t);

#endif
