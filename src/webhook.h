/*
 * The GitHub webhook (relay-spec "Git", GitHub webhook): POST /github on
 * GIT_WEBHOOK_ADDR schedules a git sync through a coalescing scheduler.
 */
#ifndef RELAY_WEBHOOK_H
#define RELAY_WEBHOOK_H

#include <stdbool.h>
#include <stddef.h>

struct secret_provider;

struct webhook_config {
	const char *listen_addr;	       /* GIT_WEBHOOK_ADDR */
	const char *repository;		       /* configured SSH URL */
	const char *ref;		       /* configured ref */
	const char *secret_name;	       /* webhook secret reference, or NULL */
	const struct secret_provider *secrets; /* read on every delivery */
	/* Runs one sync on the scheduler's thread. */
	void (*sync)(void *arg);
	void *sync_arg;
};

struct webhook;

/* Binds and starts serving; a bind failure is an error (fatal at startup).
 * Logs "Webhook http server listening on <addr>". The strings in cfg are
 * copied; cfg->secrets is borrowed and must outlive the webhook. Returns 0
 * with *out, or -1 with *err (malloc'd). Requests are served on server
 * threads, the sync callback on the scheduler's one thread. */
int webhook_start(const struct webhook_config *cfg, struct webhook **out, char **err);
/* The bound port (tests with port 0). */
int webhook_port(struct webhook *w);
/* Stops the server, waits for a running sync, drops a queued one. NULL is
 * a no-op. */
void webhook_stop(struct webhook *w);

/* ---- pure parts, unit-tested ---- */

/* X-Hub-Signature-256 check: header is "sha256=<64 hex>" (hex either case);
 * HMAC-SHA256 over body with key, compared in constant time. */
bool webhook_signature_ok(const char *header, const void *body, size_t len, const void *key,
			  size_t keylen);

enum webhook_verdict {
	WEBHOOK_SYNC,	/* a push to the configured repository and ref */
	WEBHOOK_IGNORE, /* acknowledged with 200 and ignored */
	WEBHOOK_BAD,	/* unparseable push payload: 400 */
};

/* Decides on an authenticated delivery. event is X-GitHub-Event (may be
 * NULL); content_type selects application/json or form-encoded
 * (payload=<urlencoded json>); anything else is read as JSON. ref NULL or
 * "" means "main". *why (static string) says why for logs. Pure. */
enum webhook_verdict webhook_decide(const char *event, const char *content_type, const char *body,
				    size_t len, const char *repository, const char *ref,
				    const char **why);

/* Coalescing scheduler: at most one sync runs at a time; triggers arriving
 * while one runs collapse into exactly one follow-up run. */
struct coalescer;
/* Starts the scheduler's thread (signals blocked); NULL when it cannot. */
struct coalescer *coalescer_new(void (*run)(void *arg), void *arg);
/* Thread-safe; never blocks on a running sync. */
void coalescer_trigger(struct coalescer *c);
/* Waits for a running run to finish (a queued follow-up is dropped), joins
 * the thread and frees c. NULL is a no-op. */
void coalescer_free(struct coalescer *c);

#endif
