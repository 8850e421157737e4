/*
 * The startup orphan sweep (runner_sweep_orphans; the contract is in
 * runner.h): execution containers a Relay of this hostname, stream and
 * group left behind, found by their relay.* labels and removed.
 */
#include "engine/runner.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/duration.h"
#include "base/log.h"
#include "base/util.h"
#include "engine/runner_internal.h"

/* ---- orphan sweep ----------------------------------------------------- */

/* Whether a container's labels (its relay.stream and relay.group, when it
 * has them and a scope is set) say it belongs to this stream and group. */
static bool same_scope(json_t *labels)
{
	const char *ls = json_string_value(json_object_get(labels, "relay.stream"));
	const char *lg = json_string_value(json_object_get(labels, "relay.group"));
	if (!runner_scope_stream || !runner_scope_group || !ls || !lg)
		return true;
	char vs[RUNNER_LABEL_MAX + 1], vg[RUNNER_LABEL_MAX + 1];
	return strcmp(ls, runner_label_value(runner_scope_stream, vs, sizeof vs)) == 0 &&
	       strcmp(lg, runner_label_value(runner_scope_group, vg, sizeof vg)) == 0;
}

/* The sweep in progress: what runner_sweep_orphans's steps share. */
struct sweep {
	struct docker *d;
	const char *host;	   /* whose containers: relay.hostname */
	const char *keep_instance; /* never this instance's (may be NULL) */
	int timeout_ms;
	int64_t deadline;
	size_t count;	 /* removed so far */
	struct buf errs; /* "; "-separated failures so far */
};

/* GET /containers/json of every container (running or not) labelled
 * relay.function and relay.hostname=<host>, within the deadline: the
 * daemon's JSON array, or NULL with *err. */
static json_t *sweep_list(struct sweep *s, char **err)
{
	struct docker_response r = {0};
	json_t *list = NULL;
	char *enc = NULL, *path = NULL;
	json_t *f = json_pack("{s:[s, s+]}", "label", "relay.function", "relay.hostname=", s->host);
	char *filters = json_dumps(f, JSON_COMPACT);
	json_decref(f);
	if (!filters) {
		*err = xstrdup("orphan sweep: cannot encode the filter");
		goto out;
	}
	enc = docker_query_encode(filters);
	path = xasprintf("/containers/json?all=1&filters=%s", enc);
	int rq = docker_request(s->d, "GET", path, NULL, 0, NULL, runner_remaining_ms(s->deadline),
				&r);
	if (rq < 0 || r.status != 200) {
		*err = xasprintf("orphan sweep: listing containers: %s", docker_errmsg(s->d));
		goto out;
	}
	list = json_loadb(r.body, r.len, 0, NULL);
	if (!json_is_array(list)) {
		*err = xstrdup("orphan sweep: the daemon's container list is not a JSON array");
		json_decref(list);
		list = NULL;
	}
out:
	docker_response_free(&r);
	free(filters);
	free(enc);
	free(path);
	return list;
}

/* Whether the container id with labels is an orphan to remove. */
static bool sweep_ours(const struct sweep *s, const char *id, json_t *labels)
{
	const char *lh = json_string_value(json_object_get(labels, "relay.hostname"));
	/* Check again here: the filter is the daemon's, the rule is ours. */
	if (!id || !json_object_get(labels, "relay.function") || !lh || strcmp(lh, s->host) != 0)
		return false;
	/* Never this process's own (none exist at startup; a guard should
	 * the sweep ever run later). A container without the label was
	 * made by a Relay from before the label: swept as before. */
	const char *li = json_string_value(json_object_get(labels, "relay.instance"));
	if (s->keep_instance && li && strcmp(li, s->keep_instance) == 0)
		return false;
	/* Another stream or group's Relay under this hostname holds a
	 * liveness record of its own: its containers are not ours. */
	if (!same_scope(labels))
		return false;
	/* relay function invoke removes its own, and is no worker. */
	return !json_object_get(labels, "relay.local");
}

/* Removes container c of the list when it is ours; false once the
 * deadline passed (recorded in s->errs), so the sweep stops. */
static bool sweep_one(struct sweep *s, json_t *c)
{
	json_t *labels = json_object_get(c, "Labels");
	const char *id = json_string_value(json_object_get(c, "Id"));
	if (!sweep_ours(s, id, labels))
		return true;
	if (runner_remaining_ms(s->deadline) == 0) {
		buf_appendf(&s->errs, "%stimed out after %d ms", s->errs.len ? "; " : "",
			    s->timeout_ms);
		return false;
	}
	char *e = NULL;
	if (runner_remove_container(s->d, id, &e) < 0) {
		buf_appendf(&s->errs, "%s%s", s->errs.len ? "; " : "", e);
		free(e);
		return true;
	}
	s->count++;
	const char *fn = json_string_value(json_object_get(labels, "relay.function"));
	const char *li = json_string_value(json_object_get(labels, "relay.instance"));
	log_info(LOG_ATTRS("container", id, "function", fn ? fn : "", "instance", li ? li : ""),
		 "removed orphaned execution container");
	return true;
}

int runner_sweep_orphans(struct docker *d, const char *hostname, const char *keep_instance,
			 int timeout_ms, size_t *removed, char **err)
{
	struct sweep s = {
		.d = d,
		.host = hostname ? hostname : runner_hostname(),
		.keep_instance = keep_instance,
		.timeout_ms = timeout_ms,
		.deadline = now_mono_ns() + (int64_t)timeout_ms * NS_PER_MS,
	};
	int rc = -1;
	buf_init(&s.errs, 4096);
	*err = NULL;
	json_t *list = sweep_list(&s, err);
	if (list) {
		size_t i;
		json_t *c;
		json_array_foreach(list, i, c)
		{
			if (!sweep_one(&s, c))
				break;
		}
		if (s.errs.len)
			*err = xasprintf("orphan sweep: %s", s.errs.data);
		else
			rc = 0;
	}
	if (removed)
		*removed = s.count;
	json_decref(list);
	buf_free(&s.errs);
	return rc;
}
