/* The stats flush (statsflush.h): the metrics registry's absolute values
 * into the state database's stats and function_stats rows (served
 * functions only, counters and gauges clamped to what a column holds), the
 * DEBUG line, the standby rows from a fake pool count (directly and
 * through the setter), the thread's periodic and final flush, a failing write
 * logged once until it recovers, and a stop that waits no longer than its
 * timeout. A SQLite file in a temporary directory; no Redis. */
#include <math.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <unistd.h>

#include "base/log.h"
#include "engine/metrics.h"
#include "engine/registry.h"
#include "engine/state.h"
#include "engine/statsflush.h"
#include "t.h"
#include "tfiles.h"
#include "base/util.h"

#define MS (1000000LL)

static char *dir;
static struct state *st;
static sqlite3 *peek; /* a second connection, to read and to get in the way */

static void open_db(void)
{
	char *err = NULL;
	dir = t_tmpdir();
	if (state_open(dir, &st, &err) < 0) {
		printf("  state_open: %s\n", err);
		exit(1);
	}
	char *path = xasprintf("%s/%s", dir, STATE_DB_FILE);
	if (sqlite3_open(path, &peek) != SQLITE_OK)
		exit(1);
	sqlite3_busy_timeout(peek, 5000);
	free(path);
}

static void close_db(void)
{
	sqlite3_close(peek);
	state_close(st);
	t_rmtree(dir);
	free(dir);
}

/* The rows of a query, one "a|b|c" line each (malloc'd). */
static char *rows(const char *sql)
{
	sqlite3_stmt *q;
	struct buf b;
	buf_init(&b, 1 << 16);
	if (sqlite3_prepare_v2(peek, sql, -1, &q, NULL) != SQLITE_OK) {
		buf_appendf(&b, "error: %s", sqlite3_errmsg(peek));
		return buf_steal(&b);
	}
	while (sqlite3_step(q) == SQLITE_ROW) {
		for (int i = 0; i < sqlite3_column_count(q); i++) {
			const unsigned char *v = sqlite3_column_text(q, i);
			buf_appendf(&b, "%s%s", i ? "|" : "", v ? (const char *)v : "NULL");
		}
		buf_append(&b, "\n", 1);
	}
	sqlite3_finalize(q);
	return buf_steal(&b);
}

#define STATS_SQL                                                                              \
	"SELECT events_received, events_processed, handler_success, handler_failure, retries," \
	" dlq_entries, pending_entries, oldest_pending_age_seconds FROM stats"
#define FSTATS_SQL                                                                      \
	"SELECT function_name, events, successes, failures, retries, dlq_entries FROM " \
	"function_stats ORDER BY function_name"

#define CHECK_ROWS(sql, want)            \
	do {                             \
		char *got_ = rows(sql);  \
		CHECK_STR(got_, (want)); \
		free(got_);              \
	} while (0)

/* Polls the query every 20 ms until it reads want, for up to 5 s. */
static bool rows_become(const char *sql, const char *want)
{
	int64_t until = now_mono_ns() + 5000 * MS;
	for (;;) {
		char *got = rows(sql);
		bool same = strcmp(got, want) == 0;
		free(got);
		if (same || now_mono_ns() > until)
			return same;
		usleep(20 * 1000);
	}
}

/* alpha: 2 successes, 1 failure, 1 event, 1 retry; bravo: 1 success, 1
 * dead letter; 7 events received, 2 processed; two backlog gauges. */
static void some_traffic(void)
{
	metrics_reset_for_tests();
	metrics_add(METRIC_EVENTS_RECEIVED, 7);
	metrics_add(METRIC_EVENTS_PROCESSED, 2);
	metrics_handler_invocation("alpha", "m.h", METRIC_OUTCOME_SUCCESS, 0.1);
	metrics_handler_invocation("alpha", "m.h", METRIC_OUTCOME_SUCCESS, 0.1);
	metrics_handler_invocation("alpha", "m.g", METRIC_OUTCOME_TIMEOUT, 6);
	metrics_handler_invocation("bravo", "m.h", METRIC_OUTCOME_SUCCESS, 0.2);
	metrics_function_event("alpha");
	metrics_function_retry("alpha");
	metrics_function_dlq("bravo");
	metrics_gauge_set(METRIC_PENDING_ENTRIES, 12.7);
	metrics_gauge_set(METRIC_PENDING_OLDEST_AGE, 3.2);
}

TEST(once_writes_absolute_values)
{
	open_db();
	some_traffic();
	char *err = NULL;
	REQUIRE(statsflush_once(st, NULL, NULL, NULL, &err) == 0);
	CHECK_ROWS(STATS_SQL, "7|2|3|1|1|1|12|3\n");
	CHECK_ROWS(FSTATS_SQL, "alpha|1|2|1|1|0\nbravo|0|1|0|0|1\n");
	CHECK_ROWS("SELECT count(*) FROM stats WHERE updated_at LIKE '20%Z'", "1\n");
	/* absolute, not added: a second flush writes the same values */
	REQUIRE(statsflush_once(st, NULL, NULL, NULL, &err) == 0);
	CHECK_ROWS(STATS_SQL, "7|2|3|1|1|1|12|3\n");
	CHECK_ROWS(FSTATS_SQL, "alpha|1|2|1|1|0\nbravo|0|1|0|0|1\n");
	metrics_inc(METRIC_EVENTS_RECEIVED);
	metrics_function_dlq("alpha");
	REQUIRE(statsflush_once(st, NULL, NULL, NULL, &err) == 0);
	CHECK_ROWS(STATS_SQL, "8|2|3|1|1|2|12|3\n");
	CHECK_ROWS(FSTATS_SQL, "alpha|1|2|1|1|1\nbravo|0|1|0|0|1\n");
	close_db();
}

/* A served function of template tpl, in memory. */
static struct fn_version *served_with(const char *name, const char *tpl)
{
	struct strlist errors = {0}, warnings = {0};
	struct function *f = xcalloc(1, sizeof *f);
	f->name = xstrdup(name);
	f->dir = xstrdup(name);
	if (template_parse(tpl, strlen(tpl), &f->tpl, &errors, &warnings) < 0)
		abort();
	strlist_free(&errors);
	strlist_free(&warnings);
	return registry_fn_version_new(f, NULL, NULL);
}

/* A served function: one rule, in memory. */
static struct fn_version *served(const char *name)
{
	return served_with(
		name, "runtime: python3.14\nevents:\n  - handler: m.h\n    pattern: {a: [1]}\n");
}

/* Rows only for the functions of the registry's current snapshot: a
 * removed function's series lives on in metrics, not in the database. */
TEST(rows_for_served_functions_only)
{
	open_db();
	some_traffic();
	struct registry *reg = registry_new();
	char *err = NULL;
	REQUIRE(statsflush_once(st, reg, NULL, NULL, &err) == 0); /* nothing served yet */
	CHECK_ROWS(FSTATS_SQL, "");
	CHECK_ROWS(STATS_SQL, "7|2|3|1|1|1|12|3\n");
	struct fn_version **fvs = xcalloc(2, sizeof *fvs);
	fvs[0] = served("bravo");
	fvs[1] = served("charlie"); /* served, never counted: no row */
	registry_publish(reg, fvs, 2);
	REQUIRE(statsflush_once(st, reg, NULL, NULL, &err) == 0);
	CHECK_ROWS(FSTATS_SQL, "bravo|0|1|0|0|1\n");
	/* registered (metrics_function_register) and served: a row of zeros */
	metrics_function_register("charlie");
	REQUIRE(statsflush_once(st, reg, NULL, NULL, &err) == 0);
	CHECK_ROWS(FSTATS_SQL, "bravo|0|1|0|0|1\ncharlie|0|0|0|0|0\n");
	registry_free(reg);
	close_db();
}

/* ---- standby rows ---- */

#define STANDBY_SQL                                                                           \
	"SELECT function_name, handler, containers FROM standby WHERE updated_at LIKE '20%Z'" \
	" ORDER BY rowid"

/* The fake pool: a fixed count per (function, handler), and how often it
 * was asked. */
struct fake_pool {
	atomic_int calls;
	const char *tag; /* what ctx the flush passes back */
};

static int fake_count(void *ctx, const char *function, const char *handler)
{
	struct fake_pool *p = ctx;
	atomic_fetch_add(&p->calls, 1);
	if (strcmp(p->tag, "pool") != 0)
		return 99; /* not our ctx */
	if (strcmp(function, "alpha") == 0 && strcmp(handler, "m.h") == 0)
		return 2;
	if (strcmp(function, "alpha") == 0 && strcmp(handler, "j.c") == 0)
		return 1;
	if (strcmp(function, "bravo") == 0)
		return -1; /* clamped */
	return 0;
}

/* alpha: rules m.h, m.g, m.h and schedules j.c, m.g; bravo: rule m.h. */
static struct registry *two_functions(void)
{
	struct registry *reg = registry_new();
	struct fn_version **fvs = xcalloc(2, sizeof *fvs);
	fvs[0] = served("bravo");
	fvs[1] = served_with("alpha", "runtime: python3.14\nevents:\n"
				      "  - handler: m.h\n    pattern: {a: [1]}\n"
				      "  - handler: m.g\n    pattern: {a: [2]}\n"
				      "  - handler: m.h\n    pattern: {a: [3]}\n"
				      "schedules:\n"
				      "  - handler: j.c\n    cron: \"0 3 * * *\"\n"
				      "  - handler: m.g\n    cron: \"0 4 * * *\"\n");
	registry_publish(reg, fvs, 2);
	return reg;
}

/* One row per distinct handler of each served function (rules, then
 * schedules, in template order), with the pool's count; none with standby
 * off or without a registry. */
TEST(standby_rows_from_the_pool_count)
{
	open_db();
	some_traffic();
	struct registry *reg = two_functions();
	struct fake_pool pool = {0, "pool"};
	char *err = NULL;
	REQUIRE(statsflush_once(st, reg, fake_count, &pool, &err) == 0);
	CHECK_ROWS(STANDBY_SQL, "alpha|m.h|2\nalpha|m.g|0\nalpha|j.c|1\nbravo|m.h|0\n");
	CHECK_INT(atomic_load(&pool.calls), 4);
	CHECK_ROWS(STATS_SQL, "7|2|3|1|1|1|12|3\n"); /* the rest as before */
	CHECK_ROWS(FSTATS_SQL, "alpha|1|2|1|1|0\nbravo|0|1|0|0|1\n");

	REQUIRE(statsflush_once(st, reg, NULL, NULL, &err) == 0); /* standby off */
	CHECK_ROWS(STANDBY_SQL, "");
	REQUIRE(statsflush_once(st, reg, fake_count, &pool, &err) == 0);
	REQUIRE(statsflush_once(st, NULL, fake_count, &pool, &err) == 0); /* no registry */
	CHECK_ROWS(STANDBY_SQL, "");
	registry_free(reg);
	close_db();
}

/* The thread counts through the setter; once clearing returns the count is
 * never called again (the pool may be freed), and the rows are emptied. */
TEST(set_standby_reaches_the_thread)
{
	open_db();
	some_traffic();
	struct registry *reg = two_functions();
	struct fake_pool pool = {0, "pool"};
	struct statsflush *sf = statsflush_start(st, reg, 20 * MS);
	CHECK(rows_become(STATS_SQL, "7|2|3|1|1|1|12|3\n"));
	CHECK_ROWS(STANDBY_SQL, "");
	statsflush_set_standby(sf, fake_count, &pool);
	CHECK(rows_become(STANDBY_SQL, "alpha|m.h|2\nalpha|m.g|0\nalpha|j.c|1\nbravo|m.h|0\n"));
	statsflush_set_standby(sf, NULL, &pool);
	int calls = atomic_load(&pool.calls);
	CHECK(calls >= 4);
	CHECK(rows_become(STANDBY_SQL, ""));
	usleep(100 * 1000); /* a few more flushes */
	CHECK_INT(atomic_load(&pool.calls), calls);
	CHECK_INT(statsflush_stop(sf, 5000), 0);
	CHECK_INT(atomic_load(&pool.calls), calls); /* the final flush neither */
	CHECK_ROWS(STANDBY_SQL, "");
	statsflush_free(sf);
	statsflush_set_standby(NULL, fake_count, &pool); /* NULL is fine */
	registry_free(reg);
	close_db();
}

TEST(values_clamped_to_columns)
{
	open_db();
	metrics_reset_for_tests();
	metrics_add(METRIC_EVENTS_RECEIVED, UINT64_MAX);
	metrics_add(METRIC_RETRIES, (uint64_t)INT64_MAX + 1);
	metrics_add(METRIC_DLQ_ENTRIES, (uint64_t)INT64_MAX);
	metrics_gauge_set(METRIC_PENDING_ENTRIES, -5);
	metrics_gauge_set(METRIC_PENDING_OLDEST_AGE, NAN);
	char *err = NULL;
	REQUIRE(statsflush_once(st, NULL, NULL, NULL, &err) == 0);
	CHECK_ROWS(STATS_SQL, "9223372036854775807|0|0|0|9223372036854775807|"
			      "9223372036854775807|0|0\n");
	metrics_gauge_set(METRIC_PENDING_ENTRIES, 1e30);
	metrics_gauge_set(METRIC_PENDING_OLDEST_AGE, 0.999);
	REQUIRE(statsflush_once(st, NULL, NULL, NULL, &err) == 0);
	CHECK_ROWS("SELECT pending_entries, oldest_pending_age_seconds FROM stats",
		   "9223372036854775807|0\n");
	close_db();
}

/* Without a database only the DEBUG line is produced (and only at DEBUG). */
TEST(debug_line_without_a_database)
{
	some_traffic();
	metrics_gauge_set(METRIC_BUFFERED_EVENTS, 4);
	metrics_gauge_set(METRIC_IN_FLIGHT, 2);
	t_capture_logs();
	char *err = NULL;
	CHECK_INT(statsflush_once(NULL, NULL, NULL, NULL, &err), 0);
	log_set_level(LOG_DEBUG);
	CHECK_INT(statsflush_once(NULL, NULL, NULL, NULL, &err), 0);
	log_set_level(LOG_INFO);
	char *logs = t_captured_logs();
	t_release_logs();
	CHECK_INT(t_count(logs, "periodic metrics snapshot"), 1); /* at DEBUG only */
	CHECK(strstr(logs, "level=DEBUG msg=\"periodic metrics snapshot\" events_received=7 "
			   "events_processed=2 handler_successes=3 handler_failures=1 retries=1 "
			   "dlq_entries=1 pending_entries=12 pending_oldest_age_seconds=3 "
			   "buffered_events=4 in_flight_invocations=2 functions=2\n") != NULL);
	if (t_failed_)
		printf("%s", logs);
	free(logs);
}

/* The thread flushes every interval, and once more when stopped: a value
 * counted just before the stop is in the database after it, even with an
 * interval that never came round. */
TEST(thread_flushes_periodically_and_at_stop)
{
	open_db();
	some_traffic();
	struct statsflush *sf = statsflush_start(st, NULL, 50 * MS);
	CHECK(rows_become(STATS_SQL, "7|2|3|1|1|1|12|3\n"));
	metrics_inc(METRIC_EVENTS_PROCESSED);
	CHECK(rows_become(STATS_SQL, "7|3|3|1|1|1|12|3\n"));
	CHECK_INT(statsflush_stop(sf, 5000), 0);
	statsflush_free(sf);

	sf = statsflush_start(st, NULL, 3600LL * 1000 * MS);
	usleep(50 * 1000);
	metrics_add(METRIC_EVENTS_RECEIVED, 100);
	int64_t t0 = now_mono_ns();
	CHECK_INT(statsflush_stop(sf, 5000), 0);
	CHECK(now_mono_ns() - t0 < 2000 * MS); /* woken, not waiting out the hour */
	statsflush_free(sf);
	CHECK_ROWS(STATS_SQL, "107|3|3|1|1|1|12|3\n");

	/* Stopped at once, usually before the thread first takes its lock:
	 * the final flush still happens (it was skipped then). */
	for (int i = 0; i < 20; i++) {
		sf = statsflush_start(st, NULL, 3600LL * 1000 * MS);
		metrics_add(METRIC_EVENTS_RECEIVED, 1);
		CHECK_INT(statsflush_stop(sf, 5000), 0);
		statsflush_free(sf);
	}
	CHECK_ROWS(STATS_SQL, "127|3|3|1|1|1|12|3\n");
	close_db();
	CHECK_INT(statsflush_stop(NULL, 0), 0);
	statsflush_free(NULL);
}

#define WRITE_FAILED "level=WARN msg=\"state database: cannot write the stats snapshot; retrying"
#define WRITE_BACK "level=INFO msg=\"state database: stats snapshot written again\""

/* A failing write is one WARN however often it fails, never fatal; the
 * first success after it is one INFO. */
TEST(write_failure_logged_once_until_it_recovers)
{
	open_db();
	some_traffic();
	t_capture_logs();
	REQUIRE(sqlite3_exec(peek, "ALTER TABLE stats RENAME TO stats_away", NULL, NULL, NULL) ==
		SQLITE_OK);
	char *err = NULL;
	CHECK_INT(statsflush_once(st, NULL, NULL, NULL, &err), -1);
	CHECK(err && strstr(err, "stats") != NULL);
	free(err);
	struct statsflush *sf = statsflush_start(st, NULL, 30 * MS);
	usleep(400 * 1000); /* a dozen failed flushes */
	char *logs = t_captured_logs();
	CHECK_INT(t_count(logs, WRITE_FAILED), 1);
	CHECK_INT(t_count(logs, WRITE_BACK), 0);
	free(logs);
	REQUIRE(sqlite3_exec(peek, "ALTER TABLE stats_away RENAME TO stats", NULL, NULL, NULL) ==
		SQLITE_OK);
	CHECK(rows_become(STATS_SQL, "7|2|3|1|1|1|12|3\n"));
	usleep(200 * 1000);
	CHECK_INT(statsflush_stop(sf, 5000), 0);
	statsflush_free(sf);
	logs = t_captured_logs();
	t_release_logs();
	CHECK_INT(t_count(logs, WRITE_FAILED), 1);
	CHECK_INT(t_count(logs, WRITE_BACK), 1);
	if (t_failed_)
		printf("%s", logs);
	free(logs);
	close_db();
}

/* The final flush waits on a database another process holds locked (up to
 * its 2 s busy timeout): stop gives up after its own timeout and says so. */
TEST(stop_waits_no_longer_than_its_timeout)
{
	open_db();
	some_traffic();
	t_capture_logs();
	struct statsflush *sf = statsflush_start(st, NULL, 3600LL * 1000 * MS);
	usleep(50 * 1000); /* the thread is waiting for its first tick */
	REQUIRE(sqlite3_exec(peek, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK);
	int64_t t0 = now_mono_ns();
	CHECK_INT(statsflush_stop(sf, 200), -1);
	int64_t took = now_mono_ns() - t0;
	CHECK(took >= 150 * MS && took < 1500 * MS);
	sqlite3_exec(peek, "ROLLBACK", NULL, NULL, NULL);
	/* (Relay exits here; a test waits for the thread to be done) */
	CHECK_INT(statsflush_stop(sf, 10000), 0);
	statsflush_free(sf);
	char *logs = t_captured_logs();
	t_release_logs();
	CHECK(strstr(logs, "level=WARN msg=\"state database: final stats flush did not finish "
			   "in time; exiting without it\"") != NULL);
	free(logs);
	close_db();
}

T_MAIN(T_CASE(once_writes_absolute_values), T_CASE(rows_for_served_functions_only),
       T_CASE(standby_rows_from_the_pool_count), T_CASE(set_standby_reaches_the_thread),
       T_CASE(values_clamped_to_columns), T_CASE(debug_line_without_a_database),
       T_CASE(thread_flushes_periodically_and_at_stop),
       T_CASE(write_failure_logged_once_until_it_recovers),
       T_CASE(stop_waits_no_longer_than_its_timeout))
