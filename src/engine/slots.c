#include "engine/slots.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util.h"

struct fslot {
	char *name;
	int limit;
	int used;
	int deferred; /* invocations of it parked by a consumer (slots_defer) */
};

struct slots {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int limit;
	int used;
	int waiting; /* threads blocked in slots_acquire */
	struct fslot *fns;
	size_t nfns, cap;
	/* slots_on_release's callback, called under nlock (never while
	 * holding lock): once slots_on_release returns, the old one is not
	 * running and is never called again. */
	pthread_mutex_t nlock;
	void (*on_release)(void *ctx);
	void *on_release_ctx;
};

struct slots *slots_new(int global_limit)
{
	struct slots *s = xcalloc(1, sizeof *s);
	pthread_mutex_init(&s->lock, NULL);
	pthread_mutex_init(&s->nlock, NULL);
	cond_init_monotonic(&s->cond);
	s->limit = global_limit > 0 ? global_limit : 1;
	return s;
}

void slots_free(struct slots *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->nfns; i++)
		free(s->fns[i].name);
	free(s->fns);
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
	pthread_mutex_destroy(&s->nlock);
	free(s);
}

static struct fslot *find(struct slots *s, const char *name, int limit, bool create)
{
	for (size_t i = 0; i < s->nfns; i++)
		if (strcmp(s->fns[i].name, name) == 0)
			return &s->fns[i];
	if (!create)
		return NULL;
	if (s->nfns == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 16;
		s->fns = xrealloc(s->fns, s->cap * sizeof *s->fns);
	}
	struct fslot *f = &s->fns[s->nfns++];
	f->name = xstrdup(name);
	f->limit = limit > 0 ? limit : 1;
	f->used = 0;
	f->deferred = 0;
	return f;
}

/* Whether a parked invocation waits on the global limit alone (its
 * function has room); lock held. */
static bool deferred_on_global(const struct slots *s)
{
	for (size_t i = 0; i < s->nfns; i++)
		if (s->fns[i].deferred > 0 && s->fns[i].used < s->fns[i].limit)
			return true;
	return false;
}

int slots_try_acquire(struct slots *s, const char *function, int function_limit)
{
	pthread_mutex_lock(&s->lock);
	struct fslot *f = find(s, function, function_limit, true);
	int rc = s->used < s->limit && f->used < f->limit ? 0 : -1;
	if (rc == 0) {
		s->used++;
		f->used++;
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

void slots_defer(struct slots *s, const char *function, int function_limit, int delta)
{
	pthread_mutex_lock(&s->lock);
	struct fslot *f = find(s, function, function_limit, true);
	f->deferred += delta;
	if (f->deferred < 0)
		f->deferred = 0;
	pthread_mutex_unlock(&s->lock);
}

void slots_on_release(struct slots *s, void (*fn)(void *ctx), void *ctx)
{
	pthread_mutex_lock(&s->nlock);
	s->on_release = fn;
	s->on_release_ctx = ctx;
	pthread_mutex_unlock(&s->nlock);
}

/* The release callback (after lock is given back). */
static void notify(struct slots *s)
{
	pthread_mutex_lock(&s->nlock);
	if (s->on_release)
		s->on_release(s->on_release_ctx);
	pthread_mutex_unlock(&s->nlock);
}

int slots_acquire(struct slots *s, const char *function, int function_limit, int64_t wait_ns,
		  const atomic_int *stop, bool *waited)
{
	struct timespec now, deadline;
	clock_gettime(CLOCK_MONOTONIC, &now);
	int64_t end = (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec + wait_ns;
	deadline.tv_sec = end / 1000000000LL;
	deadline.tv_nsec = end % 1000000000LL;
	*waited = false;
	int rc = 0;
	pthread_mutex_lock(&s->lock);
	struct fslot *f = find(s, function, function_limit, true);
	while (s->used >= s->limit || f->used >= f->limit) {
		if (stop && atomic_load(stop)) {
			rc = -1;
			break;
		}
		*waited = true;
		s->waiting++;
		int e = pthread_cond_timedwait(&s->cond, &s->lock, &deadline);
		s->waiting--;
		/* the array may have grown: look the slot up again */
		f = find(s, function, function_limit, true);
		if (e == ETIMEDOUT && (s->used >= s->limit || f->used >= f->limit)) {
			rc = -1;
			break;
		}
	}
	if (rc == 0) {
		s->used++;
		f->used++;
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

int slots_try_acquire_spare(struct slots *s)
{
	pthread_mutex_lock(&s->lock);
	int rc = s->waiting == 0 && s->used < s->limit && !deferred_on_global(s) ? 0 : -1;
	if (rc == 0)
		s->used++;
	pthread_mutex_unlock(&s->lock);
	return rc;
}

void slots_release_spare(struct slots *s)
{
	pthread_mutex_lock(&s->lock);
	if (s->used > 0)
		s->used--;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	notify(s);
}

void slots_release(struct slots *s, const char *function)
{
	pthread_mutex_lock(&s->lock);
	struct fslot *f = find(s, function, 0, false);
	if (f && f->used > 0)
		f->used--;
	if (s->used > 0)
		s->used--;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	notify(s);
}

int slots_in_use(struct slots *s)
{
	pthread_mutex_lock(&s->lock);
	int n = s->used;
	pthread_mutex_unlock(&s->lock);
	return n;
}

int slots_function_in_use(struct slots *s, const char *function)
{
	pthread_mutex_lock(&s->lock);
	struct fslot *f = find(s, function, 0, false);
	int n = f ? f->used : 0;
	pthread_mutex_unlock(&s->lock);
	return n;
}

void slots_wake(struct slots *s)
{
	pthread_mutex_lock(&s->lock);
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}
