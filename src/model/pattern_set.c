/*
 * The pattern-set index (pattern.h, "pattern sets").
 *
 * Matching 3000 rules one by one costs 3000 walks per event. Most rules pin
 * at least one field to a few values (`table_name: [users]`), so a set
 * picks, for each rule, its most selective required-equality field (the
 * one whose values are shared by the fewest rules) and files the rule under
 * (field path, canonical value). For an event it looks up the event's own
 * value at each indexed path, evaluates only those rules plus the rules
 * with no such field, and returns them in id order. Canonical values make
 * the index agree with type-preserving numeric equality: an integral real
 * within int64 range is filed as that integer, so 5 and 5.0 meet.
 */
#include "model/pattern.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/pattern_internal.h"

/* A value as the index sees it: numbers that are equal compare equal. */
struct ckey {
	enum scalar_kind kind; /* SC_REAL only for non-integral or huge reals */
	int64_t i;
	double d;
	const char *s;
	size_t len;
};

static bool canon_real(double d, struct ckey *k)
{
	if (d >= -9223372036854775808.0 && d < 9223372036854775808.0 && d == trunc(d)) {
		k->kind = SC_INT;
		k->i = (int64_t)d;
	} else {
		k->kind = SC_REAL;
		k->d = d;
	}
	return true;
}

static bool canon_event(const struct event_value *v, struct ckey *k)
{
	memset(k, 0, sizeof *k);
	switch (v->type) {
	case EVENT_NULL: k->kind = SC_NULL; return true;
	case EVENT_TRUE: k->kind = SC_TRUE; return true;
	case EVENT_FALSE: k->kind = SC_FALSE; return true;
	case EVENT_INT:
		k->kind = SC_INT;
		k->i = v->u.i;
		return true;
	case EVENT_REAL: return canon_real(v->u.d, k);
	case EVENT_STRING:
		k->kind = SC_STRING;
		k->s = v->u.str;
		k->len = v->n;
		return true;
	default: return false; /* arrays and objects equal no scalar */
	}
}

static void canon_scalar(const struct scalar *s, struct ckey *k)
{
	memset(k, 0, sizeof *k);
	k->kind = s->kind;
	if (s->kind == SC_INT)
		k->i = s->i;
	else if (s->kind == SC_REAL)
		canon_real(s->d, k);
	else if (s->kind == SC_STRING) {
		k->s = s->s;
		k->len = s->len;
	}
}

/* Total order on index values: kind, then value (NaN, which no template
 * operand can hold, after every other real). */
static int ckey_cmp(const struct ckey *a, const struct ckey *b)
{
	if (a->kind != b->kind)
		return a->kind < b->kind ? -1 : 1;
	switch (a->kind) {
	case SC_INT: return (a->i > b->i) - (a->i < b->i);
	case SC_REAL:
		if (isnan(a->d) || isnan(b->d))
			return isnan(a->d) - isnan(b->d);
		return (a->d > b->d) - (a->d < b->d);
	case SC_STRING: {
		int c = memcmp(a->s, b->s, a->len < b->len ? a->len : b->len);
		return c ? c : (a->len > b->len) - (a->len < b->len);
	}
	default: return 0;
	}
}

struct segment {
	const char *key;
	size_t klen;
};

static int segs_cmp(const struct segment *a, size_t na, const struct segment *b, size_t nb)
{
	for (size_t i = 0; i < na && i < nb; i++) {
		size_t n = a[i].klen < b[i].klen ? a[i].klen : b[i].klen;
		int c = memcmp(a[i].key, b[i].key, n);
		if (c || a[i].klen != b[i].klen)
			return c ? c : (a[i].klen > b[i].klen) - (a[i].klen < b[i].klen);
	}
	return (na > nb) - (na < nb);
}

/* One (path, value) the index knows, in a sorted array: a lookup is a
 * binary search (no hash, so no input can make it slow). */
struct entry {
	uint32_t path;
	struct ckey key;    /* strings borrowed from the patterns */
	uint32_t count;	    /* rule values that could be filed here (selectivity) */
	uint32_t first, n;  /* the filed rules: set->ids[first..first+n), ascending */
	uint32_t last_rule; /* while building: the rule filed last, +1 */
};

struct ipath {
	struct segment *segs; /* borrowed from the set's segment pool */
	size_t nseg;
	uint32_t lo, hi; /* its entries: entries[lo..hi) */
	bool probed;	 /* some rule is filed under this path */
	bool arrays;	 /* one of them is match_arrays: elements: look into arrays */
};

struct pattern_set {
	const struct pattern *const *patterns;
	size_t n;
	struct segment *pool; /* every indexed path's segments */
	struct entry *entries;
	size_t nentries;
	uint32_t *ids;
	struct ipath *paths;
	size_t npaths;
	uint32_t *probe; /* ids of the probed paths */
	size_t nprobe;
	uint32_t *unindexed;
	size_t nunindexed;
	uint64_t work; /* comparisons and allocations made building it */
};

/* A required-equality field of one rule. */
struct req {
	uint32_t rule;
	uint32_t path;
	size_t seg; /* first segment in the pool */
	size_t nseg;
	const struct cond *cd;
};

struct builder {
	struct pattern_set *set;
	struct segment *pool;
	size_t npool, cappool;
	struct req *reqs;
	size_t nreqs, capreqs;
};

/* Grows *v (of *cap elements of size sz) to hold need: doubling, so n
 * appends cost O(n) copies and O(log n) allocations. */
static void grow(struct pattern_set *set, void **v, size_t *cap, size_t need, size_t sz)
{
	if (need <= *cap)
		return;
	size_t c = *cap ? *cap : 16;
	while (c < need)
		c *= 2;
	*v = xrealloc(*v, c * sz);
	*cap = c;
	set->work++;
}

/* Whether a leaf's one operator is equality: the field must then hold one
 * of its values. */
static bool only_equality(const struct cond *cd)
{
	return cd->neq > 0 && cd->exists < 0 && cd->npre == 0 && cd->nsuf == 0 && cd->ncmp == 0 &&
	       cd->nfold == 0 && cd->nglob == 0 && cd->ncidr == 0 && cd->nrng == 0 &&
	       cd->neg == NEG_NONE;
}

static void collect_reqs(struct builder *b, uint32_t rule, const struct node *nd,
			 struct segment *stack, size_t depth)
{
	for (size_t i = 0; i < nd->n; i++) {
		const struct cond *cd = &nd->conds[i];
		stack[depth].key = cd->key;
		stack[depth].klen = cd->klen;
		if (cd->nested) {
			collect_reqs(b, rule, cd->nested, stack, depth + 1);
		} else if (only_equality(cd)) {
			grow(b->set, (void **)&b->reqs, &b->capreqs, b->nreqs + 1, sizeof *b->reqs);
			grow(b->set, (void **)&b->pool, &b->cappool, b->npool + depth + 1,
			     sizeof *b->pool);
			struct req *r = &b->reqs[b->nreqs++];
			r->rule = rule;
			r->seg = b->npool;
			r->nseg = depth + 1;
			r->cd = cd;
			memcpy(b->pool + b->npool, stack, r->nseg * sizeof *stack);
			b->npool += r->nseg;
		}
	}
}

struct sort_ctx {
	const struct segment *pool;
	const struct req *reqs;
	uint64_t *work;
};

static int req_path_cmp(const void *x, const void *y, void *arg)
{
	struct sort_ctx *sc = arg;
	const struct req *a = &sc->reqs[*(const uint32_t *)x], *b = &sc->reqs[*(const uint32_t *)y];
	(*sc->work)++;
	return segs_cmp(sc->pool + a->seg, a->nseg, sc->pool + b->seg, b->nseg);
}

/* Gives every req the id of its path; equal paths share one. */
static void intern_paths(struct builder *b)
{
	struct pattern_set *set = b->set;
	uint32_t *order = xmalloc((b->nreqs ? b->nreqs : 1) * sizeof *order);
	for (size_t i = 0; i < b->nreqs; i++)
		order[i] = (uint32_t)i;
	struct sort_ctx sc = {b->pool, b->reqs, &set->work};
	qsort_r(order, b->nreqs, sizeof *order, req_path_cmp, &sc);
	set->paths = xcalloc(b->nreqs ? b->nreqs : 1, sizeof *set->paths);
	for (size_t i = 0; i < b->nreqs; i++) {
		struct req *r = &b->reqs[order[i]];
		if (i == 0 || req_path_cmp(&order[i - 1], &order[i], &sc) != 0) {
			struct ipath *p = &set->paths[set->npaths++];
			p->segs = b->pool + r->seg;
			p->nseg = r->nseg;
		}
		r->path = (uint32_t)(set->npaths - 1);
	}
	free(order);
	set->work += 3;
}

static int entry_cmp(const void *x, const void *y, void *arg)
{
	const struct entry *a = x, *b = y;
	(*(uint64_t *)arg)++;
	if (a->path != b->path)
		return a->path < b->path ? -1 : 1;
	return ckey_cmp(&a->key, &b->key);
}

/* Every (path, value) of every req, sorted and merged, counting the rule
 * values that name each; each path gets its range of entries. */
static void build_entries(struct builder *b)
{
	struct pattern_set *set = b->set;
	size_t total = 0;
	for (size_t r = 0; r < b->nreqs; r++)
		total += b->reqs[r].cd->neq;
	struct entry *all = xcalloc(total ? total : 1, sizeof *all);
	size_t k = 0;
	for (size_t r = 0; r < b->nreqs; r++)
		for (size_t v = 0; v < b->reqs[r].cd->neq; v++, k++) {
			all[k].path = b->reqs[r].path;
			canon_scalar(&b->reqs[r].cd->eq[v], &all[k].key);
		}
	qsort_r(all, total, sizeof *all, entry_cmp, &set->work);
	size_t m = 0;
	for (size_t i = 0; i < total; i++) {
		if (m == 0 || entry_cmp(&all[m - 1], &all[i], &set->work) != 0)
			all[m++] = all[i];
		all[m - 1].count++;
	}
	set->entries = all;
	set->nentries = m;
	for (size_t i = 0; i < m; i++) {
		struct ipath *p = &set->paths[all[i].path];
		if (p->lo == p->hi)
			p->lo = (uint32_t)i;
		p->hi = (uint32_t)i + 1;
	}
	set->work += 1;
}

/* The entry (path, k), or NULL; O(log entries). */
static struct entry *entry_find(const struct pattern_set *set, uint32_t path, const struct ckey *k,
				uint64_t *work)
{
	const struct ipath *p = &set->paths[path];
	size_t lo = p->lo, hi = p->hi;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = ckey_cmp(&set->entries[mid].key, k);
		if (work)
			(*work)++;
		if (c == 0)
			return &set->entries[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static struct entry *req_entry(struct pattern_set *set, const struct req *r, size_t v)
{
	struct ckey k;
	canon_scalar(&r->cd->eq[v], &k);
	return entry_find(set, r->path, &k, &set->work);
}

/* Files each rule under its most selective required-equality field (the
 * first of the cheapest, in pattern order), or lists it as unindexed. */
static void file_rules(struct builder *b, const size_t *first_req)
{
	struct pattern_set *set = b->set;
	const struct req **best = xcalloc(set->n ? set->n : 1, sizeof *best);
	for (size_t i = 0; i < set->n; i++) {
		uint64_t best_cost = UINT64_MAX;
		for (size_t r = first_req[i]; r < first_req[i + 1]; r++) {
			uint64_t cost = 0;
			for (size_t v = 0; v < b->reqs[r].cd->neq; v++)
				cost += req_entry(set, &b->reqs[r], v)->count;
			if (cost < best_cost) {
				best_cost = cost;
				best[i] = &b->reqs[r];
			}
		}
	}
	/* Two passes: count each entry's rules, then place them, so the ids
	 * are one array. [1, 1.0] files a rule once. */
	size_t nids = 0;
	for (int pass = 0; pass < 2; pass++) {
		for (size_t e = 0; e < set->nentries; e++)
			set->entries[e].last_rule = 0;
		for (size_t i = 0; i < set->n; i++) {
			if (!best[i]) {
				if (pass == 0)
					set->unindexed[set->nunindexed++] = (uint32_t)i;
				continue;
			}
			set->paths[best[i]->path].probed = true;
			if (set->patterns[i]->elements)
				set->paths[best[i]->path].arrays = true;
			for (size_t v = 0; v < best[i]->cd->neq; v++) {
				struct entry *e = req_entry(set, best[i], v);
				if (e->last_rule == i + 1)
					continue;
				e->last_rule = (uint32_t)i + 1;
				if (pass == 0)
					e->n++;
				else
					set->ids[e->first + e->n++] = (uint32_t)i;
			}
		}
		if (pass == 0) {
			for (size_t e = 0; e < set->nentries; e++) {
				set->entries[e].first = (uint32_t)nids;
				nids += set->entries[e].n;
				set->entries[e].n = 0;
			}
			set->ids = xmalloc((nids ? nids : 1) * sizeof *set->ids);
		}
	}
	free(best);
	set->work += 2;
}

struct pattern_set *pattern_set_new(const struct pattern *const *patterns, size_t n)
{
	struct pattern_set *set = xcalloc(1, sizeof *set);
	struct builder b = {.set = set};
	struct segment stack[PATTERN_MAX_DEPTH + 1];
	size_t *first_req = xmalloc((n + 1) * sizeof *first_req);

	set->patterns = patterns;
	set->n = n;
	set->unindexed = xmalloc((n ? n : 1) * sizeof *set->unindexed);
	for (size_t i = 0; i < n; i++) {
		first_req[i] = b.nreqs;
		collect_reqs(&b, (uint32_t)i, &patterns[i]->root, stack, 0);
	}
	first_req[n] = b.nreqs;
	intern_paths(&b);
	build_entries(&b);
	file_rules(&b, first_req);
	set->pool = b.pool;
	set->probe = xmalloc((set->npaths ? set->npaths : 1) * sizeof *set->probe);
	for (size_t i = 0; i < set->npaths; i++)
		if (set->paths[i].probed)
			set->probe[set->nprobe++] = (uint32_t)i;
	free(b.reqs);
	free(first_req);
	set->work += 5;
	return set;
}

void pattern_set_free(struct pattern_set *set)
{
	if (!set)
		return;
	free(set->entries);
	free(set->ids);
	free(set->paths);
	free(set->pool);
	free(set->probe);
	free(set->unindexed);
	free(set);
}

size_t pattern_set_size(const struct pattern_set *set)
{
	return set->n;
}

size_t pattern_set_unindexed(const struct pattern_set *set)
{
	return set->nunindexed;
}

uint64_t pattern_set_build_work(const struct pattern_set *set)
{
	return set->work;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

/* The candidates of one event: ids[0..k), room for cap (the set's size). */
struct probe {
	const struct pattern_set *set;
	uint32_t path;
	uint32_t *ids;
	size_t k, cap;
	int sources;
	bool full; /* more than cap: every rule is a candidate */
};

/* Adds the rules filed under (path, v). */
static void probe_add(struct probe *pr, const struct event_value *v)
{
	struct ckey key;
	if (!canon_event(v, &key))
		return;
	const struct entry *e = entry_find(pr->set, pr->path, &key, NULL);
	if (!e || !e->n)
		return;
	if (pr->k + e->n > pr->cap) {
		pr->full = true;
		return;
	}
	memcpy(pr->ids + pr->k, pr->set->ids + e->first, e->n * sizeof *pr->ids);
	pr->k += e->n;
	pr->sources++;
}

/* The values at the path's segments s.. below v, looking into arrays at
 * every step as match_arrays: elements does (nested arrays flattened).
 * Visits each event value under v at most once. */
static void probe_arrays(struct probe *pr, const struct ipath *ip, size_t s,
			 const struct event_value *v)
{
	if (!v || pr->full)
		return;
	if (v->type == EVENT_ARRAY) {
		for (size_t i = 0; i < v->n; i++)
			probe_arrays(pr, ip, s, &v->u.items[i]);
	} else if (s < ip->nseg) {
		probe_arrays(pr, ip, s + 1, event_get(v, ip->segs[s].key, ip->segs[s].klen));
	} else {
		probe_add(pr, v);
	}
}

size_t pattern_set_match(const struct pattern_set *set, const struct event *ev, int64_t now_unix_ns,
			 uint32_t *ids)
{
	if (!ev)
		return 0;
	const struct event_value *root = event_root(ev);
	struct probe pr = {.set = set, .ids = ids, .k = set->nunindexed, .cap = set->n};
	pr.sources = pr.k > 0;
	if (pr.k)
		memcpy(ids, set->unindexed, pr.k * sizeof *ids);
	for (size_t p = 0; p < set->nprobe && !pr.full; p++) {
		const struct ipath *ip = &set->paths[set->probe[p]];
		pr.path = set->probe[p];
		if (ip->arrays) {
			probe_arrays(&pr, ip, 0, root);
			continue;
		}
		const struct event_value *v = root;
		for (size_t s = 0; s < ip->nseg && v; s++)
			v = event_get(v, ip->segs[s].key, ip->segs[s].klen);
		if (v)
			probe_add(&pr, v);
	}
	/* Looking into arrays may find a rule twice, or more candidates than
	 * rules: then every rule is one, once. */
	size_t k = pr.k;
	if (pr.full) {
		for (size_t i = 0; i < set->n; i++)
			ids[i] = (uint32_t)i;
		k = set->n;
	} else if (pr.sources > 1) {
		qsort(ids, k, sizeof *ids, cmp_u32);
	}
	size_t m = 0;
	uint32_t prev = UINT32_MAX; /* no id: a set holds fewer rules */
	for (size_t i = 0; i < k; i++) {
		uint32_t id = ids[i];
		if (id != prev && pattern_match(set->patterns[id], ev, now_unix_ns))
			ids[m++] = id;
		prev = id;
	}
	return m;
}
