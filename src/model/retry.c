/* Retry policies; the contract is in retry.h. */
#include "model/retry.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/duration.h"
#include "base/util.h"

void retry_policy_default(struct retry_policy *out, const int64_t override[4])
{
	static const int64_t fixed[4] = {1 * NS_PER_MIN, 2 * NS_PER_MIN, 5 * NS_PER_MIN,
					 10 * NS_PER_MIN};
	memset(out, 0, sizeof *out);
	out->has_backoff = out->has_max_age = out->has_no_retry = true;
	out->kind = RETRY_BACKOFF_LIST;
	for (int i = 0; i < 4; i++)
		out->list[i] = override && override[i] > 0 ? override[i] : fixed[i];
	out->nlist = 4;
}

/* Copies the keys src gives into dst. */
static void overlay(struct retry_policy *dst, const struct retry_policy *src)
{
	if (!src)
		return;
	if (src->has_backoff) {
		dst->kind = src->kind;
		memcpy(dst->list, src->list, sizeof dst->list);
		dst->nlist = src->nlist;
		dst->initial_ns = src->initial_ns;
		dst->max_ns = src->max_ns;
		dst->multiplier = src->multiplier;
		dst->jitter = src->jitter;
	}
	if (src->has_max_age)
		dst->max_age_ns = src->max_age_ns;
	if (src->has_no_retry)
		memcpy(dst->no_retry, src->no_retry, sizeof dst->no_retry);
}

void retry_policy_merge(struct retry_policy *out, const struct retry_policy *base,
			const struct retry_policy *top, const struct retry_policy *rule)
{
	*out = *base;
	overlay(out, top);
	overlay(out, rule);
	out->has_backoff = out->has_max_age = out->has_no_retry = true;
}

int64_t retry_backoff_ns(const struct retry_policy *p, int attempt, double u)
{
	if (attempt < 1)
		attempt = 1;
	if (p->kind == RETRY_BACKOFF_LIST) {
		if (p->nlist == 0)
			return 0;
		size_t i = (size_t)attempt - 1 < p->nlist ? (size_t)attempt - 1 : p->nlist - 1;
		return p->list[i];
	}
	/* In doubles, capped at max before any conversion: initial ×
	 * multiplier^(n-1) overflows nothing, whatever n is. */
	double cap = (double)p->max_ns;
	double d = (double)p->initial_ns;
	for (int n = 1; n < attempt && d < cap; n++)
		d *= p->multiplier;
	if (d > cap)
		d = cap;
	if (p->jitter > 0) {
		if (u < 0 || u >= 1)
			u = 0.5;
		d *= 1.0 + p->jitter * (2.0 * u - 1.0);
	}
	if (!(d > 0))
		d = 0;
	if (d > cap)
		d = cap;
	if (d > (double)RETRY_MAX_DELAY_NS)
		d = (double)RETRY_MAX_DELAY_NS;
	return (int64_t)d;
}

bool retry_exit_code_permanent(const struct retry_policy *p, int code)
{
	return code > 0 && code < 256 && (p->no_retry[code / 8] >> (code % 8) & 1);
}

void retry_exit_code_set(struct retry_policy *p, int code)
{
	if (code > 0 && code < 256)
		p->no_retry[code / 8] |= (uint8_t)(1u << (code % 8));
}

char *retry_policy_describe(const struct retry_policy *p)
{
	struct buf b;
	buf_init(&b, 256);
	char d[DURATION_STR_MAX];
	if (p->kind == RETRY_BACKOFF_LIST) {
		buf_appendf(&b, "backoff [");
		for (size_t i = 0; i < p->nlist; i++)
			buf_appendf(&b, "%s%s", i ? ", " : "", duration_format(p->list[i], d));
		buf_appendf(&b, "]");
	} else {
		buf_appendf(&b, "backoff exponential from %s", duration_format(p->initial_ns, d));
		buf_appendf(&b, " x%g up to %s", p->multiplier, duration_format(p->max_ns, d));
		if (p->jitter > 0)
			buf_appendf(&b, " jitter %g", p->jitter);
	}
	if (p->max_age_ns > 0)
		buf_appendf(&b, ", max_age %s", duration_format(p->max_age_ns, d));
	int listed = 0;
	for (int c = 1; c < 256; c++) {
		if (!retry_exit_code_permanent(p, c))
			continue;
		buf_appendf(&b, "%s%d", listed++ ? ", " : ", no_retry_exit_codes [", c);
	}
	if (listed)
		buf_appendf(&b, "]");
	char *s = xstrdup(b.data ? b.data : "");
	buf_free(&b);
	return s;
}

/* ---- parsing ------------------------------------------------------------ */

/* "a string", "a list", ... for messages. */
const char *retry_json_kind(const json_t *j)
{
	switch (json_typeof(j)) {
	case JSON_OBJECT: return "a map";
	case JSON_ARRAY: return "a list";
	case JSON_STRING: return "a string";
	case JSON_INTEGER: return "an integer";
	case JSON_REAL: return "a number";
	case JSON_TRUE:
	case JSON_FALSE: return "a boolean";
	case JSON_NULL: return "null";
	}
	return "?";
}

/* A printable copy of text for messages: at most 40 bytes, control
 * characters and quotes as '?', in quotes. */
static char *quoted_text(const char *text, size_t n)
{
	char *s = xstrndup(text, n > 40 ? 40 : n);
	for (char *p = s; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == '"' || *p == 0x7f)
			*p = '?';
	char *q = xasprintf("\"%s%s\"", s, n > 40 ? "..." : "");
	free(s);
	return q;
}

static char *quoted(const json_t *j)
{
	return quoted_text(json_string_value(j), json_string_length(j));
}

/* One error naming an unknown key k of a map at path. */
static void unknown_key(const char *path, const char *k, const char *takes,
			struct strlist *errors)
{
	char *q = quoted_text(k, strlen(k));
	strlist_addf(errors, "%s: unknown key %s (%s)", path, q, takes);
	free(q);
}

/* A duration above 0 and at most max into *out; else one error at path. */
static int parse_delay(const json_t *j, const char *path, int64_t max, const char *max_text,
		       int64_t *out, struct strlist *errors)
{
	if (!json_is_string(j)) {
		strlist_addf(errors, "%s: must be a Go duration string such as 2s or 1m, not %s",
			     path, retry_json_kind(j));
		return -1;
	}
	const char *s = json_string_value(j);
	size_t n = json_string_length(j);
	int64_t d = 0;
	char *q = quoted(j);
	int rc = -1;
	if (strlen(s) != n || duration_parse(s, &d) < 0)
		strlist_addf(errors, "%s: %s is not a Go duration (such as 2s or 1m)", path, q);
	else if (d <= 0)
		strlist_addf(errors, "%s: %s must be positive", path, q);
	else if (d > max)
		strlist_addf(errors, "%s: %s exceeds the maximum of %s", path, q, max_text);
	else {
		*out = d;
		rc = 0;
	}
	free(q);
	return rc;
}

static int parse_backoff_list(const json_t *j, const char *path, struct retry_policy *out,
			      struct strlist *errors)
{
	size_t n = json_array_size(j);
	if (n == 0) {
		strlist_addf(errors, "%s: must not be empty (give at least one delay)", path);
		return -1;
	}
	if (n > RETRY_MAX_BACKOFF) {
		strlist_addf(errors, "%s: %zu delays; at most %d (the last one repeats)", path, n,
			     RETRY_MAX_BACKOFF);
		return -1;
	}
	int bad = 0;
	for (size_t i = 0; i < n; i++) {
		char *p = xasprintf("%s[%zu]", path, i);
		bad |= parse_delay(json_array_get(j, i), p, RETRY_MAX_DELAY_NS, "24h",
				   &out->list[i], errors);
		free(p);
	}
	out->kind = RETRY_BACKOFF_LIST;
	out->nlist = n;
	return bad ? -1 : 0;
}

/* A number (integer or not) into *v; else one error. */
static int parse_number(const json_t *j, const char *path, double *v, struct strlist *errors)
{
	if (!json_is_number(j)) {
		strlist_addf(errors, "%s: must be a number, not %s", path, retry_json_kind(j));
		return -1;
	}
	*v = json_number_value(j);
	return 0;
}

static int parse_backoff_exp(const json_t *j, const char *path, struct retry_policy *out,
			     struct strlist *errors)
{
	int bad = 0;
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)j, k, v)
	{
		if (strcmp(k, "initial") && strcmp(k, "multiplier") && strcmp(k, "max") &&
		    strcmp(k, "jitter")) {
			unknown_key(path, k,
				    "an exponential backoff takes initial, multiplier, max and "
				    "jitter",
				    errors);
			bad = -1;
		}
	}
	out->kind = RETRY_BACKOFF_EXPONENTIAL;
	out->multiplier = 2;
	out->jitter = 0;
	out->max_ns = 10 * NS_PER_MIN;
	char *p;
	if (!(v = json_object_get(j, "initial"))) {
		strlist_addf(errors, "%s.initial: is required (the first delay, e.g. 1s)", path);
		bad = -1;
	} else {
		p = xasprintf("%s.initial", path);
		bad |= parse_delay(v, p, RETRY_MAX_DELAY_NS, "24h", &out->initial_ns, errors);
		free(p);
	}
	if ((v = json_object_get(j, "max"))) {
		p = xasprintf("%s.max", path);
		bad |= parse_delay(v, p, RETRY_MAX_DELAY_NS, "24h", &out->max_ns, errors);
		free(p);
	}
	if ((v = json_object_get(j, "multiplier"))) {
		p = xasprintf("%s.multiplier", path);
		double m;
		if (parse_number(v, p, &m, errors) < 0) {
			bad = -1;
		} else if (!(m >= 1)) {
			strlist_addf(errors, "%s: %g is below 1", p, m);
			bad = -1;
		} else if (m > RETRY_MAX_MULTIPLIER) {
			strlist_addf(errors, "%s: %g exceeds the maximum of %g", p, m,
				     RETRY_MAX_MULTIPLIER);
			bad = -1;
		} else {
			out->multiplier = m;
		}
		free(p);
	}
	if ((v = json_object_get(j, "jitter"))) {
		p = xasprintf("%s.jitter", path);
		double f;
		if (parse_number(v, p, &f, errors) < 0) {
			bad = -1;
		} else if (!(f >= 0 && f <= 1)) {
			strlist_addf(errors, "%s: %g is outside [0, 1] (a fraction of each delay)",
				     p, f);
			bad = -1;
		} else {
			out->jitter = f;
		}
		free(p);
	}
	if (!bad && out->initial_ns > out->max_ns) {
		strlist_addf(errors, "%s: initial exceeds max", path);
		bad = -1;
	}
	return bad;
}

static int parse_no_retry(const json_t *j, const char *path, struct retry_policy *out,
			  struct strlist *errors)
{
	if (!json_is_array(j)) {
		strlist_addf(errors, "%s: must be a list of exit codes (1 to 255), not %s", path,
			     retry_json_kind(j));
		return -1;
	}
	size_t n = json_array_size(j);
	if (n > 255) {
		strlist_addf(errors, "%s: %zu codes; at most 255", path, n);
		return -1;
	}
	int bad = 0;
	for (size_t i = 0; i < n; i++) {
		const json_t *v = json_array_get(j, i);
		if (!json_is_integer(v)) {
			strlist_addf(errors, "%s[%zu]: must be an integer exit code (1 to 255), not %s",
				     path, i, retry_json_kind(v));
			bad = -1;
			continue;
		}
		json_int_t c = json_integer_value(v);
		if (c == 0) {
			strlist_addf(errors,
				     "%s[%zu]: 0 is success, not a failure: codes are 1 to 255",
				     path, i);
			bad = -1;
		} else if (c < 0 || c > 255) {
			strlist_addf(errors, "%s[%zu]: %" JSON_INTEGER_FORMAT
					     " is not an exit code (1 to 255)",
				     path, i, c);
			bad = -1;
		} else {
			retry_exit_code_set(out, (int)c);
		}
	}
	return bad;
}

int retry_policy_parse(const json_t *j, const char *path, struct retry_policy *out,
		       struct strlist *errors)
{
	memset(out, 0, sizeof *out);
	if (!json_is_object(j)) {
		strlist_addf(errors,
			     "%s: must be a map of backoff, max_age and no_retry_exit_codes, not %s",
			     path, retry_json_kind(j));
		return -1;
	}
	int bad = 0;
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)j, k, v)
	{
		if (strcmp(k, "backoff") && strcmp(k, "max_age") && strcmp(k, "no_retry_exit_codes")) {
			unknown_key(path, k, "retry takes backoff, max_age and no_retry_exit_codes",
				    errors);
			bad = -1;
		}
	}
	char *p;
	if ((v = json_object_get(j, "backoff"))) {
		p = xasprintf("%s.backoff", path);
		if (json_is_array(v))
			bad |= parse_backoff_list(v, p, out, errors);
		else if (json_is_object(v))
			bad |= parse_backoff_exp(v, p, out, errors);
		else {
			strlist_addf(errors,
				     "%s: must be a list of delays such as [2s, 4s] or a map of "
				     "initial, multiplier, max and jitter, not %s",
				     p, retry_json_kind(v));
			bad = -1;
		}
		out->has_backoff = true;
		free(p);
	}
	if ((v = json_object_get(j, "max_age"))) {
		p = xasprintf("%s.max_age", path);
		bad |= parse_delay(v, p, RETRY_MAX_AGE_NS, "168h (7 days, the life of an "
						       "invocation's state)",
				   &out->max_age_ns, errors);
		out->has_max_age = true;
		free(p);
	}
	if ((v = json_object_get(j, "no_retry_exit_codes"))) {
		p = xasprintf("%s.no_retry_exit_codes", path);
		bad |= parse_no_retry(v, p, out, errors);
		out->has_no_retry = true;
		free(p);
	}
	return bad ? -1 : 0;
}
