#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd/render.h"
#include "base/duration.h"
#include "engine/state.h"
#include "t.h"
#include "tfiles.h"

/* ---- fixtures ---- */

/* Removes d (from t_tmpdir) and everything below it, and frees d. */
static void tmpdir_free(char *d)
{
	t_rmtree(d);
	free(d);
}

static bool exists(const char *p)
{
	struct stat sb;
	return stat(p, &sb) == 0;
}

/* Joins lines and compares; prints both texts on mismatch. */
#define CHECK_TEXT(got, want) CHECK_STR(got, want)

static const int64_t NOW = 1788868812; /* 2026-09-08T12:00:12Z */

static const struct state_handler user_handlers[] = {
	{"events.created.handler", 6 * NS_PER_SEC},
	{"events.updated.handler", 20 * NS_PER_SEC},
	{"events.deleted.handler", 6 * NS_PER_SEC},
};
static const struct state_schedule user_schedules[] = {
	{"jobs.cleanup.handler", "0 3 * * *", NULL, 6 * NS_PER_SEC},
	{"jobs.report.handler", "0 8 * * 1-5", "Europe/Rome", 20 * NS_PER_SEC},
};
static const struct state_pair user_env[] = {{"API_URL", "https://api.example.com"}};
static const struct state_pair user_secrets[] = {{"DATABASE_URL", "database-url"}};

static const struct state_function user_fn = {
	"user-events-python",
	"python3.14",
	user_handlers,
	3,
	user_schedules,
	2,
	user_env,
	1,
	user_secrets,
	1,
	false,
};

static const struct state_handler welcome_handlers[] = {{"welcome.send", 6 * NS_PER_SEC}};
static const struct state_function welcome_fn = {
	"welcome-email-node", "node24", welcome_handlers, 1, NULL, 0, NULL, 0, NULL, 0, false,
};

#define FP "3f2a9c0d4b5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8"

static struct state *open_or_die(const char *dir)
{
	struct state *s = NULL;
	char *err = NULL;
	if (state_open(dir, &s, &err) < 0) {
		printf("  state_open: %s\n", err);
		free(err);
		return NULL;
	}
	return s;
}

static struct state_function_info *get(struct state *s, const char *name)
{
	struct state_function_info *f = NULL;
	char *err = NULL;
	if (state_get_function(s, name, &f, &err) < 0) {
		printf("  state_get_function: %s\n", err);
		free(err);
	}
	return f;
}

static char *describe_stub(const char *expr)
{
	if (strcmp(expr, "0 3 * * *") == 0)
		return xstrdup("At 03:00");
	if (strcmp(expr, "0 8 * * 1-5") == 0)
		return xstrdup("At 08:00, Monday through Friday");
	return NULL;
}

/* ---- schema ---- */

static char *columns(sqlite3 *db, const char *table)
{
	char *sql = xasprintf("PRAGMA table_info(%s)", table);
	sqlite3_stmt *st;
	struct buf b;
	buf_init(&b, 4096);
	buf_append(&b, "", 0);
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
		while (sqlite3_step(st) == SQLITE_ROW)
			buf_appendf(&b, "%s%s", b.len ? "," : "",
				    (const char *)sqlite3_column_text(st, 1));
		sqlite3_finalize(st);
	}
	free(sql);
	return buf_steal(&b);
}

TEST(schema_has_exactly_the_spec_columns)
{
	char *dir = t_tmpdir();
	char *data = xasprintf("%s/a/b/data", dir); /* parents created */
	struct state *s = open_or_die(data);
	REQUIRE(s);
	char *path = xasprintf("%s/db.sqlite3", data);
	CHECK_STR(state_path(s), path);
	CHECK(exists(path));
	struct stat sb;
	CHECK(stat(data, &sb) == 0 && (sb.st_mode & 0777) == 0700);
	state_close(s);

	sqlite3 *db;
	REQUIRE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
	static const struct {
		const char *table, *cols;
	} want[] = {
		{"functions", "name,runtime,status,image,fingerprint,prepared_at,last_reconcile_at,"
			      "last_reconcile_status,last_error,updated_at,env,secrets"},
		{"handlers", "function_name,handler,timeout"},
		{"schedules", "function_name,handler,cron,timezone,timeout"},
		{"stats",
		 "events_received,events_processed,handler_success,handler_failure,retries,"
		 "dlq_entries,pending_entries,oldest_pending_age_seconds,updated_at"},
		{"function_stats",
		 "function_name,events,successes,failures,retries,dlq_entries,updated_at"},
		{"standby", "function_name,handler,containers,updated_at"},
		{"function_options", "function_name,match_arrays"},
	};
	for (size_t i = 0; i < ARRAY_LEN(want); i++) {
		char *got = columns(db, want[i].table);
		CHECK_STR(got, want[i].cols);
		free(got);
	}
	sqlite3_stmt *st;
	REQUIRE(sqlite3_prepare_v2(
			db,
			"SELECT group_concat(name, ',') FROM (SELECT name FROM sqlite_master"
			" WHERE type = 'table' ORDER BY name)",
			-1, &st, NULL) == SQLITE_OK);
	REQUIRE(sqlite3_step(st) == SQLITE_ROW);
	CHECK_STR((const char *)sqlite3_column_text(st, 0),
		  "function_options,function_stats,functions,handlers,schedules,standby,stats");
	sqlite3_finalize(st);
	REQUIRE(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL) == SQLITE_OK);
	REQUIRE(sqlite3_step(st) == SQLITE_ROW);
	CHECK_STR((const char *)sqlite3_column_text(st, 0), "wal");
	sqlite3_finalize(st);
	REQUIRE(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) == SQLITE_OK);
	REQUIRE(sqlite3_step(st) == SQLITE_ROW);
	CHECK_INT(sqlite3_column_int(st, 0), STATE_SCHEMA_VERSION);
	sqlite3_finalize(st);
	sqlite3_close(db);

	/* Reopening keeps the data. */
	s = open_or_die(data);
	REQUIRE(s);
	CHECK(state_put_pending(s, &welcome_fn, NOW, NULL) == 0);
	state_close(s);
	s = open_or_die(data);
	REQUIRE(s);
	struct state_function_info *f = get(s, "welcome-email-node");
	CHECK(f != NULL);
	state_function_info_free(f);
	state_close(s);
	free(path);
	free(data);
	tmpdir_free(dir);
}

TEST(other_schema_version_is_recreated)
{
	char *dir = t_tmpdir();
	char *path = xasprintf("%s/db.sqlite3", dir);
	sqlite3 *db;
	REQUIRE(sqlite3_open(path, &db) == SQLITE_OK);
	REQUIRE(sqlite3_exec(db, "CREATE TABLE functions (name TEXT); PRAGMA user_version = 7",
			     NULL, NULL, NULL) == SQLITE_OK);
	sqlite3_close(db);
	struct state *s = open_or_die(dir);
	REQUIRE(s);
	CHECK(state_put_pending(s, &user_fn, NOW, NULL) == 0);
	struct state_function_info *f = get(s, "user-events-python");
	CHECK(f && f->nhandlers == 3);
	state_function_info_free(f);
	state_close(s);
	free(path);
	tmpdir_free(dir);
}

/* ---- the function lifecycle ---- */

TEST(pending_ready_failed_keeps_the_active_version)
{
	char *dir = t_tmpdir();
	struct state *s = open_or_die(dir);
	REQUIRE(s);
	char *err = NULL;

	CHECK(state_put_pending(s, &user_fn, NOW - 100, &err) == 0);
	struct state_function_info *f = get(s, "user-events-python");
	REQUIRE(f);
	CHECK_STR(f->status, "pending");
	CHECK_STR(f->runtime, "python3.14");
	CHECK(f->image == NULL && f->fingerprint == NULL && f->prepared_at == NULL);
	CHECK(f->last_reconcile_status == NULL && f->last_error == NULL);
	CHECK_STR(f->updated_at, "2026-09-08T11:58:32Z");
	CHECK_INT(f->nhandlers, 3);
	CHECK_STR(f->handlers[1].handler, "events.updated.handler");
	CHECK_STR(f->handlers[1].timeout, "20s");
	CHECK_INT(f->nschedules, 2);
	CHECK_STR(f->schedules[0].timezone, "UTC");
	CHECK_STR(f->schedules[1].timezone, "Europe/Rome");
	CHECK_STR(f->schedules[1].cron, "0 8 * * 1-5");
	CHECK_INT(f->nenv, 1);
	CHECK_INT(f->nsecrets, 1);
	CHECK_STR(f->secrets[0].value, "database-url");
	state_function_info_free(f);

	CHECK(state_mark_ready(s, "user-events-python", &user_fn,
			       "relay-fn-user-events-python:3f2a9c0d4b5e6f70", FP, NOW - 12,
			       NOW - 12, &err) == 0);
	f = get(s, "user-events-python");
	REQUIRE(f);
	CHECK_STR(f->status, "ready");
	CHECK_STR(f->image, "relay-fn-user-events-python:3f2a9c0d4b5e6f70");
	CHECK_STR(f->fingerprint, FP);
	CHECK_STR(f->prepared_at, "2026-09-08T12:00:00Z");
	CHECK_STR(f->last_reconcile_status, "success");
	CHECK(f->last_error == NULL);
	state_function_info_free(f);

	/* A broken edit: the new definition is loaded, the build fails. */
	static const struct state_handler broken_handlers[] = {{"x.y", NS_PER_SEC}};
	struct state_function broken = user_fn;
	broken.handlers = broken_handlers;
	broken.nhandlers = 1;
	CHECK(state_put_pending(s, &broken, NOW - 5, &err) == 0);
	CHECK(state_record_reconcile(s, "user-events-python", false, "build failed: exit 1",
				     NOW - 5, &err) == 0);
	f = get(s, "user-events-python");
	REQUIRE(f);
	CHECK_STR(f->status, "ready");
	CHECK_STR(f->image, "relay-fn-user-events-python:3f2a9c0d4b5e6f70");
	CHECK_STR(f->fingerprint, FP);
	CHECK_STR(f->prepared_at, "2026-09-08T12:00:00Z");
	CHECK_STR(f->last_reconcile_status, "failed");
	CHECK_STR(f->last_reconcile_at, "2026-09-08T12:00:07Z");
	CHECK_STR(f->last_error, "build failed: exit 1");
	CHECK_INT(f->nhandlers, 3); /* still the serving version */
	state_function_info_free(f);

	/* Fixed: a new version is ready; the error is gone. */
	CHECK(state_mark_ready(s, "user-events-python", NULL, "relay-fn-user-events-python:aaaa",
			       "aaaa", NOW, NOW, &err) == 0);
	f = get(s, "user-events-python");
	REQUIRE(f);
	CHECK_STR(f->status, "ready");
	CHECK_STR(f->fingerprint, "aaaa");
	CHECK_STR(f->last_reconcile_status, "success");
	CHECK(f->last_error == NULL);
	state_function_info_free(f);

	/* Unknown names. */
	CHECK(state_record_reconcile(s, "nope", true, NULL, NOW, &err) == 0);
	CHECK(state_mark_ready(s, "nope", NULL, "i", "f", NOW, NOW, &err) == -1);
	CHECK(err && strstr(err, "no function named \"nope\""));
	f = get(s, "nope");
	CHECK(f == NULL);
	free(err);
	state_close(s);
	tmpdir_free(dir);
}

TEST(never_built_function_fails_and_stays_pending)
{
	char *dir = t_tmpdir();
	struct state *s = open_or_die(dir);
	REQUIRE(s);
	CHECK(state_put_pending(s, &welcome_fn, NOW, NULL) == 0);
	CHECK(state_record_reconcile(s, "welcome-email-node", false, "image build failed", NOW,
				     NULL) == 0);
	struct state_function_info *f = get(s, "welcome-email-node");
	REQUIRE(f);
	CHECK_STR(f->status, "pending");
	CHECK_STR(f->last_reconcile_status, "failed");
	CHECK_STR(f->last_error, "image build failed");
	state_function_info_free(f);
	state_close(s);
	tmpdir_free(dir);
}

static size_t count_rows(const char *dir, const char *sql)
{
	char *path = xasprintf("%s/db.sqlite3", dir);
	sqlite3 *db;
	sqlite3_stmt *st;
	size_t n = (size_t)-1;
	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
	    sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
		if (sqlite3_step(st) == SQLITE_ROW)
			n = (size_t)sqlite3_column_int64(st, 0);
		sqlite3_finalize(st);
	}
	sqlite3_close(db);
	free(path);
	return n;
}

TEST(remove_function_removes_its_rows)
{
	char *dir = t_tmpdir();
	struct state *s = open_or_die(dir);
	REQUIRE(s);
	CHECK(state_put_pending(s, &user_fn, NOW, NULL) == 0);
	CHECK(state_put_pending(s, &welcome_fn, NOW, NULL) == 0);
	struct state_function_stats fs[] = {{"user-events-python", {1, 1, 0, 0, 0}},
					    {"welcome-email-node", {2, 2, 0, 0, 0}}};
	struct state_stats g = {0};
	CHECK(state_write_stats(s, &g, fs, 2, NULL, 0, NOW, NULL) == 0);
	CHECK(state_remove_function(s, "user-events-python", NULL) == 0);
	CHECK(state_remove_function(s, "user-events-python", NULL) == 0); /* idempotent */
	CHECK(get(s, "user-events-python") == NULL);
	CHECK_INT(
		count_rows(
			dir,
			"SELECT count(*) FROM handlers WHERE function_name = 'user-events-python'"),
		0);
	CHECK_INT(count_rows(dir, "SELECT count(*) FROM schedules"), 0);
	CHECK_INT(count_rows(dir, "SELECT count(*) FROM function_stats"), 1);
	CHECK_INT(count_rows(dir, "SELECT count(*) FROM handlers"), 1);
	state_close(s);
	tmpdir_free(dir);
}

/* Writes refused for a passing reason (here another connection holding the
 * write lock: SQLITE_BUSY after the busy timeout; on a full disk
 * SQLITE_FULL) are kept and written, in order, by the next writer call, the
 * stats flush included; one refused for good is not kept. */
TEST(refused_function_writes_are_kept_and_written_later)
{
	char *dir = t_tmpdir();
	struct state *s = open_or_die(dir);
	REQUIRE(s);
	char *path = xasprintf("%s/db.sqlite3", dir);
	sqlite3 *blocker = NULL;
	REQUIRE(sqlite3_open(path, &blocker) == SQLITE_OK);
	REQUIRE(sqlite3_exec(blocker, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK);
	char *err = NULL;
	CHECK(state_put_pending(s, &user_fn, NOW - 10, &err) == -1);
	CHECK(err && strstr(err, "database is locked (kept: written once the database accepts "
				 "writes again)"));
	free(err);
	err = NULL;
	/* Behind the kept one (alone it would fail: no such row yet). */
	CHECK(state_mark_ready(s, "user-events-python", NULL, "img", "fp", NOW - 5, NOW - 5,
			       &err) == -1);
	CHECK(err && strstr(err, "(kept: "));
	free(err);
	err = NULL;
	CHECK(get(s, "user-events-python") == NULL);
	REQUIRE(sqlite3_exec(blocker, "ROLLBACK", NULL, NULL, NULL) == SQLITE_OK);
	sqlite3_close(blocker);

	struct state_stats g = {.handler_success = 3};
	CHECK(state_write_stats(s, &g, NULL, 0, NULL, 0, NOW, NULL) == 0);
	struct state_function_info *f = get(s, "user-events-python");
	REQUIRE(f);
	CHECK_STR(f->status, "ready");
	CHECK_STR(f->image, "img");
	CHECK_INT(f->nhandlers, 3);
	CHECK_INT(f->nschedules, 2);
	state_function_info_free(f);

	/* Refused for good: not kept, and nothing waits. */
	CHECK(state_mark_ready(s, "nope", NULL, "img", "fp", NOW, NOW, &err) == -1);
	CHECK(err && !strstr(err, "kept"));
	free(err);
	err = NULL;
	CHECK(state_put_pending(s, &welcome_fn, NOW, &err) == 0);
	free(path);
	state_close(s);
	tmpdir_free(dir);
}

TEST(replace_all_sets_exactly_the_loaded_set)
{
	char *dir = t_tmpdir();
	struct state *s = open_or_die(dir);
	REQUIRE(s);
	static const struct state_function gone = {
		"gone", "node24", welcome_handlers, 1, NULL, 0, NULL, 0, NULL, 0, false};
	CHECK(state_put_pending(s, &gone, NOW - 50, NULL) == 0);
	CHECK(state_mark_ready(s, "user-events-python", &user_fn, "img", "fp", NOW - 50, NOW - 50,
			       NULL) == 0);
	CHECK(state_record_reconcile(s, "user-events-python", false, "boom", NOW - 40, NULL) == 0);

	struct state_function set[] = {user_fn, welcome_fn};
	char *err = NULL;
	CHECK(state_replace_all(s, set, 2, NOW, &err) == 0);
	struct state_function_info *fs = NULL;
	size_t n = 0;
	CHECK(state_list_functions(s, &fs, &n, &err) == 0);
	REQUIRE(n == 2);
	CHECK_STR(fs[0].name, "user-events-python");
	CHECK_STR(fs[1].name, "welcome-email-node");
	CHECK_STR(fs[0].status, "pending");
	CHECK(fs[0].image == NULL && fs[0].fingerprint == NULL && fs[0].prepared_at == NULL);
	CHECK_STR(fs[0].last_reconcile_status, "failed"); /* kept */
	CHECK_INT(fs[0].nhandlers, 3);
	CHECK_INT(fs[1].nhandlers, 1);
	state_function_infos_free(fs, n);
	CHECK_INT(count_rows(dir, "SELECT count(*) FROM handlers WHERE function_name = 'gone'"), 0);
	CHECK_INT(count_rows(dir, "SELECT count(*) FROM handlers"), 4);
	CHECK_INT(count_rows(dir, "SELECT count(*) FROM schedules"), 2);

	/* An empty set empties the table. */
	CHECK(state_replace_all(s, NULL, 0, NOW, &err) == 0);
	CHECK(state_list_functions(s, &fs, &n, &err) == 0);
	CHECK_INT(n, 0);
	state_function_infos_free(fs, n);
	CHECK_INT(count_rows(dir, "SELECT count(*) FROM handlers"), 0);
	free(err);
	state_close(s);
	tmpdir_free(dir);
}

TEST(stats_snapshot_round_trip)
{
	char *dir = t_tmpdir();
	struct state *s = open_or_die(dir);
	REQUIRE(s);
	CHECK(state_put_pending(s, &user_fn, NOW, NULL) == 0);
	struct state_stats g = {1, 2, 3, 4, 5, 6, 7, 8, ""};
	struct state_function_stats fs[] = {{"user-events-python", {12493, 12470, 23, 17, 2}}};
	CHECK(state_write_stats(s, &g, fs, 1, NULL, 0, NOW - 10, NULL) == 0);
	struct state_stats g2 = {152934, 152934, 152801, 133, 82, 4, 17, 134, ""};
	CHECK(state_write_stats(s, &g2, fs, 1, NULL, 0, NOW, NULL) == 0); /* absolute: replaces */
	CHECK_INT(count_rows(dir, "SELECT count(*) FROM stats"), 1);
	struct state_stats got;
	CHECK(state_read_stats(s, &got, NULL) == 0);
	CHECK_INT(got.events_received, 152934);
	CHECK_INT(got.events_processed, 152934);
	CHECK_INT(got.handler_success, 152801);
	CHECK_INT(got.handler_failure, 133);
	CHECK_INT(got.retries, 82);
	CHECK_INT(got.dlq_entries, 4);
	CHECK_INT(got.pending_entries, 17);
	CHECK_INT(got.oldest_pending_age_seconds, 134);
	CHECK_STR(got.updated_at, "2026-09-08T12:00:12Z");
	struct state_function_info *f = get(s, "user-events-python");
	REQUIRE(f);
	CHECK_INT(f->stats.events, 12493);
	CHECK_INT(f->stats.successes, 12470);
	CHECK_INT(f->stats.failures, 23);
	CHECK_INT(f->stats.retries, 17);
	CHECK_INT(f->stats.dlq_entries, 2);
	state_function_info_free(f);
	/* A snapshot without the function drops its row. */
	CHECK(state_write_stats(s, &g2, NULL, 0, NULL, 0, NOW, NULL) == 0);
	f = get(s, "user-events-python");
	REQUIRE(f);
	CHECK_INT(f->stats.events, 0);
	state_function_info_free(f);
	state_close(s);
	tmpdir_free(dir);
}

static const struct state_standby user_standby[] = {
	{"user-events-python", "events.created.handler", 1},
	{"user-events-python", "events.updated.handler", 0},
	{"user-events-python", "events.deleted.handler", 2},
	{"user-events-python", "jobs.cleanup.handler", 0},
	{"user-events-python", "jobs.report.handler", 0},
	{"welcome-email-node", "welcome.send", 3},
};

/* The standby rows: written with the stats, read back per function in the
 * order written, replaced by each snapshot, gone with their function and
 * at startup (state_replace_all). */
TEST(standby_rows_round_trip)
{
	char *dir = t_tmpdir();
	struct state *s = open_or_die(dir);
	REQUIRE(s);
	CHECK(state_put_pending(s, &user_fn, NOW, NULL) == 0);
	CHECK(state_put_pending(s, &welcome_fn, NOW, NULL) == 0);
	struct state_stats g = {0};
	char *err = NULL;
	CHECK(state_write_stats(s, &g, NULL, 0, user_standby, 6, NOW, &err) == 0);
	CHECK_INT(count_rows(dir, "SELECT count(*) FROM standby"
				  " WHERE updated_at = '2026-09-08T12:00:12Z'"),
		  6);
	struct state_function_info *f = get(s, "user-events-python");
	REQUIRE(f);
	REQUIRE(f->nstandby == 5);
	for (size_t i = 0; i < 5; i++) {
		CHECK_STR(f->standby[i].handler, user_standby[i].handler);
		CHECK_INT(f->standby[i].containers, user_standby[i].containers);
	}
	state_function_info_free(f);
	f = get(s, "welcome-email-node");
	REQUIRE(f && f->nstandby == 1);
	CHECK_STR(f->standby[0].handler, "welcome.send");
	CHECK_INT(f->standby[0].containers, 3);
	state_function_info_free(f);

	/* Absolute: the next snapshot replaces every row. */
	static const struct state_standby later[] = {{"welcome-email-node", "welcome.send", 0}};
	CHECK(state_write_stats(s, &g, NULL, 0, later, 1, NOW + 5, &err) == 0);
	f = get(s, "user-events-python");
	REQUIRE(f);
	CHECK_INT(f->nstandby, 0);
	state_function_info_free(f);
	f = get(s, "welcome-email-node");
	REQUIRE(f && f->nstandby == 1);
	CHECK_INT(f->standby[0].containers, 0);
	state_function_info_free(f);

	/* Standby off: none. */
	CHECK(state_write_stats(s, &g, NULL, 0, NULL, 0, NOW + 10, &err) == 0);
	CHECK_INT(count_rows(dir, "SELECT count(*) FROM standby"), 0);

	/* Removing a function removes its rows; startup removes them all. */
	CHECK(state_write_stats(s, &g, NULL, 0, user_standby, 6, NOW, &err) == 0);
	CHECK(state_remove_function(s, "user-events-python", &err) == 0);
	CHECK_INT(count_rows(dir, "SELECT count(*) FROM standby"), 1);
	struct state_function set[] = {welcome_fn};
	CHECK(state_replace_all(s, set, 1, NOW, &err) == 0);
	CHECK_INT(count_rows(dir, "SELECT count(*) FROM standby"), 0);
	free(err);
	state_close(s);
	tmpdir_free(dir);
}

/* A version-1 file (before the standby table): the reader takes it as it
 * is (no standby rows, no Standby section); the writer recreates it. */
TEST(version_1_file_reads_without_standby)
{
	char *dir = t_tmpdir();
	struct state *s = open_or_die(dir);
	REQUIRE(s);
	CHECK(state_put_pending(s, &welcome_fn, NOW, NULL) == 0);
	state_close(s);
	char *path = xasprintf("%s/db.sqlite3", dir);
	sqlite3 *db;
	REQUIRE(sqlite3_open(path, &db) == SQLITE_OK);
	REQUIRE(sqlite3_exec(db, "DROP TABLE standby; PRAGMA user_version = 1", NULL, NULL, NULL) ==
		SQLITE_OK);
	sqlite3_close(db);

	struct state *r = NULL;
	char *err = NULL;
	CHECK(state_open_readonly(dir, &r, &err) == 0);
	REQUIRE(r);
	struct state_function_info *f = get(r, "welcome-email-node");
	REQUIRE(f);
	CHECK_INT(f->nstandby, 0);
	CHECK(f->standby == NULL);
	state_function_info_free(f);
	state_close(r);

	s = open_or_die(dir); /* the writer: dropped and recreated as version 2 */
	REQUIRE(s);
	CHECK(get(s, "welcome-email-node") == NULL);
	CHECK_INT(count_rows(dir, "PRAGMA user_version"), STATE_SCHEMA_VERSION);
	CHECK_INT(count_rows(dir, "SELECT count(*) FROM standby"), 0);
	state_close(s);

	/* and a newer version than this binary's is refused by the reader */
	REQUIRE(sqlite3_open(path, &db) == SQLITE_OK);
	REQUIRE(sqlite3_exec(db, "PRAGMA user_version = 3", NULL, NULL, NULL) == SQLITE_OK);
	sqlite3_close(db);
	CHECK(state_open_readonly(dir, &r, &err) < 0);
	CHECK(err && strstr(err, "schema version 3 is newer than this relay's (2)") != NULL);
	free(err);
	free(path);
	tmpdir_free(dir);
}

/* ---- failures and the read-only side ---- */

static void write_file(const char *path, const void *data, size_t n)
{
	FILE *fp = fopen(path, "wb");
	if (fp) {
		fwrite(data, 1, n, fp);
		fclose(fp);
	}
}

TEST(corrupt_file_fails_cleanly)
{
	char *dir = t_tmpdir();
	char *path = xasprintf("%s/db.sqlite3", dir);
	unsigned char junk[8192];
	for (size_t i = 0; i < sizeof junk; i++)
		junk[i] = (unsigned char)rand_below(256);
	write_file(path, junk, sizeof junk);
	struct state *s = NULL;
	char *err = NULL;
	CHECK(state_open(dir, &s, &err) == -1);
	CHECK(s == NULL);
	REQUIRE(err);
	CHECK(strstr(err, path) != NULL);
	CHECK(strstr(err, "file is not a database") != NULL);
	free(err);
	err = NULL;
	CHECK(state_open_readonly(dir, &s, &err) == -1);
	CHECK(s == NULL);
	CHECK(err && strstr(err, "file is not a database"));
	free(err);
	/* The file is left alone for the operator to inspect. */
	struct stat sb;
	CHECK(stat(path, &sb) == 0 && sb.st_size == (off_t)sizeof junk);
	free(path);
	tmpdir_free(dir);
}

TEST(data_dir_that_is_a_file_fails)
{
	char *dir = t_tmpdir();
	char *file = xasprintf("%s/plain", dir);
	write_file(file, "x", 1);
	struct state *s = NULL;
	char *err = NULL;
	CHECK(state_open(file, &s, &err) == -1);
	CHECK(err && strstr(err, "is not a directory"));
	free(err);
	free(file);
	tmpdir_free(dir);
}

TEST(readonly_missing_database_is_fresh_and_creates_nothing)
{
	char *dir = t_tmpdir();
	char *data = xasprintf("%s/data", dir);
	struct state *s = (struct state *)1;
	char *err = NULL;
	CHECK(state_open_readonly(data, &s, &err) == 0);
	CHECK(s == NULL);
	CHECK(!exists(data));
	struct state_function_info *fs = (void *)1;
	size_t n = 9;
	CHECK(state_list_functions(NULL, &fs, &n, &err) == 0);
	CHECK(fs == NULL && n == 0);
	struct state_function_info *f = (void *)1;
	CHECK(state_get_function(NULL, "x", &f, &err) == 0);
	CHECK(f == NULL);
	struct state_stats st;
	CHECK(state_read_stats(NULL, &st, &err) == 0);
	CHECK_INT(st.events_processed, 0);
	CHECK_STR(st.updated_at, "");

	/* An empty file (no tables) is fresh as well, and is not written. */
	mkdir(data, 0700);
	char *path = xasprintf("%s/db.sqlite3", data);
	write_file(path, "", 0);
	CHECK(state_open_readonly(data, &s, &err) == 0);
	CHECK(s == NULL);
	struct stat sb;
	CHECK(stat(path, &sb) == 0 && sb.st_size == 0);
	free(err);
	free(path);
	free(data);
	tmpdir_free(dir);
}

TEST(readonly_reads_what_the_writer_wrote)
{
	char *dir = t_tmpdir();
	struct state *w = open_or_die(dir);
	REQUIRE(w);
	CHECK(state_put_pending(w, &welcome_fn, NOW, NULL) == 0);
	struct state *r = NULL;
	char *err = NULL;
	CHECK(state_open_readonly(dir, &r, &err) == 0);
	REQUIRE(r);
	struct state_function_info *fs;
	size_t n;
	CHECK(state_list_functions(r, &fs, &n, &err) == 0);
	CHECK_INT(n, 1);
	state_function_infos_free(fs, n);
	/* The writer keeps writing while the reader is open (WAL). */
	CHECK(state_put_pending(w, &user_fn, NOW, &err) == 0);
	CHECK(state_list_functions(r, &fs, &n, &err) == 0);
	CHECK_INT(n, 2);
	state_function_infos_free(fs, n);
	state_close(r);
	state_close(w);
	free(err);
	tmpdir_free(dir);
}

/* The reconciler and the stats flush thread share one handle. */
static void *flush_loop(void *arg)
{
	struct state *s = arg;
	long failures = 0;
	for (int i = 0; i < 200; i++) {
		struct state_stats g = {0};
		g.events_processed = i;
		struct state_function_stats fs[] = {{"user-events-python", {i, i, 0, 0, 0}}};
		failures += state_write_stats(s, &g, fs, 1, NULL, 0, NOW + i, NULL) < 0;
	}
	return (void *)failures;
}

static void *reconcile_loop(void *arg)
{
	struct state *s = arg;
	long failures = 0;
	for (int i = 0; i < 200; i++) {
		failures += state_put_pending(s, &welcome_fn, NOW + i, NULL) < 0;
		failures += state_mark_ready(s, "welcome-email-node", &welcome_fn, "img", "fp",
					     NOW + i, NOW + i, NULL) < 0;
		failures += state_record_reconcile(s, "welcome-email-node", i % 2, "x", NOW + i,
						   NULL) < 0;
	}
	return (void *)failures;
}

TEST(one_handle_shared_by_two_threads)
{
	char *dir = t_tmpdir();
	struct state *s = open_or_die(dir);
	REQUIRE(s);
	pthread_t a, b;
	void *ra, *rb;
	REQUIRE(pthread_create(&a, NULL, flush_loop, s) == 0);
	REQUIRE(pthread_create(&b, NULL, reconcile_loop, s) == 0);
	pthread_join(a, &ra);
	pthread_join(b, &rb);
	CHECK_INT((long)ra, 0);
	CHECK_INT((long)rb, 0);
	struct state_stats st;
	CHECK(state_read_stats(s, &st, NULL) == 0);
	CHECK_INT(st.events_processed, 199);
	state_close(s);
	tmpdir_free(dir);
}

/* ---- formatting ---- */

TEST(age_table)
{
	static const struct {
		int64_t delta;
		const char *want;
	} cases[] = {
		{0, "0s ago"},
		{1, "1s ago"},
		{12, "12s ago"},
		{59, "59s ago"},
		{60, "1m ago"},
		{3 * 60 + 59, "3m ago"},
		{3599, "59m ago"},
		{3600, "1h ago"},
		{2 * 3600 + 1799, "2h ago"},
		{86399, "23h ago"},
		{86400, "1d ago"},
		{5 * 86400 + 7, "5d ago"},
		{30 * 86400 - 1, "29d ago"},
		{30 * 86400, "2026-08-09"},
		{400 * 86400, "2025-08-04"},
		{-5, "0s ago"}, /* clock skew */
		{-40 * 86400, "2026-10-18"},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		char out[RENDER_AGE_MAX];
		CHECK_STR(render_age(NOW - cases[i].delta, NOW, out), cases[i].want);
	}
}

TEST(time_format_and_parse)
{
	char out[STATE_TIME_MAX];
	CHECK_STR(state_format_time(NOW, out), "2026-09-08T12:00:12Z");
	CHECK_STR(state_format_time(0, out), "1970-01-01T00:00:00Z");
	static const struct {
		const char *in;
		int ok;
		int64_t want;
	} cases[] = {
		{"2026-09-08T12:00:12Z", 1, NOW},
		{"2026-09-08T12:00:12.123456Z", 1, NOW},
		{"2026-09-08T14:00:12+02:00", 1, NOW},
		{"2026-09-08T09:30:12-02:30", 1, NOW},
		{"2026-09-08 12:00:12", 1, NOW},
		{"2026-09-08t12:00:12z", 1, NOW},
		{"2026-09-08", 0, 0},
		{"2026-13-08T12:00:12Z", 0, 0},
		{"2026-09-08T12:00:12", 1, NOW},
		{"2026-09-08T12:00:12Zjunk", 0, 0},
		{"2026-09-08T12:00:12.Z", 0, 0},
		{"yesterday", 0, 0},
		{"", 0, 0},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		int64_t t = -1;
		int rc = state_parse_time(cases[i].in, &t);
		if (cases[i].ok) {
			CHECK_INT(rc, 0);
			CHECK_INT(t, cases[i].want);
		} else if (rc != -1) {
			T_FAIL_("%s: parsed, want an error", cases[i].in);
		}
	}
}

/* Writes the spec's example state into dir; returns the open writer. */
static struct state *spec_example(const char *dir)
{
	struct state *s = open_or_die(dir);
	if (!s)
		return NULL;
	char *err = NULL;
	if (state_mark_ready(s, "user-events-python", &user_fn, "relay-fn-user-events-python", FP,
			     NOW - 12, NOW - 12, &err) < 0 ||
	    state_mark_ready(s, "welcome-email-node", &welcome_fn, "relay-fn-welcome-email-node",
			     FP, NOW - 12, NOW - 12, &err) < 0) {
		printf("  %s\n", err);
		free(err);
		state_close(s);
		return NULL;
	}
	return s;
}

static char *render_ls(struct state *s, int64_t now)
{
	struct state_function_info *fs = NULL;
	size_t n = 0;
	struct buf b;
	buf_init(&b, 1 << 20);
	buf_append(&b, "", 0);
	if (state_list_functions(s, &fs, &n, NULL) == 0)
		render_state_ls(&b, fs, n, now);
	state_function_infos_free(fs, n);
	return buf_steal(&b);
}

static char *render_inspect(struct state *s, const char *name, int64_t now)
{
	struct state_function_info *f = get(s, name);
	struct buf b;
	buf_init(&b, 1 << 20);
	buf_append(&b, "", 0);
	if (f)
		render_state_inspect(&b, f, now, describe_stub);
	state_function_info_free(f);
	return buf_steal(&b);
}

/* match_arrays reaches inspect: a line (and "elements" in --json) only
 * under elements; "values" in --json otherwise; rewritten with each
 * definition written, removed with the function; a file written before function_options
 * existed reads as values. */
TEST(match_arrays_round_trip_and_inspect)
{
	char *dir = t_tmpdir();
	struct state *s = open_or_die(dir);
	REQUIRE(s);
	struct state_function fn = welcome_fn;
	fn.match_arrays_elements = true;
	CHECK(state_put_pending(s, &fn, NOW, NULL) == 0);
	CHECK(state_mark_ready(s, fn.name, &fn, "img", "fp", NOW, NOW, NULL) == 0);
	char *got = render_inspect(s, fn.name, NOW);
	CHECK(strstr(got, "Last reconcile:    success (0s ago)\n"
			  "Match arrays:      elements\n"
			  "\n"
			  "Events:\n") != NULL);
	free(got);
	struct state_function_info *f = get(s, fn.name);
	REQUIRE(f);
	CHECK(f->match_arrays_elements);
	json_t *j = render_state_json_inspect(f, NULL);
	CHECK_STR(json_string_value(json_object_get(j, "match_arrays")), "elements");
	json_decref(j);
	state_function_info_free(f);

	fn.match_arrays_elements = false; /* the template changed back, and was prepared */
	CHECK(state_mark_ready(s, fn.name, &fn, "img2", "fp2", NOW, NOW, NULL) == 0);
	got = render_inspect(s, fn.name, NOW);
	CHECK(strstr(got, "Match arrays") == NULL);
	free(got);
	f = get(s, fn.name);
	REQUIRE(f);
	CHECK(!f->match_arrays_elements);
	j = render_state_json_inspect(f, NULL);
	CHECK_STR(json_string_value(json_object_get(j, "match_arrays")), "values");
	json_decref(j);
	state_function_info_free(f);
	CHECK_INT(count_rows(dir, "SELECT count(*) FROM function_options"), 1);
	CHECK(state_remove_function(s, fn.name, NULL) == 0);
	CHECK_INT(count_rows(dir, "SELECT count(*) FROM function_options"), 0);

	/* a version-2 file from before the table: read as values */
	fn.match_arrays_elements = true;
	CHECK(state_put_pending(s, &fn, NOW, NULL) == 0);
	state_close(s);
	char *path = xasprintf("%s/db.sqlite3", dir);
	sqlite3 *db;
	REQUIRE(sqlite3_open(path, &db) == SQLITE_OK);
	REQUIRE(sqlite3_exec(db, "DROP TABLE function_options", NULL, NULL, NULL) == SQLITE_OK);
	sqlite3_close(db);
	struct state *r = NULL;
	CHECK(state_open_readonly(dir, &r, NULL) == 0);
	REQUIRE(r);
	f = get(r, fn.name);
	REQUIRE(f);
	CHECK(!f->match_arrays_elements);
	state_function_info_free(f);
	state_close(r);
	/* and the writer creates the table again */
	s = open_or_die(dir);
	REQUIRE(s);
	CHECK(state_put_pending(s, &fn, NOW, NULL) == 0);
	CHECK_INT(
		count_rows(dir,
			   "SELECT count(*) FROM function_options WHERE match_arrays = 'elements'"),
		1);
	state_close(s);
	free(path);
	tmpdir_free(dir);
}

TEST(render_ls_matches_the_spec)
{
	char *dir = t_tmpdir();
	struct state *s = spec_example(dir);
	REQUIRE(s);
	char *got = render_ls(s, NOW);
	CHECK_TEXT(got, "NAME                  RUNTIME      STATUS    HANDLERS   UPDATED\n"
			"user-events-python    python3.14   ready     3          12s ago\n"
			"welcome-email-node    node24       ready     1          12s ago\n");
	free(got);

	/* Pending rows use updated_at; long names widen the column (padding 3). */
	static const struct state_function longer = {
		"a-much-longer-function-name", "node24", NULL, 0, NULL, 0, NULL, 0, NULL, 0, false};
	CHECK(state_put_pending(s, &longer, NOW - 7200, NULL) == 0);
	got = render_ls(s, NOW + 40 * 86400);
	CHECK_TEXT(got,
		   "NAME                          RUNTIME      STATUS    HANDLERS   UPDATED\n"
		   "a-much-longer-function-name   node24       pending   0          2026-09-08\n"
		   "user-events-python            python3.14   ready     3          2026-09-08\n"
		   "welcome-email-node            node24       ready     1          2026-09-08\n");
	free(got);
	state_close(s);

	/* An empty list is the header alone. */
	struct buf b;
	buf_init(&b, 4096);
	render_state_ls(&b, NULL, 0, NOW);
	CHECK_TEXT(b.data, "NAME                  RUNTIME      STATUS    HANDLERS   UPDATED\n");
	buf_free(&b);
	tmpdir_free(dir);
}

TEST(render_inspect_matches_the_spec)
{
	char *dir = t_tmpdir();
	struct state *s = spec_example(dir);
	REQUIRE(s);
	struct state_function_stats fs[] = {{"user-events-python", {12493, 12470, 23, 17, 2}}};
	struct state_stats g = {0};
	CHECK(state_write_stats(s, &g, fs, 1, NULL, 0, NOW, NULL) == 0);
	CHECK(state_record_reconcile(s, "user-events-python", false,
				     "events[1].timeout: 6m exceeds the maximum of 5m",
				     NOW - 3 * 60, NULL) == 0);
	char *got = render_inspect(s, "user-events-python", NOW);
	CHECK_TEXT(got, "Name:              user-events-python\n"
			"Runtime:           python3.14\n"
			"Status:            ready\n"
			"Image:             relay-fn-user-events-python\n"
			"Fingerprint:       " FP "\n"
			"Prepared:          2026-09-08T12:00:00Z (12s ago)\n"
			"Last reconcile:    failed (3m ago)\n"
			"Last error:        events[1].timeout: 6m exceeds the maximum of 5m\n"
			"\n"
			"Events:\n"
			"  events.created.handler   timeout=6s\n"
			"  events.updated.handler   timeout=20s\n"
			"  events.deleted.handler   timeout=6s\n"
			"\n"
			"Schedules:\n"
			"  jobs.cleanup.handler                  cron=\"0 3 * * *\" (At 03:00) "
			"timezone=UTC\n"
			"  jobs.report.handler                   cron=\"0 8 * * 1-5\" (At 08:00, "
			"Monday through Friday) timezone=Europe/Rome timeout=20s\n"
			"\n"
			"Stats:\n"
			"  Events processed:    12493\n"
			"  Handler successes:   12470\n"
			"  Handler failures:    23\n"
			"  Retries:             17\n"
			"  DLQ entries:         2\n"
			"\n"
			"Environment:\n"
			"  API_URL=https://api.example.com\n"
			"\n"
			"Secrets:\n"
			"  DATABASE_URL=database-url\n");
	free(got);

	got = render_inspect(s, "welcome-email-node", NOW);
	CHECK_TEXT(got, "Name:              welcome-email-node\n"
			"Runtime:           node24\n"
			"Status:            ready\n"
			"Image:             relay-fn-welcome-email-node\n"
			"Fingerprint:       " FP "\n"
			"Prepared:          2026-09-08T12:00:00Z (12s ago)\n"
			"Last reconcile:    success (12s ago)\n"
			"\n"
			"Events:\n"
			"  welcome.send   timeout=6s\n"
			"\n"
			"Stats:\n"
			"  Events processed:    0\n"
			"  Handler successes:   0\n"
			"  Handler failures:    0\n"
			"  Retries:             0\n"
			"  DLQ entries:         0\n");
	free(got);

	/* Pending, cron-only, no description, never reconciled. */
	static const struct state_schedule cron_only[] = {
		{"jobs.tick.handler", "*/7 1,3 * * *", "UTC", 90 * NS_PER_SEC}};
	static const struct state_function pending = {"cron-only", "node24", NULL, 0, cron_only, 1,
						      NULL,	   0,	     NULL, 0, false};
	CHECK(state_put_pending(s, &pending, NOW - 60, NULL) == 0);
	got = render_inspect(s, "cron-only", NOW);
	CHECK_TEXT(got, "Name:              cron-only\n"
			"Runtime:           node24\n"
			"Status:            pending\n"
			"Last reconcile:    never\n"
			"\n"
			"Schedules:\n"
			"  jobs.tick.handler                     cron=\"*/7 1,3 * * *\" "
			"timezone=UTC timeout=1m30s\n"
			"\n"
			"Stats:\n"
			"  Events processed:    0\n"
			"  Handler successes:   0\n"
			"  Handler failures:    0\n"
			"  Retries:             0\n"
			"  DLQ entries:         0\n");
	free(got);
	state_close(s);
	tmpdir_free(dir);
}

/* text with block inserted before its "\nStats:\n" (malloc'd). */
static char *before_stats(const char *text, const char *block)
{
	const char *at = strstr(text, "\nStats:\n");
	if (!at)
		return xstrdup("(no Stats section)");
	return xasprintf("%.*s%s%s", (int)(at - text), text, block, at);
}

/* With standby rows the Standby section follows Schedules (handlers in the
 * order written, counts aligned as Events) and nothing else changes:
 * without rows the output is exactly the spec's (the test above). */
TEST(render_inspect_standby_section)
{
	char *dir = t_tmpdir();
	struct state *s = spec_example(dir);
	REQUIRE(s);
	struct state_function_stats fs[] = {{"user-events-python", {12493, 12470, 23, 17, 2}}};
	struct state_stats g = {0};
	CHECK(state_write_stats(s, &g, fs, 1, user_standby, 6, NOW, NULL) == 0);
	char *user = render_inspect(s, "user-events-python", NOW);
	char *welcome = render_inspect(s, "welcome-email-node", NOW);
	CHECK(state_write_stats(s, &g, fs, 1, NULL, 0, NOW, NULL) == 0); /* standby off */
	char *user_off = render_inspect(s, "user-events-python", NOW);
	char *welcome_off = render_inspect(s, "welcome-email-node", NOW);
	CHECK(strstr(user_off, "Standby") == NULL && strstr(welcome_off, "Standby") == NULL);

	char *want = before_stats(user_off, "\n"
					    "Standby:\n"
					    "  events.created.handler   1\n"
					    "  events.updated.handler   0\n"
					    "  events.deleted.handler   2\n"
					    "  jobs.cleanup.handler     0\n"
					    "  jobs.report.handler      0\n");
	CHECK_TEXT(user, want);
	CHECK(strstr(user, "timezone=Europe/Rome timeout=20s\n\nStandby:\n") != NULL);
	free(want);
	want = before_stats(welcome_off, "\n"
					 "Standby:\n"
					 "  welcome.send   3\n");
	CHECK_TEXT(welcome, want);
	CHECK(strstr(welcome, "  welcome.send   timeout=6s\n\nStandby:\n") != NULL);
	free(want);
	free(user);
	free(welcome);
	free(user_off);
	free(welcome_off);
	state_close(s);
	tmpdir_free(dir);
}

TEST(render_stats_matches_the_spec)
{
	struct state_stats st = {
		152934, 152934, 152801, 133, 82, 4, 17, 134, "2026-09-08T12:00:02Z"};
	struct buf b;
	buf_init(&b, 4096);
	render_state_stats(&b, &st, NOW);
	CHECK_TEXT(b.data, "Events processed:    152934\n"
			   "Handler successes:   152801\n"
			   "Handler failures:    133\n"
			   "Retries:             82\n"
			   "DLQ entries:         4\n"
			   "Pending entries:     17\n"
			   "Oldest pending age:  2m14s\n"
			   "Updated:             10s ago\n");
	buf_reset(&b);
	struct state_stats zero = {0};
	render_state_stats(&b, &zero, NOW);
	CHECK_TEXT(b.data, "Events processed:    0\n"
			   "Handler successes:   0\n"
			   "Handler failures:    0\n"
			   "Retries:             0\n"
			   "DLQ entries:         0\n"
			   "Pending entries:     0\n"
			   "Oldest pending age:  0s\n"
			   "Updated:             never\n");
	buf_reset(&b);
	struct state_stats hours = {0};
	hours.oldest_pending_age_seconds = 3 * 3600 + 5;
	snprintf_(hours.updated_at, sizeof hours.updated_at, "%s", "2026-09-08T09:00:12Z");
	render_state_stats(&b, &hours, NOW);
	CHECK(strstr(b.data, "Oldest pending age:  3h0m5s\nUpdated:             3h ago\n") != NULL);
	buf_free(&b);
}

T_MAIN(T_CASE(schema_has_exactly_the_spec_columns), T_CASE(match_arrays_round_trip_and_inspect),
       T_CASE(other_schema_version_is_recreated), T_CASE(version_1_file_reads_without_standby),
       T_CASE(standby_rows_round_trip), T_CASE(render_inspect_standby_section),
       T_CASE(pending_ready_failed_keeps_the_active_version),
       T_CASE(never_built_function_fails_and_stays_pending),
       T_CASE(remove_function_removes_its_rows),
       T_CASE(refused_function_writes_are_kept_and_written_later),
       T_CASE(replace_all_sets_exactly_the_loaded_set), T_CASE(stats_snapshot_round_trip),
       T_CASE(corrupt_file_fails_cleanly), T_CASE(data_dir_that_is_a_file_fails),
       T_CASE(readonly_missing_database_is_fresh_and_creates_nothing),
       T_CASE(readonly_reads_what_the_writer_wrote), T_CASE(one_handle_shared_by_two_threads),
       T_CASE(age_table), T_CASE(time_format_and_parse), T_CASE(render_ls_matches_the_spec),
       T_CASE(render_inspect_matches_the_spec), T_CASE(render_stats_matches_the_spec))
