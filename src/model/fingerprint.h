/*
 * A function's fingerprint: SHA-256 over its source tree as fn_tree_load
 * read it (fn_tree.h).
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
 * Thread-safety: every function here is safe from any thread.
 */
#ifndef RELAY_FINGERPRINT_H
#define RELAY_FINGERPRINT_H

#include <stdbool.h>
#include <stddef.h>

#include "model/fn_tree.h"

#define FINGERPRINT_HEX_LEN 64
/* Bump when the Dockerfile layout in image.c changes meaning. */
#define FINGERPRINT_RECIPE_VERSION "image-recipe-v1"

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
