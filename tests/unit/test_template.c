#include <math.h>

#include "t.h"
#include "model/template.h"

#define HDR "runtime: python3.14\n"
#define RULE "events:\n  - handler: m.f\n    pattern: {a: [1]}\n"

/* Each row: template text, and either NULL (valid) or a substring of one of
 * the error lines, which must start with the field path. */
static const struct {
	const char *yaml;
	const char *error;
} rows[] = {
	/* valid */
	{HDR RULE, NULL},
	{"runtime: node24\n" RULE, NULL},
	{HDR "concurrency: 1\n" RULE, NULL},
	{HDR "concurrency: 64\n" RULE, NULL},
	{HDR "events:\n  - handler: a.b.c.d\n    pattern: {}\n", NULL},
	{HDR "events:\n  - handler: m.f\n    pattern: {a: [1]}\n    timeout: 5m\n    retries: 0\n",
	 NULL},
	{HDR "events:\n  - handler: m.f\n    pattern: {a: [1]}\n    timeout: 1m30s\n", NULL},
	{HDR "events:\n  - handler: m.f\n    pattern: {a: [1]}\n    timeout: 300ms\n", NULL},
	{HDR "events:\n  - handler: m.f\n    pattern: {a: [1]}\n    timeout: 4m59.5s\n", NULL},
	{HDR "events:\n  - handler: my-mod.handler\n    pattern: {a: [1]}\n", NULL},
	{HDR "schedules:\n  - handler: jobs.cleanup.handler\n    cron: \"0 3 * * *\"\n", NULL},
	{HDR "schedules:\n  - handler: j.h\n    cron: \"*/10 * * * * *\"\n    timezone: "
	     "Europe/Rome\n    timeout: 20s\n    retries: 2\n",
	 NULL},
	{HDR RULE "env:\n  API_URL: https://api.example.com\n  EMPTY: \"\"\n  FLAG:\n  PORT: "
		  "8080\n  _x1: true\n",
	 NULL},
	{HDR RULE "secrets:\n  DATABASE_URL: database-url\n  K: a.b_c-1\n", NULL},
	{HDR RULE "secrets:\n  A: 0abc\n  B: abc\n  C: \"0\"\n  D: a_\n  E: a-\n", NULL},
	{HDR RULE "env: {}\nsecrets: {}\n", NULL},
	{HDR RULE "events_extra: 1\n", NULL}, /* unknown key: warning only */
	{"runtime: !!str python3.14\n" RULE, NULL},
	{"runtime: 'python3.14'\n" RULE, NULL},
	{HDR "concurrency: !!int \"3\"\n" RULE, NULL},

	/* runtime */
	{RULE, "runtime: is required"},
	{"runtime:\n" RULE, "runtime: is required"},
	{"runtime: python3.12\n" RULE,
	 "runtime: unsupported runtime \"python3.12\" (supported: python3.14, node24)"},
	{"runtime: Python3.14\n" RULE, "runtime: unsupported runtime"},
	{"runtime: 3.14\n" RULE, "runtime: must be one of python3.14, node24, not a number"},
	{"runtime: [python3.14]\n" RULE, "runtime: must be one of"},

	/* concurrency */
	{HDR "concurrency: 0\n" RULE, "concurrency: 0 is not positive"},
	{HDR "concurrency: -1\n" RULE, "concurrency: -1 is not positive"},
	{HDR "concurrency: 1.5\n" RULE, "concurrency: must be a positive integer, not \"1.5\""},
	{HDR "concurrency: true\n" RULE,
	 "concurrency: must be a positive integer, not \"true\" (a boolean)"},
	{HDR "concurrency: \"2\"\n" RULE,
	 "concurrency: must be a positive integer, not \"2\" (a string)"},
	{HDR "concurrency: '2'\n" RULE, "concurrency: must be a positive integer"},
	{HDR "concurrency:\n" RULE, "concurrency: must be a positive integer"},
	{HDR "concurrency: [2]\n" RULE, "concurrency: must be a positive integer, not a list"},
	{HDR "concurrency: 2.0\n" RULE, "concurrency: must be a positive integer"},
	{HDR "concurrency: 1e2\n" RULE, "concurrency: must be a positive integer"},

	/* match_arrays */
	{HDR "match_arrays: values\n" RULE, NULL},
	{HDR "match_arrays: elements\n" RULE, NULL},
	{HDR "match_arrays: element\n" RULE,
	 "match_arrays: must be values or elements, not \"element\""},
	{HDR "match_arrays: Elements\n" RULE,
	 "match_arrays: must be values or elements, not \"Elements\""},
	{HDR "match_arrays: true\n" RULE,
	 "match_arrays: must be values or elements, not a boolean"},
	{HDR "match_arrays:\n" RULE, "match_arrays: must be values or elements, not null"},
	{HDR "match_arrays: [elements]\n" RULE,
	 "match_arrays: must be values or elements, not a list"},
	/* the new operators' errors reach the template's messages with their rule */
	{HDR "events:\n  - handler: m.f\n    pattern: {a: [1]}\n  - handler: m.g\n    pattern:\n"
	     "      ip: {cidr: 10.0.0.0/33}\n",
	 "events[1].pattern.ip.cidr: \"10.0.0.0/33\" has a prefix length that is not a number from "
	 "0 to 32"},
	{HDR "events:\n  - handler: m.f\n    pattern:\n      $or:\n        - {a: [1]}\n",
	 "events[0].pattern.$or: needs at least 2 branches, got 1"},
	{HDR "events:\n  - handler: m.f\n    pattern:\n      f: {wildcard: \"a**\"}\n",
	 "events[0].pattern.f.wildcard: \"a**\" has two stars in a row at byte 1"},
	{HDR "events:\n  - handler: m.f\n    pattern:\n      n: {numeric: [\">\", 0, \"<=\", 5]}\n"
	     "      s: {anything-but: {prefix: us-}}\n      e: {equals-ignore-case: [Alice]}\n",
	 NULL},

	/* warm */
	{HDR "warm: {}\n" RULE, NULL},
	{HDR "retry:\n  backoff: [2s, 4s]\n  max_age: 1h\n  no_retry_exit_codes: [2]\n" RULE, NULL},
	{HDR "retry: {backoff: {initial: 1s, multiplier: 2, max: 10m, jitter: 0.1}}\n" RULE, NULL},
	{HDR "events:\n  - handler: m.f\n    pattern: {}\n    retry: {backoff: [1s]}\n", NULL},
	{HDR "retry: {backoff: []}\n" RULE,
	 "retry.backoff: must not be empty (give at least one delay)"},
	{HDR "retry: {backoff: {initial: 1s, multiplier: 0.5}}\n" RULE,
	 "retry.backoff.multiplier: 0.5 is below 1"},
	{HDR "retry: {backoff: {initial: 1s, jitter: 2}}\n" RULE,
	 "retry.backoff.jitter: 2 is outside [0, 1] (a fraction of each delay)"},
	{HDR "retry: {no_retry_exit_codes: [0]}\n" RULE,
	 "retry.no_retry_exit_codes[0]: 0 is success, not a failure: codes are 1 to 255"},
	{HDR "retry: {no_retry_exit_codes: [256]}\n" RULE,
	 "retry.no_retry_exit_codes[0]: 256 is not an exit code (1 to 255)"},
	{HDR "retry: {max_age: soon}\n" RULE,
	 "retry.max_age: \"soon\" is not a Go duration (such as 2s or 1m)"},
	{HDR "retry: []\n" RULE,
	 "retry: must be a map of backoff, max_age and no_retry_exit_codes, not a list"},
	{HDR "events:\n  - handler: m.f\n    pattern: {}\n    retry: {backoff: [0s]}\n",
	 "events[0].retry.backoff[0]: \"0s\" must be positive"},
	{HDR "schedules:\n  - handler: m.f\n    cron: \"* * * * *\"\n    retry: {max_age: 0s}\n",
	 "schedules[0].retry.max_age: \"0s\" must be positive"},
	{HDR "warm:\n  idle: 1s\n  max_uses: 1\n" RULE, NULL},
	{HDR "warm:\n  idle: 1h\n  max_uses: 100000\n" RULE, NULL},
	{HDR "warm: {idle: 90s}\n" RULE, NULL},
	{HDR "warm: {max_uses: 2}\n" RULE, NULL},
	{HDR "warm: {idle: 999ms}\n" RULE, "warm.idle: \"999ms\" is below the minimum of 1s"},
	{HDR "warm: {idle: 0s}\n" RULE, "warm.idle: \"0s\" is below the minimum of 1s"},
	{HDR "warm: {idle: -5s}\n" RULE, "warm.idle: \"-5s\" is below the minimum of 1s"},
	{HDR "warm: {idle: 1h0m1s}\n" RULE, "warm.idle: \"1h0m1s\" exceeds the maximum of 1h"},
	{HDR "warm: {idle: 60}\n" RULE,
	 "warm.idle: must be a Go duration string such as 60s or 5m, not an integer"},
	{HDR "warm: {idle: soon}\n" RULE, "warm.idle: \"soon\" is not a Go duration"},
	{HDR "warm: {idle: [1s]}\n" RULE, "warm.idle: must be a Go duration string"},
	{HDR "warm: {max_uses: 0}\n" RULE, "warm.max_uses: 0 is not positive"},
	{HDR "warm: {max_uses: -3}\n" RULE, "warm.max_uses: -3 is not positive"},
	{HDR "warm: {max_uses: 100001}\n" RULE,
	 "warm.max_uses: 100001 exceeds the maximum of 100000"},
	{HDR "warm: {max_uses: 2.5}\n" RULE,
	 "warm.max_uses: must be an integer from 1 to 100000, not \"2.5\""},
	{HDR "warm: {max_uses: \"5\"}\n" RULE,
	 "warm.max_uses: must be an integer from 1 to 100000, not \"5\" (a string)"},
	{HDR "warm: {max_uses: true}\n" RULE,
	 "warm.max_uses: must be an integer from 1 to 100000, not \"true\" (a boolean)"},
	{HDR "warm: {idel: 5s}\n" RULE,
	 "warm: unknown key \"idel\" (warm takes idle and max_uses)"},
	{HDR "warm: true\n" RULE,
	 "warm: must be a map of idle and max_uses (warm: {} for the defaults), not a boolean"},
	{HDR "warm:\n" RULE, "warm: must be a map of idle and max_uses"},
	{HDR "warm: [idle]\n" RULE,
	 "warm: must be a map of idle and max_uses (warm: {} for the defaults), not a list"},
	{HDR "warm: 60s\n" RULE, "warm: must be a map of idle and max_uses"},

	/* events and schedules presence */
	{HDR, "events: a function needs at least one event rule or schedule"},
	{HDR "events: []\n", "events: a function needs at least one event rule or schedule"},
	{HDR "events:\n", "events: a function needs at least one event rule or schedule"},
	{HDR "events: {handler: m.f}\n", "events: must be a list of rules, not a map"},
	{HDR "events: [5]\n", "events[0]: must be a map with handler and pattern"},
	{HDR "schedules: x\n", "schedules: must be a list of schedules, not a string"},

	/* handler */
	{HDR "events:\n  - pattern: {a: [1]}\n", "events[0].handler: is required"},
	{HDR "events:\n  - handler:\n    pattern: {a: [1]}\n", "events[0].handler: is required"},
	{HDR "events:\n  - handler: handler\n    pattern: {a: [1]}\n",
	 "events[0].handler: \"handler\" is not of the form module.function"},
	{HDR "events:\n  - handler: .f\n    pattern: {a: [1]}\n",
	 "events[0].handler: \".f\" is not of the form"},
	{HDR "events:\n  - handler: m.\n    pattern: {a: [1]}\n",
	 "events[0].handler: \"m.\" is not of the form"},
	{HDR "events:\n  - handler: a b.f\n    pattern: {a: [1]}\n",
	 "events[0].handler: \"a b.f\" is not of the form"},
	{HDR "events:\n  - handler: 12\n    pattern: {a: [1]}\n",
	 "events[0].handler: must be a string of the form module.function, not an integer"},
	{HDR RULE "  - handler: x\n    pattern: {a: [1]}\n",
	 "events[1].handler: \"x\" is not of the form"},

	/* pattern */
	{HDR "events:\n  - handler: m.f\n", "events[0].pattern: is required"},
	{HDR "events:\n  - handler: m.f\n    pattern:\n", "events[0].pattern: is required"},
	{HDR "events:\n  - handler: m.f\n    pattern: null\n", "events[0].pattern: is required"},
	{HDR "events:\n  - handler: m.f\n    pattern: {a: {exists: \"true\"}}\n",
	 "events[0].pattern.a.exists"},
	{HDR "events:\n  - handler: m.f\n    pattern: {a: {gt: now-5m}}\n",
	 "events[0].pattern.a.gt"},
	{HDR "events:\n  - handler: m.f\n    pattern: {a: {gt: \"2026-09-12T10:00:00Z\"}}\n",
	 "events[0].pattern.a.gt"},
	{HDR "events:\n  - handler: m.f\n    pattern: {a: {prefix: [x], b: [1]}}\n",
	 "events[0].pattern.a"},
	{HDR "events:\n  - handler: m.f\n    pattern: {a: {gt: .inf}}\n",
	 "events[0].pattern.a.gt: \".inf\" is not a finite number"},

	/* timeout */
	{HDR "events:\n  - handler: m.f\n    pattern: {a: [1]}\n    timeout: 6m\n",
	 "events[0].timeout: 6m exceeds the maximum of 5m"},
	{HDR "events:\n  - handler: m.f\n    pattern: {a: [1]}\n    timeout: 5m1s\n",
	 "events[0].timeout: 5m1s exceeds the maximum of 5m"},
	{HDR "events:\n  - handler: m.f\n    pattern: {a: [1]}\n    timeout: 0s\n",
	 "events[0].timeout: \"0s\" must be positive"},
	{HDR "events:\n  - handler: m.f\n    pattern: {a: [1]}\n    timeout: -1s\n",
	 "events[0].timeout: \"-1s\" must be positive"},
	{HDR "events:\n  - handler: m.f\n    pattern: {a: [1]}\n    timeout: 0\n",
	 "events[0].timeout: must be a Go duration string such as 6s or 1m30s, not an integer"},
	{HDR "events:\n  - handler: m.f\n    pattern: {a: [1]}\n    timeout: 10\n",
	 "events[0].timeout: must be a Go duration string"},
	{HDR "events:\n  - handler: m.f\n    pattern: {a: [1]}\n    timeout: 1d\n",
	 "events[0].timeout: \"1d\" is not a Go duration"},
	{HDR "events:\n  - handler: m.f\n    pattern: {a: [1]}\n    timeout: soon\n",
	 "events[0].timeout: \"soon\" is not a Go duration"},
	{HDR "events:\n  - handler: m.f\n    pattern: {a: [1]}\n    timeout:\n",
	 "events[0].timeout: must be a Go duration string"},

	/* retries */
	{HDR "events:\n  - handler: m.f\n    pattern: {a: [1]}\n    retries: -1\n",
	 "events[0].retries: -1 is negative"},
	{HDR "events:\n  - handler: m.f\n    pattern: {a: [1]}\n    retries: abc\n",
	 "events[0].retries: must be a non-negative integer, not \"abc\""},
	{HDR "events:\n  - handler: m.f\n    pattern: {a: [1]}\n    retries: 1.5\n",
	 "events[0].retries: must be a non-negative integer, not \"1.5\""},
	{HDR "events:\n  - handler: m.f\n    pattern: {a: [1]}\n    retries: true\n",
	 "events[0].retries: must be a non-negative integer"},
	{HDR "events:\n  - handler: m.f\n    pattern: {a: [1]}\n    retries: \"3\"\n",
	 "events[0].retries: must be a non-negative integer"},

	/* schedules */
	{HDR "schedules:\n  - handler: j.h\n", "schedules[0]: cron is required"},
	{HDR "schedules:\n  - cron: \"* * * * *\"\n", "schedules[0].handler: is required"},
	{HDR "schedules:\n  - handler: j.h\n    cron: \"61 * * * *\"\n", "schedules[0].cron: "},
	{HDR "schedules:\n  - handler: j.h\n    cron: \"* * * *\"\n", "schedules[0].cron: "},
	{HDR "schedules:\n  - handler: j.h\n    cron: \"0 0 30 2 *\"\n", "schedules[0].cron: "},
	{HDR "schedules:\n  - handler: j.h\n    cron: \"TZ=UTC 0 3 * * *\"\n",
	 "schedules[0].cron: "},
	{HDR "schedules:\n  - handler: j.h\n    cron: 5\n", "schedules[0].cron: must be a string"},
	{HDR "schedules:\n  - handler: j.h\n    cron: \"0 3 * * *\"\n    timezone: Mars/Olympus\n",
	 "schedules[0].timezone: "},
	{HDR "schedules:\n  - handler: j.h\n    cron: \"0 3 * * *\"\n    timezone: Local\n",
	 "schedules[0].timezone: "},
	{HDR
	 "schedules:\n  - handler: j.h\n    cron: \"0 3 * * *\"\n    timezone: ../../etc/passwd\n",
	 "schedules[0].timezone: "},
	{HDR "schedules:\n  - handler: j.h\n    cron: \"0 3 * * *\"\n    timezone: 5\n",
	 "schedules[0].timezone: must be an IANA time zone name"},
	{HDR "schedules:\n  - handler: j.h\n    cron: \"0 3 * * *\"\n    timeout: 10m\n",
	 "schedules[0].timeout: 10m exceeds the maximum of 5m"},
	{HDR "schedules:\n  - handler: j.h\n    cron: \"0 3 * * *\"\n    retries: -2\n",
	 "schedules[0].retries: -2 is negative"},

	/* env and secrets */
	{HDR RULE "env:\n  1BAD: x\n", "env: \"1BAD\" is not a valid variable name"},
	{HDR RULE "env:\n  BAD-NAME: x\n", "env: \"BAD-NAME\" is not a valid variable name"},
	{HDR RULE "env:\n  RELAY_HANDLER: x\n",
	 "env.RELAY_HANDLER: RELAY_HANDLER is reserved by Relay"},
	{HDR RULE "env:\n  A: [1]\n", "env.A: must be a scalar, not a list"},
	{HDR RULE "env:\n  A: {b: 1}\n", "env.A: must be a scalar, not a map"},
	{HDR RULE "env: [A]\n", "env: must be a map of NAME: value, not a list"},
	{HDR RULE "secrets:\n  RELAY_HANDLER: x\n",
	 "secrets.RELAY_HANDLER: RELAY_HANDLER is reserved"},
	{HDR RULE "secrets:\n  DB: Database-URL\n",
	 "secrets.DB: \"Database-URL\" is not a valid secret name"},
	{HDR RULE "secrets:\n  DB: .hidden\n",
	 "secrets.DB: \".hidden\" is not a valid secret name"},
	{HDR RULE "secrets:\n  DB: trailing.\n",
	 "secrets.DB: \"trailing.\" is not a valid secret name"},
	{HDR RULE "secrets:\n  DB: \"\"\n", "secrets.DB: \"\" is not a valid secret name"},
	{HDR RULE
	 "secrets:\n  DB: 1234567890123456789012345678901234567890123456789012345678901234\n",
	 "secrets.DB: "},
	{HDR RULE "secrets:\n  DB: a/b\n", "secrets.DB: \"a/b\" is not a valid secret name"},
	{HDR RULE "secrets:\n  DB: _lead\n",
	 "secrets.DB: \"_lead\" is not a valid secret name: "
	 "a secret name starts with a lowercase letter or a digit"},
	{HDR RULE "secrets:\n  DB: -lead\n", "secrets.DB: \"-lead\" is not a valid secret name"},
	{HDR RULE "secrets:\n  DB: 5\n",
	 "secrets.DB: \"5\" is not a valid secret name: it is an integer, not a string (quote it)"},
	{HDR RULE "env:\n  DB: x\nsecrets:\n  DB: db\n",
	 "secrets.DB: DB is defined in both env and secrets"},

	/* document level */
	{"", "template.yaml: empty"},
	{"# only a comment\n", "template.yaml: empty"},
	{"- a\n- b\n", "template.yaml: must be a map"},
	{"just a string\n", "template.yaml: must be a map"},
	{HDR "runtime: node24\n" RULE, "invalid YAML at line 2"},
	{HDR "events: [\n", "invalid YAML"},
	{HDR "\tevents: x\n", "invalid YAML"},
	{HDR "concurrency: !!int abc\n" RULE, "concurrency: must be a positive integer"},
	{"%\xc3", "template.yaml: not valid UTF-8 (at byte 1)"},
	{HDR "env:\n  A: \xed\xa0\x80\n" RULE, "template.yaml: not valid UTF-8 (at byte 30)"},
	{"%YAML 1.2\n---\n" HDR RULE, NULL},
	{HDR "x: &a 1\nevents:\n  - handler: m.f\n    pattern: {a: [*a]}\n", NULL},
	{HDR "events:\n  - handler: m.f\n    pattern: {a: [*a]}\n",
	 "invalid YAML at line 4, column 20: alias *a has no anchor before it"},
	{HDR "events:\n  - handler: m.f\n    pattern: &p {a: *p}\n",
	 "invalid YAML at line 4, column 22: alias *p is inside the node its anchor names"},
};

TEST(table)
{
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		struct strlist errors = {0}, warnings = {0};
		struct template *t = NULL;
		int rc = template_parse(rows[i].yaml, strlen(rows[i].yaml), &t, &errors, &warnings);
		if (!rows[i].error) {
			if (rc != 0 || !t || errors.n)
				T_FAIL_("row %zu should be valid; first error: %s\n%s", i,
					errors.n ? errors.v[0] : "(none)", rows[i].yaml);
		} else {
			bool found = false;
			for (size_t k = 0; k < errors.n; k++)
				if (strstr(errors.v[k], rows[i].error) == errors.v[k] ||
				    (strstr(errors.v[k], rows[i].error) && rows[i].error[0] == ' '))
					found = true;
			if (rc == 0 || t || !found) {
				T_FAIL_("row %zu: want an error starting \"%s\"; rc=%d, errors:", i,
					rows[i].error, rc);
				for (size_t k = 0; k < errors.n; k++)
					printf("      %s\n", errors.v[k]);
			}
		}
		template_free(t);
		strlist_free(&errors);
		strlist_free(&warnings);
	}
}

TEST(defaults_and_values)
{
	const char *y = HDR "events:\n"
			    "  - handler: events.created.handler\n"
			    "    pattern: {event_name: [INSERT]}\n"
			    "  - handler: h.g\n"
			    "    pattern: {}\n"
			    "    timeout: 20s\n"
			    "    retries: 0\n"
			    "schedules:\n"
			    "  - handler: jobs.report.handler\n"
			    "    cron: \"0 8 * * 1-5\"\n"
			    "    timezone: Europe/Rome\n"
			    "env:\n  PORT: 8080\n  FLAG:\n  ON: true\n  S: 'x y'\n"
			    "secrets:\n  DATABASE_URL: database-url\n";
	struct strlist errors = {0}, warnings = {0};
	struct template *t = NULL;
	REQUIRE(template_parse(y, strlen(y), &t, &errors, &warnings) == 0);
	CHECK_STR(t->runtime->name, "python3.14");
	CHECK_INT(t->concurrency, 2);
	REQUIRE(t->nrules == 2);
	CHECK_STR(t->rules[0].handler, "events.created.handler");
	CHECK_STR(t->rules[0].module, "events.created");
	CHECK_STR(t->rules[0].function, "handler");
	CHECK_INT(t->rules[0].timeout_ns, 6000000000LL);
	CHECK_INT(t->rules[0].retries, 4);
	CHECK_INT(t->rules[1].timeout_ns, 20000000000LL);
	CHECK_INT(t->rules[1].retries, 0);
	REQUIRE(t->nschedules == 1);
	CHECK_STR(t->schedules[0].cron_expr, "0 8 * * 1-5");
	CHECK_STR(t->schedules[0].timezone, "Europe/Rome");
	CHECK_INT(t->schedules[0].timeout_ns, 6000000000LL);
	REQUIRE(t->nenv == 4);
	CHECK_STR(t->env[0].name, "PORT");
	CHECK_STR(t->env[0].value, "8080");
	CHECK_STR(t->env[1].value, "");
	CHECK_STR(t->env[2].value, "true");
	CHECK_STR(t->env[3].value, "x y");
	REQUIRE(t->nsecrets == 1);
	CHECK_STR(t->secrets[0].value, "database-url");
	CHECK_INT(warnings.n, 0);
	template_free(t);
	strlist_free(&errors);
	strlist_free(&warnings);
}

TEST(unknown_keys_are_warnings_with_paths)
{
	const char *y = HDR "evnts: []\n"
			    "events:\n  - handler: m.f\n    patern: {a: [1]}\n    pattern: {}\n"
			    "schedules:\n  - handler: j.h\n    cron: \"* * * * *\"\n    tz: UTC\n";
	struct strlist errors = {0}, warnings = {0};
	struct template *t = NULL;
	REQUIRE(template_parse(y, strlen(y), &t, &errors, &warnings) == 0);
	REQUIRE(warnings.n == 3);
	CHECK_STR(warnings.v[0], "\"evnts\": unknown key, ignored");
	CHECK_STR(warnings.v[1], "events[0].\"patern\": unknown key, ignored");
	CHECK_STR(warnings.v[2], "schedules[0].\"tz\": unknown key, ignored");
	template_free(t);
	strlist_free(&errors);
	strlist_free(&warnings);
}

TEST(every_error_is_reported)
{
	const char *y = "runtime: ruby\nconcurrency: 0\n"
			"events:\n  - handler: x\n    pattern: {a: [1]}\n    timeout: 6m\n    "
			"retries: -1\n";
	struct strlist errors = {0}, warnings = {0};
	struct template *t = NULL;
	CHECK(template_parse(y, strlen(y), &t, &errors, &warnings) < 0);
	CHECK_INT(errors.n, 5);
	strlist_free(&errors);
	strlist_free(&warnings);
}

TEST(duplicate_keys_rejected)
{
	const char *y = HDR "concurrency: 1\nconcurrency: 2\n" RULE;
	struct strlist errors = {0}, warnings = {0};
	struct template *t = NULL;
	CHECK(template_parse(y, strlen(y), &t, &errors, &warnings) < 0);
	REQUIRE(errors.n == 1);
	CHECK(strstr(errors.v[0], "invalid YAML at line 3") != NULL);
	CHECK(strstr(errors.v[0], "duplicate key") != NULL);
	strlist_free(&errors);
	strlist_free(&warnings);
}

TEST(alias_bomb_is_bounded)
{
	const char *y = HDR
		"events:\n  - handler: m.f\n    pattern:\n"
		"      a: &a [1,1,1,1,1,1,1,1,1,1]\n"
		"      b: &b {x: *a, y: *a, z: *a, w: *a, v: *a, u: *a, t: *a, s: *a, r: *a, q: "
		"*a}\n"
		"      c: &c {x: *b, y: *b, z: *b, w: *b, v: *b, u: *b, t: *b, s: *b, r: *b, q: "
		"*b}\n"
		"      d: &d {x: *c, y: *c, z: *c, w: *c, v: *c, u: *c, t: *c, s: *c, r: *c, q: "
		"*c}\n"
		"      e: &e {x: *d, y: *d, z: *d, w: *d, v: *d, u: *d, t: *d, s: *d, r: *d, q: "
		"*d}\n"
		"      f: {x: *e, y: *e, z: *e, w: *e, v: *e, u: *e, t: *e, s: *e, r: *e, q: *e}\n";
	struct strlist errors = {0}, warnings = {0};
	struct template *t = NULL;
	CHECK(template_parse(y, strlen(y), &t, &errors, &warnings) < 0);
	REQUIRE(errors.n == 1);
	CHECK(strstr(errors.v[0], "template.yaml: more than 100000 YAML nodes with aliases "
				  "expanded (at line 9,") == errors.v[0]);
	strlist_free(&errors);
	strlist_free(&warnings);
}

/* A rule whose pattern is a 91,024-node anchor (made of aliases itself),
 * then more rules aliasing all of it: 1,000 rules are 32 KB of YAML that
 * stood for 91 million nodes, taking gigabytes and hours when the bound was
 * per rule. The bound is on the whole file now: the read stops at the
 * second rule, the first reference past TEMPLATE_MAX_NODES, before
 * anything is built for it. */
static char *many_rules_one_anchor(int rules)
{
	struct buf b;
	buf_init(&b, 1 << 20);
	buf_appendf(&b, HDR "events:\n"
			    "- handler: m.f\n"
			    "  pattern: &big\n"
			    "    a: &l [1,1,1,1,1,1,1,1,1]\n");
	const char *names[] = {"l", "m", "n", "o"};
	for (int lv = 1; lv < 4; lv++) {
		buf_appendf(&b, "    %c: &%s {", 'a' + lv, names[lv]);
		for (int k = 0; k < 10; k++)
			buf_appendf(&b, "%sk%d: *%s", k ? ", " : "", k, names[lv - 1]);
		buf_appendf(&b, "}\n");
	}
	buf_appendf(&b, "    e: {k0: *o, k1: *o, k2: *o, k3: *o, k4: *o, k5: *o, k6: *o}\n");
	for (int i = 1; i < rules; i++)
		buf_appendf(&b, "- {handler: m.f, pattern: *big}\n");
	return buf_steal(&b);
}

TEST(aliases_in_many_rules_count_against_one_bound)
{
	char *y = many_rules_one_anchor(1000);
	CHECK(strlen(y) > 32000 && strlen(y) < 33000);
	struct strlist errors = {0}, warnings = {0};
	struct template *t = NULL;
	CHECK(template_parse(y, strlen(y), &t, &errors, &warnings) < 0);
	REQUIRE(errors.n == 1);
	/* Line 10 holds the second rule. */
	CHECK(strstr(errors.v[0], "template.yaml: more than 100000 YAML nodes with aliases "
				  "expanded (at line 10,") == errors.v[0]);
	strlist_free(&errors);
	strlist_free(&warnings);
	free(y);

	/* One rule of it fits, and compiles. */
	y = many_rules_one_anchor(1);
	CHECK(template_parse(y, strlen(y), &t, &errors, &warnings) == 0);
	REQUIRE(t && t->nrules == 1 && t->rules[0].pattern);
	template_free(t);
	strlist_free(&errors);
	strlist_free(&warnings);
	free(y);
}

/* One 600,000-byte block scalar under an anchor, then `uses` aliases of
 * it in the rule's pattern (in = "pattern") or as env values (in = "env").
 * 1,000 of them are 611 KB of YAML and 2,000 nodes, within the byte and
 * node bounds, yet 600 MB of text once expanded: gigabytes when every copy
 * was built (jansson's string, then the compiled operand). */
static char *big_text_aliased(const char *in, int uses)
{
	struct buf b;
	buf_init(&b, 2 << 20);
	buf_appendf(&b, HDR "x-big: &big |\n");
	char *line = xmalloc(60001);
	memset(line, 'x', 60000);
	line[60000] = '\0';
	for (int i = 0; i < 10; i++)
		buf_appendf(&b, "  %s\n", line);
	free(line);
	if (strcmp(in, "env") == 0) {
		buf_appendf(&b, RULE "env:\n");
		for (int i = 0; i < uses; i++)
			buf_appendf(&b, "  V%d: *big\n", i);
	} else {
		buf_appendf(&b, "events:\n- handler: m.f\n  pattern:\n    a:\n");
		for (int i = 0; i < uses; i++)
			buf_appendf(&b, "    - *big\n");
	}
	return buf_steal(&b);
}

TEST(alias_amplified_text_is_bounded)
{
	static const struct {
		const char *in;
		int uses;
		int line; /* of the alias past the bound; 0: valid */
	} cases[] = {
		{"pattern", 1000, 22}, /* 600,010 bytes each: the 6th alias crosses 4 MiB */
		{"pattern", 10, 22},   {"env", 10, 22}, {"env", 1000, 22},
		{"pattern", 5, 0},     {"env", 5, 0},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		char *y = big_text_aliased(cases[i].in, cases[i].uses);
		REQUIRE(strlen(y) < TEMPLATE_MAX_BYTES);
		struct strlist errors = {0}, warnings = {0};
		struct template *t = NULL;
		int rc = template_parse(y, strlen(y), &t, &errors, &warnings);
		if (!cases[i].line) {
			if (rc != 0 || !t)
				T_FAIL_("%s x%d refused: %s", cases[i].in, cases[i].uses,
					errors.n ? errors.v[0] : "");
			else if (strcmp(cases[i].in, "env") == 0)
				CHECK(t->nenv == 5 && strlen(t->env[4].value) == 600010);
			else
				CHECK(t->nrules == 1 && t->rules[0].pattern);
		} else {
			char *want =
				xasprintf("template.yaml: more than 4194304 bytes of text with "
					  "aliases expanded (at line %d, column ",
					  cases[i].line);
			if (rc == 0 || t || errors.n != 1 ||
			    strncmp(errors.v[0], want, strlen(want)))
				T_FAIL_("%s x%d: rc %d, %zu errors: %s", cases[i].in, cases[i].uses,
					rc, errors.n, errors.n ? errors.v[0] : "(none)");
			free(want);
		}
		template_free(t);
		strlist_free(&errors);
		strlist_free(&warnings);
		free(y);
	}
}

/* jansson's allocator, failing from allocation number fail_from on. */
static long allocs, fail_from;
static void *failing_malloc(size_t n)
{
	return allocs++ >= fail_from ? NULL : malloc(n);
}

/*
 * An allocation that fails while a pattern is built is an error for that
 * rule, never a rule without a pattern (which the matcher would follow):
 * every allocation of the conversion fails once, in turn.
 */
TEST(allocation_failure_is_an_error)
{
	const char *y = HDR "events:\n  - handler: m.f\n    pattern: {a: [x, 1, 2.5], "
			    "b: {c: {prefix: [p]}, d: [true]}, e: {exists: true}}\n"
			    "  - handler: m.g\n    pattern: {z: [\"long enough to be copied\"]}\n";
	long total = -1;
	for (fail_from = 0; fail_from < 10000 && total < 0; fail_from++) {
		allocs = 0;
		json_set_alloc_funcs(failing_malloc, free);
		struct strlist errors = {0}, warnings = {0};
		struct template *t = NULL;
		int rc = template_parse(y, strlen(y), &t, &errors, &warnings);
		json_set_alloc_funcs(malloc, free);
		if (rc == 0) {
			REQUIRE(t && t->nrules == 2);
			if (!t->rules[0].pattern || !t->rules[1].pattern)
				T_FAIL_("failing allocation %ld: valid, with a rule without a "
					"pattern",
					fail_from);
			if (allocs <= fail_from)
				total = allocs; /* nothing failed: every one was tried */
		} else if (errors.n < 1 || !strstr(errors.v[0], "out of memory")) {
			T_FAIL_("failing allocation %ld: %s", fail_from,
				errors.n ? errors.v[0] : "no error");
		}
		template_free(t);
		strlist_free(&errors);
		strlist_free(&warnings);
	}
	CHECK(total > 10);
}

/* The worst a valid template can ask of pattern_set_new: every leaf a
 * required equality at its own path, as many as TEMPLATE_MAX_NODES allows
 * (aliases make that 600 bytes of YAML): 10 + 100 + 1,000 + 10,000 leaves
 * under v..v3, 10,000 more under each extra key aliasing v3. Building the
 * set was a linear search over the paths for every path (7 s for 11,000 of
 * them) and one reallocation per element; now it sorts: O(m log m). */
static char *many_paths(int extra)
{
	const int levels = 4;
	struct buf b;
	buf_init(&b, 1 << 16);
	buf_appendf(&b, HDR "events:\n- handler: m.f\n  pattern:\n"
			    "    v: &a0 {k0: [0], k1: [1], k2: [2], k3: [3], k4: [4], k5: [5], k6: "
			    "[6], k7: [7], k8: [8], k9: [9]}\n");
	for (int lv = 1; lv < levels; lv++) {
		buf_appendf(&b, "    v%d: &a%d {", lv, lv);
		for (int k = 0; k < 10; k++)
			buf_appendf(&b, "%sk%d: *a%d", k ? ", " : "", k, lv - 1);
		buf_appendf(&b, "}\n");
	}
	for (int x = 0; x < extra; x++)
		buf_appendf(&b, "    w%d: *a%d\n", x, levels - 1);
	/* More rules over the same paths and values, so entries are shared. */
	for (int r = 0; r < 50; r++)
		buf_appendf(&b, "- {handler: m.g, pattern: {v: {k%d: [%d, 1.0, \"x\"]}}}\n", r % 10,
			    r);
	return buf_steal(&b);
}

TEST(worst_valid_template_compiles_in_n_log_n)
{
	char *y = many_paths(1);
	struct strlist errors = {0}, warnings = {0};
	struct template *t = NULL;
	int rc = template_parse(y, strlen(y), &t, &errors, &warnings);
	if (rc != 0)
		T_FAIL_("rejected: %s", errors.n ? errors.v[0] : "?");
	REQUIRE(rc == 0 && t);
	CHECK(t->nrules == 51);
	const struct pattern **pats = xcalloc(t->nrules, sizeof *pats);
	for (size_t i = 0; i < t->nrules; i++)
		pats[i] = t->rules[i].pattern;
	struct pattern_set *set = pattern_set_new(pats, t->nrules);
	/* 21,110 leaves in the first rule and 150 values in the others. */
	double m = 21110 + 150;
	uint64_t bound = (uint64_t)(8 * m * log2(m));
	if (pattern_set_build_work(set) > bound)
		T_FAIL_("pattern_set_new: %llu comparisons and allocations for %.0f values; "
			"bound %llu",
			(unsigned long long)pattern_set_build_work(set), m,
			(unsigned long long)bound);
	CHECK_INT(pattern_set_unindexed(set), 0);
	pattern_set_free(set);
	free(pats);
	template_free(t);
	strlist_free(&errors);
	strlist_free(&warnings);
	free(y);

	/* One more alias of v3 is past TEMPLATE_MAX_NODES. */
	y = many_paths(2);
	CHECK(template_parse(y, strlen(y), &t, &errors, &warnings) < 0);
	CHECK(errors.n == 1 && strstr(errors.v[0], "more than 100000 YAML nodes"));
	strlist_free(&errors);
	strlist_free(&warnings);
	free(y);
}

TEST(long_lines_and_deep_nesting_refused)
{
	struct buf b;
	buf_init(&b, 1 << 20);
	buf_appendf(&b, HDR RULE "env:\n  A: \"");
	for (int i = 0; i < TEMPLATE_MAX_LINE; i++)
		buf_append(&b, "x", 1);
	buf_appendf(&b, "\"\n");
	struct strlist errors = {0}, warnings = {0};
	struct template *t = NULL;
	CHECK(template_parse(b.data, b.len, &t, &errors, &warnings) < 0);
	CHECK(errors.n == 1 &&
	      strstr(errors.v[0], "template.yaml: line 6 is longer than 65536 bytes") ==
		      errors.v[0]);
	strlist_free(&errors);
	buf_reset(&b);
	buf_appendf(&b, HDR "x: ");
	for (int i = 0; i < TEMPLATE_MAX_DEPTH; i++)
		buf_append(&b, "[", 1);
	for (int i = 0; i < TEMPLATE_MAX_DEPTH; i++)
		buf_append(&b, "]", 1);
	buf_appendf(&b, "\n" RULE);
	CHECK(template_parse(b.data, b.len, &t, &errors, &warnings) < 0);
	CHECK(errors.n == 1 && strstr(errors.v[0], "template.yaml: nested deeper than 64 levels "
						   "with aliases expanded (at line 2, column 67)"));
	strlist_free(&errors);
	strlist_free(&warnings);
	buf_free(&b);
}

/* Messages are bounded too: 30,000 bad operands at the bottom of a deep
 * path of long keys were 30,000 formatted paths (2 s), and 30,000 unknown
 * keys 30,000 warnings. At most PATTERN_MAX_MESSAGES per pattern and
 * TEMPLATE_MAX_MESSAGES per template are kept, the rest counted. */
TEST(messages_are_bounded)
{
	struct buf b;
	buf_init(&b, 1 << 20);
	buf_appendf(&b, HDR "events:\n");
	for (int r = 0; r < 10; r++) {
		buf_appendf(&b, "- handler: m.f\n  pattern:\n    ");
		for (int i = 0; i < PATTERN_MAX_DEPTH - 1; i++)
			buf_appendf(&b, "%s_%d: {", "a-long-field-name-at-this-level", i);
		buf_appendf(&b, "x: {gt: [");
		for (int i = 0; i < 3000; i++)
			buf_appendf(&b, "%sbad", i ? (i % 20 ? "," : ",\n      ") : "");
		buf_appendf(&b, "]}");
		for (int i = 0; i < PATTERN_MAX_DEPTH - 1; i++)
			buf_appendf(&b, "}");
		buf_appendf(&b, "\n");
		for (int k = 0; k < 3000; k++)
			buf_appendf(&b, "  unknown%d: 1\n", k);
	}
	struct strlist errors = {0}, warnings = {0};
	struct template *t = NULL;
	CHECK(template_parse(b.data, b.len, &t, &errors, &warnings) < 0);
	/* Each rule has 20 lines and "2980 more errors not shown": the first
	 * 100 of those 210 lines are kept. */
	CHECK_INT(errors.n, TEMPLATE_MAX_MESSAGES + 1);
	CHECK_INT(warnings.n, TEMPLATE_MAX_MESSAGES + 1);
	if (errors.n > 21) {
		CHECK(strstr(errors.v[0], "events[0].pattern.a-long-field-name-at-this-level_0."
					  "a-long-field-name-at-this-level_1.") == errors.v[0]);
		CHECK(strstr(errors.v[0], ".x.gt[0]: invalid temporal operand \"bad\""));
		CHECK(strstr(errors.v[20], "events[0].pattern: 2980 more errors not shown") ==
		      errors.v[20]);
	}
	CHECK_STR(errors.v[errors.n - 1], "template.yaml: 110 more errors not shown");
	CHECK_STR(warnings.v[warnings.n - 1], "template.yaml: 29900 more warnings not shown");
	for (size_t i = 0; i < errors.n; i++)
		CHECK(strlen(errors.v[i]) < 4096);
	strlist_free(&errors);
	strlist_free(&warnings);
	buf_free(&b);
}

/*
 * The handler rule: two non-empty sides around the last dot, no whitespace,
 * no control or invisible formatting character, a module of letters,
 * digits, "_$-./" and non-ASCII, a function that is an identifier; the
 * module is everything before the last dot. Each row goes through
 * template_handler_valid() and through a rule and a schedule of a template, with the
 * handler written as a YAML double-quoted scalar. The shapes
 * it/handlers.sh runs in real containers are all accepted.
 */
#define R_MODULE "the module has only letters, digits and _ $ - . /"
#define R_FUNC "the function is an identifier: a letter, _ or $, then letters, digits, _ or $"

TEST(handler_rule)
{
	static const struct {
		const char *raw; /* the handler */
		size_t len;	 /* its length when it holds a NUL, else 0 */
		const char *yaml;
		const char *module;   /* NULL: refused */
		const char *function; /* or, when refused, the reason */
	} cases[] = {
		{"a.b", 0, "a.b", "a", "b"},
		{"a..b", 0, "a..b", "a.", "b"},
		{"my-mod.main", 0, "my-mod.main", "my-mod", "main"},
		{"events.created.handler", 0, "events.created.handler", "events.created",
		 "handler"},
		{"a.b.c", 0, "a.b.c", "a.b", "c"},
		{"pkg/sub.fn", 0, "pkg/sub.fn", "pkg/sub", "fn"},
		{".a.b", 0, ".a.b", ".a", "b"},
		{"a...b", 0, "a...b", "a..", "b"},
		{"caf\xc3\xa9.$fn", 0, "caf\\u00e9.$fn", "caf\xc3\xa9", "$fn"},
		{"x_y._f_", 0, "x_y._f_", "x_y", "_f_"},
		{"nested/mod.handler", 0, "nested/mod.handler", "nested/mod", "handler"},
		{"a$.f1", 0, "a$.f1", "a$", "f1"},
		{"\xe6\x97\xa5\xe6\x9c\xac.\xe9\x96\xa2\xe6\x95\xb0", 0,
		 "\\u65e5\\u672c.\\u95a2\\u6570", "\xe6\x97\xa5\xe6\x9c\xac",
		 "\xe9\x96\xa2\xe6\x95\xb0"},
		/* not White_Space, but invisible: a formatting character */
		{"a\xef\xbb\xbf.b", 0, "a\\ufeff.b", NULL, "no control or formatting character"},
		{"a\x1b[31m.b", 0, "a\\e[31m.b", NULL, "no control or formatting character"},
		{"a.b\x07", 0, "a.b\\a", NULL, "no control or formatting character"},
		{"a\x7f.b", 0, "a\\x7f.b", NULL, "no control or formatting character"},
		{"a\xc2\x9b"
		 "2J.b",
		 0, "a\\u009b2J.b", NULL, "no control or formatting character"},
		{"a.b\xc2\x80", 0, "a.b\\u0080", NULL, "no control or formatting character"},
		{"a\xe2\x80\xae.b", 0, "a\\u202e.b", NULL, "no control or formatting character"},
		{"a.\xe2\x81\xa6"
		 "b",
		 0, "a.\\u2066b", NULL, "no control or formatting character"},
		{"a\xe2\x80\x8b.b", 0, "a\\u200b.b", NULL, "no control or formatting character"},
		{"a.b-c", 0, "a.b-c", NULL, R_FUNC},
		{"a.1b", 0, "a.1b", NULL, R_FUNC},
		{"a.b/c", 0, "a.b/c", NULL, R_FUNC},
		{"a.b\\c", 0, "a.b\\\\c", NULL, R_FUNC},
		{"a;b.c", 0, "a;b.c", NULL, R_MODULE},
		{"a:b.c", 0, "a:b.c", NULL, R_MODULE},
		{"a\"b.c", 0, "a\\\"b.c", NULL, R_MODULE},
		{"$(x).f", 0, "$(x).f", NULL, R_MODULE},
		{"ab", 0, "ab", NULL, "split at the last dot, no empty part"},
		{".b", 0, ".b", NULL, "split at the last dot, no empty part"},
		{"a.", 0, "a.", NULL, "split at the last dot, no empty part"},
		{".", 0, ".", NULL, "split at the last dot, no empty part"},
		{"..", 0, "..", NULL, "split at the last dot, no empty part"},
		{"", 0, "", NULL, "split at the last dot, no empty part"},
		{"a b.c", 0, "a b.c", NULL, "no whitespace"},
		{"a.b c", 0, "a.b c", NULL, "no whitespace"},
		{" a.b", 0, " a.b", NULL, "no whitespace"},
		{"a.b ", 0, "a.b ", NULL, "no whitespace"},
		{"a\tb.c", 0, "a\\tb.c", NULL, "no whitespace"},
		{"a.b\n", 0, "a.b\\n", NULL, "no whitespace"},
		{"a\r.b", 0, "a\\r.b", NULL, "no whitespace"},
		{"a.\vb", 0, "a.\\vb", NULL, "no whitespace"},
		{"a.\fb", 0, "a.\\fb", NULL, "no whitespace"},
		{"a\xc2\xa0.b", 0, "a\\u00a0.b", NULL, "no whitespace"},
		{"a\xc2\x85.b", 0, "a\\u0085.b", NULL, "no whitespace"},
		{"a.b\xe2\x80\x8a", 0, "a.b\\u200a", NULL, "no whitespace"},
		{"a\xe2\x80\xa8.b", 0, "a\\u2028.b", NULL, "no whitespace"},
		{"a\xe3\x80\x80.b", 0, "a\\u3000.b", NULL, "no whitespace"},
		{"a\0.b", 4, "a\\0.b", NULL,
		 "no NUL byte"}, /* an environment variable cannot hold it */
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		size_t len = cases[i].len ? cases[i].len : strlen(cases[i].raw);
		bool want = cases[i].module != NULL;
		const char *why = "unset";
		if (template_handler_valid(cases[i].raw, len, &why) != want)
			T_FAIL_("template_handler_valid(\"%s\") != %d", cases[i].yaml, want);
		if (want ? why != NULL : !why || strcmp(why, cases[i].function) != 0)
			T_FAIL_("template_handler_valid(\"%s\"): reason %s", cases[i].yaml,
				why ? why : "NULL");
		char *y =
			/* node24: the rule is every runtime's; Python adds its
			 * own check (python_modules_importable below). */
			xasprintf("runtime: node24\nevents:\n  - handler: \"%s\"\n    pattern: {}\n"
				  "schedules:\n  - handler: \"%s\"\n    cron: \"0 3 * * *\"\n",
				  cases[i].yaml, cases[i].yaml);
		struct strlist errors = {0}, warnings = {0};
		struct template *t = NULL;
		int rc = template_parse(y, strlen(y), &t, &errors, &warnings);
		if (want) {
			if (rc != 0 || !t) {
				T_FAIL_("\"%s\" refused: %s", cases[i].yaml,
					errors.n ? errors.v[0] : "(no error)");
			} else {
				CHECK_STR(t->rules[0].handler, cases[i].raw);
				CHECK_STR(t->rules[0].module, cases[i].module);
				CHECK_STR(t->rules[0].function, cases[i].function);
				CHECK_STR(t->schedules[0].handler, cases[i].raw);
				CHECK_STR(t->schedules[0].module, cases[i].module);
				CHECK_STR(t->schedules[0].function, cases[i].function);
			}
		} else if (rc == 0 || errors.n != 2 ||
			   strncmp(errors.v[0], "events[0].handler: \"", 20) != 0 ||
			   !strstr(errors.v[0], "\" is not of the form module.function (") ||
			   !strstr(errors.v[0], cases[i].function) ||
			   strncmp(errors.v[1], "schedules[0].handler: \"", 23) != 0) {
			T_FAIL_("\"%s\" not refused as a handler (rc %d, %zu errors): %s",
				cases[i].yaml, rc, errors.n, errors.n ? errors.v[0] : "");
		}
		template_free(t);
		strlist_free(&errors);
		strlist_free(&warnings);
		free(y);
	}
}

/* For python3.14, validation also refuses the modules importlib can never
 * load, whatever files exist; node24 accepts them (its lookups are file
 * paths). */
TEST(python_modules_importable)
{
	static const struct {
		const char *handler, *why; /* why: NULL when Python accepts it */
	} cases[] = {
		{"a..b", NULL},
		{"my-mod.main", NULL},
		{"events.created.handler", NULL},
		{"caf\xc3\xa9.$fn", NULL},
		{"pkg/sub.fn", "a '/' is never part of a Python module name"},
		{".a.b", "a leading '.' is a relative import"},
		{"..b", "a leading '.' is a relative import"},
		{"a...b", "an empty part between two dots"},
		{"a..b.c", "an empty part between two dots"},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		for (int node = 0; node < 2; node++) {
			char *y = xasprintf(
				"runtime: %s\nevents:\n  - handler: \"%s\"\n    pattern: "
				"{}\nschedules:\n  - handler: \"%s\"\n    cron: \"@daily\"\n",
				node ? "node24" : "python3.14", cases[i].handler, cases[i].handler);
			struct strlist errors = {0}, warnings = {0};
			struct template *t = NULL;
			int rc = template_parse(y, strlen(y), &t, &errors, &warnings);
			bool want_ok = node || !cases[i].why;
			if (want_ok && rc != 0) {
				T_FAIL_("%s %s refused: %s", node ? "node24" : "python3.14",
					cases[i].handler, errors.n ? errors.v[0] : "");
			} else if (!want_ok) {
				char *w0 =
					xasprintf("events[0].handler: \"%s\": Python cannot import "
						  "module",
						  cases[i].handler);
				if (rc == 0 || errors.n != 2 ||
				    strncmp(errors.v[0], w0, strlen(w0)) != 0 ||
				    !strstr(errors.v[0], cases[i].why) ||
				    strncmp(errors.v[1], "schedules[0].handler: ", 22) != 0)
					T_FAIL_("python3.14 %s: rc %d, %zu errors: %s",
						cases[i].handler, rc, errors.n,
						errors.n ? errors.v[0] : "");
				free(w0);
			}
			template_free(t);
			strlist_free(&errors);
			strlist_free(&warnings);
			free(y);
		}
	}
}

TEST(warm_values)
{
	struct {
		const char *yaml;
		bool warm;
		int64_t idle_ns, max_uses;
	} cases[] = {
		{HDR RULE, false, TEMPLATE_DEFAULT_WARM_IDLE_NS, TEMPLATE_DEFAULT_WARM_MAX_USES},
		{HDR "warm: {}\n" RULE, true, 60000000000LL, 1000},
		{HDR "warm:\n  idle: 1s\n  max_uses: 2\n" RULE, true, 1000000000LL, 2},
		{HDR "warm:\n  idle: 1h\n" RULE, true, 3600000000000LL, 1000},
		{HDR "warm:\n  max_uses: 100000\n" RULE, true, 60000000000LL, 100000},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		struct strlist errors = {0}, warnings = {0};
		struct template *t = NULL;
		int rc = template_parse(cases[i].yaml, strlen(cases[i].yaml), &t, &errors,
					&warnings);
		REQUIRE(rc == 0 && t);
		CHECK(t->warm == cases[i].warm);
		CHECK(t->warm_idle_ns == cases[i].idle_ns);
		CHECK(t->warm_max_uses == cases[i].max_uses);
		CHECK(warnings.n == 0);
		template_free(t);
		strlist_free(&errors);
		strlist_free(&warnings);
	}
}

TEST(retry_rule_keys_over_the_top_level)
{
	const char *y = HDR "retry:\n  backoff: [2s, 4s]\n  no_retry_exit_codes: [2]\n"
			    "events:\n"
			    "  - handler: m.f\n    pattern: {}\n"
			    "  - handler: m.g\n    pattern: {}\n    retry: {backoff: [1s], max_age: 1h}\n"
			    "schedules:\n"
			    "  - handler: m.h\n    cron: \"* * * * *\"\n";
	struct strlist errors = {0}, warnings = {0};
	struct template *t = NULL;
	REQUIRE(template_parse(y, strlen(y), &t, &errors, &warnings) == 0 && t);
	CHECK(warnings.n == 0);
	struct retry_policy base, eff;
	retry_policy_default(&base, NULL);
	const char *want[] = {"backoff [2s, 4s], no_retry_exit_codes [2]",
			      "backoff [1s], max_age 1h0m0s, no_retry_exit_codes [2]"};
	for (size_t i = 0; i < 2; i++) {
		retry_policy_merge(&eff, &base, NULL, &t->rules[i].retry);
		char *d = retry_policy_describe(&eff);
		CHECK_STR(d, want[i]);
		free(d);
	}
	retry_policy_merge(&eff, &base, NULL, &t->schedules[0].retry);
	char *d = retry_policy_describe(&eff);
	CHECK_STR(d, want[0]);
	free(d);
	template_free(t);
	strlist_free(&errors);
	strlist_free(&warnings);
	/* without retry: the built-in defaults, as before */
	y = HDR RULE;
	REQUIRE(template_parse(y, strlen(y), &t, &errors, &warnings) == 0 && t);
	retry_policy_merge(&eff, &base, NULL, &t->rules[0].retry);
	d = retry_policy_describe(&eff);
	CHECK_STR(d, "backoff [1m0s, 2m0s, 5m0s, 10m0s]");
	free(d);
	template_free(t);
	strlist_free(&errors);
	strlist_free(&warnings);
}

/* match_arrays reaches every rule's pattern: the same rule matches an
 * event whose field is an array only under elements; warnings none. */
TEST(match_arrays_mode)
{
	static const char *const yaml[] = {
		HDR "events:\n  - handler: m.f\n    pattern: {tags: [a]}\n  - handler: m.g\n"
		    "    pattern: {n: {numeric: ['>', 1]}}\n",
		HDR "match_arrays: values\nevents:\n  - handler: m.f\n    pattern: {tags: [a]}\n"
		    "  - handler: m.g\n    pattern: {n: {numeric: ['>', 1]}}\n",
		HDR "match_arrays: elements\nevents:\n  - handler: m.f\n    pattern: {tags: [a]}\n"
		    "  - handler: m.g\n    pattern: {n: {numeric: ['>', 1]}}\n",
	};
	json_t *ev = json_loads("{\"tags\": [\"b\", \"a\"], \"n\": [0, 2]}", 0, NULL);
	REQUIRE(ev);
	for (size_t i = 0; i < ARRAY_LEN(yaml); i++) {
		struct strlist errors = {0}, warnings = {0};
		struct template *t = NULL;
		int rc = template_parse(yaml[i], strlen(yaml[i]), &t, &errors, &warnings);
		REQUIRE(rc == 0 && t && t->nrules == 2);
		bool elements = i == 2;
		CHECK(t->match_arrays_elements == elements);
		for (size_t r = 0; r < 2; r++) {
			CHECK(pattern_elements(t->rules[r].pattern) == elements);
			CHECK(pattern_match_json(t->rules[r].pattern, ev, 0) == elements);
		}
		CHECK_INT(warnings.n, 0);
		template_free(t);
		strlist_free(&errors);
		strlist_free(&warnings);
	}
	json_decref(ev);
}

TEST(size_bound)
{
	size_t n = TEMPLATE_MAX_BYTES + 1;
	char *big = xmalloc(n);
	memset(big, '#', n);
	struct strlist errors = {0}, warnings = {0};
	struct template *t = NULL;
	CHECK(template_parse(big, n, &t, &errors, &warnings) < 0);
	REQUIRE(errors.n == 1);
	CHECK(strstr(errors.v[0], "larger than") != NULL);
	free(big);
	strlist_free(&errors);
	strlist_free(&warnings);
}

T_MAIN(T_CASE(table), T_CASE(defaults_and_values), T_CASE(unknown_keys_are_warnings_with_paths),
       T_CASE(every_error_is_reported), T_CASE(duplicate_keys_rejected),
       T_CASE(alias_bomb_is_bounded), T_CASE(aliases_in_many_rules_count_against_one_bound),
       T_CASE(alias_amplified_text_is_bounded), T_CASE(allocation_failure_is_an_error),
       T_CASE(worst_valid_template_compiles_in_n_log_n),
       T_CASE(long_lines_and_deep_nesting_refused), T_CASE(messages_are_bounded),
       T_CASE(handler_rule), T_CASE(python_modules_importable), T_CASE(warm_values),
       T_CASE(retry_rule_keys_over_the_top_level), T_CASE(match_arrays_mode),
       T_CASE(size_bound))
