/*
 * Events: the JSON object carried in a stream message's `event` field.
 *
 * Relay decodes each event once into a compact read-only tree (struct event)
 * that the pattern matcher walks. It does not use jansson for this: jansson
 * builds a hash table per object and allocates per value, which caps a 1 KB
 * event at about 70,000 decodes per second on these machines; this decoder is
 * one pass into an arena and several times faster. event_from_json() converts a
 * jansson tree for callers that already hold one.
 *
 * Decoding rules (strict RFC 8259, like Go's encoding/json):
 * - at most EVENT_MAX_BYTES bytes of text and EVENT_MAX_DEPTH levels of
 *   nested arrays/objects, otherwise EVENT_ERR_TOO_LARGE / EVENT_ERR_TOO_DEEP;
 * - the text must be valid UTF-8 without NUL bytes (EVENT_ERR_NOT_TEXT:
 *   a Redis field value is always a byte string, so "not a string" means
 *   binary data);
 * - one JSON value, optional surrounding whitespace, no BOM, no comments, no
 *   trailing commas, no NaN/Infinity (EVENT_ERR_INVALID_JSON);
 * - the value must be an object (EVENT_ERR_NOT_OBJECT);
 * - integers that fit in int64 stay exact integers; other integers and all
 *   numbers with a fraction or exponent are doubles; a number beyond the
 *   double range (1e400) is invalid JSON, as in Go;
 * - "\u0000" is allowed inside strings (lengths are explicit); an unpaired
 *   surrogate escape becomes U+FFFD, as in Go;
 * - duplicate object keys are accepted and the last one wins, which is what
 *   the Python and Node handlers (and Go's map decoding) see for that event.
 *
 * Cost, whatever the text: time linear in its length, except that each object
 * of n > 16 members gets an index costing at most 33n probes and n log2 n
 * comparisons even when its keys were chosen to collide (event.c, "object
 * index"); a 1 MiB event peaks at about 35 MB of memory (measured: an array
 * of empty objects), about 30 bytes per byte of text.
 *
 * Ownership: an event owns all of its values; event_free releases them.
 * A decoded event is immutable, so it may be read from several threads.
 */
#ifndef RELAY_EVENT_H
#define RELAY_EVENT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EVENT_MAX_BYTES (1024 * 1024)
#define EVENT_MAX_DEPTH 128

enum event_err {
	EVENT_OK = 0,
	EVENT_ERR_MISSING = -1,	     /* the message has no `event` field */
	EVENT_ERR_NOT_TEXT = -2,     /* the field is binary: invalid UTF-8 or a NUL byte */
	EVENT_ERR_INVALID_JSON = -3, /* the text is not one valid JSON value */
	EVENT_ERR_NOT_OBJECT = -4,   /* valid JSON, but not an object */
	EVENT_ERR_TOO_LARGE = -5,    /* more than EVENT_MAX_BYTES bytes */
	EVENT_ERR_TOO_DEEP = -6,     /* nested deeper than EVENT_MAX_DEPTH */
};

/* A short stable name for an error code ("missing", "not_text",
 * "invalid_json", "not_object", "too_large", "too_deep"), for logs and DLQ
 * reasons. Never NULL. */
const char *event_err_name(int err);

enum event_type {
	EVENT_NULL,
	EVENT_FALSE,
	EVENT_TRUE,
	EVENT_INT,    /* u.i, exact */
	EVENT_REAL,   /* u.d, finite */
	EVENT_STRING, /* u.str, n bytes of UTF-8, may contain NUL, NUL-terminated */
	EVENT_ARRAY,  /* u.items, n values */
	EVENT_OBJECT, /* u.obj, n members in document order */
};

struct event_member;
struct event_object;

/* One JSON value. Read it, never write it; it lives as long as its event. */
struct event_value {
	enum event_type type;
	size_t n;
	union {
		int64_t i;
		double d;
		const char *str;
		const struct event_value *items;
		const struct event_object *obj;
	} u;
};

struct event_member {
	const char *key; /* klen bytes, NUL-terminated */
	size_t klen;
	struct event_value value;
};

struct event;

/*
 * Decodes a stream message. fields holds nfields alternating names and
 * values (as XREADGROUP returns them) with their byte lengths in lens; a NULL
 * entry is a value that is not a byte string (a nil reply), which counts as
 * EVENT_ERR_NOT_TEXT for the event field. When `event` occurs more than once
 * the last occurrence is used (Redis allows repeated field names; go-redis
 * kept the last). A trailing name without a value is ignored.
 *
 * Returns EVENT_OK with *out set (free with event_free), or a negative
 * enum event_err with *reason set to a malloc'd one-line explanation when
 * reason is not NULL (free it). Thread-safe.
 */
int event_decode(const char *const *fields, const size_t *lens, size_t nfields, struct event **out,
		 char **reason);

/* Decodes JSON text (the value of the `event` field, or the EVENT argument
 * of `relay function match`). Same rules, results and ownership as
 * event_decode, without EVENT_ERR_MISSING. */
int event_parse_json(const char *text, size_t len, struct event **out, char **reason);

/* Converts a jansson object tree (borrowed) into an event. Returns
 * EVENT_OK, EVENT_ERR_NOT_OBJECT when json is not an object, or
 * EVENT_ERR_TOO_DEEP. */
int event_from_json(const json_t *json, struct event **out);

void event_free(struct event *ev);

/* The root object (borrowed from ev). */
const struct event_value *event_root(const struct event *ev);

/* The member named by the klen bytes at key inside obj (the last one when
 * the key is repeated), or NULL when obj is NULL, not an object, or has no
 * such member. Borrowed. */
const struct event_value *event_get(const struct event_value *obj, const char *key, size_t klen);

/* The i-th member of an object in document order (NULL when out of range). */
const struct event_member *event_member_at(const struct event_value *obj, size_t i);

/*
 * For tests and benchmarks: the work the calling thread has spent on object
 * indexes (building them and event_get) since the last reset. Indexing an
 * object of n members costs at most 33n probes (each with at most one key
 * comparison), 8n moves and n + n log2 n further comparisons, whatever its
 * keys (see event.c, "object index").
 */
struct event_index_stats {
	uint64_t probes;   /* hash table slots visited */
	uint64_t compares; /* key comparisons (equal hash tags, sorting, bisection) */
	uint64_t moves;	   /* entries moved by radix sort passes */
	uint64_t sorted;   /* objects indexed by a sorted array: keys collided */
};

/* Copies the calling thread's counters into *out; zeroes them when reset. */
void event_index_stats(struct event_index_stats *out, bool reset);

/* For tests and benchmarks only: replaces the process's random 128-bit hash
 * key with a known one, as if an attacker had learnt it. Not thread-safe;
 * call it before any event exists. */
void event_hash_key_for_tests(const unsigned char key[16]);

#endif
