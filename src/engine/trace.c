/*
 * Trace context and spans of relay start: see trace.h.
 *
 * One process-wide exporter (or none) and a copy of the sampler settings,
 * set by trace_setup before any worker starts and read without a lock
 * after that.
 */
#include "engine/trace.h"

#include <stdlib.h>
#include <string.h>

#include "base/duration.h"
#include "base/util.h"
#include "io/otlp.h"

static struct otlp_exporter *exporter;
static struct otel_settings sampler = {.sampler = OTEL_SAMPLER_PARENTBASED_ALWAYS_ON,
				       .ratio = 1.0};

int trace_setup(const struct otel_settings *s, char **why)
{
	sampler.sampler = s->sampler;
	sampler.ratio = s->ratio;
	if (!s->traces_url)
		return 0;
	struct otlp_exporter_config cfg = {
		.url = s->traces_url,
		.headers = s->headers,
		.nheaders = s->nheaders,
		.resource = s->resource,
		.nresource = s->nresource,
		.ca_file = s->ca_file,
		.timeout_ns = s->timeout_ns,
		.queue_max = s->queue_max ? s->queue_max : OTEL_DEFAULT_BSP_QUEUE,
		.batch_max = s->batch_max ? s->batch_max : OTEL_DEFAULT_BSP_BATCH,
		.interval_ns = s->delay_ns ? s->delay_ns : OTEL_DEFAULT_BSP_DELAY_MS * NS_PER_MS,
	};
	exporter = otlp_exporter_start(&cfg, why);
	return exporter ? 0 : -1;
}

void trace_shutdown(void)
{
	otlp_exporter_stop(exporter, TRACE_FLUSH_NS);
	exporter = NULL;
}

bool trace_exporting(void)
{
	return exporter != NULL;
}

static void set_flags(struct trace_msg *t)
{
	bool sampled = otel_sample(&sampler, t->ctx.trace_id, t->has_parent,
				   (t->ctx.flags & TRACEPARENT_FLAG_SAMPLED) != 0);
	t->ctx.flags = sampled ? TRACEPARENT_FLAG_SAMPLED : 0;
	t->recording = sampled && exporter;
	hex_encode(t->ctx.trace_id, 16, t->trace_id);
}

void trace_msg_begin(struct trace_msg *t, const char *tp, size_t tplen, const char *ts,
		     size_t tslen)
{
	memset(t, 0, sizeof *t);
	t->start_ns = now_wall_ns();
	struct traceparent in;
	if (tp && traceparent_parse(tp, tplen, &in) == 0) {
		t->ctx = in;
		memcpy(t->parent_id, in.span_id, 8);
		t->has_parent = true;
		t->from_entry = true;
		traceparent_format(&in, t->stored);
		if (ts && traceparent_state_valid(ts, tslen))
			t->state = xstrndup(ts, tslen);
	} else {
		traceparent_random(t->ctx.trace_id, 16);
	}
	traceparent_random(t->ctx.span_id, 8);
	set_flags(t);
	if (!t->from_entry) {
		/* A new root: the next delivery continues from this span. */
		traceparent_format(&t->ctx, t->stored);
	}
}

void trace_msg_adopt(struct trace_msg *t, const char *stored)
{
	struct traceparent st;
	if (t->from_entry || !stored || traceparent_parse(stored, strlen(stored), &st) < 0)
		return;
	memcpy(t->ctx.trace_id, st.trace_id, 16);
	memcpy(t->parent_id, st.span_id, 8);
	t->has_parent = true;
	t->ctx.flags = st.flags;
	snprintf_(t->stored, sizeof t->stored, "%s", stored);
	set_flags(t);
}

/* A span of ctx (its trace and span ids) under parent (NULL: a root),
 * from start to now. */
static void span_of(struct otlp_span *s, const struct traceparent *ctx, const uint8_t *parent,
		    const char *state, int kind, int64_t start)
{
	*s = (struct otlp_span){.has_parent = parent != NULL,
				.trace_state = state,
				.kind = kind,
				.start_ns = start,
				.end_ns = now_wall_ns()};
	memcpy(s->trace_id, ctx->trace_id, 16);
	memcpy(s->span_id, ctx->span_id, 8);
	if (parent)
		memcpy(s->parent_id, parent, 8);
}

void trace_msg_end(struct trace_msg *t, const char *stream, const char *group,
		   const char *message_id, const char *outcome, const char *error)
{
	if (!t->recording)
		return;
	t->recording = false; /* once */
	struct otlp_span s;
	span_of(&s, &t->ctx, t->has_parent ? t->parent_id : NULL, t->state, OTLP_KIND_CONSUMER,
		t->start_ns);
	s.name[0] = "process ";
	s.name[1] = stream;
	otlp_span_attr_str(&s, "messaging.system", "redis");
	otlp_span_attr_str(&s, "messaging.operation.type", "process");
	otlp_span_attr_str(&s, "messaging.destination.name", stream);
	otlp_span_attr_str(&s, "messaging.consumer.group.name", group);
	otlp_span_attr_str(&s, "messaging.message.id", message_id);
	otlp_span_attr_str(&s, "relay.outcome", outcome);
	if (error) {
		s.status = OTLP_STATUS_ERROR;
		s.status_message = error;
	}
	otlp_exporter_submit(exporter, &s);
}

void trace_msg_free(struct trace_msg *t)
{
	free(t->state);
	t->state = NULL;
}

void trace_inv_begin(const struct trace_msg *m, struct trace_inv *out)
{
	memset(out, 0, sizeof *out);
	out->ctx = m->ctx;
	traceparent_random(out->ctx.span_id, 8);
	out->start_ns = now_wall_ns();
	traceparent_format(&out->ctx, out->traceparent);
}

void trace_inv_end(const struct trace_msg *m, const struct trace_inv *inv,
		   const struct trace_inv_result *r)
{
	if (!m->recording)
		return;
	struct otlp_span s;
	span_of(&s, &inv->ctx, m->ctx.span_id, m->state, OTLP_KIND_INTERNAL, inv->start_ns);
	s.name[0] = "invoke ";
	s.name[1] = r->function;
	s.name[2] = "/";
	s.name[3] = r->handler;
	otlp_span_attr_str(&s, "relay.function", r->function);
	otlp_span_attr_str(&s, "relay.handler", r->handler);
	otlp_span_attr_int(&s, "relay.attempt", r->attempt);
	otlp_span_attr_int(&s, "relay.exit_code", r->exit_code);
	otlp_span_attr_str(&s, "relay.outcome", r->outcome);
	if (r->start_mode)
		otlp_span_attr_str(&s, "relay.start_mode", r->start_mode);
	if (r->error) {
		s.status = OTLP_STATUS_ERROR;
		s.status_message = r->error;
	}
	otlp_exporter_submit(exporter, &s);
}
