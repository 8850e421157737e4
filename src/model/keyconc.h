/*
 * Per-key concurrency (template.yaml `key_concurrency:`, docs/template.md
 * "Per-key concurrency and order"): at most `limit` invocations of a
 * function run at once per value of one field of the event, across every
 * worker of the consumer group; with limit 1 a key's events run one at a
 * time in stream order. The engine keeps the per-key state in Redis
 * (engine/keyorder.h); this is the template side: the key's dotted path
 * and the limit, and the key value of an event.
 *
 * Pure data; immutable once parsed, shared by any thread.
 */
#ifndef RELAY_KEYCONC_H
#define RELAY_KEYCONC_H

#include <jansson.h>
#include <stddef.h>

#include "base/strlist.h"
#include "io/event.h"

/* A path at most this long, of at most this many segments. */
#define KEYCONC_PATH_MAX 256
#define KEYCONC_SEGS_MAX 16
/* limit from 1 to this. */
#define KEYCONC_LIMIT_MAX 10000
/* A key value longer than this is named by its SHA-256 in Redis keys. */
#define KEYCONC_VALUE_MAX 128

struct keyconc {
	char *path; /* "new_image.tenant_id"; NULL: the function has none */
	char **segs;
	size_t nsegs;
	int limit;
};

/*
 * The `key_concurrency:` value (JSON, converted from YAML by template.c): a
 * map of key (a dotted path, required) and limit (default 1). Each problem
 * is one line of errors starting with "key_concurrency"; returns 0 when
 * there was none, with *out filled (keyconc_free frees it either way).
 */
int keyconc_parse(const json_t *j, struct keyconc *out, struct strlist *errors);
void keyconc_free(struct keyconc *k);

/*
 * The key value of ev under k: a string as it is, an integer in decimal, a
 * boolean as true or false, in a new string (*len bytes, may contain NUL).
 * NULL when the path is absent or leads to null, a number with a fraction,
 * a list or a map: such an event is not limited.
 */
char *keyconc_value(const struct keyconc *k, const struct event *ev, size_t *len);

#endif
