/*
 * The container runner: one handler invocation in one hardened container.
 *
 * runner_invoke() performs, on the calling thread:
 *
 *   1. resolve each secret reference through the provider (immediately
 *      before the container exists, so a rotation shows on the very next
 *      invocation) and build Env = template env + secrets + RELAY_HANDLER;
 *   2. POST /containers/create with AutoRemove, Env, User 10001:10001, the
 *      seven relay.* labels (bounded, see runner_label_value), Memory and
 *      MemorySwap 128 MiB, NanoCpus 1e9, PidsLimit 128, CapDrop ALL,
 *      ReadonlyRootfs, Tmpfs /tmp "rw,noexec,nosuid,size=64m", SecurityOpt
 *      no-new-privileges, OpenStdin/StdinOnce/Attach*, Tty false. Secret
 *      values exist only in that request: the JSON text and the strings it
 *      was made of are zeroed and freed right after the call;
 *   3. attach (stdin, stdout, stderr) and register a wait for the next exit,
 *      both before start, so no output and no exit status can be missed
 *      (AutoRemove may delete the container as soon as it exits);
 *   4. start; write the event to stdin and half-close it (the handler sees
 *      EOF); demultiplex stdout/stderr and forward each line as it arrives;
 *   5. read the exit status from the wait. Exit 0 is success.
 *
 * The rule's timeout runs from just before start. When it expires the
 * container is killed and removed, and the outcome is RUNNER_TIMEOUT. The
 * caller's cancellation callback is polled every RUNNER_POLL_MS; when it
 * answers true the container is killed and removed (RUNNER_CANCELLED).
 * Explicit removal (DELETE ?force=1) happens only on those paths and when
 * attach, start or wait fail; it is idempotent (404 and "removal ... already
 * in progress" are success). A container that exits on its own is left to
 * AutoRemove.
 *
 * Output forwarding. Each line of the handler's stdout or stderr is written
 * with log_raw() (one write, whatever LOG_LEVEL says) as
 *
 *   relay: function "<f>" handler "<h>": <line>
 *   relay: function "<f>" handler "<h>" message "<msg-id>" event "<event-id>": <line>
 *
 * the message and event parts each present when the invocation has one
 * (runner_format_prefix). Lines keep their order within each stream; a line
 * longer than RUNNER_LINE_MAX bytes is forwarded in pieces of at most that
 * size (cut at a UTF-8 boundary), so a handler printing without newlines
 * cannot grow Relay's memory. A last line without a newline is forwarded
 * when the stream ends.
 *
 * Thread-safety: runner_invoke uses the caller's struct docker (one per
 * thread, docker.h) and opens two short-lived connections of its own
 * (attach and wait). Any number of threads may invoke at once, each with its
 * own handle. It holds image_hold(in->image) for the duration and moves the
 * in_flight_invocations gauge; handler metrics are the caller's.
 */
#ifndef RELAY_RUNNER_H
#define RELAY_RUNNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "docker.h"
#include "secret.h"
#include "template.h"

/* Hardening, as the spec fixes it. */
#define RUNNER_MEMORY_BYTES 134217728LL /* 128 MiB */
#define RUNNER_NANO_CPUS 1000000000LL	/* 1 CPU */
#define RUNNER_PIDS_LIMIT 128
#define RUNNER_TMPFS_OPTIONS "rw,noexec,nosuid,size=64m"

/* Longest forwarded line piece and longest label value, in bytes. */
#define RUNNER_LINE_MAX (16 * 1024)
#define RUNNER_LABEL_MAX 128
/* How often a running invocation checks its cancellation callback. */
#define RUNNER_POLL_MS 100
/* Bounds on single Engine API calls made by the runner. */
#define RUNNER_API_TIMEOUT_MS 30000L
/* Bound on the startup orphan sweep. */
#define RUNNER_SWEEP_TIMEOUT_MS 30000

enum runner_outcome {
	RUNNER_SUCCESS,	  /* exit status 0 */
	RUNNER_FAILURE,	  /* non-zero exit status */
	RUNNER_TIMEOUT,	  /* killed at its timeout: a failure */
	RUNNER_ERROR,	  /* could not run: a secret, the daemon, the image ...: a failure */
	RUNNER_CANCELLED, /* shutdown asked for it: not the handler's fault */
};

/* "success", "failure", "timeout", "error", "cancelled". */
const char *runner_outcome_name(enum runner_outcome o);

/* One invocation. Everything is borrowed for the duration of the call. */
struct invocation {
	const char *function; /* required */
	const char *handler;  /* required; becomes RELAY_HANDLER */
	const char *image;    /* required: "relay-fn-<f>:<tag>" */
	int64_t timeout_ns;   /* <= 0: TEMPLATE_DEFAULT_TIMEOUT_NS */
	/* The template's env (literal values) and secrets (name -> reference). */
	const struct env_var *env;
	size_t nenv;
	const struct env_var *secrets;
	size_t nsecrets;
	const struct secret_provider *provider; /* required when nsecrets > 0 */
	/* The event JSON written to stdin. */
	const void *payload;
	size_t payload_len;
	/* Diagnostics (labels, output prefix); NULL when unknown. */
	const char *message_id;
	const char *event_id;
	const char *event_name;
	const char *hostname; /* NULL: runner_hostname() */
	/* Polled every RUNNER_POLL_MS while the container runs; NULL = never. */
	bool (*cancelled)(void *ctx);
	void *cancel_ctx;
};

struct invocation_result {
	enum runner_outcome outcome;
	int exit_code;	       /* the container's status; -1 when there is none */
	double seconds;	       /* from create to exit (or to giving up) */
	char *error;	       /* NULL on success; else malloc'd, naming function and
			       handler (and the secret reference, never a value) */
	char container_id[72]; /* "" when none was created */
};

/* Runs one invocation; fills *out (release with invocation_result_free).
 * Returns 0 on RUNNER_SUCCESS, -1 otherwise. */
int runner_invoke(struct docker *d, const struct invocation *in, struct invocation_result *out);
void invocation_result_free(struct invocation_result *r);

/*
 * Startup orphan sweep: removes (DELETE ?force=1) every container, running
 * or not, labelled relay.function whose relay.hostname label equals
 * hostname (NULL: runner_hostname()), and nothing else. Bounded by
 * timeout_ms in total. *removed (may be NULL) counts removals. Returns 0, or
 * -1 with *err when listing failed, time ran out, or a removal failed.
 */
int runner_sweep_orphans(struct docker *d, const char *hostname, int timeout_ms, size_t *removed,
			 char **err);

/* Idempotent forced removal of one container: 0 when it is gone or going
 * (204, 404, 409 "already in progress"), -1 with *err otherwise. */
int runner_remove_container(struct docker *d, const char *id, char **err);

/* gethostname(), read once per process (also the consumer name). */
const char *runner_hostname(void);

/* ---- exposed for tests (pure, no I/O) -------------------------------- */

/* Copies s into out (size outsz >= 4) bounded to min(outsz-1,
 * RUNNER_LABEL_MAX) bytes: valid UTF-8 is kept whole, control characters
 * and invalid bytes become '?'. Returns out. */
char *runner_label_value(const char *s, char *out, size_t outsz);

/* The forwarding prefix for in (see above), malloc'd. */
char *runner_format_prefix(const struct invocation *in);

/* Demultiplexer of the attach stream (8-byte frame headers: byte 0 the
 * stream, 1 stdout, 2 stderr; bytes 4-7 the big-endian payload length) into
 * lines, each passed to fn (valid during the call only, without its '\n'). */
typedef void (*runner_line_fn)(void *ctx, int stream, const char *line, size_t len);
struct runner_demux {
	unsigned char hdr[8];
	size_t hdr_len;
	uint32_t frame_left;
	int stream; /* of the current frame: 1 stdout, 2 stderr */
	char *line[2];
	size_t line_len[2];
	runner_line_fn fn;
	void *ctx;
};
void runner_demux_init(struct runner_demux *m, runner_line_fn fn, void *ctx);
void runner_demux_feed(struct runner_demux *m, const void *p, size_t n);
/* Forwards the unterminated last line of each stream. */
void runner_demux_flush(struct runner_demux *m);
void runner_demux_free(struct runner_demux *m);

/* Parses a wait answer body, chunked or not ("1e\r\n{...}\r\n0\r\n\r\n" or
 * "{...}"). Returns 1 with *status (and a malloc'd daemon error in *error
 * when it reported one) once a complete object is there, 0 when more bytes
 * are needed, -1 when it cannot be a wait answer. */
int runner_parse_wait(const char *body, size_t len, int *status, char **error);

#endif
