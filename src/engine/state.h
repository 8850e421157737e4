/*
 * The local state database: Relay's read-only view of what it has loaded,
 * how the last reconcile of each function went, and the latest operational
 * counters. A derived snapshot, never the source of truth: /functions is
 * authoritative and nothing here drives matching, building or
 * reconciliation. The file is <data dir>/db.sqlite3 (SQLite 3, WAL mode).
 *
 * Schema (PRAGMA user_version = 2). All timestamps are RFC3339 UTC text
 * ("2026-09-08T12:00:00Z"); durations are Go duration text ("6s", "1m30s").
 *
 *   functions(name PRIMARY KEY, runtime, status 'ready'|'pending', image,
 *             fingerprint, prepared_at, last_reconcile_at,
 *             last_reconcile_status 'success'|'failed'|NULL, last_error,
 *             updated_at, env, secrets)
 *       env:     JSON object, variable name -> literal value
 *       secrets: JSON object, variable name -> secret reference (the name of
 *                a secret, never its value)
 *       image/fingerprint/prepared_at are NULL until the first successful
 *       preparation; last_reconcile_* are NULL until a reconcile is recorded.
 *   handlers(function_name, handler, timeout)
 *       one row per event rule, in template order (rowid order); a handler
 *       may appear twice when two rules name it.
 *   schedules(function_name, handler, cron, timezone, timeout)
 *       one row per schedule, in template order. The spec lists no column
 *       for schedules yet `relay function inspect` shows them; a separate
 *       table keeps the four listed tables exactly as the spec describes them.
 *   stats(events_received, events_processed, handler_success,
 *         handler_failure, retries, dlq_entries, pending_entries,
 *         oldest_pending_age_seconds, updated_at)
 *       at most one row: the global counters, named after their Prometheus
 *       metrics without _total, plus the two backlog gauges (whole seconds).
 *   function_stats(function_name, events, successes, failures, retries,
 *                  dlq_entries, updated_at)
 *       one row per function: the function_*_total{function} counters.
 *   function_options(function_name PRIMARY KEY, match_arrays)
 *       one row per function written with its definition: match_arrays
 *       'values' or 'elements', the template's key (a separate table, like
 *       schedules, so a version-2 file written before it existed stays
 *       readable: no row reads as 'values').
 *   standby(function_name, handler, containers, updated_at)
 *       written with the stats, and only while standby is enabled
 *       (STANDBY_MAX > 0): one row per distinct handler of each served
 *       function (its event rules' handlers in template order, then its
 *       schedules' handlers not already listed), containers = how many
 *       standby containers it had parked. Empty with standby off, from
 *       startup until the first flush, and after a graceful stop (the pool
 *       is gone before the final flush).
 *
 * Versions. Version 2 added the standby table. The writer drops and
 * recreates the tables of any other version (the data is derived); a
 * reader accepts an older version (a version-1 file reads as having no
 * standby rows) and refuses a newer one. The function_options table came
 * later within version 2: the writer creates it when missing, and a reader
 * finding none reads every function as match_arrays: values.
 *
 * Writing. One writer handle (state_open) per process. Every call is one
 * short IMMEDIATE transaction, serialized by a mutex inside the handle, so
 * the reconciler and the stats flush thread may share it; a 2 s busy
 * timeout bounds any wait on a concurrent reader. Errors are returned
 * (never fatal): the caller logs them and carries on without the database.
 * A function write refused for a reason that passes (a full disk, an I/O
 * error, a lock held too long) is kept, its arguments copied (at most
 * DEFERRED_MAX in state.c), and written again, in order, before the next
 * writer call, the 5 s stats flush included; its error then ends in
 * "(kept: written once the database accepts writes again)".
 *
 * Reading. state_open_readonly opens with SQLITE_OPEN_READONLY and never
 * creates the data directory or the database; a missing database (or a file
 * without Relay's tables) reads as fresh: no functions, zero counters.
 * (SQLite itself may create its -wal/-shm companion files next to an
 * existing WAL database, as any reader of such a database does.)
 */
#ifndef RELAY_STATE_H
#define RELAY_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/util.h"

#define STATE_DB_FILE "db.sqlite3"
#define STATE_SCHEMA_VERSION 2

/* An open database: opaque. */
struct state;

/* ---- input of the writer: plain borrowed data, converted by the caller ---- */

struct state_pair {
	const char *name;
	const char *value;
};

struct state_handler {
	const char *handler; /* "events.created.handler" */
	int64_t timeout_ns;  /* the effective timeout (default 6s applied) */
};

struct state_schedule {
	const char *handler;
	const char *cron;     /* the expression exactly as written */
	const char *timezone; /* NULL or "": UTC */
	int64_t timeout_ns;   /* the effective timeout (default 6s applied) */
};

/* A function's loaded definition (its template). */
struct state_function {
	const char *name;
	const char *runtime;
	const struct state_handler *handlers;
	size_t nhandlers;
	const struct state_schedule *schedules;
	size_t nschedules;
	const struct state_pair *env; /* name -> literal value */
	size_t nenv;
	const struct state_pair *secrets; /* name -> secret reference */
	size_t nsecrets;
	bool match_arrays_elements; /* the template's match_arrays: elements */
};

/* Absolute counter values (not deltas). */
struct state_counters {
	int64_t events;
	int64_t successes;
	int64_t failures;
	int64_t retries;
	int64_t dlq_entries;
};

struct state_function_stats {
	const char *function;
	struct state_counters c;
};

/* A handler's parked standby containers at the time of the snapshot. */
struct state_standby {
	const char *function;
	const char *handler;
	int64_t containers;
};

struct state_stats {
	int64_t events_received;
	int64_t events_processed;
	int64_t handler_success;
	int64_t handler_failure;
	int64_t retries;
	int64_t dlq_entries;
	int64_t pending_entries;
	int64_t oldest_pending_age_seconds;
	/* Output of state_read_stats only: RFC3339 text, "" = never written. */
	char updated_at[40];
};

/* ---- writer ---- */

/*
 * Opens (creating the data directory, mode 0700, and the database as needed)
 * <data_dir>/db.sqlite3 for writing: WAL mode, 2 s busy timeout, schema
 * created or upgraded (a database of another schema version is a derived
 * view, so its tables are dropped and recreated). Returns 0 and *out, or -1
 * and a malloc'd *err naming the file and the problem (corrupt file,
 * unwritable file or directory). Call from any thread.
 */
int state_open(const char *data_dir, struct state **out, char **err);

/* Closes the handle (NULL is fine). No call may be in progress. */
void state_close(struct state *s);

/* The database path, borrowed from s. */
const char *state_path(const struct state *s);

/*
 * Writer calls. `now` is Unix seconds (normally time(NULL)) and becomes
 * updated_at. Each returns 0, or -1 with a malloc'd *err that the caller
 * frees (err may be NULL; *err is only written on failure).
 * Thread-safe: each call takes the handle's mutex.
 */

/*
 * Records f as loaded. A new function (or one never built) gets status
 * pending with f's definition. A function that is already ready keeps its
 * row untouched: the version it serves is described by state_mark_ready,
 * and a newer definition only replaces it once that version is prepared.
 */
int state_put_pending(struct state *s, const struct state_function *f, int64_t now, char **err);

/*
 * The function is ready: status ready, image/fingerprint/prepared_at set,
 * and, when f is not NULL, its stored definition replaced by f (the version
 * now serving). Also records a successful reconcile at `now` and clears
 * last_error. Creates the row when f is given and the function is unknown;
 * with f NULL an unknown name is an error.
 */
int state_mark_ready(struct state *s, const char *name, const struct state_function *f,
		     const char *image, const char *fingerprint, int64_t prepared_at, int64_t now,
		     char **err);

/*
 * Records a meaningful reconcile outcome: last_reconcile_at = now,
 * last_reconcile_status success/failed, last_error = error (ok) or NULL.
 * Status, image and fingerprint are never touched: a failed rebuild of a
 * ready function stays ready on its previous version. An unknown name is
 * not an error (nothing to record: the function was never loaded).
 */
int state_record_reconcile(struct state *s, const char *name, bool ok, const char *error,
			   int64_t now, char **err);

/* Removes a function, its handlers, schedules, stats and standby rows.
 * Unknown: no-op. */
int state_remove_function(struct state *s, const char *name, char **err);

/*
 * Startup: the loaded set becomes exactly fns[0..n). Rows of functions not
 * in the set are removed; each function in the set is stored with its
 * definition as pending (image, fingerprint and prepared_at cleared: this
 * process serves nothing until it has prepared it), keeping its last
 * reconcile outcome. Every standby row goes too (the previous process's
 * containers are gone; the first stats flush writes this one's). One
 * transaction.
 */
int state_replace_all(struct state *s, const struct state_function *fns, size_t n, int64_t now,
		      char **err);

/*
 * Writes the absolute snapshot: the single stats row (g; its updated_at is
 * ignored), the function_stats rows (exactly fs[0..n)) and the standby rows
 * (exactly sb[0..nsb), kept in that order; nsb 0 with standby off),
 * previous rows replaced, all with updated_at = now, in one transaction.
 */
int state_write_stats(struct state *s, const struct state_stats *g,
		      const struct state_function_stats *fs, size_t n,
		      const struct state_standby *sb, size_t nsb, int64_t now, char **err);

/* ---- reader ---- */

struct state_handler_info {
	char *handler;
	char *timeout; /* as stored: Go duration text */
};

struct state_schedule_info {
	char *handler;
	char *cron;
	char *timezone; /* never NULL: "UTC" when none was stored */
	char *timeout;
};

struct state_pair_info {
	char *name;
	char *value;
};

struct state_standby_info {
	char *handler;
	int64_t containers;
};

/* One function as stored. Strings are owned; optional ones may be NULL. */
struct state_function_info {
	char *name;
	char *runtime;
	char *status;
	char *image, *fingerprint, *prepared_at;
	char *last_reconcile_at, *last_reconcile_status, *last_error;
	char *updated_at;
	size_t nhandlers; /* always set */
	/* The arrays below are filled by state_get_function only. */
	struct state_handler_info *handlers;
	struct state_schedule_info *schedules;
	size_t nschedules;
	struct state_pair_info *env; /* sorted by name */
	size_t nenv;
	struct state_pair_info *secrets; /* sorted by name */
	size_t nsecrets;
	struct state_counters stats; /* zeros when there is no stats row */
	/* The last flush's standby rows, in the order written; none with
	 * standby off, before the first flush, or in a version-1 file. */
	struct state_standby_info *standby;
	size_t nstandby;
	/* match_arrays: elements; false for values, for a function written
	 * before the function_options table existed, and in state_list_functions. */
	bool match_arrays_elements;
};

/*
 * Opens <data_dir>/db.sqlite3 read-only. Returns 0 with *out NULL when there
 * is no database yet (fresh: the functions below accept a NULL handle), 0
 * with *out set, or -1 and a malloc'd *err (unreadable or corrupt file, or a
 * schema version this binary does not know). Creates nothing.
 */
int state_open_readonly(const char *data_dir, struct state **out, char **err);

/* Every function sorted by name (byte order), definitions not filled in. */
int state_list_functions(struct state *s, struct state_function_info **out, size_t *n, char **err);

/* One function with everything; *out is NULL (and 0 returned) when unknown. */
int state_get_function(struct state *s, const char *name, struct state_function_info **out,
		       char **err);

/* The global snapshot; zeros and updated_at "" when none was written. */
int state_read_stats(struct state *s, struct state_stats *out, char **err);

void state_function_info_free(struct state_function_info *f);
void state_function_infos_free(struct state_function_info *fs, size_t n);

/* ---- time (pure, thread-safe) ---- */

/* Unix seconds as RFC3339 UTC ("2026-09-08T12:00:00Z"). */
#define STATE_TIME_MAX 32
char *state_format_time(int64_t t, char out[STATE_TIME_MAX]);
/* Parses an RFC 3339 time (rfc3339_parse's rules; also 't' or a space for
 * 'T', 'z' for 'Z' and no zone, read as UTC, as SQLite's datetime() writes)
 * to Unix seconds. 0, or -1 when s is no such time. */
int state_parse_time(const char *s, int64_t *out);

#endif
