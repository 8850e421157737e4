/*
 * OTEL_* settings: see otel.h. Each variable is read with a literal
 * getenv call, where tests/it/docs.sh finds it, and checked by the rule of its
 * row in the OpenTelemetry environment specification, with the errors
 * Relay's other settings give.
 */
#include "model/otel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/duration.h"
#include "base/util.h"

static void add_err(char ***errs, int *nerrs, const char *name, const char *value,
		    const char *why, const char *accepted)
{
	char shown[208];
	printable_copy(value, shown, sizeof shown, 200);
	*errs = xrealloc(*errs, sizeof(char *) * (size_t)(*nerrs + 1));
	(*errs)[(*nerrs)++] = value ? xasprintf("%s '%s' is invalid (%s); accepted: %s", name,
						 shown, why, accepted)
				    : xasprintf("%s is invalid (%s); accepted: %s", name, why,
						accepted);
}

/* Set and not empty (the specification: empty is unset). */
static const char *env(const char *v)
{
	return v && *v ? v : NULL;
}

static int load_url(struct otel_settings *s, char ***errs, int *nerrs)
{
	const char *traces = env(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"));
	const char *base = env(getenv("OTEL_EXPORTER_OTLP_ENDPOINT"));
	const char *name = traces ? "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
				  : "OTEL_EXPORTER_OTLP_ENDPOINT";
	const char *v = traces ? traces : base;
	if (!v)
		return 0;
	if (strncmp(v, "http://", 7) != 0 && strncmp(v, "https://", 8) != 0) {
		add_err(errs, nerrs, name, v, "not an http:// or https:// URL",
			"an http:// or https:// URL (unset: no span export)");
		return -1;
	}
	if (traces) {
		s->traces_url = xstrdup(traces);
	} else {
		size_t n = strlen(base);
		s->traces_url = xasprintf("%.*s/v1/traces", (int)(n && base[n - 1] == '/' ? n - 1 : n),
					  base);
	}
	return 0;
}

static int load_protocol(char ***errs, int *nerrs)
{
	static const char *const names[] = {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
					    "OTEL_EXPORTER_OTLP_PROTOCOL"};
	const char *vals[] = {env(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")),
			      env(getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))};
	for (size_t i = 0; i < 2; i++)
		if (vals[i] && strcmp(vals[i], "http/json") != 0) {
			add_err(errs, nerrs, names[i], vals[i],
				strcmp(vals[i], "http/protobuf") == 0 || strcmp(vals[i], "grpc") == 0
					? "not supported by Relay"
					: "unknown protocol",
				"http/json (default http/json)");
			return -1;
		}
	return 0;
}

/* name's value raw (read with a literal getenv: tests/it/docs.sh). */
static int load_kv(const char *name, const char *raw, struct otlp_kv **out, size_t *n,
		   char ***errs, int *nerrs)
{
	const char *v = env(raw);
	char *why = NULL;
	if (!v)
		return 0;
	if (otlp_kv_parse(v, out, n, &why) == 0)
		return 0;
	/* A header value may be a secret: never shown. */
	bool secret = strcmp(name, "OTEL_EXPORTER_OTLP_HEADERS") == 0;
	add_err(errs, nerrs, name, secret ? NULL : v, why,
		"comma-separated key=value pairs, values percent-encoded");
	free(why);
	return -1;
}

/* name's value raw (read with a literal getenv: tests/it/docs.sh) as a
 * number of unit from lo to hi (def when unset) into *out: 0, or -1 after
 * adding the error. */
static int load_int(const char *name, const char *raw, const char *unit, int64_t lo, int64_t hi,
		    int64_t def, int64_t *out, char ***errs, int *nerrs)
{
	const char *v = env(raw);
	*out = def;
	if (!v)
		return 0;
	int64_t n;
	if (parse_int64(v, &n) == 0 && v[0] != '+' && n >= lo && n <= hi) {
		*out = n;
		return 0;
	}
	char *why = xasprintf("not a number of %s from %lld to %lld", unit, (long long)lo,
			      (long long)hi);
	char *accepted = xasprintf("%s from %lld to %lld (default %lld)", unit, (long long)lo,
				   (long long)hi, (long long)def);
	add_err(errs, nerrs, name, v, why, accepted);
	free(why);
	free(accepted);
	return -1;
}

static void load_timeout(struct otel_settings *s, char ***errs, int *nerrs)
{
	int64_t ms;
	load_int("OTEL_EXPORTER_OTLP_TIMEOUT", getenv("OTEL_EXPORTER_OTLP_TIMEOUT"), "milliseconds",
		 1, 600000, OTEL_DEFAULT_TIMEOUT_MS, &ms, errs, nerrs);
	s->timeout_ns = ms * NS_PER_MS;
}

/* The batch span processor: queue, batch (at most the queue) and delay. */
static void load_bsp(struct otel_settings *s, char ***errs, int *nerrs)
{
	int64_t queue, batch, ms;
	load_int("OTEL_BSP_MAX_QUEUE_SIZE", getenv("OTEL_BSP_MAX_QUEUE_SIZE"), "spans", 1,
		 OTEL_BSP_QUEUE_LIMIT, OTEL_DEFAULT_BSP_QUEUE, &queue, errs, nerrs);
	const char *raw = getenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE");
	if (load_int("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", raw, "spans", 1, OTEL_BSP_QUEUE_LIMIT,
		     OTEL_DEFAULT_BSP_BATCH, &batch, errs, nerrs) == 0 &&
	    batch > queue) {
		if (env(raw)) {
			char *why = xasprintf("more than OTEL_BSP_MAX_QUEUE_SIZE, %lld",
					      (long long)queue);
			add_err(errs, nerrs, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", raw, why,
				"spans from 1 to OTEL_BSP_MAX_QUEUE_SIZE (default 512)");
			free(why);
		}
		batch = queue; /* a queue below the default batch: batches of all of it */
	}
	load_int("OTEL_BSP_SCHEDULE_DELAY", getenv("OTEL_BSP_SCHEDULE_DELAY"), "milliseconds",
		 OTEL_BSP_DELAY_MIN_MS, OTEL_BSP_DELAY_MAX_MS, OTEL_DEFAULT_BSP_DELAY_MS, &ms, errs,
		 nerrs);
	s->queue_max = (size_t)queue;
	s->batch_max = (size_t)batch;
	s->delay_ns = ms * NS_PER_MS;
}

static const char *const sampler_names[] = {
	[OTEL_SAMPLER_PARENTBASED_ALWAYS_ON] = "parentbased_always_on",
	[OTEL_SAMPLER_PARENTBASED_ALWAYS_OFF] = "parentbased_always_off",
	[OTEL_SAMPLER_PARENTBASED_TRACEIDRATIO] = "parentbased_traceidratio",
	[OTEL_SAMPLER_ALWAYS_ON] = "always_on",
	[OTEL_SAMPLER_ALWAYS_OFF] = "always_off",
	[OTEL_SAMPLER_TRACEIDRATIO] = "traceidratio",
};

static int load_sampler(struct otel_settings *s, char ***errs, int *nerrs)
{
	const char *v = env(getenv("OTEL_TRACES_SAMPLER"));
	const char *arg = env(getenv("OTEL_TRACES_SAMPLER_ARG"));
	int rc = 0;
	s->sampler = OTEL_SAMPLER_PARENTBASED_ALWAYS_ON;
	s->ratio = 1.0;
	if (v) {
		size_t i = 0;
		while (i < ARRAY_LEN(sampler_names) && strcmp(sampler_names[i], v) != 0)
			i++;
		if (i == ARRAY_LEN(sampler_names)) {
			add_err(errs, nerrs, "OTEL_TRACES_SAMPLER", v, "unknown sampler",
				"always_on, always_off, traceidratio, parentbased_always_on, "
				"parentbased_always_off or parentbased_traceidratio (default "
				"parentbased_always_on)");
			rc = -1;
		} else {
			s->sampler = (enum otel_sampler)i;
		}
	}
	if (arg) {
		char *end = NULL;
		double r = strtod(arg, &end);
		if (!end || *end || end == arg || !(r >= 0.0 && r <= 1.0)) {
			add_err(errs, nerrs, "OTEL_TRACES_SAMPLER_ARG", arg, "not a number from 0 to 1",
				"a number from 0 to 1 (the traceidratio samplers' ratio; default "
				"1.0)");
			rc = -1;
		} else {
			s->ratio = r;
		}
	}
	return rc;
}

static int load_disabled(struct otel_settings *s, char ***errs, int *nerrs)
{
	const char *v = env(getenv("OTEL_SDK_DISABLED"));
	if (!v || strcasecmp(v, "false") == 0)
		return 0;
	if (strcasecmp(v, "true") == 0) {
		s->disabled = true;
		return 0;
	}
	add_err(errs, nerrs, "OTEL_SDK_DISABLED", v, "neither true nor false",
		"true or false, case-insensitive (default false)");
	return -1;
}

/* service.name first: OTEL_SERVICE_NAME, else the attribute's, else
 * "relay"; then the other attributes, in order. */
static void build_resource(struct otel_settings *s, struct otlp_kv *attrs, size_t n)
{
	const char *svc = env(getenv("OTEL_SERVICE_NAME"));
	for (size_t i = 0; !svc && i < n; i++)
		if (strcmp(attrs[i].key, "service.name") == 0)
			svc = attrs[i].value;
	s->resource = xcalloc(n + 1, sizeof *s->resource);
	s->resource[s->nresource++] =
		(struct otlp_kv){xstrdup("service.name"), xstrdup(svc ? svc : OTEL_DEFAULT_SERVICE_NAME)};
	for (size_t i = 0; i < n; i++)
		if (strcmp(attrs[i].key, "service.name") != 0)
			s->resource[s->nresource++] =
				(struct otlp_kv){xstrdup(attrs[i].key), xstrdup(attrs[i].value)};
}

int otel_settings_load(struct otel_settings *s, char ***errs, int *nerrs)
{
	memset(s, 0, sizeof *s);
	int before = *nerrs;
	struct otlp_kv *attrs = NULL;
	size_t nattrs = 0;
	load_disabled(s, errs, nerrs);
	load_url(s, errs, nerrs);
	load_protocol(errs, nerrs);
	load_kv("OTEL_EXPORTER_OTLP_HEADERS", getenv("OTEL_EXPORTER_OTLP_HEADERS"), &s->headers,
		&s->nheaders, errs, nerrs);
	load_timeout(s, errs, nerrs);
	load_bsp(s, errs, nerrs);
	load_kv("OTEL_RESOURCE_ATTRIBUTES", getenv("OTEL_RESOURCE_ATTRIBUTES"), &attrs, &nattrs,
		errs, nerrs);
	load_sampler(s, errs, nerrs);
	const char *ca = env(getenv("OTEL_EXPORTER_OTLP_CERTIFICATE"));
	s->ca_file = ca ? xstrdup(ca) : NULL;
	build_resource(s, attrs, nattrs);
	otlp_kv_free(attrs, nattrs);
	if (s->disabled) {
		free(s->traces_url);
		s->traces_url = NULL;
	}
	int n = *nerrs - before;
	if (n)
		otel_settings_free(s);
	return n;
}

void otel_settings_free(struct otel_settings *s)
{
	free(s->traces_url);
	otlp_kv_free(s->headers, s->nheaders);
	otlp_kv_free(s->resource, s->nresource);
	free(s->ca_file);
	memset(s, 0, sizeof *s);
}

static bool ratio_sample(double ratio, const uint8_t trace_id[16])
{
	uint64_t x = 0;
	for (int i = 8; i < 16; i++)
		x = x << 8 | trace_id[i];
	if (ratio >= 1.0)
		return true;
	return (x >> 1) < (uint64_t)(ratio * 9223372036854775808.0); /* 2^63 */
}

bool otel_sample(const struct otel_settings *s, const uint8_t trace_id[16], bool has_parent,
		 bool parent_sampled)
{
	switch (s->sampler) {
	case OTEL_SAMPLER_ALWAYS_ON: return true;
	case OTEL_SAMPLER_ALWAYS_OFF: return false;
	case OTEL_SAMPLER_TRACEIDRATIO: return ratio_sample(s->ratio, trace_id);
	case OTEL_SAMPLER_PARENTBASED_ALWAYS_ON: return has_parent ? parent_sampled : true;
	case OTEL_SAMPLER_PARENTBASED_ALWAYS_OFF: return has_parent ? parent_sampled : false;
	case OTEL_SAMPLER_PARENTBASED_TRACEIDRATIO:
		return has_parent ? parent_sampled : ratio_sample(s->ratio, trace_id);
	}
	return true;
}
