/*
 * Containers started ahead of their invocation (the contract is in
 * runner.h): standby containers, parked until one event is dispatched to
 * them (runner_park, runner_dispatch, runner_parked_*), and warm
 * containers, which serve one invocation after another over the warm
 * protocol (runner_warm_*, docs/warm-protocol.md). Both start through the
 * fresh container's phases of runner.c (runner_internal.h).
 */
#include "engine/runner.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/duration.h"
#include "base/log.h"
#include "base/util.h"
#include "engine/image.h"
#include "engine/runner_internal.h"
#include "io/warm_frame.h"

/* ---- standby containers ------------------------------------------------ */

struct runner_parked {
	char id[72];
	char name[RUNNER_NAME_MAX + 1];
	char *image; /* held (image_hold) until dispatched or discarded */
	char *function, *handler;
	struct docker_conn *attach, *waitc;
	bool bounded; /* runs at RUNNER_PARKED_NANO_CPUS (runner_parked_bound) */
};

static void parked_free(struct runner_parked *p)
{
	docker_conn_free(p->attach);
	docker_conn_free(p->waitc);
	image_release(p->image);
	free(p->image);
	free(p->function);
	free(p->handler);
	free(p);
}

int runner_park(struct docker *d, const struct runner_request *in, struct runner_parked **out,
		char **err)
{
	*out = NULL;
	struct runner_result res;
	memset(&res, 0, sizeof res);
	if (!in->function || !in->handler || !in->image || !in->standby) {
		*err = xstrdup("standby container without a function, handler or image");
		return -1;
	}
	struct runner_run r;
	runner_run_init(&r, d, in, &res, now_mono_ns());
	int rc = -1;
	if (runner_run_create(&r) == 0 && runner_run_open_streams(&r) == 0 &&
	    runner_run_start(&r, r.setup_deadline) == 0) {
		struct runner_parked *p = xcalloc(1, sizeof *p);
		strlcpy_(p->id, res.container_id, sizeof p->id);
		strlcpy_(p->name, res.container_name, sizeof p->name);
		p->image = xstrdup(in->image);
		image_hold(p->image);
		p->function = xstrdup(in->function);
		p->handler = xstrdup(in->handler);
		p->attach = r.attach;
		p->waitc = r.waitc;
		r.attach = r.waitc = NULL;
		*out = p;
		rc = 0;
	} else {
		*err = res.error ? res.error : xstrdup("cannot start a standby container");
		res.error = NULL;
	}
	runner_run_free(&r);
	runner_result_free(&res);
	return rc;
}

int runner_dispatch(struct docker *d, struct runner_parked **pp, const struct runner_request *in,
		    struct runner_result *out)
{
	struct runner_parked *p = *pp;
	int64_t start = now_mono_ns();
	/* The lift is this invocation's setup phase (it has no create, attach
	 * or wait of its own), and before the event: the handler never runs
	 * under the parked bound. */
	int64_t setup_deadline = start + (int64_t)runner_setup_ms(in) * NS_PER_MS;
	if (p->bounded &&
	    docker_update_cpus(d, p->id, RUNNER_NANO_CPUS, runner_call_ms(setup_deadline)) < 0) {
		log_warn(LOG_ATTRS("function", in->function, "handler", in->handler, "container",
				   p->id, "error", docker_errmsg(d)),
			 "cannot lift the CPU bound of a standby container; the invocation runs on "
			 "demand");
		return runner_invoke_from(d, in, out, start);
	}
	*pp = NULL;
	memset(out, 0, sizeof *out);
	out->exit_code = -1;
	struct runner_run r;
	runner_run_init(&r, d, in, out, start);
	strlcpy_(out->container_id, p->id, sizeof out->container_id);
	strlcpy_(out->container_name, p->name, sizeof out->container_name);
	r.id = out->container_id;
	r.attach = p->attach;
	r.waitc = p->waitc;
	p->attach = p->waitc = NULL;
	r.attach_open = true;
	r.deadline = now_mono_ns() + r.timeout; /* the timeout counts from dispatch */
	runner_run_feed(&r);
	runner_run_classify(&r, runner_run_pump(&r));
	runner_run_free(&r);
	parked_free(p);
	return out->outcome == RUNNER_SUCCESS ? 0 : -1;
}

int runner_parked_bound(struct docker *d, struct runner_parked *p, long timeout_ms)
{
	if (p->bounded)
		return 0;
	if (docker_update_cpus(d, p->id, RUNNER_PARKED_NANO_CPUS, timeout_ms) < 0)
		return -1;
	p->bounded = true;
	return 0;
}

int runner_parked_gone(const struct runner_parked *p)
{
	if (docker_conn_hung_up(p->waitc, true))
		return 1;
	return docker_conn_hung_up(p->attach, false) ? 2 : 0;
}

void runner_parked_discard(struct docker *d, struct runner_parked *p, long timeout_ms)
{
	if (!p)
		return;
	struct runner_request in = {
		.function = p->function, .handler = p->handler, .teardown_timeout_ms = timeout_ms};
	/* Streams first, as in runner_run_classify: what the module printed at
	 * import waits unread in the attach connection, and a daemon blocked
	 * copying more of it to us does not finish the forced removal until
	 * the deadline (20 MB at import: 10 s, the whole shutdown bound). */
	docker_conn_free(p->attach);
	docker_conn_free(p->waitc);
	p->attach = p->waitc = NULL;
	if (d)
		runner_teardown(d, &in, p->id, RUNNER_TEARDOWN_ID);
	parked_free(p);
}

const char *runner_parked_id(const struct runner_parked *p)
{
	return p->id;
}

/* ---- warm containers (docs/warm-protocol.md) ---------------------------- */

/* Bytes of idle output runner_warm_gone reads (and forwards) per call. */
#define WARM_IDLE_READ_MAX (4 * RUNNER_READ_CHUNK)

struct runner_warm {
	char id[72];
	char name[RUNNER_NAME_MAX + 1];
	char *image; /* held (image_hold) until discarded */
	char *function, *handler;
	struct docker_conn *attach, *waitc;
	bool bounded; /* runs at RUNNER_PARKED_NANO_CPUS */
	bool dead;
	/* One demultiplexer for the container's life: a frame header or a
	 * line may straddle two invocations' reads. */
	struct runner_demux demux;
	struct runner_forward fw; /* prefix: function and handler, as runner_invoke's */
	char *chunk;		  /* RUNNER_READ_CHUNK */
	/* The invocation in progress (active), its token and what was seen. */
	bool active, seen_end, seen_result, bad;
	char token[WARM_TOKEN_LEN + 1];
	int status;
	char error[WARM_ERROR_MAX + 1];
	/* Per stream: the start of a frame cut off by RUNNER_LINE_MAX, to be
	 * completed by the next piece; and a scratch line to join them. */
	char carry[2][WARM_FRAME_MAX];
	size_t carry_len[2];
	char *joined; /* WARM_FRAME_MAX + RUNNER_LINE_MAX */
	struct warm_frame frame;
};

static void warm_forward(struct runner_warm *w, int stream, const char *p, size_t n)
{
	runner_forward_line(&w->fw, stream, p, n);
}

/* The demultiplexer's line callback: frames of the active invocation's
 * token end its streams; everything else is output, forwarded exactly as
 * runner_invoke forwards it (while idle too: the prefix names only the
 * function and handler). */
static void warm_line(void *ctx, int stream, const char *line, size_t len)
{
	struct runner_warm *w = ctx;
	int s = stream - 1;
	if (!w->active) {
		warm_forward(w, stream, line, len);
		return;
	}
	const char *p = line;
	size_t n = len;
	if (w->carry_len[s]) {
		memcpy(w->joined, w->carry[s], w->carry_len[s]);
		memcpy(w->joined + w->carry_len[s], line, len);
		p = w->joined;
		n = w->carry_len[s] + len;
		w->carry_len[s] = 0;
	}
	if (w->demux.cut) {
		/* Too long a line (or the end of the stream): a frame may
		 * have started in it and go on in the next piece. */
		size_t t = warm_frame_tail(p, n, w->token);
		if (t < n && n - t < WARM_FRAME_MAX) {
			memmove(w->carry[s], p + t, n - t);
			w->carry_len[s] = n - t;
			n = t;
			if (n == 0)
				return;
		}
		warm_forward(w, stream, p, n);
		return;
	}
	struct warm_frame *f = &w->frame;
	warm_frame_parse(p, n, w->token, f);
	if (f->kind == WARM_PLAIN) {
		warm_forward(w, stream, p, n);
		return;
	}
	if (f->text_len)
		warm_forward(w, stream, p, f->text_len);
	if (f->kind == WARM_END && stream == 2 && !w->seen_end) {
		w->seen_end = true;
	} else if (f->kind == WARM_RESULT && stream == 1 && !w->seen_result) {
		w->seen_result = true;
		w->status = f->status;
		memcpy(w->error, f->error, f->error_len + 1);
	} else {
		w->bad = true;
	}
	if (w->seen_end && w->seen_result)
		w->active = false; /* what follows is the next invocation's, or idle */
}

/* Forwards what a frame's start held back when the stream ends there. */
static void warm_flush(struct runner_warm *w)
{
	runner_demux_flush(&w->demux);
	for (int s = 0; s < 2; s++) {
		if (w->carry_len[s])
			warm_forward(w, s + 1, w->carry[s], w->carry_len[s]);
		w->carry_len[s] = 0;
	}
}

static void warm_free(struct runner_warm *w)
{
	docker_conn_free(w->attach);
	docker_conn_free(w->waitc);
	runner_demux_free(&w->demux);
	buf_free(&w->fw.out);
	image_release(w->image);
	free(w->image);
	free(w->function);
	free(w->handler);
	free(w->chunk);
	free(w->joined);
	free(w);
}

int runner_warm_start(struct docker *d, const struct runner_request *in, struct runner_warm **out,
		      char **err)
{
	*out = NULL;
	struct runner_result res;
	memset(&res, 0, sizeof res);
	if (!in->function || !in->handler || !in->image || !in->warm) {
		*err = xstrdup("warm container without a function, handler or image");
		return -1;
	}
	struct runner_run r;
	runner_run_init(&r, d, in, &res, now_mono_ns());
	int rc = -1;
	if (runner_run_create(&r) == 0 && runner_run_open_streams(&r) == 0 &&
	    runner_run_start(&r, r.setup_deadline) == 0) {
		struct runner_warm *w = xcalloc(1, sizeof *w);
		strlcpy_(w->id, res.container_id, sizeof w->id);
		strlcpy_(w->name, res.container_name, sizeof w->name);
		w->image = xstrdup(in->image);
		image_hold(w->image);
		w->function = xstrdup(in->function);
		w->handler = xstrdup(in->handler);
		w->attach = r.attach;
		w->waitc = r.waitc;
		r.attach = r.waitc = NULL;
		w->chunk = xmalloc(RUNNER_READ_CHUNK);
		w->joined = xmalloc(WARM_FRAME_MAX + RUNNER_LINE_MAX);
		buf_init(&w->fw.out, 4 * (WARM_FRAME_MAX + RUNNER_LINE_MAX) + 4096);
		char *prefix = runner_format_prefix(in);
		buf_append(&w->fw.out, prefix, strlen(prefix));
		w->fw.prefix_len = w->fw.out.len;
		free(prefix);
		runner_demux_init(&w->demux, warm_line, w);
		*out = w; /* the pool logs the start, with its image and time */
		rc = 0;
	} else {
		*err = res.error ? res.error : xstrdup("cannot start a warm container");
		res.error = NULL;
	}
	runner_run_free(&r);
	runner_result_free(&res);
	return rc;
}

/* One read of w's attach stream into the demultiplexer, at most slice ms;
 * false once the stream ended (the process exited). */
static bool warm_read(struct runner_warm *w, int slice)
{
	long n = docker_conn_read(w->attach, w->chunk, RUNNER_READ_CHUNK, slice);
	if (n > 0) {
		runner_demux_feed(&w->demux, w->chunk, (size_t)n);
		return true;
	}
	if (n == DOCKER_CONN_TIMEOUT)
		return true;
	if (n == -1)
		log_debug(LOG_ATTRS("function", w->function, "handler", w->handler, "error",
				    docker_conn_errmsg(w->attach)),
			  "reading the warm container's output failed");
	w->active = false;
	warm_flush(w);
	return false;
}

/* The error of an invocation that ended w without an exit status: w's
 * streams are closed and its container removed. */
static int warm_kill(struct runner_run *r, struct runner_warm *w)
{
	docker_conn_free(w->attach);
	docker_conn_free(w->waitc);
	w->attach = w->waitc = NULL;
	w->dead = true;
	runner_teardown(r->d, r->in, w->id, RUNNER_TEARDOWN_ID);
	return -1;
}

/* The run of one warm invocation: the rule's timeout counts from start. */
static void warm_run_init(struct runner_run *r, struct docker *d, struct runner_warm *w,
			  const struct runner_request *in, struct runner_result *out, int64_t start)
{
	memset(out, 0, sizeof *out);
	out->exit_code = -1;
	strlcpy_(out->container_id, w->id, sizeof out->container_id);
	strlcpy_(out->container_name, w->name, sizeof out->container_name);
	memset(r, 0, sizeof *r);
	r->d = d;
	r->in = in;
	r->out = out;
	r->host = in->hostname ? in->hostname : runner_hostname();
	r->start = start;
	r->start_wall = now_wall_ns();
	r->timeout = runner_timeout_ns(in->timeout_ns);
	r->deadline = start + r->timeout;
	r->status = -1;
	r->chunk = w->chunk;
	r->id = out->container_id;
	buf_init(&r->waitbuf, RUNNER_WAIT_BODY_MAX);
}

/* Lifts a bounded w's CPU and writes the request (header and event), with
 * a new token; 0, or -1 with the failure recorded (not_run: the handler
 * was never called). */
static int warm_send(struct runner_run *r, struct runner_warm *w)
{
	const struct runner_request *in = r->in;
	struct runner_result *out = r->out;
	if (w->dead || !w->attach) {
		out->not_run = true;
		return runner_run_fail(r, "warm container %.12s is gone", w->id);
	}
	if (w->bounded) {
		int64_t setup_deadline = r->start + (int64_t)runner_setup_ms(in) * NS_PER_MS;
		if (docker_update_cpus(r->d, w->id, RUNNER_NANO_CPUS,
				       runner_call_ms(setup_deadline)) < 0) {
			out->not_run = true;
			runner_run_fail(r, "cannot lift the CPU bound of warm container %.12s: %s",
					w->id, docker_errmsg(r->d));
			return warm_kill(r, w);
		}
		w->bounded = false;
	}
	/* Output printed while idle and not yet read is forwarded first, with
	 * the same prefix. The new token starts the invocation. */
	warm_frame_token_new(w->token);
	w->active = true;
	w->seen_end = w->seen_result = w->bad = false;
	w->status = 0;
	w->error[0] = '\0';
	w->fw.last_err[0] = '\0';
	char hdr[WARM_HEADER_MAX];
	size_t hl = warm_frame_request_header(hdr, w->token, in->payload_len);
	if (docker_conn_write_timeout(w->attach, hdr, hl, runner_remaining_ms(r->deadline)) < 0 ||
	    (in->payload_len && docker_conn_write_timeout(w->attach, in->payload, in->payload_len,
							  runner_remaining_ms(r->deadline)) < 0)) {
		/* The bootstrap calls the handler only with the whole request. */
		out->not_run = true;
		runner_run_fail(r, "writing the event to warm container %.12s: %s", w->id,
				docker_conn_errmsg(w->attach));
		w->active = false;
		return warm_kill(r, w);
	}
	return 0;
}

/* Reads w's output until both end frames, a protocol error (w->bad), the
 * process's exit status, the deadline or a cancellation. */
static enum runner_run_end warm_pump(struct runner_run *r, struct runner_warm *w)
{
	bool open = true;
	for (;;) {
		if (runner_is_cancelled(r->in))
			return RUNNER_RUN_CANCELLED;
		int left = runner_remaining_ms(r->deadline);
		if (left == 0)
			return RUNNER_RUN_TIMED_OUT;
		int slice = left < RUNNER_POLL_MS ? left : RUNNER_POLL_MS;
		if (open) {
			open = warm_read(w, slice);
			if (w->bad || (w->seen_end && w->seen_result))
				return RUNNER_RUN_EXITED; /* warm_conclude looks at w first */
			continue;
		}
		r->waitc = w->waitc;
		int rw = runner_pump_wait(r, slice);
		r->waitc = NULL;
		if (rw != 0)
			return rw > 0 ? RUNNER_RUN_EXITED : RUNNER_RUN_WAIT_FAILED;
	}
}

/* The outcome: the bootstrap's result, a protocol error, or (exited, timed
 * out, cancelled, the wait failed) a fresh container's classification; w
 * is dead in every case but the first. */
static void warm_conclude(struct runner_run *r, struct runner_warm *w, enum runner_run_end end)
{
	const struct runner_request *in = r->in;
	if (w->bad) {
		runner_run_fail(r,
				"warm container %.12s broke the protocol (a malformed or misplaced "
				"end-of-invocation frame)",
				w->id);
		w->active = false;
		warm_kill(r, w);
	} else if (w->seen_end && w->seen_result) {
		if (w->status == 0)
			runner_finish(r->out, RUNNER_SUCCESS, 0, NULL);
		else if (w->error[0])
			runner_finish(
				r->out, RUNNER_FAILURE, 1,
				xasprintf(
					"function \"%s\" handler \"%s\" failed: exit status 1: %s",
					in->function, in->handler, w->error));
		else
			runner_finish(
				r->out, RUNNER_FAILURE, 1,
				xasprintf("function \"%s\" handler \"%s\" failed: exit status 1",
					  in->function, in->handler));
	} else {
		w->active = false;
		w->dead = true;
		memcpy(r->fw.last_err, w->fw.last_err, sizeof r->fw.last_err);
		r->attach = w->attach;
		r->waitc = w->waitc;
		w->attach = w->waitc = NULL;
		runner_run_classify(r, end);
		docker_conn_free(r->attach);
		docker_conn_free(r->waitc);
	}
}

int runner_warm_invoke(struct docker *d, struct runner_warm *w, const struct runner_request *in,
		       struct runner_result *out)
{
	int64_t start = now_mono_ns();
	struct runner_run r;
	warm_run_init(&r, d, w, in, out, start);
	if (warm_send(&r, w) == 0)
		warm_conclude(&r, w, warm_pump(&r, w));
	buf_free(&r.waitbuf);
	free(r.err);
	free(r.wait_err);
	out->seconds = (double)(now_mono_ns() - start) / 1e9;
	return out->outcome == RUNNER_SUCCESS ? 0 : -1;
}

bool runner_warm_alive(const struct runner_warm *w)
{
	return w && !w->dead && w->attach && w->waitc;
}

int runner_warm_gone(struct runner_warm *w)
{
	if (!runner_warm_alive(w))
		return 1;
	if (docker_conn_hung_up(w->waitc, true)) {
		w->dead = true;
		return 1;
	}
	/* Output printed while idle (a thread or child the handler left
	 * behind): forwarded with the function and handler prefix, at most
	 * WARM_IDLE_READ_MAX bytes a call; the rest waits in the socket. */
	for (size_t got = 0; got < WARM_IDLE_READ_MAX;) {
		if (docker_conn_hung_up(w->attach, false)) {
			w->dead = true;
			return 2;
		}
		if (!docker_conn_hung_up(w->attach, true))
			break;
		long n = docker_conn_read(w->attach, w->chunk, RUNNER_READ_CHUNK, 0);
		if (n == DOCKER_CONN_TIMEOUT)
			break;
		if (n <= 0) {
			warm_flush(w);
			w->dead = true;
			return 2;
		}
		runner_demux_feed(&w->demux, w->chunk, (size_t)n);
		got += (size_t)n;
	}
	return 0;
}

int runner_warm_bound(struct docker *d, struct runner_warm *w, long timeout_ms)
{
	if (w->bounded)
		return 0;
	if (docker_update_cpus(d, w->id, RUNNER_PARKED_NANO_CPUS, timeout_ms) < 0)
		return -1;
	w->bounded = true;
	return 0;
}

void runner_warm_discard(struct docker *d, struct runner_warm *w, long timeout_ms)
{
	if (!w)
		return;
	struct runner_request in = {
		.function = w->function, .handler = w->handler, .teardown_timeout_ms = timeout_ms};
	/* Streams first, as in runner_parked_discard. */
	docker_conn_free(w->attach);
	docker_conn_free(w->waitc);
	w->attach = w->waitc = NULL;
	if (d)
		runner_teardown(d, &in, w->id, RUNNER_TEARDOWN_ID);
	warm_free(w);
}

const char *runner_warm_id(const struct runner_warm *w)
{
	return w ? w->id : "";
}
