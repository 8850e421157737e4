/*
 * The GitHub webhook (docs/commands.md, "relay git"): POST /github on
 * GIT_WEBHOOK_ADDR schedules a git sync through a coalescing scheduler.
 *
 * Cost model of one webhook request (anyone who can reach the port can
 * send one; enforced by http.c with the limits webhook.c gives it):
 *  - at most 128 connections, 16 from one address (http.h's
 *    HTTP_DEFAULT_CONNECTION_LIMIT, HTTP_DEFAULT_PER_IP_LIMIT), each
 *    closed after 5 s without traffic (WEBHOOK_IDLE_SECONDS); the request
 *    line and headers within MHD's 32 KiB pool and within 5 s of the
 *    accept however they are paced (HTTP_DEFAULT_HEADER_TIMEOUT_SECONDS);
 *  - a body of at most 5 MiB (WEBHOOK_MAX_BODY; 413), received within 5 s
 *    of the headers however it is paced (WEBHOOK_BODY_SECONDS; the
 *    connection is closed), and all bodies buffered at once, across
 *    connections, within 16 MiB (WEBHOOK_BODY_BUDGET; 503 before the body
 *    is read when Content-Length does not fit, else the connection is
 *    closed). Unauthenticated bodies are buffered, since the signature
 *    covers the whole body: these bounds are what limits them;
 *  - with a secret, one HMAC-SHA256 over the body before anything else is
 *    looked at; then one JSON parse of the body (jansson, linear);
 *  - replay protection, with a secret: a delivery that would schedule a
 *    sync is refused when its X-GitHub-Delivery id, or its exact body, was
 *    accepted in the last hour (WEBHOOK_REPLAY_SECONDS). Without a secret
 *    nothing is authenticated (anyone may send a fresh body), so there is
 *    no replay set and every matching push schedules a sync. The check comes after the
 *    signature, so an unauthenticated request never enters the set. The
 *    body counts as well as the id because the id header is not covered
 *    by the signature: a captured delivery re-sent under a fresh id is
 *    still the same body. At most 4096 deliveries are remembered
 *    (WEBHOOK_REPLAY_MAX, 72 bytes each: two SHA-256 digests and a time);
 *    beyond that the oldest is forgotten early. A refused replay gets 200
 *    "ignored: duplicate delivery", not an error: GitHub's "Redeliver"
 *    sends the same id again, and for a delivery that was accepted the
 *    answer an operator expects is that it was already handled (its sync
 *    was scheduled then; to sync again, push or run relay git sync).
 */
#ifndef RELAY_WEBHOOK_H
#define RELAY_WEBHOOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/http.h"

/* The limits of the cost model above. GitHub caps payloads at 25 MB but
 * pushes are far smaller; larger bodies get 413 from http.c without
 * reaching the handler. GitHub gives up on a delivery after 10 s, so a body
 * still arriving after 5 s is not GitHub's. */
#define WEBHOOK_MAX_BODY (5u << 20)
#define WEBHOOK_BODY_BUDGET (16u << 20)
#define WEBHOOK_BODY_SECONDS 5
#define WEBHOOK_IDLE_SECONDS 5
#define WEBHOOK_REPLAY_SECONDS 3600
#define WEBHOOK_REPLAY_MAX 4096

struct secret_provider;

struct webhook_config {
	const char *listen_addr; /* GIT_WEBHOOK_ADDR */
	const char *repository;	 /* configured SSH URL */
	const char *ref;	 /* configured ref */
	const char *secret_name; /* webhook secret reference, or NULL */
	/* RELAY_DATA_DIR: where git/source.json records what the configured
	 * ref resolved to (gitsync_ref_matches); NULL: not consulted */
	const char *data_dir;
	const struct secret_provider *secrets; /* read on every delivery */
	/* Runs one sync on the scheduler's thread. */
	void (*sync)(void *arg);
	void *sync_arg;
	/* Tests only: 0 means the limits in the cost model above. */
	size_t max_body, body_budget;
	unsigned body_seconds;
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

/*
 * relay start's webhook, opt-in twice over: listen_addr (GIT_WEBHOOK_ADDR)
 * set and a git source configured under data_dir (read once here: a source
 * or webhook secret set later needs a restart). Each sync it schedules runs
 * gitsync_run(data_dir, functions_dir) on the scheduler's thread and logs its
 * outcome; the reconciler picks the result up from the functions directory
 * like any other edit. Returns -1 only for a bind failure (logged: fatal at
 * startup); otherwise 0, with *out NULL when disabled (the reason logged).
 * The strings are copied; secrets is borrowed as for webhook_start.
 */
int webhook_start_git(const char *listen_addr, const char *data_dir, const char *functions_dir,
		      const struct secret_provider *secrets, struct webhook **out);

struct webhook_stats {
	struct http_server_stats http; /* bodies buffered, refused, cut */
	size_t remembered;	       /* deliveries in the replay set */
	unsigned long replays;	       /* deliveries refused as replays */
};
/* A snapshot. Thread-safe. */
void webhook_stats(struct webhook *w, struct webhook_stats *out);

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
 * "" means "main"; the pushed ref must be exactly what ref designates
 * (gitsync_ref_matches without a data directory: refs/heads/X and
 * refs/tags/X only themselves, a 40-hex commit id nothing, a bare NAME
 * refs/heads/NAME or refs/tags/NAME; the server also consults what the last
 * sync resolved NAME to). *why (static string) says why for logs. Pure. */
enum webhook_verdict webhook_decide(const char *event, const char *content_type, const char *body,
				    size_t len, const char *repository, const char *ref,
				    const char **why);

/* The replay set: deliveries accepted within a window, by the SHA-256 of
 * their id and of their body, at most max of them (the oldest is dropped
 * to make room). window_ns and max must be > 0. Thread-safe. */
struct webhook_replay;
struct webhook_replay *webhook_replay_new(size_t max, int64_t window_ns);
/* Records a delivery at now_ns (monotonic) unless one with the same id or
 * the same body was recorded within the window: true when recorded, false
 * for a replay. id NULL or "" (no header) checks the body only. Entries
 * older than the window are dropped first. O(max). */
bool webhook_replay_add(struct webhook_replay *r, const char *id, const void *body, size_t len,
			int64_t now_ns);
/* Deliveries remembered now (without dropping expired ones). */
size_t webhook_replay_size(struct webhook_replay *r);
void webhook_replay_free(struct webhook_replay *r);

/* Coalescing scheduler: at most one sync runs at a time; triggers arriving
 * while one runs collapse into exactly one follow-up run. */
struct webhook_coalescer;
/* Starts the scheduler's thread (signals blocked); NULL when it cannot. */
struct webhook_coalescer *webhook_coalescer_new(void (*run)(void *arg), void *arg);
/* Thread-safe; never blocks on a running sync. */
void webhook_coalescer_trigger(struct webhook_coalescer *c);
/* Waits for a running run to finish (a queued follow-up is dropped), joins
 * the thread and frees c. NULL is a no-op. */
void webhook_coalescer_free(struct webhook_coalescer *c);

#endif
