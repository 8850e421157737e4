/* Retry policies: parsing, merging, the backoff arithmetic (retry.h). */
#include <inttypes.h>
#include <limits.h>
#include <string.h>

#include "base/duration.h"
#include "base/util.h"
#include "model/retry.h"
#include "t.h"

/* Parses text (JSON) at path "retry"; returns the errors joined by '|'
 * ("" when none). */
static char *parse(const char *text, struct retry_policy *out)
{
	json_error_t je;
	json_t *j = json_loads(text, JSON_DECODE_ANY, &je);
	if (!j) {
		T_FAIL_("bad test JSON %s", text);
		return xstrdup("?");
	}
	struct strlist errs = {0};
	int rc = retry_policy_parse(j, "retry", out, &errs);
	json_decref(j);
	struct buf b;
	buf_init(&b, 4096);
	for (size_t i = 0; i < errs.n; i++)
		buf_appendf(&b, "%s%s", i ? "|" : "", errs.v[i]);
	char *s = xstrdup(b.data ? b.data : "");
	buf_free(&b);
	if ((rc == 0) != (errs.n == 0))
		T_FAIL_("rc %d with %zu errors for %s", rc, errs.n, text);
	strlist_free(&errs);
	return s;
}

TEST(default_schedule)
{
	static const struct {
		int attempt;
		int64_t want;
	} fixed[] = {
		{1, 1 * NS_PER_MIN},	    {2, 2 * NS_PER_MIN},  {3, 5 * NS_PER_MIN},
		{4, 10 * NS_PER_MIN},	    {5, 10 * NS_PER_MIN}, {100, 10 * NS_PER_MIN},
		{INT_MAX, 10 * NS_PER_MIN}, {0, 1 * NS_PER_MIN},  {-3, 1 * NS_PER_MIN},
	};
	struct retry_policy p, z;
	const int64_t zeros[4] = {0, 0, 0, 0};
	retry_policy_default(&p, NULL);
	retry_policy_default(&z, zeros);
	for (size_t i = 0; i < ARRAY_LEN(fixed); i++) {
		CHECK_INT(retry_backoff_ns(&p, fixed[i].attempt, 0.5), fixed[i].want);
		CHECK_INT(retry_backoff_ns(&z, fixed[i].attempt, 0.5), fixed[i].want);
	}
	/* a non-zero override replaces its step only */
	const int64_t o[4] = {NS_PER_SEC, 0, 3 * NS_PER_SEC, -1};
	retry_policy_default(&p, o);
	CHECK_INT(retry_backoff_ns(&p, 1, 0), NS_PER_SEC);
	CHECK_INT(retry_backoff_ns(&p, 2, 0), 2 * NS_PER_MIN);
	CHECK_INT(retry_backoff_ns(&p, 3, 0), 3 * NS_PER_SEC);
	CHECK_INT(retry_backoff_ns(&p, 4, 0), 10 * NS_PER_MIN);
	CHECK_INT(retry_backoff_ns(&p, 9, 0), 10 * NS_PER_MIN);
	char *d = retry_policy_describe(&z);
	CHECK_STR(d, "backoff [1m0s, 2m0s, 5m0s, 10m0s]");
	free(d);
}

TEST(list_backoff_last_repeats)
{
	struct retry_policy p;
	char *e = parse("{\"backoff\": [\"2s\", \"4s\"]}", &p);
	CHECK_STR(e, "");
	free(e);
	CHECK_INT(retry_backoff_ns(&p, 1, 0.3), 2 * NS_PER_SEC);
	CHECK_INT(retry_backoff_ns(&p, 2, 0.3), 4 * NS_PER_SEC);
	CHECK_INT(retry_backoff_ns(&p, 3, 0.3), 4 * NS_PER_SEC);
	CHECK_INT(retry_backoff_ns(&p, INT_MAX, 0.3), 4 * NS_PER_SEC);
}

TEST(exponential_backoff_caps_without_overflow)
{
	struct retry_policy p;
	char *e = parse("{\"backoff\": {\"initial\": \"1s\", \"multiplier\": 2, \"max\": \"10m\"}}",
			&p);
	CHECK_STR(e, "");
	free(e);
	CHECK_INT(retry_backoff_ns(&p, 1, 0), NS_PER_SEC);
	CHECK_INT(retry_backoff_ns(&p, 2, 0), 2 * NS_PER_SEC);
	CHECK_INT(retry_backoff_ns(&p, 4, 0), 8 * NS_PER_SEC);
	CHECK_INT(retry_backoff_ns(&p, 10, 0), 512 * NS_PER_SEC);
	CHECK_INT(retry_backoff_ns(&p, 11, 0), 10 * NS_PER_MIN);
	CHECK_INT(retry_backoff_ns(&p, 1000, 0), 10 * NS_PER_MIN);
	CHECK_INT(retry_backoff_ns(&p, INT_MAX, 0), 10 * NS_PER_MIN);
	/* the largest multiplier and max: still capped, never negative */
	e = parse("{\"backoff\": {\"initial\": \"24h\", \"multiplier\": 1000, \"max\": \"24h\", "
		  "\"jitter\": 1}}",
		  &p);
	CHECK_STR(e, "");
	free(e);
	for (int a = 1; a < 2000; a += 97)
		for (double u = 0; u < 1; u += 0.125) {
			int64_t b = retry_backoff_ns(&p, a, u);
			CHECK(b >= 0 && b <= RETRY_MAX_DELAY_NS);
		}
}

TEST(jitter_stays_within_its_fraction)
{
	struct retry_policy p;
	char *e = parse("{\"backoff\": {\"initial\": \"10s\", \"multiplier\": 1, \"max\": \"1m\", "
			"\"jitter\": 0.1}}",
			&p);
	CHECK_STR(e, "");
	free(e);
	CHECK_INT(retry_backoff_ns(&p, 1, 0), 9 * NS_PER_SEC);
	CHECK_INT(retry_backoff_ns(&p, 1, 0.5), 10 * NS_PER_SEC);
	int64_t lo = INT64_MAX, hi = 0;
	for (int i = 0; i < 1000; i++) {
		int64_t b = retry_backoff_ns(&p, 3, (double)i / 1000.0);
		lo = b < lo ? b : lo;
		hi = b > hi ? b : hi;
	}
	CHECK(lo >= 9 * NS_PER_SEC && hi <= 11 * NS_PER_SEC);
	CHECK(hi - lo > 19 * NS_PER_SEC / 10); /* it spreads */
	/* at the cap, jitter never goes above max */
	e = parse("{\"backoff\": {\"initial\": \"1m\", \"max\": \"1m\", \"jitter\": 0.5}}", &p);
	CHECK_STR(e, "");
	free(e);
	CHECK_INT(retry_backoff_ns(&p, 5, 0.999), NS_PER_MIN);
	CHECK_INT(retry_backoff_ns(&p, 5, 0), 30 * NS_PER_SEC);
	/* u out of range is taken as the middle */
	CHECK_INT(retry_backoff_ns(&p, 5, 7.0), NS_PER_MIN);
}

TEST(exit_codes_and_max_age)
{
	struct retry_policy p;
	char *e = parse("{\"max_age\": \"1h\", \"no_retry_exit_codes\": [2, 255, 1]}", &p);
	CHECK_STR(e, "");
	free(e);
	CHECK(p.has_max_age && p.has_no_retry && !p.has_backoff);
	CHECK_INT(p.max_age_ns, NS_PER_HOUR);
	CHECK(retry_exit_code_permanent(&p, 2));
	CHECK(retry_exit_code_permanent(&p, 1));
	CHECK(retry_exit_code_permanent(&p, 255));
	CHECK(!retry_exit_code_permanent(&p, 3));
	CHECK(!retry_exit_code_permanent(&p, 0));
	CHECK(!retry_exit_code_permanent(&p, -1));
	CHECK(!retry_exit_code_permanent(&p, 256 + 2));
}

TEST(rule_keys_win_key_by_key)
{
	struct retry_policy base, top, rule, eff;
	retry_policy_default(&base, NULL);
	char *e = parse("{\"backoff\": [\"2s\", \"4s\"], \"max_age\": \"1h\", "
			"\"no_retry_exit_codes\": [2]}",
			&top);
	CHECK_STR(e, "");
	free(e);
	e = parse("{\"backoff\": [\"1s\"]}", &rule);
	CHECK_STR(e, "");
	free(e);
	retry_policy_merge(&eff, &base, &top, &rule);
	char *d = retry_policy_describe(&eff);
	CHECK_STR(d, "backoff [1s], max_age 1h0m0s, no_retry_exit_codes [2]");
	free(d);
	retry_policy_merge(&eff, &base, &top, NULL);
	d = retry_policy_describe(&eff);
	CHECK_STR(d, "backoff [2s, 4s], max_age 1h0m0s, no_retry_exit_codes [2]");
	free(d);
	/* an empty no_retry list at the rule clears the top level's */
	e = parse("{\"no_retry_exit_codes\": []}", &rule);
	CHECK_STR(e, "");
	free(e);
	retry_policy_merge(&eff, &base, &top, &rule);
	CHECK(!retry_exit_code_permanent(&eff, 2));
	retry_policy_merge(&eff, &base, NULL, NULL);
	d = retry_policy_describe(&eff);
	CHECK_STR(d, "backoff [1m0s, 2m0s, 5m0s, 10m0s]");
	free(d);
	e = parse("{\"backoff\": {\"initial\": \"1s\", \"multiplier\": 1.5, \"jitter\": 0.2}}",
		  &rule);
	CHECK_STR(e, "");
	free(e);
	retry_policy_merge(&eff, &base, NULL, &rule);
	d = retry_policy_describe(&eff);
	CHECK_STR(d, "backoff exponential from 1s x1.5 up to 10m0s jitter 0.2");
	free(d);
}

TEST(validation_errors_name_the_field)
{
	static const struct {
		const char *json, *want;
	} bad[] = {
		{"[]", "retry: must be a map of backoff, max_age and no_retry_exit_codes, not a list"},
		{"{\"backof\": [\"1s\"]}",
		 "retry: unknown key \"backof\" (retry takes backoff, max_age and "
		 "no_retry_exit_codes)"},
		{"{\"backoff\": []}", "retry.backoff: must not be empty (give at least one delay)"},
		{"{\"backoff\": \"1s\"}",
		 "retry.backoff: must be a list of delays such as [2s, 4s] or a map of initial, "
		 "multiplier, max and jitter, not a string"},
		{"{\"backoff\": [\"1s\", \"soon\"]}",
		 "retry.backoff[1]: \"soon\" is not a Go duration (such as 2s or 1m)"},
		{"{\"backoff\": [\"0s\"]}", "retry.backoff[0]: \"0s\" must be positive"},
		{"{\"backoff\": [\"-1s\"]}", "retry.backoff[0]: \"-1s\" must be positive"},
		{"{\"backoff\": [\"25h\"]}", "retry.backoff[0]: \"25h\" exceeds the maximum of 24h"},
		{"{\"backoff\": [5]}",
		 "retry.backoff[0]: must be a Go duration string such as 2s or 1m, not an integer"},
		{"{\"backoff\": {\"multiplier\": 2}}",
		 "retry.backoff.initial: is required (the first delay, e.g. 1s)"},
		{"{\"backoff\": {\"initial\": \"1s\", \"multiplier\": 0.5}}",
		 "retry.backoff.multiplier: 0.5 is below 1"},
		{"{\"backoff\": {\"initial\": \"1s\", \"multiplier\": \"2\"}}",
		 "retry.backoff.multiplier: must be a number, not a string"},
		{"{\"backoff\": {\"initial\": \"1s\", \"jitter\": 1.5}}",
		 "retry.backoff.jitter: 1.5 is outside [0, 1] (a fraction of each delay)"},
		{"{\"backoff\": {\"initial\": \"1s\", \"jitter\": -0.1}}",
		 "retry.backoff.jitter: -0.1 is outside [0, 1] (a fraction of each delay)"},
		{"{\"backoff\": {\"initial\": \"1m\", \"max\": \"1s\"}}",
		 "retry.backoff: initial exceeds max"},
		{"{\"backoff\": {\"initial\": \"1s\", \"step\": 2}}",
		 "retry.backoff: unknown key \"step\" (an exponential backoff takes initial, "
		 "multiplier, max and jitter)"},
		{"{\"max_age\": \"8d\"}", "retry.max_age: \"8d\" is not a Go duration (such as 2s or 1m)"},
		{"{\"max_age\": \"169h\"}",
		 "retry.max_age: \"169h\" exceeds the maximum of 168h (7 days, the life of an "
		 "invocation's state)"},
		{"{\"no_retry_exit_codes\": [0]}",
		 "retry.no_retry_exit_codes[0]: 0 is success, not a failure: codes are 1 to 255"},
		{"{\"no_retry_exit_codes\": [2, 256]}",
		 "retry.no_retry_exit_codes[1]: 256 is not an exit code (1 to 255)"},
		{"{\"no_retry_exit_codes\": [-1]}",
		 "retry.no_retry_exit_codes[0]: -1 is not an exit code (1 to 255)"},
		{"{\"no_retry_exit_codes\": 2}",
		 "retry.no_retry_exit_codes: must be a list of exit codes (1 to 255), not an integer"},
		{"{\"no_retry_exit_codes\": [\"2\"]}",
		 "retry.no_retry_exit_codes[0]: must be an integer exit code (1 to 255), not a "
		 "string"},
	};
	for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
		struct retry_policy p;
		char *e = parse(bad[i].json, &p);
		CHECK_STR(e, bad[i].want);
		free(e);
	}
	/* 33 delays are refused, 32 taken */
	struct buf b;
	buf_init(&b, 4096);
	buf_appendf(&b, "{\"backoff\": [");
	for (int i = 0; i < 33; i++)
		buf_appendf(&b, "%s\"1s\"", i ? ", " : "");
	buf_appendf(&b, "]}");
	struct retry_policy p;
	char *e = parse(b.data, &p);
	CHECK_STR(e, "retry.backoff: 33 delays; at most 32 (the last one repeats)");
	free(e);
	buf_free(&b);
}

T_MAIN(T_CASE(default_schedule), T_CASE(list_backoff_last_repeats),
       T_CASE(exponential_backoff_caps_without_overflow), T_CASE(jitter_stays_within_its_fraction),
       T_CASE(exit_codes_and_max_age), T_CASE(rule_keys_win_key_by_key),
       T_CASE(validation_errors_name_the_field))
