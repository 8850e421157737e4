/*
 * One message's delivery: see delivery.h for where it sits in a message's
 * walk (consumer → delivery → invocation state and the executor). The
 * design notes that matter when changing this file:
 *
 * - A message a worker took goes through delivery_process in five phases,
 *   each a function over one struct delivery_plan:
 *     decode   plan_decode: the event; malformed → DLQ; a scheduled
 *              occurrence must be genuine (occurrence_genuine);
 *     resolve  plan_resolve: its targets (resolve_work); an obsolete
 *              occurrence or an unmatched event is acknowledged here;
 *     load     plan_load: its invocation state, one marker per target;
 *     run      plan_run: each target in order (run_target: matched line,
 *              eligibility, slot, claim, invoke, record) until one does
 *              not succeed;
 *     settle   plan_settle: ACK / DLQ / leave pending.
 *   Every path ends in one verdict for the consumer (struct delivery_end):
 *   acknowledge, release the buffer slot, or parked.
 * - Per message, matching invocations run in order; the first that does not
 *   succeed stops the rest (abort on first failure). Each is gated by its
 *   invocation-state marker and claimed with a compare-and-set before it
 *   runs, so a redelivery elsewhere skips live or backing-off work.
 * - No worker waits for a concurrency slot. A plan (one message's work)
 *   whose next invocation gets no slot (slots_try_acquire: MAX_CONCURRENCY
 *   or the function's concurrency) is parked on the deferred list, still
 *   held (it keeps its buffer slot, so deferred plans count against
 *   MAX_BUFFERED_EVENTS: the reader's room), matched, its state loaded and
 *   nothing charged; the worker goes on with other messages. Every slot
 *   release wakes a worker (the consumer's slots_on_release callback), and
 *   a worker looks at the deferred list before it takes a new message: the
 *   oldest plan whose function can take a slot now resumes at the claim,
 *   whose compare-and-set against the marker as last seen protects against
 *   a reclaim elsewhere meanwhile. While the list is not empty a new plan
 *   parks too at its slot step, so the oldest runnable plan always goes
 *   first (per function, and across functions for the global slots).
 *   At shutdown deferred plans are dropped: their messages stay pending,
 *   no attempt charged.
 * - A fresh message (struct delivery_msg) reads no state: a first-attempt
 *   success costs the claim and the outcome write (HSET+EXPIRE pipelined),
 *   two round trips, plus its share of the consumer's batched XACK+DEL.
 *   The ok marker is always written before the verdict asks for the XACK.
 * - Bookkeeping errors fail open: an unreadable state is treated as absent,
 *   a failed claim write still runs the invocation.
 * - What a message runs is resolved first (resolve_work): a scheduled
 *   occurrence (schedule.h) is first proven genuine (else dead-lettered as
 *   forged), then runs exactly its schedule's handler and is never
 *   pattern-matched; an event runs its matching rules. From then on
 *   both take the same path (state, slots, timeout, retries, DLQ, handler
 *   metrics), except that scheduled occurrences never move the event
 *   counters, and one whose function or schedule handler is gone is
 *   acknowledged as obsolete.
 */
#include "engine/delivery.h"

#include <stdlib.h>
#include <string.h>

#include "base/duration.h"
#include "io/event.h"
#include "engine/invocation.h"
#include "engine/keyorder.h"
#include "model/retry.h"
#include "base/log.h"
#include "engine/metrics.h"
#include "base/rfc3339.h"
#include "engine/runner.h"
#include "engine/schedule.h"
#include "engine/slots.h"
#include "engine/trace.h"
#include "base/util.h"

struct delivery {
	struct delivery_config cfg;
	struct retry_policy base; /* the built-in retry defaults (retry.h) */
	const char *stream, *group, *name, *dlq; /* cfg's, for short */
	const atomic_int *stop;
	pthread_mutex_t *lock;
	struct slots *slots;
	/* Plans parked for a concurrency slot, oldest first (see above),
	 * under *lock. */
	struct delivery_plan *dhead, *dtail;
	int ndeferred;
};

/* ---- messages ------------------------------------------------------------ */

void delivery_msg_free(struct delivery_msg *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->nfields; i++)
		free(m->fields[i]);
	free(m->fields);
	free(m->lens);
	free(m->id);
	event_free(m->ev);
	free(m);
}

const char *delivery_msg_field(const struct delivery_msg *m, const char *name, size_t *len)
{
	const char *v = NULL;
	size_t n = strlen(name);
	for (size_t i = 0; i + 1 < m->nfields; i += 2) {
		if (m->fields[i] && m->fields[i + 1] && m->lens[i] == n &&
		    memcmp(m->fields[i], name, n) == 0) {
			v = m->fields[i + 1];
			*len = m->lens[i + 1];
		}
	}
	return v;
}

/* Connected, or -1 when stopping. */
static int ensure_conn(struct delivery *d, struct redis *r)
{
	if (redis_is_connected(r))
		return 0;
	return redis_connect_retry(r, d->stop);
}

/* ---- one message ----------------------------------------------------------- */

/* The last `event` field of a message (its payload as text), or NULL. */
/* When the stream entry id was added (its millisecond part), in unix ns;
 * 0 for an id that does not start with digits. */
static int64_t message_time_ns(const char *id)
{
	int64_t ms = 0;
	for (const char *q = id; *q >= '0' && *q <= '9'; q++) {
		if (ms > INT64_MAX / 10 / NS_PER_MS)
			return 0;
		ms = ms * 10 + (*q - '0');
	}
	return ms * NS_PER_MS;
}

static const char *payload_of(const struct delivery_msg *m, size_t *len)
{
	const char *p = NULL;
	for (size_t i = 0; i + 1 < m->nfields; i += 2) {
		if (m->fields[i] && m->lens[i] == 5 && memcmp(m->fields[i], "event", 5) == 0) {
			p = m->fields[i + 1];
			*len = m->lens[i + 1];
		}
	}
	return p;
}

/* How a DLQ write ended (invocation_dead_letter's result and *written). */
enum dlq_result {
	DLQ_WRITTEN,	 /* written and acknowledged */
	DLQ_NOT_PENDING, /* the message was no longer pending: nothing written */
	DLQ_FAILED,	 /* the write failed: it stays pending, a later reclaim retries it */
};

/*
 * Writes m's DLQ entry: the spec's fields, then `function` and `handler`
 * (the exhausted invocation; "" when none ran: a malformed or forged
 * event), then `relay_replays` and `relay_replay_of` when the message
 * carried them (a replayed message: relay dlq replay counts on them).
 */
struct delivery_plan;
static const struct delivery_msg *plan_msg(const struct delivery_plan *p);
static const struct trace_msg *plan_trace(const struct delivery_plan *p);
static void plan_dead_lettered(struct delivery_plan *p);

static enum dlq_result dead_letter(struct delivery *d, struct redis *r, struct delivery_plan *p,
				   const char *payload, size_t plen, const char *reason,
				   int attempts, const char *function, const char *handler)
{
	const struct delivery_msg *m = plan_msg(p);
	char ts[RFC3339_STR_MAX], att[16];
	char *why = NULL;
	rfc3339_format_utc(now_wall_ns(), ts);
	snprintf_(att, sizeof att, "%d", attempts);
	enum { EVENT_VALUE = 9, FIXED = 20 }; /* the payload: binary-safe, its own length */
	/* clang-format off */
	const char *entry[FIXED + 8] = {
		"original_stream", d->stream,
		"original_id", m->id,
		"group", d->group,
		"consumer", d->name,
		"event", payload ? payload : "",
		"reason", reason,
		"attempts", att,
		"timestamp", ts,
		"function", function ? function : "",
		"handler", handler ? handler : "",
	};
	/* clang-format on */
	size_t lens[FIXED + 8], n = FIXED;
	for (size_t i = 0; i < FIXED; i++)
		lens[i] = i == EVENT_VALUE ? (payload ? plen : 0) : strlen(entry[i]);
	static const char *const carried[] = {"relay_replays", "relay_replay_of"};
	for (size_t k = 0; k < ARRAY_LEN(carried); k++) {
		size_t vlen = 0;
		const char *v = delivery_msg_field(m, carried[k], &vlen);
		if (!v)
			continue;
		entry[n] = carried[k];
		lens[n++] = strlen(carried[k]);
		entry[n] = v;
		lens[n++] = vlen;
	}
	/* The trace context the deliveries used (trace.h): a replay continues
	 * it. */
	const struct trace_msg *tr = plan_trace(p);
	entry[n] = "traceparent";
	lens[n++] = strlen("traceparent");
	entry[n] = tr->stored;
	lens[n++] = strlen(tr->stored);
	if (tr->state) {
		entry[n] = "tracestate";
		lens[n++] = strlen("tracestate");
		entry[n] = tr->state;
		lens[n++] = strlen(tr->state);
	}
	bool written = false;
	int rc = -1;
	if (ensure_conn(d, r) == 0)
		rc = invocation_dead_letter(r, d->stream, d->group, d->dlq, m->id, entry, lens, n,
					    &written, &why);
	else
		why = xstrdup(redis_errmsg(r));
	if (rc == 0 && !written)
		log_debug(LOG_ATTRS("message_id", m->id),
			  "message acknowledged meanwhile; not dead-lettered again");
	else if (rc < 0)
		log_error(LOG_ATTRS("message_id", m->id, "dlq", d->dlq, "error", why),
			  "DLQ write failed; the message stays pending and the write is retried");
	free(why);
	if (rc == 0 && written)
		plan_dead_lettered(p);
	return rc < 0 ? DLQ_FAILED : written ? DLQ_WRITTEN : DLQ_NOT_PENDING;
}

/* What became of one target's invocation: as loaded, then as this
 * delivery left it. */
enum inv_state { INV_PENDING, INV_OK, INV_EXHAUSTED };

/* One invocation of a message's work list, in execution order. */
struct target {
	/* From resolve_work (borrowed from the plan's snapshot): */
	const struct fn_version *fv;
	const char *handler;
	int64_t timeout_ns;
	int retries;
	const struct retry_policy *retry; /* the rule's or schedule's (template.h) */
	/* From plan_load: */
	char *field;	      /* "<function>/<handler>" in the invocation hash */
	struct marker loaded; /* its marker as loaded for this delivery */
	char *raw;	      /* the field's current value, for compare-and-set; NULL: absent */
	enum inv_state state;
};

/*
 * One message's work, phase by phase (see above). Owns everything it points
 * to, m too, except what the targets borrow from snap, held until
 * plan_free.
 */
struct delivery_plan {
	struct delivery_msg *m;
	const char *payload; /* the last `event` field, borrowed from m */
	size_t plen;
	struct event *ev;
	bool scheduled;		     /* a genuine scheduled occurrence */
	struct schedule_route route; /* when scheduled (borrows from ev) */
	char *sched_stdin;	     /* when scheduled: the handler's payload */
	struct snapshot *snap;
	struct target *t;
	size_t n;
	const char *event_id, *event_name; /* may be NULL */
	char *key;			   /* invocation-state key */
	char last_error[600];		   /* the last failed invocation's error */
	char why[160]; /* why a target was not retried (no_retry_exit_codes, max_age) */
	/* Progress, so that a parked plan resumes where it stopped: */
	size_t cur;	    /* the target running (plan_run) */
	bool said;	    /* its "matched" line is printed */
	int attempt;	    /* its attempt number, when parked */
	bool slotted;	    /* resumed holding its slot: goes on at the claim */
	struct delivery_plan *dnext; /* on the deferred list */
	enum delivery_verdict end;   /* what the consumer does with the message */
	bool dead_lettered;	     /* its DLQ entry is written */
	struct trace_msg trace;	     /* its trace context and span (trace.h) */
	bool keyed; /* it holds places in per-key queues (keyorder.h): released when done */
};

static const struct delivery_msg *plan_msg(const struct delivery_plan *p)
{
	return p->m;
}

static const struct trace_msg *plan_trace(const struct delivery_plan *p)
{
	return &p->trace;
}

static void plan_dead_lettered(struct delivery_plan *p)
{
	p->dead_lettered = true;
}

/* The trace context of a message's entry (trace_msg_begin). */
static void plan_trace_begin(struct delivery_plan *p)
{
	size_t tplen = 0, tslen = 0;
	const char *tp = delivery_msg_field(p->m, "traceparent", &tplen);
	const char *ts = delivery_msg_field(p->m, "tracestate", &tslen);
	trace_msg_begin(&p->trace, tp, tplen, ts, tslen);
}

/* function_events_total: once per message and matched function, counted
 * when the message is done (ACKed or dead-lettered), not per delivery.
 * Never for scheduled occurrences. */
static void count_function_events(const struct target *t, size_t n)
{
	const char *last = NULL;
	for (size_t i = 0; i < n; i++) {
		const char *f = t[i].fv->fn->name;
		if (!last || strcmp(last, f) != 0)
			metrics_function_event(f);
		last = f;
	}
}

/* The counters of a message done with (ACKed or dead-lettered): none for a
 * scheduled occurrence. */
static void count_done(const struct delivery_plan *p)
{
	if (p->scheduled)
		return;
	count_function_events(p->t, p->n);
	metrics_inc(METRIC_EVENTS_PROCESSED);
}

/* A top-level string field of the event, for logs and labels. */
static const char *event_str(const struct event *ev, const char *key)
{
	const struct event_value *v = event_get(event_root(ev), key, strlen(key));
	return v && v->type == EVENT_STRING ? v->u.str : NULL;
}

/*
 * What a message runs. A scheduled occurrence (route non-NULL) runs its
 * function's schedule handler, found by name in snap, never through
 * pattern matching; *obsolete is set when the function or the handler is
 * gone. An event runs its matching rules in execution order. Returns the
 * number of targets in *out (a new array, even when empty).
 */
static size_t resolve_work(const struct snapshot *snap, const struct event *ev,
			   const struct schedule_route *route, struct target **out, bool *obsolete)
{
	*obsolete = false;
	if (route) {
		*out = xcalloc(1, sizeof **out);
		const struct fn_version *fv = registry_snapshot_find(snap, route->function);
		const struct schedule *sc = schedule_find(fv, route->handler);
		if (!sc) {
			*obsolete = true;
			return 0;
		}
		(*out)[0] = (struct target){.fv = fv,
					    .handler = sc->handler,
					    .timeout_ns = sc->timeout_ns,
					    .retries = sc->retries,
					    .retry = &sc->retry};
		return 1;
	}
	uint32_t *ids = xcalloc(snap->nrules + 1, sizeof *ids);
	size_t n = pattern_set_match(snap->set, ev, now_wall_ns(), ids);
	*out = xcalloc(n + 1, sizeof **out);
	for (size_t i = 0; i < n; i++) {
		const struct rule_ref *rr = &snap->rules[ids[i]];
		(*out)[i] = (struct target){.fv = rr->fv,
					    .handler = rr->rule->handler,
					    .timeout_ns = rr->rule->timeout_ns,
					    .retries = rr->rule->retries,
					    .retry = &rr->rule->retry};
	}
	free(ids);
	return n;
}

/*
 * A message that claims to be a scheduled occurrence runs only once proven
 * genuine (schedule.h: schedule_envelope_check, schedule_verify). Returns
 * true with *route filled when it is; false when it was dealt with here
 * (its buffer slot then goes: DELIVERY_RELEASE): dead-lettered as forged
 * (never run), or left pending when it could not be checked (Redis error:
 * retried by a later reclaim, never run unverified).
 */
static bool occurrence_genuine(struct delivery *d, struct redis *r, struct delivery_plan *p,
			       const struct event *ev, struct schedule_route *route,
			       const char *payload, size_t plen)
{
	struct delivery_msg *m = p->m;
	char *why = NULL;
	enum schedule_verdict g = schedule_envelope_check(ev, route, &why);
	if (g == SCHEDULE_GENUINE)
		g = ensure_conn(d, r) < 0 ? SCHEDULE_VERIFY_FAILED
					  : schedule_verify(r, d->stream, route, &why);
	if (g == SCHEDULE_GENUINE)
		return true;
	if (g == SCHEDULE_VERIFY_FAILED) {
		log_warn(LOG_ATTRS("message_id", m->id, "error", why ? why : redis_errmsg(r)),
			 "cannot verify a scheduled occurrence; it stays pending");
	} else if (dead_letter(d, r, p, payload, plen, "forged schedule occurrence", 0, NULL,
			       NULL) == DLQ_WRITTEN) {
		log_warn(LOG_ATTRS("message_id", m->id, "trace_id", p->trace.trace_id, "reason", why),
			 "forged schedule occurrence sent to the dead-letter stream without "
			 "running any handler");
		metrics_inc(METRIC_DLQ_ENTRIES);
	}
	free(why);
	return false;
}

/*
 * Decode: the event (the reader decoded it when it matched something
 * there). A malformed one is dead-lettered with the reason; a scheduled
 * occurrence must be genuine. False when the message was dealt with here
 * (DELIVERY_RELEASE).
 */
static bool plan_decode(struct delivery *d, struct redis *r, struct delivery_plan *p)
{
	struct delivery_msg *m = p->m;
	plan_trace_begin(p);
	p->payload = payload_of(m, &p->plen);
	p->ev = m->ev;
	m->ev = NULL;
	char *why = NULL;
	int derr = p->ev ? EVENT_OK
			 : event_decode((const char *const *)m->fields, m->lens, m->nfields, &p->ev,
					&why);
	if (derr != EVENT_OK) {
		char reason[600];
		snprintf_(reason, sizeof reason, "malformed event (%s): %s", event_err_name(derr),
			  why ? why : "");
		free(why);
		if (dead_letter(d, r, p, p->payload, p->plen, reason, 0, NULL, NULL) ==
		    DLQ_WRITTEN) {
			log_warn(LOG_ATTRS("message_id", m->id, "trace_id", p->trace.trace_id,
					   "reason", reason),
				 "malformed event sent to the dead-letter stream without running "
				 "any handler");
			metrics_inc(METRIC_DLQ_ENTRIES);
			metrics_inc(METRIC_EVENTS_PROCESSED);
		}
		return false;
	}
	p->scheduled = schedule_claimed(p->ev);
	if (p->scheduled && !occurrence_genuine(d, r, p, p->ev, &p->route, p->payload, p->plen))
		return false;
	/* A scheduled handler reads the occurrence's payload, not the entry. */
	if (p->scheduled)
		p->sched_stdin = schedule_payload(p->route.at_s);
	return true;
}

/*
 * Resolve: what the message runs, from the registry snapshot held until
 * plan_free. False when there is nothing to run, acknowledged here: a
 * scheduled occurrence whose function or schedule handler is gone
 * (obsolete), or an event no rule matches.
 */
static bool plan_resolve(struct delivery *d, struct delivery_plan *p)
{
	struct delivery_msg *m = p->m;
	bool obsolete = false;
	p->snap = registry_acquire(d->cfg.registry);
	p->n = resolve_work(p->snap, p->ev, p->scheduled ? &p->route : NULL, &p->t, &obsolete);
	/* A scheduled occurrence's event id is its occurrence id. */
	p->event_id = p->scheduled ? p->route.occurrence_id : event_str(p->ev, "event_id");
	p->event_name = p->scheduled ? NULL : event_str(p->ev, "event_name");
	if (obsolete) {
		/* Removed on purpose: terminal, never retried or dead-lettered.
		 * Any state from an earlier delivery goes with the ACK. */
		log_info(LOG_ATTRS("function", p->route.function, "handler", p->route.handler,
				   "message_id", m->id, "occurrence_id",
				   p->event_id ? p->event_id : ""),
			 "scheduled occurrence obsolete: its function or schedule handler no "
			 "longer exists; acknowledging");
		p->key = invocation_key(d->stream, d->group, m->id);
		p->end = DELIVERY_ACK;
		return false;
	}
	if (p->n == 0) {
		log_debug(LOG_ATTRS("message_id", m->id), "no rule matched; acknowledging");
		metrics_inc(METRIC_EVENTS_PROCESSED);
		p->end = DELIVERY_ACK;
		return false;
	}
	return true;
}

/* Load: the message's invocation state, one marker per target. Fails
 * open: an unreadable state is treated as empty. A fresh message (struct
 * msg) has none: no round trip. */
static void plan_load(struct delivery *d, struct redis *r, struct delivery_plan *p)
{
	if (!p->key)
		p->key = invocation_key(d->stream, d->group, p->m->id);
	struct invocation_state st = {0};
	bool up = ensure_conn(d, r) == 0;
	if (up && p->m->fresh) {
		/* nothing to read */
	} else if (!up || invocation_state_load(r, p->key, &st) < 0) {
		log_warn(LOG_ATTRS("message_id", p->m->id, "error", redis_errmsg(r)),
			 "cannot read invocation state; treating it as empty");
		memset(&st, 0, sizeof st);
	}
	for (size_t i = 0; i < p->n; i++) {
		struct target *t = &p->t[i];
		if (!t->field)
			t->field = xasprintf("%s/%s", t->fv->fn->name, t->handler);
		free(t->raw);
		t->raw = NULL;
		t->loaded = invocation_state_get(&st, t->field);
		t->state = t->loaded.kind == MARK_OK	      ? INV_OK
			   : t->loaded.kind == MARK_EXHAUSTED ? INV_EXHAUSTED
							      : INV_PENDING;
		for (size_t k = 0; k < st.n; k++)
			if (strcmp(st.fields[k], t->field) == 0) {
				free(t->raw);
				t->raw = xstrdup(st.values[k]);
			}
	}
	trace_msg_adopt(&p->trace, invocation_state_trace(&st));
	invocation_state_free(&st);
}

/* A field's value is now value (NULL: absent), for every target sharing
 * it (a rule repeating an earlier rule's handler). */
static void plan_set_raw(struct delivery_plan *p, const char *field, const char *value)
{
	for (size_t k = 0; k < p->n; k++)
		if (strcmp(p->t[k].field, field) == 0) {
			free(p->t[k].raw);
			p->t[k].raw = value ? xstrdup(value) : NULL;
		}
}

/*
 * How running one target ended. Only TARGET_DONE_BEFORE and
 * TARGET_SUCCEEDED let the next target run (abort on first failure).
 */
enum target_outcome {
	TARGET_GO_ON,		  /* between run_target's steps only: the next step runs */
	TARGET_DONE_BEFORE,	  /* succeeded on an earlier delivery: skipped */
	TARGET_SUCCEEDED,	  /* ran and succeeded */
	TARGET_FAILED,		  /* ran and failed: retried later, or exhausted */
	TARGET_EXHAUSTED_BEFORE,  /* exhausted on an earlier delivery: terminal */
	TARGET_NOT_ELIGIBLE,	  /* running elsewhere or backing off */
	TARGET_DEFERRED,	  /* no slot free: the plan is parked (deferred list) */
	TARGET_RELOADED,	  /* a fresh message's claim lost: state loaded, look again */
	TARGET_ACKED_MEANWHILE,	  /* the message is no longer pending */
	TARGET_CLAIMED_ELSEWHERE, /* another worker changed the marker first */
	TARGET_CANCELLED,	  /* interrupted by shutdown: not an attempt */
	TARGET_UNAVAILABLE,	  /* the daemon was unreachable: not an attempt, runs again */
};

/* The claim, invocation_try_start's 1 / 0 / 2 / -1. */
enum claim {
	CLAIM_TAKEN,	  /* the running marker is written */
	CLAIM_LOST,	  /* someone else changed the marker first */
	CLAIM_ACKED,	  /* the message was acknowledged meanwhile */
	CLAIM_UNRECORDED, /* a Redis error: runs anyway (bookkeeping fails open) */
};

static enum claim claim_invocation(struct delivery *d, struct redis *r,
				   const struct delivery_plan *p, const struct target *t,
				   const char *next)
{
	/* A plan resumed from the deferred list comes here on another
	 * worker's connection, maybe never connected yet. */
	int rc = ensure_conn(d, r) < 0 ? -1
				       : invocation_try_start(r, p->key, t->field, t->raw, next,
							      d->stream, d->group, p->m->id,
							      p->trace.stored);
	return rc < 0	 ? CLAIM_UNRECORDED
	       : rc == 0 ? CLAIM_LOST
	       : rc == 2 ? CLAIM_ACKED
			 : CLAIM_TAKEN;
}

/*
 * Whether a target may run in this delivery, from its state as loaded (a
 * rule repeating an earlier rule's handler in this delivery still runs:
 * no deduplication). Complete on an earlier delivery: skipped. Exhausted
 * is terminal and, invocations being sequential, leaves every later target
 * unrunnable: the message is routed to the DLQ. TARGET_GO_ON with
 * *attempt set when it may run.
 */
static enum target_outcome target_ready(struct delivery_plan *p, const struct target *t,
					int *attempt)
{
	const char *fname = t->fv->fn->name, *handler = t->handler, *id = p->m->id;
	if (!p->said)
		log_say(fname, p->scheduled ? "schedule" : "rule", handler, " matched event \"%s\"",
			id);
	p->said = true;
	if (t->state == INV_OK) {
		log_say(fname, "handler", handler, " already succeeded for event \"%s\"; skipping",
			id);
		return TARGET_DONE_BEFORE;
	}
	if (t->state == INV_EXHAUSTED) {
		log_say(fname, "handler", handler, " exhausted for event \"%s\"; skipping", id);
		return TARGET_EXHAUSTED_BEFORE;
	}
	struct marker mk = t->loaded;
	int64_t now = now_wall_ns();
	bool skewed = p->m->retry_due && mk.kind == MARK_NEXT_ATTEMPT &&
		      mk.deadline_ns - now <= RUNNER_CLOCK_SKEW_MS * NS_PER_MS;
	if (!skewed && !invocation_marker_eligible(&mk, now)) {
		/* Whole seconds, rounded up: "eligible in 0s" would read as
		 * eligible. */
		char in[DURATION_STR_MAX];
		int64_t left = mk.deadline_ns - now;
		left = (left + NS_PER_SEC - 1) / NS_PER_SEC * NS_PER_SEC;
		log_say(fname, "handler", handler,
			" not eligible for event \"%s\" (running or waiting for retry; "
			"eligible in %s)",
			id, duration_format(left, in));
		log_debug(LOG_ATTRS("function", fname, "handler", handler, "message_id", id,
				    "trace_id", p->trace.trace_id, "marker", t->raw ? t->raw : ""),
			  "invocation running elsewhere or backing off; leaving the "
			  "message pending");
		return TARGET_NOT_ELIGIBLE;
	}
	*attempt = (mk.kind == MARK_RUNNING || mk.kind == MARK_NEXT_ATTEMPT) ? mk.attempts + 1 : 1;
	log_debug(LOG_ATTRS("function", fname, "handler", handler, "message_id", id, "event_id",
			    p->event_id ? p->event_id : "", "event_name",
			    p->event_name ? p->event_name : "", "trace_id", p->trace.trace_id),
		  p->scheduled ? "scheduled occurrence" : "rule matched");
	return TARGET_GO_ON;
}

/*
 * A concurrency slot of the target's function, without waiting: taken
 * (TARGET_GO_ON), or the plan is parked on the deferred list
 * (TARGET_DEFERRED: from then on another worker may resume it at any
 * moment, so the caller touches p no more). While older plans are parked
 * this one parks behind them, so the oldest runnable goes first
 * (delivery_take_locked).
 */
static enum target_outcome target_slot(struct delivery *d, struct delivery_plan *p,
				       const struct target *t, int attempt)
{
	const char *fname = t->fv->fn->name;
	int limit = (int)t->fv->fn->tpl->concurrency;
	pthread_mutex_lock(d->lock);
	if (!d->dhead && slots_try_acquire(d->slots, fname, limit) == 0) {
		pthread_mutex_unlock(d->lock);
		return TARGET_GO_ON;
	}
	metrics_inc(METRIC_CONCURRENCY_WAITS);
	log_debug(LOG_ATTRS("function", fname, "handler", t->handler, "message_id", p->m->id,
				    "trace_id", p->trace.trace_id),
		  "no concurrency slot free; the invocation waits locally for one");
	p->attempt = attempt;
	p->dnext = NULL;
	if (d->dtail)
		d->dtail->dnext = p;
	else
		d->dhead = p;
	d->dtail = p;
	d->ndeferred++;
	slots_defer(d->slots, fname, limit, 1);
	pthread_mutex_unlock(d->lock);
	return TARGET_DEFERRED;
}

bool delivery_parked_locked(const struct delivery *d)
{
	return d->dhead != NULL;
}

/* Sets p->slotted: resumed holding its slot, it goes on at the claim. */
struct delivery_plan *delivery_take_locked(struct delivery *d)
{
	struct delivery_plan *prev = NULL;
	for (struct delivery_plan *p = d->dhead; p; prev = p, p = p->dnext) {
		const struct fn_version *fv = p->t[p->cur].fv;
		int limit = (int)fv->fn->tpl->concurrency;
		if (slots_try_acquire(d->slots, fv->fn->name, limit) < 0)
			continue;
		if (prev)
			prev->dnext = p->dnext;
		else
			d->dhead = p->dnext;
		if (d->dtail == p)
			d->dtail = prev;
		p->dnext = NULL;
		d->ndeferred--;
		slots_defer(d->slots, fv->fn->name, limit, -1);
		p->slotted = true;
		return p;
	}
	return NULL;
}

/*
 * Claims the target with its running marker (compare-and-set on the value
 * as last seen); a lost claim gives the slot back. *prev: the marker it
 * replaced (NULL: absent), to put back if shutdown cancels the run.
 */
static void plan_load(struct delivery *d, struct redis *r, struct delivery_plan *p);

static enum target_outcome target_claim(struct delivery *d, struct redis *r,
					struct delivery_plan *p, const struct target *t,
					int attempt, char **prev)
{
	const char *fname = t->fv->fn->name;
	/* The deadline counts from now (after any slot wait) and outlives
	 * every path the invocation can take (invocation_running_deadline,
	 * runner.h "Time bounds"), so no reclaim runs it concurrently. */
	struct marker running = {
		MARK_RUNNING, invocation_running_deadline(now_wall_ns(), t->timeout_ns), attempt};
	char next[64];
	invocation_marker_format(&running, next, sizeof next);
	enum claim cl = claim_invocation(d, r, p, t, next);
	if (cl == CLAIM_LOST && p->m->fresh) {
		/* A state key from an earlier life of the group: load it now
		 * (no longer fresh) and look at the target again. */
		slots_release(d->slots, fname);
		p->m->fresh = false;
		plan_load(d, r, p);
		return TARGET_RELOADED;
	}
	if (cl == CLAIM_ACKED || cl == CLAIM_LOST) {
		slots_release(d->slots, fname);
		log_debug(
			LOG_ATTRS("function", fname, "handler", t->handler, "message_id", p->m->id,
				    "trace_id", p->trace.trace_id),
			cl == CLAIM_ACKED
				? "message acknowledged meanwhile; dropping the local copy"
				: "invocation claimed by another worker; leaving the message "
				  "pending");
		return cl == CLAIM_ACKED ? TARGET_ACKED_MEANWHILE : TARGET_CLAIMED_ELSEWHERE;
	}
	if (cl == CLAIM_UNRECORDED)
		log_warn(LOG_ATTRS("function", fname, "handler", t->handler, "message_id", p->m->id,
				   "error", redis_errmsg(r)),
			 "cannot record the running marker; running anyway");
	*prev = t->raw ? xstrdup(t->raw) : NULL;
	plan_set_raw(p, t->field, next);
	return TARGET_GO_ON;
}

/* A finished invocation's log attributes (attrs points into the struct). */
struct run_attrs {
	char att[16], dur[DURATION_STR_MAX], code[16];
	const char *attrs[19];
};

static const char *const outcome_names[] = {
	[INVOKE_OK] = "success",	 [INVOKE_FAILED] = "failure",
	[INVOKE_TIMEOUT] = "timeout",	 [INVOKE_CANCELLED] = "cancelled",
	[INVOKE_UNAVAILABLE] = "unavailable",
};

/* The attempt's span (trace.h), when recorded. */
static void target_trace_end(const struct delivery_plan *p, const struct target *t,
			     const struct trace_inv *inv, int attempt,
			     const struct invoke_result *out)
{
	struct trace_inv_result r = {
		.function = t->fv->fn->name,
		.handler = t->handler,
		.attempt = attempt,
		.exit_code = out->exit_code,
		.outcome = outcome_names[out->outcome],
		.start_mode = out->start_mode,
		.error = out->outcome == INVOKE_OK ? NULL : out->error,
	};
	trace_inv_end(&p->trace, inv, &r);
}

/* Runs the handler (cfg.invoke) in the claimed slot, then gives the slot
 * back. Returns how long it took, in seconds (handler metrics). */
static double target_invoke(struct delivery *d, const struct delivery_plan *p,
			    const struct target *t, int attempt, struct invoke_result *out,
			    struct run_attrs *a)
{
	struct invoke_request req = {
		.fv = t->fv,
		.handler = t->handler,
		.timeout_ns = t->timeout_ns,
		.payload = p->sched_stdin ? p->sched_stdin : p->payload,
		.payload_len = p->sched_stdin ? strlen(p->sched_stdin) : p->plen,
		.message_id = p->m->id,
		.event_id = p->event_id,
		.event_name = p->event_name,
		.attempt = attempt,
		.tracestate = p->trace.state,
	};
	struct trace_inv inv;
	trace_inv_begin(&p->trace, &inv);
	req.traceparent = inv.traceparent;
	int64_t t0 = now_mono_ns();
	metrics_gauge_add(METRIC_IN_FLIGHT, 1);
	d->cfg.invoke(d->cfg.invoke_ctx, &req, out);
	target_trace_end(p, t, &inv, attempt, out);
	/* A cancelled or unrun one leaves the gauge up until its marker is
	 * back (target_record). */
	if (out->outcome != INVOKE_CANCELLED && out->outcome != INVOKE_UNAVAILABLE)
		metrics_gauge_add(METRIC_IN_FLIGHT, -1);
	double secs = (double)(now_mono_ns() - t0) / 1e9;
	slots_release(d->slots, t->fv->fn->name);
	duration_format((now_mono_ns() - t0) / NS_PER_MS * NS_PER_MS, a->dur);
	snprintf_(a->att, sizeof a->att, "%d", attempt);
	snprintf_(a->code, sizeof a->code, "%d", out->exit_code);
	const char *const attrs[] = {"function",   t->fv->fn->name,
				     "handler",	   t->handler,
				     "message_id", p->m->id,
				     "event_id",   p->event_id ? p->event_id : "",
				     "event_name", p->event_name ? p->event_name : "",
				     "attempt",	   a->att,
				     "duration",   a->dur,
				     "exit_code",  a->code,
				     "trace_id",   p->trace.trace_id,
				     NULL};
	_Static_assert(ARRAY_LEN(attrs) == ARRAY_LEN(a->attrs), "run_attrs.attrs");
	memcpy(a->attrs, attrs, sizeof attrs);
	return secs;
}

/* The marker a finished (not cancelled) invocation leaves, with its
 * metrics and logs: ok, the next attempt's backoff, or exhausted. */
static struct marker target_judge(struct delivery *d, struct delivery_plan *p, struct target *t,
				  int attempt, const struct invoke_result *out, double secs,
				  const char *const *attrs)
{
	const char *fname = t->fv->fn->name, *handler = t->handler;
	struct marker after = {MARK_OK, 0, attempt};
	if (out->outcome == INVOKE_OK) {
		metrics_handler_invocation(fname, handler, METRIC_OUTCOME_SUCCESS, secs);
		log_say(fname, "handler", handler, " executed for event \"%s\"", p->m->id);
		log_debug(attrs, "handler executed");
		t->state = INV_OK;
		return after;
	}
	metrics_handler_invocation(fname, handler,
				   out->outcome == INVOKE_TIMEOUT ? METRIC_OUTCOME_TIMEOUT
								  : METRIC_OUTCOME_FAILURE,
				   secs);
	snprintf_(p->last_error, sizeof p->last_error, "%s", out->error);
	log_say(fname, "handler", handler, " execution failed for event \"%s\": %s", p->m->id,
		out->error);
	struct retry_policy pol;
	retry_policy_merge(&pol, &d->base, NULL, t->retry);
	int64_t b = retry_backoff_ns(&pol, attempt, (double)rand_below(1ULL << 53) / 9007199254740992.0);
	int64_t due = now_wall_ns() + b;
	char ds[DURATION_STR_MAX];
	if (out->outcome == INVOKE_FAILED && retry_exit_code_permanent(&pol, out->exit_code))
		snprintf_(p->why, sizeof p->why, "exit code %d is listed in no_retry_exit_codes",
			  out->exit_code);
	else if (attempt < 1 + t->retries && pol.max_age_ns > 0 &&
		 due - message_time_ns(p->m->id) > pol.max_age_ns)
		snprintf_(p->why, sizeof p->why, "max_age %s exceeded",
			  duration_format(pol.max_age_ns, ds));
	if (p->why[0] || attempt >= 1 + t->retries) {
		after.kind = MARK_EXHAUSTED;
		t->state = INV_EXHAUSTED;
		if (p->why[0])
			log_debug(attrs, "handler failed; not retried: %s: %s", p->why, out->error);
		else
			log_debug(attrs, "handler failed; attempts exhausted: %s", out->error);
	} else {
		after.kind = MARK_NEXT_ATTEMPT;
		after.deadline_ns = due;
		log_debug(attrs, "handler failed; retrying in %s: %s", duration_format(b, ds),
			  out->error);
	}
	return after;
}

/*
 * Records what the invocation came to. Cancelled by shutdown: not an
 * attempt, the marker it replaced (prev) is put back so the next delivery
 * runs it with the same number. Otherwise its outcome marker.
 */
static enum target_outcome target_record(struct delivery *d, struct redis *r,
					 struct delivery_plan *p, struct target *t, int attempt,
					 const char *prev, const struct invoke_result *out,
					 double secs, const char *const *attrs)
{
	if (out->outcome == INVOKE_CANCELLED || out->outcome == INVOKE_UNAVAILABLE) {
		if (invocation_restore(r, p->key, t->field, prev) < 0)
			log_warn(attrs, "cannot restore the invocation marker");
		plan_set_raw(p, t->field, prev);
		if (out->outcome == INVOKE_CANCELLED)
			log_info(attrs,
				 "invocation cancelled by shutdown; the message stays pending");
		else
			log_info(attrs, "invocation not run: the Docker daemon is unreachable; it "
					"runs once the daemon answers");
		/* Only now: after a second signal, relay start exits once this
		 * gauge is 0, so the marker must be back first. */
		metrics_gauge_add(METRIC_IN_FLIGHT, -1);
		return out->outcome == INVOKE_CANCELLED ? TARGET_CANCELLED : TARGET_UNAVAILABLE;
	}
	struct marker after = target_judge(d, p, t, attempt, out, secs, attrs);
	char mark[64];
	invocation_marker_format(&after, mark, sizeof mark);
	bool retry = after.kind == MARK_NEXT_ATTEMPT && d->cfg.retry_key;
	int64_t due_ms = after.deadline_ns / NS_PER_MS;
	if (invocation_set_retry(r, p->key, t->field, mark, retry ? d->cfg.retry_key : NULL,
				 due_ms, p->m->id) < 0)
		log_warn(LOG_ATTRS("function", t->fv->fn->name, "handler", t->handler, "message_id",
				   p->m->id, "error", redis_errmsg(r)),
			 "cannot record the invocation outcome");
	else if (retry && d->cfg.retry_scheduled)
		d->cfg.retry_scheduled(d->cfg.ctx, due_ms);
	plan_set_raw(p, t->field, mark);
	return out->outcome == INVOKE_OK ? TARGET_SUCCEEDED : TARGET_FAILED;
}

/*
 * A retry (attempt > 1) that would start when the stream entry is older
 * than its max_age is not run: its marker becomes exhausted (by
 * compare-and-set, as a claim) and the message goes to the DLQ with the
 * reason. This catches the retries that fall due late (a worker that
 * crashed, a long outage); target_judge catches the others when the
 * failure is recorded.
 */
static enum target_outcome target_age_check(struct delivery *d, struct redis *r,
					    struct delivery_plan *p, struct target *t, int attempt)
{
	struct retry_policy pol;
	retry_policy_merge(&pol, &d->base, NULL, t->retry);
	if (pol.max_age_ns <= 0 || now_wall_ns() - message_time_ns(p->m->id) <= pol.max_age_ns)
		return TARGET_GO_ON;
	struct marker done = {MARK_EXHAUSTED, 0, attempt - 1};
	char next[64], ds[DURATION_STR_MAX];
	invocation_marker_format(&done, next, sizeof next);
	enum claim cl = claim_invocation(d, r, p, t, next);
	if (cl == CLAIM_ACKED)
		return TARGET_ACKED_MEANWHILE;
	if (cl == CLAIM_LOST)
		return TARGET_CLAIMED_ELSEWHERE;
	snprintf_(p->why, sizeof p->why, "max_age %s exceeded",
		  duration_format(pol.max_age_ns, ds));
	log_say(t->fv->fn->name, "handler", t->handler,
		" not retried for event \"%s\": %s", p->m->id, p->why);
	plan_set_raw(p, t->field, next);
	t->state = INV_EXHAUSTED;
	return TARGET_FAILED;
}

/* One target: matched line, eligibility, slot, claim, invoke, record. */
static enum target_outcome run_target_once(struct delivery *d, struct redis *r,
					   struct delivery_plan *p, struct target *t)
{
	int attempt = 1;
	char *prev = NULL;
	/* Resumed from the deferred list: ready, holding its slot. */
	bool resumed = p->slotted;
	p->slotted = false;
	if (resumed)
		attempt = p->attempt;
	enum target_outcome o;
	do {
		o = resumed ? TARGET_GO_ON : target_ready(p, t, &attempt);
		if (o == TARGET_GO_ON && !resumed && attempt > 1)
			o = target_age_check(d, r, p, t, attempt);
		if (o == TARGET_GO_ON && !resumed)
			o = target_slot(d, p, t, attempt);
		if (o == TARGET_DEFERRED)
			return o; /* p is the deferred list's now */
		resumed = false;
		if (o == TARGET_GO_ON)
			o = target_claim(d, r, p, t, attempt, &prev);
	} while (o == TARGET_RELOADED);
	if (o != TARGET_GO_ON)
		return o;
	if (attempt > 1)
		metrics_function_retry(t->fv->fn->name);
	struct invoke_result out = {INVOKE_FAILED, -1, "", NULL};
	struct run_attrs a;
	double secs = target_invoke(d, p, t, attempt, &out, &a);
	o = target_record(d, r, p, t, attempt, prev, &out, secs, a.attrs);
	free(prev);
	return o;
}

/* run_target_once, again after each time the daemon was unreachable, once
 * it answers (the reader's probe); at stop, cancelled. */
static enum target_outcome run_target(struct delivery *d, struct redis *r, struct delivery_plan *p,
				      struct target *t)
{
	for (;;) {
		enum target_outcome o = run_target_once(d, r, p, t);
		if (o != TARGET_UNAVAILABLE)
			return o;
		p->said = false; /* its run again says "matched" again */
		if (!d->cfg.docker_wait || !d->cfg.docker_wait(d->cfg.ctx))
			return TARGET_CANCELLED;
	}
}

/* Run: the targets in order until one does not succeed (abort on first
 * failure) or the consumer stops, from p->cur on. True when the plan was
 * parked (the deferred list owns it now: the caller touches it no more). */
static bool plan_run(struct delivery *d, struct redis *r, struct delivery_plan *p)
{
	while (p->cur < p->n && !atomic_load(d->stop)) {
		enum target_outcome o = run_target(d, r, p, &p->t[p->cur]);
		if (o == TARGET_DEFERRED)
			return true;
		if (o != TARGET_DONE_BEFORE && o != TARGET_SUCCEEDED)
			break;
		p->cur++;
		p->said = false;
	}
	if (p->slotted) { /* resumed at stop: never claimed */
		slots_release(d->slots, p->t[p->cur].fv->fn->name);
		p->slotted = false;
	}
	return false;
}

/* An exhausted target (first, the first not complete) routes the message
 * to the DLQ, with what its last failure said. */
static void plan_dead_letter(struct delivery *d, struct redis *r, struct delivery_plan *p,
			     const struct target *first)
{
	struct marker mk = invocation_marker_parse(first->raw ? first->raw : "",
						   first->raw ? strlen(first->raw) : 0);
	int max_attempts = mk.kind == MARK_EXHAUSTED ? mk.attempts : 0;
	struct buf reason;
	buf_init(&reason, 4096);
	if (p->why[0])
		buf_appendf(&reason, "%s not retried after %d attempt(s): %s", first->field,
			    max_attempts, p->why);
	else
		buf_appendf(&reason, "%s exhausted after %d attempt(s)", first->field,
			    max_attempts);
	if (p->last_error[0])
		buf_appendf(&reason, ": %s", p->last_error);
	if (dead_letter(d, r, p, p->payload, p->plen, reason.data ? reason.data : "exhausted",
			max_attempts, first->fv->fn->name, first->handler) == DLQ_WRITTEN) {
		log_error(LOG_ATTRS("message_id", p->m->id, "event_id",
				    p->event_id ? p->event_id : "", "trace_id", p->trace.trace_id,
				    "reason", reason.data ? reason.data : ""),
			  "message sent to the dead-letter stream");
		for (size_t i = 0; i < p->n; i++)
			if (p->t[i].state == INV_EXHAUSTED)
				metrics_function_dlq(p->t[i].fv->fn->name);
		count_done(p);
	}
	buf_free(&reason);
}

/*
 * Settle: the first target (in execution order) that is not complete
 * decides: none → ACK (and DEL of the state); exhausted → DLQ (nothing
 * after it can run); otherwise the message stays pending. The verdict in
 * p->end.
 */
static void plan_settle(struct delivery *d, struct redis *r, struct delivery_plan *p)
{
	const struct target *first = NULL;
	for (size_t i = 0; i < p->n && !first; i++)
		if (p->t[i].state != INV_OK)
			first = &p->t[i];
	if (!first) {
		count_done(p);
		p->end = DELIVERY_ACK;
	} else if (first->state == INV_EXHAUSTED) {
		plan_dead_letter(d, r, p, first); /* DELIVERY_RELEASE either way */
	} else {
		p->end = DELIVERY_RELEASE;
	}
}

/* Frees the plan and its message. */
static void plan_free(struct delivery *d, struct delivery_plan *p)
{
	for (size_t i = 0; i < p->n; i++) {
		free(p->t[i].field);
		free(p->t[i].raw);
	}
	free(p->t);
	free(p->key);
	free(p->sched_stdin);
	if (p->snap)
		registry_release(d->cfg.registry, p->snap);
	event_free(p->ev);
	trace_msg_free(&p->trace);
	delivery_msg_free(p->m);
	free(p);
}

/* The verdict of a plan done with, into *out, then frees it. */
static void plan_finish(struct delivery *d, struct delivery_plan *p, struct delivery_end *out)
{
	const char *outcome = p->end == DELIVERY_ACK ? "acknowledged"
			      : p->dead_lettered      ? "dead_lettered"
						      : "pending";
	trace_msg_end(&p->trace, d->stream, d->group, p->m->id, outcome,
		      p->last_error[0]		? p->last_error
		      : p->dead_lettered	? "dead-lettered"
						: NULL);
	out->verdict = p->end;
	out->id = p->m->id;
	p->m->id = NULL;
	out->key = NULL;
	out->keyed = p->end == DELIVERY_ACK && (p->keyed || p->m->keys_registered);
	if (p->end == DELIVERY_ACK) {
		out->key = p->key;
		p->key = NULL;
	}
	plan_free(d, p);
}

/*
 * Key: with key_concurrency, the message's place in the queue of each of
 * its keyed functions' key values (keyorder.h). Its reader may have found
 * it within their limits already; otherwise it asks now. False when it
 * must wait (DELIVERY_RELEASE: it stays pending, marked waiting, and is
 * claimed again when its turn comes; no attempt is charged and no slot
 * held), or when Redis could not say (it stays pending for the reclaim).
 */
static bool plan_keys(struct delivery *d, struct redis *r, struct delivery_plan *p)
{
	if (p->scheduled || !d->cfg.keys)
		return true;
	if (p->m->keys_acquired) {
		p->keyed = true;
		return true;
	}
	struct keyorder_regs regs = {0};
	for (size_t i = 0; i < p->n; i++)
		keyorder_regs_add(d->cfg.keys, &regs, p->m->id, p->t[i].fv->fn, p->ev,
				  p->t[i].timeout_ns);
	if (regs.n == 0) {
		keyorder_regs_free(&regs);
		return true;
	}
	char *behind = NULL;
	size_t which = 0;
	int rc = ensure_conn(d, r) < 0 ? -1
				       : keyorder_acquire(d->cfg.keys, r, p->m->id, regs.v, regs.n,
							  &behind, &which);
	if (rc == 1) {
		keyorder_regs_free(&regs);
		p->keyed = true;
		return true;
	}
	if (rc < 0) {
		log_warn(LOG_ATTRS("message_id", p->m->id, "error", redis_errmsg(r)),
			 "cannot take the message's place in its key's queue; it stays pending");
	} else {
		const struct keyorder_reg *g = &regs.v[which < regs.n ? which : 0];
		char *value = keyorder_queue_value(g->queue);
		metrics_function_key_wait(g->function);
		log_debug(LOG_ATTRS("function", g->function, "message_id", p->m->id, "key", value,
				    "behind", behind ? behind : "", "trace_id", p->trace.trace_id),
			  "waiting for its key: left pending until the messages before it are done");
		free(value);
	}
	free(behind);
	keyorder_regs_free(&regs); /* not released: it keeps its place */
	return false;
}

/* A message dead-lettered leaves its key queues, waking the next ones;
 * this worker's retrier claims them. (An acknowledged one leaves them with
 * its acknowledgement: delivery_end.keyed.) */
static void plan_release_keys(struct delivery *d, struct redis *r, struct delivery_plan *p)
{
	if ((!p->keyed && !p->m->keys_registered) || p->end == DELIVERY_ACK || !p->dead_lettered)
		return;
	const char *id = p->m->id;
	int woken = ensure_conn(d, r) < 0 ? -1 : keyorder_release(d->cfg.keys, r, &id, 1);
	if (woken < 0)
		log_warn(LOG_ATTRS("message_id", p->m->id, "error", redis_errmsg(r)),
			 "cannot release the message's key places; the next messages of its "
			 "keys run once its lease ends");
	else if (woken > 0 && d->cfg.retry_scheduled)
		d->cfg.retry_scheduled(d->cfg.ctx, now_wall_ns() / NS_PER_MS);
}

void delivery_process(struct delivery *d, struct redis *r, struct delivery_msg *m,
		      struct delivery_end *out)
{
	struct delivery_plan *p = xcalloc(1, sizeof *p);
	p->m = m;
	p->end = DELIVERY_RELEASE;
	if (plan_decode(d, r, p) && plan_resolve(d, p)) {
		plan_load(d, r, p);
		if (plan_keys(d, r, p)) {
			if (plan_run(d, r, p)) {
				*out = (struct delivery_end){DELIVERY_PARKED, NULL, NULL, false};
				return;
			}
			plan_settle(d, r, p);
			plan_release_keys(d, r, p);
		}
	}
	plan_finish(d, p, out);
}

void delivery_resume(struct delivery *d, struct redis *r, struct delivery_plan *p,
		     struct delivery_end *out)
{
	if (plan_run(d, r, p)) {
		*out = (struct delivery_end){DELIVERY_PARKED, NULL, NULL, false};
		return;
	}
	plan_settle(d, r, p);
	plan_release_keys(d, r, p);
	plan_finish(d, p, out);
}

/* ---- lifecycle --------------------------------------------------------- */

struct delivery *delivery_new(const struct delivery_config *cfg)
{
	struct delivery *d = xcalloc(1, sizeof *d);
	d->cfg = *cfg;
	d->stream = cfg->stream;
	d->group = cfg->group;
	d->name = cfg->consumer;
	d->dlq = cfg->dlq;
	d->stop = cfg->stop;
	d->lock = cfg->lock;
	d->slots = cfg->slots;
	retry_policy_default(&d->base, cfg->backoff_ns);
	return d;
}

void delivery_drop_deferred(struct delivery *d)
{
	while (d->dhead) {
		struct delivery_plan *p = d->dhead;
		d->dhead = p->dnext;
		const struct fn_version *fv = p->t[p->cur].fv;
		slots_defer(d->slots, fv->fn->name, (int)fv->fn->tpl->concurrency, -1);
		log_debug(LOG_ATTRS("message_id", p->m->id,
				    "trace_id", p->trace.trace_id),
			  "shutdown: an invocation waiting for a slot is left pending");
		plan_free(d, p);
	}
	d->dtail = NULL;
	d->ndeferred = 0;
}

void delivery_free(struct delivery *d)
{
	free(d);
}
