#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <unistd.h>

#include "base/log.h"
#include "engine/metrics.h"
#include "t.h"
#include "tfiles.h"

static char *render(void)
{
	struct buf b;
	buf_init(&b, 64 << 20);
	if (metrics_render(&b) < 0) {
		buf_free(&b);
		return NULL;
	}
	return buf_steal(&b);
}

/* ---- a strict text-format (0.0.4) checker -------------------------------
 *
 * Stricter than Prometheus' own parser where Relay's output should be:
 * every family has exactly one HELP and one TYPE before its samples, a
 * family's samples are contiguous and belong to it (name, or for histograms
 * name_bucket/_sum/_count), no duplicate series, label names and escapes
 * valid, values parse, counters >= 0, histogram buckets have strictly
 * increasing le ending in +Inf with non-decreasing counts, and _count equals
 * the +Inf bucket. No empty lines, no trailing whitespace. */

#define CK_MAX_FAMILIES 256
#define CK_MAX_SERIES 4096

struct ck {
	char families[CK_MAX_FAMILIES][128];
	size_t nfamilies;
	char cur[128];
	char cur_type[16];
	bool cur_help, cur_type_seen;
	char *series[CK_MAX_SERIES]; /* name{labels} of this family, le excluded */
	size_t nseries;
	/* histogram state for the label set being read */
	char hist_key[1024];
	bool hist_open; /* buckets of hist_key seen, _count not yet */
	double last_le;
	double last_count;
	bool saw_inf;
	double inf_count;
	int nsamples;
};

static bool valid_name(const char *s, size_t n, bool colon)
{
	if (n == 0)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		bool ok = isalpha((unsigned char)c) || c == '_' || (colon && c == ':') ||
			  (i > 0 && isdigit((unsigned char)c));
		if (!ok)
			return false;
	}
	return true;
}

static bool parse_value(const char *s, double *out)
{
	if (strcmp(s, "+Inf") == 0 || strcmp(s, "Inf") == 0) {
		*out = INFINITY;
		return true;
	}
	if (strcmp(s, "-Inf") == 0) {
		*out = -INFINITY;
		return true;
	}
	if (strcmp(s, "NaN") == 0) {
		*out = NAN;
		return true;
	}
	if (!*s)
		return false;
	for (const char *p = s; *p; p++)
		if (!isdigit((unsigned char)*p) && !strchr("+-.eE", *p))
			return false;
	char *end;
	*out = strtod(s, &end);
	return *end == '\0';
}

static int ck_fail(char **err, int line, const char *what, const char *text)
{
	*err = xasprintf("line %d: %s: %.*s", line, what, 120, text);
	return -1;
}

static int ck_end_family(struct ck *c, char **err, int line)
{
	if (c->cur[0] && strcmp(c->cur_type, "histogram") == 0 && c->hist_open)
		return ck_fail(err, line, "histogram without _count after its buckets", c->cur);
	for (size_t i = 0; i < c->nseries; i++)
		free(c->series[i]);
	c->nseries = 0;
	return 0;
}

static int ck_line(struct ck *c, char *l, int line, char **err)
{
	size_t len = strlen(l);
	if (len == 0)
		return ck_fail(err, line, "empty line", l);
	if (isspace((unsigned char)l[len - 1]))
		return ck_fail(err, line, "trailing whitespace", l);
	if (l[0] == '#') {
		char kw[8], name[128];
		if (strncmp(l, "# HELP ", 7) == 0)
			strlcpy_(kw, "HELP", sizeof kw);
		else if (strncmp(l, "# TYPE ", 7) == 0)
			strlcpy_(kw, "TYPE", sizeof kw);
		else
			return ck_fail(err, line, "comment lines other than HELP/TYPE", l);
		const char *p = l + 7, *sp = strchr(p, ' ');
		if (!sp || (size_t)(sp - p) >= sizeof name ||
		    !valid_name(p, (size_t)(sp - p), true))
			return ck_fail(err, line, "bad metric name in", l);
		memcpy(name, p, (size_t)(sp - p));
		name[sp - p] = '\0';
		if (strcmp(name, c->cur) != 0) {
			if (c->cur[0] && !c->nsamples)
				return ck_fail(err, line, "family without samples", c->cur);
			if (ck_end_family(c, err, line) < 0)
				return -1;
			for (size_t i = 0; i < c->nfamilies; i++)
				if (strcmp(c->families[i], name) == 0)
					return ck_fail(err, line, "family seen twice", l);
			if (c->nfamilies == CK_MAX_FAMILIES)
				return ck_fail(err, line, "too many families", l);
			strlcpy_(c->families[c->nfamilies++], name, 128);
			strlcpy_(c->cur, name, sizeof c->cur);
			c->cur_help = c->cur_type_seen = false;
			c->cur_type[0] = '\0';
			c->nsamples = 0;
		} else if (c->nsamples) {
			return ck_fail(err, line, "HELP/TYPE after samples", l);
		}
		const char *rest = sp + 1;
		if (strcmp(kw, "HELP") == 0) {
			if (c->cur_help)
				return ck_fail(err, line, "second HELP", l);
			c->cur_help = true;
			for (const char *q = rest; *q; q++)
				if (*q == '\\' && q[1] != '\\' && q[1] != 'n')
					return ck_fail(err, line, "bad escape in HELP", l);
				else if (*q == '\\')
					q++;
		} else {
			if (c->cur_type_seen)
				return ck_fail(err, line, "second TYPE", l);
			c->cur_type_seen = true;
			if (strcmp(rest, "counter") && strcmp(rest, "gauge") &&
			    strcmp(rest, "histogram") && strcmp(rest, "summary") &&
			    strcmp(rest, "untyped"))
				return ck_fail(err, line, "unknown type", l);
			strlcpy_(c->cur_type, rest, sizeof c->cur_type);
			if (strcmp(rest, "counter") == 0 &&
			    (strlen(name) < 6 || strcmp(name + strlen(name) - 6, "_total") != 0))
				return ck_fail(err, line, "counter name without _total", l);
		}
		return 0;
	}

	/* A sample: name [{labels}] value [timestamp] */
	if (!c->cur_help || !c->cur_type_seen)
		return ck_fail(err, line, "sample before its HELP and TYPE", l);
	const char *p = l;
	while (*p && *p != '{' && *p != ' ')
		p++;
	char name[160];
	if ((size_t)(p - l) >= sizeof name || !valid_name(l, (size_t)(p - l), true))
		return ck_fail(err, line, "bad sample name", l);
	memcpy(name, l, (size_t)(p - l));
	name[p - l] = '\0';
	const char *suffix = "";
	bool hist = strcmp(c->cur_type, "histogram") == 0;
	if (hist) {
		size_t fl = strlen(c->cur);
		if (strncmp(name, c->cur, fl) != 0)
			return ck_fail(err, line, "sample of another family", l);
		suffix = name + fl;
		if (strcmp(suffix, "_bucket") && strcmp(suffix, "_sum") && strcmp(suffix, "_count"))
			return ck_fail(err, line, "histogram sample with a bad suffix", l);
	} else if (strcmp(name, c->cur) != 0) {
		return ck_fail(err, line, "sample of another family", l);
	}

	char key[1024]; /* labels without le, canonical */
	size_t klen = 0;
	key[0] = '\0';
	char le[64] = "";
	bool has_le = false;
	if (*p == '{') {
		p++;
		char seen[16][64];
		size_t nseen = 0;
		while (*p != '}') {
			const char *ln = p;
			while (*p && *p != '=')
				p++;
			if (*p != '=' || !valid_name(ln, (size_t)(p - ln), false) ||
			    (size_t)(p - ln) >= 64)
				return ck_fail(err, line, "bad label name", l);
			char lname[64];
			memcpy(lname, ln, (size_t)(p - ln));
			lname[p - ln] = '\0';
			for (size_t i = 0; i < nseen; i++)
				if (strcmp(seen[i], lname) == 0)
					return ck_fail(err, line, "duplicate label", l);
			if (nseen == 16)
				return ck_fail(err, line, "too many labels", l);
			strlcpy_(seen[nseen++], lname, 64);
			p++;
			if (*p != '"')
				return ck_fail(err, line, "unquoted label value", l);
			p++;
			char val[512];
			size_t vn = 0;
			while (*p && *p != '"') {
				char ch = *p;
				if (ch == '\\') {
					p++;
					if (*p == 'n')
						ch = '\n';
					else if (*p == '\\' || *p == '"')
						ch = *p;
					else
						return ck_fail(err, line,
							       "bad escape in label value", l);
				} else if (ch == '\n') {
					return ck_fail(err, line, "raw newline in label value", l);
				}
				if (vn + 1 >= sizeof val)
					return ck_fail(err, line, "label value too long", l);
				val[vn++] = ch;
				p++;
			}
			if (*p != '"')
				return ck_fail(err, line, "unterminated label value", l);
			val[vn] = '\0';
			p++;
			if (strcmp(lname, "le") == 0 && hist) {
				has_le = true;
				strlcpy_(le, val, sizeof le);
			} else {
				int w = snprintf(key + klen, sizeof key - klen, "%s=%s,", lname,
						 val);
				if (w < 0 || (size_t)w >= sizeof key - klen)
					return ck_fail(err, line, "labels too long", l);
				klen += (size_t)w;
			}
			if (*p == ',')
				p++;
			else if (*p != '}')
				return ck_fail(err, line, "expected , or }", l);
		}
		p++;
	}
	if (*p != ' ')
		return ck_fail(err, line, "expected a space before the value", l);
	p++;
	char vbuf[64];
	const char *sp = strchr(p, ' ');
	size_t vlen = sp ? (size_t)(sp - p) : strlen(p);
	if (vlen == 0 || vlen >= sizeof vbuf)
		return ck_fail(err, line, "bad value", l);
	memcpy(vbuf, p, vlen);
	vbuf[vlen] = '\0';
	double v;
	if (!parse_value(vbuf, &v))
		return ck_fail(err, line, "value does not parse", l);
	if (sp) {
		int64_t ts;
		if (parse_int64(sp + 1, &ts) < 0)
			return ck_fail(err, line, "bad timestamp", l);
	}
	if (strcmp(c->cur_type, "counter") == 0 && !(v >= 0))
		return ck_fail(err, line, "negative or NaN counter", l);

	/* duplicate series */
	char *id = xasprintf("%s{%s}%s", name, key, has_le ? le : "");
	for (size_t i = 0; i < c->nseries; i++)
		if (strcmp(c->series[i], id) == 0) {
			free(id);
			return ck_fail(err, line, "duplicate series", l);
		}
	if (c->nseries == CK_MAX_SERIES) {
		free(id);
		return ck_fail(err, line, "too many series", l);
	}
	c->series[c->nseries++] = id;

	if (hist) {
		if (strcmp(suffix, "_bucket") == 0) {
			double bound;
			if (!has_le || !parse_value(le, &bound) || isnan(bound))
				return ck_fail(err, line, "bucket without a valid le", l);
			if (!c->hist_open || strcmp(c->hist_key, key) != 0) {
				if (c->hist_open)
					return ck_fail(err, line,
						       "buckets of a new series before _count", l);
				c->hist_open = true;
				strlcpy_(c->hist_key, key, sizeof c->hist_key);
				c->last_le = -INFINITY;
				c->last_count = 0;
				c->saw_inf = false;
			} else if (!(bound > c->last_le)) {
				return ck_fail(err, line, "le not increasing", l);
			}
			if (c->saw_inf)
				return ck_fail(err, line, "bucket after +Inf", l);
			if (v < c->last_count)
				return ck_fail(err, line, "bucket counts decreasing", l);
			c->last_le = bound;
			c->last_count = v;
			if (isinf(bound)) {
				c->saw_inf = true;
				c->inf_count = v;
			}
		} else {
			if (has_le)
				return ck_fail(err, line, "le on _sum/_count", l);
			if (!c->hist_open || strcmp(c->hist_key, key) != 0 || !c->saw_inf)
				return ck_fail(err, line,
					       "_sum/_count without buckets ending in +Inf", l);
			if (strcmp(suffix, "_count") == 0) {
				if (v != c->inf_count)
					return ck_fail(err, line,
						       "_count differs from the +Inf bucket", l);
				c->hist_open = false;
			}
		}
	} else if (has_le) {
		return ck_fail(err, line, "le label outside a histogram", l);
	}
	c->nsamples++;
	return 0;
}

/* Returns the number of families, or -1 with *err (malloc'd). */
static int check_exposition(const char *text, char **err)
{
	struct ck *c = xcalloc(1, sizeof *c);
	char *copy = xstrdup(text);
	int rc = 0, line = 0;
	*err = NULL;
	size_t n = strlen(copy);
	if (n == 0 || copy[n - 1] != '\n') {
		rc = ck_fail(err, 0, "does not end with a newline", "");
		goto out;
	}
	for (char *p = copy; *p;) {
		char *nl = strchr(p, '\n');
		*nl = '\0';
		line++;
		if (ck_line(c, p, line, err) < 0) {
			rc = -1;
			goto out;
		}
		p = nl + 1;
	}
	if (c->cur[0] && !c->nsamples && strcmp(c->cur_type, "histogram") != 0) {
		rc = ck_fail(err, line, "family without samples", c->cur);
		goto out;
	}
	if (ck_end_family(c, err, line) < 0) {
		rc = -1;
		goto out;
	}
	rc = (int)c->nfamilies;
out:
	for (size_t i = 0; i < c->nseries; i++)
		free(c->series[i]);
	free(c);
	free(copy);
	return rc;
}

/* Fails the running test when the checker rejects text. */
static void check_accepted(const char *text)
{
	char *err = NULL;
	if (check_exposition(text, &err) < 0)
		T_FAIL_("exposition rejected: %s", err);
	free(err);
}

/* The checker must reject what it is there to reject. */
TEST(checker_rejects_malformed_text)
{
	static const char *const bad[] = {
		"x_total 1\n",					       /* no HELP/TYPE */
		"# HELP x_total h\n# TYPE x_total counter\nx_total 1", /* no final newline */
		"# HELP x_total h\n# TYPE x_total counter\nx_total{a=\"b\"c\"} 1\n",
		"# HELP x_total h\n# TYPE x_total counter\nx_total{a=\"\\t\"} 1\n",
		"# HELP x_total h\n# TYPE x_total counter\nx_total -1\n",
		"# HELP x_total h\n# TYPE x_total counter\nx_total 1\nx_total 2\n",
		"# HELP x h\n# TYPE x counter\nx 1\n", /* no _total */
		"# HELP x h\n# TYPE x gauge\nx one\n",
		"# HELP x h\n# TYPE x gauge\nx 1\n# HELP x h\n# TYPE x gauge\nx 1\n",
		"# HELP x h\n# TYPE x gauge\ny 1\n",
		"# HELP x h\n# TYPE x gauge\nx{9a=\"1\"} 1\n",
		"# HELP x h\n# TYPE x gauge\nx{a=\"1\",a=\"2\"} 1\n",
		"# HELP x h\n# TYPE x gauge\n\nx 1\n",
		"# HELP h h\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n",
		"# HELP h h\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\n"
		"h_sum 1\nh_count 1\n",
		"# HELP h h\n# TYPE h histogram\nh_bucket{le=\"2\"} 1\nh_bucket{le=\"1\"} 1\n"
		"h_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
		"# HELP h h\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 1\n",
		"# HELP h h\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\n",
	};
	for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
		char *err = NULL;
		int rc = check_exposition(bad[i], &err);
		if (rc >= 0)
			T_FAIL_("checker accepted case %zu: %s", i, bad[i]);
		free(err);
	}
	char *err = NULL;
	CHECK_INT(check_exposition("# HELP h h\n# TYPE h histogram\nh_bucket{a=\"x\",le=\"1\"} 1\n"
				   "h_bucket{a=\"x\",le=\"+Inf\"} 2\nh_sum{a=\"x\"} 3.5\n"
				   "h_count{a=\"x\"} 2\n# HELP g h\n# TYPE g gauge\ng NaN\n",
				   &err),
		  2);
	free(err);
}

/* Fails the running test unless text is exactly the n lines of want, each
 * ended by a newline, and nothing after them. Cuts text's lines in place. */
static void check_lines(char *text, const char *const *want, size_t n)
{
	size_t i = 0;
	char *p = text;
	for (; *p && i < n; i++) {
		char *nl = strchr(p, '\n');
		REQUIRE(nl);
		*nl = '\0';
		if (strcmp(p, want[i]) != 0)
			T_FAIL_("line %zu\n    got:  %s\n    want: %s", i + 1, p, want[i]);
		p = nl + 1;
	}
	CHECK_INT(i, n);
	CHECK_STR(p, ""); /* nothing after the last line */
}

/* ---- registry behaviour ---------------------------------------------- */

TEST(counters_and_gauges)
{
	metrics_reset_for_tests();
	metrics_inc(METRIC_EVENTS_RECEIVED);
	metrics_inc(METRIC_EVENTS_RECEIVED);
	metrics_add(METRIC_SCHEDULE_PUBLISHED, 40);
	metrics_inc(METRIC_SCHEDULE_PUBLISHED);
	CHECK_INT(metrics_counter_value(METRIC_EVENTS_RECEIVED), 2);
	CHECK_INT(metrics_counter_value(METRIC_SCHEDULE_PUBLISHED), 41);
	CHECK_INT(metrics_counter_value(METRIC_EVENTS_PROCESSED), 0);

	metrics_gauge_set(METRIC_PENDING_ENTRIES, 17);
	metrics_gauge_add(METRIC_IN_FLIGHT, 1);
	metrics_gauge_add(METRIC_IN_FLIGHT, 1);
	metrics_gauge_add(METRIC_IN_FLIGHT, -1);
	metrics_gauge_set(METRIC_PENDING_OLDEST_AGE, 134.25);
	CHECK(metrics_gauge_value(METRIC_PENDING_ENTRIES) == 17);
	CHECK(metrics_gauge_value(METRIC_IN_FLIGHT) == 1);

	char *text = render();
	REQUIRE(text);
	CHECK(t_has_line(text, "events_received_total 2"));
	CHECK(t_has_line(text, "schedule_occurrences_published_total 41"));
	CHECK(t_has_line(text, "pending_entries 17"));
	CHECK(t_has_line(text, "pending_oldest_age_seconds 134.25"));
	CHECK(t_has_line(text, "in_flight_invocations 1"));
	CHECK(t_has_line(text, "buffered_events 0"));
	CHECK(t_has_line(text, "# TYPE pending_entries gauge"));
	CHECK(t_has_line(text, "# TYPE retries_total counter"));
	free(text);
}

/* Gauge values are printed as the Go client prints float64s. */
TEST(float_formatting)
{
	static const struct {
		double v;
		const char *want;
	} cases[] = {
		{0, "buffered_events 0"},	    {1, "buffered_events 1"},
		{0.1, "buffered_events 0.1"},	    {2.5, "buffered_events 2.5"},
		{100000, "buffered_events 100000"}, {999999, "buffered_events 999999"},
		{1000000, "buffered_events 1e+06"}, {1234567, "buffered_events 1.234567e+06"},
		{0.0001, "buffered_events 0.0001"}, {0.00001, "buffered_events 1e-05"},
		{-3, "buffered_events -3"},	    {1.0 / 3, "buffered_events 0.3333333333333333"},
		{INFINITY, "buffered_events +Inf"}, {-INFINITY, "buffered_events -Inf"},
		{NAN, "buffered_events NaN"},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		metrics_reset_for_tests();
		metrics_gauge_set(METRIC_BUFFERED_EVENTS, cases[i].v);
		char *text = render();
		if (!t_has_line(text, cases[i].want))
			T_FAIL_("case %zu: no line \"%s\"", i, cases[i].want);
		free(text);
	}
}

TEST(histogram_buckets)
{
	metrics_reset_for_tests();
	/* le is inclusive; past the last bound is +Inf; bad durations count as 0 */
	static const double d[] = {0.005, 0.0051, 0.3, 300, 301, -1, NAN, 1};
	for (size_t i = 0; i < ARRAY_LEN(d); i++)
		metrics_handler_invocation("fn", "h", METRIC_OUTCOME_SUCCESS, d[i]);
	char *text = render();
	REQUIRE(text);
	static const char *const want[] = {
		"handler_duration_seconds_bucket{function=\"fn\",handler=\"h\",le=\"0.005\"} 3",
		"handler_duration_seconds_bucket{function=\"fn\",handler=\"h\",le=\"0.01\"} 4",
		"handler_duration_seconds_bucket{function=\"fn\",handler=\"h\",le=\"0.25\"} 4",
		"handler_duration_seconds_bucket{function=\"fn\",handler=\"h\",le=\"0.5\"} 5",
		"handler_duration_seconds_bucket{function=\"fn\",handler=\"h\",le=\"1\"} 6",
		"handler_duration_seconds_bucket{function=\"fn\",handler=\"h\",le=\"2.5\"} 6",
		"handler_duration_seconds_bucket{function=\"fn\",handler=\"h\",le=\"120\"} 6",
		"handler_duration_seconds_bucket{function=\"fn\",handler=\"h\",le=\"300\"} 7",
		"handler_duration_seconds_bucket{function=\"fn\",handler=\"h\",le=\"+Inf\"} 8",
		"handler_duration_seconds_count{function=\"fn\",handler=\"h\"} 8",
		"handler_invocations_total{function=\"fn\",handler=\"h\",outcome=\"success\"} 8",
		"handler_invocations_total{function=\"fn\",handler=\"h\",outcome=\"timeout\"} 0",
	};
	for (size_t i = 0; i < ARRAY_LEN(want); i++)
		if (!t_has_line(text, want[i]))
			T_FAIL_("missing line: %s", want[i]);
	const char *sum_key = "handler_duration_seconds_sum{function=\"fn\",handler=\"h\"} ";
	const char *sum = strstr(text, sum_key);
	REQUIRE(sum);
	CHECK(fabs(strtod(sum + strlen(sum_key), NULL) - 602.3101) < 1e-9);

	metrics_build("fn", true, 0.5);
	metrics_build("fn", false, 700);
	metrics_build("fn", true, 3);
	free(text);
	text = render();
	static const char *const want_build[] = {
		"function_build_seconds_bucket{function=\"fn\",le=\"0.5\"} 1",
		"function_build_seconds_bucket{function=\"fn\",le=\"2\"} 1",
		"function_build_seconds_bucket{function=\"fn\",le=\"5\"} 2",
		"function_build_seconds_bucket{function=\"fn\",le=\"600\"} 2",
		"function_build_seconds_bucket{function=\"fn\",le=\"+Inf\"} 3",
		"function_build_seconds_sum{function=\"fn\"} 703.5",
		"function_build_seconds_count{function=\"fn\"} 3",
		"build_failures_total{function=\"fn\"} 1",
	};
	for (size_t i = 0; i < ARRAY_LEN(want_build); i++)
		if (!t_has_line(text, want_build[i]))
			T_FAIL_("missing line: %s", want_build[i]);
	check_accepted(text);
	free(text);
}

TEST(invocation_updates_every_related_series)
{
	metrics_reset_for_tests();
	metrics_handler_invocation("a", "h1", METRIC_OUTCOME_SUCCESS, 0.1);
	metrics_handler_invocation("a", "h1", METRIC_OUTCOME_FAILURE, 0.1);
	metrics_handler_invocation("a", "h2", METRIC_OUTCOME_TIMEOUT, 6);
	metrics_handler_invocation("b", "h1", METRIC_OUTCOME_SUCCESS, 0.1);
	metrics_function_event("a");
	metrics_function_retry("a");
	metrics_function_retry(NULL);
	metrics_function_dlq("b");
	CHECK_INT(metrics_counter_value(METRIC_HANDLER_SUCCESS), 2);
	CHECK_INT(metrics_counter_value(METRIC_HANDLER_FAILURE), 2);
	CHECK_INT(metrics_counter_value(METRIC_RETRIES), 2);
	CHECK_INT(metrics_counter_value(METRIC_DLQ_ENTRIES), 1);
	/* scheduled invocations and handler results never move event counters */
	CHECK_INT(metrics_counter_value(METRIC_EVENTS_RECEIVED), 0);
	CHECK_INT(metrics_counter_value(METRIC_EVENTS_PROCESSED), 0);
	char *text = render();
	static const char *const want[] = {
		"handler_invocations_total{function=\"a\",handler=\"h1\",outcome=\"success\"} 1",
		"handler_invocations_total{function=\"a\",handler=\"h1\",outcome=\"failure\"} 1",
		"handler_invocations_total{function=\"a\",handler=\"h2\",outcome=\"timeout\"} 1",
		"handler_invocations_total{function=\"a\",handler=\"h2\",outcome=\"success\"} 0",
		"function_successes_total{function=\"a\"} 1",
		"function_failures_total{function=\"a\"} 2",
		"function_events_total{function=\"a\"} 1",
		"function_events_total{function=\"b\"} 0",
		"function_retries_total{function=\"a\"} 1",
		"function_dlq_entries_total{function=\"b\"} 1",
		"function_dlq_entries_total{function=\"a\"} 0",
		"handler_success_total 2",
		"handler_failure_total 2",
	};
	for (size_t i = 0; i < ARRAY_LEN(want); i++)
		if (!t_has_line(text, want[i]))
			T_FAIL_("missing line: %s", want[i]);
	/* a cached handle is the same series */
	struct metrics_handler *h = metrics_handler_get("a", "h1");
	REQUIRE(h);
	CHECK(h == metrics_handler_get("a", "h1"));
	metrics_handler_observe(h, METRIC_OUTCOME_SUCCESS, 0.2);
	metrics_handler_observe(NULL, METRIC_OUTCOME_SUCCESS, 0.2); /* no-op */
	free(text);
	text = render();
	CHECK(t_has_line(
		text,
		"handler_invocations_total{function=\"a\",handler=\"h1\",outcome=\"success\"} 2"));
	free(text);
}

TEST(label_values_are_escaped)
{
	metrics_reset_for_tests();
	metrics_handler_invocation("we\"ird\\fn\nx", "h\\", METRIC_OUTCOME_SUCCESS, 1);
	char *text = render();
	REQUIRE(text);
	CHECK(t_has_line(text, "function_successes_total{function=\"we\\\"ird\\\\fn\\nx\"} 1"));
	CHECK(t_has_line(text, "handler_invocations_total{function=\"we\\\"ird\\\\fn\\nx\","
			       "handler=\"h\\\\\",outcome=\"success\"} 1"));
	check_accepted(text);
	free(text);
}

/* The whole exposition of a small registry, line by line. */
TEST(exact_rendering)
{
	metrics_reset_for_tests();
	metrics_inc(METRIC_EVENTS_RECEIVED);
	metrics_inc(METRIC_EVENTS_PROCESSED);
	metrics_handler_invocation("fn", "h", METRIC_OUTCOME_SUCCESS, 0.2);
	metrics_function_event("fn");
	metrics_build("fn", true, 3);
	metrics_gauge_set(METRIC_PENDING_ENTRIES, 2);
	metrics_gauge_set(METRIC_PENDING_OLDEST_AGE, 61.5);
	metrics_inc(METRIC_CONCURRENCY_WAITS);
	metrics_inc(METRIC_SCHEDULE_DUPLICATE);
	static const char *const want[] = {
		"# HELP events_received_total Events read from the Redis stream.",
		"# TYPE events_received_total counter",
		"events_received_total 1",
		"# HELP events_processed_total Events finished (acknowledged or dead-lettered).",
		"# TYPE events_processed_total counter",
		"events_processed_total 1",
		"# HELP handler_success_total Handler invocations that succeeded.",
		"# TYPE handler_success_total counter",
		"handler_success_total 1",
		"# HELP handler_failure_total Handler invocations that failed or timed out.",
		"# TYPE handler_failure_total counter",
		"handler_failure_total 0",
		"# HELP retries_total Event retries scheduled.",
		"# TYPE retries_total counter",
		"retries_total 0",
		"# HELP dlq_entries_total Entries written to the dead-letter queue.",
		"# TYPE dlq_entries_total counter",
		"dlq_entries_total 0",
		"# HELP dlq_replayed_total Events read that relay dlq replay put back on the "
		"stream.",
		"# TYPE dlq_replayed_total counter",
		"dlq_replayed_total 0",
		"# HELP handler_invocations_total Handler invocations by outcome (success, "
		"failure, timeout).",
		"# TYPE handler_invocations_total counter",
		"handler_invocations_total{function=\"fn\",handler=\"h\",outcome=\"success\"} 1",
		"handler_invocations_total{function=\"fn\",handler=\"h\",outcome=\"failure\"} 0",
		"handler_invocations_total{function=\"fn\",handler=\"h\",outcome=\"timeout\"} 0",
		"# HELP build_failures_total Function image builds that failed.",
		"# TYPE build_failures_total counter",
		"build_failures_total{function=\"fn\"} 0",
		"# HELP function_events_total Events processed per function.",
		"# TYPE function_events_total counter",
		"function_events_total{function=\"fn\"} 1",
		"# HELP function_successes_total Handler successes per function.",
		"# TYPE function_successes_total counter",
		"function_successes_total{function=\"fn\"} 1",
		"# HELP function_failures_total Handler failures (including timeouts) per "
		"function.",
		"# TYPE function_failures_total counter",
		"function_failures_total{function=\"fn\"} 0",
		"# HELP function_retries_total Event retries per function.",
		"# TYPE function_retries_total counter",
		"function_retries_total{function=\"fn\"} 0",
		"# HELP function_dlq_entries_total Dead-letter queue entries per function.",
		"# TYPE function_dlq_entries_total counter",
		"function_dlq_entries_total{function=\"fn\"} 0",
		"# HELP key_waits_total Invocations that waited for their key (key_concurrency) per "
		"function.",
		"# TYPE key_waits_total counter",
		"key_waits_total{function=\"fn\"} 0",
		"# HELP handler_duration_seconds Handler invocation duration in seconds.",
		"# TYPE handler_duration_seconds histogram",
		"handler_duration_seconds_bucket{function=\"fn\",handler=\"h\",le=\"0.005\"} 0",
		"handler_duration_seconds_bucket{function=\"fn\",handler=\"h\",le=\"0.01\"} 0",
		"handler_duration_seconds_bucket{function=\"fn\",handler=\"h\",le=\"0.025\"} 0",
		"handler_duration_seconds_bucket{function=\"fn\",handler=\"h\",le=\"0.05\"} 0",
		"handler_duration_seconds_bucket{function=\"fn\",handler=\"h\",le=\"0.1\"} 0",
		"handler_duration_seconds_bucket{function=\"fn\",handler=\"h\",le=\"0.25\"} 1",
		"handler_duration_seconds_bucket{function=\"fn\",handler=\"h\",le=\"0.5\"} 1",
		"handler_duration_seconds_bucket{function=\"fn\",handler=\"h\",le=\"1\"} 1",
		"handler_duration_seconds_bucket{function=\"fn\",handler=\"h\",le=\"2.5\"} 1",
		"handler_duration_seconds_bucket{function=\"fn\",handler=\"h\",le=\"5\"} 1",
		"handler_duration_seconds_bucket{function=\"fn\",handler=\"h\",le=\"10\"} 1",
		"handler_duration_seconds_bucket{function=\"fn\",handler=\"h\",le=\"30\"} 1",
		"handler_duration_seconds_bucket{function=\"fn\",handler=\"h\",le=\"60\"} 1",
		"handler_duration_seconds_bucket{function=\"fn\",handler=\"h\",le=\"120\"} 1",
		"handler_duration_seconds_bucket{function=\"fn\",handler=\"h\",le=\"300\"} 1",
		"handler_duration_seconds_bucket{function=\"fn\",handler=\"h\",le=\"+Inf\"} 1",
		"handler_duration_seconds_sum{function=\"fn\",handler=\"h\"} 0.2",
		"handler_duration_seconds_count{function=\"fn\",handler=\"h\"} 1",
		"# HELP function_build_seconds Function image build duration in seconds.",
		"# TYPE function_build_seconds histogram",
		"function_build_seconds_bucket{function=\"fn\",le=\"0.5\"} 0",
		"function_build_seconds_bucket{function=\"fn\",le=\"1\"} 0",
		"function_build_seconds_bucket{function=\"fn\",le=\"2\"} 0",
		"function_build_seconds_bucket{function=\"fn\",le=\"5\"} 1",
		"function_build_seconds_bucket{function=\"fn\",le=\"10\"} 1",
		"function_build_seconds_bucket{function=\"fn\",le=\"30\"} 1",
		"function_build_seconds_bucket{function=\"fn\",le=\"60\"} 1",
		"function_build_seconds_bucket{function=\"fn\",le=\"120\"} 1",
		"function_build_seconds_bucket{function=\"fn\",le=\"300\"} 1",
		"function_build_seconds_bucket{function=\"fn\",le=\"600\"} 1",
		"function_build_seconds_bucket{function=\"fn\",le=\"+Inf\"} 1",
		"function_build_seconds_sum{function=\"fn\"} 3",
		"function_build_seconds_count{function=\"fn\"} 1",
		"# HELP pending_entries Entries pending in the consumer group (sampled every 15s).",
		"# TYPE pending_entries gauge",
		"pending_entries 2",
		"# HELP pending_oldest_age_seconds Age of the oldest pending entry, from its "
		"stream id (sampled every 15s).",
		"# TYPE pending_oldest_age_seconds gauge",
		"pending_oldest_age_seconds 61.5",
		"# HELP buffered_events Events held in the local buffer.",
		"# TYPE buffered_events gauge",
		"buffered_events 0",
		"# HELP in_flight_invocations Handler invocations currently executing in this "
		"worker.",
		"# TYPE in_flight_invocations gauge",
		"in_flight_invocations 0",
		"# HELP retries_scheduled Retries waiting for their due time in the retry index "
		"(sampled every 15s).",
		"# TYPE retries_scheduled gauge",
		"retries_scheduled 0",
		"# HELP concurrency_waits_total Invocations whose concurrency-slot acquisition had "
		"to block.",
		"# TYPE concurrency_waits_total counter",
		"concurrency_waits_total 1",
		"# HELP schedule_occurrences_published_total Scheduled occurrences this worker "
		"published first.",
		"# TYPE schedule_occurrences_published_total counter",
		"schedule_occurrences_published_total 0",
		"# HELP schedule_occurrences_duplicate_total Scheduled occurrences already "
		"published by another worker.",
		"# TYPE schedule_occurrences_duplicate_total counter",
		"schedule_occurrences_duplicate_total 1",
		"# HELP schedule_publish_failures_total Scheduled occurrences this worker failed "
		"to publish.",
		"# TYPE schedule_publish_failures_total counter",
		"schedule_publish_failures_total 0",
		"# HELP standby_containers Standby containers started and not yet dispatched or "
		"discarded.",
		"# TYPE standby_containers gauge",
		"standby_containers{function=\"fn\",handler=\"h\"} 0",
		"# HELP standby_dispatches_total Invocations given to a standby container.",
		"# TYPE standby_dispatches_total counter",
		"standby_dispatches_total 0",
		"# HELP standby_misses_total Invocations that found no standby container ready "
		"while standby was enabled.",
		"# TYPE standby_misses_total counter",
		"standby_misses_total 0",
		"# HELP standby_discarded_total Standby containers removed without an event, by "
		"reason.",
		"# TYPE standby_discarded_total counter",
		"standby_discarded_total{reason=\"version\"} 0",
		"standby_discarded_total{reason=\"secret\"} 0",
		"standby_discarded_total{reason=\"idle\"} 0",
		"standby_discarded_total{reason=\"excess\"} 0",
		"standby_discarded_total{reason=\"exited\"} 0",
		"standby_discarded_total{reason=\"lost\"} 0",
		"standby_discarded_total{reason=\"shutdown\"} 0",
		"standby_discarded_total{reason=\"age\"} 0",
		"# HELP warm_containers Warm containers running, idle or serving an invocation.",
		"# TYPE warm_containers gauge",
		"warm_containers{function=\"fn\"} 0",
		"# HELP warm_invocations_total Invocations run in a warm container.",
		"# TYPE warm_invocations_total counter",
		"warm_invocations_total 0",
		"# HELP warm_retired_total Warm containers removed, by reason.",
		"# TYPE warm_retired_total counter",
		"warm_retired_total{reason=\"version\"} 0",
		"warm_retired_total{reason=\"secret\"} 0",
		"warm_retired_total{reason=\"idle\"} 0",
		"warm_retired_total{reason=\"max_uses\"} 0",
		"warm_retired_total{reason=\"excess\"} 0",
		"warm_retired_total{reason=\"exited\"} 0",
		"warm_retired_total{reason=\"timeout\"} 0",
		"warm_retired_total{reason=\"error\"} 0",
		"warm_retired_total{reason=\"shutdown\"} 0",
		"# HELP consumers_deleted_total Consumers of the group deleted by this worker: no "
		"pending entry and no live worker under the name.",
		"# TYPE consumers_deleted_total counter",
		"consumers_deleted_total 0",
		"# HELP otel_spans_exported_total Spans the collector accepted (a 2xx answer to their request).",
		"# TYPE otel_spans_exported_total counter",
		"otel_spans_exported_total 0",
		"# HELP otel_spans_dropped_total Spans dropped: the export queue was full, or their export failed.",
		"# TYPE otel_spans_dropped_total counter",
		"otel_spans_dropped_total 0",
		"# HELP otel_export_failures_total Span export requests that failed (no answer, timeout, or not 2xx).",
		"# TYPE otel_export_failures_total counter",
		"otel_export_failures_total 0",
	};
	char *text = render();
	REQUIRE(text);
	check_lines(text, want, ARRAY_LEN(want));
	free(text);
}

/* The warm families: the per-function gauge moves both ways, the counter
 * counts, every reason is rendered in enum order. */
TEST(warm_families)
{
	metrics_reset_for_tests();
	metrics_warm_containers("w", 1);
	metrics_warm_containers("w", 1);
	metrics_warm_containers("w", -1);
	metrics_inc(METRIC_WARM_INVOCATIONS);
	metrics_inc(METRIC_WARM_INVOCATIONS);
	metrics_inc(METRIC_WARM_INVOCATIONS);
	metrics_warm_retired(METRIC_WARM_MAX_USES);
	metrics_warm_retired(METRIC_WARM_SHUTDOWN);
	metrics_warm_retired(METRIC_WARM_SHUTDOWN);
	metrics_warm_retired(METRIC_WARM_REASON_COUNT); /* ignored */
	CHECK_INT(metrics_warm_containers_value("w"), 1);
	CHECK_INT(metrics_warm_containers_value("none"), 0);
	CHECK_INT(metrics_warm_retired_value(METRIC_WARM_SHUTDOWN), 2);
	CHECK_STR(metrics_warm_reason_name(METRIC_WARM_MAX_USES), "max_uses");
	static const char *const want[] = {
		"# HELP warm_containers Warm containers running, idle or serving an invocation.",
		"# TYPE warm_containers gauge",
		"warm_containers{function=\"w\"} 1",
		"# HELP warm_invocations_total Invocations run in a warm container.",
		"# TYPE warm_invocations_total counter",
		"warm_invocations_total 3",
		"# HELP warm_retired_total Warm containers removed, by reason.",
		"# TYPE warm_retired_total counter",
		"warm_retired_total{reason=\"version\"} 0",
		"warm_retired_total{reason=\"secret\"} 0",
		"warm_retired_total{reason=\"idle\"} 0",
		"warm_retired_total{reason=\"max_uses\"} 1",
		"warm_retired_total{reason=\"excess\"} 0",
		"warm_retired_total{reason=\"exited\"} 0",
		"warm_retired_total{reason=\"timeout\"} 0",
		"warm_retired_total{reason=\"error\"} 0",
		"warm_retired_total{reason=\"shutdown\"} 2",
		"# HELP consumers_deleted_total Consumers of the group deleted by this worker: no "
		"pending entry and no live worker under the name.",
		"# TYPE consumers_deleted_total counter",
		"consumers_deleted_total 0",
		"# HELP otel_spans_exported_total Spans the collector accepted (a 2xx answer to their request).",
		"# TYPE otel_spans_exported_total counter",
		"otel_spans_exported_total 0",
		"# HELP otel_spans_dropped_total Spans dropped: the export queue was full, or their export failed.",
		"# TYPE otel_spans_dropped_total counter",
		"otel_spans_dropped_total 0",
		"# HELP otel_export_failures_total Span export requests that failed (no answer, timeout, or not 2xx).",
		"# TYPE otel_export_failures_total counter",
		"otel_export_failures_total 0",
	};
	char *text = render();
	REQUIRE(text);
	char *block = strstr(text, "# HELP warm_containers ");
	REQUIRE(block);
	check_lines(block, want, ARRAY_LEN(want));
	free(text);
}

/* The standby families: the per-handler gauge moves both ways and exists
 * for every handler series (0 included), the two counters count, every
 * reason is rendered in enum order, and the text is well formed. The
 * families are the last four, in this order. */
TEST(standby_families)
{
	metrics_reset_for_tests();
	static const char *const names[METRIC_STANDBY_REASON_COUNT] = {
		"version", "secret", "idle", "excess", "exited", "lost", "shutdown", "age"};
	for (int r = 0; r < METRIC_STANDBY_REASON_COUNT; r++)
		CHECK_STR(metrics_standby_reason_name((enum metric_standby_reason)r), names[r]);
	CHECK_STR(metrics_standby_reason_name(METRIC_STANDBY_REASON_COUNT), "unknown");

	metrics_handler_invocation("a", "on.demand", METRIC_OUTCOME_SUCCESS, 1);
	metrics_standby_containers("b", "m.h", 1);
	metrics_standby_containers("b", "m.h", 1);
	metrics_standby_containers("b", "m.h", 1);
	metrics_standby_containers("b", "m.h", -1);
	metrics_standby_containers("b", "m.g", 1);
	metrics_standby_containers("b", "m.g", -1);
	CHECK_INT(metrics_standby_containers_value("b", "m.h"), 2);
	CHECK_INT(metrics_standby_containers_value("b", "m.g"), 0);
	CHECK_INT(metrics_standby_containers_value("a", "on.demand"), 0);
	CHECK_INT(metrics_standby_containers_value("none", "x"), 0); /* creates nothing */
	metrics_inc(METRIC_STANDBY_DISPATCHES);
	metrics_inc(METRIC_STANDBY_DISPATCHES);
	metrics_inc(METRIC_STANDBY_MISSES);
	CHECK_INT(metrics_counter_value(METRIC_STANDBY_DISPATCHES), 2);
	CHECK_INT(metrics_counter_value(METRIC_STANDBY_MISSES), 1);
	metrics_standby_discarded(METRIC_STANDBY_SECRET);
	metrics_standby_discarded(METRIC_STANDBY_EXITED);
	metrics_standby_discarded(METRIC_STANDBY_EXITED);
	metrics_standby_discarded(METRIC_STANDBY_SHUTDOWN);
	metrics_standby_discarded(METRIC_STANDBY_REASON_COUNT); /* ignored */
	metrics_standby_discarded((enum metric_standby_reason) - 1);
	CHECK_INT(metrics_standby_discarded_value(METRIC_STANDBY_EXITED), 2);
	CHECK_INT(metrics_standby_discarded_value(METRIC_STANDBY_VERSION), 0);
	CHECK_INT(metrics_standby_discarded_value(METRIC_STANDBY_REASON_COUNT), 0);

	static const char *const want[] = {
		"# HELP standby_containers Standby containers started and not yet dispatched or "
		"discarded.",
		"# TYPE standby_containers gauge",
		"standby_containers{function=\"a\",handler=\"on.demand\"} 0",
		"standby_containers{function=\"b\",handler=\"m.g\"} 0",
		"standby_containers{function=\"b\",handler=\"m.h\"} 2",
		"# HELP standby_dispatches_total Invocations given to a standby container.",
		"# TYPE standby_dispatches_total counter",
		"standby_dispatches_total 2",
		"# HELP standby_misses_total Invocations that found no standby container ready "
		"while standby was enabled.",
		"# TYPE standby_misses_total counter",
		"standby_misses_total 1",
		"# HELP standby_discarded_total Standby containers removed without an event, by "
		"reason.",
		"# TYPE standby_discarded_total counter",
		"standby_discarded_total{reason=\"version\"} 0",
		"standby_discarded_total{reason=\"secret\"} 1",
		"standby_discarded_total{reason=\"idle\"} 0",
		"standby_discarded_total{reason=\"excess\"} 0",
		"standby_discarded_total{reason=\"exited\"} 2",
		"standby_discarded_total{reason=\"lost\"} 0",
		"standby_discarded_total{reason=\"shutdown\"} 1",
		"standby_discarded_total{reason=\"age\"} 0",
		"# HELP warm_containers Warm containers running, idle or serving an invocation.",
		"# TYPE warm_containers gauge",
		"warm_containers{function=\"a\"} 0",
		"warm_containers{function=\"b\"} 0",
		"# HELP warm_invocations_total Invocations run in a warm container.",
		"# TYPE warm_invocations_total counter",
		"warm_invocations_total 0",
		"# HELP warm_retired_total Warm containers removed, by reason.",
		"# TYPE warm_retired_total counter",
		"warm_retired_total{reason=\"version\"} 0",
		"warm_retired_total{reason=\"secret\"} 0",
		"warm_retired_total{reason=\"idle\"} 0",
		"warm_retired_total{reason=\"max_uses\"} 0",
		"warm_retired_total{reason=\"excess\"} 0",
		"warm_retired_total{reason=\"exited\"} 0",
		"warm_retired_total{reason=\"timeout\"} 0",
		"warm_retired_total{reason=\"error\"} 0",
		"warm_retired_total{reason=\"shutdown\"} 0",
		"# HELP consumers_deleted_total Consumers of the group deleted by this worker: no "
		"pending entry and no live worker under the name.",
		"# TYPE consumers_deleted_total counter",
		"consumers_deleted_total 0",
		"# HELP otel_spans_exported_total Spans the collector accepted (a 2xx answer to their request).",
		"# TYPE otel_spans_exported_total counter",
		"otel_spans_exported_total 0",
		"# HELP otel_spans_dropped_total Spans dropped: the export queue was full, or their export failed.",
		"# TYPE otel_spans_dropped_total counter",
		"otel_spans_dropped_total 0",
		"# HELP otel_export_failures_total Span export requests that failed (no answer, timeout, or not 2xx).",
		"# TYPE otel_export_failures_total counter",
		"otel_export_failures_total 0",
	};
	char *text = render();
	REQUIRE(text);
	char *block = strstr(text, "# HELP standby_containers ");
	REQUIRE(block);
	check_lines(block, want, ARRAY_LEN(want)); /* the last families */
	free(text);

	/* a handler known only through its standby gauge has every handler
	 * family, at zero; the well-formedness is checked on a fresh render */
	text = render();
	REQUIRE(text);
	CHECK(t_has_line(text, "handler_invocations_total{function=\"b\",handler=\"m.h\","
			       "outcome=\"success\"} 0"));
	CHECK(t_has_line(text, "handler_duration_seconds_count{function=\"b\",handler=\"m.h\"} 0"));
	CHECK(t_has_line(text, "function_events_total{function=\"b\"} 0"));
	CHECK(strstr(text, "\"none\"") == NULL);
	check_accepted(text);
	free(text);

	/* Prometheus-only: the SQLite snapshot's global row is unchanged */
	struct metrics_global_snapshot g;
	metrics_snapshot(&g, NULL, NULL);
	CHECK_INT(g.handler_successes, 1);
}

/* A busier registry passes the strict checker, and promtool when present. */
TEST(exposition_is_well_formed)
{
	metrics_reset_for_tests();
	char fn[32], h[32];
	for (int f = 0; f < 5; f++) {
		snprintf_(fn, sizeof fn, "fn-%d", f);
		metrics_function_register(fn);
		for (int k = 0; k < 3; k++) {
			snprintf_(h, sizeof h, "mod.h%d", k);
			metrics_handler_invocation(fn, h, (enum metric_outcome)(k % 3),
						   0.01 * k * f);
		}
		metrics_build(fn, f % 2, f * 10.0);
	}
	metrics_handler_invocation("q\"uote", "new\nline", METRIC_OUTCOME_TIMEOUT, 1e9);
	metrics_gauge_set(METRIC_PENDING_OLDEST_AGE, 0.000001);
	metrics_standby_containers("fn-1", "mod.h1", 3);
	metrics_standby_containers("fn-9", "standby.only", 1);
	metrics_inc(METRIC_STANDBY_MISSES);
	metrics_standby_discarded(METRIC_STANDBY_IDLE);
	char *text = render();
	REQUIRE(text);
	char *err = NULL;
	int nfam = check_exposition(text, &err);
	if (nfam < 0)
		T_FAIL_("exposition rejected: %s", err);
	CHECK_INT(nfam, 37);
	free(err);

	if (access("/usr/bin/promtool", X_OK) == 0) {
		char path[] = "/tmp/relay-metrics-XXXXXX";
		int fd = mkstemp(path);
		REQUIRE(fd >= 0);
		CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
		close(fd);
		char *cmd = xasprintf("promtool check metrics < %s 2>&1", path);
		FILE *p = popen(cmd, "r");
		REQUIRE(p);
		char out[4096];
		size_t n = fread(out, 1, sizeof out - 1, p);
		out[n] = '\0';
		int rc = pclose(p);
		if (rc != 0 || n != 0)
			T_FAIL_("promtool check metrics (rc %d): %s", rc, out);
		unlink(path);
		free(cmd);
	} else {
		printf("  note: promtool not installed; strict C checker only\n");
	}
	free(text);
}

#define NTHREADS 8
#define PER_THREAD 20000

static void *hammer(void *arg)
{
	int id = (int)(intptr_t)arg;
	char fn[16];
	snprintf_(fn, sizeof fn, "fn-%d", id % 2);
	struct metrics_handler *cached = metrics_handler_get("shared", "h");
	for (int i = 0; i < PER_THREAD; i++) {
		metrics_inc(METRIC_EVENTS_RECEIVED);
		metrics_gauge_add(METRIC_IN_FLIGHT, 1);
		/* new series appear while others are being looked up */
		char h[16];
		snprintf_(h, sizeof h, "h%d", i % 50);
		metrics_handler_invocation(fn, h, (enum metric_outcome)(i % 3), 0.25);
		metrics_handler_observe(cached, METRIC_OUTCOME_SUCCESS, 0.5);
		metrics_function_event(fn);
		metrics_standby_containers("shared", "h", 1);
		metrics_gauge_add(METRIC_IN_FLIGHT, -1);
	}
	return NULL;
}

TEST(concurrent_updates_are_exact)
{
	metrics_reset_for_tests();
	pthread_t t[NTHREADS];
	for (int i = 0; i < NTHREADS; i++)
		REQUIRE(pthread_create(&t[i], NULL, hammer, (void *)(intptr_t)i) == 0);
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(t[i], NULL);
	const long long total = (long long)NTHREADS * PER_THREAD;
	CHECK_INT(metrics_counter_value(METRIC_EVENTS_RECEIVED), total);
	CHECK(metrics_gauge_value(METRIC_IN_FLIGHT) == 0);
	CHECK_INT(metrics_standby_containers_value("shared", "h"), total);
	/* every third of the labelled invocations succeeded, plus all cached ones */
	long long succ_labelled = 0;
	for (int i = 0; i < PER_THREAD; i++)
		succ_labelled += (i % 3 == 0);
	succ_labelled *= NTHREADS;
	CHECK_INT(metrics_counter_value(METRIC_HANDLER_SUCCESS), succ_labelled + total);
	CHECK_INT(metrics_counter_value(METRIC_HANDLER_FAILURE), total - succ_labelled);

	struct metrics_global_snapshot g;
	struct metrics_function_snapshot *fs;
	size_t n;
	metrics_snapshot(&g, &fs, &n);
	REQUIRE(n == 3);
	CHECK_STR(fs[0].function, "fn-0");
	CHECK_STR(fs[1].function, "fn-1");
	CHECK_STR(fs[2].function, "shared");
	CHECK_INT(fs[0].events, total / 2);
	CHECK_INT(fs[1].events, total / 2);
	CHECK_INT(fs[0].successes + fs[0].failures, total / 2);
	CHECK_INT(fs[2].successes, total);
	metrics_snapshot_free(fs, n);

	char *text = render();
	/* 0.5 and 0.25 are exact in binary, so the sums are exact too */
	char *line = xasprintf(
		"handler_duration_seconds_sum{function=\"shared\",handler=\"h\"} %lld", total / 2);
	CHECK(t_has_line(text, line));
	free(line);
	line = xasprintf("handler_duration_seconds_count{function=\"shared\",handler=\"h\"} %lld",
			 total);
	CHECK(t_has_line(text, line));
	free(line);
	check_accepted(text);
	free(text);
}

TEST(series_are_bounded)
{
	metrics_reset_for_tests();
	char logpath[] = "/tmp/relay-metrics-log-XXXXXX";
	int fd = mkstemp(logpath);
	REQUIRE(fd >= 0);
	log_set_fd(fd);

	metrics_handler_invocation("f0", "h0", METRIC_OUTCOME_SUCCESS, 1); /* 2 label sets */
	char name[32];
	for (int i = 1; i < METRICS_MAX_SERIES - 2; i++) {
		snprintf_(name, sizeof name, "f%d", i);
		if (metrics_function_register(name) < 0) {
			T_FAIL_("register %s failed below the bound", name);
			break;
		}
	}
	CHECK_INT(metrics_function_register("last"), 0); /* the 10000th label set */
	CHECK_INT(metrics_function_register("one-too-many"), -1);
	CHECK_INT(metrics_function_register("f5"), 0); /* existing: still fine */
	CHECK(metrics_handler_get("f1", "new") == NULL);
	metrics_handler_invocation("f1", "new", METRIC_OUTCOME_SUCCESS, 1); /* dropped */
	metrics_function_event("another-new");				    /* dropped */
	metrics_handler_invocation("f0", "h0", METRIC_OUTCOME_SUCCESS, 1);  /* counted */
	metrics_function_event("f7");					    /* counted */

	CHECK_INT(metrics_counter_value(METRIC_HANDLER_SUCCESS), 2);
	struct metrics_function_snapshot *fs;
	size_t n;
	metrics_snapshot(NULL, &fs, &n);
	CHECK_INT(n, METRICS_MAX_SERIES - 1);
	for (size_t i = 0; i < n; i++) {
		if (strcmp(fs[i].function, "f7") == 0)
			CHECK_INT(fs[i].events, 1);
		CHECK(strcmp(fs[i].function, "another-new") != 0);
	}
	metrics_snapshot_free(fs, n);

	log_set_fd(2);
	close(fd);
	CHECK_INT(t_count_lines_with(logpath, "metrics series limit reached"), 1);
	CHECK_INT(t_count_lines_with(logpath, "level=WARN"), 1);
	unlink(logpath);

	char *text = render();
	REQUIRE(text);
	CHECK(t_has_line(text, "function_events_total{function=\"f7\"} 1"));
	CHECK(strstr(text, "one-too-many") == NULL);
	free(text);
	metrics_reset_for_tests();
}

TEST(disabled_updates_are_no_ops)
{
	metrics_reset_for_tests();
	metrics_inc(METRIC_EVENTS_RECEIVED);
	metrics_set_enabled(false);
	CHECK(!metrics_enabled());
	metrics_inc(METRIC_EVENTS_RECEIVED);
	metrics_add(METRIC_EVENTS_PROCESSED, 5);
	metrics_gauge_set(METRIC_BUFFERED_EVENTS, 3);
	metrics_gauge_add(METRIC_IN_FLIGHT, 1);
	metrics_handler_invocation("fn", "h", METRIC_OUTCOME_SUCCESS, 1);
	metrics_function_event("fn");
	metrics_function_retry("fn");
	metrics_function_dlq("fn");
	metrics_build("fn", false, 1);
	metrics_inc(METRIC_STANDBY_DISPATCHES);
	metrics_standby_containers("fn", "h", 1);
	metrics_standby_discarded(METRIC_STANDBY_IDLE);
	CHECK_INT(metrics_counter_value(METRIC_STANDBY_DISPATCHES), 0);
	CHECK_INT(metrics_standby_containers_value("fn", "h"), 0);
	CHECK_INT(metrics_standby_discarded_value(METRIC_STANDBY_IDLE), 0);
	CHECK_INT(metrics_counter_value(METRIC_EVENTS_RECEIVED), 1);
	CHECK_INT(metrics_counter_value(METRIC_EVENTS_PROCESSED), 0);
	CHECK_INT(metrics_counter_value(METRIC_HANDLER_SUCCESS), 0);
	CHECK_INT(metrics_counter_value(METRIC_RETRIES), 0);
	CHECK(metrics_gauge_value(METRIC_BUFFERED_EVENTS) == 0);
	CHECK(metrics_gauge_value(METRIC_IN_FLIGHT) == 0);
	struct metrics_function_snapshot *fs;
	size_t n;
	metrics_snapshot(NULL, &fs, &n);
	CHECK_INT(n, 0); /* no series were created either */
	CHECK(fs == NULL);
	char *text = render(); /* reads still work */
	CHECK(t_has_line(text, "events_received_total 1"));
	free(text);
	metrics_set_enabled(true);
	metrics_inc(METRIC_EVENTS_RECEIVED);
	CHECK_INT(metrics_counter_value(METRIC_EVENTS_RECEIVED), 2);
}

TEST(snapshot_values)
{
	metrics_reset_for_tests();
	metrics_add(METRIC_EVENTS_RECEIVED, 10);
	metrics_add(METRIC_EVENTS_PROCESSED, 9);
	metrics_function_register("zeta");
	metrics_handler_invocation("beta", "h", METRIC_OUTCOME_SUCCESS, 1);
	metrics_handler_invocation("beta", "h", METRIC_OUTCOME_TIMEOUT, 1);
	metrics_function_event("beta");
	metrics_function_event("beta");
	metrics_function_retry("beta");
	metrics_function_dlq("beta");
	metrics_function_dlq(NULL);
	metrics_build("alpha", false, 2);
	metrics_gauge_set(METRIC_PENDING_ENTRIES, 17);
	metrics_gauge_set(METRIC_PENDING_OLDEST_AGE, 134);
	metrics_inc(METRIC_SCHEDULE_PUBLISHED); /* Prometheus-only */

	struct metrics_global_snapshot g;
	struct metrics_function_snapshot *fs;
	size_t n;
	metrics_snapshot(&g, &fs, &n);
	CHECK_INT(g.events_received, 10);
	CHECK_INT(g.events_processed, 9);
	CHECK_INT(g.handler_successes, 1);
	CHECK_INT(g.handler_failures, 1);
	CHECK_INT(g.retries, 1);
	CHECK_INT(g.dlq_entries, 2);
	CHECK(g.pending_entries == 17);
	CHECK(g.pending_oldest_age_seconds == 134);
	REQUIRE(n == 3);
	CHECK_STR(fs[0].function, "alpha");
	CHECK_INT(fs[0].build_failures, 1);
	CHECK_INT(fs[0].events, 0);
	CHECK_STR(fs[1].function, "beta");
	CHECK_INT(fs[1].events, 2);
	CHECK_INT(fs[1].successes, 1);
	CHECK_INT(fs[1].failures, 1);
	CHECK_INT(fs[1].retries, 1);
	CHECK_INT(fs[1].dlq_entries, 1);
	CHECK_STR(fs[2].function, "zeta");
	CHECK_INT(fs[2].events + fs[2].successes + fs[2].failures + fs[2].retries, 0);
	/* the snapshot is a copy: later updates do not change it */
	metrics_function_event("beta");
	CHECK_INT(fs[1].events, 2);
	metrics_snapshot_free(fs, n);
	metrics_snapshot(&g, NULL, NULL); /* global only */
	CHECK_INT(g.events_received, 10);
}

T_MAIN(T_CASE(checker_rejects_malformed_text), T_CASE(counters_and_gauges),
       T_CASE(float_formatting), T_CASE(histogram_buckets),
       T_CASE(invocation_updates_every_related_series), T_CASE(label_values_are_escaped),
       T_CASE(exact_rendering), T_CASE(standby_families), T_CASE(warm_families),
       T_CASE(exposition_is_well_formed), T_CASE(concurrent_updates_are_exact),
       T_CASE(series_are_bounded), T_CASE(disabled_updates_are_no_ops), T_CASE(snapshot_values))
