/*
 * A scheduled occurrence's stream entry: its id, dedup key, handler
 * payload and entry encoding, the publish-if-new script that writes it and
 * the proof, on delivery, that an entry claiming to be one is genuine. See
 * schedule.h for the wire format; the scheduler (scheduler.c) publishes
 * through schedule_publish, a worker (delivery.c) checks what it is handed
 * with schedule_claimed, schedule_envelope_check and schedule_verify.
 */
#include "engine/schedule.h"

#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/duration.h"
#include "base/rfc3339.h"
#include "base/util.h"
#include "engine/invocation.h"
#include "engine/keys.h"
#include "model/function.h"
#include "model/template.h"

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
