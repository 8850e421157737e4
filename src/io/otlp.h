/*
 * OTLP/HTTP span export with the JSON encoding (docs/operations.md,
 * "Tracing"): spans, their encoding as an ExportTraceServiceRequest, the
 * `key=value,...` lists of OTEL_EXPORTER_OTLP_HEADERS and
 * OTEL_RESOURCE_ATTRIBUTES, and the exporter thread.
 *
 * The JSON mapping (OTLP 1.x, "JSON Protobuf Encoding"): trace and span ids
 * as lowercase hex strings, times as decimal strings of Unix nanoseconds,
 * kind and status code as their enum integers, intValue as a decimal
 * string; resourceSpans -> scopeSpans -> spans, one resource and one scope
 * (name "relay") per request.
 *
 * The exporter (one thread, "otlp", started with thread_start) owns a
 * bounded queue of encoded spans: otlp_exporter_submit encodes the span in
 * the caller's thread into the queue, never blocks beyond that one short
 * mutex hold and never waits for the network; a full queue drops the span
 * (counted) without encoding it. The thread sends a batch of at most
 * batch_max spans when that many wait, or every interval_ns, as one POST
 * with Content-Type: application/json, no Expect header and the configured
 * headers, bounded by timeout_ns (curl's whole-transfer timeout). A request
 * that fails (no connection, timeout, a status other than 2xx) is counted
 * as one export failure and its spans as dropped, and while requests fail
 * the next one waits interval_ns (spans arriving meanwhile are dropped at
 * the full queue, never encoded): nothing is retried, so a collector that
 * is down, slow or hangs costs the event path nothing and memory at most
 * the queue. otlp_exporter_stop sends what is queued within a bound and
 * abandons the rest (counted as dropped).
 *
 * Header values may be secrets: they are never logged; an error text names
 * the header, never its value.
 */
#ifndef RELAY_OTLP_H
#define RELAY_OTLP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define OTLP_KIND_INTERNAL 1
#define OTLP_KIND_CONSUMER 5
#define OTLP_STATUS_UNSET 0
#define OTLP_STATUS_ERROR 2

/* Bounds of the lists read from the environment. */
#define OTLP_KV_MAX 64	     /* entries of one list */
#define OTLP_KV_TEXT_MAX 8192 /* bytes of one list */
#define OTLP_SPAN_ATTRS 16     /* attributes of one span */

/* A key and a value, both malloc'd. */
struct otlp_kv {
	char *key, *value;
};

/*
 * Parses a `key1=value1,key2=value2` list (the W3C Baggage form the
 * OpenTelemetry environment uses): entries separated by ',', blanks around
 * keys and values trimmed, values percent-decoded, keys non-empty. An empty
 * text is an empty list. 0 with *out (free with otlp_kv_free) and *n, or -1
 * with *why (malloc'd; names an entry by position, never a value).
 */
int otlp_kv_parse(const char *text, struct otlp_kv **out, size_t *n, char **why);
void otlp_kv_free(struct otlp_kv *kv, size_t n);

/* An attribute: a string value, or (str NULL) an integer one. */
struct otlp_attr {
	const char *key; /* a string literal: attribute names are Relay's own */
	const char *str;
	int64_t num;
};

#define OTLP_NAME_PARTS 4

/*
 * One finished span, as the encoder reads it. Nothing in it is owned: it
 * lives on its maker's stack and points at the maker's strings, and
 * otlp_exporter_submit encodes it before returning.
 */
struct otlp_span {
	uint8_t trace_id[16], span_id[8], parent_id[8];
	bool has_parent;
	const char *trace_state; /* NULL: none */
	/* The name: these pieces in order, up to the first NULL. */
	const char *name[OTLP_NAME_PARTS];
	int kind;
	int64_t start_ns, end_ns; /* Unix nanoseconds */
	int status;		  /* OTLP_STATUS_UNSET or OTLP_STATUS_ERROR */
	const char *status_message; /* NULL: none */
	struct otlp_attr attrs[OTLP_SPAN_ATTRS];
	size_t nattrs;
};

/* Add an attribute (value kept as a pointer); past OTLP_SPAN_ATTRS
 * ignored. */
void otlp_span_attr_str(struct otlp_span *s, const char *key, const char *value);
void otlp_span_attr_int(struct otlp_span *s, const char *key, int64_t value);

/* The span's JSON object, as it appears in a request's "spans" list
 * (malloc'd). */
char *otlp_span_encode(const struct otlp_span *s);

/* The ExportTraceServiceRequest of n encoded spans under one resource (its
 * attributes, in order), as compact JSON text (malloc'd). */
char *otlp_encode(const struct otlp_kv *resource, size_t nresource, char *const *spans,
		  size_t n);

struct otlp_exporter_config {
	const char *url; /* the full traces URL, e.g. http://host:4318/v1/traces */
	const struct otlp_kv *headers;
	size_t nheaders;
	const struct otlp_kv *resource;
	size_t nresource;
	const char *ca_file;	  /* NULL: libcurl's default CA bundle */
	int64_t timeout_ns;	  /* one request's bound */
	size_t queue_max;	  /* spans held at most */
	size_t batch_max;	  /* spans per request at most */
	int64_t interval_ns;	  /* a partial batch waits at most this long */
};

struct otlp_exporter;

/* Copies cfg and starts the thread. NULL with *why when the thread
 * cannot start. */
struct otlp_exporter *otlp_exporter_start(const struct otlp_exporter_config *cfg, char **why);
/* Queues s, encoded (s itself is not kept), or drops it (counted) when the
 * queue is full: then it is not encoded at all. Thread-safe, never blocks
 * on the network. NULL e: nothing. */
void otlp_exporter_submit(struct otlp_exporter *e, const struct otlp_span *s);
/* Sends what is queued, taking at most bound_ns for it (a request in
 * flight is abandoned at the bound), joins the thread and frees e. The
 * spans not sent are counted as dropped. NULL is fine. */
void otlp_exporter_stop(struct otlp_exporter *e, int64_t bound_ns);

/* Process-wide counters (monotonic, every exporter of the process). */
uint64_t otlp_spans_dropped(void);
uint64_t otlp_export_failures(void);
uint64_t otlp_spans_exported(void);

#endif
