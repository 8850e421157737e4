/*
 * A bounded YAML reader: one document read into a small immutable tree.
 *
 * libfyaml's event parser does the YAML; this module builds the tree itself
 * so that every cost is bounded before it is paid:
 *
 *   - nodes: every scalar, sequence and mapping counts (keys included), and
 *     an alias counts as all the nodes it stands for. The total over the
 *     whole document is checked against max_nodes at each event, before the
 *     node is allocated; an alias is never copied, it shares the anchored
 *     node, whose expanded size is computed once when it ends. So a walk
 *     over the tree that follows aliases (to_json, the field checks) visits
 *     at most max_nodes nodes, whatever the aliases do.
 *   - text: the same for the bytes of every scalar (keys included), an
 *     alias counting all the text of the node it stands for, against
 *     max_bytes. A walk that copies the scalars it visits (jansson strings,
 *     compiled operands, env values) copies at most max_bytes bytes: one
 *     600 KB scalar aliased 1,000 times is 600 MB of copies, refused at the
 *     alias that crosses the bound.
 *   - depth: collections nest at most max_depth levels, counted with aliases
 *     expanded (an alias brings its node's own height along), so every
 *     recursive walk is bounded too.
 *   - duplicate mapping keys (same scalar text, whatever the quoting or tag)
 *     are refused as each key is read: O(log n) per key, not libfyaml's
 *     linear rescan of the mapping (quadratic: 20,000 keys took 39 s).
 *   - an alias resolves to the most recent anchor of its name before it,
 *     once, through a balanced tree (libfyaml resolves by scanning every
 *     anchor on each lookup: quadratic in anchors). An alias without an
 *     earlier anchor, or inside the node its anchor names (a cycle), is an
 *     error.
 *
 *   - lines: at most max_line bytes. libfyaml holds back every token of a
 *     line while an implicit key may still be pending on it (`- [1,1,...]`
 *     or `x: [[1,1,...]]` on one line: ~400 bytes of memory per input byte,
 *     355 MiB for a 1 MiB line), so the line length bounds its queue.
 *
 * Memory is proportional to the nodes read (about 60 bytes each plus the
 * text), never to the nodes or text after expansion. Only the first document of a
 * stream is read, as libfyaml's document builder does.
 *
 * Thread-safety: a ydoc is immutable once read; yaml_parse may run in any
 * number of threads at once.
 */
#ifndef RELAY_YAML_H
#define RELAY_YAML_H

#include <stddef.h>
#include <stdint.h>

enum ynode_type { YN_SCALAR, YN_SEQ, YN_MAP };

/* A scalar's explicit tag, as far as the core schema cares. */
enum ytag { YT_NONE, YT_STR, YT_INT, YT_FLOAT, YT_BOOL, YT_NULL, YT_OTHER };

struct ynode {
	uint8_t type;	/* enum ynode_type */
	uint8_t tag;	/* enum ytag (scalars) */
	uint8_t plain;	/* scalar written plain: neither quoted nor a block scalar */
	uint8_t height; /* collection levels in this node, aliases expanded */
	uint32_t line;	/* 1-based position of the node's first token */
	uint32_t col;
	uint32_t size;	/* nodes in this node, itself included, aliases expanded */
	uint32_t bytes; /* bytes of scalar text in this node, aliases expanded */
	uint32_t n;	/* sequence: items; mapping: pairs */
	union {
		struct {
			const char *text; /* NUL-terminated, may hold NUL bytes: use len */
			size_t len;
		} s;
		/* sequence: items[0..n); mapping: key, value, key, value... (2n) */
		struct ynode **kids;
	} u;
};

struct yaml_doc;

struct ylimits {
	uint32_t nodes; /* in the document, aliases expanded */
	int depth;	/* nested collections, aliases expanded (at most 255) */
	size_t line;	/* bytes in one line, its break excluded */
	uint32_t bytes; /* bytes of scalar text in the document, aliases expanded */
};

/*
 * Reads the first document of text[0..len) (which must be valid UTF-8
 * without NUL bytes: libfyaml 0.7 can loop on truncated sequences).
 * Returns 0 with a new document in *out (its root NULL when the text holds
 * no document, e.g. only comments), or -1 with one malloc'd error line in
 * *err, which starts with "invalid YAML at line L, column C: " or with
 * name + ": " (e.g. "template.yaml: more than 100000 nodes ...", or
 * "template.yaml: more than 4194304 bytes of text with aliases expanded
 * (at line L, column C)"). Allocations that fail abort (util.h's x*);
 * none is ever taken for an empty value.
 */
int yaml_parse(const char *text, size_t len, const char *name, const struct ylimits *lim,
	       struct yaml_doc **out, char **err);
const struct ynode *yaml_root(const struct yaml_doc *d);
/* Nodes in the document with aliases expanded (the bound checked). */
uint32_t yaml_nodes(const struct yaml_doc *d);
/* Bytes of scalar text in the document with aliases expanded (the bound
 * checked). */
uint32_t yaml_bytes(const struct yaml_doc *d);
/* Key and anchor comparisons made while reading it: O(n log n) for n
 * nodes, a bound tests check. */
uint64_t yaml_work(const struct yaml_doc *d);
void yaml_free(struct yaml_doc *d);

#endif
