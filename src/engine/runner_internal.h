/*
 * The container runner's internals, shared by its parts: only
 * src/engine/runner*.c include it (everyone else includes runner.h, the
 * interface).
 *
 *   runner.c         names, labels and the instance id; the demultiplexer
 *                    and the wait answer; the create body (secrets
 *                    resolved); the run of one fresh container: create,
 *                    attach, wait, start, output forwarding, the outcome,
 *                    teardown
 *   runner_parked.c  containers started ahead of their invocation: standby
 *                    (runner_park, runner_dispatch, runner_parked_*) and
 *                    warm (runner_warm_*, docs/warm-protocol.md)
 *   runner_sweep.c   the startup orphan sweep (runner_sweep_orphans)
 */
#ifndef RELAY_RUNNER_INTERNAL_H
#define RELAY_RUNNER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/util.h"
#include "engine/runner.h"

/* Bytes of a wait answer kept at most. */
#define RUNNER_WAIT_BODY_MAX (64u * 1024)
/* Bytes of the last stderr line kept for the failure message. */
#define RUNNER_LAST_ERR_MAX 512
/* Bytes of one read of a container's streams. */
#define RUNNER_READ_CHUNK (64u * 1024)

/* The stream and group of runner_set_stream_group (NULL: none), set once
 * before any container exists; read-only after. */
extern char *runner_scope_stream, *runner_scope_group;

/* ---- time ------------------------------------------------------------ */

/* The invocation's setup bound in ms (its own, capped by
 * RUNNER_SETUP_TIMEOUT_MS). */
long runner_setup_ms(const struct runner_request *in);
/* Milliseconds left until deadline for one call: at least 1 (0 would mean
 * no timeout to docker_request). */
long runner_call_ms(int64_t deadline);
/* Milliseconds left until deadline, rounded up; 0 once it passed. */
int runner_remaining_ms(int64_t deadline);
/* Whether in's cancellation callback says to stop. */
bool runner_is_cancelled(const struct runner_request *in);

/* ---- teardown -------------------------------------------------------- */

enum runner_teardown_kind {
	RUNNER_TEARDOWN_ID,	    /* a container we created: gone when 404 */
	RUNNER_TEARDOWN_NAME_ONCE,  /* the daemon answered create: 404 is final */
	RUNNER_TEARDOWN_NAME_AWAIT, /* create's answer was lost: the daemon may still
				       be creating it, so 404 is retried too */
};

/* Forced removal of ref until it is gone or in's teardown deadline passes:
 * 1 removed (or going), 0 known not to exist, -1 time ran out (logged). */
int runner_teardown(struct docker *d, const struct runner_request *in, const char *ref,
		    enum runner_teardown_kind kind);

/* ---- one invocation ---------------------------------------------------- */

/* Forwards a container's output lines with a prefix, keeping the last
 * stderr line for the failure message. */
struct runner_forward {
	struct buf out; /* prefix + line + '\n', reused */
	size_t prefix_len;
	char last_err[RUNNER_LAST_ERR_MAX + 1];
};

/* The demultiplexer's line callback over a struct runner_forward. */
void runner_forward_line(void *ctx, int stream, const char *line, size_t len);

/*
 * One invocation in progress: what runner_invoke's phases share. The setup
 * phases (runner_run_create, runner_run_open_streams) and runner_run_start
 * return 0 to go on, or -1 after recording the outcome in *out and removing
 * whatever container they left behind; runner_run_pump says how the handler
 * phase ended and runner_run_classify turns that into the outcome;
 * runner_run_free releases everything.
 */
struct runner_run {
	struct docker *d;
	const struct runner_request *in;
	struct runner_result *out;
	const char *host;
	int64_t start;		/* entry into runner_invoke */
	int64_t start_wall;	/* the same instant on the wall clock (events) */
	int64_t setup_deadline; /* start + setup bound: secrets, create, attach, wait */
	int64_t timeout;	/* the rule's timeout (runner_timeout_ns) */
	int64_t deadline;	/* the handler phase's, set just before start */
	const char *id;		/* out->container_id once created */
	struct docker_conn *attach, *waitc;
	bool attach_open; /* until the attach stream ends */
	struct runner_demux demux;
	struct runner_forward fw;
	struct buf waitbuf; /* the wait answer so far */
	int status;	    /* the exit status, once the wait answered */
	char *wait_err;	    /* the daemon's error in the wait answer, or NULL */
	char *err;	    /* why the wait failed (RUNNER_RUN_WAIT_FAILED) */
	char *chunk;	    /* RUNNER_READ_CHUNK bytes, for both streams */
};

/* How the handler phase ended. */
enum runner_run_end {
	RUNNER_RUN_EXITED,	/* the wait answered: an exit status */
	RUNNER_RUN_CANCELLED,	/* the cancellation callback said so */
	RUNNER_RUN_TIMED_OUT,	/* the handler deadline passed */
	RUNNER_RUN_WAIT_FAILED, /* the wait broke off without an exit status (r->err) */
};

/* Records outcome o with exit code code and error (taken) in *out; 0 for
 * RUNNER_SUCCESS, else -1. */
int runner_finish(struct runner_result *out, enum runner_outcome o, int code, char *error);
/* r for in, its setup deadline counted from start; holds in->image. */
void runner_run_init(struct runner_run *r, struct docker *d, const struct runner_request *in,
		     struct runner_result *out, int64_t start);
/* Sets out->seconds and releases everything r holds. */
void runner_run_free(struct runner_run *r);
/* Records RUNNER_ERROR (no exit status) with "function "f" handler "h": "
 * and the formatted reason. Returns -1. */
int runner_run_fail(struct runner_run *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Resolves the secrets and creates the container under a fresh name. */
int runner_run_create(struct runner_run *r);
/* Opens the attach and wait streams, both before start. */
int runner_run_open_streams(struct runner_run *r);
/* Starts the container within deadline. */
int runner_run_start(struct runner_run *r, int64_t deadline);
/* Writes the event to stdin and half-closes it (failures only logged). */
void runner_run_feed(struct runner_run *r);
/* One read of the wait answer, at most slice ms: 0 read on, 1 the answer
 * is in (r->status, r->wait_err), -1 the wait failed (r->err). */
int runner_pump_wait(struct runner_run *r, int slice);
/* Forwards the output, then reads the exit status, until the handler
 * deadline or a cancellation. */
enum runner_run_end runner_run_pump(struct runner_run *r);
/* The outcome of how the handler phase ended; a container that did not
 * exit is removed first. */
void runner_run_classify(struct runner_run *r, enum runner_run_end end);
/* runner_invoke with its setup deadline counted from start. */
int runner_invoke_from(struct docker *d, const struct runner_request *in, struct runner_result *out,
		       int64_t start);

#endif
