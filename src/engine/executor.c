#include "engine/executor.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "io/docker.h"
#include "model/bootstrap.h"
#include "base/log.h"
#include "engine/runner.h"
#include "engine/standby.h"
#include "base/util.h"
#include "engine/warm.h"

static pthread_key_t docker_key;
static pthread_once_t docker_once = PTHREAD_ONCE_INIT;

static void close_docker(void *p)
{
	docker_close(p);
}

static void make_key(void)
{
	pthread_key_create(&docker_key, close_docker);
}

/* This thread's Docker connection, opened on first use. */
static struct docker *thread_docker(char **err)
{
	pthread_once(&docker_once, make_key);
	struct docker *d = pthread_getspecific(docker_key);
	if (d)
		return d;
	if (docker_open(&d, err) < 0)
		return NULL;
	pthread_setspecific(docker_key, d);
	return d;
}

static bool is_cancelled(void *ctx)
{
	const struct executor *e = ctx;
	return e->cancel && atomic_load(e->cancel);
}

/* The payload with the trace line in front (bootstrap.h), malloc'd into
 * *len bytes; NULL without a traceparent. The bootstrap sets TRACEPARENT
 * and TRACESTATE from this line just before it calls the handler: the one
 * way for every start mode alike (a standby or warm container's
 * environment was fixed before the event, and a new container's Env stays
 * the same as theirs). */
static char *traced_payload(const struct invoke_request *req, size_t *len)
{
	if (!req->traceparent)
		return NULL;
	struct buf b;
	buf_init(&b, req->payload_len + 1024);
	buf_appendf(&b, BOOTSTRAP_TRACE_LINE "%s%s%s\n", req->traceparent,
		    req->tracestate ? " " : "", req->tracestate ? req->tracestate : "");
	buf_append(&b, req->payload, req->payload_len);
	*len = b.len;
	return buf_steal(&b);
}

/* Runs in on a warm, standby or new container; its start mode into res. */
static void run_in(struct executor *e, struct docker *d, const struct fn_version *fv,
		   const char *handler, struct runner_request *in, struct runner_result *out,
		   struct invoke_result *res)
{
	if (fv->fn->tpl->warm && e->warm) {
		res->start_mode = "warm";
		warm_invoke(e->warm, d, fv, handler, in, out);
		return;
	}
	standby_begin(e->standby, fv, handler);
	struct runner_parked *parked = standby_take(e->standby, fv, handler);
	res->start_mode = parked ? "standby" : "on_demand";
	if (parked) {
		runner_dispatch(d, &parked, in, out);
		if (parked) { /* not dispatched: it ran on demand */
			res->start_mode = "on_demand";
			standby_discard(e->standby, fv, handler, parked);
		}
	} else
		runner_invoke(d, in, out);
	standby_end(e->standby, fv, handler);
}

void executor_invoke(void *ctx, const struct invoke_request *req, struct invoke_result *res)
{
	struct executor *e = ctx;
	const struct fn_version *fv = req->fv;
	char *err = NULL;
	res->exit_code = -1;
	res->error[0] = '\0';
	if (!fv->image) {
		res->outcome = INVOKE_CANCELLED;
		snprintf_(res->error, sizeof res->error, "function %s has no image", fv->fn->name);
		return;
	}
	struct docker *d = thread_docker(&err);
	if (!d) {
		res->outcome = INVOKE_UNAVAILABLE;
		snprintf_(res->error, sizeof res->error, "function %s handler %s: %s", fv->fn->name,
			  req->handler, err ? err : "cannot reach the Docker daemon");
		free(err);
		return;
	}
	const struct template *t = fv->fn->tpl;
	struct runner_request in = {
		.function = fv->fn->name,
		.handler = req->handler,
		.image = fv->image,
		.timeout_ns = req->timeout_ns,
		.env = t->env,
		.nenv = t->nenv,
		.secrets = t->secrets,
		.nsecrets = t->nsecrets,
		.provider = e->provider,
		.payload = req->payload,
		.payload_len = req->payload_len,
		.message_id = req->message_id,
		.event_id = req->event_id,
		.event_name = req->event_name,
		.cancelled = is_cancelled,
		.cancel_ctx = e,
	};
	struct runner_result out;
	memset(&out, 0, sizeof out);
	size_t tlen = 0;
	char *traced = traced_payload(req, &tlen);
	if (traced) {
		in.payload = traced;
		in.payload_len = tlen;
	}
	run_in(e, d, fv, req->handler, &in, &out, res);
	free(traced);
	res->exit_code = out.exit_code;
	if (out.error)
		snprintf_(res->error, sizeof res->error, "%s", out.error);
	switch (out.outcome) {
	case RUNNER_SUCCESS: res->outcome = INVOKE_OK; break;
	case RUNNER_TIMEOUT: res->outcome = INVOKE_TIMEOUT; break;
	case RUNNER_CANCELLED: res->outcome = INVOKE_CANCELLED; break;
	case RUNNER_FAILURE: res->outcome = INVOKE_FAILED; break;
	case RUNNER_ERROR: res->outcome = out.not_run ? INVOKE_UNAVAILABLE : INVOKE_FAILED; break;
	}
	runner_result_free(&out);
}

bool executor_ready(void *ctx)
{
	(void)ctx;
	char *err = NULL;
	struct docker *d = thread_docker(&err);
	free(err);
	return d && docker_ping(d) == 0;
}
