/*
 * Event patterns: compiled once when a template loads, matched against every
 * event.
 *
 * A pattern is a map of field conditions (docs/template.md "Patterns").
 * Each field's condition is one of:
 *   - a list of scalars: implicit equality, `status: [COMPLETED, FAILED]`;
 *   - a map whose keys are all operators (equals, prefix, suffix, exists,
 *     gt, gte, lt, lte, anything-but, equals-ignore-case, wildcard, cidr,
 *     numeric);
 *   - a map whose keys are all field names: nested conditions.
 * Wherever field names may appear (the pattern itself, a nested map, a
 * branch) `$or: [{...}, {...}]` may too: one of its branches must match,
 * besides the map's other fields.
 *
 * Validation decisions beyond the spec (each failure is one error line):
 *   - the pattern itself must be a map; missing or null is an error, `{}`
 *     matches every event; a nested empty map (`a: {}`) is an error, since it
 *     would silently match everything (use `exists: true` to test presence);
 *   - a field's condition may not be a bare scalar or null (write a list);
 *   - an empty list (as a condition or operand) is an error: it can never
 *     match;
 *   - `equals`, `prefix` and `suffix` take a list or a single scalar (a
 *     single value means a one-element list); list elements are scalars
 *     (string, number, boolean, null), prefix/suffix operands are strings
 *     (the empty string is allowed: it matches any string);
 *   - `exists` takes exactly true or false;
 *   - gt/gte/lt/lte take a number, or exactly `now()` / `now()+D` / `now()-D`
 *     with D a Go duration without its own sign or spaces (now()+0s is fine),
 *     singly or in a non-empty list; other strings, booleans, null and maps are
 *     errors;
 *   - equals-ignore-case, wildcard and cidr take a string or a non-empty
 *     list of strings; a wildcard may not hold two stars in a row, a
 *     backslash other than \* or \\, or more than
 *     PATTERN_MAX_WILDCARD_STARS stars (pattern_internal.h); a cidr is
 *     ADDRESS/BITS;
 *   - anything-but takes a scalar, a non-empty list of scalars, or a map of
 *     exactly one of prefix, suffix, equals-ignore-case, wildcard (its
 *     operands as above);
 *   - numeric takes a range, [op, number, op, number, ...] with op one of
 *     =, <, <=, >, >=, or a non-empty list of ranges;
 *   - $or takes a list of 2 to PATTERN_MAX_OR_BRANCHES non-empty maps, each
 *     one level deeper than the map holding it;
 *   - field names may not be empty; a map mixing operator and field keys is an
 *     error; patterns nest at most PATTERN_MAX_DEPTH maps deep.
 * A field literally named like an operator cannot be matched (the name
 * always means the operator; at the top level of a pattern it is an error,
 * since an operator needs a field).
 *
 * Matching: values in one operator's list are OR, sibling fields AND, the
 * operators of one field OR (a numeric range is one operand: its
 * comparisons are AND). A missing field fails every operator except
 * exists:false; extra fields are ignored; a parent that is an array, null or
 * a scalar counts as missing for its nested conditions. Equality is
 * type-preserving and numeric across integers and reals (exact for int64);
 * arrays and objects never equal a scalar operand. prefix/suffix compare the
 * bytes of string values only. Numeric comparisons need a JSON number.
 * Temporal comparisons parse the value as RFC 3339 (rfc3339.h) and compare
 * instants with nanosecond precision against now + offset. anything-but
 * with values matches a present scalar equal to none of them; with a
 * string operator, a string that operator does not match. cidr matches a
 * string that inet_pton reads as an address inside a range (IPv4 compared
 * as IPv4-mapped IPv6). Under match_arrays: elements
 * (PATTERN_ARRAYS_ELEMENTS) every operator but exists holds for an array
 * when it holds for one of its elements, and nested conditions under an
 * array hold when they hold for one element (an empty array counts as
 * missing).
 *
 * Cost: one match visits each pattern node at most once per event value
 * at its path, so it is O(pattern size × event size); $or branches are
 * tried in turn, never multiplied out; a wildcard costs O(value × operand)
 * (memmem per segment, no backtracking).
 *
 * Thread-safety: a compiled pattern and a pattern set are immutable after
 * creation and may be shared by any number of threads; matching allocates
 * nothing.
 */
#ifndef RELAY_PATTERN_H
#define RELAY_PATTERN_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/event.h"
#include "base/util.h"

#define PATTERN_MAX_DEPTH 32
/* Branches of one $or. */
#define PATTERN_MAX_OR_BRANCHES 64
/* Errors of one pattern described in full; the rest are counted in one
 * last line "<path>: N more errors not shown". */
#define PATTERN_MAX_MESSAGES 20

struct pattern;

/*
 * Compiles node (borrowed; NULL means the pattern key is absent) into a
 * matcher. path names the node in messages, e.g. "events[1].pattern".
 * Every problem found (the first PATTERN_MAX_MESSAGES of them) is appended
 * to errors (when not NULL) as one line "<path>: <problem>\n", e.g.
 *   events[1].pattern.new_image.created_at.gt: invalid temporal operand
 *   "now-5m" (use now() or now()±<Go duration>)
 * Returns 0 with *out set (free with pattern_free), or -n where n >= 1 is
 * the number of errors, with *out NULL.
 */
int pattern_compile(const json_t *node, const char *path, struct pattern **out, struct buf *errors);
void pattern_free(struct pattern *p);

/* How conditions treat an array in the event (template key match_arrays). */
enum pattern_arrays {
	PATTERN_ARRAYS_VALUES,	 /* an array is one value (pattern_compile's) */
	PATTERN_ARRAYS_ELEMENTS, /* a condition holds when one element satisfies it */
};

/* pattern_compile, with the array mode given. */
int pattern_compile_arrays(const json_t *node, const char *path, enum pattern_arrays arrays,
			   struct pattern **out, struct buf *errors);
/* Whether p was compiled with PATTERN_ARRAYS_ELEMENTS. */
bool pattern_elements(const struct pattern *p);

/* The path of field key[0..klen) under path, as messages show it: path +
 * ".key", or path + "[\"key\"]" (escaped, cut at 80 bytes) when the key is
 * not a plain word of at most 80 bytes, so a path never holds ": " or a
 * line break and grows by at most ~90 bytes per level. malloc'd. */
char *pattern_path_key(const char *path, const char *key, size_t klen);

/* Whether event matches p, with now() = now_unix_ns (nanoseconds since the
 * Unix epoch, UTC). Never fails: any event shape is just a match or not. */
bool pattern_match(const struct pattern *p, const struct event *ev, int64_t now_unix_ns);

/* Convenience for callers holding a jansson event (slower: converts it).
 * A non-object never matches. */
bool pattern_match_json(const struct pattern *p, const json_t *event, int64_t now_unix_ns);

/*
 * A pattern set matches one event against many patterns at once. Rules that
 * have a required equality condition (a field whose only operator is
 * equality, at any depth, outside $or) are indexed by (field path, value)
 * under their most selective such field; only the rules indexed under the
 * event's own values, plus the rules without such a field, are evaluated.
 * For a path where a PATTERN_ARRAYS_ELEMENTS rule is filed, the event's
 * values are looked up through every array on the way (each event value
 * visited once per such path); when that names more candidates than the
 * set has rules, every rule is evaluated.
 */
struct pattern_set;

/* Builds a set over patterns[0..n). Pattern i gets id i: ids are the
 * execution order (functions by name, rules in file order). The patterns are
 * borrowed, never NULL (template_parse leaves no rule without its pattern)
 * and must outlive the set. Never fails. */
struct pattern_set *pattern_set_new(const struct pattern *const *patterns, size_t n);
void pattern_set_free(struct pattern_set *set);
size_t pattern_set_size(const struct pattern_set *set);
/* Rules that the index cannot narrow (evaluated for every event). */
size_t pattern_set_unindexed(const struct pattern_set *set);
/* Comparisons and allocations pattern_set_new made for this set: at most
 * c · m · log2(m) for m required-equality values over all patterns (a
 * bound tests check, since building is sorting and binary search). */
uint64_t pattern_set_build_work(const struct pattern_set *set);

/* Stores the ids of the matching patterns in ascending order into ids, which
 * must have room for pattern_set_size(set) entries, and returns how many.
 * Equivalent to calling pattern_match on every pattern in order. */
size_t pattern_set_match(const struct pattern_set *set, const struct event *ev, int64_t now_unix_ns,
			 uint32_t *ids);

#endif
