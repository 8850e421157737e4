/*
 * Cron scheduler. See scheduler.h for the contract; the notes that matter
 * when changing this file:
 *
 * - `done_s` is the evaluation horizon: every occurrence at or before it
 *   (Unix seconds) has been handled by this worker (published, found
 *   duplicate, failed or skipped as too late). Jobs are therefore rebuilt
 *   from scratch on every snapshot change as cron_next(done_s): for an
 *   unchanged schedule that is exactly the next due time it already had,
 *   for a new or changed one it is its first occurrence not yet handled.
 *   No identity matching between old and new jobs is needed.
 * - A job borrows its struct cron and zone from the snapshot the scheduler
 *   holds a reference to, so the objects stay valid until the next swap.
 * - Everything in the loop is bounded: one cron_next per occurrence
 *   published, and one per skipped stretch however long it is (the skip
 *   jumps straight to the first occurrence still inside the grace).
 */
#include "engine/scheduler.h"

#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "model/cron.h"
#include "base/duration.h"
#include "io/event.h"
#include "model/function.h"
#include "engine/invocation.h"
#include "base/log.h"
#include "engine/metrics.h"
#include "base/rfc3339.h"
#include "model/template.h"
#include "base/util.h"

struct job {
	const char *function; /* borrowed from the held snapshot */
	const struct schedule *sched;
	int64_t next; /* Unix seconds; -1 when it never fires again */
};

struct scheduler {
	struct redis_uri uri;
	char *stream;
	struct registry *registry;
	int64_t grace_ns, poll_ns, start_ns;
	atomic_int stop;
	pthread_t thread;
	bool started; /* thread_start succeeded: stop joins it */

	struct snapshot *snap; /* held reference the jobs borrow from */
	struct job *jobs;
	size_t njobs;
	int64_t done_s;
	bool failing; /* last publish failed: log recovery once */
};

/* Publish-if-new. KEYS[1] dedup key, KEYS[2] stream; ARGV[1] the
 * occurrence id (the key's value), ARGV[2] TTL in ms, ARGV[3] the entry's
 * event field. Answers the new entry id, or 0 when the occurrence was
 * already published. The key and the entry are written together or not at
 * all: a failed XADD takes the key back. */
static const char publish_script[] =
	"local t = redis.call('TYPE', KEYS[2])['ok']\n"
	"if t ~= 'stream' and t ~= 'none' then\n"
	"  return redis.error_reply('WRONGTYPE ' .. KEYS[2] .. ' holds a ' .. t .. ', not a "
	"stream')\n"
	"end\n"
	"if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"
	"  return 0\n"
	"end\n"
	"local id = redis.pcall('XADD', KEYS[2], '*', 'event', ARGV[3])\n"
	"if type(id) == 'table' and id.err then\n"
	"  redis.call('DEL', KEYS[1])\n"
	"  return id\n"
	"end\n"
	"return id\n";

/* Verification of a delivered occurrence. KEYS[1] dedup key; ARGV[1] the
 * occurrence id, ARGV[2] TTL in ms. 1 when the key holds that id (its TTL
 * is then renewed), 0 when it holds something else, -1 when it does not
 * exist, -2 when it is not a string. */
static const char verify_script[] = "local v = redis.pcall('GET', KEYS[1])\n"
				    "if type(v) == 'table' and v.err then return -2 end\n"
				    "if v == false then return -1 end\n"
				    "if v ~= ARGV[1] then return 0 end\n"
				    "redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
				    "return 1\n";

/* Both go by SHA (EVALSHA, EVAL once on NOSCRIPT: redis.h). */
static struct redis_script publish_sha, verify_sha;
static pthread_once_t scripts_once = PTHREAD_ONCE_INIT;
static void scripts_init(void)
{
	redis_script_init(&publish_sha, publish_script);
	redis_script_init(&verify_sha, verify_script);
}

static int64_t floor_div(int64_t a, int64_t b)
{
	int64_t q = a / b;
	return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

char *schedule_occurrence_id(const char *function, const char *handler, int64_t at_s)
{
	char ts[RFC3339_STR_MAX];
	rfc3339_format_utc(at_s * NS_PER_SEC, ts);
	return xasprintf("schedule:%s:%s:%s", function, handler, ts);
}

char *schedule_dedup_key(const char *stream, const char *occurrence_id)
{
	size_t off, len;
	if (keys_cluster() && redis_hash_tag(stream, strlen(stream), &off, &len))
		return xasprintf(SCHEDULE_KEY_PREFIX "%.*s:%s", (int)len + 2, stream + off - 1,
				 occurrence_id);
	return xasprintf(SCHEDULE_KEY_PREFIX "%s", occurrence_id);
}

char *schedule_payload(int64_t at_s)
{
	char ts[RFC3339_STR_MAX];
	rfc3339_format_utc(at_s * NS_PER_SEC, ts);
	return xasprintf("{\"scheduled_at\":\"%s\",\"source\":\"" SCHEDULE_SOURCE "\"}", ts);
}

char *schedule_entry(const char *function, const char *handler, int64_t at_s)
{
	char ts[RFC3339_STR_MAX];
	rfc3339_format_utc(at_s * NS_PER_SEC, ts);
	char *occ = schedule_occurrence_id(function, handler, at_s);
	/* Keys in this order, compact, as the original's encoder writes them. */
	json_t *o = json_object();
	json_object_set_new(o, "function", json_string(function));
	json_object_set_new(o, "handler", json_string(handler));
	json_object_set_new(o, "occurrence_id", json_string(occ));
	json_object_set_new(o, "scheduled_at", json_string(ts));
	json_object_set_new(o, "source", json_string(SCHEDULE_SOURCE));
	char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(o);
	free(occ);
	if (!text) /* out of memory, or a name that is not UTF-8 (validated) */
		abort();
	char *out = xstrdup(text);
	free(text);
	return out;
}

enum schedule_publish_result schedule_publish(struct redis *r, const char *stream,
					      const char *function, const char *handler,
					      int64_t at_s, char *entry_id, size_t idlen,
					      char **err)
{
	char *occ = schedule_occurrence_id(function, handler, at_s);
	char *key = schedule_dedup_key(stream, occ);
	char *entry = schedule_entry(function, handler, at_s);
	char ttl[24];
	snprintf_(ttl, sizeof ttl, "%lld", (long long)SCHEDULE_DEDUP_TTL_MS);
	const char *argv[] = {"2", key, stream, occ, ttl, entry};
	enum schedule_publish_result res = SCHEDULE_PUBLISH_FAILED;
	pthread_once(&scripts_once, scripts_init);
	redisReply *rep = redis_script_run(r, &publish_sha, (int)ARRAY_LEN(argv), argv, NULL);
	if (!rep) {
		*err = xstrdup(redis_errmsg(r));
	} else if (rep->type == REDIS_REPLY_STRING) {
		if (entry_id)
			snprintf_(entry_id, idlen, "%.*s", (int)rep->len, rep->str);
		res = SCHEDULE_PUBLISHED;
	} else if (rep->type == REDIS_REPLY_INTEGER && rep->integer == 0) {
		res = SCHEDULE_DUPLICATE;
	} else {
		*err = xstrdup(rep->type == REDIS_REPLY_ERROR
				       ? rep->str
				       : "unexpected reply to the publish script");
	}
	if (rep)
		freeReplyObject(rep);
	free(entry);
	free(key);
	free(occ);
	return res;
}

/* The string member key of obj, or NULL (absent, or not a string). */
static const struct event_value *str_member(const struct event_value *obj, const char *key)
{
	const struct event_value *v = event_get(obj, key, strlen(key));
	return v && v->type == EVENT_STRING ? v : NULL;
}

bool schedule_claimed(const struct event *ev)
{
	const struct event_value *root = ev ? event_root(ev) : NULL;
	const struct event_value *src = root ? str_member(root, "source") : NULL;
	if (!src || src->n != sizeof SCHEDULE_SOURCE - 1 ||
	    memcmp(src->u.str, SCHEDULE_SOURCE, src->n) != 0)
		return false;
	return event_get(root, "function", 8) && event_get(root, "handler", 7) &&
	       event_get(root, "occurrence_id", 13);
}

enum schedule_verdict schedule_envelope_check(const struct event *ev, struct schedule_route *out,
					      char **why)
{
	static const char *const names[] = {"function", "handler", "occurrence_id", "scheduled_at",
					    "source"};
	const struct event_value *root = event_root(ev);
	const struct event_value *v[5];
	for (size_t k = 0; k < 5; k++) {
		v[k] = str_member(root, names[k]);
		if (!v[k] || memchr(v[k]->u.str, '\0', v[k]->n) || v[k]->n == 0) {
			*why = xasprintf("%s %s", names[k],
					 !event_get(root, names[k], strlen(names[k])) ? "missing"
					 : !v[k] ? "not a string"
						 : "empty or not text");
			return SCHEDULE_FORGED;
		}
	}
	if (root->n != 5) {
		*why = xstrdup("members other than the five a publication writes");
		return SCHEDULE_FORGED;
	}
	/* scheduled_at: an instant in its canonical form (whole seconds, Z). */
	int64_t at = 0;
	int32_t ns = 0;
	char canon_ts[RFC3339_STR_MAX];
	bool ok = rfc3339_parse(v[3]->u.str, v[3]->n, &at, &ns) == 0 && ns == 0;
	if (ok) {
		rfc3339_format_utc(at * NS_PER_SEC, canon_ts);
		ok = strlen(canon_ts) == v[3]->n && memcmp(canon_ts, v[3]->u.str, v[3]->n) == 0;
	}
	if (!ok) {
		*why = xstrdup("scheduled_at is not an instant in whole seconds UTC");
		return SCHEDULE_FORGED;
	}
	int64_t at_s = at;
	char *occ = schedule_occurrence_id(v[0]->u.str, v[1]->u.str, at_s);
	ok = strlen(occ) == v[2]->n && memcmp(occ, v[2]->u.str, v[2]->n) == 0;
	free(occ);
	if (!ok) {
		*why = xstrdup(
			"occurrence_id does not name this function, handler and scheduled_at");
		return SCHEDULE_FORGED;
	}
	if (out)
		*out = (struct schedule_route){v[0]->u.str, v[1]->u.str, v[2]->u.str, at_s};
	return SCHEDULE_GENUINE;
}

enum schedule_verdict schedule_verify(struct redis *r, const char *stream,
				      const struct schedule_route *route, char **why)
{
	char *key = schedule_dedup_key(stream, route->occurrence_id);
	char ttl[24];
	snprintf_(ttl, sizeof ttl, "%lld", (long long)SCHEDULE_DEDUP_TTL_MS);
	const char *argv[] = {"1", key, route->occurrence_id, ttl};
	pthread_once(&scripts_once, scripts_init);
	redisReply *rep = redis_script_run(r, &verify_sha, (int)ARRAY_LEN(argv), argv, NULL);
	enum schedule_verdict rc = SCHEDULE_VERIFY_FAILED;
	if (!rep) {
		*why = xstrdup(redis_errmsg(r));
	} else if (rep->type != REDIS_REPLY_INTEGER) {
		*why = xstrdup(rep->type == REDIS_REPLY_ERROR
				       ? rep->str
				       : "unexpected reply to the verify script");
	} else if (rep->integer == 1) {
		rc = SCHEDULE_GENUINE;
	} else {
		rc = SCHEDULE_FORGED;
		*why = xasprintf("dedup key %s %s", key,
				 rep->integer == 0    ? "holds another occurrence id"
				 : rep->integer == -1 ? "does not exist"
						      : "is not a string");
	}
	if (rep)
		freeReplyObject(rep);
	free(key);
	return rc;
}

const struct schedule *schedule_find(const struct fn_version *fv, const char *handler)
{
	if (!fv || !handler)
		return NULL;
	const struct template *t = fv->fn->tpl;
	for (size_t i = 0; i < t->nschedules; i++)
		if (strcmp(t->schedules[i].handler, handler) == 0)
			return &t->schedules[i];
	return NULL;
}

/* ---- the thread --------------------------------------------------------- */

/* Rebuilds the job list from s->snap (see the note on done_s above). */
static void jobs_rebuild(struct scheduler *s)
{
	free(s->jobs);
	s->jobs = NULL;
	s->njobs = 0;
	size_t n = 0;
	for (size_t i = 0; i < s->snap->nfns; i++)
		n += s->snap->fns[i]->fn->tpl->nschedules;
	s->jobs = xcalloc(n + 1, sizeof *s->jobs);
	for (size_t i = 0; i < s->snap->nfns; i++) {
		const struct function *fn = s->snap->fns[i]->fn;
		for (size_t j = 0; j < fn->tpl->nschedules; j++) {
			const struct schedule *sc = &fn->tpl->schedules[j];
			if (!sc->cron)
				continue;
			struct job *jb = &s->jobs[s->njobs++];
			jb->function = fn->name;
			jb->sched = sc;
			jb->next = cron_next(sc->cron, sc->tz, s->done_s);
		}
	}
}

static void publish_one(struct scheduler *s, struct redis *r, const struct job *jb, int64_t at_s,
			int64_t late_ns)
{
	char ts[RFC3339_STR_MAX], late[DURATION_STR_MAX], id[64] = "";
	char *err = NULL;
	rfc3339_format_utc(at_s * NS_PER_SEC, ts);
	duration_format(late_ns / NS_PER_MS * NS_PER_MS, late);
	char *occ = schedule_occurrence_id(jb->function, jb->sched->handler, at_s);
	enum schedule_publish_result res = SCHEDULE_PUBLISH_FAILED;
	if (!redis_is_connected(r) && redis_connect(r) < 0)
		err = xstrdup(redis_errmsg(r));
	else
		res = schedule_publish(r, s->stream, jb->function, jb->sched->handler, at_s, id,
				       sizeof id, &err);
	const char *const attrs[] = {
		"function",	 jb->function, "handler", jb->sched->handler, "scheduled_at", ts,
		"occurrence_id", occ,	       NULL};
	switch (res) {
	case SCHEDULE_PUBLISHED:
		metrics_inc(METRIC_SCHEDULE_PUBLISHED);
		log_info(LOG_ATTRS("function", jb->function, "handler", jb->sched->handler,
				   "scheduled_at", ts, "occurrence_id", occ, "message_id", id,
				   "late", late),
			 "Schedule: occurrence published");
		break;
	case SCHEDULE_DUPLICATE:
		metrics_inc(METRIC_SCHEDULE_DUPLICATE);
		log_debug(attrs, "Schedule: occurrence already published");
		break;
	case SCHEDULE_PUBLISH_FAILED:
		metrics_inc(METRIC_SCHEDULE_PUBLISH_FAILURE);
		/* One WARN when publishing starts failing, DEBUG while it goes
		 * on (an every-second schedule would flood the log otherwise);
		 * the other workers may still publish the occurrence. */
		log_record(s->failing ? LOG_DEBUG : LOG_WARN,
			   LOG_ATTRS("function", jb->function, "handler", jb->sched->handler,
				     "scheduled_at", ts, "occurrence_id", occ, "reason", err),
			   "Schedule: publish failed");
		s->failing = true;
		free(err);
		free(occ);
		return;
	}
	if (s->failing) {
		s->failing = false;
		log_info(attrs, "Schedule: publishing recovered");
	}
	free(occ);
}

/* Handles every occurrence of jb due at or before now. */
static void run_job(struct scheduler *s, struct redis *r, struct job *jb, int64_t now_ns)
{
	int64_t now_s = floor_div(now_ns, NS_PER_SEC);
	while (jb->next >= 0 && jb->next <= now_s && !atomic_load(&s->stop)) {
		int64_t late = now_ns - jb->next * NS_PER_SEC;
		if (late > s->grace_ns) {
			/* Skip the whole stretch at once: the first occurrence still
			 * inside the grace is the first one >= ceil(now - grace). */
			int64_t min_s =
				floor_div(now_ns - s->grace_ns + NS_PER_SEC - 1, NS_PER_SEC);
			char ts[RFC3339_STR_MAX], ls[DURATION_STR_MAX], gs[DURATION_STR_MAX];
			rfc3339_format_utc(jb->next * NS_PER_SEC, ts);
			log_debug(LOG_ATTRS("function", jb->function, "handler", jb->sched->handler,
					    "scheduled_at", ts, "late",
					    duration_format(late / NS_PER_MS * NS_PER_MS, ls),
					    "grace", duration_format(s->grace_ns, gs)),
				  "schedule occurrence skipped: due while this worker was not "
				  "evaluating");
			jb->next = cron_next(jb->sched->cron, jb->sched->tz, min_s - 1);
			continue;
		}
		publish_one(s, r, jb, jb->next, late);
		jb->next = cron_next(jb->sched->cron, jb->sched->tz, jb->next);
	}
}

static void *scheduler_main(void *arg)
{
	struct scheduler *s = arg;
	struct redis_opts o = {.connect_timeout_ms = 1000, .command_timeout_ms = 2000};
	struct redis *r = redis_new(&s->uri, &o);

	while (!atomic_load(&s->stop)) {
		struct snapshot *cur = registry_acquire(s->registry);
		if (cur != s->snap) {
			registry_release(s->registry, s->snap);
			s->snap = cur;
			jobs_rebuild(s);
			char n[24];
			snprintf_(n, sizeof n, "%zu", s->njobs);
			log_debug(LOG_ATTRS("schedules", n),
				  "schedules reloaded from the function registry");
		} else {
			registry_release(s->registry, cur);
		}

		int64_t now_ns = now_wall_ns();
		for (size_t i = 0; i < s->njobs && !atomic_load(&s->stop); i++)
			run_job(s, r, &s->jobs[i], now_ns);
		int64_t now_s = floor_div(now_ns, NS_PER_SEC);
		if (now_s > s->done_s)
			s->done_s = now_s;

		/* Sleep until the earliest due instant or the next snapshot poll. */
		int64_t wake = now_wall_ns() + s->poll_ns;
		for (size_t i = 0; i < s->njobs; i++)
			if (s->jobs[i].next >= 0 && s->jobs[i].next * NS_PER_SEC < wake)
				wake = s->jobs[i].next * NS_PER_SEC;
		int64_t left = wake - now_wall_ns();
		if (left > 0)
			sleep_ms_interruptible((left + NS_PER_MS - 1) / NS_PER_MS, &s->stop);
	}
	redis_free(r);
	return NULL;
}

struct scheduler *scheduler_start(const struct scheduler_config *cfg)
{
	struct scheduler *s = xcalloc(1, sizeof *s);
	redis_uri_copy(&s->uri, cfg->uri);
	s->stream = xstrdup(cfg->stream);
	s->registry = cfg->registry;
	s->grace_ns = cfg->grace_ns > 0 ? cfg->grace_ns : SCHEDULER_GRACE_NS;
	s->poll_ns = cfg->poll_ns > 0 ? cfg->poll_ns : SCHEDULER_POLL_NS;
	s->start_ns = cfg->start_ns > 0 ? cfg->start_ns : now_wall_ns();
	/* Only occurrences strictly after the start instant: cron_next(floor). */
	s->done_s = floor_div(s->start_ns, NS_PER_SEC);
	s->snap = registry_acquire(s->registry);
	jobs_rebuild(s);

	char start[RFC3339_STR_MAX], grace[DURATION_STR_MAX];
	rfc3339_format_utc(s->start_ns, start);
	log_info(LOG_ATTRS("start", start, "grace", duration_format(s->grace_ns, grace)),
		 "Cron scheduler started with %zu schedule job(s)", s->njobs);
	int e = thread_start(&s->thread, "scheduler", scheduler_main, s);
	if (e != 0)
		log_warn(LOG_ATTRS("error", strerror(e)), "cannot start the cron scheduler thread");
	s->started = e == 0;
	return s;
}

void scheduler_stop(struct scheduler *s)
{
	if (!s)
		return;
	atomic_store(&s->stop, 1);
	if (s->started)
		pthread_join(s->thread, NULL);
	free(s->jobs);
	registry_release(s->registry, s->snap);
	redis_uri_free(&s->uri);
	free(s->stream);
	free(s);
	log_info(NULL, "Cron scheduler stopped");
}
