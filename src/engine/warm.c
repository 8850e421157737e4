/*
 * The warm container pool; the contract is in warm.h.
 *
 * Shape: sb->idle is the list of idle containers (struct entry), under
 * the lock; a busy container (serving an invocation) is off the list, so
 * nobody else can take it. One the reaper is bounding stays on the list
 * marked `bounding`: only the reaper unlinks it, and a worker that wants
 * it waits on bound_cv for the call's end (at most WARM_BOUND_TIMEOUT_MS)
 * rather than start a second container for the event. sb->dead holds
 * entries to remove, each with its reason, for the reaper (or warm_stop).
 * The gauge warm_containers{function} counts a container from its start to
 * its removal.
 */
#include "engine/warm.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "io/docker.h"
#include "base/duration.h"
#include "base/log.h"
#include "engine/metrics.h"
#include "model/template.h"
#include "base/util.h"

struct entry {
	struct entry *next;
	struct runner_warm *w;
	char *function, *handler, *image;
	uint64_t stamp;	    /* the function's secret stamps when created */
	int64_t idle_ns;    /* the template's warm.idle */
	int64_t idle_since; /* monotonic, when it went idle */
	int64_t uses;
	bool bounded;		     /* under the idle CPU bound */
	bool bounding;		     /* the reaper's bound call is running */
	enum metric_warm_reason why; /* on the dead list */
};

struct warm {
	struct warm_config cfg;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_cond_t bound_cv; /* a bound call ended */
	bool poked;
	atomic_int stop;
	struct entry *idle;
	struct entry *dead;
	pthread_t thread;
	struct docker *docker; /* the reaper's */
};

/* The stamps of every secret fv's function references, mixed: 0 with
 * *stamp, -1 when one cannot be stamped. No value is read. */
static int fv_stamp(const struct warm *sb, const struct fn_version *fv, uint64_t *stamp)
{
	const struct template *t = fv->fn->tpl;
	uint64_t h = 0x84222325cbf29ce4ULL;
	for (size_t i = 0; i < t->nsecrets; i++) {
		uint64_t s;
		if (secret_stamp(sb->cfg.provider, t->secrets[i].value, &s) < 0)
			return -1;
		h = (h ^ s) * 0x100000001b3ULL;
		h ^= h >> 29;
	}
	*stamp = h;
	return 0;
}

static void entry_free(struct entry *e)
{
	free(e->function);
	free(e->handler);
	free(e->image);
	free(e);
}

static void poke_locked(struct warm *sb)
{
	sb->poked = true;
	pthread_cond_signal(&sb->cond);
}

void warm_poke(struct warm *sb)
{
	if (!sb)
		return;
	pthread_mutex_lock(&sb->lock);
	poke_locked(sb);
	pthread_mutex_unlock(&sb->lock);
}

/* Hands e to the reaper for removal, under the lock. */
static void retire_locked(struct warm *sb, struct entry *e, enum metric_warm_reason why)
{
	e->why = why;
	e->next = sb->dead;
	sb->dead = e;
	poke_locked(sb);
}

static void retire(struct warm *sb, struct entry *e, enum metric_warm_reason why)
{
	pthread_mutex_lock(&sb->lock);
	retire_locked(sb, e, why);
	pthread_mutex_unlock(&sb->lock);
}

/* Removes e with d (NULL: only frees it), bounded by timeout_ms. */
static void remove_entry(struct docker *d, struct entry *e, long timeout_ms)
{
	char uses[24];
	snprintf_(uses, sizeof uses, "%lld", (long long)e->uses);
	log_debug(LOG_ATTRS("function", e->function, "handler", e->handler, "container",
			    runner_warm_id(e->w), "reason", metrics_warm_reason_name(e->why),
			    "uses", uses),
		  "warm container retired");
	metrics_warm_retired(e->why);
	runner_warm_discard(d, e->w, timeout_ms);
	metrics_warm_containers(e->function, -1);
	entry_free(e);
}

/* Removes what sb->dead holds with d, no lock held during the calls, each
 * bounded by what is left until deadline (at least 1 ms). */
static void bury(struct warm *sb, struct docker *d, int64_t deadline)
{
	pthread_mutex_lock(&sb->lock);
	struct entry *dead = sb->dead;
	sb->dead = NULL;
	pthread_mutex_unlock(&sb->lock);
	while (dead) {
		struct entry *next = dead->next;
		int64_t left = (deadline - now_mono_ns()) / NS_PER_MS;
		remove_entry(d, dead, left < 1 ? 1 : (long)left);
		dead = next;
	}
}

/* Why a dead container went, from the invocation that found it dead. */
static enum metric_warm_reason dead_reason(const struct runner_result *out)
{
	switch (out->outcome) {
	case RUNNER_TIMEOUT: return METRIC_WARM_TIMEOUT;
	case RUNNER_SUCCESS:
	case RUNNER_FAILURE: return METRIC_WARM_EXITED;
	case RUNNER_CANCELLED:
	case RUNNER_ERROR: break;
	}
	return METRIC_WARM_ERROR;
}

/* Takes an idle current container of (fv, handler) off the list, retiring
 * the stale ones met on the way; NULL when there is none. One the reaper
 * is bounding is waited for (the bound call's own timeout bounds it). */
static struct entry *take(struct warm *sb, const struct fn_version *fv, const char *handler,
			  uint64_t stamp)
{
	struct entry *got = NULL;
	int64_t until = now_mono_ns() + (WARM_BOUND_TIMEOUT_MS + 1000) * NS_PER_MS;
	pthread_mutex_lock(&sb->lock);
	for (;;) {
		bool wait = false;
		for (struct entry **link = &sb->idle; *link;) {
			struct entry *e = *link;
			if (strcmp(e->function, fv->fn->name) != 0 ||
			    strcmp(e->handler, handler) != 0) {
				link = &e->next;
				continue;
			}
			if (e->bounding) { /* the reaper's: its call decides */
				wait = wait || (strcmp(e->image, fv->image) == 0 && e->stamp == stamp);
				link = &e->next;
				continue;
			}
			*link = e->next;
			e->next = NULL;
			if (strcmp(e->image, fv->image) != 0) {
				retire_locked(sb, e, METRIC_WARM_VERSION);
				continue;
			}
			if (e->stamp != stamp) {
				retire_locked(sb, e, METRIC_WARM_SECRET);
				continue;
			}
			if (runner_warm_gone(e->w) != 0) {
				retire_locked(sb, e, METRIC_WARM_EXITED);
				continue;
			}
			got = e;
			break;
		}
		if (got || !wait || now_mono_ns() >= until)
			break;
		struct timespec ts = {.tv_sec = until / NS_PER_SEC, .tv_nsec = until % NS_PER_SEC};
		pthread_cond_timedwait(&sb->bound_cv, &sb->lock, &ts);
	}
	pthread_mutex_unlock(&sb->lock);
	return got;
}

/* Starts a container for (fv, handler); NULL with out filled (not run). */
static struct entry *start_one(struct warm *sb, struct docker *d, const struct fn_version *fv,
			       const char *handler, const struct runner_request *call,
			       uint64_t stamp, struct runner_result *out)
{
	const struct template *t = fv->fn->tpl;
	struct runner_request in = {
		.function = fv->fn->name,
		.handler = handler,
		.image = fv->image,
		.env = t->env,
		.nenv = t->nenv,
		.secrets = t->secrets,
		.nsecrets = t->nsecrets,
		.provider = sb->cfg.provider,
		.hostname = call->hostname ? call->hostname : sb->cfg.hostname,
		.setup_timeout_ms = call->setup_timeout_ms,
		.teardown_timeout_ms = call->teardown_timeout_ms,
		.warm = true,
	};
	struct runner_warm *w = NULL;
	char *err = NULL;
	int64_t t0 = now_mono_ns();
	if (runner_warm_start(d, &in, &w, &err) < 0) {
		log_debug(LOG_ATTRS("function", in.function, "handler", handler, "error",
				    err ? err : ""),
			  "warm container not started");
		out->outcome = RUNNER_ERROR;
		out->not_run = true;
		out->exit_code = -1;
		out->error = err ? err
				 : xasprintf("function \"%s\" handler \"%s\": cannot start a warm "
					     "container",
					     in.function, handler);
		return NULL;
	}
	char ms[24];
	snprintf_(ms, sizeof ms, "%lld", (long long)((now_mono_ns() - t0) / NS_PER_MS));
	log_debug(LOG_ATTRS("function", in.function, "handler", handler, "container",
			    runner_warm_id(w), "image", fv->image, "start_ms", ms),
		  "warm container started");
	metrics_warm_containers(fv->fn->name, 1);
	struct entry *e = xcalloc(1, sizeof *e);
	e->w = w;
	e->function = xstrdup(fv->fn->name);
	e->handler = xstrdup(handler);
	e->image = xstrdup(fv->image);
	e->stamp = stamp;
	e->idle_ns = t->warm_idle_ns;
	return e;
}

int warm_invoke(struct warm *sb, struct docker *d, const struct fn_version *fv, const char *handler,
		const struct runner_request *in, struct runner_result *out)
{
	const struct template *t = fv->fn->tpl;
	uint64_t stamp;
	if (!sb || !fv->image || fv_stamp(sb, fv, &stamp) < 0)
		return runner_invoke(d, in, out); /* cannot tell stale from current */
	struct entry *e = take(sb, fv, handler, stamp);
	if (!e) {
		e = start_one(sb, d, fv, handler, in, stamp, out);
		if (!e)
			return -1;
	}
	struct runner_request call = *in;
	call.warm = true;
	int rc = runner_warm_invoke(d, e->w, &call, out);
	metrics_inc(METRIC_WARM_INVOCATIONS);
	e->uses++;
	if (!runner_warm_alive(e->w)) {
		retire(sb, e, dead_reason(out));
		return rc;
	}
	if (e->uses >= t->warm_max_uses) {
		retire(sb, e, METRIC_WARM_MAX_USES);
		return rc;
	}
	e->idle_since = now_mono_ns();
	e->bounded = false;
	pthread_mutex_lock(&sb->lock);
	int64_t n = 0;
	for (struct entry *x = sb->idle; x; x = x->next)
		n += strcmp(x->function, e->function) == 0 && strcmp(x->handler, e->handler) == 0;
	if (n >= t->concurrency) {
		retire_locked(sb, e, METRIC_WARM_EXCESS);
	} else {
		e->next = sb->idle;
		sb->idle = e;
		poke_locked(sb); /* its bound falls due in a second */
	}
	pthread_mutex_unlock(&sb->lock);
	return rc;
}

int warm_count(struct warm *sb, const char *function)
{
	return sb ? (int)metrics_warm_containers_value(function) : 0;
}

/* ---- the reaper --------------------------------------------------------- */

/* Unlinks every idle container that must go (stale version or secret,
 * exited, idle too long) onto sb->dead, under the lock. */
static void plan(struct warm *sb, const struct snapshot *snap, int64_t now)
{
	struct stamp_memo {
		const struct fn_version *fv;
		uint64_t stamp;
		int rc;
	} memo[64];
	size_t nmemo = 0;
	for (struct entry **link = &sb->idle; *link;) {
		struct entry *e = *link;
		const struct fn_version *fv = registry_snapshot_find(snap, e->function);
		int why = -1;
		if (!fv || !fv->image || strcmp(fv->image, e->image) != 0 || !fv->fn->tpl->warm) {
			why = METRIC_WARM_VERSION;
		} else {
			size_t m = 0;
			while (m < nmemo && memo[m].fv != fv)
				m++;
			uint64_t st = 0;
			int rc;
			if (m < nmemo) {
				st = memo[m].stamp;
				rc = memo[m].rc;
			} else {
				rc = fv_stamp(sb, fv, &st);
				if (nmemo < ARRAY_LEN(memo))
					memo[nmemo++] = (struct stamp_memo){fv, st, rc};
			}
			if (rc < 0 || st != e->stamp)
				why = METRIC_WARM_SECRET;
			else if (runner_warm_gone(e->w) != 0)
				why = METRIC_WARM_EXITED;
			else if (now - e->idle_since >= e->idle_ns)
				why = METRIC_WARM_IDLE;
		}
		if (why < 0) {
			link = &e->next;
			continue;
		}
		*link = e->next;
		e->next = NULL;
		retire_locked(sb, e, (enum metric_warm_reason)why);
	}
}

/* Bounds the CPU of every container idle for WARM_BOUND_AFTER_NS and not
 * yet bounded; each stays on the list marked `bounding` while its call
 * runs (no worker takes it meanwhile; one that wants it waits). One the
 * daemon refuses to bound is retired ("error"): none stays idle unbounded.
 * Only this thread unlinks a bounding entry, so the pointers stay valid. */
static void bound_due(struct warm *sb)
{
	int64_t now = now_mono_ns();
	size_t n = 0, cap = 0;
	struct entry **due = NULL;
	pthread_mutex_lock(&sb->lock);
	for (struct entry *e = sb->idle; e; e = e->next) {
		if (e->bounded || now - e->idle_since < WARM_BOUND_AFTER_NS)
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 8;
			due = xrealloc(due, cap * sizeof *due);
		}
		e->bounding = true;
		due[n++] = e;
	}
	pthread_mutex_unlock(&sb->lock);
	for (size_t i = 0; i < n; i++) {
		struct entry *e = due[i];
		int rc = runner_warm_bound(sb->docker, e->w, WARM_BOUND_TIMEOUT_MS);
		if (rc < 0)
			log_warn(LOG_ATTRS("function", e->function, "handler", e->handler,
					   "container", runner_warm_id(e->w), "error",
					   docker_errmsg(sb->docker)),
				 "cannot bound the CPU of an idle warm container; removing it");
		pthread_mutex_lock(&sb->lock);
		e->bounding = false;
		if (rc == 0) {
			e->bounded = true;
		} else {
			for (struct entry **link = &sb->idle; *link; link = &(*link)->next) {
				if (*link == e) {
					*link = e->next;
					break;
				}
			}
			e->next = NULL;
			retire_locked(sb, e, METRIC_WARM_ERROR);
		}
		pthread_cond_broadcast(&sb->bound_cv);
		pthread_mutex_unlock(&sb->lock);
	}
	free(due);
}

/* When the reaper must look again at the latest (monotonic). */
static int64_t next_due(struct warm *sb, int64_t now)
{
	int64_t next = now + (int64_t)WARM_TICK_MS * NS_PER_MS;
	pthread_mutex_lock(&sb->lock);
	for (struct entry *e = sb->idle; e; e = e->next) {
		if (!e->bounded && e->idle_since + WARM_BOUND_AFTER_NS < next)
			next = e->idle_since + WARM_BOUND_AFTER_NS;
		if (e->idle_since + e->idle_ns < next)
			next = e->idle_since + e->idle_ns;
	}
	pthread_mutex_unlock(&sb->lock);
	return next;
}

static void *reaper_main(void *arg)
{
	struct warm *sb = arg;
	int64_t next_open = 0;
	while (!atomic_load(&sb->stop)) {
		if (!sb->docker && now_mono_ns() >= next_open) {
			char *err = NULL;
			if (docker_open(&sb->docker, &err) < 0) {
				log_debug(LOG_ATTRS("error", err ? err : ""),
					  "warm: cannot reach the Docker daemon; retrying");
				free(err);
				sb->docker = NULL;
				next_open = now_mono_ns() + 5 * NS_PER_SEC;
			}
		}
		if (sb->docker) {
			struct snapshot *snap = registry_acquire(sb->cfg.registry);
			pthread_mutex_lock(&sb->lock);
			plan(sb, snap, now_mono_ns());
			pthread_mutex_unlock(&sb->lock);
			registry_release(sb->cfg.registry, snap);
			bury(sb, sb->docker,
			     now_mono_ns() + RUNNER_TEARDOWN_TIMEOUT_MS * NS_PER_MS);
			bound_due(sb);
			bury(sb, sb->docker,
			     now_mono_ns() + RUNNER_TEARDOWN_TIMEOUT_MS * NS_PER_MS);
		}
		int64_t end = next_due(sb, now_mono_ns());
		pthread_mutex_lock(&sb->lock);
		if (!sb->poked && !atomic_load(&sb->stop)) {
			struct timespec ts = {.tv_sec = end / NS_PER_SEC,
					      .tv_nsec = end % NS_PER_SEC};
			pthread_cond_timedwait(&sb->cond, &sb->lock, &ts);
		}
		sb->poked = false;
		pthread_mutex_unlock(&sb->lock);
	}
	return NULL;
}

struct warm *warm_start(const struct warm_config *cfg)
{
	struct warm *sb = xcalloc(1, sizeof *sb);
	sb->cfg = *cfg;
	pthread_mutex_init(&sb->lock, NULL);
	cond_init_monotonic(&sb->cond);
	cond_init_monotonic(&sb->bound_cv);
	thread_start(&sb->thread, "warm", reaper_main, sb);
	return sb;
}

void warm_stop(struct warm *sb)
{
	if (!sb)
		return;
	atomic_store(&sb->stop, 1);
	warm_poke(sb);
	pthread_join(sb->thread, NULL);
	int64_t deadline = now_mono_ns() + WARM_STOP_TIMEOUT_MS * NS_PER_MS;
	pthread_mutex_lock(&sb->lock);
	while (sb->idle) {
		struct entry *e = sb->idle;
		sb->idle = e->next;
		retire_locked(sb, e, METRIC_WARM_SHUTDOWN);
	}
	pthread_mutex_unlock(&sb->lock);
	if (!sb->docker) {
		char *err = NULL;
		if (docker_open(&sb->docker, &err) < 0)
			sb->docker = NULL;
		free(err);
	}
	bury(sb, sb->docker, deadline);
	docker_close(sb->docker);
	pthread_cond_destroy(&sb->cond);
	pthread_cond_destroy(&sb->bound_cv);
	pthread_mutex_destroy(&sb->lock);
	free(sb);
}
