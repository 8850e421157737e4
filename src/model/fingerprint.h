/*
 * A function's source tree in memory, and its fingerprint.
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
 * The fingerprint is SHA-256 over this byte string (all integers are
 * unsigned 64-bit big-endian, so no field can run into the next):
 *
 *   "relay-fingerprint-v1" NUL
 *   recipe digest (32 bytes: fingerprint_recipe(), below)
 *   entry count
 *   for each entry, in path byte order:
 *     kind byte: 'f' regular file, 'x' executable file, 'l' symbolic link
 *     path length, path bytes (relative, '/'-separated, no leading "./")
 *     content length, content bytes (the link target for 'l')
 *
 * template.yaml is an entry like any other (editing env values rebuilds by
 * design). The recipe digest covers everything else that shapes an image
 * (every runtime's name, base image, bootstrap, command, image environment,
 * dependency rules and generated files, plus the Dockerfile layout
 * version), so a Relay upgrade that changes a bootstrap yields new tags
 * instead of reusing stale images. Given the same Relay binary, the same
 * tree always has the same fingerprint, wherever it lives on disk and
 * whatever order the directory lists its entries in.
 *
 * Thread-safety: a loaded tree is immutable; every function here is safe
 * from any thread.
 */
#ifndef RELAY_FINGERPRINT_H
#define RELAY_FINGERPRINT_H

#include <stdbool.h>
#include <stddef.h>

#define FN_TREE_MAX_FILES 10000
#define FN_TREE_MAX_BYTES (256u * 1024 * 1024)
#define FN_TREE_MAX_DEPTH 32

#define FINGERPRINT_HEX_LEN 64
/* Bump when the Dockerfile layout in image.c changes meaning. */
#define FINGERPRINT_RECIPE_VERSION "image-recipe-v1"

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

/* SHA-256 of the recipe (see above); computed once, cached. */
void fingerprint_recipe(unsigned char out[32]);

/* The fingerprint of t as 64 lowercase hex digits plus NUL. */
void fingerprint_tree(const struct fn_tree *t, char out[FINGERPRINT_HEX_LEN + 1]);
/* Same with an explicit recipe digest: for stability tests that must not
 * change whenever a bootstrap does. */
void fingerprint_tree_with_recipe(const struct fn_tree *t, const unsigned char recipe[32],
				  char out[FINGERPRINT_HEX_LEN + 1]);

/* Convenience: load dir and fingerprint it. 0 or -1 with *err. */
int fingerprint_dir(const char *dir, char out[FINGERPRINT_HEX_LEN + 1], char **err);

#endif
