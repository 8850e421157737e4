/* The OTEL_* settings and the sampler (model/otel.h). */
#include <stdlib.h>
#include <string.h>

#include "base/duration.h"
#include "base/util.h"
#include "model/otel.h"
#include "t.h"

static const char *const all_vars[] = {
	"OTEL_SDK_DISABLED",	      "OTEL_EXPORTER_OTLP_ENDPOINT",
	"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
	"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_HEADERS",
	"OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_RESOURCE_ATTRIBUTES",
	"OTEL_SERVICE_NAME",	      "OTEL_TRACES_SAMPLER",
	"OTEL_TRACES_SAMPLER_ARG",    "OTEL_EXPORTER_OTLP_CERTIFICATE",
	"OTEL_BSP_MAX_QUEUE_SIZE",    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
	"OTEL_BSP_SCHEDULE_DELAY",
};

static void clear_env(void)
{
	for (size_t i = 0; i < ARRAY_LEN(all_vars); i++)
		unsetenv(all_vars[i]);
}

/* Loads the settings; returns the errors joined by '\n' (malloc'd; "" when
 * none). */
static char *load(struct otel_settings *s)
{
	char **errs = NULL;
	int n = 0;
	otel_settings_load(s, &errs, &n);
	struct buf b;
	buf_init(&b, 1 << 16);
	buf_appendf(&b, "%s", "");
	for (int i = 0; i < n; i++) {
		buf_appendf(&b, "%s%s", i ? "\n" : "", errs[i]);
		free(errs[i]);
	}
	free(errs);
	return buf_steal(&b);
}

TEST(defaults_export_off)
{
	clear_env();
	struct otel_settings s;
	char *e = load(&s);
	CHECK_STR(e, "");
	CHECK(s.traces_url == NULL);
	CHECK_INT(s.sampler, OTEL_SAMPLER_PARENTBASED_ALWAYS_ON);
	CHECK_INT(s.timeout_ns, 10 * NS_PER_SEC);
	CHECK_INT(s.queue_max, 2048);
	CHECK_INT(s.batch_max, 512);
	CHECK_INT(s.delay_ns, 2 * NS_PER_SEC);
	CHECK_INT(s.nresource, 1);
	CHECK_STR(s.resource[0].key, "service.name");
	CHECK_STR(s.resource[0].value, "relay");
	free(e);
	otel_settings_free(&s);
}

TEST(endpoints_and_resource)
{
	clear_env();
	setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/", 1);
	setenv("OTEL_EXPORTER_OTLP_HEADERS", "api-key=abc%20def", 1);
	setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "2500", 1);
	setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=ignored,deployment.environment=prod", 1);
	setenv("OTEL_SERVICE_NAME", "relay-eu", 1);
	setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", 1);
	struct otel_settings s;
	char *e = load(&s);
	CHECK_STR(e, "");
	CHECK_STR(s.traces_url, "http://collector:4318/v1/traces");
	CHECK_INT(s.nheaders, 1);
	CHECK_STR(s.headers[0].value, "abc def");
	CHECK_INT(s.timeout_ns, 2500 * NS_PER_MS);
	CHECK_INT(s.nresource, 2);
	CHECK_STR(s.resource[0].value, "relay-eu");
	CHECK_STR(s.resource[1].key, "deployment.environment");
	free(e);
	otel_settings_free(&s);
	/* The traces endpoint is used as it is; without OTEL_SERVICE_NAME the
	 * attribute's service.name counts. */
	unsetenv("OTEL_SERVICE_NAME");
	setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://c.example/custom", 1);
	e = load(&s);
	CHECK_STR(s.traces_url, "https://c.example/custom");
	CHECK_STR(s.resource[0].value, "ignored");
	free(e);
	otel_settings_free(&s);
	/* Disabled: no export whatever the endpoint. */
	setenv("OTEL_SDK_DISABLED", "TRUE", 1);
	e = load(&s);
	CHECK_STR(e, "");
	CHECK(s.traces_url == NULL);
	free(e);
	otel_settings_free(&s);
	clear_env();
}

static const struct {
	const char *var, *value, *want;
} bad_cases[] = {
	{"OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318",
	 "OTEL_EXPORTER_OTLP_ENDPOINT 'collector:4318' is invalid (not an http:// or https:// "
	 "URL); accepted: an http:// or https:// URL (unset: no span export)"},
	{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf",
	 "OTEL_EXPORTER_OTLP_PROTOCOL 'http/protobuf' is invalid (not supported by Relay); "
	 "accepted: http/json (default http/json)"},
	{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc",
	 "OTEL_EXPORTER_OTLP_PROTOCOL 'grpc' is invalid (not supported by Relay); accepted: "
	 "http/json (default http/json)"},
	{"OTEL_EXPORTER_OTLP_TIMEOUT", "10s",
	 "OTEL_EXPORTER_OTLP_TIMEOUT '10s' is invalid (not a number of milliseconds from 1 to "
	 "600000); accepted: milliseconds from 1 to 600000 (default 10000)"},
	{"OTEL_EXPORTER_OTLP_TIMEOUT", "0",
	 "OTEL_EXPORTER_OTLP_TIMEOUT '0' is invalid (not a number of milliseconds from 1 to "
	 "600000); accepted: milliseconds from 1 to 600000 (default 10000)"},
	{"OTEL_EXPORTER_OTLP_HEADERS", "token=s3cret,broken",
	 "OTEL_EXPORTER_OTLP_HEADERS is invalid (entry 2 has no '='); accepted: "
	 "comma-separated key=value pairs, values percent-encoded"},
	{"OTEL_RESOURCE_ATTRIBUTES", "a=%zz",
	 "OTEL_RESOURCE_ATTRIBUTES 'a=%zz' is invalid (entry 1 (a) has a badly percent-encoded "
	 "value); accepted: comma-separated key=value pairs, values percent-encoded"},
	{"OTEL_TRACES_SAMPLER", "sometimes",
	 "OTEL_TRACES_SAMPLER 'sometimes' is invalid (unknown sampler); accepted: always_on, "
	 "always_off, traceidratio, parentbased_always_on, parentbased_always_off or "
	 "parentbased_traceidratio (default parentbased_always_on)"},
	{"OTEL_TRACES_SAMPLER_ARG", "1.5",
	 "OTEL_TRACES_SAMPLER_ARG '1.5' is invalid (not a number from 0 to 1); accepted: a number "
	 "from 0 to 1 (the traceidratio samplers' ratio; default 1.0)"},
	{"OTEL_BSP_MAX_QUEUE_SIZE", "65537",
	 "OTEL_BSP_MAX_QUEUE_SIZE '65537' is invalid (not a number of spans from 1 to 65536); "
	 "accepted: spans from 1 to 65536 (default 2048)"},
	{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "0",
	 "OTEL_BSP_MAX_EXPORT_BATCH_SIZE '0' is invalid (not a number of spans from 1 to 65536); "
	 "accepted: spans from 1 to 65536 (default 512)"},
	{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4096",
	 "OTEL_BSP_MAX_EXPORT_BATCH_SIZE '4096' is invalid (more than OTEL_BSP_MAX_QUEUE_SIZE, "
	 "2048); accepted: spans from 1 to OTEL_BSP_MAX_QUEUE_SIZE (default 512)"},
	{"OTEL_BSP_SCHEDULE_DELAY", "5",
	 "OTEL_BSP_SCHEDULE_DELAY '5' is invalid (not a number of milliseconds from 10 to "
	 "600000); accepted: milliseconds from 10 to 600000 (default 2000)"},
	{"OTEL_BSP_SCHEDULE_DELAY", "2s",
	 "OTEL_BSP_SCHEDULE_DELAY '2s' is invalid (not a number of milliseconds from 10 to "
	 "600000); accepted: milliseconds from 10 to 600000 (default 2000)"},
	{"OTEL_SDK_DISABLED", "yes",
	 "OTEL_SDK_DISABLED 'yes' is invalid (neither true nor false); accepted: true or false, "
	 "case-insensitive (default false)"},
};

TEST(bad_values_name_the_variable)
{
	for (size_t i = 0; i < ARRAY_LEN(bad_cases); i++) {
		clear_env();
		setenv(bad_cases[i].var, bad_cases[i].value, 1);
		struct otel_settings s;
		char *e = load(&s);
		CHECK_STR(e, bad_cases[i].want);
		CHECK(s.traces_url == NULL && s.resource == NULL); /* freed on errors */
		free(e);
	}
	clear_env();
}

TEST(batch_processor_settings)
{
	clear_env();
	setenv("OTEL_BSP_MAX_QUEUE_SIZE", "100", 1);
	setenv("OTEL_BSP_SCHEDULE_DELAY", "250", 1);
	struct otel_settings s;
	char *e = load(&s);
	CHECK_STR(e, "");
	/* A queue below the default batch: batches of the whole queue. */
	CHECK_INT(s.queue_max, 100);
	CHECK_INT(s.batch_max, 100);
	CHECK_INT(s.delay_ns, 250 * NS_PER_MS);
	free(e);
	otel_settings_free(&s);
	setenv("OTEL_BSP_MAX_QUEUE_SIZE", "65536", 1);
	setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "65536", 1);
	e = load(&s);
	CHECK_STR(e, "");
	CHECK_INT(s.queue_max, 65536);
	CHECK_INT(s.batch_max, 65536);
	free(e);
	otel_settings_free(&s);
	clear_env();
}

TEST(sampler_rules)
{
	struct otel_settings s = {.sampler = OTEL_SAMPLER_PARENTBASED_ALWAYS_ON, .ratio = 1};
	uint8_t id[16] = {0};
	CHECK(otel_sample(&s, id, false, false)); /* root: always on */
	CHECK(!otel_sample(&s, id, true, false)); /* parent says no */
	CHECK(otel_sample(&s, id, true, true));
	s.sampler = OTEL_SAMPLER_PARENTBASED_ALWAYS_OFF;
	CHECK(!otel_sample(&s, id, false, false));
	CHECK(otel_sample(&s, id, true, true));
	s.sampler = OTEL_SAMPLER_ALWAYS_OFF;
	CHECK(!otel_sample(&s, id, true, true));
	s.sampler = OTEL_SAMPLER_ALWAYS_ON;
	CHECK(otel_sample(&s, id, true, false));
	/* traceidratio: last 8 bytes big-endian, >> 1, below ratio * 2^63. */
	s.sampler = OTEL_SAMPLER_TRACEIDRATIO;
	s.ratio = 0.5;
	id[8] = 0x7f; /* x >> 1 = 0x3f..: below 2^62 */
	CHECK(otel_sample(&s, id, false, false));
	id[8] = 0x80; /* x >> 1 = 2^62 exactly: not below */
	CHECK(!otel_sample(&s, id, false, false));
	CHECK(!otel_sample(&s, id, true, true)); /* not parent-based */
	s.ratio = 0;
	id[8] = 0;
	CHECK(!otel_sample(&s, id, false, false));
	s.ratio = 1;
	memset(id, 0xff, sizeof id);
	CHECK(otel_sample(&s, id, false, false));
	s.sampler = OTEL_SAMPLER_PARENTBASED_TRACEIDRATIO;
	s.ratio = 0;
	CHECK(otel_sample(&s, id, true, true));
	CHECK(!otel_sample(&s, id, false, false));
}

TEST(ratio_proportion)
{
	/* A quarter of sequential-looking ids spread over the range. */
	struct otel_settings s = {.sampler = OTEL_SAMPLER_TRACEIDRATIO, .ratio = 0.25};
	int yes = 0;
	for (int i = 0; i < 256; i++) {
		uint8_t id[16] = {0};
		id[8] = (uint8_t)i;
		yes += otel_sample(&s, id, false, false);
	}
	CHECK_INT(yes, 64);
}

T_MAIN(T_CASE(defaults_export_off), T_CASE(endpoints_and_resource),
       T_CASE(bad_values_name_the_variable), T_CASE(batch_processor_settings),
       T_CASE(sampler_rules), T_CASE(ratio_proportion))
