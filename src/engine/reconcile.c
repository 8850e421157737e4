/*
 * The reconciler (reconcile.h has the behaviour; this note the mechanics).
 *
 * Tracks. Every directory entry of the functions directory that was ever
 * seen has a struct track: its active version (the fn_version in the
 * current snapshot, or NULL), the note of its last look (no template,
 * invalid name, failed at fingerprint X) and its debounce deadline. Only
 * this thread publishes, so an active fn_version is always in the current
 * snapshot and safe to read here; once a snapshot without it is published
 * it is never touched again (in-flight work may still hold it).
 *
 * Watches. One inotify descriptor; a table maps each watch descriptor to
 * its function (NULL for the functions directory itself) and path. A new
 * directory below a function is watched as soon as its IN_CREATE or
 * IN_MOVED_TO arrives, and its contents are walked after the watch exists,
 * so nothing created in it meanwhile is missed (the look that follows
 * fingerprints the whole tree anyway). A renamed directory keeps its watch
 * descriptor (same inode): adding it again only updates the table. The
 * kernel drops watches of deleted directories (IN_IGNORED). Every full
 * pass walks every function's tree again (re-adding a watched directory
 * returns its descriptor), which repairs what lost events left unwatched.
 * The device and inode of the directory the root watch is on are kept: a
 * pass that finds another directory at the path (or none was watched)
 * drops every watch and sets them up again.
 *
 * Image hygiene. Publishing a replacement (or a removal) queues the old
 * image; the queue is looked at every RECONCILE_GC_RETRY_NS, and once the
 * image is in no live snapshot and held by no running container,
 * image_gc(function) removes every unused relay-fn-<function>:* tag.
 * When the daemon refuses a collection (HTTP 403: a Docker socket proxy
 * without IMAGES=1, as in the minimal allow-list PING VERSION BUILD
 * CONTAINERS POST), collections are skipped for GC_DENIED_PAUSE_NS and then
 * tried once more: an operator who adds IMAGES=1 and restarts the proxy
 * gets cleanup back within the hour without restarting Relay, and a proxy
 * that keeps refusing costs one request an hour. The first refusal in the
 * process is a WARN naming IMAGES=1; later ones are DEBUG.
 *
 * Startup pool. reconciler_load prepares the valid functions' images with
 * up to reconcile_prepare_threads(n) preparations at once: the loading
 * thread (on the caller's docker handle) and preparer threads named
 * "prepare-N", each with its own Docker connection (a struct docker is not
 * thread-safe), which it closes when no job is left. Jobs are claimed in
 * name order. A preparer only reads the function's files, fingerprints
 * them and runs image_prepare_tree; every other effect (the "function
 * prepared" / failure logs, the state database, the track and its active
 * version) happens on the loading thread, which finishes the jobs strictly
 * in name order (it takes a job itself rather than wait idle), so those
 * are exactly what a serial pass produces; only image.c's own lines
 * ("building function image", build output) interleave. The preparers are
 * joined before reconciler_load returns, so none outlives startup. A
 * preparer that cannot connect logs a WARN and ends; the others (and the
 * loading thread) take its share. Live looks stay serial on the
 * reconciler thread.
 */
#include "engine/reconcile.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/duration.h"
#include "model/fingerprint.h"
#include "model/function.h"
#include "engine/image.h"
#include "base/log.h"
#include "engine/metrics.h"
#include "base/util.h"

#define ROOT_MASK \
	(IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF)
#define TREE_MASK                                                                           \
	(IN_CREATE | IN_DELETE | IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | \
	 IN_ATTRIB | IN_DELETE_SELF)
#define BUILD_RETRY_MIN_NS (60LL * NS_PER_SEC)
/* While the functions directory is missing, how often its return is looked for. */
#define ROOT_RETRY_NS (1LL * NS_PER_SEC)
#define BUILD_RETRY_MAX_NS (30LL * NS_PER_MIN)
/* After a refused image collection, how long collections are skipped. */
#define GC_DENIED_PAUSE_NS (60LL * NS_PER_MIN)

enum note {
	NOTE_NONE,
	NOTE_NO_TEMPLATE,
	NOTE_BAD_NAME,
	NOTE_FAILED,
};

struct track {
	char *name;
	struct fn_version *active; /* in the current snapshot, or NULL */
	enum note note;
	/* NOTE_FAILED: the fingerprint that failed ("" when the tree could not
	 * even be read), why, and whether it was the image build. */
	char failed_fp[FINGERPRINT_HEX_LEN + 1];
	char *error;
	bool build_failure;
	int64_t retry_at_ns, retry_backoff_ns;
	int64_t due_ns, first_ns; /* debounce: 0 when nothing is pending */
	bool seen;		  /* scratch for full passes */
};

struct watch {
	int wd;
	char *fn; /* function name; NULL for the functions directory */
	char *path;
};

struct gc_item {
	char *fn;
	char *image;
};

struct reconciler {
	struct reconcile_config cfg;
	char *dir;
	int ifd, stopfd;
	int root_wd;
	/* The directory the watches are on (the functions directory when they
	 * were set up); a pass that finds another one there watches it anew. */
	bool root_known;
	dev_t root_dev;
	ino_t root_ino;
	bool root_missing; /* the last pass could not find it: looked for every ROOT_RETRY_NS */
	/* The last look could not read it (missing, or not listable): looked
	 * at every ROOT_RETRY_NS; cfg.on_readable hears of each change. */
	bool unreadable;
	atomic_bool readable; /* !unreadable, for reconciler_readable() */
	bool enospc_logged;

	struct track **tracks; /* sorted by name */
	size_t ntracks;
	struct watch *watches;
	size_t nwatches;

	struct gc_item *gc;
	size_t ngc;
	int64_t gc_next_ns;
	/* Collections were refused (HTTP 403): none until then (monotonic). */
	bool gc_denied;
	int64_t gc_denied_until_ns;
	char **startup_gc; /* names whose old images are looked at once started */
	size_t nstartup_gc;

	struct docker *d; /* the thread's */
	pthread_t thread;
	bool started;
	atomic_int stopping;
	pthread_mutex_t done_lock;
	pthread_cond_t done_cond;
	bool done;
};

/* ---- small helpers ----------------------------------------------------- */

/* The state database's view of a function's definition. */
struct state_def {
	struct state_function f;
	struct state_handler *h;
	struct state_schedule *s;
	struct state_pair *env, *sec;
};

static int64_t eff_timeout(int64_t t)
{
	return t > 0 ? t : TEMPLATE_DEFAULT_TIMEOUT_NS;
}

static void def_init(struct state_def *d, const struct function *fn)
{
	const struct template *t = fn->tpl;
	memset(d, 0, sizeof *d);
	d->h = xcalloc(t->nrules + 1, sizeof *d->h);
	for (size_t i = 0; i < t->nrules; i++)
		d->h[i] = (struct state_handler){t->rules[i].handler,
						 eff_timeout(t->rules[i].timeout_ns)};
	d->s = xcalloc(t->nschedules + 1, sizeof *d->s);
	for (size_t i = 0; i < t->nschedules; i++)
		d->s[i] = (struct state_schedule){
			t->schedules[i].handler, t->schedules[i].cron_expr,
			t->schedules[i].timezone, eff_timeout(t->schedules[i].timeout_ns)};
	d->env = xcalloc(t->nenv + 1, sizeof *d->env);
	for (size_t i = 0; i < t->nenv; i++)
		d->env[i] = (struct state_pair){t->env[i].name, t->env[i].value};
	d->sec = xcalloc(t->nsecrets + 1, sizeof *d->sec);
	for (size_t i = 0; i < t->nsecrets; i++)
		d->sec[i] = (struct state_pair){t->secrets[i].name, t->secrets[i].value};
	d->f = (struct state_function){
		.name = fn->name,
		.runtime = t->runtime->name,
		.handlers = d->h,
		.nhandlers = t->nrules,
		.schedules = d->s,
		.nschedules = t->nschedules,
		.env = d->env,
		.nenv = t->nenv,
		.secrets = d->sec,
		.nsecrets = t->nsecrets,
		.match_arrays_elements = t->match_arrays_elements,
	};
}

static void def_free(struct state_def *d)
{
	free(d->h);
	free(d->s);
	free(d->env);
	free(d->sec);
}

/* Logs a state database failure (never fatal) and frees the message. */
static void state_failed(const char *what, const char *name, char *err)
{
	log_warn(LOG_ATTRS("function", name ? name : "", "error", err ? err : ""),
		 "state database: cannot %s", what);
	free(err);
}

static char *fp16(const char *fp, char out[17])
{
	strlcpy_(out, fp ? fp : "", 17);
	return out;
}

/* ---- tracks ------------------------------------------------------------ */

static size_t track_pos(const struct reconciler *rc, const char *name, bool *found)
{
	size_t lo = 0, hi = rc->ntracks;
	*found = false;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(rc->tracks[mid]->name, name);
		if (c == 0) {
			*found = true;
			return mid;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static struct track *track_find(const struct reconciler *rc, const char *name)
{
	bool found;
	size_t i = track_pos(rc, name, &found);
	return found ? rc->tracks[i] : NULL;
}

static struct track *track_get(struct reconciler *rc, const char *name, bool *created)
{
	bool found;
	size_t i = track_pos(rc, name, &found);
	if (created)
		*created = !found;
	if (found)
		return rc->tracks[i];
	struct track *t = xcalloc(1, sizeof *t);
	t->name = xstrdup(name);
	rc->tracks = xrealloc(rc->tracks, sizeof *rc->tracks * (rc->ntracks + 1));
	memmove(&rc->tracks[i + 1], &rc->tracks[i], sizeof *rc->tracks * (rc->ntracks - i));
	rc->tracks[i] = t;
	rc->ntracks++;
	return t;
}

static void track_drop(struct reconciler *rc, struct track *t)
{
	bool found;
	size_t i = track_pos(rc, t->name, &found);
	if (!found)
		return;
	memmove(&rc->tracks[i], &rc->tracks[i + 1], sizeof *rc->tracks * (rc->ntracks - i - 1));
	rc->ntracks--;
	free(t->name);
	free(t->error);
	free(t);
}

static void track_clear_failure(struct track *t)
{
	t->note = NOTE_NONE;
	t->failed_fp[0] = '\0';
	free(t->error);
	t->error = NULL;
	t->build_failure = false;
	t->retry_at_ns = t->retry_backoff_ns = 0;
}

/* ---- watches ----------------------------------------------------------- */

static struct watch *watch_find(struct reconciler *rc, int wd)
{
	for (size_t i = 0; i < rc->nwatches; i++)
		if (rc->watches[i].wd == wd)
			return &rc->watches[i];
	return NULL;
}

static void watch_set(struct reconciler *rc, int wd, const char *fn, const char *path)
{
	struct watch *w = watch_find(rc, wd);
	if (!w) {
		rc->watches = xrealloc(rc->watches, sizeof *rc->watches * (rc->nwatches + 1));
		w = &rc->watches[rc->nwatches++];
		w->wd = wd;
	} else {
		free(w->fn);
		free(w->path);
	}
	w->fn = fn ? xstrdup(fn) : NULL;
	w->path = xstrdup(path);
}

static void watch_forget(struct reconciler *rc, int wd)
{
	for (size_t i = 0; i < rc->nwatches; i++) {
		if (rc->watches[i].wd == wd) {
			free(rc->watches[i].fn);
			free(rc->watches[i].path);
			rc->watches[i] = rc->watches[--rc->nwatches];
			return;
		}
	}
}

/* Stops watching a function's tree (a directory renamed out of reach). */
static void watch_drop_function(struct reconciler *rc, const char *fn)
{
	for (size_t i = 0; i < rc->nwatches;) {
		struct watch *w = &rc->watches[i];
		if (w->fn && strcmp(w->fn, fn) == 0) {
			inotify_rm_watch(rc->ifd, w->wd);
			free(w->fn);
			free(w->path);
			*w = rc->watches[--rc->nwatches];
		} else {
			i++;
		}
	}
}

static int add_watch(struct reconciler *rc, const char *fn, const char *path, uint32_t mask)
{
	if (rc->ifd < 0)
		return -1;
	int wd = inotify_add_watch(rc->ifd, path, mask);
	if (wd < 0) {
		if (errno == ENOSPC && !rc->enospc_logged) {
			rc->enospc_logged = true;
			log_warn(LOG_ATTRS("path", path),
				 "inotify watch limit reached (fs.inotify.max_user_watches); "
				 "changes below "
				 "unwatched directories are found by the 30s rescan");
		}
		return -1;
	}
	watch_set(rc, wd, fn, path);
	return wd;
}

/* Watches path and every real directory below it (symlinks are not
 * followed below the function's own directory). */
static void watch_tree(struct reconciler *rc, const char *fn, const char *path, int depth)
{
	uint32_t mask = TREE_MASK | IN_ONLYDIR | (depth ? IN_DONT_FOLLOW : 0);
	if (add_watch(rc, fn, path, mask) < 0 || depth >= FN_TREE_MAX_DEPTH)
		return;
	DIR *dir = opendir(path);
	if (!dir)
		return;
	struct dirent *e;
	while ((e = readdir(dir))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (e->d_type != DT_DIR && e->d_type != DT_UNKNOWN)
			continue;
		char *sub = xasprintf("%s/%s", path, e->d_name);
		struct stat st;
		if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
			watch_tree(rc, fn, sub, depth + 1);
		free(sub);
	}
	closedir(dir);
}

static void watch_root(struct reconciler *rc)
{
	struct stat st;
	rc->root_wd = add_watch(rc, NULL, rc->dir, ROOT_MASK | IN_ONLYDIR);
	rc->root_known = stat(rc->dir, &st) == 0;
	if (rc->root_known) {
		rc->root_dev = st.st_dev;
		rc->root_ino = st.st_ino;
	}
}

/* Drops every watch (the functions directory they were on was moved away
 * or removed). The IN_IGNORED events that follow name descriptors no
 * longer in the table (descriptors are not reused soon: the kernel hands
 * them out cyclically). */
static void unwatch_all(struct reconciler *rc)
{
	for (size_t i = 0; i < rc->nwatches; i++) {
		inotify_rm_watch(rc->ifd, rc->watches[i].wd);
		free(rc->watches[i].fn);
		free(rc->watches[i].path);
	}
	rc->nwatches = 0;
	rc->root_wd = -1;
}

/* (Re)watches every known function's tree below the functions directory;
 * a directory already watched keeps its descriptor (its table entry is
 * refreshed). Repairs what lost events left unwatched (a nested directory
 * created during a queue overflow, a renamed one). */
static void watch_functions(struct reconciler *rc)
{
	for (size_t i = 0; i < rc->ntracks; i++) {
		const char *name = rc->tracks[i]->name;
		if (!function_name_valid(name, NULL))
			continue;
		char *p = xasprintf("%s/%s", rc->dir, name);
		struct stat st;
		if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
			watch_tree(rc, name, p, 0);
		free(p);
	}
}

/* ---- publishing and image hygiene ------------------------------------- */

static size_t publish(struct reconciler *rc)
{
	struct fn_version **fvs = xcalloc(rc->ntracks + 1, sizeof *fvs);
	size_t n = 0;
	for (size_t i = 0; i < rc->ntracks; i++)
		if (rc->tracks[i]->active)
			fvs[n++] = rc->tracks[i]->active;
	registry_publish(rc->cfg.registry, fvs, n);
	if (rc->cfg.on_published)
		rc->cfg.on_published(rc->cfg.ctx);
	return n;
}

struct keep_list {
	char **v;
	size_t n;
};

static void keep_add(const char *image, void *ctx)
{
	struct keep_list *k = ctx;
	k->v = xrealloc(k->v, sizeof *k->v * (k->n + 1));
	k->v[k->n++] = xstrdup(image);
}

static void keep_free(struct keep_list *k)
{
	for (size_t i = 0; i < k->n; i++)
		free(k->v[i]);
	free(k->v);
	k->v = NULL;
	k->n = 0;
}

static bool keep_has(const struct keep_list *k, const char *image)
{
	for (size_t i = 0; i < k->n; i++)
		if (strcmp(k->v[i], image) == 0)
			return true;
	return false;
}

/* One WARN per process for refused collections, whatever the reconciler. */
static atomic_bool gc_denied_said;

static void gc_function(struct reconciler *rc, struct docker *d, const char *fn,
			const struct keep_list *keep)
{
	char *err = NULL;
	size_t removed = 0;
	if (rc->gc_denied && now_mono_ns() < rc->gc_denied_until_ns) {
		log_debug(LOG_ATTRS("function", fn),
			  "image cleanup skipped: the Docker daemon refused the last one");
		return;
	}
	int r = image_gc(d, fn, (const char *const *)keep->v, keep->n, &removed, &err);
	if (r == IMAGE_GC_DENIED) {
		rc->gc_denied = true;
		rc->gc_denied_until_ns = now_mono_ns() + GC_DENIED_PAUSE_NS;
		if (!atomic_exchange(&gc_denied_said, true))
			log_warn(LOG_ATTRS("error", err ? err : ""),
				 "old function images are not removed: the Docker daemon refused "
				 "image cleanup (IMAGES=1 on the Docker socket proxy allows it); "
				 "tried again hourly");
		else
			log_debug(LOG_ATTRS("function", fn, "error", err ? err : ""),
				  "image cleanup refused again");
	} else if (r < 0) {
		log_warn(LOG_ATTRS("function", fn, "error", err ? err : ""),
			 "image cleanup failed; retried later");
	} else if (rc->gc_denied) {
		rc->gc_denied = false;
		log_info(LOG_ATTRS("function", fn), "image cleanup allowed again");
	}
	free(err);
}

static void gc_queue(struct reconciler *rc, const char *fn, const char *image)
{
	if (!image)
		return;
	rc->gc = xrealloc(rc->gc, sizeof *rc->gc * (rc->ngc + 1));
	rc->gc[rc->ngc++] = (struct gc_item){xstrdup(fn), xstrdup(image)};
	rc->gc_next_ns = 0; /* look now */
}

/* Collects the queued images no snapshot or container uses any more. */
static void gc_run(struct reconciler *rc, struct docker *d, int64_t now)
{
	if (!rc->ngc || now < rc->gc_next_ns)
		return;
	rc->gc_next_ns = now + RECONCILE_GC_RETRY_NS;
	struct keep_list keep = {0};
	registry_images_in_use(rc->cfg.registry, keep_add, &keep);
	for (size_t i = 0; i < rc->ngc;) {
		struct gc_item *it = &rc->gc[i];
		if (keep_has(&keep, it->image) || image_held(it->image)) {
			log_debug(LOG_ATTRS("function", it->fn, "image", it->image),
				  "old function image still in use; removal deferred");
			i++;
			continue;
		}
		/* One collection covers every queued image of the function. */
		char *fn = xstrdup(it->fn);
		gc_function(rc, d, fn, &keep);
		for (size_t j = 0; j < rc->ngc;) {
			if (strcmp(rc->gc[j].fn, fn) == 0 && !keep_has(&keep, rc->gc[j].image) &&
			    !image_held(rc->gc[j].image)) {
				free(rc->gc[j].fn);
				free(rc->gc[j].image);
				rc->gc[j] = rc->gc[--rc->ngc];
			} else {
				j++;
			}
		}
		free(fn);
		i = 0;
	}
	keep_free(&keep);
}

/* ---- looking at one function ------------------------------------------ */

static void record_reconcile(struct reconciler *rc, const char *name, bool ok, const char *error)
{
	char *err = NULL;
	if (rc->cfg.state &&
	    state_record_reconcile(rc->cfg.state, name, ok, error, time(NULL), &err) < 0)
		state_failed("record the reconcile outcome", name, err);
}

/* A failed look: keeps the active version, remembers the fingerprint so
 * it is not retried until the function changes (or, for a build, until
 * its backoff has passed). */
static void note_failure(struct reconciler *rc, struct track *t, const char *fp, const char *error,
			 bool build)
{
	int64_t now = now_mono_ns();
	t->note = NOTE_FAILED;
	strlcpy_(t->failed_fp, fp ? fp : "", sizeof t->failed_fp);
	free(t->error);
	t->error = xstrdup(error);
	t->build_failure = build;
	if (build) {
		t->retry_backoff_ns =
			t->retry_backoff_ns ? t->retry_backoff_ns * 2 : BUILD_RETRY_MIN_NS;
		if (t->retry_backoff_ns > BUILD_RETRY_MAX_NS)
			t->retry_backoff_ns = BUILD_RETRY_MAX_NS;
		t->retry_at_ns = now + t->retry_backoff_ns;
	} else {
		t->retry_backoff_ns = t->retry_at_ns = 0;
	}
	record_reconcile(rc, t->name, false, error);
}

/*
 * Makes fn (fingerprint fp), whose image preparation ended with build_rc
 * (image_prepare_tree: 0 with *res filled, or -1 with why), t's active
 * version, or logs and records the failure. Takes ownership of fn and
 * frees *res. Publishes at once unless startup (the startup pass
 * publishes once at the end). Returns 0 or -1.
 */
static int prepare_finish(struct reconciler *rc, struct track *t, struct function *fn,
			  const char *fp, int build_rc, struct image_result *res, const char *why,
			  bool startup)
{
	char *serr = NULL;
	if (build_rc < 0) {
		const char *serving = t->active ? t->active->image : NULL;
		if (serving)
			log_error(LOG_ATTRS("function", t->name, "error", why ? why : "", "serving",
					    serving),
				  "image build failed; previous version keeps serving");
		else
			log_error(LOG_ATTRS("function", t->name, "error", why ? why : ""),
				  "image build failed; function unavailable");
		note_failure(rc, t, fp, why ? why : "image build failed", true);
		function_free(fn);
		return -1;
	}

	struct state_def def;
	def_init(&def, fn);
	struct fn_version *old = t->active;
	char *old_image = old && old->image ? xstrdup(old->image) : NULL;
	bool was_failing = t->note == NOTE_FAILED;
	t->active = registry_fn_version_new(fn, xstrdup(res->ref), xstrdup(res->fingerprint));
	metrics_function_register(t->name);
	if (!startup)
		publish(rc);
	if (rc->cfg.state && state_mark_ready(rc->cfg.state, t->name, &def.f, res->ref,
					      res->fingerprint, time(NULL), time(NULL), &serr) < 0)
		state_failed("mark the function ready", t->name, serr);
	track_clear_failure(t);

	char secs[DURATION_STR_MAX], short_fp[17];
	duration_format((int64_t)(res->seconds * 1000) * NS_PER_MS, secs);
	const char *built = res->built ? "true" : "false";
	if (startup) {
		log_info(LOG_ATTRS("function", t->name, "image", res->ref, "built", built,
				   "duration", secs),
			 "function prepared");
	} else {
		log_info(LOG_ATTRS("function", t->name, "image", res->ref, "built", built,
				   "duration", secs),
			 old ? "function updated" : "function discovered");
		log_info(LOG_ATTRS("function", t->name, "fingerprint",
				   fp16(res->fingerprint, short_fp), "recovered",
				   was_failing ? "true" : "false"),
			 "reconcile succeeded");
	}
	if (old_image && strcmp(old_image, res->ref) != 0)
		gc_queue(rc, t->name, old_image);
	free(old_image);
	image_result_free(res);
	def_free(&def);
	return 0;
}

/*
 * Prepares fn's image from tree (fingerprint fp) on d and makes it t's
 * active version (prepare_finish). Takes ownership of fn. Returns 0, or -1
 * after logging and recording the failure.
 */
static int prepare(struct reconciler *rc, struct docker *d, struct track *t, struct function *fn,
		   const struct fn_tree *tree, const char *fp)
{
	struct image_result res;
	char *why = NULL, *serr = NULL;
	struct state_def def;
	def_init(&def, fn);
	if (rc->cfg.state && state_put_pending(rc->cfg.state, &def.f, time(NULL), &serr) < 0)
		state_failed("record the function", t->name, serr);
	def_free(&def);
	int r = image_prepare_tree(d, t->name, fn->tpl->runtime, tree, &res, &why);
	r = prepare_finish(rc, t, fn, fp, r, &res, why, false);
	free(why);
	return r;
}

/* The directory is gone: unpublish and forget. */
static void gone(struct reconciler *rc, struct track *t)
{
	char *serr = NULL;
	if (rc->cfg.state && t->note != NOTE_BAD_NAME &&
	    state_remove_function(rc->cfg.state, t->name, &serr) < 0)
		state_failed("remove the function", t->name, serr);
	watch_drop_function(rc, t->name);
	if (t->active) {
		char *image = t->active->image ? xstrdup(t->active->image) : NULL;
		t->active = NULL;
		publish(rc);
		log_info(LOG_ATTRS("function", t->name, "image", image ? image : ""),
			 "function removed");
		gc_queue(rc, t->name, image);
		free(image);
	} else {
		log_debug(LOG_ATTRS("function", t->name),
			  "directory removed (function was not served)");
	}
	track_drop(rc, t);
}

static bool template_missing(const char *fdir)
{
	char *p = xasprintf("%s/template.yaml", fdir);
	struct stat st;
	bool missing = lstat(p, &st) < 0 && errno == ENOENT;
	free(p);
	return missing;
}

/* The checks before t's files are read: its directory gone (t dropped
 * unless the whole functions directory is missing), no template.yaml yet,
 * an invalid name (logged once). True when the look stops there. */
static bool look_stops_early(struct reconciler *rc, struct track *t, const char *fdir)
{
	struct stat st;
	if (stat(fdir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		/* With the functions directory itself missing (moved away,
		 * removed, unmounted) nothing is unpublished: the pass that
		 * finds it back looks at every function again. */
		struct stat rst;
		if (stat(rc->dir, &rst) == 0 && S_ISDIR(rst.st_mode))
			gone(rc, t);
		else
			log_debug(LOG_ATTRS("function", t->name),
				  "the functions directory is missing; function kept");
		return true;
	}
	if (template_missing(fdir)) {
		if (t->note != NOTE_NO_TEMPLATE) {
			if (t->active)
				log_info(
					LOG_ATTRS("function", t->name, "serving", t->active->image),
					"directory has no template.yaml; not ready, previous "
					"version keeps serving");
			else
				log_info(LOG_ATTRS("function", t->name),
					 "directory has no template.yaml yet; not ready");
			t->note = NOTE_NO_TEMPLATE;
		}
		return true;
	}
	if (t->note == NOTE_BAD_NAME)
		return true;
	if (!function_name_valid(t->name, NULL)) {
		/* Logged once with every error, as at startup. */
		struct function_entry e = {.name = t->name};
		e.status = function_load(rc->dir, t->name, &e.fn, &e.errors, &e.warnings);
		function_entry_log(&e);
		function_free(e.fn);
		strlist_free(&e.errors);
		strlist_free(&e.warnings);
		t->note = NOTE_BAD_NAME;
		return true;
	}
	return false;
}

/* Loads and validates t's changed version (fingerprint fp). Returns the
 * function to prepare, or NULL when there is none: removed meanwhile, or
 * invalid (logged, noted as failed; the active version keeps serving). */
static struct function *load_changed(struct reconciler *rc, struct track *t, const char *fp)
{
	struct function_entry e = {.name = t->name};
	e.status = function_load(rc->dir, t->name, &e.fn, &e.errors, &e.warnings);
	if (e.status == FUNCTION_INVALID) {
		char *why = function_entry_errors(&e);
		if (t->active) {
			for (size_t i = 0; i < e.warnings.n; i++)
				log_warn(LOG_ATTRS("function", t->name, "warning", e.warnings.v[i]),
					 "template has an unknown key");
			log_warn(LOG_ATTRS("function", t->name, "errors", why, "serving",
					   t->active->image),
				 "invalid function; previous version keeps serving");
		} else {
			function_entry_log(&e);
		}
		note_failure(rc, t, fp, why, false);
		free(why);
	} else if (e.status == FUNCTION_OK) {
		function_entry_log(&e); /* warnings only */
	}				/* FUNCTION_NO_TEMPLATE: removed meanwhile */
	strlist_free(&e.errors);
	strlist_free(&e.warnings);
	if (e.status == FUNCTION_OK)
		return e.fn;
	function_free(e.fn);
	return NULL;
}

/* One look at t (see reconcile.h). May drop t. */
static void look(struct reconciler *rc, struct docker *d, struct track *t)
{
	char *fdir = xasprintf("%s/%s", rc->dir, t->name);
	struct fn_tree tree = {0};
	bool have_tree = false;
	if (look_stops_early(rc, t, fdir))
		goto out;

	char *err = NULL;
	if (fn_tree_load(fdir, &tree, &err) < 0) {
		if (!(t->note == NOTE_FAILED && !t->failed_fp[0] && t->error &&
		      strcmp(t->error, err) == 0)) {
			log_warn(
				LOG_ATTRS("function", t->name, "error", err),
				t->active
					? "cannot read the function; previous version keeps serving"
					: "cannot read the function; skipped");
			note_failure(rc, t, NULL, err, false);
		}
		free(err);
		goto out;
	}
	have_tree = true;
	char fp[FINGERPRINT_HEX_LEN + 1];
	fingerprint_tree(&tree, fp);

	if (t->active && t->active->fingerprint && strcmp(fp, t->active->fingerprint) == 0) {
		if (t->note == NOTE_FAILED) {
			/* Back to the version being served: the failure is over. */
			track_clear_failure(t);
			record_reconcile(rc, t->name, true, NULL);
			char short_fp[17];
			log_info(LOG_ATTRS("function", t->name, "fingerprint", fp16(fp, short_fp),
					   "recovered", "true"),
				 "reconcile succeeded");
		}
		t->note = NOTE_NONE;
		goto out;
	}
	if (t->note == NOTE_FAILED && strcmp(fp, t->failed_fp) == 0 &&
	    (!t->build_failure || now_mono_ns() < t->retry_at_ns))
		goto out;
	if (t->note != NOTE_FAILED || strcmp(fp, t->failed_fp) != 0)
		t->retry_backoff_ns = 0; /* a new version starts a new backoff */

	struct function *fn = load_changed(rc, t, fp);
	if (!fn)
		goto out;
	if (t->active) {
		char short_fp[17];
		log_info(LOG_ATTRS("function", t->name, "fingerprint", fp16(fp, short_fp)),
			 "function changed; preparing the new version");
	}
	prepare(rc, d, t, fn, &tree, fp);
out:
	if (have_tree)
		fn_tree_free(&tree);
	free(fdir);
}

/* ---- the startup pass -------------------------------------------------- */

struct reconciler *reconciler_new(const struct reconcile_config *cfg)
{
	struct reconciler *rc = xcalloc(1, sizeof *rc);
	rc->cfg = *cfg;
	if (!rc->cfg.debounce_ns)
		rc->cfg.debounce_ns = RECONCILE_DEBOUNCE_NS;
	if (!rc->cfg.rescan_ns)
		rc->cfg.rescan_ns = RECONCILE_RESCAN_NS;
	rc->dir = xstrdup(cfg->functions_dir);
	rc->root_wd = -1;
	rc->stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	rc->ifd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	if (rc->ifd < 0)
		log_warn(LOG_ATTRS("error", strerror(errno)),
			 "cannot watch the functions directory; changes are found by the 30s "
			 "rescan");
	pthread_mutex_init(&rc->done_lock, NULL);
	pthread_cond_init(&rc->done_cond, NULL);
	/* Watching starts before the first scan, so no change is missed. */
	watch_root(rc);
	rc->root_missing = !rc->root_known; /* looked for every ROOT_RETRY_NS */
	atomic_store(&rc->readable, true);
	return rc;
}

static void startup_gc_add(struct reconciler *rc, const char *name)
{
	for (size_t i = 0; i < rc->nstartup_gc; i++)
		if (strcmp(rc->startup_gc[i], name) == 0)
			return;
	rc->startup_gc = xrealloc(rc->startup_gc, sizeof *rc->startup_gc * (rc->nstartup_gc + 1));
	rc->startup_gc[rc->nstartup_gc++] = xstrdup(name);
}

/* Functions the previous run knew (the state database): their leftover
 * images are collected too, even when their directory is gone. */
static void gc_previous_functions(struct reconciler *rc)
{
	if (!rc->cfg.state)
		return;
	char *err = NULL;
	struct state_function_info *prev = NULL;
	size_t nprev = 0;
	if (state_list_functions(rc->cfg.state, &prev, &nprev, &err) < 0)
		state_failed("read the previous functions", NULL, err);
	for (size_t i = 0; i < nprev; i++)
		if (function_name_valid(prev[i].name, NULL))
			startup_gc_add(rc, prev[i].name);
	state_function_infos_free(prev, nprev);
}

/* Loads t at startup: watched and its images collected when its name is
 * valid; no template, an invalid name or definition is logged and noted.
 * Returns the function to prepare, or NULL. */
static struct function *startup_load(struct reconciler *rc, struct track *t)
{
	char *fdir = xasprintf("%s/%s", rc->dir, t->name);
	struct function_entry e = {.name = t->name};
	e.status = function_load(rc->dir, t->name, &e.fn, &e.errors, &e.warnings);
	function_entry_log(&e);
	bool valid_name = function_name_valid(t->name, NULL);
	if (valid_name) {
		watch_tree(rc, t->name, fdir, 0);
		startup_gc_add(rc, t->name);
	}
	if (e.status == FUNCTION_NO_TEMPLATE) {
		log_info(LOG_ATTRS("function", t->name),
			 "directory has no template.yaml yet; not ready");
		t->note = NOTE_NO_TEMPLATE;
	} else if (e.status == FUNCTION_INVALID && !valid_name) {
		t->note = NOTE_BAD_NAME;
	} else if (e.status == FUNCTION_INVALID) {
		/* Remember the failing fingerprint: not parsed again until it changes. */
		char fp[FINGERPRINT_HEX_LEN + 1] = "";
		char *ferr = NULL;
		if (fingerprint_dir(fdir, fp, &ferr) < 0)
			fp[0] = '\0';
		free(ferr);
		char *why = function_entry_errors(&e);
		note_failure(rc, t, fp, why, false);
		free(why);
	}
	strlist_free(&e.errors);
	strlist_free(&e.warnings);
	free(fdir);
	if (e.status == FUNCTION_OK)
		return e.fn;
	function_free(e.fn);
	return NULL;
}

/*
 * Startup preparation, concurrent (reconcile.c's note "Startup pool"). One
 * job per valid function, in name order: a preparer reads its files,
 * fingerprints them and prepares its image; the loading thread finishes the
 * jobs in order (logs, state database, the active version).
 */
struct prep_job {
	const char *name;	  /* the track's */
	const struct runtime *rt; /* the function's */
	bool done;
	/* Results, written by the preparer before done is set. */
	char *read_err; /* the files could not be read */
	char fp[FINGERPRINT_HEX_LEN + 1];
	int build_rc;
	struct image_result res;
	char *why;
};

struct prep_pool {
	const char *dir;
	struct prep_job *jobs;
	size_t njobs, next; /* next: the first job not yet claimed */
	pthread_mutex_t lock;
	pthread_cond_t cond; /* a job is done */
};

/* The pool size for n jobs: the online cores (at least 2), at most
 * RECONCILE_PREPARE_MAX and n. */
size_t reconcile_prepare_threads(size_t n)
{
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	size_t k = cores < 2 ? 2 : (size_t)cores;
	if (k > RECONCILE_PREPARE_MAX)
		k = RECONCILE_PREPARE_MAX;
	return k < n ? k : n;
}

static void prep_run(struct prep_pool *p, struct prep_job *j, struct docker *d)
{
	char *fdir = xasprintf("%s/%s", p->dir, j->name);
	struct fn_tree tree;
	char *terr = NULL;
	if (fn_tree_load(fdir, &tree, &terr) < 0) {
		j->read_err = xasprintf("function \"%s\": %s", j->name, terr);
		free(terr);
	} else {
		fingerprint_tree(&tree, j->fp);
		j->build_rc = image_prepare_tree(d, j->name, j->rt, &tree, &j->res, &j->why);
		fn_tree_free(&tree);
	}
	free(fdir);
}

/* Claims the next job and runs it on d; false when none is left. */
static bool prep_take(struct prep_pool *p, struct docker *d)
{
	pthread_mutex_lock(&p->lock);
	if (p->next >= p->njobs) {
		pthread_mutex_unlock(&p->lock);
		return false;
	}
	struct prep_job *j = &p->jobs[p->next++];
	pthread_mutex_unlock(&p->lock);
	prep_run(p, j, d);
	pthread_mutex_lock(&p->lock);
	j->done = true;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
	return true;
}

/* A preparer thread: its own Docker connection, jobs until none is left. */
static void *prep_main(void *arg)
{
	struct prep_pool *p = arg;
	struct docker *d = NULL;
	char *err = NULL;
	if (docker_open(&d, &err) < 0) {
		/* The loading thread takes its share of the jobs. */
		log_warn(LOG_ATTRS("error", err ? err : ""),
			 "image preparer has no Docker connection; preparing with fewer");
		free(err);
		return NULL;
	}
	while (prep_take(p, d))
		;
	docker_close(d);
	return NULL;
}

/* Prepares fns[i] (taken) for ok[i], i < n, with up to
 * reconcile_prepare_threads(n) preparations at once: this thread (on d) and
 * that many minus one preparer threads, joined before returning. */
static void startup_prepare_all(struct reconciler *rc, struct docker *d, struct track **ok,
				struct function **fns, size_t n)
{
	struct prep_pool p = {.dir = rc->dir, .njobs = n};
	p.jobs = xcalloc(n + 1, sizeof *p.jobs);
	for (size_t i = 0; i < n; i++)
		p.jobs[i] = (struct prep_job){.name = ok[i]->name, .rt = fns[i]->tpl->runtime};
	pthread_mutex_init(&p.lock, NULL);
	pthread_cond_init(&p.cond, NULL);
	size_t nthreads = reconcile_prepare_threads(n);
	pthread_t *th = xcalloc(nthreads + 1, sizeof *th);
	size_t started = 0;
	for (size_t i = 0; i + 1 < nthreads; i++) {
		int e = pthread_create(&th[started], NULL, prep_main, &p);
		if (e != 0) {
			log_warn(LOG_ATTRS("error", strerror(e)),
				 "cannot start an image preparer; preparing with fewer");
			break;
		}
		char tname[16];
		snprintf_(tname, sizeof tname, "prepare-%zu", started + 1);
		pthread_setname_np(th[started], tname);
		started++;
	}
	for (size_t i = 0; i < n; i++) {
		struct prep_job *j = &p.jobs[i];
		pthread_mutex_lock(&p.lock);
		while (!j->done) {
			if (p.next < p.njobs) {
				/* Rather than wait, this thread prepares one too. */
				pthread_mutex_unlock(&p.lock);
				prep_take(&p, d);
				pthread_mutex_lock(&p.lock);
				continue;
			}
			pthread_cond_wait(&p.cond, &p.lock);
		}
		pthread_mutex_unlock(&p.lock);
		struct track *t = ok[i];
		if (j->read_err) {
			log_error(LOG_ATTRS("function", t->name, "error", j->read_err),
				  "cannot read the function; skipped");
			note_failure(rc, t, NULL, j->read_err, false);
			free(j->read_err);
			function_free(fns[i]);
		} else {
			prepare_finish(rc, t, fns[i], j->fp, j->build_rc, &j->res, j->why, true);
			free(j->why);
		}
	}
	for (size_t i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	free(th);
	pthread_cond_destroy(&p.cond);
	pthread_mutex_destroy(&p.lock);
	free(p.jobs);
}

size_t reconciler_load(struct reconciler *rc, struct docker *d)
{
	char *err = NULL;
	gc_previous_functions(rc);
	char **names = NULL;
	size_t nnames = 0;
	if (function_dir_names(rc->dir, &names, &nnames, &err) < 0) {
		/* Not "no functions": nothing is read from the stream until the
		 * thread's retries can read it and prepare what it holds. Nor
		 * are the previous run's images collected meanwhile. */
		log_warn(LOG_ATTRS("path", rc->dir, "error", err),
			 "cannot read the functions directory; waiting for it");
		free(err);
		rc->unreadable = true;
		atomic_store(&rc->readable, false);
		function_names_free(rc->startup_gc, rc->nstartup_gc);
		rc->startup_gc = NULL;
		rc->nstartup_gc = 0;
		publish(rc);
		return 0;
	}
	struct track **ok = xcalloc(nnames + 1, sizeof *ok);
	struct function **fns = xcalloc(nnames + 1, sizeof *fns);
	struct state_def *defs = xcalloc(nnames + 1, sizeof *defs);
	struct state_function *sfs = xcalloc(nnames + 1, sizeof *sfs);
	size_t nok = 0;
	for (size_t i = 0; i < nnames; i++) {
		struct track *t = track_get(rc, names[i], NULL);
		struct function *fn = startup_load(rc, t);
		if (!fn)
			continue;
		ok[nok] = t;
		fns[nok] = fn;
		def_init(&defs[nok], fn);
		sfs[nok] = defs[nok].f;
		nok++;
	}
	/* The state database learns every valid definition before the builds. */
	if (rc->cfg.state && state_replace_all(rc->cfg.state, sfs, nok, time(NULL), &err) < 0)
		state_failed("record the loaded functions", NULL, err);
	for (size_t i = 0; i < nok; i++)
		def_free(&defs[i]);
	free(defs);
	free(sfs);
	startup_prepare_all(rc, d, ok, fns, nok);
	free(ok);
	free(fns);
	function_names_free(names, nnames);
	return publish(rc);
}

/* ---- the thread -------------------------------------------------------- */

static void mark_dirty(struct reconciler *rc, const char *name, int64_t now)
{
	bool created = false;
	struct track *t = track_get(rc, name, &created);
	if (!t->due_ns)
		t->first_ns = now;
	t->due_ns = now + rc->cfg.debounce_ns;
	if (t->due_ns > t->first_ns + RECONCILE_DEBOUNCE_MAX_NS)
		t->due_ns = t->first_ns + RECONCILE_DEBOUNCE_MAX_NS;
	if (created)
		log_debug(LOG_ATTRS("function", name), "new directory in the functions directory");
}

static void handle_event(struct reconciler *rc, const struct inotify_event *ev, int64_t now,
			 const char **rescan)
{
	if (ev->mask & IN_Q_OVERFLOW) {
		log_warn(NULL, "inotify queue overflowed; rescanning every function");
		*rescan = "overflow";
		return;
	}
	struct watch *w = watch_find(rc, ev->wd);
	if (ev->mask & IN_IGNORED) {
		if (ev->wd == rc->root_wd)
			rc->root_wd = -1;
		watch_forget(rc, ev->wd);
		return;
	}
	if (!w)
		return;
	if (!w->fn) {
		if (!ev->len) { /* the functions directory itself moved or went */
			if (ev->mask & (IN_MOVE_SELF | IN_DELETE_SELF)) {
				log_warn(
					LOG_ATTRS("path", rc->dir),
					"the functions directory was moved or removed; rescanning");
				/* The watches follow the old directory: its events no
				 * longer say anything about the functions directory. */
				unwatch_all(rc);
				*rescan = "moved";
			}
			return;
		}
		if (function_dir_staging(ev->name))
			return; /* git sync's staging: the rename into place counts */
		char *p = xasprintf("%s/%s", rc->dir, ev->name);
		struct stat st;
		bool isdir = (ev->mask & IN_ISDIR) || (stat(p, &st) == 0 && S_ISDIR(st.st_mode));
		if (isdir || track_find(rc, ev->name))
			mark_dirty(rc, ev->name, now);
		if (isdir && (ev->mask & (IN_CREATE | IN_MOVED_TO)) &&
		    function_name_valid(ev->name, NULL))
			watch_tree(rc, ev->name, p, 0);
		free(p);
		return;
	}
	char *fn = xstrdup(w->fn);
	if ((ev->mask & (IN_CREATE | IN_MOVED_TO)) && (ev->mask & IN_ISDIR) && ev->len) {
		char *sub = xasprintf("%s/%s", w->path, ev->name);
		int depth = 0;
		for (const char *c = sub + strlen(rc->dir) + 1; *c; c++)
			depth += *c == '/';
		watch_tree(rc, fn, sub, depth);
		free(sub);
	}
	mark_dirty(rc, fn, now);
	free(fn);
}

/* Reads every queued inotify event. */
static void drain_events(struct reconciler *rc, int64_t now, const char **rescan)
{
	char buf[64 * 1024] __attribute__((aligned(__alignof__(struct inotify_event))));
	for (;;) {
		ssize_t n = read(rc->ifd, buf, sizeof buf);
		if (n <= 0)
			return;
		for (char *p = buf; p < buf + n;) {
			const struct inotify_event *ev = (const struct inotify_event *)p;
			handle_event(rc, ev, now, rescan);
			p += sizeof *ev + ev->len;
		}
	}
}

/*
 * The periodic backstop (also after a queue overflow or when the functions
 * directory itself moved): every directory entry and every known function.
 * A functions directory that is missing keeps the current functions; one
 * found back, or replaced by another directory (a renamed-in copy, a
 * symlink pointed elsewhere), is watched anew with every function's tree.
 */
/* The outcome of a look at the functions directory itself: cfg.on_readable
 * hears of each change. */
static void set_readable(struct reconciler *rc, bool ok)
{
	if (rc->unreadable == !ok)
		return;
	rc->unreadable = !ok;
	atomic_store(&rc->readable, ok);
	if (rc->cfg.on_readable)
		rc->cfg.on_readable(rc->cfg.ctx, ok);
}

bool reconciler_readable(struct reconciler *rc)
{
	return atomic_load(&rc->readable);
}

static void full_pass(struct reconciler *rc, struct docker *d, const char *reason)
{
	struct stat st;
	int serr = stat(rc->dir, &st) < 0 ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
	if (serr) {
		set_readable(rc, false);
		if (!rc->root_missing)
			log_warn(
				LOG_ATTRS("path", rc->dir, "error", strerror(serr)),
				"the functions directory is missing; keeping the current functions "
				"until it is back");
		rc->root_missing = true;
		return;
	}
	bool replaced = rc->root_known && (st.st_dev != rc->root_dev || st.st_ino != rc->root_ino);
	if (rc->root_missing || replaced || rc->root_wd < 0) {
		if (rc->root_missing)
			log_info(LOG_ATTRS("path", rc->dir),
				 "the functions directory is back; watching it again");
		else if (replaced)
			log_info(LOG_ATTRS("path", rc->dir),
				 "the functions directory was replaced; watching the new one");
		unwatch_all(rc);
		watch_root(rc);
		rc->root_missing = false;
	}
	char **names = NULL;
	size_t n = 0;
	char *err = NULL;
	if (function_dir_names(rc->dir, &names, &n, &err) < 0) {
		/* A transient failure must not unpublish everything. */
		if (!rc->unreadable)
			log_warn(LOG_ATTRS("error", err), "cannot read the functions directory; "
							  "keeping the current functions");
		free(err);
		set_readable(rc, false);
		return;
	}
	for (size_t i = 0; i < rc->ntracks; i++)
		rc->tracks[i]->seen = false;
	for (size_t i = 0; i < n; i++) {
		struct track *t = track_get(rc, names[i], NULL);
		t->seen = true;
	}
	function_names_free(names, n);
	watch_functions(rc);
	/* look() may drop tracks: iterate over a copy of the names. */
	size_t nt = rc->ntracks;
	char **todo = xcalloc(nt + 1, sizeof *todo);
	for (size_t i = 0; i < nt; i++)
		todo[i] = xstrdup(rc->tracks[i]->name);
	for (size_t i = 0; i < nt && !atomic_load(&rc->stopping); i++) {
		struct track *t = track_find(rc, todo[i]);
		if (t && !t->due_ns) /* a debounce in progress looks by itself */
			look(rc, d, t);
	}
	function_names_free(todo, nt);
	char count[24];
	snprintf_(count, sizeof count, "%zu", rc->ntracks);
	log_debug(LOG_ATTRS("reason", reason, "entries", count), "functions directory rescanned");
	if (!atomic_load(&rc->stopping))
		set_readable(rc, true);
}

static void startup_gc(struct reconciler *rc, struct docker *d)
{
	if (!rc->nstartup_gc)
		return;
	struct keep_list keep = {0};
	registry_images_in_use(rc->cfg.registry, keep_add, &keep);
	for (size_t i = 0; i < rc->nstartup_gc && !atomic_load(&rc->stopping); i++)
		gc_function(rc, d, rc->startup_gc[i], &keep);
	keep_free(&keep);
	function_names_free(rc->startup_gc, rc->nstartup_gc);
	rc->startup_gc = NULL;
	rc->nstartup_gc = 0;
}

/* Time to the next full pass: sooner while the functions directory is missing. */
static int64_t next_pass_in(const struct reconciler *rc)
{
	return (rc->root_missing || rc->unreadable) && ROOT_RETRY_NS < rc->cfg.rescan_ns
		       ? ROOT_RETRY_NS
		       : rc->cfg.rescan_ns;
}

static void *reconcile_main(void *arg)
{
	struct reconciler *rc = arg;
	struct docker *d = rc->d;
	int64_t next_rescan = now_mono_ns() + next_pass_in(rc);
	startup_gc(rc, d);
	while (!atomic_load(&rc->stopping)) {
		int64_t now = now_mono_ns();
		int64_t next = next_rescan;
		for (size_t i = 0; i < rc->ntracks; i++)
			if (rc->tracks[i]->due_ns && rc->tracks[i]->due_ns < next)
				next = rc->tracks[i]->due_ns;
		if (rc->ngc && rc->gc_next_ns < next)
			next = rc->gc_next_ns;
		int timeout = next <= now ? 0 : (int)((next - now) / NS_PER_MS + 1);
		struct pollfd pf[2] = {{rc->stopfd, POLLIN, 0}, {rc->ifd, POLLIN, 0}};
		int np = rc->ifd >= 0 ? 2 : 1;
		if (poll(pf, (nfds_t)np, timeout) < 0 && errno != EINTR)
			break;
		if (atomic_load(&rc->stopping) || (pf[0].revents & POLLIN))
			break;
		now = now_mono_ns();
		const char *rescan = NULL;
		if (np == 2 && (pf[1].revents & POLLIN))
			drain_events(rc, now, &rescan);
		if (rescan || now >= next_rescan) {
			full_pass(rc, d,
				  rescan			       ? rescan
				  : rc->root_missing || rc->unreadable ? "retry"
								       : "periodic");
			next_rescan = now_mono_ns() + next_pass_in(rc);
			rescan = NULL;
		}
		/* Debounced functions whose quiet period is over. */
		for (;;) {
			now = now_mono_ns();
			struct track *due = NULL;
			for (size_t i = 0; i < rc->ntracks && !due; i++)
				if (rc->tracks[i]->due_ns && rc->tracks[i]->due_ns <= now)
					due = rc->tracks[i];
			if (!due || atomic_load(&rc->stopping))
				break;
			due->due_ns = due->first_ns = 0;
			look(rc, d, due);
			/* Events that arrived during a build are read before the next look. */
			if (rc->ifd >= 0)
				drain_events(rc, now_mono_ns(), &rescan);
		}
		if (rescan) {
			full_pass(rc, d, rescan);
			next_rescan = now_mono_ns() + next_pass_in(rc);
		}
		gc_run(rc, d, now_mono_ns());
	}
	pthread_mutex_lock(&rc->done_lock);
	rc->done = true;
	pthread_cond_broadcast(&rc->done_cond);
	pthread_mutex_unlock(&rc->done_lock);
	return NULL;
}

int reconciler_start(struct reconciler *rc, struct docker *d, char **err)
{
	rc->d = d;
	int e = thread_start(&rc->thread, "reconcile", reconcile_main, rc);
	if (e != 0) {
		*err = xasprintf("cannot start the reconciler thread: %s", strerror(e));
		docker_close(d);
		rc->d = NULL;
		return -1;
	}
	rc->started = true;
	return 0;
}

int reconciler_stop(struct reconciler *rc, int64_t timeout_ms)
{
	if (!rc || !rc->started)
		return 0;
	atomic_store(&rc->stopping, 1);
	uint64_t one = 1;
	if (write(rc->stopfd, &one, sizeof one) < 0) {
		/* The flag alone stops it at its next wake-up. */
	}
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += timeout_ms / 1000;
	until.tv_nsec += (timeout_ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&rc->done_lock);
	while (!rc->done)
		if (pthread_cond_timedwait(&rc->done_cond, &rc->done_lock, &until) == ETIMEDOUT)
			break;
	bool done = rc->done;
	pthread_mutex_unlock(&rc->done_lock);
	if (!done) {
		log_warn(NULL, "the reconciler is still preparing an image; not waiting for it");
		return -1;
	}
	pthread_join(rc->thread, NULL);
	rc->started = false;
	docker_close(rc->d);
	rc->d = NULL;
	return 0;
}

void reconciler_free(struct reconciler *rc)
{
	if (!rc)
		return;
	for (size_t i = 0; i < rc->ntracks; i++) {
		free(rc->tracks[i]->name);
		free(rc->tracks[i]->error);
		free(rc->tracks[i]);
	}
	free(rc->tracks);
	for (size_t i = 0; i < rc->nwatches; i++) {
		free(rc->watches[i].fn);
		free(rc->watches[i].path);
	}
	free(rc->watches);
	for (size_t i = 0; i < rc->ngc; i++) {
		free(rc->gc[i].fn);
		free(rc->gc[i].image);
	}
	free(rc->gc);
	function_names_free(rc->startup_gc, rc->nstartup_gc);
	if (rc->ifd >= 0)
		close(rc->ifd);
	if (rc->stopfd >= 0)
		close(rc->stopfd);
	pthread_mutex_destroy(&rc->done_lock);
	pthread_cond_destroy(&rc->done_cond);
	free(rc->dir);
	free(rc);
}
