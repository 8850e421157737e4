/*
 * The OpenTelemetry environment (docs/configuration.md, "Tracing"): the
 * OTEL_* variables Relay reads, validated at startup like every other
 * setting (a bad value is an error naming the variable), and the sampler
 * they choose.
 *
 * Export is on when OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
 * OTEL_EXPORTER_OTLP_ENDPOINT is set and OTEL_SDK_DISABLED is not true;
 * otherwise traces_url is NULL and Relay builds no span at all (it still
 * propagates trace context: docs/operations.md, "Tracing").
 */
#ifndef RELAY_OTEL_H
#define RELAY_OTEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/otlp.h"

enum otel_sampler {
	OTEL_SAMPLER_PARENTBASED_ALWAYS_ON, /* the default */
	OTEL_SAMPLER_PARENTBASED_ALWAYS_OFF,
	OTEL_SAMPLER_PARENTBASED_TRACEIDRATIO,
	OTEL_SAMPLER_ALWAYS_ON,
	OTEL_SAMPLER_ALWAYS_OFF,
	OTEL_SAMPLER_TRACEIDRATIO,
};

#define OTEL_DEFAULT_SERVICE_NAME "relay"
#define OTEL_DEFAULT_TIMEOUT_MS 10000
/* The batch span processor's settings (OTEL_BSP_*): the export queue, the
 * spans per request, and how long a partial batch waits. Relay's delay
 * default is 2 s (the specification's 5 s). */
#define OTEL_DEFAULT_BSP_QUEUE 2048
#define OTEL_DEFAULT_BSP_BATCH 512
#define OTEL_DEFAULT_BSP_DELAY_MS 2000
#define OTEL_BSP_QUEUE_LIMIT 65536 /* about 45 MiB of typical spans */
#define OTEL_BSP_DELAY_MIN_MS 10
#define OTEL_BSP_DELAY_MAX_MS 600000

struct otel_settings {
	bool disabled;	  /* OTEL_SDK_DISABLED=true */
	char *traces_url; /* NULL: no export */
	struct otlp_kv *headers;
	size_t nheaders;
	int64_t timeout_ns;
	/* service.name first, then OTEL_RESOURCE_ATTRIBUTES' others. */
	struct otlp_kv *resource;
	size_t nresource;
	char *ca_file; /* OTEL_EXPORTER_OTLP_CERTIFICATE; NULL: the system's */
	size_t queue_max;  /* OTEL_BSP_MAX_QUEUE_SIZE */
	size_t batch_max;  /* OTEL_BSP_MAX_EXPORT_BATCH_SIZE, at most queue_max */
	int64_t delay_ns;  /* OTEL_BSP_SCHEDULE_DELAY */
	enum otel_sampler sampler;
	double ratio; /* OTEL_TRACES_SAMPLER_ARG, 0..1 (default 1) */
};

/*
 * Reads the OTEL_* variables into *s. Returns the number of errors, each
 * a malloc'd line appended to *errs / *nerrs (the format of config.c's:
 * "NAME 'value' is invalid (why); accepted: ..."); on errors *s is freed
 * and zeroed. Free s with otel_settings_free.
 */
int otel_settings_load(struct otel_settings *s, char ***errs, int *nerrs);
void otel_settings_free(struct otel_settings *s);

/*
 * The sampling decision for a span of trace trace_id: a parent-based
 * sampler follows the parent's sampled flag when there is a parent
 * (has_parent), and its root sampler otherwise. The ratio rule is the one
 * of the OpenTelemetry Go and Java SDKs: the trace-id's last 8 bytes read
 * as a big-endian number, shifted right by one, sampled when below
 * ratio * 2^63.
 */
bool otel_sample(const struct otel_settings *s, const uint8_t trace_id[16], bool has_parent,
		 bool parent_sampled);

#endif
