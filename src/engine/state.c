/*
 * The local state database (see state.h for the schema and contracts).
 *
 * Every writer call is one short BEGIN IMMEDIATE transaction under the
 * handle's mutex: the reconciler and the stats flush thread can share one
 * handle, and a reader (the CLI) never waits more than one short write.
 * Statements are prepared per call: the calls are rare (a reconcile, a
 * 5-second flush), so a statement cache would buy nothing.
 *
 * Refused function writes are kept. A function write (put_pending,
 * mark_ready, record_reconcile, remove_function, replace_all) refused for a
 * reason that passes by itself (SQLite's FULL, IOERR, BUSY, LOCKED,
 * CANTOPEN, READONLY, NOMEM: a full disk, a lock held too long) is kept in
 * the handle, its arguments copied, and its error ends in "(kept: written
 * once the database accepts writes again)". Every later writer call, the
 * 5-second stats snapshot included, first writes the kept ones in order; a
 * call made while some still wait is kept behind them. So once space
 * returns, the next flush brings the functions table up to date (without
 * this, a function added or rebuilt while the disk was full stayed missing
 * or pending in `relay function ls` until its next change). At most
 * DEFERRED_MAX are kept (beyond: "(dropped: too many writes waiting)"); one
 * refused for good when written again is dropped.
 *
 * The database is a derived view. The writer therefore never tries to
 * migrate: a schema version it does not know is dropped and recreated, and
 * a file SQLite cannot read is reported, not repaired (the caller runs
 * without the database, as the spec asks).
 */
#include "engine/state.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/duration.h"
#include "base/rfc3339.h"

#define BUSY_TIMEOUT_MS 2000
#define QUOTE_(x) #x
#define QUOTE(x) QUOTE_(x)

/* Most function writes kept while the database refuses them (state.h,
 * "Writing"): beyond this the newest are dropped. */
#define DEFERRED_MAX 4096

/* A function write refused for a reason that passes (a full disk, an I/O
 * error, a lock): kept, with deep copies of its arguments, and written
 * again, in order, before the next writer call. */
enum deferred_kind { D_PENDING, D_READY, D_RECONCILE, D_REMOVE, D_REPLACE_ALL };
struct deferred {
	enum deferred_kind kind;
	char *name, *image, *fingerprint, *error;
	bool ok;
	int64_t prepared_at, now;
	struct state_function *fns; /* D_PENDING, D_READY (0 or 1), D_REPLACE_ALL */
	size_t nfns;
	struct deferred *next;
};

struct state {
	sqlite3 *db;
	char *path;
	bool readonly;
	pthread_mutex_t mu;
	int last_code;			     /* SQLite's primary result code of the last db_err */
	struct deferred *dq_head, **dq_tail; /* under mu */
	size_t dq_len;
};

static const char *const schema_sql =
	"CREATE TABLE IF NOT EXISTS functions ("
	" name TEXT PRIMARY KEY NOT NULL,"
	" runtime TEXT NOT NULL,"
	" status TEXT NOT NULL CHECK (status IN ('ready', 'pending')),"
	" image TEXT,"
	" fingerprint TEXT,"
	" prepared_at TEXT,"
	" last_reconcile_at TEXT,"
	" last_reconcile_status TEXT CHECK (last_reconcile_status IN ('success', 'failed')),"
	" last_error TEXT,"
	" updated_at TEXT NOT NULL,"
	" env TEXT NOT NULL DEFAULT '{}',"
	" secrets TEXT NOT NULL DEFAULT '{}');"
	"CREATE TABLE IF NOT EXISTS handlers ("
	" function_name TEXT NOT NULL,"
	" handler TEXT NOT NULL,"
	" timeout TEXT NOT NULL);"
	"CREATE INDEX IF NOT EXISTS handlers_function ON handlers (function_name);"
	"CREATE TABLE IF NOT EXISTS schedules ("
	" function_name TEXT NOT NULL,"
	" handler TEXT NOT NULL,"
	" cron TEXT NOT NULL,"
	" timezone TEXT NOT NULL DEFAULT 'UTC',"
	" timeout TEXT NOT NULL);"
	"CREATE INDEX IF NOT EXISTS schedules_function ON schedules (function_name);"
	"CREATE TABLE IF NOT EXISTS stats ("
	" events_received INTEGER NOT NULL DEFAULT 0,"
	" events_processed INTEGER NOT NULL DEFAULT 0,"
	" handler_success INTEGER NOT NULL DEFAULT 0,"
	" handler_failure INTEGER NOT NULL DEFAULT 0,"
	" retries INTEGER NOT NULL DEFAULT 0,"
	" dlq_entries INTEGER NOT NULL DEFAULT 0,"
	" pending_entries INTEGER NOT NULL DEFAULT 0,"
	" oldest_pending_age_seconds INTEGER NOT NULL DEFAULT 0,"
	" updated_at TEXT NOT NULL);"
	"CREATE TABLE IF NOT EXISTS function_stats ("
	" function_name TEXT PRIMARY KEY NOT NULL,"
	" events INTEGER NOT NULL DEFAULT 0,"
	" successes INTEGER NOT NULL DEFAULT 0,"
	" failures INTEGER NOT NULL DEFAULT 0,"
	" retries INTEGER NOT NULL DEFAULT 0,"
	" dlq_entries INTEGER NOT NULL DEFAULT 0,"
	" updated_at TEXT NOT NULL);"
	"CREATE TABLE IF NOT EXISTS function_options ("
	" function_name TEXT PRIMARY KEY NOT NULL,"
	" match_arrays TEXT NOT NULL CHECK (match_arrays IN ('values', 'elements')));"
	"CREATE TABLE IF NOT EXISTS standby ("
	" function_name TEXT NOT NULL,"
	" handler TEXT NOT NULL,"
	" containers INTEGER NOT NULL,"
	" updated_at TEXT NOT NULL);"
	"CREATE INDEX IF NOT EXISTS standby_function ON standby (function_name);";

static const char *const drop_sql = "DROP TABLE IF EXISTS functions;"
				    "DROP TABLE IF EXISTS handlers;"
				    "DROP TABLE IF EXISTS schedules;"
				    "DROP TABLE IF EXISTS stats;"
				    "DROP TABLE IF EXISTS function_stats;"
				    "DROP TABLE IF EXISTS function_options;"
				    "DROP TABLE IF EXISTS standby;";

/* ---- errors and small helpers ---- */

static void set_err(char **err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_err(char **err, const char *fmt, ...)
{
	if (!err)
		return;
	va_list ap;
	va_start(ap, fmt);
	*err = xvasprintf(fmt, ap); /* set once per failed call: never leaks */
	va_end(ap);
}

/* "state database PATH: WHAT: sqlite's message"; returns -1. */
static int db_err(struct state *s, char **err, const char *what)
{
	s->last_code = sqlite3_errcode(s->db) & 0xff;
	set_err(err, "state database %s: %s: %s", s->path, what, sqlite3_errmsg(s->db));
	return -1;
}

static char *db_path(const char *data_dir)
{
	size_t n = strlen(data_dir);
	while (n > 1 && data_dir[n - 1] == '/')
		n--;
	return xasprintf("%.*s/%s", (int)n, data_dir, STATE_DB_FILE);
}

/* mkdir -p (0700 for what it makes), then the path must be a directory. */
static int make_data_dir(const char *dir, char **err)
{
	if (mkdir_p(dir, 0700, 0, "state database: create directory", NULL, err) < 0)
		return -1;
	struct stat st;
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		set_err(err, "state database: %s is not a directory", dir);
		return -1;
	}
	return 0;
}

static int exec_sql(struct state *s, const char *sql, const char *what, char **err)
{
	if (sqlite3_exec(s->db, sql, NULL, NULL, NULL) != SQLITE_OK)
		return db_err(s, err, what);
	return 0;
}

static int begin(struct state *s, char **err)
{
	return exec_sql(s, "BEGIN IMMEDIATE", "begin transaction", err);
}

static int commit(struct state *s, char **err)
{
	if (exec_sql(s, "COMMIT", "commit", err) < 0) {
		sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
		return -1;
	}
	return 0;
}

static void rollback(struct state *s)
{
	if (!sqlite3_get_autocommit(s->db))
		sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

/*
 * Prepares sql and binds its parameters from types: 't' a const char *
 * (NULL binds NULL), 'i' an int64_t. Returns NULL after filling *err.
 */
static sqlite3_stmt *vprep(struct state *s, char **err, const char *sql, const char *types,
			   va_list ap)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) {
		db_err(s, err, "prepare");
		return NULL;
	}
	for (int i = 0; types[i]; i++) {
		int rc;
		if (types[i] == 't') {
			const char *v = va_arg(ap, const char *);
			rc = v ? sqlite3_bind_text(st, i + 1, v, -1, SQLITE_TRANSIENT)
			       : sqlite3_bind_null(st, i + 1);
		} else {
			rc = sqlite3_bind_int64(st, i + 1, va_arg(ap, int64_t));
		}
		if (rc != SQLITE_OK) {
			db_err(s, err, "bind");
			sqlite3_finalize(st);
			return NULL;
		}
	}
	return st;
}

static sqlite3_stmt *prep(struct state *s, char **err, const char *sql, const char *types, ...)
{
	va_list ap;
	va_start(ap, types);
	sqlite3_stmt *st = vprep(s, err, sql, types, ap);
	va_end(ap);
	return st;
}

/* Runs a statement that returns no rows; returns the number of changed rows or -1. */
static int run(struct state *s, char **err, const char *sql, const char *types, ...)
{
	va_list ap;
	va_start(ap, types);
	sqlite3_stmt *st = vprep(s, err, sql, types, ap);
	va_end(ap);
	if (!st)
		return -1;
	int rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE && rc != SQLITE_ROW)
		return db_err(s, err, "write");
	return sqlite3_changes(s->db);
}

static char *col_dup(sqlite3_stmt *st, int i)
{
	const unsigned char *t = sqlite3_column_text(st, i);
	return t ? xstrdup((const char *)t) : NULL;
}

/* ---- time ---- */

char *state_format_time(int64_t t, char out[STATE_TIME_MAX])
{
	time_t tt = (time_t)t;
	struct tm tm;
	if (!gmtime_r(&tt, &tm) || strftime(out, STATE_TIME_MAX, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		snprintf_(out, STATE_TIME_MAX, "%s", "1970-01-01T00:00:00Z");
	return out;
}

int state_parse_time(const char *s, int64_t *out)
{
	/* rfc3339_parse, also reading what SQLite's datetime() writes: 't' or a
	 * space for 'T', 'z' for 'Z', and no zone at all (UTC). */
	size_t n = s ? strlen(s) : 0;
	if (n < 19)
		return -1;
	char *t = xmalloc(n + 2);
	memcpy(t, s, n + 1);
	if (t[10] == 't' || t[10] == ' ')
		t[10] = 'T';
	if (t[n - 1] == 'z')
		t[n - 1] = 'Z';
	int64_t sec;
	int32_t nsec;
	int rc = rfc3339_parse(t, n, &sec, &nsec);
	if (rc < 0) {
		t[n] = 'Z';
		rc = rfc3339_parse(t, n + 1, &sec, &nsec);
	}
	free(t);
	if (rc == 0)
		*out = sec;
	return rc;
}

/* ---- opening ---- */

static struct state *state_new(const char *path, bool readonly)
{
	struct state *s = xcalloc(1, sizeof *s);
	s->path = xstrdup(path);
	s->readonly = readonly;
	s->dq_tail = &s->dq_head;
	pthread_mutex_init(&s->mu, NULL);
	return s;
}

static void deferred_free(struct deferred *d);

void state_close(struct state *s)
{
	if (!s)
		return;
	while (s->dq_head) {
		struct deferred *d = s->dq_head;
		s->dq_head = d->next;
		deferred_free(d);
	}
	sqlite3_close(s->db);
	pthread_mutex_destroy(&s->mu);
	free(s->path);
	free(s);
}

const char *state_path(const struct state *s)
{
	return s->path;
}

static int user_version(struct state *s, int64_t *out, char **err)
{
	sqlite3_stmt *st = prep(s, err, "PRAGMA user_version", "");
	if (!st)
		return -1;
	int rc = sqlite3_step(st);
	if (rc == SQLITE_ROW)
		*out = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	if (rc != SQLITE_ROW)
		return db_err(s, err, "read schema version");
	return 0;
}

/* 1 when the table exists, 0 when not, -1 on error (e.g. not a database). */
static int has_table(struct state *s, const char *table, char **err)
{
	sqlite3_stmt *st =
		prep(s, err, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?",
		     "t", table);
	if (!st)
		return -1;
	int rc = sqlite3_step(st);
	int n = rc == SQLITE_ROW ? sqlite3_column_int(st, 0) : 0;
	sqlite3_finalize(st);
	if (rc != SQLITE_ROW)
		return db_err(s, err, "read schema");
	return n > 0;
}

int state_open(const char *data_dir, struct state **out, char **err)
{
	*out = NULL;
	if (make_data_dir(data_dir, err) < 0)
		return -1;
	char *path = db_path(data_dir);
	struct state *s = state_new(path, false);
	free(path);
	int64_t version = 0;

	if (sqlite3_open_v2(s->path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
	    SQLITE_OK) {
		if (!s->db) {
			set_err(err, "state database %s: open: out of memory", s->path);
			goto fail;
		}
		db_err(s, err, "open");
		goto fail;
	}
	if (sqlite3_db_readonly(s->db, "main") == 1) {
		set_err(err, "state database %s: open: file is not writable", s->path);
		goto fail;
	}
	sqlite3_busy_timeout(s->db, BUSY_TIMEOUT_MS);
	/* The first statement reads the header: a corrupt file fails here. */
	if (exec_sql(s, "PRAGMA journal_mode = WAL", "enable WAL", err) < 0 ||
	    exec_sql(s, "PRAGMA synchronous = NORMAL", "set synchronous", err) < 0 ||
	    user_version(s, &version, err) < 0)
		goto fail;
	if (begin(s, err) < 0)
		goto fail;
	if (version != 0 && version != STATE_SCHEMA_VERSION &&
	    exec_sql(s, drop_sql, "drop tables of another schema version", err) < 0)
		goto fail_tx;
	if (exec_sql(s, schema_sql, "create schema", err) < 0 ||
	    exec_sql(s, "PRAGMA user_version = " QUOTE(STATE_SCHEMA_VERSION), "set schema version",
		     err) < 0)
		goto fail_tx;
	if (commit(s, err) < 0)
		goto fail;
	*out = s;
	return 0;
fail_tx:
	rollback(s);
fail:
	state_close(s);
	return -1;
}

int state_open_readonly(const char *data_dir, struct state **out, char **err)
{
	*out = NULL;
	char *path = db_path(data_dir);
	struct stat sb;
	if (stat(path, &sb) < 0) {
		int e = errno;
		if (e == ENOENT || e == ENOTDIR) {
			free(path);
			return 0; /* fresh: nothing written yet */
		}
		set_err(err, "state database %s: %s", path, strerror(e));
		free(path);
		return -1;
	}
	struct state *s = state_new(path, true);
	free(path);
	int64_t version = 0;
	int have;
	if (sqlite3_open_v2(s->path, &s->db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
		if (!s->db)
			set_err(err, "state database %s: open: out of memory", s->path);
		else
			db_err(s, err, "open");
		goto fail;
	}
	sqlite3_busy_timeout(s->db, BUSY_TIMEOUT_MS);
	have = has_table(s, "functions", err);
	if (have < 0 || user_version(s, &version, err) < 0)
		goto fail;
	if (!have) {
		state_close(s);
		return 0;
	}
	if (version > STATE_SCHEMA_VERSION) {
		set_err(err,
			"state database %s: schema version %lld is newer than this relay's (%d)",
			s->path, (long long)version, STATE_SCHEMA_VERSION);
		goto fail;
	}
	*out = s;
	return 0;
fail:
	state_close(s);
	return -1;
}

/* ---- writing ---- */

static const char *pair_json(const struct state_pair *p, size_t n, char **out, char **err,
			     const char *what)
{
	json_t *o = json_object();
	for (size_t i = 0; i < n; i++) {
		json_t *v = json_string(p[i].value ? p[i].value : "");
		if (!v || json_object_set_new(o, p[i].name, v) < 0) {
			set_err(err, "state database: %s %s: not valid UTF-8", what, p[i].name);
			json_decref(o);
			return NULL;
		}
	}
	*out = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(o);
	if (!*out)
		set_err(err, "state database: %s: cannot encode JSON", what);
	return *out;
}

static int delete_definition(struct state *s, const char *name, char **err)
{
	if (run(s, err, "DELETE FROM handlers WHERE function_name = ?", "t", name) < 0 ||
	    run(s, err, "DELETE FROM schedules WHERE function_name = ?", "t", name) < 0 ||
	    run(s, err, "DELETE FROM function_options WHERE function_name = ?", "t", name) < 0)
		return -1;
	return 0;
}

/*
 * Writes f's row (runtime, env, secrets, status, updated_at) and its handler
 * and schedule rows. ready: also image/fingerprint/prepared_at and a
 * successful reconcile; pending: those three cleared, reconcile kept.
 */
static int write_function(struct state *s, const struct state_function *f, bool ready,
			  const char *image, const char *fingerprint, const char *prepared_at,
			  const char *now, char **err)
{
	char *env = NULL, *secrets = NULL;
	int rc = -1;
	if (!f->name || !*f->name || !f->runtime) {
		set_err(err, "state database: function without a name or runtime");
		return -1;
	}
	if (!pair_json(f->env, f->nenv, &env, err, "env") ||
	    !pair_json(f->secrets, f->nsecrets, &secrets, err, "secrets"))
		goto out;
	if (ready) {
		if (run(s, err,
			"INSERT INTO functions (name, runtime, status, image, fingerprint, "
			"prepared_at,"
			" last_reconcile_at, last_reconcile_status, last_error, updated_at, env, "
			"secrets)"
			" VALUES (?1, ?2, 'ready', ?3, ?4, ?5, ?6, 'success', NULL, ?6, ?7, ?8)"
			" ON CONFLICT (name) DO UPDATE SET runtime = ?2, status = 'ready', image = "
			"?3,"
			" fingerprint = ?4, prepared_at = ?5, last_reconcile_at = ?6,"
			" last_reconcile_status = 'success', last_error = NULL, updated_at = ?6,"
			" env = ?7, secrets = ?8",
			"tttttttt", f->name, f->runtime, image, fingerprint, prepared_at, now, env,
			secrets) < 0)
			goto out;
	} else {
		if (run(s, err,
			"INSERT INTO functions (name, runtime, status, updated_at, env, secrets)"
			" VALUES (?1, ?2, 'pending', ?3, ?4, ?5)"
			" ON CONFLICT (name) DO UPDATE SET runtime = ?2, status = 'pending',"
			" image = NULL, fingerprint = NULL, prepared_at = NULL, updated_at = ?3,"
			" env = ?4, secrets = ?5",
			"ttttt", f->name, f->runtime, now, env, secrets) < 0)
			goto out;
	}
	if (delete_definition(s, f->name, err) < 0)
		goto out;
	for (size_t i = 0; i < f->nhandlers; i++) {
		char d[DURATION_STR_MAX];
		duration_format(f->handlers[i].timeout_ns, d);
		if (run(s, err,
			"INSERT INTO handlers (function_name, handler, timeout) VALUES (?, ?, ?)",
			"ttt", f->name, f->handlers[i].handler ? f->handlers[i].handler : "",
			d) < 0)
			goto out;
	}
	if (run(s, err, "INSERT INTO function_options (function_name, match_arrays) VALUES (?, ?)",
		"tt", f->name, f->match_arrays_elements ? "elements" : "values") < 0)
		goto out;
	for (size_t i = 0; i < f->nschedules; i++) {
		const struct state_schedule *sc = &f->schedules[i];
		char d[DURATION_STR_MAX];
		duration_format(sc->timeout_ns, d);
		if (run(s, err,
			"INSERT INTO schedules (function_name, handler, cron, timezone, timeout)"
			" VALUES (?, ?, ?, ?, ?)",
			"ttttt", f->name, sc->handler ? sc->handler : "", sc->cron ? sc->cron : "",
			sc->timezone && *sc->timezone ? sc->timezone : "UTC", d) < 0)
			goto out;
	}
	rc = 0;
out:
	free(env);
	free(secrets);
	return rc;
}

static int remove_rows(struct state *s, const char *name, char **err)
{
	if (run(s, err, "DELETE FROM functions WHERE name = ?", "t", name) < 0 ||
	    delete_definition(s, name, err) < 0 ||
	    run(s, err, "DELETE FROM function_stats WHERE function_name = ?", "t", name) < 0 ||
	    run(s, err, "DELETE FROM standby WHERE function_name = ?", "t", name) < 0)
		return -1;
	return 0;
}

/* Whether name is in the database with status ready (*ready false when it
 * is pending or absent). 0, or -1 with *err. */
static int is_ready(struct state *s, const char *name, bool *ready, char **err)
{
	sqlite3_stmt *st = prep(s, err, "SELECT status FROM functions WHERE name = ?", "t", name);
	if (!st)
		return -1;
	int rc = sqlite3_step(st), r = 0;
	*ready = false;
	if (rc == SQLITE_ROW) {
		const unsigned char *t = sqlite3_column_text(st, 0);
		*ready = t && strcmp((const char *)t, "ready") == 0;
	} else if (rc != SQLITE_DONE) {
		r = db_err(s, err, "read");
	}
	sqlite3_finalize(st);
	return r;
}

static int op_put_pending(struct state *s, const struct state_function *f, const char *ts,
			  char **err)
{
	int rc = begin(s, err);
	if (rc == 0) {
		bool ready;
		rc = is_ready(s, f->name ? f->name : "", &ready, err);
		if (rc == 0 && !ready)
			rc = write_function(s, f, false, NULL, NULL, NULL, ts, err);
		rc = rc == 0 ? commit(s, err) : (rollback(s), -1);
	}
	return rc;
}

static int op_mark_ready(struct state *s, const char *name, const struct state_function *f,
			 const char *image, const char *fingerprint, const char *prep_ts,
			 const char *ts, char **err)
{
	int rc = begin(s, err);
	if (rc == 0) {
		if (f) {
			if (f->name && strcmp(f->name, name) != 0) {
				set_err(err,
					"state database: mark ready %s with the definition of %s",
					name, f->name);
				rc = -1;
			} else {
				rc = write_function(s, f, true, image, fingerprint, prep_ts, ts,
						    err);
			}
		} else {
			int n = run(s, err,
				    "UPDATE functions SET status = 'ready', image = ?1, "
				    "fingerprint = ?2,"
				    " prepared_at = ?3, last_reconcile_at = ?4,"
				    " last_reconcile_status = 'success', last_error = NULL,"
				    " updated_at = ?4 WHERE name = ?5",
				    "ttttt", image, fingerprint, prep_ts, ts, name);
			if (n == 0)
				set_err(err, "state database: mark ready: no function named \"%s\"",
					name);
			rc = n > 0 ? 0 : -1;
		}
		rc = rc == 0 ? commit(s, err) : (rollback(s), -1);
	}
	return rc;
}

static int op_record_reconcile(struct state *s, const char *name, bool ok, const char *error,
			       const char *ts, char **err)
{
	int n = run(s, err,
		    "UPDATE functions SET last_reconcile_at = ?1, last_reconcile_status = ?2,"
		    " last_error = ?3, updated_at = ?1 WHERE name = ?4",
		    "tttt", ts, ok ? "success" : "failed", ok ? NULL : (error ? error : ""), name);
	return n < 0 ? -1 : 0;
}

static int op_remove(struct state *s, const char *name, char **err)
{
	int rc = begin(s, err);
	if (rc == 0)
		rc = remove_rows(s, name, err) == 0 ? commit(s, err) : (rollback(s), -1);
	return rc;
}

static bool in_set(const struct state_function *fns, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (fns[i].name && strcmp(fns[i].name, name) == 0)
			return true;
	return false;
}

static int op_replace_all(struct state *s, const struct state_function *fns, size_t n,
			  const char *ts, char **err)
{
	char **gone = NULL;
	size_t ngone = 0;
	int rc = begin(s, err);
	if (rc < 0)
		goto out;
	sqlite3_stmt *st = prep(s, err, "SELECT name FROM functions", "");
	if (!st) {
		rc = -1;
		goto out_tx;
	}
	int step;
	while ((step = sqlite3_step(st)) == SQLITE_ROW) {
		const char *name = (const char *)sqlite3_column_text(st, 0);
		if (name && !in_set(fns, n, name)) {
			gone = xrealloc(gone, (ngone + 1) * sizeof *gone);
			gone[ngone++] = xstrdup(name);
		}
	}
	sqlite3_finalize(st);
	if (step != SQLITE_DONE) {
		rc = db_err(s, err, "read");
		goto out_tx;
	}
	for (size_t i = 0; i < ngone && rc == 0; i++)
		rc = remove_rows(s, gone[i], err);
	/* Rows that belong to no function (left by hand or an older run). */
	if (rc == 0 &&
	    (run(s, err,
		 "DELETE FROM handlers WHERE function_name NOT IN (SELECT name FROM functions)",
		 "") < 0 ||
	     run(s, err,
		 "DELETE FROM schedules WHERE function_name NOT IN (SELECT name FROM functions)",
		 "") < 0 ||
	     run(s, err,
		 "DELETE FROM function_options WHERE function_name NOT IN (SELECT name FROM "
		 "functions)",
		 "") < 0 ||
	     run(s, err, "DELETE FROM standby", "") < 0))
		rc = -1;
	for (size_t i = 0; i < n && rc == 0; i++)
		rc = write_function(s, &fns[i], false, NULL, NULL, NULL, ts, err);
out_tx:
	rc = rc == 0 ? commit(s, err) : (rollback(s), -1);
out:
	for (size_t i = 0; i < ngone; i++)
		free(gone[i]);
	free(gone);
	return rc;
}

/* ---- deferred function writes ---- */

static char *dup_or_null(const char *t)
{
	return t ? xstrdup(t) : NULL;
}

static struct state_pair *pairs_copy(const struct state_pair *p, size_t n)
{
	struct state_pair *c = xcalloc(n + 1, sizeof *c);
	for (size_t i = 0; i < n; i++)
		c[i] = (struct state_pair){dup_or_null(p[i].name), dup_or_null(p[i].value)};
	return c;
}

static void pairs_release(const struct state_pair *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free((void *)p[i].name);
		free((void *)p[i].value);
	}
	free((void *)p);
}

static void fn_copy(struct state_function *d, const struct state_function *f)
{
	struct state_handler *h = xcalloc(f->nhandlers + 1, sizeof *h);
	for (size_t i = 0; i < f->nhandlers; i++)
		h[i] = (struct state_handler){dup_or_null(f->handlers[i].handler),
					      f->handlers[i].timeout_ns};
	struct state_schedule *sc = xcalloc(f->nschedules + 1, sizeof *sc);
	for (size_t i = 0; i < f->nschedules; i++)
		sc[i] = (struct state_schedule){
			dup_or_null(f->schedules[i].handler), dup_or_null(f->schedules[i].cron),
			dup_or_null(f->schedules[i].timezone), f->schedules[i].timeout_ns};
	*d = (struct state_function){
		.name = dup_or_null(f->name),
		.runtime = dup_or_null(f->runtime),
		.handlers = h,
		.nhandlers = f->nhandlers,
		.schedules = sc,
		.nschedules = f->nschedules,
		.env = pairs_copy(f->env, f->nenv),
		.nenv = f->nenv,
		.secrets = pairs_copy(f->secrets, f->nsecrets),
		.nsecrets = f->nsecrets,
		.match_arrays_elements = f->match_arrays_elements,
	};
}

static void fn_release(const struct state_function *f)
{
	free((void *)f->name);
	free((void *)f->runtime);
	for (size_t i = 0; i < f->nhandlers; i++)
		free((void *)f->handlers[i].handler);
	free((void *)f->handlers);
	for (size_t i = 0; i < f->nschedules; i++) {
		free((void *)f->schedules[i].handler);
		free((void *)f->schedules[i].cron);
		free((void *)f->schedules[i].timezone);
	}
	free((void *)f->schedules);
	pairs_release(f->env, f->nenv);
	pairs_release(f->secrets, f->nsecrets);
}

static void deferred_free(struct deferred *d)
{
	if (!d)
		return;
	free(d->name);
	free(d->image);
	free(d->fingerprint);
	free(d->error);
	for (size_t i = 0; i < d->nfns; i++)
		fn_release(&d->fns[i]);
	free(d->fns);
	free(d);
}

/* A queued copy of a call's (borrowed) arguments. */
static struct deferred *deferred_copy(const struct deferred *b)
{
	struct deferred *d = xcalloc(1, sizeof *d);
	*d = (struct deferred){
		.kind = b->kind,
		.name = dup_or_null(b->name),
		.image = dup_or_null(b->image),
		.fingerprint = dup_or_null(b->fingerprint),
		.error = dup_or_null(b->error),
		.ok = b->ok,
		.prepared_at = b->prepared_at,
		.now = b->now,
		.nfns = b->nfns,
	};
	d->fns = xcalloc(b->nfns + 1, sizeof *d->fns);
	for (size_t i = 0; i < b->nfns; i++)
		fn_copy(&d->fns[i], &b->fns[i]);
	return d;
}

static int apply(struct state *s, const struct deferred *d, char **err)
{
	char ts[STATE_TIME_MAX], prep_ts[STATE_TIME_MAX];
	state_format_time(d->now, ts);
	switch (d->kind) {
	case D_PENDING: return op_put_pending(s, &d->fns[0], ts, err);
	case D_READY:
		state_format_time(d->prepared_at, prep_ts);
		return op_mark_ready(s, d->name, d->nfns ? &d->fns[0] : NULL, d->image,
				     d->fingerprint, prep_ts, ts, err);
	case D_RECONCILE: return op_record_reconcile(s, d->name, d->ok, d->error, ts, err);
	case D_REMOVE: return op_remove(s, d->name, err);
	case D_REPLACE_ALL: return op_replace_all(s, d->fns, d->nfns, ts, err);
	}
	return -1;
}

/* Whether a refusal may pass by itself, so the write is worth keeping. */
static bool passing(int code)
{
	return code == SQLITE_FULL || code == SQLITE_IOERR || code == SQLITE_BUSY ||
	       code == SQLITE_LOCKED || code == SQLITE_CANTOPEN || code == SQLITE_READONLY ||
	       code == SQLITE_NOMEM;
}

/* Writes the kept writes, oldest first, until one is refused again for a
 * passing reason (one refused for good is dropped: it would block the rest
 * forever). Called with mu held; 0 when none is left, else -1 with *err. */
static int replay(struct state *s, char **err)
{
	while (s->dq_head) {
		struct deferred *d = s->dq_head;
		char *e = NULL;
		s->last_code = 0;
		if (apply(s, d, &e) < 0 && passing(s->last_code)) {
			if (err)
				*err = e;
			else
				free(e);
			return -1;
		}
		free(e);
		s->dq_head = d->next;
		if (!s->dq_head)
			s->dq_tail = &s->dq_head;
		s->dq_len--;
		deferred_free(d);
	}
	return 0;
}

/* One function write: after the kept ones, or kept behind them. */
static int submit(struct state *s, const struct deferred *d, char **err)
{
	char *why = NULL;
	pthread_mutex_lock(&s->mu);
	s->last_code = 0;
	int rc = replay(s, &why) == 0 ? apply(s, d, &why) : -1;
	if (rc < 0 && passing(s->last_code)) {
		bool keep = s->dq_len < DEFERRED_MAX;
		if (keep) {
			struct deferred *c = deferred_copy(d);
			*s->dq_tail = c;
			s->dq_tail = &c->next;
			s->dq_len++;
		}
		set_err(err, "%s (%s)", why ? why : "state database: write refused",
			keep ? "kept: written once the database accepts writes again"
			     : "dropped: too many writes waiting");
	} else if (rc < 0) {
		set_err(err, "%s", why ? why : "state database: write refused");
	}
	free(why);
	pthread_mutex_unlock(&s->mu);
	return rc;
}

int state_put_pending(struct state *s, const struct state_function *f, int64_t now, char **err)
{
	struct deferred d = {
		.kind = D_PENDING, .now = now, .fns = (struct state_function *)f, .nfns = 1};
	return submit(s, &d, err);
}

int state_mark_ready(struct state *s, const char *name, const struct state_function *f,
		     const char *image, const char *fingerprint, int64_t prepared_at, int64_t now,
		     char **err)
{
	struct deferred d = {.kind = D_READY,
			     .name = (char *)name,
			     .image = (char *)image,
			     .fingerprint = (char *)fingerprint,
			     .prepared_at = prepared_at,
			     .now = now,
			     .fns = (struct state_function *)f,
			     .nfns = f ? 1 : 0};
	return submit(s, &d, err);
}

int state_record_reconcile(struct state *s, const char *name, bool ok, const char *error,
			   int64_t now, char **err)
{
	struct deferred d = {.kind = D_RECONCILE,
			     .name = (char *)name,
			     .error = (char *)error,
			     .ok = ok,
			     .now = now};
	return submit(s, &d, err);
}

int state_remove_function(struct state *s, const char *name, char **err)
{
	struct deferred d = {.kind = D_REMOVE, .name = (char *)name};
	return submit(s, &d, err);
}

int state_replace_all(struct state *s, const struct state_function *fns, size_t n, int64_t now,
		      char **err)
{
	struct deferred d = {
		.kind = D_REPLACE_ALL, .now = now, .fns = (struct state_function *)fns, .nfns = n};
	return submit(s, &d, err);
}

int state_write_stats(struct state *s, const struct state_stats *g,
		      const struct state_function_stats *fs, size_t n,
		      const struct state_standby *sb, size_t nsb, int64_t now, char **err)
{
	char ts[STATE_TIME_MAX];
	state_format_time(now, ts);
	pthread_mutex_lock(&s->mu);
	/* The kept function writes first: the flush that finds the space
	 * back brings the functions table up to date too. */
	char *why = NULL;
	replay(s, &why);
	free(why);
	int rc = begin(s, err);
	if (rc < 0)
		goto out;
	if (run(s, err, "DELETE FROM stats", "") < 0 ||
	    run(s, err,
		"INSERT INTO stats (events_received, events_processed, handler_success,"
		" handler_failure, retries, dlq_entries, pending_entries, "
		"oldest_pending_age_seconds,"
		" updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
		"iiiiiiiit", g->events_received, g->events_processed, g->handler_success,
		g->handler_failure, g->retries, g->dlq_entries, g->pending_entries,
		g->oldest_pending_age_seconds, ts) < 0 ||
	    run(s, err, "DELETE FROM function_stats", "") < 0)
		rc = -1;
	for (size_t i = 0; i < n && rc == 0; i++) {
		const struct state_counters *c = &fs[i].c;
		if (run(s, err,
			"INSERT OR REPLACE INTO function_stats (function_name, events, successes,"
			" failures, retries, dlq_entries, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
			"tiiiiit", fs[i].function ? fs[i].function : "", c->events, c->successes,
			c->failures, c->retries, c->dlq_entries, ts) < 0)
			rc = -1;
	}
	if (rc == 0 && run(s, err, "DELETE FROM standby", "") < 0)
		rc = -1;
	for (size_t i = 0; i < nsb && rc == 0; i++)
		if (run(s, err,
			"INSERT INTO standby (function_name, handler, containers, updated_at)"
			" VALUES (?, ?, ?, ?)",
			"ttit", sb[i].function ? sb[i].function : "",
			sb[i].handler ? sb[i].handler : "", sb[i].containers, ts) < 0)
			rc = -1;
	rc = rc == 0 ? commit(s, err) : (rollback(s), -1);
out:
	pthread_mutex_unlock(&s->mu);
	return rc;
}

/* ---- reading ---- */

void state_function_info_free(struct state_function_info *f)
{
	if (!f)
		return;
	state_function_infos_free(f, 1);
}

static void pairs_free(struct state_pair_info *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(p[i].name);
		free(p[i].value);
	}
	free(p);
}

void state_function_infos_free(struct state_function_info *fs, size_t n)
{
	if (!fs)
		return;
	for (size_t i = 0; i < n; i++) {
		struct state_function_info *f = &fs[i];
		free(f->name);
		free(f->runtime);
		free(f->status);
		free(f->image);
		free(f->fingerprint);
		free(f->prepared_at);
		free(f->last_reconcile_at);
		free(f->last_reconcile_status);
		free(f->last_error);
		free(f->updated_at);
		for (size_t k = 0; f->handlers && k < f->nhandlers; k++) {
			free(f->handlers[k].handler);
			free(f->handlers[k].timeout);
		}
		free(f->handlers);
		for (size_t k = 0; k < f->nschedules; k++) {
			free(f->schedules[k].handler);
			free(f->schedules[k].cron);
			free(f->schedules[k].timezone);
			free(f->schedules[k].timeout);
		}
		free(f->schedules);
		pairs_free(f->env, f->nenv);
		pairs_free(f->secrets, f->nsecrets);
		for (size_t k = 0; k < f->nstandby; k++)
			free(f->standby[k].handler);
		free(f->standby);
	}
	free(fs);
}

#define FUNCTION_COLUMNS                                                             \
	"f.name, f.runtime, f.status, f.image, f.fingerprint, f.prepared_at,"        \
	" f.last_reconcile_at, f.last_reconcile_status, f.last_error, f.updated_at," \
	" (SELECT count(*) FROM handlers h WHERE h.function_name = f.name), f.env, f.secrets"

static void read_function_row(sqlite3_stmt *st, struct state_function_info *f)
{
	f->name = col_dup(st, 0);
	f->runtime = col_dup(st, 1);
	f->status = col_dup(st, 2);
	f->image = col_dup(st, 3);
	f->fingerprint = col_dup(st, 4);
	f->prepared_at = col_dup(st, 5);
	f->last_reconcile_at = col_dup(st, 6);
	f->last_reconcile_status = col_dup(st, 7);
	f->last_error = col_dup(st, 8);
	f->updated_at = col_dup(st, 9);
	f->nhandlers = (size_t)sqlite3_column_int64(st, 10);
	if (!f->name)
		f->name = xstrdup("");
	if (!f->runtime)
		f->runtime = xstrdup("");
	if (!f->status)
		f->status = xstrdup("");
}

int state_list_functions(struct state *s, struct state_function_info **out, size_t *n, char **err)
{
	*out = NULL;
	*n = 0;
	if (!s)
		return 0;
	pthread_mutex_lock(&s->mu);
	struct state_function_info *fs = NULL;
	size_t len = 0;
	int rc = 0, step;
	sqlite3_stmt *st =
		prep(s, err, "SELECT " FUNCTION_COLUMNS " FROM functions f ORDER BY f.name", "");
	if (!st) {
		rc = -1;
		goto out;
	}
	while ((step = sqlite3_step(st)) == SQLITE_ROW) {
		fs = xrealloc(fs, (len + 1) * sizeof *fs);
		memset(&fs[len], 0, sizeof *fs);
		read_function_row(st, &fs[len]);
		len++;
	}
	sqlite3_finalize(st);
	if (step != SQLITE_DONE) {
		rc = db_err(s, err, "read functions");
		state_function_infos_free(fs, len);
		goto out;
	}
	*out = fs;
	*n = len;
out:
	pthread_mutex_unlock(&s->mu);
	return rc;
}

static int cmp_pair(const void *a, const void *b)
{
	return strcmp(((const struct state_pair_info *)a)->name,
		      ((const struct state_pair_info *)b)->name);
}

/* Parses a JSON object column into sorted pairs; non-string values as JSON text. */
static int parse_pairs(const struct state *s, const char *text, const char *what,
		       struct state_pair_info **out, size_t *n, char **err)
{
	*out = NULL;
	*n = 0;
	if (!text || !*text)
		return 0;
	json_error_t je;
	json_t *o = json_loads(text, JSON_DECODE_ANY, &je);
	if (!o || !json_is_object(o)) {
		set_err(err, "state database %s: column %s is not a JSON object", s->path, what);
		json_decref(o);
		return -1;
	}
	size_t len = json_object_size(o), i = 0;
	struct state_pair_info *p = xcalloc(len ? len : 1, sizeof *p);
	const char *key;
	json_t *v;
	json_object_foreach(o, key, v)
	{
		p[i].name = xstrdup(key);
		if (json_is_string(v)) {
			p[i].value = xstrdup(json_string_value(v));
		} else {
			char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
			p[i].value = xstrdup(t ? t : "");
			free(t);
		}
		i++;
	}
	json_decref(o);
	qsort(p, i, sizeof *p, cmp_pair);
	*out = p;
	*n = i;
	return 0;
}

/* f's match_arrays: elements only with a row saying so (none in a file
 * written before the function_options table). */
static int read_options(struct state *s, struct state_function_info *f, char **err)
{
	int have = has_table(s, "function_options", err);
	if (have <= 0)
		return have;
	sqlite3_stmt *st =
		prep(s, err, "SELECT match_arrays FROM function_options WHERE function_name = ?",
		     "t", f->name);
	if (!st)
		return -1;
	int step = sqlite3_step(st);
	if (step == SQLITE_ROW) {
		const unsigned char *v = sqlite3_column_text(st, 0);
		f->match_arrays_elements = v && strcmp((const char *)v, "elements") == 0;
	}
	sqlite3_finalize(st);
	if (step != SQLITE_ROW && step != SQLITE_DONE)
		return db_err(s, err, "read function options");
	return 0;
}

/* f's standby rows in the order written; none in a version-1 file. */
static int read_standby(struct state *s, struct state_function_info *f, char **err)
{
	int have = has_table(s, "standby", err);
	if (have <= 0)
		return have;
	sqlite3_stmt *st = prep(s, err,
				"SELECT handler, containers FROM standby WHERE function_name = ?"
				" ORDER BY rowid",
				"t", f->name);
	if (!st)
		return -1;
	size_t cap = 0;
	int step;
	while ((step = sqlite3_step(st)) == SQLITE_ROW) {
		if (f->nstandby == cap) {
			cap = cap ? 2 * cap : 4;
			f->standby = xrealloc(f->standby, cap * sizeof *f->standby);
		}
		struct state_standby_info *sb = &f->standby[f->nstandby++];
		sb->handler = col_dup(st, 0);
		sb->containers = sqlite3_column_int64(st, 1);
		if (!sb->handler)
			sb->handler = xstrdup("");
	}
	sqlite3_finalize(st);
	if (step != SQLITE_DONE)
		return db_err(s, err, "read standby");
	return 0;
}

static int read_definition(struct state *s, struct state_function_info *f, char **err)
{
	sqlite3_stmt *st =
		prep(s, err,
		     "SELECT handler, timeout FROM handlers WHERE function_name = ? ORDER BY rowid",
		     "t", f->name);
	if (!st)
		return -1;
	size_t cap = f->nhandlers;
	f->nhandlers = 0;
	f->handlers = xcalloc(cap ? cap : 1, sizeof *f->handlers);
	int step;
	while ((step = sqlite3_step(st)) == SQLITE_ROW) {
		if (f->nhandlers == cap) {
			cap = cap ? 2 * cap : 4;
			f->handlers = xrealloc(f->handlers, cap * sizeof *f->handlers);
		}
		struct state_handler_info *h = &f->handlers[f->nhandlers++];
		h->handler = col_dup(st, 0);
		h->timeout = col_dup(st, 1);
		if (!h->handler)
			h->handler = xstrdup("");
	}
	sqlite3_finalize(st);
	if (step != SQLITE_DONE)
		return db_err(s, err, "read handlers");

	st = prep(s, err,
		  "SELECT handler, cron, timezone, timeout FROM schedules WHERE function_name = ?"
		  " ORDER BY rowid",
		  "t", f->name);
	if (!st)
		return -1;
	cap = 0;
	while ((step = sqlite3_step(st)) == SQLITE_ROW) {
		if (f->nschedules == cap) {
			cap = cap ? 2 * cap : 4;
			f->schedules = xrealloc(f->schedules, cap * sizeof *f->schedules);
		}
		struct state_schedule_info *sc = &f->schedules[f->nschedules++];
		sc->handler = col_dup(st, 0);
		sc->cron = col_dup(st, 1);
		sc->timezone = col_dup(st, 2);
		sc->timeout = col_dup(st, 3);
		if (!sc->handler)
			sc->handler = xstrdup("");
		if (!sc->cron)
			sc->cron = xstrdup("");
		if (!sc->timezone || !*sc->timezone) {
			free(sc->timezone);
			sc->timezone = xstrdup("UTC");
		}
	}
	sqlite3_finalize(st);
	if (step != SQLITE_DONE)
		return db_err(s, err, "read schedules");

	st = prep(s, err,
		  "SELECT events, successes, failures, retries, dlq_entries FROM function_stats"
		  " WHERE function_name = ?",
		  "t", f->name);
	if (!st)
		return -1;
	step = sqlite3_step(st);
	if (step == SQLITE_ROW) {
		f->stats.events = sqlite3_column_int64(st, 0);
		f->stats.successes = sqlite3_column_int64(st, 1);
		f->stats.failures = sqlite3_column_int64(st, 2);
		f->stats.retries = sqlite3_column_int64(st, 3);
		f->stats.dlq_entries = sqlite3_column_int64(st, 4);
	}
	sqlite3_finalize(st);
	if (step != SQLITE_ROW && step != SQLITE_DONE)
		return db_err(s, err, "read function stats");
	return read_standby(s, f, err);
}

int state_get_function(struct state *s, const char *name, struct state_function_info **out,
		       char **err)
{
	*out = NULL;
	if (!s)
		return 0;
	pthread_mutex_lock(&s->mu);
	struct state_function_info *f = NULL;
	char *env = NULL, *secrets = NULL;
	int rc = -1;
	sqlite3_stmt *st = prep(
		s, err, "SELECT " FUNCTION_COLUMNS " FROM functions f WHERE f.name = ?", "t", name);
	if (!st)
		goto out;
	int step = sqlite3_step(st);
	if (step == SQLITE_ROW) {
		f = xcalloc(1, sizeof *f);
		read_function_row(st, f);
		env = col_dup(st, 11);
		secrets = col_dup(st, 12);
	}
	sqlite3_finalize(st);
	if (step == SQLITE_DONE) {
		rc = 0; /* unknown */
		goto out;
	}
	if (step != SQLITE_ROW) {
		db_err(s, err, "read function");
		goto out;
	}
	if (parse_pairs(s, env, "env", &f->env, &f->nenv, err) < 0 ||
	    parse_pairs(s, secrets, "secrets", &f->secrets, &f->nsecrets, err) < 0 ||
	    read_definition(s, f, err) < 0 || read_options(s, f, err) < 0)
		goto out;
	*out = f;
	f = NULL;
	rc = 0;
out:
	pthread_mutex_unlock(&s->mu);
	state_function_info_free(f);
	free(env);
	free(secrets);
	return rc;
}

int state_read_stats(struct state *s, struct state_stats *out, char **err)
{
	memset(out, 0, sizeof *out);
	if (!s)
		return 0;
	pthread_mutex_lock(&s->mu);
	int rc = 0;
	sqlite3_stmt *st = prep(s, err,
				"SELECT events_received, events_processed, handler_success,"
				" handler_failure, retries, dlq_entries, pending_entries,"
				" oldest_pending_age_seconds, updated_at FROM stats LIMIT 1",
				"");
	if (!st) {
		rc = -1;
		goto out;
	}
	int step = sqlite3_step(st);
	if (step == SQLITE_ROW) {
		out->events_received = sqlite3_column_int64(st, 0);
		out->events_processed = sqlite3_column_int64(st, 1);
		out->handler_success = sqlite3_column_int64(st, 2);
		out->handler_failure = sqlite3_column_int64(st, 3);
		out->retries = sqlite3_column_int64(st, 4);
		out->dlq_entries = sqlite3_column_int64(st, 5);
		out->pending_entries = sqlite3_column_int64(st, 6);
		out->oldest_pending_age_seconds = sqlite3_column_int64(st, 7);
		const unsigned char *t = sqlite3_column_text(st, 8);
		snprintf_(out->updated_at, sizeof out->updated_at, "%s", t ? (const char *)t : "");
	}
	sqlite3_finalize(st);
	if (step != SQLITE_ROW && step != SQLITE_DONE)
		rc = db_err(s, err, "read stats");
out:
	pthread_mutex_unlock(&s->mu);
	return rc;
}
