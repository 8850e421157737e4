/* key_concurrency: parsing and the key value of an event (keyconc.h). */
#include "model/keyconc.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/util.h"
#include "model/retry.h"

/* The path's segments, or -1 with one error line. */
static int parse_path(const json_t *v, struct keyconc *out, struct strlist *errors)
{
	if (!json_is_string(v)) {
		strlist_addf(errors,
			     "key_concurrency.key: must be a dotted path into the event such as "
			     "new_image.tenant_id, not %s",
			     retry_json_kind(v));
		return -1;
	}
	const char *s = json_string_value(v);
	size_t n = json_string_length(v);
	if (n == 0) {
		strlist_addf(errors, "key_concurrency.key: is empty; must be a dotted path into "
				     "the event such as new_image.tenant_id");
		return -1;
	}
	if (n > KEYCONC_PATH_MAX || strlen(s) != n) {
		strlist_addf(errors,
			     "key_concurrency.key: must be at most %d bytes without NUL (%zu given)",
			     KEYCONC_PATH_MAX, n);
		return -1;
	}
	size_t nsegs = 1;
	for (size_t i = 0; i < n; i++)
		nsegs += s[i] == '.';
	if (nsegs > KEYCONC_SEGS_MAX) {
		strlist_addf(errors, "key_concurrency.key: has %zu segments; at most %d", nsegs,
			     KEYCONC_SEGS_MAX);
		return -1;
	}
	out->segs = xcalloc(nsegs, sizeof *out->segs);
	const char *p = s;
	for (size_t i = 0; i < nsegs; i++) {
		const char *dot = strchr(p, '.');
		size_t len = dot ? (size_t)(dot - p) : strlen(p);
		if (len == 0) {
			strlist_addf(errors,
				     "key_concurrency.key: has an empty segment (a leading, trailing "
				     "or doubled dot)");
			return -1;
		}
		out->segs[out->nsegs++] = xstrndup(p, len);
		p += len + 1;
	}
	out->path = xstrdup(s);
	return 0;
}

static int parse_limit(const json_t *v, struct keyconc *out, struct strlist *errors)
{
	if (!json_is_integer(v)) {
		strlist_addf(errors, "key_concurrency.limit: must be an integer from 1 to %d, not %s",
			     KEYCONC_LIMIT_MAX, retry_json_kind(v));
		return -1;
	}
	json_int_t l = json_integer_value(v);
	if (l < 1 || l > KEYCONC_LIMIT_MAX) {
		strlist_addf(errors,
			     "key_concurrency.limit: %" JSON_INTEGER_FORMAT
			     " is out of range; must be an integer from 1 to %d",
			     l, KEYCONC_LIMIT_MAX);
		return -1;
	}
	out->limit = (int)l;
	return 0;
}

int keyconc_parse(const json_t *j, struct keyconc *out, struct strlist *errors)
{
	memset(out, 0, sizeof *out);
	out->limit = 1;
	if (!json_is_object(j)) {
		strlist_addf(errors, "key_concurrency: must be a map of key and limit, not %s",
			     retry_json_kind(j));
		return -1;
	}
	int bad = 0;
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)j, k, v)
	{
		if (strcmp(k, "key") && strcmp(k, "limit")) {
			char q[48];
			size_t i = 0;
			for (; k[i] && i < 40; i++)
				q[i] = (unsigned char)k[i] < 0x20 || k[i] == '"' ? '?' : k[i];
			q[i] = 0;
			strlist_addf(errors,
				     "key_concurrency: unknown key \"%s\" (key_concurrency takes key "
				     "and limit)",
				     q);
			bad = -1;
		}
	}
	if ((v = json_object_get(j, "key")))
		bad |= parse_path(v, out, errors);
	else {
		strlist_addf(errors, "key_concurrency.key: is required (a dotted path into the "
				     "event such as new_image.tenant_id)");
		bad = -1;
	}
	if ((v = json_object_get(j, "limit")))
		bad |= parse_limit(v, out, errors);
	return bad ? -1 : 0;
}

void keyconc_free(struct keyconc *k)
{
	for (size_t i = 0; i < k->nsegs; i++)
		free(k->segs[i]);
	free(k->segs);
	free(k->path);
	memset(k, 0, sizeof *k);
}

char *keyconc_value(const struct keyconc *k, const struct event *ev, size_t *len)
{
	if (!k->path || !ev)
		return NULL;
	const struct event_value *v = event_root(ev);
	for (size_t i = 0; v && i < k->nsegs; i++)
		v = v->type == EVENT_OBJECT ? event_get(v, k->segs[i], strlen(k->segs[i])) : NULL;
	if (!v)
		return NULL;
	switch (v->type) {
	case EVENT_STRING:
	{
		char *s = xmalloc(v->n + 1);
		memcpy(s, v->u.str, v->n + 1);
		*len = v->n;
		return s;
	}
	case EVENT_INT: {
		char *s = xasprintf("%" PRId64, v->u.i);
		*len = strlen(s);
		return s;
	}
	case EVENT_TRUE:
	case EVENT_FALSE:
		*len = v->type == EVENT_TRUE ? 4 : 5;
		return xstrdup(v->type == EVENT_TRUE ? "true" : "false");
	default:
		return NULL;
	}
}
