/*
 * The standby pool; the contract is in standby.h.
 *
 * Shape: a list of parked containers (struct entry) and a list of demand
 * records (struct demand, one per function/handler seen), both under
 * sb->lock. The pool thread wakes every STANDBY_TICK_MS or when poked (a
 * take, an invocation's start or end), and in one pass: sorts out what
 * must go (plan_discards: stale version or secret, gone, idle, excess),
 * removes it without the lock, bounds the CPU of those parked a second
 * (bound_due), then hands up to STANDBY_STARTERS starts to the starter
 * threads (pick_start; each start holds a spare slot), which park the
 * containers (start_one) on Docker connections of their own and poke the
 * pool thread when done.
 */
#include "engine/standby.h"

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
	struct runner_parked *p;
	char *function, *handler, *image;
	uint64_t stamp;			/* the function's secret stamps when created */
	int64_t attach_closed_at;	/* monotonic, when its attach was first seen closed */
	int64_t parked_at;		/* monotonic */
	bool bounded;			/* under the parking CPU bound (bound_due) */
	enum metric_standby_reason why; /* on the discard list */
};

struct demand {
	struct demand *next;
	char *function, *handler;
	int running;	      /* invocations now */
	int peak, prev_peak;  /* of the current and the previous window */
	int64_t window_start; /* monotonic */
	int64_t last_use;     /* monotonic: the last standby_begin */
	int64_t arrivals[STANDBY_RATE_SAMPLES]; /* monotonic, ring of the latest begins */
	unsigned narrivals;	/* begins recorded, ever (the ring's next slot, mod) */
	int64_t start_ns;     /* smoothed time a start of this handler takes; 0 unknown */
	int64_t retry_after;  /* monotonic: no start before (an early exit) */
	char *retry_image;    /* ... of this image */
	int starting;	      /* starts in flight (queued or in a starter) */
};

/* A start handed to a starter thread: the record it is for (kept alive by
 * its starting count) and the spare slot it holds. */
struct start_job {
	struct demand *d;
};

struct standby {
	struct standby_config cfg;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool poked;
	atomic_int stop;
	struct entry *entries;
	int nentries;
	struct entry *dead; /* unlinked, waiting for the pool thread to remove */
	struct demand *demand;
	pthread_t thread;
	struct docker *docker; /* the pool thread's */
	int64_t next_bound;    /* monotonic: the next bound_due, 0 none (pool thread) */
	/* The starters: jobs queued (at most STANDBY_STARTERS) and in flight. */
	pthread_t starters[STANDBY_STARTERS];
	int nstarters;
	pthread_cond_t jobs_cond;
	struct start_job jobs[STANDBY_STARTERS];
	int njobs;
	int inflight; /* queued + being started */
};

/* ---- secret stamps ----------------------------------------------------- */

/* The stamps of every secret fv's function references, mixed: 0 with
 * *stamp, -1 when one cannot be stamped (then the function gets no
 * standby). No value is read. */
static int fv_stamp(const struct standby *sb, const struct fn_version *fv, uint64_t *stamp)
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

/* ---- demand ------------------------------------------------------------ */

static struct demand *demand_find(struct standby *sb, const char *function, const char *handler,
				  bool create)
{
	for (struct demand *d = sb->demand; d; d = d->next)
		if (strcmp(d->function, function) == 0 && strcmp(d->handler, handler) == 0)
			return d;
	if (!create)
		return NULL;
	struct demand *d = xcalloc(1, sizeof *d);
	d->function = xstrdup(function);
	d->handler = xstrdup(handler);
	d->window_start = now_mono_ns();
	d->next = sb->demand;
	sb->demand = d;
	return d;
}

/* Moves d's peak window on to now. */
static void demand_roll(struct demand *d, int64_t now)
{
	while (now - d->window_start >= STANDBY_PEAK_WINDOW_NS) {
		d->prev_peak = d->peak;
		d->peak = d->running;
		d->window_start += STANDBY_PEAK_WINDOW_NS;
		if (now - d->window_start >= STANDBY_PEAK_WINDOW_NS) {
			/* a whole window passed without a call: start afresh */
			d->prev_peak = d->running;
			d->window_start = now;
		}
	}
}

/* How many containers a steady stream of d's events uses up while one
 * start takes: its arrival rate over the recorded begins of the last
 * STANDBY_RATE_SPAN_NS (at least 3 of them, at least a second apart from
 * first to last: begins at one moment are concurrency, which the peak
 * counts) times the smoothed start time, rounded up; 0 without such a
 * stream. */
int standby_rate_need(const int64_t *arrivals, unsigned narrivals, int64_t start_ns, int64_t now)
{
	unsigned n = narrivals < STANDBY_RATE_SAMPLES ? narrivals : STANDBY_RATE_SAMPLES;
	int64_t first = 0, last = 0;
	unsigned k = 0;
	for (unsigned i = 0; i < n; i++) {
		int64_t t = arrivals[(narrivals - 1 - i) % STANDBY_RATE_SAMPLES];
		if (now - t > STANDBY_RATE_SPAN_NS)
			break;
		if (!k)
			last = t;
		first = t;
		k++;
	}
	int64_t span = last - first;
	if (k < 3 || span < NS_PER_SEC)
		return 0;
	if (start_ns <= 0)
		start_ns = NS_PER_SEC;
	/* (k - 1) intervals in span: need = ceil((k - 1) * start_ns / span). */
	int64_t need = ((int64_t)(k - 1) * start_ns + span - 1) / span;
	return need > STANDBY_RATE_SAMPLES ? STANDBY_RATE_SAMPLES : (int)need;
}

/* How many d should have parked: the larger of its recent peak and what a
 * steady stream of its events uses up during one start; 0 when idle. */
static int demand_target(const struct standby *sb, struct demand *d, int64_t now)
{
	demand_roll(d, now);
	if (d->running == 0 && now - d->last_use >= sb->cfg.idle_ns)
		return 0;
	int t = d->peak > d->prev_peak ? d->peak : d->prev_peak;
	int r = standby_rate_need(d->arrivals, d->narrivals, d->start_ns, now);
	if (r > t)
		t = r;
	return t < 1 ? 1 : t;
}

/* No start for d at image before STANDBY_RETRY_NS from now (an early
 * exit or a failed start), under the lock. */
static void demand_back_off(struct demand *d, const char *image)
{
	d->retry_after = now_mono_ns() + STANDBY_RETRY_NS;
	free(d->retry_image);
	d->retry_image = image ? xstrdup(image) : NULL;
}

static void demand_free(struct demand *d)
{
	free(d->function);
	free(d->handler);
	free(d->retry_image);
	free(d);
}

static void poke_locked(struct standby *sb)
{
	sb->poked = true;
	pthread_cond_signal(&sb->cond);
}

void standby_begin(struct standby *sb, const struct fn_version *fv, const char *handler)
{
	if (!sb)
		return;
	int64_t now = now_mono_ns();
	pthread_mutex_lock(&sb->lock);
	struct demand *d = demand_find(sb, fv->fn->name, handler, true);
	demand_roll(d, now);
	d->running++;
	if (d->running > d->peak)
		d->peak = d->running;
	d->last_use = now;
	d->arrivals[d->narrivals++ % STANDBY_RATE_SAMPLES] = now;
	poke_locked(sb);
	pthread_mutex_unlock(&sb->lock);
}

void standby_end(struct standby *sb, const struct fn_version *fv, const char *handler)
{
	if (!sb)
		return;
	pthread_mutex_lock(&sb->lock);
	struct demand *d = demand_find(sb, fv->fn->name, handler, false);
	if (d && d->running > 0)
		d->running--;
	pthread_mutex_unlock(&sb->lock);
}

/* ---- the pool ---------------------------------------------------------- */

static void entry_free(struct entry *e)
{
	free(e->function);
	free(e->handler);
	free(e->image);
	free(e);
}

/* Unlinks *link's entry (the gauge goes down) and returns it. */
static struct entry *unlink_locked(struct standby *sb, struct entry **link)
{
	struct entry *e = *link;
	*link = e->next;
	e->next = NULL;
	sb->nentries--;
	metrics_standby_containers(e->function, e->handler, -1);
	return e;
}

/* A container that exits closes its attach stream and answers its wait
 * at about the same moment, in either order: an attach closed alone is
 * given this long for the wait's answer before it counts as "lost". */
#define ATTACH_GRACE_NS (2 * NS_PER_SEC)

/* Why a parked container must go now, or -1 when it may stay (the pool
 * thread's view; a worker only skips one that is not plainly waiting). */
static int gone_reason(struct entry *e, int64_t now)
{
	switch (runner_parked_gone(e->p)) {
	case 1: return METRIC_STANDBY_EXITED;
	case 2:
		if (!e->attach_closed_at)
			e->attach_closed_at = now;
		return now - e->attach_closed_at >= ATTACH_GRACE_NS ? (int)METRIC_STANDBY_LOST : -1;
	default: return -1;
	}
}

static void remove_parked(struct standby *sb, struct entry *e, long timeout_ms)
{
	const char *why = metrics_standby_reason_name(e->why);
	log_debug(LOG_ATTRS("function", e->function, "handler", e->handler, "container",
			    runner_parked_id(e->p), "reason", why),
		  "standby container discarded");
	metrics_standby_discarded(e->why);
	if (e->why == METRIC_STANDBY_EXITED || e->why == METRIC_STANDBY_LOST) {
		pthread_mutex_lock(&sb->lock);
		struct demand *dm = demand_find(sb, e->function, e->handler, false);
		if (dm)
			demand_back_off(dm, e->image);
		pthread_mutex_unlock(&sb->lock);
	}
	runner_parked_discard(sb->docker, e->p, timeout_ms);
	entry_free(e);
}

/* Worker side: a discarded entry is handed to the pool thread, which owns
 * the Docker connection that removes it. */
static struct entry *graveyard_push(struct entry *list, struct entry *e,
				    enum metric_standby_reason why)
{
	e->why = why;
	e->next = list;
	return e;
}

struct runner_parked *standby_take(struct standby *sb, const struct fn_version *fv,
				   const char *handler)
{
	if (!sb)
		return NULL;
	uint64_t stamp;
	bool stampable = fv->image && fv_stamp(sb, fv, &stamp) == 0;
	struct runner_parked *got = NULL;
	pthread_mutex_lock(&sb->lock);
	for (struct entry **link = &sb->entries; *link && stampable;) {
		struct entry *e = *link;
		if (strcmp(e->function, fv->fn->name) != 0 || strcmp(e->handler, handler) != 0 ||
		    strcmp(e->image, fv->image) != 0) {
			link = &e->next;
			continue;
		}
		int gone = e->stamp != stamp ? -1 : runner_parked_gone(e->p);
		if (gone == 2) { /* exiting or cut: the pool thread tells which */
			link = &e->next;
			continue;
		}
		e = unlink_locked(sb, link);
		if (gone != 0) {
			sb->dead = graveyard_push(sb->dead, e,
						  gone < 0 ? METRIC_STANDBY_SECRET
							   : METRIC_STANDBY_EXITED);
			continue;
		}
		got = e->p;
		entry_free(e);
		break;
	}
	poke_locked(sb);
	pthread_mutex_unlock(&sb->lock);
	metrics_inc(got ? METRIC_STANDBY_DISPATCHES : METRIC_STANDBY_MISSES);
	return got;
}

void standby_discard(struct standby *sb, const struct fn_version *fv, const char *handler,
		     struct runner_parked *p)
{
	struct entry *e = xcalloc(1, sizeof *e);
	e->p = p;
	e->function = xstrdup(fv->fn->name);
	e->handler = xstrdup(handler);
	e->image = xstrdup(fv->image);
	pthread_mutex_lock(&sb->lock);
	sb->dead = graveyard_push(sb->dead, e, METRIC_STANDBY_LOST);
	poke_locked(sb);
	pthread_mutex_unlock(&sb->lock);
}

int standby_count(struct standby *sb, const char *function, const char *handler)
{
	if (!sb)
		return 0;
	int n = 0;
	pthread_mutex_lock(&sb->lock);
	for (struct entry *e = sb->entries; e; e = e->next)
		n += strcmp(e->function, function) == 0 && strcmp(e->handler, handler) == 0;
	pthread_mutex_unlock(&sb->lock);
	return n;
}

void standby_poke(struct standby *sb)
{
	if (!sb)
		return;
	pthread_mutex_lock(&sb->lock);
	poke_locked(sb);
	pthread_mutex_unlock(&sb->lock);
}

/* ---- the pool thread ---------------------------------------------------- */

/* Parked entries of d's function and handler at image. */
static int parked_for(const struct standby *sb, const struct demand *d, const char *image)
{
	int n = 0;
	for (const struct entry *e = sb->entries; e; e = e->next)
		n += strcmp(e->function, d->function) == 0 && strcmp(e->handler, d->handler) == 0 &&
		     strcmp(e->image, image) == 0;
	return n;
}

/* Demand records, most recently used first (for the STANDBY_MAX share). */
static int by_last_use(const void *a, const void *b)
{
	const struct demand *x = *(struct demand *const *)a, *y = *(struct demand *const *)b;
	return x->last_use < y->last_use ? 1 : x->last_use > y->last_use ? -1 : 0;
}

/* Each demand record's allowed count under STANDBY_MAX (in d->... via
 * the parallel array quota), most recently used first. Returns the sorted
 * array (malloc'd, *n records). */
static struct demand **shares(struct standby *sb, int64_t now, int **quota, size_t *n)
{
	size_t count = 0;
	for (struct demand *d = sb->demand; d; d = d->next)
		count++;
	struct demand **v = xcalloc(count ? count : 1, sizeof *v);
	*quota = xcalloc(count ? count : 1, sizeof **quota);
	size_t i = 0;
	for (struct demand *d = sb->demand; d; d = d->next)
		v[i++] = d;
	qsort(v, count, sizeof *v, by_last_use);
	int left = sb->cfg.max;
	for (i = 0; i < count; i++) {
		int t = demand_target(sb, v[i], now);
		(*quota)[i] = t < left ? t : left;
		left -= (*quota)[i];
	}
	*n = count;
	return v;
}

/* The discards of one pass, under the lock: stale versions and secrets,
 * containers gone, then whatever exceeds its share (idle when the share
 * fell to 0). Appends to sb->dead. */
static void plan_discards(struct standby *sb, const struct snapshot *snap, int64_t now)
{
	int *quota;
	size_t n;
	struct demand **v = shares(sb, now, &quota, &n);
	int *kept = xcalloc(n ? n : 1, sizeof *kept);
	/* Each function's stamps are taken once per pass (one lstat per secret),
	 * however many of its containers are parked. */
	struct stamp_memo {
		const struct fn_version *fv;
		uint64_t stamp;
		int rc;
	} *memo = xcalloc((size_t)sb->nentries + 1, sizeof *memo);
	size_t nmemo = 0;
	for (struct entry **link = &sb->entries; *link;) {
		struct entry *e = *link;
		const struct fn_version *fv = registry_snapshot_find(snap, e->function);
		int why = -1;
		size_t m = 0;
		if (fv && fv->image && strcmp(fv->image, e->image) == 0) {
			while (m < nmemo && memo[m].fv != fv)
				m++;
			if (m == nmemo) {
				memo[m].fv = fv;
				memo[m].rc = fv_stamp(sb, fv, &memo[m].stamp);
				nmemo++;
			}
		}
		if (!fv || !fv->image || strcmp(fv->image, e->image) != 0)
			why = METRIC_STANDBY_VERSION;
		else if (memo[m].rc < 0 || memo[m].stamp != e->stamp)
			why = METRIC_STANDBY_SECRET;
		else if ((why = gone_reason(e, now)) < 0 &&
			 now - e->parked_at >= STANDBY_MAX_AGE_NS)
			why = METRIC_STANDBY_AGE;
		else if (why < 0) {
			size_t i = 0;
			while (i < n && (strcmp(v[i]->function, e->function) != 0 ||
					 strcmp(v[i]->handler, e->handler) != 0))
				i++;
			if (i == n || kept[i] >= quota[i])
				why = i == n || demand_target(sb, v[i], now) == 0
					      ? METRIC_STANDBY_IDLE
					      : METRIC_STANDBY_EXCESS;
			else
				kept[i]++;
		}
		if (why < 0) {
			link = &e->next;
			continue;
		}
		e = unlink_locked(sb, link);
		sb->dead = graveyard_push(sb->dead, e, (enum metric_standby_reason)why);
	}
	/* Forget handlers idle with nothing parked. */
	for (struct demand **link = &sb->demand; *link;) {
		struct demand *d = *link;
		if (d->running == 0 && !d->starting && now - d->last_use >= sb->cfg.idle_ns &&
		    now >= d->retry_after) {
			bool any = false;
			for (struct entry *e = sb->entries; e && !any; e = e->next)
				any = strcmp(e->function, d->function) == 0 &&
				      strcmp(e->handler, d->handler) == 0;
			if (!any) {
				*link = d->next;
				demand_free(d);
				continue;
			}
		}
		link = &d->next;
	}
	free(memo);
	free(kept);
	free(quota);
	free(v);
}

/* The demand record that should get one more container now, under the
 * lock, or NULL: below its share at the current image counting its starts
 * in flight, not backing off after an early exit, and the pool with its
 * starts in flight below STANDBY_MAX. */
static struct demand *pick_start(struct standby *sb, const struct snapshot *snap, int64_t now)
{
	if (sb->nentries + sb->inflight >= sb->cfg.max)
		return NULL;
	int *quota;
	size_t n;
	struct demand **v = shares(sb, now, &quota, &n);
	struct demand *pick = NULL;
	for (size_t i = 0; i < n && !pick; i++) {
		const struct fn_version *fv = registry_snapshot_find(snap, v[i]->function);
		if (!fv || !fv->image)
			continue;
		if (now < v[i]->retry_after && v[i]->retry_image &&
		    strcmp(v[i]->retry_image, fv->image) == 0)
			continue;
		if (parked_for(sb, v[i], fv->image) + v[i]->starting < quota[i])
			pick = v[i];
	}
	free(quota);
	free(v);
	return pick;
}

/* Parks one container for d (at the snapshot's version) through docker;
 * 0 when parked. d's names are read without the lock: they never change,
 * and d lives while its starting count is above 0. */
static int start_one(struct standby *sb, struct docker *docker, const struct snapshot *snap,
		     struct demand *d)
{
	const struct fn_version *fv = registry_snapshot_find(snap, d->function);
	if (!fv || !fv->image)
		return -1;
	const struct template *t = fv->fn->tpl;
	uint64_t stamp;
	if (fv_stamp(sb, fv, &stamp) < 0)
		return -1;
	struct runner_request in = {
		.function = fv->fn->name,
		.handler = d->handler,
		.image = fv->image,
		.env = t->env,
		.nenv = t->nenv,
		.secrets = t->secrets,
		.nsecrets = t->nsecrets,
		.provider = sb->cfg.provider,
		.hostname = sb->cfg.hostname,
		.standby = true,
	};
	struct runner_parked *p = NULL;
	char *err = NULL;
	int64_t t0 = now_mono_ns();
	if (runner_park(docker, &in, &p, &err) < 0) {
		log_debug(LOG_ATTRS("function", in.function, "handler", in.handler, "error", err),
			  "standby container not started");
		free(err);
		return -1;
	}
	int64_t took = now_mono_ns() - t0;
	char ms[24];
	snprintf_(ms, sizeof ms, "%lld", (long long)(took / NS_PER_MS));
	log_debug(LOG_ATTRS("function", in.function, "handler", in.handler, "container",
			    runner_parked_id(p), "image", fv->image, "start_ms", ms),
		  "standby container started");
	struct entry *e = xcalloc(1, sizeof *e);
	e->p = p;
	e->function = xstrdup(fv->fn->name);
	e->handler = xstrdup(d->handler);
	e->image = xstrdup(fv->image);
	e->stamp = stamp;
	e->parked_at = now_mono_ns();
	pthread_mutex_lock(&sb->lock);
	e->next = sb->entries;
	sb->entries = e;
	sb->nentries++;
	metrics_standby_containers(e->function, e->handler, 1);
	d->start_ns = d->start_ns ? (3 * d->start_ns + took) / 4 : took;
	pthread_mutex_unlock(&sb->lock);
	return 0;
}

/* Removes what sb->dead holds, no lock held during the calls, each
 * removal bounded by what is left until deadline (at least 1 ms). */
static void bury(struct standby *sb, int64_t deadline)
{
	pthread_mutex_lock(&sb->lock);
	struct entry *dead = sb->dead;
	sb->dead = NULL;
	pthread_mutex_unlock(&sb->lock);
	while (dead) {
		struct entry *next = dead->next;
		int64_t left = (deadline - now_mono_ns()) / NS_PER_MS;
		remove_parked(sb, dead, left < 1 ? 1 : (long)left);
		dead = next;
	}
}

/* Puts every container parked STANDBY_IMPORT_NS ago and not yet bounded
 * under the parking CPU bound (runner_parked_bound). Each is unlinked while
 * its call runs, so no worker takes it meanwhile, and linked again after
 * (the gauge unchanged); one the daemon refuses to bound is discarded
 * ("lost", which backs that version off like an early exit). Sets
 * sb->next_bound. */
static void bound_due(struct standby *sb)
{
	int64_t now = now_mono_ns();
	struct entry *due = NULL;
	pthread_mutex_lock(&sb->lock);
	for (struct entry **link = &sb->entries; *link;) {
		struct entry *e = *link;
		/* One that exited or lost its attach is plan_discards' to remove. */
		if (e->bounded || now - e->parked_at < STANDBY_IMPORT_NS ||
		    runner_parked_gone(e->p) != 0) {
			link = &e->next;
			continue;
		}
		*link = e->next;
		e->next = due;
		due = e;
		sb->nentries--;
	}
	pthread_mutex_unlock(&sb->lock);
	while (due) {
		struct entry *e = due;
		due = e->next;
		e->next = NULL;
		int rc = runner_parked_bound(sb->docker, e->p, STANDBY_BOUND_TIMEOUT_MS);
		if (rc == 0)
			log_debug(LOG_ATTRS("function", e->function, "handler", e->handler,
					    "container", runner_parked_id(e->p)),
				  "standby container bounded to 0.05 CPU");
		else
			log_warn(LOG_ATTRS("function", e->function, "handler", e->handler,
					   "container", runner_parked_id(e->p), "error",
					   docker_errmsg(sb->docker)),
				 "cannot bound the CPU of a standby container; removing it");
		pthread_mutex_lock(&sb->lock);
		if (rc == 0) {
			e->bounded = true;
			e->next = sb->entries;
			sb->entries = e;
			sb->nentries++;
		} else {
			metrics_standby_containers(e->function, e->handler, -1);
			sb->dead = graveyard_push(sb->dead, e, METRIC_STANDBY_LOST);
		}
		pthread_mutex_unlock(&sb->lock);
	}
	int64_t next = 0;
	pthread_mutex_lock(&sb->lock);
	for (struct entry *e = sb->entries; e; e = e->next)
		if (!e->bounded && runner_parked_gone(e->p) == 0 &&
		    (!next || e->parked_at + STANDBY_IMPORT_NS < next))
			next = e->parked_at + STANDBY_IMPORT_NS;
	pthread_mutex_unlock(&sb->lock);
	sb->next_bound = next;
}

/* One pass: discards, CPU bounds, then starts handed to the starters. */
static void pass(struct standby *sb)
{
	struct snapshot *snap = registry_acquire(sb->cfg.registry);
	int64_t now = now_mono_ns();
	pthread_mutex_lock(&sb->lock);
	plan_discards(sb, snap, now);
	pthread_mutex_unlock(&sb->lock);
	bury(sb, now_mono_ns() + RUNNER_TEARDOWN_TIMEOUT_MS * NS_PER_MS);
	bound_due(sb);
	/* A refused bound is removed now, not a tick later. */
	bury(sb, now_mono_ns() + RUNNER_TEARDOWN_TIMEOUT_MS * NS_PER_MS);

	/* Up to STANDBY_STARTERS starts at once, each holding a spare slot. */
	pthread_mutex_lock(&sb->lock);
	while (!atomic_load(&sb->stop) && sb->inflight < sb->nstarters) {
		struct demand *d = pick_start(sb, snap, now);
		if (!d || slots_try_acquire_spare(sb->cfg.slots) != 0)
			break;
		d->starting++;
		sb->inflight++;
		sb->jobs[sb->njobs++] = (struct start_job){d};
		pthread_cond_signal(&sb->jobs_cond);
	}
	pthread_mutex_unlock(&sb->lock);
	registry_release(sb->cfg.registry, snap);
}

/* A starter: takes a queued start, parks the container on a Docker
 * connection of its own (opened at its first job, again after a failure),
 * gives the slot back and pokes the pool thread. */
static void *starter_main(void *arg)
{
	struct standby *sb = arg;
	struct docker *docker = NULL;
	pthread_mutex_lock(&sb->lock);
	for (;;) {
		while (!sb->njobs && !atomic_load(&sb->stop))
			pthread_cond_wait(&sb->jobs_cond, &sb->lock);
		if (!sb->njobs)
			break;
		struct start_job job = sb->jobs[--sb->njobs];
		bool stopping = atomic_load(&sb->stop);
		pthread_mutex_unlock(&sb->lock);
		int rc = -1;
		char *err = NULL;
		if (!stopping && !docker && docker_open(&docker, &err) < 0) {
			log_debug(LOG_ATTRS("error", err ? err : ""),
				  "standby: cannot reach the Docker daemon");
			docker = NULL;
		}
		free(err);
		struct snapshot *snap = registry_acquire(sb->cfg.registry);
		const struct fn_version *fv = registry_snapshot_find(snap, job.d->function);
		if (!stopping && docker)
			rc = start_one(sb, docker, snap, job.d);
		slots_release_spare(sb->cfg.slots);
		pthread_mutex_lock(&sb->lock);
		if (rc < 0 && !stopping)
			demand_back_off(job.d, fv ? fv->image : NULL);
		job.d->starting--;
		sb->inflight--;
		poke_locked(sb);
		pthread_mutex_unlock(&sb->lock);
		registry_release(sb->cfg.registry, snap);
		if (rc < 0 && docker && !stopping) {
			/* A failed start may have left the connection unusable. */
			docker_close(docker);
			docker = NULL;
		}
		pthread_mutex_lock(&sb->lock);
	}
	pthread_mutex_unlock(&sb->lock);
	docker_close(docker);
	return NULL;
}

static void *pool_main(void *arg)
{
	struct standby *sb = arg;
	int64_t next_open = 0;
	while (!atomic_load(&sb->stop)) {
		if (!sb->docker && now_mono_ns() >= next_open) {
			char *err = NULL;
			if (docker_open(&sb->docker, &err) < 0) {
				log_debug(LOG_ATTRS("error", err ? err : ""),
					  "standby: cannot reach the Docker daemon; retrying");
				free(err);
				sb->docker = NULL;
				next_open = now_mono_ns() + 5 * NS_PER_SEC;
			}
		}
		if (sb->docker)
			pass(sb);
		pthread_mutex_lock(&sb->lock);
		if (!sb->poked && !atomic_load(&sb->stop)) {
			struct timespec ts;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			int64_t end = (int64_t)ts.tv_sec * NS_PER_SEC + ts.tv_nsec +
				      (int64_t)STANDBY_TICK_MS * NS_PER_MS;
			/* No later than the next container's bound is due. */
			if (sb->next_bound && sb->next_bound < end)
				end = sb->next_bound;
			ts.tv_sec = end / NS_PER_SEC;
			ts.tv_nsec = end % NS_PER_SEC;
			pthread_cond_timedwait(&sb->cond, &sb->lock, &ts);
		}
		sb->poked = false;
		pthread_mutex_unlock(&sb->lock);
	}
	return NULL;
}

struct standby *standby_start(const struct standby_config *cfg)
{
	struct standby *sb = xcalloc(1, sizeof *sb);
	sb->cfg = *cfg;
	pthread_mutex_init(&sb->lock, NULL);
	cond_init_monotonic(&sb->cond);
	pthread_cond_init(&sb->jobs_cond, NULL);
	for (int i = 0; i < STANDBY_STARTERS; i++)
		if (thread_start(&sb->starters[sb->nstarters], "standby-start", starter_main, sb) == 0)
			sb->nstarters++;
	thread_start(&sb->thread, "standby", pool_main, sb);
	return sb;
}

void standby_stop(struct standby *sb)
{
	if (!sb)
		return;
	atomic_store(&sb->stop, 1);
	standby_poke(sb);
	pthread_join(sb->thread, NULL);
	/* A start in flight ends within its own bounds (runner_park's);
	 * queued ones are dropped, their slots given back. */
	pthread_mutex_lock(&sb->lock);
	pthread_cond_broadcast(&sb->jobs_cond);
	pthread_mutex_unlock(&sb->lock);
	for (int i = 0; i < sb->nstarters; i++)
		pthread_join(sb->starters[i], NULL);
	/* Everything parked goes, within one bound. */
	int64_t deadline = now_mono_ns() + STANDBY_STOP_TIMEOUT_MS * NS_PER_MS;
	pthread_mutex_lock(&sb->lock);
	while (sb->entries) {
		struct entry *e = unlink_locked(sb, &sb->entries);
		sb->dead = graveyard_push(sb->dead, e, METRIC_STANDBY_SHUTDOWN);
	}
	pthread_mutex_unlock(&sb->lock);
	if (!sb->docker) {
		char *err = NULL;
		if (docker_open(&sb->docker, &err) < 0)
			sb->docker = NULL;
		free(err);
	}
	bury(sb, deadline);
	while (sb->demand) {
		struct demand *d = sb->demand;
		sb->demand = d->next;
		demand_free(d);
	}
	docker_close(sb->docker);
	pthread_cond_destroy(&sb->jobs_cond);
	pthread_cond_destroy(&sb->cond);
	pthread_mutex_destroy(&sb->lock);
	free(sb);
}
