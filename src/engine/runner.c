/*
 * The container runner; the contract is in runner.h.
 *
 * Why the wait is registered before start: every execution container has
 * AutoRemove, so a POST /wait issued after the process exited may find the
 * container already deleted (404) and the exit status lost. The docker CLI
 * solves this the same way: wait with condition=next-exit first, start
 * second. The wait rides a raw connection (docker_hijack): the daemon
 * registers the wait and flushes its 200 header at once, then sends the
 * body {"StatusCode":N} when the process exits, so the runner can hold the
 * wait open while it pumps the attach stream on the same thread.
 *
 * Why phases share deadlines instead of each call having its own timeout:
 * the running marker's deadline is a sum of phase bounds (runner.h, "Time
 * bounds"). Per-call timeouts would make the path's length the number of
 * calls times the timeout, which nothing outside the runner can know; one
 * deadline per phase, with every call given only what is left of it, keeps
 * the whole path inside setup + handler + teardown whatever the daemon does.
 *
 * Why secrets are scrubbed by hand: the values pass through jansson strings
 * and the serialised request; both are overwritten before being freed so a
 * later heap dump or reuse does not carry them. Docker itself keeps them in
 * the container's Config.Env, which the spec accepts (visible to docker
 * inspect of that running container only).
 */
#include "engine/runner.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <jansson.h>

#include "base/duration.h"
#include "engine/image.h"
#include "base/log.h"
#include "base/util.h"
#include "io/warm_frame.h"

#define WAIT_BODY_MAX (64u * 1024)
/* Bytes of the last stderr line kept for the failure message. */
#define LAST_ERR_MAX 512
#define READ_CHUNK (64u * 1024)

const char *runner_outcome_name(enum runner_outcome o)
{
	switch (o) {
	case RUNNER_SUCCESS: return "success";
	case RUNNER_FAILURE: return "failure";
	case RUNNER_TIMEOUT: return "timeout";
	case RUNNER_ERROR: return "error";
	case RUNNER_CANCELLED: return "cancelled";
	}
	return "unknown";
}

void invocation_result_free(struct invocation_result *r)
{
	if (!r)
		return;
	free(r->error);
	r->error = NULL;
}

/* ---- hostname -------------------------------------------------------- */

static pthread_once_t host_once = PTHREAD_ONCE_INIT;
static char host_name[256];

static void host_init(void)
{
	if (gethostname(host_name, sizeof host_name - 1) != 0 || !host_name[0])
		strlcpy_(host_name, "unknown", sizeof host_name);
	host_name[sizeof host_name - 1] = '\0';
}

const char *runner_hostname(void)
{
	pthread_once(&host_once, host_init);
	return host_name;
}

/* ---- instance id ------------------------------------------------------ */

static pthread_once_t instance_once = PTHREAD_ONCE_INIT;
static char instance_id[RUNNER_INSTANCE_LEN + 1];

static uint64_t name_random(void);

static void instance_init(void)
{
	uint64_t v[2] = {name_random(), name_random()};
	hex_encode(v, sizeof v, instance_id);
}

const char *runner_instance_id(void)
{
	pthread_once(&instance_once, instance_init);
	return instance_id;
}

/* Set once before any container exists (runner.h); read-only after. */
static char *scope_stream, *scope_group;

void runner_set_stream_group(const char *stream, const char *group)
{
	free(scope_stream);
	free(scope_group);
	scope_stream = stream ? xstrdup(stream) : NULL;
	scope_group = group ? xstrdup(group) : NULL;
}

/* Set once before any container exists (runner.h); read-only after. */
static char *oci_runtime;

void runner_set_oci_runtime(const char *name)
{
	free(oci_runtime);
	oci_runtime = name && *name ? xstrdup(name) : NULL;
}

/* Set once before any container exists: relay function invoke's. */
static bool local_runs;

void runner_set_local(void)
{
	local_runs = true;
}

/* ---- time bounds and names ------------------------------------------- */

int64_t runner_timeout_ns(int64_t timeout_ns)
{
	if (timeout_ns <= 0)
		return TEMPLATE_DEFAULT_TIMEOUT_NS;
	return timeout_ns > TEMPLATE_MAX_TIMEOUT_NS ? TEMPLATE_MAX_TIMEOUT_NS : timeout_ns;
}

static long setup_ms(const struct invocation *in);
static long teardown_ms(const struct invocation *in);

int64_t runner_worst_case_ns(const struct invocation *in)
{
	static const struct invocation none;
	if (!in)
		in = &none;
	return (int64_t)setup_ms(in) * NS_PER_MS + runner_timeout_ns(in->timeout_ns) +
	       (int64_t)teardown_ms(in) * NS_PER_MS + RUNNER_LOCAL_SLACK_MS * NS_PER_MS;
}

/* Appends at most max bytes of s to out at *o, each outside
 * [A-Za-z0-9_.-] as '_'. */
static void name_part(char *out, size_t *o, const char *s, size_t max)
{
	for (size_t i = 0; s[i] && i < max; i++) {
		char c = s[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
		out[(*o)++] = ok ? c : '_';
	}
}

/* 64 random bits: getrandom, or (no getrandom: an old kernel, a seccomp
 * filter) the clock, the pid and a counter, still unique in this process
 * and unlikely to repeat across processes. */
static uint64_t name_random(void)
{
	static _Atomic uint64_t counter;
	uint64_t v;
	if (getrandom(&v, sizeof v, GRND_NONBLOCK) == (ssize_t)sizeof v)
		return v;
	v = (uint64_t)now_wall_ns() ^ ((uint64_t)getpid() << 40) ^ (uint64_t)now_mono_ns();
	return v + 0x9e3779b97f4a7c15ULL * ++counter;
}

char *runner_container_name(const struct invocation *in, char *out)
{
	/* 6 + 32 + 1 + 32 + 1 + 24 + 1 + 16 = 113 <= RUNNER_NAME_MAX */
	size_t o = 0;
	name_part(out, &o, "relay-", 6);
	name_part(out, &o, in->function ? in->function : "none", 32);
	out[o++] = '-';
	name_part(out, &o, in->handler ? in->handler : "none", 32);
	out[o++] = '-';
	name_part(out, &o,
		  in->standby			      ? "standby"
		  : in->warm			      ? "warm"
		  : in->message_id && *in->message_id ? in->message_id
						      : "none",
		  24);
	char hex[24];
	snprintf_(hex, sizeof hex, "-%016" PRIx64, name_random());
	name_part(out, &o, hex, 17);
	out[o] = '\0';
	return out;
}

/* ---- labels and prefix ----------------------------------------------- */

char *runner_label_value(const char *s, char *out, size_t outsz)
{
	return printable_copy(s, out, outsz, RUNNER_LABEL_MAX);
}

char *runner_format_prefix(const struct invocation *in)
{
	struct buf b;
	buf_init(&b, 4096);
	log_say_head(&b, in->function, "handler", in->handler);
	buf_appendf(&b, ": ");
	return buf_steal(&b);
}

/* ---- demultiplexing --------------------------------------------------- */

void runner_demux_init(struct runner_demux *m, runner_line_fn fn, void *ctx)
{
	memset(m, 0, sizeof *m);
	m->fn = fn;
	m->ctx = ctx;
	m->line[0] = xmalloc(RUNNER_LINE_MAX);
	m->line[1] = xmalloc(RUNNER_LINE_MAX);
}

void runner_demux_free(struct runner_demux *m)
{
	free(m->line[0]);
	free(m->line[1]);
	m->line[0] = m->line[1] = NULL;
}

/* Emits a full buffer in one piece, cut back to a UTF-8 boundary when a
 * multi-byte sequence straddles the limit. */
static void emit_full(struct runner_demux *m, int s)
{
	char *l = m->line[s];
	size_t n = m->line_len[s];
	size_t cut = n;
	/* Back up over at most 3 continuation bytes to a lead byte whose
	 * sequence does not fit. */
	for (size_t back = 1; back <= 4 && back <= n; back++) {
		unsigned char c = (unsigned char)l[n - back];
		if ((c & 0xc0) == 0x80)
			continue;
		if (c >= 0xc0) {
			size_t need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
			if (need > back)
				cut = n - back;
		}
		break;
	}
	if (cut == 0)
		cut = n;
	m->cut = true;
	m->fn(m->ctx, s + 1, l, cut);
	memmove(l, l + cut, n - cut);
	m->line_len[s] = n - cut;
}

static void demux_bytes(struct runner_demux *m, int s, const char *p, size_t n)
{
	while (n > 0) {
		/* A full line is cut only once the next byte is known not to be
		 * its newline, so the output does not depend on how reads split
		 * the stream. */
		if (m->line_len[s] == RUNNER_LINE_MAX && *p != '\n')
			emit_full(m, s);
		const char *nl = memchr(p, '\n', n);
		size_t take = nl ? (size_t)(nl - p) : n;
		size_t room = RUNNER_LINE_MAX - m->line_len[s];
		if (take > room)
			take = room;
		memcpy(m->line[s] + m->line_len[s], p, take);
		m->line_len[s] += take;
		p += take;
		n -= take;
		if (nl && p == nl) {
			m->cut = false;
			m->fn(m->ctx, s + 1, m->line[s], m->line_len[s]);
			m->line_len[s] = 0;
			p++;
			n--;
		}
	}
}

void runner_demux_feed(struct runner_demux *m, const void *data, size_t n)
{
	const unsigned char *p = data;
	while (n > 0) {
		if (m->frame_left == 0) {
			size_t k = 8 - m->hdr_len;
			if (k > n)
				k = n;
			memcpy(m->hdr + m->hdr_len, p, k);
			m->hdr_len += k;
			p += k;
			n -= k;
			if (m->hdr_len < 8)
				return;
			m->hdr_len = 0;
			m->stream = (m->hdr[0] == 2 || m->hdr[0] == 3) ? 2 : 1;
			m->frame_left = (uint32_t)m->hdr[4] << 24 | (uint32_t)m->hdr[5] << 16 |
					(uint32_t)m->hdr[6] << 8 | (uint32_t)m->hdr[7];
			continue;
		}
		size_t k = m->frame_left < n ? m->frame_left : n;
		demux_bytes(m, m->stream - 1, (const char *)p, k);
		m->frame_left -= (uint32_t)k;
		p += k;
		n -= k;
	}
}

void runner_demux_flush(struct runner_demux *m)
{
	for (int s = 0; s < 2; s++) {
		if (m->line_len[s]) {
			m->cut = true;
			m->fn(m->ctx, s + 1, m->line[s], m->line_len[s]);
			m->line_len[s] = 0;
		}
	}
}

/* ---- wait answers ----------------------------------------------------- */

/* Decodes HTTP/1.1 chunked framing from body into out. Returns 1 when
 * the terminating chunk was seen, 0 otherwise, -1 on bad framing. */
static int dechunk(const char *body, size_t len, struct buf *out)
{
	size_t i = 0;
	for (;;) {
		const char *crlf = memmem(body + i, len - i, "\r\n", 2);
		if (!crlf)
			return 0;
		size_t size = 0;
		const char *q = body + i;
		if (q == crlf)
			return -1;
		for (; q < crlf && *q != ';'; q++) {
			int v = hex_digit((unsigned char)*q);
			if (v < 0)
				return -1;
			if (size > WAIT_BODY_MAX)
				return -1;
			size = size * 16 + (size_t)v;
		}
		i = (size_t)(crlf - body) + 2;
		if (size == 0)
			return 1;
		if (len - i < size)
			return 0;
		if (buf_append(out, body + i, size) < 0)
			return -1;
		i += size;
		if (len - i < 2)
			return 0;
		if (body[i] != '\r' || body[i + 1] != '\n')
			return -1;
		i += 2;
	}
}

int runner_parse_wait(const char *body, size_t len, int *status, char **error)
{
	int rc = 0;
	struct buf plain;
	buf_init(&plain, WAIT_BODY_MAX);
	size_t i = 0;
	while (i < len && (body[i] == ' ' || body[i] == '\r' || body[i] == '\n'))
		i++;
	if (i == len)
		goto out;
	const char *json;
	size_t jlen;
	if (body[i] == '{') {
		json = body + i;
		jlen = len - i;
	} else {
		int d = dechunk(body + i, len - i, &plain);
		if (d < 0) {
			rc = -1;
			goto out;
		}
		json = plain.data ? plain.data : "";
		jlen = plain.len;
	}
	json_error_t je;
	json_t *o = json_loadb(json, jlen, JSON_DISABLE_EOF_CHECK, &je);
	if (!o)
		goto out; /* incomplete (or garbage: the caller's deadline ends it) */
	json_t *sc = json_object_get(o, "StatusCode");
	if (!json_is_integer(sc)) {
		json_decref(o);
		rc = -1;
		goto out;
	}
	*status = (int)json_integer_value(sc);
	*error = NULL;
	const char *msg =
		json_string_value(json_object_get(json_object_get(o, "Error"), "Message"));
	if (msg && *msg)
		*error = xstrdup(msg);
	json_decref(o);
	rc = 1;
out:
	buf_free(&plain);
	return rc;
}

/* ---- Engine API helpers ---------------------------------------------- */

/* Milliseconds left until deadline for one call: at least 1, because a
 * timeout of 0 means "no timeout" to docker_request, so a call made after
 * its phase's deadline fails at once instead of waiting without limit. */
static long call_ms(int64_t deadline)
{
	int64_t left = deadline - now_mono_ns();
	if (left < NS_PER_MS)
		return 1;
	int64_t ms = left / NS_PER_MS;
	return ms > 0x7fffffff ? 0x7fffffff : (long)ms;
}

static bool phase_over(int64_t deadline)
{
	return now_mono_ns() >= deadline;
}

/* DELETE ?force=1 of a container named by id or name, bounded by
 * timeout_ms. 1 removed or going, 0 no such container, -1 with *err. */
static int remove_once(struct docker *d, const char *ref, long timeout_ms, char **err)
{
	struct docker_response r;
	char *path = xasprintf("/containers/%s?force=1", ref);
	int rc = -1;
	if (docker_request(d, "DELETE", path, NULL, 0, NULL, timeout_ms, &r) < 0) {
		*err = xasprintf("removing container %.*s: %s", RUNNER_NAME_MAX, ref,
				 docker_errmsg(d));
		goto out;
	}
	if (r.status == 204 || r.status == 200 ||
	    (r.status == 409 && strstr(docker_errmsg(d), "already in progress")))
		rc = 1;
	else if (r.status == 404)
		rc = 0;
	else
		*err = xasprintf("removing container %.*s: %s", RUNNER_NAME_MAX, ref,
				 docker_errmsg(d));
out:
	docker_response_free(&r);
	free(path);
	return rc;
}

int runner_remove_container(struct docker *d, const char *id, char **err)
{
	return remove_once(d, id, RUNNER_API_TIMEOUT_MS, err) < 0 ? -1 : 0;
}

enum teardown_kind {
	TEARDOWN_ID,	     /* a container we created: gone when 404 */
	TEARDOWN_NAME_ONCE,  /* the daemon answered create: 404 is final */
	TEARDOWN_NAME_AWAIT, /* create's answer was lost: the daemon may still
				be creating it, so 404 is retried too */
};

static long teardown_ms(const struct invocation *in)
{
	long ms = in->teardown_timeout_ms;
	return ms > 0 && ms < RUNNER_TEARDOWN_TIMEOUT_MS ? ms : RUNNER_TEARDOWN_TIMEOUT_MS;
}

static long setup_ms(const struct invocation *in)
{
	long ms = in->setup_timeout_ms;
	return ms > 0 && ms < RUNNER_SETUP_TIMEOUT_MS ? ms : RUNNER_SETUP_TIMEOUT_MS;
}

/*
 * The abnormal-path backstop: forced removal (the daemon kills a running
 * container first) of ref, tried until it is gone or the teardown deadline
 * passes. Returns 1 when it was removed (or was going), 0 when it is known
 * not to exist, -1 when time ran out (logged; the orphan sweep is the last
 * resort, the container carrying the relay.* labels).
 */
static int teardown(struct docker *d, const struct invocation *in, const char *ref,
		    enum teardown_kind kind)
{
	int64_t deadline = now_mono_ns() + (int64_t)teardown_ms(in) * NS_PER_MS;
	char *e = NULL;
	int tries = 0;
	for (;;) {
		free(e);
		e = NULL;
		tries++;
		int rc = remove_once(d, ref, call_ms(deadline), &e);
		if (rc == 1 || (rc == 0 && kind != TEARDOWN_NAME_AWAIT)) {
			free(e);
			return rc;
		}
		if (phase_over(deadline))
			break;
		int64_t left = (deadline - now_mono_ns()) / NS_PER_MS;
		sleep_ms_interruptible(
			left < RUNNER_REMOVE_RETRY_MS ? left : RUNNER_REMOVE_RETRY_MS, NULL);
		if (phase_over(deadline))
			break;
	}
	char t[16];
	snprintf_(t, sizeof t, "%d", tries);
	if (kind == TEARDOWN_NAME_AWAIT && !e)
		log_debug(LOG_ATTRS("function", in->function, "handler", in->handler, "container",
				    ref, "tries", t),
			  "no container by this name appeared after the create timed out");
	else
		log_warn(LOG_ATTRS("function", in->function, "handler", in->handler, "container",
				   ref, "tries", t, "error", e ? e : "not removed in time"),
			 "backstop removal of an execution container failed; the startup "
			 "orphan sweep removes it");
	free(e);
	return kind == TEARDOWN_NAME_AWAIT && !e ? 0 : -1;
}

/* Overwrites a jansson string's bytes in place before it is freed. */
static void scrub_json_string(json_t *s)
{
	if (json_is_string(s)) {
		char *p = (char *)json_string_value(s);
		size_t n = json_string_length(s);
		volatile char *vp = p;
		for (size_t i = 0; i < n; i++)
			vp[i] = 0;
	}
}

/* Scrubs each string of a JSON array (the Env). */
static void scrub_strings(json_t *array)
{
	size_t i;
	json_t *s;
	json_array_foreach(array, i, s) scrub_json_string(s);
}

static void scrub(void *p, size_t n)
{
	volatile unsigned char *vp = p;
	for (size_t i = 0; i < n; i++)
		vp[i] = 0;
}

/* Adds "NAME=value" to env; -1 when value is not valid UTF-8 (the JSON
 * body cannot carry it). The temporary is scrubbed. */
static int env_add(json_t *env, const char *name, const char *value, size_t len)
{
	size_t nl = strlen(name);
	size_t total = nl + 1 + len;
	char *tmp = xmalloc(total + 1);
	memcpy(tmp, name, nl);
	tmp[nl] = '=';
	if (len)
		memcpy(tmp + nl + 1, value, len);
	tmp[total] = '\0';
	json_t *s = json_stringn(tmp, total);
	scrub(tmp, total);
	free(tmp);
	if (!s)
		return -1;
	json_array_append_new(env, s);
	return 0;
}

static json_t *label_str(const char *s)
{
	char v[RUNNER_LABEL_MAX + 1];
	return json_string(runner_label_value(s, v, sizeof v));
}

/* Resolves the secret reference s->value and adds "<s->name>=<value>" to
 * env; -1 with *err (naming the reference, never a value). The value is
 * freed (scrubbed) by the secret store either way. */
static int env_add_secret(json_t *env, const struct invocation *in, const struct env_var *s,
			  char **err)
{
	const char *name = s->name, *ref = s->value;
	char *value = NULL, *e = NULL;
	size_t len = 0;
	if (!in->provider) {
		*err = xasprintf("secret \"%s\" (for %s): no secret provider", ref, name);
		return -1;
	}
	int rc = secret_get(in->provider, ref, &value, &len, &e);
	if (rc == SECRET_NOT_FOUND) {
		*err = xasprintf("secret \"%s\" (for %s) not found", ref, name);
		free(e);
		return -1;
	}
	if (rc < 0) {
		*err = xasprintf("secret \"%s\" (for %s): %s", ref, name, e ? e : "error");
		free(e);
		return -1;
	}
	const char *bad =
		memchr(value, '\0', len) != NULL
			? "contains a NUL byte, which an environment variable cannot carry"
		: env_add(env, name, value, len) < 0
			? "is not valid UTF-8, which the Docker API cannot carry"
			: NULL;
	secret_value_free(value, len);
	if (bad) {
		*err = xasprintf("secret \"%s\" (for %s) %s", ref, name, bad);
		return -1;
	}
	return 0;
}

/* The container's Env: the template's literal values, its secrets
 * resolved, RELAY_HANDLER. NULL with *err; what was built is scrubbed. */
static json_t *container_env(const struct invocation *in, char **err)
{
	json_t *env = json_array();
	for (size_t i = 0; i < in->nenv; i++) {
		const char *v = in->env[i].value ? in->env[i].value : "";
		if (env_add(env, in->env[i].name, v, strlen(v)) < 0) {
			*err = xasprintf("env %s is not valid UTF-8", in->env[i].name);
			goto fail;
		}
	}
	for (size_t i = 0; i < in->nsecrets; i++)
		if (env_add_secret(env, in, &in->secrets[i], err) < 0)
			goto fail;
	/* Last, so nothing can shadow it (templates may not set it anyway). */
	env_add(env, "RELAY_HANDLER", in->handler, strlen(in->handler));
	if (in->warm)
		env_add(env, "RELAY_WARM", "1", 1); /* the bootstrap's warm loop */
	return env;
fail:
	scrub_strings(env);
	json_decref(env);
	return NULL;
}

/* The create body, field by field as runner.h lists them. Secrets are
 * resolved here. Returns the object, or NULL with *err (naming the
 * reference, never a value). */
static json_t *create_body(const struct invocation *in, const char *host, char **err)
{
	json_t *env = container_env(in, err);
	if (!env)
		return NULL;
	json_t *labels = json_object();
	json_object_set_new(labels, "relay.function", label_str(in->function));
	json_object_set_new(labels, "relay.handler", label_str(in->handler));
	json_object_set_new(labels, "relay.message_id", label_str(in->message_id));
	json_object_set_new(labels, "relay.event_id", label_str(in->event_id));
	json_object_set_new(labels, "relay.event_name", label_str(in->event_name));
	json_object_set_new(labels, "relay.hostname", label_str(host));
	json_object_set_new(labels, "relay.instance", json_string(runner_instance_id()));
	if (scope_stream && scope_group) {
		json_object_set_new(labels, "relay.stream", label_str(scope_stream));
		json_object_set_new(labels, "relay.group", label_str(scope_group));
	}
	json_object_set_new(labels, "relay.image", label_str(in->image));
	if (in->standby)
		json_object_set_new(labels, "relay.standby", json_string("true"));
	if (in->warm)
		json_object_set_new(labels, "relay.warm", json_string("true"));
	if (local_runs)
		json_object_set_new(labels, "relay.local", json_string("invoke"));

	json_t *host_config = json_pack(
		"{s:b, s:I, s:I, s:I, s:I, s:[s], s:b, s:{s:s}, s:[s]}", "AutoRemove", 1, "Memory",
		(json_int_t)RUNNER_MEMORY_BYTES, "MemorySwap", (json_int_t)RUNNER_MEMORY_BYTES,
		"NanoCpus", (json_int_t)RUNNER_NANO_CPUS, "PidsLimit",
		(json_int_t)RUNNER_PIDS_LIMIT, "CapDrop", "ALL", "ReadonlyRootfs", 1, "Tmpfs",
		"/tmp", RUNNER_TMPFS_OPTIONS, "SecurityOpt", "no-new-privileges");
	if (host_config && oci_runtime) /* RELAY_OCI_RUNTIME; unset: the daemon's default */
		json_object_set_new(host_config, "Runtime", json_string(oci_runtime));
	/* json_pack "o" consumes env, labels and host_config, even on failure. */
	json_t *body =
		json_pack("{s:s, s:s, s:o, s:o, s:b, s:b, s:b, s:b, s:b, s:b, s:o}", "Image",
			  in->image, "User", IMAGE_USER, "Env", env, "Labels", labels,
			  "AttachStdin", 1, "AttachStdout", 1, "AttachStderr", 1, "OpenStdin", 1,
			  "StdinOnce", 1, "Tty", 0, "HostConfig", host_config);
	if (!body)
		*err = xstrdup("cannot encode the container configuration");
	return body;
}

static void scrub_body(json_t *body)
{
	scrub_strings(json_object_get(body, "Env"));
	json_decref(body);
}

/* ---- invoke ----------------------------------------------------------- */

struct forward {
	struct buf out; /* prefix + line + '\n', reused */
	size_t prefix_len;
	char last_err[LAST_ERR_MAX + 1];
};

static void forward_line(void *ctx, int stream, const char *line, size_t len)
{
	struct forward *f = ctx;
	f->out.len = f->prefix_len;
	text_escape(&f->out, line, len, 0, TEXT_VERBATIM);
	buf_append(&f->out, "\n", 1);
	log_raw(f->out.data, f->out.len);
	if (stream == 2 && len) {
		size_t n = len < LAST_ERR_MAX ? len : LAST_ERR_MAX;
		memcpy(f->last_err, line, n);
		f->last_err[n] = '\0';
	}
}

static int remaining_ms(int64_t deadline)
{
	int64_t left = deadline - now_mono_ns();
	if (left <= 0)
		return 0;
	int64_t ms = (left + NS_PER_MS - 1) / NS_PER_MS;
	return ms > 0x7fffffff ? 0x7fffffff : (int)ms;
}

static bool is_cancelled(const struct invocation *in)
{
	return in->cancelled && in->cancelled(in->cancel_ctx);
}

static int finish(struct invocation_result *out, enum runner_outcome o, int code, char *error)
{
	out->outcome = o;
	out->exit_code = code;
	free(out->error);
	out->error = error;
	return o == RUNNER_SUCCESS ? 0 : -1;
}

/*
 * One invocation in progress: what runner_invoke's phases share. The setup
 * phases (run_create, run_open_streams) and run_start return 0 to go on, or
 * -1 after recording the outcome in *out and removing whatever container
 * they left behind; run_pump says how the handler phase ended and
 * run_classify turns that into the outcome; run_free releases everything.
 */
struct run {
	struct docker *d;
	const struct invocation *in;
	struct invocation_result *out;
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
	struct forward fw;
	struct buf waitbuf; /* the wait answer so far */
	int status;	    /* the exit status, once the wait answered */
	char *wait_err;	    /* the daemon's error in the wait answer, or NULL */
	char *err;	    /* why the wait failed (RUN_WAIT_FAILED) */
	char *chunk;	    /* READ_CHUNK bytes, for both streams */
};

/* How the handler phase ended. */
enum run_end {
	RUN_EXITED,	 /* the wait answered: an exit status */
	RUN_CANCELLED,	 /* the cancellation callback said so */
	RUN_TIMED_OUT,	 /* the handler deadline passed */
	RUN_WAIT_FAILED, /* the wait broke off without an exit status (r->err) */
};

static void run_init(struct run *r, struct docker *d, const struct invocation *in,
		     struct invocation_result *out, int64_t start)
{
	memset(r, 0, sizeof *r);
	r->d = d;
	r->in = in;
	r->out = out;
	r->host = in->hostname ? in->hostname : runner_hostname();
	r->start = start;
	r->start_wall = now_wall_ns();
	r->setup_deadline = start + (int64_t)setup_ms(in) * NS_PER_MS;
	r->timeout = runner_timeout_ns(in->timeout_ns);
	r->status = -1;
	r->chunk = xmalloc(READ_CHUNK);
	buf_init(&r->fw.out, 4 * RUNNER_LINE_MAX + 4096); /* escaped: 4 bytes a byte at most */
	char *prefix = runner_format_prefix(in);
	buf_append(&r->fw.out, prefix, strlen(prefix));
	r->fw.prefix_len = r->fw.out.len;
	free(prefix);
	runner_demux_init(&r->demux, forward_line, &r->fw);
	buf_init(&r->waitbuf, WAIT_BODY_MAX);
	image_hold(in->image);
}

static void run_free(struct run *r)
{
	r->out->seconds = (double)(now_mono_ns() - r->start) / 1e9;
	image_release(r->in->image);
	docker_conn_free(r->attach);
	docker_conn_free(r->waitc);
	runner_demux_free(&r->demux);
	buf_free(&r->fw.out);
	buf_free(&r->waitbuf);
	free(r->chunk);
	free(r->wait_err);
	free(r->err);
}

/* Records RUNNER_ERROR (no exit status) with "function "f" handler "h": "
 * and the formatted reason. Returns -1. */
static int run_fail(struct run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int run_fail(struct run *r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *why = xvasprintf(fmt, ap);
	va_end(ap);
	finish(r->out, RUNNER_ERROR, -1,
	       xasprintf("function \"%s\" handler \"%s\": %s", r->in->function, r->in->handler,
			 why));
	free(why);
	return -1;
}

/* The serialised create body (secrets resolved), or NULL after run_fail. */
static char *create_text(struct run *r)
{
	char *e = NULL;
	json_t *body = create_body(r->in, r->host, &e);
	if (!body) {
		run_fail(r, "%s", e);
		free(e);
		return NULL;
	}
	char *text = json_dumps(body, JSON_COMPACT);
	scrub_body(body);
	if (!text)
		run_fail(r, "cannot encode the container configuration");
	return text;
}

/* 1-2: resolve secrets, create under a fresh name. */
static int run_create(struct run *r)
{
	struct docker *d = r->d;
	const struct invocation *in = r->in;
	struct docker_response resp = {0};
	json_t *created = NULL;
	char *path = NULL;
	int rc = -1;
	char *text = create_text(r);
	if (!text)
		return -1;
	if (phase_over(r->setup_deadline)) {
		run_fail(r, "no time left to create the container (setup is bounded by %ld ms)",
			 setup_ms(in));
		goto out;
	}
	const char *name = runner_container_name(in, r->out->container_name);
	path = xasprintf("/containers/create?name=%s", name);
	int rq = docker_request(d, "POST", path, text, strlen(text), NULL,
				call_ms(r->setup_deadline), &resp);
	scrub(text, strlen(text));
	if (rq < 0 || resp.status != 201) {
		run_fail(r, "creating container from %s: %s", in->image, docker_errmsg(d));
		r->out->not_run = rq < 0 && docker_no_answer(d);
		/* The answer was lost after the request left (a timeout, a
		 * dropped connection): the daemon may have created the
		 * container, or may still be creating it, with the secrets in
		 * its Env. A 5xx answer leaves it unknown as well; a 4xx is a
		 * refusal (and a 409 would be someone else's container). */
		if (rq < 0 && !docker_request_unsent(d))
			teardown(d, in, name, TEARDOWN_NAME_AWAIT);
		else if (rq == 0 && resp.status >= 500)
			teardown(d, in, name, TEARDOWN_NAME_ONCE);
		goto out;
	}
	created = json_loadb(resp.body, resp.len, 0, NULL);
	const char *id = json_string_value(json_object_get(created, "Id"));
	if (!id || !*id || strlen(id) >= sizeof r->out->container_id) {
		run_fail(r, "creating container: the daemon's answer has no Id");
		teardown(d, in, name, TEARDOWN_NAME_ONCE);
		goto out;
	}
	strlcpy_(r->out->container_id, id, sizeof r->out->container_id);
	r->id = r->out->container_id;
	log_debug(LOG_ATTRS("function", in->function, "handler", in->handler, "container", r->id,
			    "name", name),
		  "container created");
	rc = 0;
out:
	free(text);
	free(path);
	json_decref(created);
	docker_response_free(&resp);
	return rc;
}

/* A raw connection to /containers/<id>/<endpoint> (attach or wait) within
 * the setup deadline; what names the step in the failure ("attaching to"). */
static int open_stream(struct run *r, const char *endpoint, const char *what,
		       struct docker_conn **c)
{
	char *path = xasprintf("/containers/%s/%s", r->id, endpoint);
	int rc = docker_hijack_timeout(r->d, path, call_ms(r->setup_deadline), c);
	free(path);
	if (rc < 0) {
		run_fail(r, "%s container %.12s: %s", what, r->id, docker_errmsg(r->d));
		r->out->not_run = docker_no_answer(r->d);
		teardown(r->d, r->in, r->id, TEARDOWN_ID);
	}
	return rc;
}

/* 3: attach and wait, both before start. */
static int run_open_streams(struct run *r)
{
	if (open_stream(r, "attach?stream=1&stdin=1&stdout=1&stderr=1", "attaching to",
			&r->attach) < 0 ||
	    open_stream(r, "wait?condition=next-exit", "waiting on", &r->waitc) < 0)
		return -1;
	r->attach_open = true;
	return 0;
}

/* 4a: start, within deadline (the handler's on demand, setup's when
 * parking). */
static int run_start(struct run *r, int64_t deadline)
{
	struct docker_response resp = {0};
	char *path = xasprintf("/containers/%s/start", r->id);
	int rq = docker_request(r->d, "POST", path, NULL, 0, NULL, call_ms(deadline), &resp);
	long status = resp.status;
	free(path);
	docker_response_free(&resp);
	if (rq < 0 || (status != 204 && status != 304)) {
		run_fail(r, "starting container %.12s: %s", r->id, docker_errmsg(r->d));
		/* Sent but unanswered, it may have started: an attempt. */
		r->out->not_run = rq < 0 && docker_request_unsent(r->d);
		teardown(r->d, r->in, r->id, TEARDOWN_ID);
		return -1;
	}
	return 0;
}

/* 4b: write the event to stdin and half-close it. A stdin that cannot be
 * written is only logged: the handler sees EOF and the exit status
 * decides. */
static void run_feed(struct run *r)
{
	const struct invocation *in = r->in;
	if (in->payload_len) {
		int w = docker_conn_write_timeout(r->attach, in->payload, in->payload_len,
						  remaining_ms(r->deadline));
		if (w < 0)
			log_debug(LOG_ATTRS("function", in->function, "handler", in->handler,
					    "error", docker_conn_errmsg(r->attach)),
				  "writing the event to the container's stdin failed");
	}
	if (docker_conn_close_write(r->attach) < 0)
		log_debug(LOG_ATTRS("function", in->function, "handler", in->handler, "error",
				    docker_conn_errmsg(r->attach)),
			  "closing the container's stdin failed");
}

/* One read of the attach stream, at most slice ms: lines go to the
 * forwarder; its end (EOF, or a read error) means the process exited. */
static void pump_attach(struct run *r, int slice)
{
	long n = docker_conn_read(r->attach, r->chunk, READ_CHUNK, slice);
	if (n > 0) {
		runner_demux_feed(&r->demux, r->chunk, (size_t)n);
		return;
	}
	if (n == DOCKER_CONN_TIMEOUT)
		return;
	if (n == -1)
		log_debug(LOG_ATTRS("function", r->in->function, "handler", r->in->handler, "error",
				    docker_conn_errmsg(r->attach)),
			  "reading the container's output failed");
	r->attach_open = false; /* EOF: the process has exited */
	runner_demux_flush(&r->demux);
}

/* One read of the wait answer, at most slice ms: 0 read on, 1 the answer
 * is in (r->status, r->wait_err), -1 the wait failed (r->err). */
static int pump_wait(struct run *r, int slice)
{
	long n = docker_conn_read(r->waitc, r->chunk, READ_CHUNK, slice);
	if (n == DOCKER_CONN_TIMEOUT)
		return 0;
	if (n > 0 && buf_append(&r->waitbuf, r->chunk, (size_t)n) < 0)
		n = -1;
	int p = n > 0 ? runner_parse_wait(r->waitbuf.data, r->waitbuf.len, &r->status, &r->wait_err)
		      : -1;
	if (p == 0)
		return 0;
	if (p < 0) {
		r->err = xstrdup(n == 0	 ? "the daemon closed the wait without an exit status"
				 : n < 0 ? docker_conn_errmsg(r->waitc)
					 : "unreadable wait answer");
		return -1;
	}
	return 1;
}

/* Forwards the output until the attach stream ends, then reads the exit
 * status, polling the cancellation callback every RUNNER_POLL_MS, until
 * the handler deadline. */
static enum run_end run_pump(struct run *r)
{
	enum run_end end;
	for (;;) {
		if (is_cancelled(r->in)) {
			end = RUN_CANCELLED;
			break;
		}
		int left = remaining_ms(r->deadline);
		if (left == 0) {
			end = RUN_TIMED_OUT;
			break;
		}
		int slice = left < RUNNER_POLL_MS ? left : RUNNER_POLL_MS;
		if (r->attach_open) {
			pump_attach(r, slice);
			continue;
		}
		int w = pump_wait(r, slice);
		if (w == 0)
			continue;
		end = w > 0 ? RUN_EXITED : RUN_WAIT_FAILED;
		break;
	}
	runner_demux_flush(&r->demux);
	return end;
}

/* Whether the daemon recorded an out-of-memory kill of the container since
 * the invocation began: its event log (GET /events with since and until in
 * the past answers at once with what it kept) has an "oom" event for the id.
 * Asked only when the process died of SIGKILL (exit status 137): the
 * container is gone by then (AutoRemove), so State.OOMKilled cannot be read.
 * The call runs in the teardown phase's time (a container that exited on its
 * own skips teardown), bounded by RUNNER_OOM_QUERY_MS. Any failure (a proxy
 * that refuses /events, a daemon that lost the event) answers false. */
static bool run_oom_killed(struct run *r)
{
	const char *id = r->id;
	if (!id || !*id)
		return false;
	for (const char *p = id; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z')))
			return false;
	int64_t now = now_wall_ns();
	int64_t since = r->start_wall / 1000000000 - 1;
	/* filters={"container":["<id>"],"event":["oom"]}, URL-encoded */
	char *path =
		xasprintf("/events?since=%" PRId64 "&until=%" PRId64 ".%09" PRId64
			  "&filters=%%7B%%22container%%22%%3A%%5B%%22%s%%22%%5D%%2C%%22event%%22"
			  "%%3A%%5B%%22oom%%22%%5D%%7D",
			  since, now / 1000000000, now % 1000000000, id);
	struct docker_response resp = {0};
	long ms = teardown_ms(r->in);
	int rq = docker_request(r->d, "GET", path, NULL, 0, NULL,
				ms < RUNNER_OOM_QUERY_MS ? ms : RUNNER_OOM_QUERY_MS, &resp);
	bool oom =
		rq == 0 && resp.status == 200 && resp.body && strstr(resp.body, "\"oom\"") != NULL;
	free(path);
	docker_response_free(&resp);
	return oom;
}

/* 5: the outcome. An invocation that did not end with an exit status is
 * removed first (teardown); one that exited is left to AutoRemove. */
static void run_classify(struct run *r, enum run_end end)
{
	const char *F = r->in->function, *H = r->in->handler;
	char dur[DURATION_STR_MAX];
	if (end != RUN_EXITED) {
		/* The output is no longer read: close the streams first. A
		 * handler still writing would otherwise fill the attach
		 * connection, and the daemon, blocked copying its output to us,
		 * does not finish the forced removal until the teardown
		 * deadline (measured: a timeout of 4 s took 34 s). */
		docker_conn_free(r->attach);
		docker_conn_free(r->waitc);
		r->attach = r->waitc = NULL;
		teardown(r->d, r->in, r->id, TEARDOWN_ID);
	}
	switch (end) {
	case RUN_TIMED_OUT:
		finish(r->out, RUNNER_TIMEOUT, -1,
		       xasprintf("function \"%s\" handler \"%s\" timed out after %s", F, H,
				 duration_format(r->timeout, dur)));
		return;
	case RUN_CANCELLED:
		finish(r->out, RUNNER_CANCELLED, -1,
		       xasprintf("function \"%s\" handler \"%s\" cancelled by shutdown", F, H));
		return;
	case RUN_WAIT_FAILED: run_fail(r, "waiting for container %.12s: %s", r->id, r->err); return;
	case RUN_EXITED: break;
	}
	if (r->wait_err)
		finish(r->out, RUNNER_ERROR, r->status,
		       xasprintf("function \"%s\" handler \"%s\": container %.12s: %s", F, H, r->id,
				 r->wait_err));
	else if (r->status == 0)
		finish(r->out, RUNNER_SUCCESS, 0, NULL);
	else if (r->status == 137 && run_oom_killed(r))
		finish(r->out, RUNNER_FAILURE, r->status,
		       xasprintf(
			       "function \"%s\" handler \"%s\" failed: exit status %d: killed: out "
			       "of memory (limit %lld MiB)",
			       F, H, r->status, RUNNER_MEMORY_BYTES / (1024 * 1024)));
	else if (r->fw.last_err[0])
		finish(r->out, RUNNER_FAILURE, r->status,
		       xasprintf("function \"%s\" handler \"%s\" failed: exit status %d: %s", F, H,
				 r->status, r->fw.last_err));
	else
		finish(r->out, RUNNER_FAILURE, r->status,
		       xasprintf("function \"%s\" handler \"%s\" failed: exit status %d", F, H,
				 r->status));
}

/* runner_invoke with its setup deadline counted from start. */
static int invoke_from(struct docker *d, const struct invocation *in, struct invocation_result *out,
		       int64_t start)
{
	memset(out, 0, sizeof *out);
	out->exit_code = -1;
	if (!in->function || !in->handler || !in->image)
		return finish(out, RUNNER_ERROR, -1,
			      xstrdup("invocation without a function, handler or image"));
	struct run r;
	run_init(&r, d, in, out, start);
	if (run_create(&r) == 0 && run_open_streams(&r) == 0) {
		/* The start is setup's; the handler phase is the rule's timeout
		 * from the daemon's answer, when the process runs (a loaded
		 * daemon took 5.5 s to answer: on a 6 s default that left the
		 * handler half a second). */
		if (run_start(&r, r.setup_deadline) == 0) {
			r.deadline = now_mono_ns() + r.timeout;
			run_feed(&r);
			run_classify(&r, run_pump(&r));
		}
	}
	run_free(&r);
	return out->outcome == RUNNER_SUCCESS ? 0 : -1;
}

int runner_invoke(struct docker *d, const struct invocation *in, struct invocation_result *out)
{
	return invoke_from(d, in, out, now_mono_ns()); /* the setup deadline counts from here */
}

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

int runner_park(struct docker *d, const struct invocation *in, struct runner_parked **out,
		char **err)
{
	*out = NULL;
	struct invocation_result res;
	memset(&res, 0, sizeof res);
	if (!in->function || !in->handler || !in->image || !in->standby) {
		*err = xstrdup("standby container without a function, handler or image");
		return -1;
	}
	struct run r;
	run_init(&r, d, in, &res, now_mono_ns());
	int rc = -1;
	if (run_create(&r) == 0 && run_open_streams(&r) == 0 &&
	    run_start(&r, r.setup_deadline) == 0) {
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
	run_free(&r);
	invocation_result_free(&res);
	return rc;
}

int runner_dispatch(struct docker *d, struct runner_parked **pp, const struct invocation *in,
		    struct invocation_result *out)
{
	struct runner_parked *p = *pp;
	int64_t start = now_mono_ns();
	/* The lift is this invocation's setup phase (it has no create, attach
	 * or wait of its own), and before the event: the handler never runs
	 * under the parked bound. */
	int64_t setup_deadline = start + (int64_t)setup_ms(in) * NS_PER_MS;
	if (p->bounded &&
	    docker_update_cpus(d, p->id, RUNNER_NANO_CPUS, call_ms(setup_deadline)) < 0) {
		log_warn(LOG_ATTRS("function", in->function, "handler", in->handler, "container",
				   p->id, "error", docker_errmsg(d)),
			 "cannot lift the CPU bound of a standby container; the invocation runs on "
			 "demand");
		return invoke_from(d, in, out, start);
	}
	*pp = NULL;
	memset(out, 0, sizeof *out);
	out->exit_code = -1;
	struct run r;
	run_init(&r, d, in, out, start);
	strlcpy_(out->container_id, p->id, sizeof out->container_id);
	strlcpy_(out->container_name, p->name, sizeof out->container_name);
	r.id = out->container_id;
	r.attach = p->attach;
	r.waitc = p->waitc;
	p->attach = p->waitc = NULL;
	r.attach_open = true;
	r.deadline = now_mono_ns() + r.timeout; /* the timeout counts from dispatch */
	run_feed(&r);
	run_classify(&r, run_pump(&r));
	run_free(&r);
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
	struct invocation in = {
		.function = p->function, .handler = p->handler, .teardown_timeout_ms = timeout_ms};
	/* Streams first, as in run_classify: what the module printed at
	 * import waits unread in the attach connection, and a daemon blocked
	 * copying more of it to us does not finish the forced removal until
	 * the deadline (20 MB at import: 10 s, the whole shutdown bound). */
	docker_conn_free(p->attach);
	docker_conn_free(p->waitc);
	p->attach = p->waitc = NULL;
	if (d)
		teardown(d, &in, p->id, TEARDOWN_ID);
	parked_free(p);
}

const char *runner_parked_id(const struct runner_parked *p)
{
	return p->id;
}

/* ---- warm containers (docs/warm-protocol.md) ---------------------------- */

/* Bytes of idle output runner_warm_gone reads (and forwards) per call. */
#define WARM_IDLE_READ_MAX (4 * READ_CHUNK)

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
	struct forward fw; /* prefix: function and handler, as runner_invoke's */
	char *chunk;	   /* READ_CHUNK */
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
	forward_line(&w->fw, stream, p, n);
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

int runner_warm_start(struct docker *d, const struct invocation *in, struct runner_warm **out,
		      char **err)
{
	*out = NULL;
	struct invocation_result res;
	memset(&res, 0, sizeof res);
	if (!in->function || !in->handler || !in->image || !in->warm) {
		*err = xstrdup("warm container without a function, handler or image");
		return -1;
	}
	struct run r;
	run_init(&r, d, in, &res, now_mono_ns());
	int rc = -1;
	if (run_create(&r) == 0 && run_open_streams(&r) == 0 &&
	    run_start(&r, r.setup_deadline) == 0) {
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
		w->chunk = xmalloc(READ_CHUNK);
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
	run_free(&r);
	invocation_result_free(&res);
	return rc;
}

/* One read of w's attach stream into the demultiplexer, at most slice ms;
 * false once the stream ended (the process exited). */
static bool warm_read(struct runner_warm *w, int slice)
{
	long n = docker_conn_read(w->attach, w->chunk, READ_CHUNK, slice);
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
static int warm_kill(struct run *r, struct runner_warm *w)
{
	docker_conn_free(w->attach);
	docker_conn_free(w->waitc);
	w->attach = w->waitc = NULL;
	w->dead = true;
	teardown(r->d, r->in, w->id, TEARDOWN_ID);
	return -1;
}

/* The run of one warm invocation: the rule's timeout counts from start. */
static void warm_run_init(struct run *r, struct docker *d, struct runner_warm *w,
			  const struct invocation *in, struct invocation_result *out, int64_t start)
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
	buf_init(&r->waitbuf, WAIT_BODY_MAX);
}

/* Lifts a bounded w's CPU and writes the request (header and event), with
 * a new token; 0, or -1 with the failure recorded (not_run: the handler
 * was never called). */
static int warm_send(struct run *r, struct runner_warm *w)
{
	const struct invocation *in = r->in;
	struct invocation_result *out = r->out;
	if (w->dead || !w->attach) {
		out->not_run = true;
		return run_fail(r, "warm container %.12s is gone", w->id);
	}
	if (w->bounded) {
		int64_t setup_deadline = r->start + (int64_t)setup_ms(in) * NS_PER_MS;
		if (docker_update_cpus(r->d, w->id, RUNNER_NANO_CPUS, call_ms(setup_deadline)) <
		    0) {
			out->not_run = true;
			run_fail(r, "cannot lift the CPU bound of warm container %.12s: %s", w->id,
				 docker_errmsg(r->d));
			return warm_kill(r, w);
		}
		w->bounded = false;
	}
	/* Output printed while idle and not yet read is forwarded first, with
	 * the same prefix. The new token starts the invocation. */
	warm_token_new(w->token);
	w->active = true;
	w->seen_end = w->seen_result = w->bad = false;
	w->status = 0;
	w->error[0] = '\0';
	w->fw.last_err[0] = '\0';
	char hdr[WARM_HEADER_MAX];
	size_t hl = warm_request_header(hdr, w->token, in->payload_len);
	if (docker_conn_write_timeout(w->attach, hdr, hl, remaining_ms(r->deadline)) < 0 ||
	    (in->payload_len && docker_conn_write_timeout(w->attach, in->payload, in->payload_len,
							  remaining_ms(r->deadline)) < 0)) {
		/* The bootstrap calls the handler only with the whole request. */
		out->not_run = true;
		run_fail(r, "writing the event to warm container %.12s: %s", w->id,
			 docker_conn_errmsg(w->attach));
		w->active = false;
		return warm_kill(r, w);
	}
	return 0;
}

/* Reads w's output until both end frames, a protocol error (w->bad), the
 * process's exit status, the deadline or a cancellation. */
static enum run_end warm_pump(struct run *r, struct runner_warm *w)
{
	bool open = true;
	for (;;) {
		if (is_cancelled(r->in))
			return RUN_CANCELLED;
		int left = remaining_ms(r->deadline);
		if (left == 0)
			return RUN_TIMED_OUT;
		int slice = left < RUNNER_POLL_MS ? left : RUNNER_POLL_MS;
		if (open) {
			open = warm_read(w, slice);
			if (w->bad || (w->seen_end && w->seen_result))
				return RUN_EXITED; /* warm_conclude looks at w first */
			continue;
		}
		r->waitc = w->waitc;
		int rw = pump_wait(r, slice);
		r->waitc = NULL;
		if (rw != 0)
			return rw > 0 ? RUN_EXITED : RUN_WAIT_FAILED;
	}
}

/* The outcome: the bootstrap's result, a protocol error, or (exited, timed
 * out, cancelled, the wait failed) a fresh container's classification; w
 * is dead in every case but the first. */
static void warm_conclude(struct run *r, struct runner_warm *w, enum run_end end)
{
	const struct invocation *in = r->in;
	if (w->bad) {
		run_fail(r,
			 "warm container %.12s broke the protocol (a malformed or misplaced "
			 "end-of-invocation frame)",
			 w->id);
		w->active = false;
		warm_kill(r, w);
	} else if (w->seen_end && w->seen_result) {
		if (w->status == 0)
			finish(r->out, RUNNER_SUCCESS, 0, NULL);
		else if (w->error[0])
			finish(r->out, RUNNER_FAILURE, 1,
			       xasprintf("function \"%s\" handler \"%s\" failed: exit status 1: %s",
					 in->function, in->handler, w->error));
		else
			finish(r->out, RUNNER_FAILURE, 1,
			       xasprintf("function \"%s\" handler \"%s\" failed: exit status 1",
					 in->function, in->handler));
	} else {
		w->active = false;
		w->dead = true;
		memcpy(r->fw.last_err, w->fw.last_err, sizeof r->fw.last_err);
		r->attach = w->attach;
		r->waitc = w->waitc;
		w->attach = w->waitc = NULL;
		run_classify(r, end);
		docker_conn_free(r->attach);
		docker_conn_free(r->waitc);
	}
}

int runner_warm_invoke(struct docker *d, struct runner_warm *w, const struct invocation *in,
		       struct invocation_result *out)
{
	int64_t start = now_mono_ns();
	struct run r;
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
		long n = docker_conn_read(w->attach, w->chunk, READ_CHUNK, 0);
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
	struct invocation in = {
		.function = w->function, .handler = w->handler, .teardown_timeout_ms = timeout_ms};
	/* Streams first, as in runner_parked_discard. */
	docker_conn_free(w->attach);
	docker_conn_free(w->waitc);
	w->attach = w->waitc = NULL;
	if (d)
		teardown(d, &in, w->id, TEARDOWN_ID);
	warm_free(w);
}

const char *runner_warm_id(const struct runner_warm *w)
{
	return w ? w->id : "";
}

/* ---- orphan sweep ----------------------------------------------------- */

static char *url_encode(const char *s)
{
	struct buf b;
	buf_init(&b, 16 * 1024);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		    (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' || *p == '.' || *p == '~')
			buf_append(&b, p, 1);
		else
			buf_appendf(&b, "%%%02X", *p);
	}
	return buf_steal(&b);
}

/* Whether a container's labels (its relay.stream and relay.group, when it
 * has them and a scope is set) say it belongs to this stream and group. */
static bool same_scope(json_t *labels)
{
	const char *ls = json_string_value(json_object_get(labels, "relay.stream"));
	const char *lg = json_string_value(json_object_get(labels, "relay.group"));
	if (!scope_stream || !scope_group || !ls || !lg)
		return true;
	char vs[RUNNER_LABEL_MAX + 1], vg[RUNNER_LABEL_MAX + 1];
	return strcmp(ls, runner_label_value(scope_stream, vs, sizeof vs)) == 0 &&
	       strcmp(lg, runner_label_value(scope_group, vg, sizeof vg)) == 0;
}

int runner_sweep_orphans(struct docker *d, const char *hostname, const char *keep_instance,
			 int timeout_ms, size_t *removed, char **err)
{
	int rc = -1;
	size_t count = 0;
	const char *host = hostname ? hostname : runner_hostname();
	int64_t deadline = now_mono_ns() + (int64_t)timeout_ms * NS_PER_MS;
	struct docker_response r = {0};
	json_t *list = NULL;
	char *filters = NULL, *enc = NULL, *path = NULL;
	struct buf errs;
	buf_init(&errs, 4096);
	*err = NULL;

	json_t *f = json_pack("{s:[s, s+]}", "label", "relay.function", "relay.hostname=", host);
	filters = json_dumps(f, JSON_COMPACT);
	json_decref(f);
	if (!filters) {
		*err = xstrdup("orphan sweep: cannot encode the filter");
		goto out;
	}
	enc = url_encode(filters);
	path = xasprintf("/containers/json?all=1&filters=%s", enc);
	if (docker_request(d, "GET", path, NULL, 0, NULL, remaining_ms(deadline), &r) < 0 ||
	    r.status != 200) {
		*err = xasprintf("orphan sweep: listing containers: %s", docker_errmsg(d));
		goto out;
	}
	list = json_loadb(r.body, r.len, 0, NULL);
	if (!json_is_array(list)) {
		*err = xstrdup("orphan sweep: the daemon's container list is not a JSON array");
		goto out;
	}
	size_t i;
	json_t *c;
	json_array_foreach(list, i, c)
	{
		json_t *labels = json_object_get(c, "Labels");
		const char *id = json_string_value(json_object_get(c, "Id"));
		const char *lh = json_string_value(json_object_get(labels, "relay.hostname"));
		/* Check again here: the filter is the daemon's, the rule is ours. */
		if (!id || !json_object_get(labels, "relay.function") || !lh ||
		    strcmp(lh, host) != 0)
			continue;
		/* Never this process's own (none exist at startup; a guard should
		 * the sweep ever run later). A container without the label was
		 * made by a Relay from before the label: swept as before. */
		const char *li = json_string_value(json_object_get(labels, "relay.instance"));
		if (keep_instance && li && strcmp(li, keep_instance) == 0)
			continue;
		/* Another stream or group's Relay under this hostname holds a
		 * liveness record of its own: its containers are not ours. */
		if (!same_scope(labels))
			continue;
		/* relay function invoke removes its own, and is no worker. */
		if (json_object_get(labels, "relay.local"))
			continue;
		if (remaining_ms(deadline) == 0) {
			buf_appendf(&errs, "%stimed out after %d ms", errs.len ? "; " : "",
				    timeout_ms);
			break;
		}
		char *e = NULL;
		if (runner_remove_container(d, id, &e) < 0) {
			buf_appendf(&errs, "%s%s", errs.len ? "; " : "", e);
			free(e);
			continue;
		}
		count++;
		const char *fn = json_string_value(json_object_get(labels, "relay.function"));
		log_info(LOG_ATTRS("container", id, "function", fn ? fn : "", "instance",
				   li ? li : ""),
			 "removed orphaned execution container");
	}
	if (errs.len) {
		*err = xasprintf("orphan sweep: %s", errs.data);
		goto out;
	}
	rc = 0;
out:
	if (removed)
		*removed = count;
	json_decref(list);
	docker_response_free(&r);
	buf_free(&errs);
	free(filters);
	free(enc);
	free(path);
	return rc;
}
