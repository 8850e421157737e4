/*
 * The GitHub webhook (see webhook.h for the contract).
 *
 * Why nothing syncs in the request path: a sync clones or fetches over SSH
 * and may take minutes, GitHub times a delivery out after ten seconds, and a
 * burst of pushes must not start a burst of syncs. The handler only decides
 * and calls webhook_coalescer_trigger, which wakes one dedicated thread. The thread
 * runs one sync at a time; triggers that arrive meanwhile set a single
 * pending flag, so any number of them costs exactly one follow-up sync, and
 * that sync fetches whatever the ref points to by then (the latest push).
 *
 * Why the secret is read on every delivery: rotating it (`relay secret set`)
 * takes effect at once, without a restart. The value lives only for the
 * HMAC computation and is zeroed when freed; it never reaches a log line or
 * a response.
 *
 * The end of the file is relay start's glue between the webhook and git
 * sync (webhook_start_git): which git source the webhook serves, and what
 * one triggered sync runs and logs.
 */
#include "git/webhook.h"

#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "git/gitsync.h"
#include "io/http.h"
#include "base/log.h"
#include "model/secret.h"
#include "base/util.h"

/* ---- coalescer --------------------------------------------------------- */

/* mu guards pending, running and stopping; cond wakes the thread. */
struct webhook_coalescer {
	void (*run)(void *arg);
	void *arg;
	pthread_mutex_t mu;
	pthread_cond_t cond;
	pthread_t thread;
	bool pending;  /* a run is queued */
	bool running;  /* a run is in progress (for tests and reasoning) */
	bool stopping; /* webhook_coalescer_free was called */
};

static void *webhook_coalescer_main(void *p)
{
	struct webhook_coalescer *c = p;
	pthread_mutex_lock(&c->mu);
	for (;;) {
		while (!c->pending && !c->stopping)
			pthread_cond_wait(&c->cond, &c->mu);
		if (c->stopping)
			break; /* a queued run is dropped */
		c->pending = false;
		c->running = true;
		pthread_mutex_unlock(&c->mu);
		c->run(c->arg);
		pthread_mutex_lock(&c->mu);
		c->running = false;
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

struct webhook_coalescer *webhook_coalescer_new(void (*run)(void *arg), void *arg)
{
	struct webhook_coalescer *c = xcalloc(1, sizeof *c);
	c->run = run;
	c->arg = arg;
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cond, NULL);
	int e = thread_start(&c->thread, "webhook-sync", webhook_coalescer_main, c);
	if (e != 0) {
		pthread_cond_destroy(&c->cond);
		pthread_mutex_destroy(&c->mu);
		free(c);
		return NULL;
	}
	return c;
}

void webhook_coalescer_trigger(struct webhook_coalescer *c)
{
	pthread_mutex_lock(&c->mu);
	c->pending = true;
	pthread_cond_signal(&c->cond);
	pthread_mutex_unlock(&c->mu);
}

void webhook_coalescer_free(struct webhook_coalescer *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->mu);
	c->stopping = true;
	pthread_cond_signal(&c->cond);
	pthread_mutex_unlock(&c->mu);
	pthread_join(c->thread, NULL);
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

/* ---- replay set -------------------------------------------------------- */

struct replay_entry {
	unsigned char id[32], body[32]; /* SHA-256 */
	bool has_id;
	int64_t at_ns;
};

/* A ring of entries in the order they were recorded (so by time): head is
 * the oldest. mu guards everything. */
struct webhook_replay {
	pthread_mutex_t mu;
	struct replay_entry *ring;
	size_t max, head, n;
	int64_t window_ns;
};

struct webhook_replay *webhook_replay_new(size_t max, int64_t window_ns)
{
	struct webhook_replay *r = xcalloc(1, sizeof *r);
	pthread_mutex_init(&r->mu, NULL);
	r->ring = xcalloc(max, sizeof *r->ring);
	r->max = max;
	r->window_ns = window_ns;
	return r;
}

static void sha256(const void *p, size_t n, unsigned char out[32])
{
	unsigned int len = 0;
	if (EVP_Digest(p, n, out, &len, EVP_sha256(), NULL) != 1 || len != 32)
		abort(); /* SHA-256 is always available in OpenSSL 3 */
}

bool webhook_replay_add(struct webhook_replay *r, const char *id, const void *body, size_t len,
			int64_t now_ns)
{
	struct replay_entry e = {.has_id = id && *id, .at_ns = now_ns};
	if (e.has_id)
		sha256(id, strlen(id), e.id);
	sha256(body ? body : "", len, e.body);
	bool fresh = true;
	pthread_mutex_lock(&r->mu);
	while (r->n && now_ns - r->ring[r->head].at_ns >= r->window_ns) {
		r->head = (r->head + 1) % r->max;
		r->n--;
	}
	for (size_t i = 0; i < r->n && fresh; i++) {
		const struct replay_entry *x = &r->ring[(r->head + i) % r->max];
		fresh = memcmp(x->body, e.body, 32) != 0 &&
			!(e.has_id && x->has_id && memcmp(x->id, e.id, 32) == 0);
	}
	if (fresh) {
		if (r->n == r->max) { /* WEBHOOK_REPLAY_MAX: forget the oldest */
			r->head = (r->head + 1) % r->max;
			r->n--;
		}
		r->ring[(r->head + r->n) % r->max] = e;
		r->n++;
	}
	pthread_mutex_unlock(&r->mu);
	return fresh;
}

size_t webhook_replay_size(struct webhook_replay *r)
{
	pthread_mutex_lock(&r->mu);
	size_t n = r->n;
	pthread_mutex_unlock(&r->mu);
	return n;
}

void webhook_replay_free(struct webhook_replay *r)
{
	if (!r)
		return;
	pthread_mutex_destroy(&r->mu);
	free(r->ring);
	free(r);
}

/* ---- signature --------------------------------------------------------- */

bool webhook_signature_ok(const char *header, const void *body, size_t len, const void *key,
			  size_t keylen)
{
	static const char prefix[] = "sha256=";
	unsigned char want[32], got[EVP_MAX_MD_SIZE];
	unsigned int gotlen = 0;
	if (!header || strncmp(header, prefix, sizeof prefix - 1) != 0)
		return false;
	const char *hex = header + sizeof prefix - 1;
	if (strlen(hex) != 2 * sizeof want)
		return false;
	for (size_t i = 0; i < sizeof want; i++) {
		int hi = hex_digit((unsigned char)hex[2 * i]),
		    lo = hex_digit((unsigned char)hex[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return false;
		want[i] = (unsigned char)(hi << 4 | lo);
	}
	/* HMAC() wants a non-NULL key even when it is empty. */
	if (!HMAC(EVP_sha256(), key ? key : "", (int)keylen, body ? body : (const void *)"", len,
		  got, &gotlen) ||
	    gotlen != sizeof want)
		return false;
	return CRYPTO_memcmp(got, want, sizeof want) == 0;
}

/* ---- decision ---------------------------------------------------------- */

/* True when the media type of content_type (parameters ignored) is type. */
static bool media_type_is(const char *content_type, const char *type)
{
	if (!content_type)
		return false;
	size_t n = strcspn(content_type, ";");
	while (n && (content_type[n - 1] == ' ' || content_type[n - 1] == '\t'))
		n--;
	return n == strlen(type) && strncasecmp(content_type, type, n) == 0;
}

/* The URL-decoded value of the form field "payload" (malloc'd, *out_len
 * bytes plus a NUL), or NULL when absent or badly encoded. */
static char *form_payload(const char *body, size_t len, size_t *out_len)
{
	const char *p = body, *end = body + len;
	while (p < end) {
		const char *amp = memchr(p, '&', (size_t)(end - p));
		const char *field_end = amp ? amp : end;
		if ((size_t)(field_end - p) >= 8 && memcmp(p, "payload=", 8) == 0) {
			const char *v = p + 8;
			char *out = xmalloc((size_t)(field_end - v) + 1);
			size_t n = 0;
			for (; v < field_end; v++) {
				if (*v == '+') {
					out[n++] = ' ';
				} else if (*v == '%') {
					int hi = field_end - v > 2 ? hex_digit((unsigned char)v[1])
								   : -1;
					int lo = hi >= 0 ? hex_digit((unsigned char)v[2]) : -1;
					if (lo < 0) {
						free(out);
						return NULL;
					}
					out[n++] = (char)(hi << 4 | lo);
					v += 2;
				} else {
					out[n++] = *v;
				}
			}
			out[n] = '\0';
			*out_len = n;
			return out;
		}
		p = field_end + 1;
	}
	return NULL;
}

/* True when url names the configured repository (identity want). */
static bool same_identity(const char *want, const char *url)
{
	if (!url)
		return false;
	char *id = gitsync_repo_identity(url);
	bool same = id && strcmp(id, want) == 0;
	free(id);
	return same;
}

static bool same_repository(const char *repository, json_t *repo)
{
	static const char *const fields[] = {"ssh_url", "clone_url", "git_url", "url"};
	char *want = repository ? gitsync_repo_identity(repository) : NULL;
	bool same = false;
	if (!want || !json_is_object(repo))
		goto out;
	for (size_t i = 0; i < ARRAY_LEN(fields) && !same; i++)
		same = same_identity(want, json_string_value(json_object_get(repo, fields[i])));
	/* full_name is "owner/name" and GitHub's names are case-insensitive. */
	const char *full = json_string_value(json_object_get(repo, "full_name"));
	if (!same && full && str_has_prefix(want, "github.com/"))
		same = strcasecmp(full, want + strlen("github.com/")) == 0;
out:
	free(want);
	return same;
}

/* webhook_decide, with the pushed ref matched by gitsync_ref_matches: only
 * the exact ref the configured one resolves to (data_dir: where the last
 * sync recorded what a bare name resolved to; NULL: not known). */
static enum webhook_verdict decide(const char *event, const char *content_type, const char *body,
				   size_t len, const char *repository, const char *ref,
				   const char *data_dir, const char **why)
{
	if (!event || strcmp(event, "push") != 0) {
		*why = event && strcmp(event, "ping") == 0 ? "ping" : "not a push event";
		return WEBHOOK_IGNORE;
	}
	char *form = NULL;
	size_t form_len = 0;
	if (media_type_is(content_type, "application/x-www-form-urlencoded")) {
		form = form_payload(body, len, &form_len);
		if (!form) {
			*why = "bad form payload";
			return WEBHOOK_BAD;
		}
		body = form;
		len = form_len;
	}
	json_error_t jerr;
	json_t *root = json_loadb(body, len, 0, &jerr);
	free(form);
	enum webhook_verdict v = WEBHOOK_IGNORE;
	const char *pushed = json_string_value(json_object_get(root, "ref"));
	if (!json_is_object(root) || !pushed) {
		*why = root ? "push payload without ref" : "unparseable payload";
		v = WEBHOOK_BAD;
	} else if (json_is_true(json_object_get(root, "deleted"))) {
		*why = "deleted ref";
	} else if (!gitsync_ref_matches(data_dir, ref && *ref ? ref : "main", pushed)) {
		*why = "other ref";
	} else if (!same_repository(repository, json_object_get(root, "repository"))) {
		*why = "other repository";
	} else {
		*why = "push";
		v = WEBHOOK_SYNC;
	}
	json_decref(root);
	return v;
}

enum webhook_verdict webhook_decide(const char *event, const char *content_type, const char *body,
				    size_t len, const char *repository, const char *ref,
				    const char **why)
{
	return decide(event, content_type, body, len, repository, ref, NULL, why);
}

/* ---- server ------------------------------------------------------------ */

struct webhook_target;
static void webhook_target_free(struct webhook_target *t);

struct webhook {
	char *repository, *ref, *secret_name, *data_dir; /* copies */
	const struct secret_provider *secrets;
	struct webhook_coalescer *coalescer;
	struct http_server *server;
	struct webhook_replay *replays;
	pthread_mutex_t mu; /* guards nreplays */
	unsigned long nreplays;
	struct webhook_target *target; /* webhook_start_git's sync argument, or NULL */
};

static void log_delivery(enum log_level level, const char *event, const char *delivery,
			 const char *verdict, const char *why)
{
	log_record(level,
		   LOG_ATTRS("event", event ? event : "", "delivery", delivery ? delivery : "",
			     "verdict", verdict, "reason", why),
		   "webhook delivery");
}

/* Checks X-Hub-Signature-256 against the secret, read now. Returns 0 when
 * authenticated (or no secret is configured), else fills resp. */
static int authenticate(struct webhook *w, const struct http_request *req,
			struct http_response *resp)
{
	if (!w->secret_name)
		return 0;
	char *key = NULL, *err = NULL;
	size_t keylen = 0;
	if (secret_get(w->secrets, w->secret_name, &key, &keylen, &err) < 0) {
		/* secret.h: messages never contain the value */
		log_error(LOG_ATTRS("secret", w->secret_name, "error", err),
			  "webhook secret unavailable");
		free(err);
		http_response_text(resp, 500, "text/plain; charset=utf-8",
				   "webhook secret unavailable\n");
		return -1;
	}
	const char *sig = http_request_header(req, "X-Hub-Signature-256");
	bool ok = webhook_signature_ok(sig, req->body, req->body_len, key, keylen);
	secret_value_free(key, keylen);
	if (ok)
		return 0;
	http_response_text(resp, 401, "text/plain; charset=utf-8", "invalid signature\n");
	return -1;
}

static void serve(const struct http_request *req, struct http_response *resp, void *arg)
{
	struct webhook *w = arg;
	const char *text = "text/plain; charset=utf-8";
	if (strcmp(req->path, "/github") != 0) {
		http_response_text(resp, 404, text, "not found\n");
		return;
	}
	if (strcmp(req->method, "POST") != 0) {
		http_response_header(resp, "Allow", "POST");
		http_response_text(resp, 405, text, "method not allowed\n");
		return;
	}
	const char *event = http_request_header(req, "X-GitHub-Event");
	const char *delivery = http_request_header(req, "X-GitHub-Delivery");
	if (authenticate(w, req, resp) < 0) {
		if (resp->status == 401)
			log_delivery(LOG_WARN, event, delivery, "rejected", "invalid signature");
		return;
	}
	const char *why = "";
	enum webhook_verdict v = decide(event, http_request_header(req, "Content-Type"), req->body,
					req->body_len, w->repository, w->ref, w->data_dir, &why);
	char *msg = NULL;
	/* After the signature and the decision: only an authenticated delivery
	 * that would sync is remembered (and so can be a replay). Without a
	 * secret nothing is authenticated: anyone may trigger a sync with a
	 * body of their own, so refusing a repeated one protects nothing and
	 * would drop a legitimate redelivery. */
	if (v == WEBHOOK_SYNC && w->secret_name &&
	    !webhook_replay_add(w->replays, delivery, req->body, req->body_len, now_mono_ns())) {
		pthread_mutex_lock(&w->mu);
		w->nreplays++;
		pthread_mutex_unlock(&w->mu);
		log_delivery(LOG_WARN, event, delivery, "ignored", "duplicate delivery");
		http_response_text(resp, 200, text, "ignored: duplicate delivery\n");
		return;
	}
	switch (v) {
	case WEBHOOK_SYNC:
		webhook_coalescer_trigger(w->coalescer);
		log_delivery(LOG_INFO, event, delivery, "sync", why);
		http_response_text(resp, 202, text, "sync scheduled\n");
		return;
	case WEBHOOK_IGNORE:
		log_delivery(LOG_INFO, event, delivery, "ignored", why);
		msg = xasprintf("ignored: %s\n", why);
		http_response_text(resp, 200, text, msg);
		break;
	case WEBHOOK_BAD:
		log_delivery(LOG_WARN, event, delivery, "bad", why);
		msg = xasprintf("bad request: %s\n", why);
		http_response_text(resp, 400, text, msg);
		break;
	}
	free(msg);
}

int webhook_start(const struct webhook_config *cfg, struct webhook **out, char **err)
{
	*out = NULL;
	*err = NULL;
	if (!cfg->repository || !cfg->sync) {
		*err = xasprintf("webhook: no repository or sync configured");
		return -1;
	}
	if (cfg->secret_name && !cfg->secrets) {
		*err = xasprintf("webhook: secret %s configured without a secret store",
				 cfg->secret_name);
		return -1;
	}
	struct webhook *w = xcalloc(1, sizeof *w);
	w->repository = xstrdup(cfg->repository);
	w->ref = xstrdup(cfg->ref && *cfg->ref ? cfg->ref : "main");
	w->secret_name = cfg->secret_name ? xstrdup(cfg->secret_name) : NULL;
	w->data_dir = cfg->data_dir ? xstrdup(cfg->data_dir) : NULL;
	w->secrets = cfg->secrets;
	pthread_mutex_init(&w->mu, NULL);
	w->replays = webhook_replay_new(WEBHOOK_REPLAY_MAX, WEBHOOK_REPLAY_SECONDS * 1000000000LL);
	w->coalescer = webhook_coalescer_new(cfg->sync, cfg->sync_arg);
	if (!w->coalescer) {
		*err = xasprintf("cannot start the webhook sync thread");
		webhook_stop(w);
		return -1;
	}
	struct http_server_config hc = {
		.name = "Webhook", /* http.c logs "Webhook http server listening on <addr>" */
		.listen_addr = cfg->listen_addr,
		.handler = serve,
		.arg = w,
		.max_body = cfg->max_body ? cfg->max_body : WEBHOOK_MAX_BODY,
		.body_budget = cfg->body_budget ? cfg->body_budget : WEBHOOK_BODY_BUDGET,
		.timeout_seconds = WEBHOOK_IDLE_SECONDS,
		.body_timeout_seconds =
			cfg->body_seconds ? cfg->body_seconds : WEBHOOK_BODY_SECONDS,
		.retry_bind = false,
	};
	if (http_server_start(&hc, &w->server, err) < 0) {
		webhook_stop(w);
		return -1;
	}
	*out = w;
	return 0;
}

int webhook_port(struct webhook *w)
{
	return w ? http_server_port(w->server) : 0;
}

void webhook_stop(struct webhook *w)
{
	if (!w)
		return;
	/* The server first: once it returns no handler can trigger any more. */
	http_server_stop(w->server);
	webhook_coalescer_free(w->coalescer);
	webhook_target_free(w->target); /* after the coalescer: no sync uses it now */
	webhook_replay_free(w->replays);
	pthread_mutex_destroy(&w->mu);
	free(w->repository);
	free(w->ref);
	free(w->secret_name);
	free(w->data_dir);
	free(w);
}

void webhook_stats(struct webhook *w, struct webhook_stats *out)
{
	*out = (struct webhook_stats){0};
	if (!w)
		return;
	http_server_stats(w->server, &out->http);
	out->remembered = webhook_replay_size(w->replays);
	pthread_mutex_lock(&w->mu);
	out->replays = w->nreplays;
	pthread_mutex_unlock(&w->mu);
}

/* ---- relay start: the webhook over the git source ---------------------- */

/* What a webhook-triggered sync works on; owned by the webhook. */
struct webhook_target {
	char *data_dir, *functions_dir;
};

static void webhook_target_free(struct webhook_target *t)
{
	if (!t)
		return;
	free(t->data_dir);
	free(t->functions_dir);
	free(t);
}

static void log_notice(void *arg, const char *msg)
{
	(void)arg;
	log_info(NULL, "%s", msg);
}

/* One webhook-triggered sync, on the coalescer's thread. The reconciler
 * picks the result up from the functions directory like any other edit. */
static void webhook_target_sync(void *arg)
{
	const struct webhook_target *t = arg;
	struct gitsync_result res;
	char *err = NULL;
	log_info(NULL, "git sync started (webhook)");
	int rc = gitsync_run(t->data_dir, t->functions_dir, log_notice, NULL, &res, &err);
	if (rc == 0) {
		char nf[24], nr[24];
		snprintf_(nf, sizeof nf, "%zu", res.functions);
		snprintf_(nr, sizeof nr, "%zu", res.removed);
		log_info(LOG_ATTRS("commit", res.commit, "functions", nf, "removed", nr),
			 "git sync complete");
	} else {
		log_error(LOG_ATTRS("error", rc == -ENOENT ? "no git source configured" : err),
			  "git sync failed");
	}
	free(err);
}

int webhook_start_git(const char *listen_addr, const char *data_dir, const char *functions_dir,
		      const struct secret_provider *secrets, struct webhook **out)
{
	*out = NULL;
	if (!listen_addr) {
		log_info(NULL, "webhook server disabled: GIT_WEBHOOK_ADDR is not set");
		return 0;
	}
	struct gitsync_source src = {0};
	char *err = NULL;
	int rc = gitsync_source_load(data_dir, &src, &err);
	if (rc == -ENOENT) {
		log_info(LOG_ATTRS("addr", listen_addr),
			 "webhook server disabled: no git source configured (relay git set)");
		rc = 0;
	} else if (rc < 0) {
		log_warn(LOG_ATTRS("addr", listen_addr, "error", err),
			 "webhook server disabled: the git source is unreadable");
		rc = 0;
	} else {
		struct webhook_target *t = xcalloc(1, sizeof *t);
		t->data_dir = xstrdup(data_dir);
		t->functions_dir = xstrdup(functions_dir);
		struct webhook_config wcfg = {
			.listen_addr = listen_addr,
			.repository = src.repository,
			.ref = src.ref,
			.data_dir = data_dir,
			.secret_name = src.webhook_secret,
			.secrets = secrets,
			.sync = webhook_target_sync,
			.sync_arg = t,
		};
		free(err);
		err = NULL;
		rc = webhook_start(&wcfg, out, &err);
		if (rc < 0) {
			webhook_target_free(t);
			log_error(LOG_ATTRS("addr", listen_addr, "error", err),
				  "cannot start the webhook server");
		} else {
			(*out)->target = t;
		}
	}
	free(err);
	gitsync_source_free(&src);
	return rc;
}
