#include "engine/registry.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

struct registry {
	pthread_mutex_t lock;
	struct snapshot *cur;
	/* Snapshots replaced but still referenced by in-flight work. */
	struct snapshot **old;
	size_t nold;
};

static struct snapshot *snapshot_empty(void)
{
	struct snapshot *s = xcalloc(1, sizeof *s);
	s->set = pattern_set_new(NULL, 0);
	return s;
}

struct registry *registry_new(void)
{
	struct registry *r = xcalloc(1, sizeof *r);
	pthread_mutex_init(&r->lock, NULL);
	r->cur = snapshot_empty();
	r->cur->refs = 1; /* the registry's own reference */
	return r;
}

static void fn_version_free(struct fn_version *fv)
{
	function_free(fv->fn);
	free(fv->image);
	free(fv->fingerprint);
	free(fv);
}

/* Called with the lock held when a snapshot's last reference goes. */
static void snapshot_destroy(struct snapshot *s)
{
	for (size_t i = 0; i < s->nfns; i++)
		if (--s->fns[i]->refs == 0)
			fn_version_free(s->fns[i]);
	free(s->fns);
	free(s->rules);
	pattern_set_free(s->set);
	free(s->pats);
	free(s);
}

void registry_free(struct registry *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	if (--r->cur->refs == 0)
		snapshot_destroy(r->cur);
	for (size_t i = 0; i < r->nold; i++)
		snapshot_destroy(r->old[i]);
	free(r->old);
	pthread_mutex_unlock(&r->lock);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

struct snapshot *registry_acquire(struct registry *r)
{
	pthread_mutex_lock(&r->lock);
	struct snapshot *s = r->cur;
	s->refs++;
	pthread_mutex_unlock(&r->lock);
	return s;
}

void registry_release(struct registry *r, struct snapshot *s)
{
	pthread_mutex_lock(&r->lock);
	if (--s->refs == 0) {
		for (size_t i = 0; i < r->nold; i++) {
			if (r->old[i] == s) {
				r->old[i] = r->old[--r->nold];
				break;
			}
		}
		snapshot_destroy(s);
	}
	pthread_mutex_unlock(&r->lock);
}

static int fv_cmp(const void *a, const void *b)
{
	const struct fn_version *x = *(struct fn_version *const *)a;
	const struct fn_version *y = *(struct fn_version *const *)b;
	return strcmp(x->fn->name, y->fn->name);
}

void registry_publish(struct registry *r, struct fn_version **fvs, size_t n)
{
	struct snapshot *s = xcalloc(1, sizeof *s);
	s->fns = fvs;
	s->nfns = n;
	if (n)
		qsort(s->fns, n, sizeof *s->fns, fv_cmp);
	for (size_t i = 0; i < n; i++) {
		s->nrules += s->fns[i]->fn->tpl->nrules;
		s->nkeyed += s->fns[i]->fn->tpl->key.path != NULL;
	}
	s->rules = xcalloc(s->nrules + 1, sizeof *s->rules);
	const struct pattern **pats = xcalloc(s->nrules + 1, sizeof *pats);
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		const struct template *t = s->fns[i]->fn->tpl;
		for (size_t j = 0; j < t->nrules; j++, k++) {
			s->rules[k].fv = s->fns[i];
			s->rules[k].rule = &t->rules[j];
			pats[k] = t->rules[j].pattern;
		}
	}
	s->set = pattern_set_new(pats, s->nrules);
	s->pats = pats;
	s->refs = 1;

	pthread_mutex_lock(&r->lock);
	for (size_t i = 0; i < n; i++)
		s->fns[i]->refs++;
	struct snapshot *prev = r->cur;
	r->cur = s;
	if (--prev->refs == 0) {
		snapshot_destroy(prev);
	} else {
		r->old = xrealloc(r->old, sizeof *r->old * (r->nold + 1));
		r->old[r->nold++] = prev;
	}
	pthread_mutex_unlock(&r->lock);
}

struct fn_version *registry_fn_version_new(struct function *fn, char *image, char *fingerprint)
{
	struct fn_version *fv = xcalloc(1, sizeof *fv);
	fv->fn = fn;
	fv->image = image;
	fv->fingerprint = fingerprint;
	return fv;
}

struct fn_version *registry_snapshot_find(const struct snapshot *s, const char *name)
{
	size_t lo = 0, hi = s->nfns;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(s->fns[mid]->fn->name, name);
		if (c == 0)
			return s->fns[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static void each_image(const struct snapshot *s, void (*fn)(const char *, void *), void *ctx)
{
	for (size_t i = 0; i < s->nfns; i++)
		if (s->fns[i]->image)
			fn(s->fns[i]->image, ctx);
}

void registry_images_in_use(struct registry *r, void (*fn)(const char *image, void *ctx), void *ctx)
{
	pthread_mutex_lock(&r->lock);
	each_image(r->cur, fn, ctx);
	for (size_t i = 0; i < r->nold; i++)
		each_image(r->old[i], fn, ctx);
	pthread_mutex_unlock(&r->lock);
}
