/*
 * The container runner: one handler invocation in one hardened container.
 *
 * runner_invoke() performs, on the calling thread:
 *
 *   1. resolve each secret reference through the provider (immediately
 *      before the container exists, so a rotation shows on the very next
 *      invocation) and build Env = template env + secrets + RELAY_HANDLER;
 *   2. POST /containers/create with AutoRemove, Env, User 10001:10001, the
 *      seven relay.* labels (bounded, see runner_label_value) plus
 *      relay.instance (runner_instance_id), relay.stream and relay.group
 *      (runner_set_stream_group), relay.local=invoke for relay function
 *      invoke (runner_set_local) and relay.standby on a standby
 *      container, Memory and
 *      MemorySwap 128 MiB, NanoCpus 1e9 (a parked standby container runs
 *      at RUNNER_PARKED_NANO_CPUS for a while), PidsLimit 128, CapDrop ALL,
 *      ReadonlyRootfs, Tmpfs /tmp "rw,noexec,nosuid,size=64m", SecurityOpt
 *      no-new-privileges, Runtime when RELAY_OCI_RUNTIME is set
 *      (runner_set_oci_runtime), OpenStdin/StdinOnce/Attach*, Tty false. Secret
 *      values exist only in that request: the JSON text and the strings it
 *      was made of are zeroed and freed right after the call;
 *   3. attach (stdin, stdout, stderr) and register a wait for the next exit,
 *      both before start, so no output and no exit status can be missed
 *      (AutoRemove may delete the container as soon as it exits);
 *   4. start; write the event to stdin and half-close it (the handler sees
 *      EOF); demultiplex stdout/stderr and forward each line as it arrives;
 *   5. read the exit status from the wait. Exit 0 is success. Exit 137
 *      (SIGKILL) is checked against the daemon's event log: when it has an
 *      "oom" event for the container the failure reads "exit status 137:
 *      killed: out of memory (limit 128 MiB)" instead of the last stderr
 *      line (the container is auto-removed, State.OOMKilled is gone).
 *
 * Time. Every Engine API call of an invocation belongs to one of three
 * phases, each with one deadline that all of its calls share (see "Time
 * bounds" below): setup (secrets, create, attach, wait, start) ends at most
 * RUNNER_SETUP_TIMEOUT_MS after runner_invoke was entered; the handler phase
 * (stdin, output, exit status) is the rule's timeout from the daemon's
 * answer to the start, when the handler's process runs (so a slow daemon
 * does not eat into the handler's time); teardown (forced removal, retried) ends at most
 * RUNNER_TEARDOWN_TIMEOUT_MS after it began. When the handler deadline
 * passes the container is removed and the outcome is RUNNER_TIMEOUT. The
 * caller's cancellation callback is polled every RUNNER_POLL_MS; when it
 * answers true the container is removed (RUNNER_CANCELLED). Explicit
 * removal (DELETE ?force=1, which kills a running container first) happens
 * only on those paths and when create, attach, start or wait fail; it is
 * idempotent (404 and "removal ... already in progress" are success). A
 * container that exits on its own is left to AutoRemove.
 *
 * Names. Each container is created with a name chosen before the request
 * (runner_container_name: relay-<function>-<handler>-<message>-<random>),
 * so a create whose answer never arrives (a timeout, a dropped connection)
 * can still be found: the runner removes it by that name, retrying until
 * the teardown deadline, because the daemon may finish creating it after
 * the runner gave up waiting. Its Env holds secret values, which must not
 * stay readable through docker inspect. Should even that fail, the
 * container carries the relay.* labels and the next startup orphan sweep
 * removes it.
 *
 * Output forwarding. Each line of the handler's stdout or stderr is written
 * with log_raw() (one write, whatever LOG_LEVEL says) as
 *
 *   relay: function "<f>" handler "<h>": <line>
 *
 * (runner_format_prefix; the spec's Try-it format: the message id is on the
 * consumer's "matched" and "executed" lines around it, log.h log_say). Lines keep their order within each stream; a line
 * longer than RUNNER_LINE_MAX bytes is forwarded in pieces of at most that
 * size (cut at a UTF-8 boundary), so a handler printing without newlines
 * cannot grow Relay's memory. A last line without a newline is forwarded
 * when the stream ends.
 *
 * Thread-safety: runner_invoke uses the caller's struct docker (one per
 * thread, docker.h) and opens two short-lived connections of its own
 * (attach and wait). Any number of threads may invoke at once, each with its
 * own handle. It holds image_hold(in->image) for the duration. Metrics are
 * the caller's: the consumer alone moves in_flight_invocations (once per
 * invocation) and records the handler metrics.
 */
#ifndef RELAY_RUNNER_H
#define RELAY_RUNNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/docker.h"
#include "model/secret.h"
#include "model/template.h"

/* Hardening, as the spec fixes it. */
#define RUNNER_MEMORY_BYTES 134217728LL /* 128 MiB */
#define RUNNER_NANO_CPUS 1000000000LL	/* 1 CPU */
#define RUNNER_PIDS_LIMIT 128
#define RUNNER_TMPFS_OPTIONS "rw,noexec,nosuid,size=64m"
/* The parking CPU bound: a container started ahead of its event (standby,
 * runner_park) is created and started like any other, at RUNNER_NANO_CPUS,
 * so that the runtime's set-up and the module's import are not slowed (a
 * Python interpreter started under it is ready 2 s later instead of 0.1 s);
 * runner_parked_bound() lowers it to this, 5 ms of CPU time every 100 ms
 * whatever the module does, and runner_dispatch() gives it RUNNER_NANO_CPUS
 * back before its event is written (both through POST
 * /containers/{id}/update, docker_update_cpus). The standby pool bounds
 * each container STANDBY_IMPORT_MS after its start (standby.h). */
#define RUNNER_PARKED_NANO_CPUS 50000000LL /* 0.05 CPU */

/* Longest forwarded line piece and longest label value, in bytes. */
#define RUNNER_LINE_MAX (16 * 1024)
#define RUNNER_LABEL_MAX 128
/* How often a running invocation checks its cancellation callback. */
#define RUNNER_POLL_MS 100
/* Bound on the question "was it killed for memory?" after exit status 137. */
#define RUNNER_OOM_QUERY_MS 5000L
/* Bound on single Engine API calls outside an invocation (the sweep's). */
#define RUNNER_API_TIMEOUT_MS 30000L
/* Bound on the startup orphan sweep. */
#define RUNNER_SWEEP_TIMEOUT_MS 30000
/* Longest container name runner_container_name writes (without the NUL). */
#define RUNNER_NAME_MAX 127

/*
 * Time bounds of one invocation, and the running marker
 * -----------------------------------------------------
 * The running marker (invocation.h) keeps a reclaim on any worker from
 * running an invocation again until its deadline. It must outlive every path
 * the invocation can take, including a daemon that answers each call at the
 * last moment, or two containers would run the same invocation at once. So
 * the deadline is the sum of the bounds that the code on that path enforces,
 * phase by phase, from the instant the consumer computes it (just before
 * TryStart):
 *
 *   phase     what runs                          bound                       enforced by
 *   claim     TryStart (one Redis script)        RUNNER_CLAIM_TIMEOUT_MS     the consumer worker's Redis
 *                                                                            command timeout
 *   connect   the worker thread's first Docker   DOCKER_OPEN_TIMEOUT_MS      docker_open (GET /version),
 *             connection (executor.c)                                        called by the executor
 *   setup     secrets, create, attach, wait      RUNNER_SETUP_TIMEOUT_MS     runner: one deadline from
 *             registration, start (a standby                                 entry, shared by these calls
 *             dispatch: the CPU lift, and when
 *             it fails the on-demand setup)
 *   handler   stdin, output, exit status         the rule's timeout          runner: one deadline from
 *             (a standby dispatch: from the      (runner_timeout_ns)         the start's answer
 *             dispatch)
 *   teardown  forced removal by id or by name,   RUNNER_TEARDOWN_TIMEOUT_MS  runner: one deadline from
 *             retried                                                        its start, shared by tries
 *             (or, after an exit 137, the                                    (RUNNER_OOM_QUERY_MS, less
 *             out-of-memory question)                                        than the teardown bound)
 *   record    the outcome marker (ok, backoff)   RUNNER_RECORD_TIMEOUT_MS    the consumer worker's Redis
 *                                                                            command timeout
 *   slack     CPU work between bounded calls     RUNNER_LOCAL_SLACK_MS
 *             workers' wall clocks disagreeing   RUNNER_CLOCK_SKEW_MS
 *
 * invocation_running_deadline() (invocation.h) adds them up; it is the only
 * place the marker deadline is computed. runner_worst_case_ns() is the part
 * the runner itself owns (setup + handler + teardown + local slack). Every
 * path ends within it: a setup failure skips the handler phase, a handler
 * that exits on its own skips teardown, and no call of a phase may outlive
 * that phase's deadline (each gets the time left, at least 1 ms, never
 * "no timeout"). Changing a bound here changes both at once.
 *
 * The cost is recovery latency: a worker that crashed mid-invocation is
 * waited out for up to the whole sum (1m37s plus the rule's timeout)
 * before a reclaim may run the handler again. That is the price of never
 * running it twice concurrently.
 */
#define RUNNER_CLAIM_TIMEOUT_MS 10000L
#define RUNNER_SETUP_TIMEOUT_MS 30000L
#define RUNNER_TEARDOWN_TIMEOUT_MS 30000L
#define RUNNER_RECORD_TIMEOUT_MS 10000L
#define RUNNER_LOCAL_SLACK_MS 2000L
#define RUNNER_CLOCK_SKEW_MS 5000L
/* Pause between two removal tries within the teardown deadline. */
#define RUNNER_REMOVE_RETRY_MS 250

enum runner_outcome {
	RUNNER_SUCCESS,	  /* exit status 0 */
	RUNNER_FAILURE,	  /* non-zero exit status */
	RUNNER_TIMEOUT,	  /* killed at its timeout: a failure */
	RUNNER_ERROR,	  /* could not run: a secret, the daemon, the image ...: a failure */
	RUNNER_CANCELLED, /* shutdown asked for it: not the handler's fault */
};

/* "success", "failure", "timeout", "error", "cancelled". */
const char *runner_outcome_name(enum runner_outcome o);

/* What the runner is asked to run: one invocation of one handler in a
 * container. Everything is borrowed for the duration of the call. */
struct runner_request {
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
	/* Phase bounds; 0 = RUNNER_SETUP_TIMEOUT_MS / RUNNER_TEARDOWN_TIMEOUT_MS.
	 * A value can only shorten its bound (larger ones are cut to it), so
	 * the marker deadline holds whatever is set here. Tests only. */
	long setup_timeout_ms;
	long teardown_timeout_ms;
	/* Prepared ahead of its event (runner_park): labelled
	 * relay.standby=true, named relay-<f>-<h>-standby-<random>. */
	bool standby;
	/* A warm container (runner_warm_start): Env RELAY_WARM=1, labelled
	 * relay.warm=true, named relay-<f>-<h>-warm-<random>. */
	bool warm;
};

struct runner_result {
	enum runner_outcome outcome;
	int exit_code;	/* the container's status; -1 when there is none */
	double seconds; /* from create to exit (or to giving up) */
	char *error;	/* NULL on success; else malloc'd, naming function and
			       handler (and the secret reference, never a value) */
	/* RUNNER_ERROR only: the handler never started because the daemon
	 * could not be reached (no answer to create or attach, or start never
	 * sent): the invocation did not happen and is not an attempt. */
	bool not_run;
	char container_id[72]; /* "" when none was created */
	/* The name it was created under (runner_container_name); "" when the
	 * invocation ended before create. */
	char container_name[RUNNER_NAME_MAX + 1];
};

/* Runs one invocation; fills *out (release with runner_result_free).
 * Returns 0 on RUNNER_SUCCESS, -1 otherwise. */
int runner_invoke(struct docker *d, const struct runner_request *in, struct runner_result *out);
void runner_result_free(struct runner_result *r);

/*
 * Standby containers (standby.h)
 * ------------------------------
 * runner_park() does everything runner_invoke() does before the event
 * exists: resolve the secrets, create (in->standby set: the label
 * relay.standby=true; no message, event id or event name, which Docker
 * cannot add to a container later), attach, register the wait and start,
 * all within the setup bound. The bootstraps import the handler's module
 * and resolve its function before reading stdin, so the parked container
 * waits, ready, in its read. Nothing of its output is read until dispatch:
 * what the module prints at import waits in the socket and is forwarded
 * with the invocation's lines.
 *
 * runner_parked_bound() puts a parked container under the parking CPU
 * bound (RUNNER_PARKED_NANO_CPUS). runner_dispatch() first lifts a bounded
 * one back to RUNNER_NANO_CPUS, within the setup bound; then it is
 * runner_invoke()'s
 * handler phase in that container: the rule's timeout counts from here (not
 * from the container's start), the event is written and stdin half-closed,
 * output forwarded, the exit status read and classified exactly as on
 * demand; *pp is consumed (set to NULL). When the lift fails (logged as a
 * WARN) no event is written: the invocation runs on demand, its setup
 * deadline counted from the dispatch, and *pp is left for the caller to
 * discard (standby_discard). Its invocation_result.seconds counts from
 * dispatch.
 */
struct runner_parked;

/* 0 with *out, or -1 with *err (malloc'd, naming function and handler). */
int runner_park(struct docker *d, const struct runner_request *in, struct runner_parked **out,
		char **err);
/* d: the calling thread's handle (the lift; removal on timeout or
 * cancellation). */
int runner_dispatch(struct docker *d, struct runner_parked **pp, const struct runner_request *in,
		    struct runner_result *out);
/* Lowers p's container to RUNNER_PARKED_NANO_CPUS within timeout_ms (no
 * call when it is already); 0, or -1 with the message in docker_errmsg(d).
 * Not while another thread may dispatch p. */
int runner_parked_bound(struct docker *d, struct runner_parked *p, long timeout_ms);
/* Without blocking: 1 when p's container has exited (its wait answered),
 * 2 when its attach connection broke, 0 while it waits for its event. */
int runner_parked_gone(const struct runner_parked *p);
/* Forced removal within timeout_ms (at most the teardown bound; d NULL:
 * none, the orphan sweep's job), then frees p (NULL is fine). Its attach
 * and wait connections are closed first: a daemon blocked copying output
 * nobody reads (a module that printed megabytes at import) does not finish
 * the removal until the deadline. */
void runner_parked_discard(struct docker *d, struct runner_parked *p, long timeout_ms);
const char *runner_parked_id(const struct runner_parked *p);

/*
 * Warm containers (warm.h; docs/warm-protocol.md)
 * -----------------------------------------------
 * One container serving many invocations of one function version and
 * handler, one at a time, through the bootstrap's warm loop.
 */
struct runner_warm;

/* Creates, attaches, waits and starts a container like runner_park, with
 * in->warm set: Env gets RELAY_WARM=1 (the bootstrap's warm loop), the label
 * relay.warm=true, name relay-<f>-<h>-warm-<random>; no message/event ids.
 * Within the setup bound. 0 with *out, or -1 with *err (malloc'd, naming
 * function and handler; never a secret value). */
int runner_warm_start(struct docker *d, const struct runner_request *in, struct runner_warm **out,
		      char **err);

/* One invocation in w (in: the same function/handler/image; its payload,
 * ids, timeout, cancelled callback). Forwards the handler's stdout/stderr
 * lines with in's prefix exactly as runner_invoke does, until the
 * bootstrap's end-of-invocation frames have been seen on both streams.
 * Fills *out as runner_invoke would for the same handler behaviour:
 *  - returned normally: RUNNER_SUCCESS, exit_code 0;
 *  - raised / rejected: RUNNER_FAILURE, exit_code 1, error
 *    "function \"f\" handler \"h\" failed: exit status 1: <the line the
 *    fresh bootstrap would print on stderr>" (identical to fresh mode);
 *  - the process exited (sys.exit, os._exit, process.exit, crash, OOM):
 *    classified exactly as a fresh container's exit status (0 success,
 *    137 + oom event "killed: out of memory", else "exit status N: <last
 *    stderr line>"); w is dead afterwards;
 *  - timeout: the container is removed, RUNNER_TIMEOUT, w dead;
 *  - cancelled: removed, RUNNER_CANCELLED, w dead;
 *  - the attach connection broke / protocol violation: RUNNER_ERROR
 *    (not_run only if the request was never written), w dead.
 * The rule's timeout counts from the call. Returns 0 on RUNNER_SUCCESS. */
int runner_warm_invoke(struct docker *d, struct runner_warm *w, const struct runner_request *in,
		       struct runner_result *out);

/* Whether w can serve another invocation (false once dead as above). */
bool runner_warm_alive(const struct runner_warm *w);
/* Without blocking, while idle: 1 exited, 2 attach connection broke, 0 ok.
 * May read and forward-or-drop output printed while idle (see
 * docs/warm-protocol.md). */
int runner_warm_gone(struct runner_warm *w);
/* Idle CPU bound: lower to RUNNER_PARKED_NANO_CPUS / lift back to
 * RUNNER_NANO_CPUS (docker_update_cpus); no call when already there.
 * runner_warm_invoke lifts a bounded container itself before writing. */
int runner_warm_bound(struct docker *d, struct runner_warm *w, long timeout_ms);
/* Forced removal within timeout_ms (d NULL: none), then frees w (NULL ok). */
void runner_warm_discard(struct docker *d, struct runner_warm *w, long timeout_ms);
const char *runner_warm_id(const struct runner_warm *w);

/*
 * Startup orphan sweep: removes (DELETE ?force=1) every container, running
 * or not, labelled relay.function whose relay.hostname label equals
 * hostname (NULL: runner_hostname()) and whose relay.instance label is not
 * keep_instance (NULL: whatever the instance), and nothing else; once
 * runner_set_stream_group ran, also nothing whose relay.stream and
 * relay.group labels name another stream or group (a container without
 * them, made by a Relay from before those labels, is swept). The caller
 * holds the consumer name's liveness record (liveness.h) first, so every
 * other instance of this stream, group and hostname is gone. Bounded by
 * timeout_ms in total. *removed (may be NULL) counts removals. Returns 0, or
 * -1 with *err when listing failed, time ran out, or a removal failed.
 */
int runner_sweep_orphans(struct docker *d, const char *hostname, const char *keep_instance,
			 int timeout_ms, size_t *removed, char **err);

/* Idempotent forced removal of one container: 0 when it is gone or going
 * (204, 404, 409 "already in progress"), -1 with *err otherwise. */
int runner_remove_container(struct docker *d, const char *id, char **err);

/* The rule's timeout as the runner enforces it: <= 0 means
 * TEMPLATE_DEFAULT_TIMEOUT_NS, above TEMPLATE_MAX_TIMEOUT_NS is cut to it. */
int64_t runner_timeout_ns(int64_t timeout_ns);

/* The longest runner_invoke(in) can take on any path (see "Time bounds"):
 * setup + handler timeout + teardown + RUNNER_LOCAL_SLACK_MS, with in's
 * shortened bounds (in may be NULL: the full ones, default timeout). */
int64_t runner_worst_case_ns(const struct runner_request *in);

/* gethostname(), read once per process (also the consumer name). */
const char *runner_hostname(void);
/* This process's instance id: RUNNER_INSTANCE_LEN lowercase hex digits
 * (128 random bits), made once per process. Every execution container
 * carries it as relay.instance; the liveness record (liveness.h) holds it. */
#define RUNNER_INSTANCE_LEN 32
const char *runner_instance_id(void);
/* The stream and group this process consumes: from the call on, every
 * container carries them as relay.stream and relay.group, and the sweep
 * leaves containers labelled with others alone. Called once by relay start
 * before any container exists; not thread-safe. */
void runner_set_stream_group(const char *stream, const char *group);
/* RELAY_OCI_RUNTIME: every container from here on gets HostConfig.Runtime
 * = name (validated by config.c; relay start also checks it against the
 * daemon's GET /info). NULL or "": none sent, the daemon's default runtime.
 * Call before any container exists. */
void runner_set_oci_runtime(const char *name);

/* relay function invoke: every container gets the label relay.local=invoke,
 * which the orphan sweep of a relay start on the same host leaves alone
 * (invoke removes its own, also on SIGINT/SIGTERM). Call before any. */
void runner_set_local(void);

/* ---- exposed for tests (pure, no I/O) -------------------------------- */

/* printable_copy (util.h) bounded to RUNNER_LABEL_MAX. */
char *runner_label_value(const char *s, char *out, size_t outsz);

/*
 * A fresh container name for in: "relay-<function>-<handler>-<message>-<16
 * hex digits from getrandom>". Each part keeps [A-Za-z0-9_.-] and turns any
 * other byte into '_', and is cut (function and handler to 32 bytes, the
 * message id to 24; "none" when there is none), so the name always matches
 * Docker's [a-zA-Z0-9][a-zA-Z0-9_.-]+ and fits RUNNER_NAME_MAX. out must
 * hold RUNNER_NAME_MAX + 1 bytes. Returns out.
 */
char *runner_container_name(const struct runner_request *in, char *out);

/* The forwarding prefix for in (see above), malloc'd. */
char *runner_format_prefix(const struct runner_request *in);

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
	/* While fn runs: whether the piece ends without a newline (cut at
	 * RUNNER_LINE_MAX, or flushed). */
	bool cut;
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
