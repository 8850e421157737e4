/*
 * The container runner; the contract is in runner.h. This file: names,
 * labels and the instance id, the demultiplexer, the wait answer, the
 * create body, and the run of one fresh container (create, attach, wait,
 * start, output forwarding, the outcome, teardown). Standby and warm
 * containers are in runner_parked.c, the orphan sweep in runner_sweep.c;
 * what the parts share is in runner_internal.h.
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
#include "base/log.h"
#include "base/util.h"
#include "engine/image.h"
#include "engine/runner_internal.h"

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

void runner_result_free(struct runner_result *r)
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
char *runner_scope_stream, *runner_scope_group;

void runner_set_stream_group(const char *stream, const char *group)
{
	free(runner_scope_stream);
	free(runner_scope_group);
	runner_scope_stream = stream ? xstrdup(stream) : NULL;
	runner_scope_group = group ? xstrdup(group) : NULL;
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

static long teardown_ms(const struct runner_request *in);

int64_t runner_worst_case_ns(const struct runner_request *in)
{
	static const struct runner_request none;
	if (!in)
		in = &none;
	return (int64_t)runner_setup_ms(in) * NS_PER_MS + runner_timeout_ns(in->timeout_ns) +
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

char *runner_container_name(const struct runner_request *in, char *out)
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

char *runner_format_prefix(const struct runner_request *in)
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
			if (size > RUNNER_WAIT_BODY_MAX)
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
	buf_init(&plain, RUNNER_WAIT_BODY_MAX);
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
long runner_call_ms(int64_t deadline)
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

static long teardown_ms(const struct runner_request *in)
{
	long ms = in->teardown_timeout_ms;
	return ms > 0 && ms < RUNNER_TEARDOWN_TIMEOUT_MS ? ms : RUNNER_TEARDOWN_TIMEOUT_MS;
}

long runner_setup_ms(const struct runner_request *in)
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
int runner_teardown(struct docker *d, const struct runner_request *in, const char *ref,
		    enum runner_teardown_kind kind)
{
	int64_t deadline = now_mono_ns() + (int64_t)teardown_ms(in) * NS_PER_MS;
	char *e = NULL;
	int tries = 0;
	for (;;) {
		free(e);
		e = NULL;
		tries++;
		int rc = remove_once(d, ref, runner_call_ms(deadline), &e);
		if (rc == 1 || (rc == 0 && kind != RUNNER_TEARDOWN_NAME_AWAIT)) {
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
	if (kind == RUNNER_TEARDOWN_NAME_AWAIT && !e)
		log_debug(LOG_ATTRS("function", in->function, "handler", in->handler, "container",
				    ref, "tries", t),
			  "no container by this name appeared after the create timed out");
	else
		log_warn(LOG_ATTRS("function", in->function, "handler", in->handler, "container",
				   ref, "tries", t, "error", e ? e : "not removed in time"),
			 "backstop removal of an execution container failed; the startup "
			 "orphan sweep removes it");
	free(e);
	return kind == RUNNER_TEARDOWN_NAME_AWAIT && !e ? 0 : -1;
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
static int env_add_secret(json_t *env, const struct runner_request *in, const struct env_var *s,
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
static json_t *container_env(const struct runner_request *in, char **err)
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
static json_t *create_body(const struct runner_request *in, const char *host, char **err)
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
	if (runner_scope_stream && runner_scope_group) {
		json_object_set_new(labels, "relay.stream", label_str(runner_scope_stream));
		json_object_set_new(labels, "relay.group", label_str(runner_scope_group));
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

void runner_forward_line(void *ctx, int stream, const char *line, size_t len)
{
	struct runner_forward *f = ctx;
	f->out.len = f->prefix_len;
	text_escape(&f->out, line, len, 0, TEXT_VERBATIM);
	buf_append(&f->out, "\n", 1);
	log_raw(f->out.data, f->out.len);
	if (stream == 2 && len) {
		size_t n = len < RUNNER_LAST_ERR_MAX ? len : RUNNER_LAST_ERR_MAX;
		memcpy(f->last_err, line, n);
		f->last_err[n] = '\0';
	}
}

int runner_remaining_ms(int64_t deadline)
{
	int64_t left = deadline - now_mono_ns();
	if (left <= 0)
		return 0;
	int64_t ms = (left + NS_PER_MS - 1) / NS_PER_MS;
	return ms > 0x7fffffff ? 0x7fffffff : (int)ms;
}

bool runner_is_cancelled(const struct runner_request *in)
{
	return in->cancelled && in->cancelled(in->cancel_ctx);
}

int runner_finish(struct runner_result *out, enum runner_outcome o, int code, char *error)
{
	out->outcome = o;
	out->exit_code = code;
	free(out->error);
	out->error = error;
	return o == RUNNER_SUCCESS ? 0 : -1;
}

void runner_run_init(struct runner_run *r, struct docker *d, const struct runner_request *in,
		     struct runner_result *out, int64_t start)
{
	memset(r, 0, sizeof *r);
	r->d = d;
	r->in = in;
	r->out = out;
	r->host = in->hostname ? in->hostname : runner_hostname();
	r->start = start;
	r->start_wall = now_wall_ns();
	r->setup_deadline = start + (int64_t)runner_setup_ms(in) * NS_PER_MS;
	r->timeout = runner_timeout_ns(in->timeout_ns);
	r->status = -1;
	r->chunk = xmalloc(RUNNER_READ_CHUNK);
	buf_init(&r->fw.out, 4 * RUNNER_LINE_MAX + 4096); /* escaped: 4 bytes a byte at most */
	char *prefix = runner_format_prefix(in);
	buf_append(&r->fw.out, prefix, strlen(prefix));
	r->fw.prefix_len = r->fw.out.len;
	free(prefix);
	runner_demux_init(&r->demux, runner_forward_line, &r->fw);
	buf_init(&r->waitbuf, RUNNER_WAIT_BODY_MAX);
	image_hold(in->image);
}

void runner_run_free(struct runner_run *r)
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
int runner_run_fail(struct runner_run *r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *why = xvasprintf(fmt, ap);
	va_end(ap);
	runner_finish(r->out, RUNNER_ERROR, -1,
		      xasprintf("function \"%s\" handler \"%s\": %s", r->in->function,
				r->in->handler, why));
	free(why);
	return -1;
}

/* The serialised create body (secrets resolved), or NULL after runner_run_fail. */
static char *create_text(struct runner_run *r)
{
	char *e = NULL;
	json_t *body = create_body(r->in, r->host, &e);
	if (!body) {
		runner_run_fail(r, "%s", e);
		free(e);
		return NULL;
	}
	char *text = json_dumps(body, JSON_COMPACT);
	scrub_body(body);
	if (!text)
		runner_run_fail(r, "cannot encode the container configuration");
	return text;
}

/* 1-2: resolve secrets, create under a fresh name. */
int runner_run_create(struct runner_run *r)
{
	struct docker *d = r->d;
	const struct runner_request *in = r->in;
	struct docker_response resp = {0};
	json_t *created = NULL;
	char *path = NULL;
	int rc = -1;
	char *text = create_text(r);
	if (!text)
		return -1;
	if (phase_over(r->setup_deadline)) {
		runner_run_fail(r,
				"no time left to create the container (setup is bounded by %ld ms)",
				runner_setup_ms(in));
		goto out;
	}
	const char *name = runner_container_name(in, r->out->container_name);
	path = xasprintf("/containers/create?name=%s", name);
	int rq = docker_request(d, "POST", path, text, strlen(text), NULL,
				runner_call_ms(r->setup_deadline), &resp);
	scrub(text, strlen(text));
	if (rq < 0 || resp.status != 201) {
		runner_run_fail(r, "creating container from %s: %s", in->image, docker_errmsg(d));
		r->out->not_run = rq < 0 && docker_no_answer(d);
		/* The answer was lost after the request left (a timeout, a
		 * dropped connection): the daemon may have created the
		 * container, or may still be creating it, with the secrets in
		 * its Env. A 5xx answer leaves it unknown as well; a 4xx is a
		 * refusal (and a 409 would be someone else's container). */
		if (rq < 0 && !docker_request_unsent(d))
			runner_teardown(d, in, name, RUNNER_TEARDOWN_NAME_AWAIT);
		else if (rq == 0 && resp.status >= 500)
			runner_teardown(d, in, name, RUNNER_TEARDOWN_NAME_ONCE);
		goto out;
	}
	created = json_loadb(resp.body, resp.len, 0, NULL);
	const char *id = json_string_value(json_object_get(created, "Id"));
	if (!id || !*id || strlen(id) >= sizeof r->out->container_id) {
		runner_run_fail(r, "creating container: the daemon's answer has no Id");
		runner_teardown(d, in, name, RUNNER_TEARDOWN_NAME_ONCE);
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
static int open_stream(struct runner_run *r, const char *endpoint, const char *what,
		       struct docker_conn **c)
{
	char *path = xasprintf("/containers/%s/%s", r->id, endpoint);
	int rc = docker_hijack_timeout(r->d, path, runner_call_ms(r->setup_deadline), c);
	free(path);
	if (rc < 0) {
		runner_run_fail(r, "%s container %.12s: %s", what, r->id, docker_errmsg(r->d));
		r->out->not_run = docker_no_answer(r->d);
		runner_teardown(r->d, r->in, r->id, RUNNER_TEARDOWN_ID);
	}
	return rc;
}

/* 3: attach and wait, both before start. */
int runner_run_open_streams(struct runner_run *r)
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
int runner_run_start(struct runner_run *r, int64_t deadline)
{
	struct docker_response resp = {0};
	char *path = xasprintf("/containers/%s/start", r->id);
	int rq = docker_request(r->d, "POST", path, NULL, 0, NULL, runner_call_ms(deadline), &resp);
	long status = resp.status;
	free(path);
	docker_response_free(&resp);
	if (rq < 0 || (status != 204 && status != 304)) {
		runner_run_fail(r, "starting container %.12s: %s", r->id, docker_errmsg(r->d));
		/* Sent but unanswered, it may have started: an attempt. */
		r->out->not_run = rq < 0 && docker_request_unsent(r->d);
		runner_teardown(r->d, r->in, r->id, RUNNER_TEARDOWN_ID);
		return -1;
	}
	return 0;
}

/* 4b: write the event to stdin and half-close it. A stdin that cannot be
 * written is only logged: the handler sees EOF and the exit status
 * decides. */
void runner_run_feed(struct runner_run *r)
{
	const struct runner_request *in = r->in;
	if (in->payload_len) {
		int w = docker_conn_write_timeout(r->attach, in->payload, in->payload_len,
						  runner_remaining_ms(r->deadline));
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
static void pump_attach(struct runner_run *r, int slice)
{
	long n = docker_conn_read(r->attach, r->chunk, RUNNER_READ_CHUNK, slice);
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
int runner_pump_wait(struct runner_run *r, int slice)
{
	long n = docker_conn_read(r->waitc, r->chunk, RUNNER_READ_CHUNK, slice);
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
enum runner_run_end runner_run_pump(struct runner_run *r)
{
	enum runner_run_end end;
	for (;;) {
		if (runner_is_cancelled(r->in)) {
			end = RUNNER_RUN_CANCELLED;
			break;
		}
		int left = runner_remaining_ms(r->deadline);
		if (left == 0) {
			end = RUNNER_RUN_TIMED_OUT;
			break;
		}
		int slice = left < RUNNER_POLL_MS ? left : RUNNER_POLL_MS;
		if (r->attach_open) {
			pump_attach(r, slice);
			continue;
		}
		int w = runner_pump_wait(r, slice);
		if (w == 0)
			continue;
		end = w > 0 ? RUNNER_RUN_EXITED : RUNNER_RUN_WAIT_FAILED;
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
static bool run_oom_killed(struct runner_run *r)
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
void runner_run_classify(struct runner_run *r, enum runner_run_end end)
{
	const char *F = r->in->function, *H = r->in->handler;
	char dur[DURATION_STR_MAX];
	if (end != RUNNER_RUN_EXITED) {
		/* The output is no longer read: close the streams first. A
		 * handler still writing would otherwise fill the attach
		 * connection, and the daemon, blocked copying its output to us,
		 * does not finish the forced removal until the teardown
		 * deadline (measured: a timeout of 4 s took 34 s). */
		docker_conn_free(r->attach);
		docker_conn_free(r->waitc);
		r->attach = r->waitc = NULL;
		runner_teardown(r->d, r->in, r->id, RUNNER_TEARDOWN_ID);
	}
	switch (end) {
	case RUNNER_RUN_TIMED_OUT:
		runner_finish(r->out, RUNNER_TIMEOUT, -1,
			      xasprintf("function \"%s\" handler \"%s\" timed out after %s", F, H,
					duration_format(r->timeout, dur)));
		return;
	case RUNNER_RUN_CANCELLED:
		runner_finish(
			r->out, RUNNER_CANCELLED, -1,
			xasprintf("function \"%s\" handler \"%s\" cancelled by shutdown", F, H));
		return;
	case RUNNER_RUN_WAIT_FAILED:
		runner_run_fail(r, "waiting for container %.12s: %s", r->id, r->err);
		return;
	case RUNNER_RUN_EXITED: break;
	}
	if (r->wait_err)
		runner_finish(r->out, RUNNER_ERROR, r->status,
			      xasprintf("function \"%s\" handler \"%s\": container %.12s: %s", F, H,
					r->id, r->wait_err));
	else if (r->status == 0)
		runner_finish(r->out, RUNNER_SUCCESS, 0, NULL);
	else if (r->status == 137 && run_oom_killed(r))
		runner_finish(r->out, RUNNER_FAILURE, r->status,
			      xasprintf("function \"%s\" handler \"%s\" failed: exit status %d: "
					"killed: out "
					"of memory (limit %lld MiB)",
					F, H, r->status, RUNNER_MEMORY_BYTES / (1024 * 1024)));
	else if (r->fw.last_err[0])
		runner_finish(r->out, RUNNER_FAILURE, r->status,
			      xasprintf("function \"%s\" handler \"%s\" failed: exit status %d: %s",
					F, H, r->status, r->fw.last_err));
	else
		runner_finish(r->out, RUNNER_FAILURE, r->status,
			      xasprintf("function \"%s\" handler \"%s\" failed: exit status %d", F,
					H, r->status));
}

/* runner_invoke with its setup deadline counted from start. */
int runner_invoke_from(struct docker *d, const struct runner_request *in, struct runner_result *out,
		       int64_t start)
{
	memset(out, 0, sizeof *out);
	out->exit_code = -1;
	if (!in->function || !in->handler || !in->image)
		return runner_finish(out, RUNNER_ERROR, -1,
				     xstrdup("invocation without a function, handler or image"));
	struct runner_run r;
	runner_run_init(&r, d, in, out, start);
	if (runner_run_create(&r) == 0 && runner_run_open_streams(&r) == 0) {
		/* The start is setup's; the handler phase is the rule's timeout
		 * from the daemon's answer, when the process runs (a loaded
		 * daemon took 5.5 s to answer: on a 6 s default that left the
		 * handler half a second). */
		if (runner_run_start(&r, r.setup_deadline) == 0) {
			r.deadline = now_mono_ns() + r.timeout;
			runner_run_feed(&r);
			runner_run_classify(&r, runner_run_pump(&r));
		}
	}
	runner_run_free(&r);
	return out->outcome == RUNNER_SUCCESS ? 0 : -1;
}

int runner_invoke(struct docker *d, const struct runner_request *in, struct runner_result *out)
{
	return runner_invoke_from(d, in, out,
				  now_mono_ns()); /* the setup deadline counts from here */
}
