/*
 * The liveness record; the contract is in liveness.h.
 *
 * Why renewals are watched through PTTL instead of a changing value: the
 * value names the holder and stays the same for its whole life, so the
 * renew script can compare it in one GET; a renewal shows as the remaining
 * time going up, which it never does otherwise (it only counts down).
 */
#include "engine/liveness.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/duration.h"
#include "base/log.h"
#include "base/rfc3339.h"
#include "base/util.h"
#include "engine/invocation.h"
#include "engine/keys.h"

/* A PTTL this much above the lowest seen is a renewal (a renewal adds about
 * LIVENESS_REFRESH_MS; between two polls it only goes down). */
#define RENEWAL_MIN_MS 500

/* KEYS[1] record; ARGV[1] value, ARGV[2] TTL ms. 1 when taken, else
 * {holder's value, its PTTL}. */
static const char acquire_lua[] =
	"if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end\n"
	"return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}\n";
/* Renews the record if it holds ARGV[1]: {1}; takes it again if it is gone:
 * {2}; else {0, holder's value}. */
static const char renew_lua[] =
	"local v = redis.call('GET', KEYS[1])\n"
	"if v == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return {1} end\n"
	"if not v then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return {2} end\n"
	"return {0, v}\n";
/* Deletes the record if it holds ARGV[1]: 1, else 0. */
static const char release_lua[] =
	"if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end\n"
	"return 0\n";

static struct redis_script acquire_script, renew_script, release_script;
static pthread_once_t scripts_once = PTHREAD_ONCE_INIT;

static void scripts_init(void)
{
	redis_script_init(&acquire_script, acquire_lua);
	redis_script_init(&renew_script, renew_lua);
	redis_script_init(&release_script, release_lua);
}

struct liveness {
	struct redis *r; /* the liveness thread's; main's again once it ended */
	char *key;
	char value[LIVENESS_VALUE_MAX];
	const char *consumer, *stream, *group; /* borrowed from the config */
	void (*on_lost)(void *ctx);
	void *ctx;
	pthread_t thread;
	bool running;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop; /* under mu */
	atomic_bool lost;
};

/* ---- the record's key and value ----------------------------------------- */

char *liveness_key(const char *stream, const char *group, const char *consumer)
{
	char *s = keys_encode(stream), *g = keys_pct_encode(group), *c = keys_pct_encode(consumer);
	char *k = xasprintf("relay:consumer:%s:%s:%s", s, g, c);
	free(s);
	free(g);
	free(c);
	return k;
}

static bool is_hex32(const char *s)
{
	size_t i = 0;
	for (; s[i]; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return i == 32;
}

/* Non-empty, printable ASCII without spaces, shorter than max. */
static bool is_word(const char *s, size_t max)
{
	size_t i = 0;
	for (; s[i]; i++)
		if (s[i] <= ' ' || s[i] > '~')
			return false;
	return i > 0 && i < max;
}

int liveness_record_encode(const struct liveness_record *rec, char *out, size_t outsz)
{
	if (!is_hex32(rec->instance) || rec->pid < 0 ||
	    !is_word(rec->started, sizeof rec->started) ||
	    !is_word(rec->machine, sizeof rec->machine) || outsz < LIVENESS_VALUE_MAX)
		return -1;
	snprintf_(out, outsz, "instance=%s pid=%lld started=%s machine=%s", rec->instance, rec->pid,
		  rec->started, rec->machine);
	return 0;
}

/* Copies the field "<name>=<word>" at *p into out (size outsz) and moves
 * *p past it and one following space. -1 when it is not there. */
static int take_field(const char **p, const char *name, char *out, size_t outsz)
{
	size_t n = strlen(name);
	if (strncmp(*p, name, n) != 0 || (*p)[n] != '=')
		return -1;
	const char *v = *p + n + 1, *end = strchr(v, ' ');
	size_t len = end ? (size_t)(end - v) : strlen(v);
	if (len == 0 || len >= outsz)
		return -1;
	memcpy(out, v, len);
	out[len] = '\0';
	*p = end ? end + 1 : v + len;
	return 0;
}

int liveness_record_parse(const char *s, struct liveness_record *out)
{
	char pid[24];
	int64_t n;
	memset(out, 0, sizeof *out);
	if (strlen(s) >= LIVENESS_VALUE_MAX ||
	    take_field(&s, "instance", out->instance, sizeof out->instance) < 0 ||
	    take_field(&s, "pid", pid, sizeof pid) < 0 ||
	    take_field(&s, "started", out->started, sizeof out->started) < 0 ||
	    take_field(&s, "machine", out->machine, sizeof out->machine) < 0 ||
	    !is_hex32(out->instance) || pid[0] == '-' || pid[0] == '+' ||
	    parse_int64(pid, &n) < 0 || !is_word(out->started, sizeof out->started) ||
	    !is_word(out->machine, sizeof out->machine)) {
		memset(out, 0, sizeof *out);
		return -1;
	}
	out->pid = n;
	return 0;
}

/* This process's record. */
static void own_record(const char *instance, struct liveness_record *rec)
{
	memset(rec, 0, sizeof *rec);
	strlcpy_(rec->instance, instance, sizeof rec->instance);
	rec->pid = (long long)getpid();
	char t[RFC3339_STR_MAX];
	strlcpy_(rec->started, rfc3339_format_utc(now_wall_ns(), t), sizeof rec->started);
	strlcpy_(rec->machine, "-", sizeof rec->machine);
	FILE *f = fopen("/etc/machine-id", "re");
	if (f) {
		char line[64];
		if (fgets(line, sizeof line, f)) {
			str_trim(line);
			if (is_word(line, sizeof rec->machine))
				strlcpy_(rec->machine, line, sizeof rec->machine);
		}
		fclose(f);
	}
}

/* ---- log lines --------------------------------------------------------- */

/* One ERROR line msg about the process whose record value is value (its
 * fields "?" when value is not a record of ours). */
static void log_holder(const struct liveness *l, const char *value, const char *msg)
{
	struct liveness_record h;
	char pid[24] = "?";
	bool ok = liveness_record_parse(value, &h) == 0;
	if (ok)
		snprintf_(pid, sizeof pid, "%lld", h.pid);
	log_error(LOG_ATTRS("consumer", l->consumer, "stream", l->stream, "group", l->group,
			    "holder_pid", pid, "holder_started", ok ? h.started : "?",
			    "holder_machine", ok ? h.machine : "?", "key", l->key),
		  "%s", msg);
}

#define REFUSAL                                                                          \
	"another live Relay process consumes under this consumer name; to run several "  \
	"workers on one host give each its own hostname (its own container, or unshare " \
	"--uts)"

/* ---- taking the record --------------------------------------------------- */

/* {value, pttl} from the acquire script's reply; false when it is not that. */
static bool holder_of(const redisReply *rep, const char **value, long long *pttl)
{
	if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
	    rep->element[0]->type != REDIS_REPLY_STRING ||
	    rep->element[1]->type != REDIS_REPLY_INTEGER)
		return false;
	*value = rep->element[0]->str;
	*pttl = rep->element[1]->integer;
	return true;
}

/*
 * SET NX, or watch the holder until its record expires (taken: 0), it is
 * renewed or another takes it (alive: -1, logged), or Redis fails (-1,
 * logged).
 */
static int take(struct liveness *l)
{
	char ttl[24], seen[LIVENESS_VALUE_MAX] = "";
	snprintf_(ttl, sizeof ttl, "%d", LIVENESS_TTL_MS);
	const char *argv[] = {"1", l->key, l->value, ttl};
	long long low = 0; /* the lowest PTTL seen of the holder `seen` */
	int64_t first = 0; /* when `seen` was first seen */
	bool waited = false;
	for (;;) {
		redisReply *rep = redis_script_run(l->r, &acquire_script, 4, argv, NULL);
		const char *v = NULL;
		long long pttl = 0;
		if (!rep || rep->type == REDIS_REPLY_ERROR) {
			log_error(LOG_ATTRS("consumer", l->consumer, "error",
					    rep ? rep->str : redis_errmsg(l->r)),
				  "cannot take the liveness record of this consumer name");
			freeReplyObject(rep);
			return -1;
		}
		if (rep->type == REDIS_REPLY_INTEGER && rep->integer == 1) {
			freeReplyObject(rep);
			if (waited)
				log_info(LOG_ATTRS("consumer", l->consumer),
					 "the previous holder of this consumer name is gone; "
					 "liveness record taken");
			return 0;
		}
		if (!holder_of(rep, &v, &pttl)) {
			/* Gone between SET and GET cannot happen inside a script;
			 * anything else is not Redis as Relay knows it. */
			log_error(LOG_ATTRS("consumer", l->consumer),
				  "cannot take the liveness record of this consumer name: "
				  "unexpected reply");
			freeReplyObject(rep);
			return -1;
		}
		int64_t now = now_mono_ns();
		bool alive = false;
		if (pttl < 0) /* no expiry: set by hand; it would never go */
			alive = true;
		else if (!seen[0]) {
			strlcpy_(seen, v, sizeof seen);
			low = pttl;
			first = now;
		} else if (strcmp(seen, v) != 0 || pttl > low + RENEWAL_MIN_MS ||
			   now - first > (int64_t)(LIVENESS_TTL_MS + 2000) * NS_PER_MS)
			alive = true; /* a new holder, a renewal, or time is not passing */
		else if (pttl < low)
			low = pttl;
		if (alive) {
			log_holder(l, v, REFUSAL);
			freeReplyObject(rep);
			return -1;
		}
		if (!waited && now - first > (int64_t)(LIVENESS_REFRESH_MS + 500) * NS_PER_MS) {
			char pid[24] = "?", left[24];
			struct liveness_record h;
			bool ok = liveness_record_parse(v, &h) == 0;
			if (ok)
				snprintf_(pid, sizeof pid, "%lld", h.pid);
			snprintf_(left, sizeof left, "%lldms", pttl);
			log_warn(LOG_ATTRS("consumer", l->consumer, "holder_pid", pid,
					   "holder_started", ok ? h.started : "?", "expires_in",
					   left),
				 "the process holding this consumer name does not renew its "
				 "liveness record; waiting for the record to expire");
			waited = true;
		}
		freeReplyObject(rep);
		usleep(LIVENESS_POLL_MS * 1000);
	}
}

/* ---- the liveness thread ------------------------------------------------- */

/* The deadline ms from now, for pthread_cond_timedwait (monotonic). */
static struct timespec deadline_in(int ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	int64_t ns = (int64_t)ts.tv_nsec + (int64_t)ms * NS_PER_MS;
	ts.tv_sec += (time_t)(ns / NS_PER_SEC);
	ts.tv_nsec = (long)(ns % NS_PER_SEC);
	return ts;
}

/* One renewal; false when another instance holds the record (logged). */
static bool renew(struct liveness *l, const char *const *argv, bool *failing)
{
	redisReply *rep = NULL;
	if (redis_is_connected(l->r) || redis_connect(l->r) == 0)
		rep = redis_script_run(l->r, &renew_script, 4, (const char **)argv, NULL);
	if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements < 1 ||
	    rep->element[0]->type != REDIS_REPLY_INTEGER) {
		if (!*failing)
			log_warn(LOG_ATTRS("consumer", l->consumer, "error",
					   rep && rep->type == REDIS_REPLY_ERROR
						   ? rep->str
						   : redis_errmsg(l->r)),
				 "cannot renew the liveness record; retrying every %d s",
				 LIVENESS_REFRESH_MS / 1000);
		*failing = true;
		freeReplyObject(rep);
		return true;
	}
	long long code = rep->element[0]->integer;
	if (*failing && code != 0)
		log_info(LOG_ATTRS("consumer", l->consumer), "liveness record renewed again");
	*failing = false;
	if (code == 2)
		log_warn(LOG_ATTRS("consumer", l->consumer),
			 "the liveness record of this consumer name was gone (Redis restarted or "
			 "flushed, or unreachable for longer than its TTL); taken again");
	if (code == 0) {
		const char *v = rep->elements == 2 && rep->element[1]->type == REDIS_REPLY_STRING
					? rep->element[1]->str
					: "";
		log_holder(l, v,
			   "another Relay process took the liveness record of this consumer "
			   "name; stopping consumption");
	}
	freeReplyObject(rep);
	return code != 0;
}

/* Renews every LIVENESS_REFRESH_MS until stop. Each renewal runs under mu,
 * so once liveness_release set stop, none follows its delete. */
static void *liveness_main(void *arg)
{
	struct liveness *l = arg;
	char ttl[24];
	snprintf_(ttl, sizeof ttl, "%d", LIVENESS_TTL_MS);
	const char *const argv[] = {"1", l->key, l->value, ttl};
	bool failing = false, lost = false;
	pthread_mutex_lock(&l->mu);
	while (!l->stop) {
		struct timespec ts = deadline_in(LIVENESS_REFRESH_MS);
		while (!l->stop && pthread_cond_timedwait(&l->cv, &l->mu, &ts) == 0)
			;
		if (l->stop)
			break;
		if (!renew(l, argv, &failing)) {
			lost = true;
			break;
		}
	}
	pthread_mutex_unlock(&l->mu);
	if (lost) {
		atomic_store(&l->lost, true);
		if (l->on_lost)
			l->on_lost(l->ctx);
	}
	return NULL;
}

/* Stops the renewals (waiting for one in progress); the thread ends. */
static void stop_renewing(struct liveness *l)
{
	pthread_mutex_lock(&l->mu);
	l->stop = true;
	pthread_cond_signal(&l->cv);
	pthread_mutex_unlock(&l->mu);
}

/* Compare-and-delete on r; logs a failure (the record then expires). */
static void delete_record(struct liveness *l, struct redis *r)
{
	const char *argv[] = {"1", l->key, l->value};
	redisReply *rep = NULL;
	if (redis_is_connected(r) || redis_connect(r) == 0)
		rep = redis_script_run(r, &release_script, 3, argv, NULL);
	if (!rep || rep->type == REDIS_REPLY_ERROR)
		log_warn(LOG_ATTRS("key", l->key, "error", rep ? rep->str : redis_errmsg(r)),
			 "cannot delete the liveness record; it expires within %d s",
			 LIVENESS_TTL_MS / 1000);
	else
		log_debug(LOG_ATTRS("key", l->key), "liveness record deleted");
	freeReplyObject(rep);
}

/* ---- public -------------------------------------------------------------- */

int liveness_acquire(const struct liveness_config *cfg, struct liveness **out)
{
	pthread_once(&scripts_once, scripts_init);
	*out = NULL;
	struct liveness *l = xcalloc(1, sizeof *l);
	l->key = liveness_key(cfg->stream, cfg->group, cfg->consumer);
	l->consumer = cfg->consumer;
	l->stream = cfg->stream;
	l->group = cfg->group;
	l->on_lost = cfg->on_lost;
	l->ctx = cfg->ctx;
	pthread_mutex_init(&l->mu, NULL);
	cond_init_monotonic(&l->cv);
	struct liveness_record rec;
	own_record(cfg->instance, &rec);
	if (liveness_record_encode(&rec, l->value, sizeof l->value) < 0) {
		log_error(LOG_ATTRS("instance", cfg->instance),
			  "cannot encode the liveness record");
		goto fail;
	}
	l->r = redis_new(cfg->uri, NULL);
	if (redis_connect(l->r) < 0) {
		log_error(LOG_ATTRS("consumer", l->consumer, "error", redis_errmsg(l->r)),
			  "cannot take the liveness record of this consumer name");
		goto fail;
	}
	if (take(l) < 0)
		goto fail;
	log_info(LOG_ATTRS("key", l->key, "instance", rec.instance),
		 "liveness record of this consumer name taken");
	int e = thread_start(&l->thread, "liveness", liveness_main, l);
	if (e != 0) {
		log_error(LOG_ATTRS("error", strerror(e)), "cannot start the liveness thread");
		liveness_release(l);
		return -1;
	}
	l->running = true;
	*out = l;
	return 0;
fail:
	liveness_release(l);
	return -1;
}

bool liveness_lost(const struct liveness *l)
{
	return l && atomic_load(&l->lost);
}

void liveness_release(struct liveness *l)
{
	if (!l)
		return;
	if (l->running) {
		stop_renewing(l);
		pthread_join(l->thread, NULL);
		delete_record(l, l->r);
	}
	redis_free(l->r);
	pthread_mutex_destroy(&l->mu);
	pthread_cond_destroy(&l->cv);
	free(l->key);
	free(l);
}
