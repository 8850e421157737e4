/*
 * The reconciler's rescan paths, in process against the real Docker daemon:
 * the periodic pass (and what it must not do: retry an unchanged failing
 * version), a change the watches cannot see (the functions directory
 * replaced behind a symlink), a real inotify queue overflow, and the
 * functions directory itself moved away, removed and recreated.
 *
 * What a user sees is asserted: the registry snapshot the consumer would
 * match against (which functions are served, on which image) and the log
 * lines. Passes are made short (reconcile_config.rescan_ns) where a test
 * needs several, and an hour long where a test must prove that inotify,
 * not a pass, found a change. Each full pass, once done, logs a DEBUG line
 * "functions directory rescanned" with its reason.
 *
 * Needs a daemon on DOCKER_HOST and the python:3.14-slim image
 * (scripts/standin-images makes a stand-in). Function names carry this
 * process id; every image built here is removed at the end of its test.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io/docker.h"
#include "engine/image.h"
#include "base/log.h"
#include "engine/reconcile.h"
#include "engine/registry.h"
#include "t.h"
#include "tfiles.h"
#include "base/util.h"

#define SEC (1000LL * 1000000LL)
#define HOUR (3600LL * SEC)

/* ---- fixture ---------------------------------------------------------- */

static char root[64];
static int pid;

/* Everything Relay logs goes to this file: each record is one write(2), so
 * a line is readable as soon as log_record returns. */
static char log_path[96];
static int log_fd = -1;

static char *captured(void)
{
	FILE *f = fopen(log_path, "r");
	struct buf b;
	buf_init(&b, 256 << 20);
	char chunk[65536];
	size_t n;
	while (f && (n = fread(chunk, 1, sizeof chunk, f)) > 0)
		if (buf_append(&b, chunk, n) < 0)
			abort();
	if (f)
		fclose(f);
	return b.data ? buf_steal(&b) : xstrdup("");
}

/* Lines of the captured log that contain a and (when not NULL) b. */
static int log_count(const char *a, const char *b)
{
	char *s = captured();
	int n = 0;
	for (char *line = s, *nl; *line; line = nl + 1) {
		nl = strchr(line, '\n');
		if (!nl)
			break;
		*nl = '\0';
		if (strstr(line, a) && (!b || strstr(line, b)))
			n++;
	}
	free(s);
	return n;
}

/* The captured log so far, on stdout, to read after a failed check. */
static void dump_log(void)
{
	char *s = captured();
	size_t len = strlen(s);
	const char *from = len > 6000 ? s + len - 6000 : s;
	printf("  --- reconciler log (last %zu bytes):\n%s", strlen(from), from);
	free(s);
}

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * SEC + ts.tv_nsec;
}

static void sh(const char *fmt, const char *a, const char *b)
{
	char *cmd = xasprintf(fmt, a, b);
	if (system(cmd) != 0) {
		printf("  command failed: %s\n", cmd);
		abort();
	}
	free(cmd);
}

/* A Python function in dir/name printing marker. */
static void pyfn(const char *dir, const char *name, const char *marker)
{
	char *d = xasprintf("%s/%s", dir, name);
	char *tpl = xasprintf("runtime: python3.14\nevents:\n  - handler: main.handler\n"
			      "    pattern: {fn: [%s]}\n",
			      name);
	char *src = xasprintf("def handler(event):\n    print(\"%s\")\n", marker);
	t_write_file(d, "template.yaml", tpl);
	t_write_file(d, "main.py", src);
	free(tpl);
	free(src);
	free(d);
}

/* A function whose template fails validation (no image is ever built). */
static void badfn(const char *dir, const char *name, const char *timeout)
{
	char *d = xasprintf("%s/%s", dir, name);
	char *tpl = xasprintf("runtime: python3.14\nevents:\n  - handler: main.handler\n"
			      "    pattern: {fn: [%s]}\n    timeout: %s\n",
			      name, timeout);
	t_write_file(d, "template.yaml", tpl);
	t_write_file(d, "main.py", "def handler(event):\n    pass\n");
	free(tpl);
	free(d);
}

/* One reconciler as relay start runs it: load on this thread, then its own. */
struct rig {
	struct registry *reg;
	struct reconciler *rc;
	struct docker *d;
	char names[4][64];
	int nnames;
};

static const char *fname(struct rig *r, const char *suffix)
{
	char *n = r->names[r->nnames++];
	snprintf_(n, 64, "rc%d-%s", pid, suffix);
	return n;
}

static int rig_new(struct rig *r, const char *dir, int64_t rescan_ns)
{
	char *err = NULL;
	r->reg = registry_new();
	if (docker_open(&r->d, &err) < 0) {
		printf("  cannot reach Docker: %s\n", err);
		free(err);
		return -1;
	}
	struct reconcile_config cfg = {
		.functions_dir = dir, .registry = r->reg, .rescan_ns = rescan_ns};
	r->rc = reconciler_new(&cfg);
	return 0;
}

static int rig_load_start(struct rig *r)
{
	char *err = NULL;
	reconciler_load(r->rc, r->d);
	struct docker *td = NULL;
	if (docker_open(&td, &err) < 0 || reconciler_start(r->rc, td, &err) < 0) {
		printf("  cannot start the reconciler: %s\n", err);
		free(err);
		return -1;
	}
	return 0;
}

static void rig_free(struct rig *r)
{
	if (r->rc && reconciler_stop(r->rc, 60000) == 0)
		reconciler_free(r->rc);
	if (r->d) {
		for (int i = 0; i < r->nnames; i++) {
			char *err = NULL;
			if (image_gc(r->d, r->names[i], NULL, 0, NULL, &err) < 0)
				printf("  note: image cleanup of %s: %s\n", r->names[i], err);
			free(err);
		}
		docker_close(r->d);
	}
	registry_free(r->reg);
	memset(r, 0, sizeof *r);
}

/* The image a function is served on ("" when it is not served). */
static void served_image(struct rig *r, const char *name, char *out, size_t outsz)
{
	struct snapshot *s = registry_acquire(r->reg);
	struct fn_version *fv = registry_snapshot_find(s, name);
	strlcpy_(out, fv ? (fv->image ? fv->image : "?") : "", outsz);
	registry_release(r->reg, s);
}

static bool served(struct rig *r, const char *name)
{
	char img[128];
	served_image(r, name, img, sizeof img);
	return img[0] != '\0';
}

static bool served_other_than(struct rig *r, const char *name, const char *image)
{
	char img[128];
	served_image(r, name, img, sizeof img);
	return img[0] && strcmp(img, image) != 0;
}

/* Polls cond every 50 ms until it holds or secs pass. */
#define WAIT_UNTIL(secs, cond)                                   \
	({                                                       \
		int64_t until_ = now_ns() + (int64_t)(secs)*SEC; \
		bool ok_;                                        \
		while (!(ok_ = (cond)) && now_ns() < until_)     \
			usleep(50 * 1000);                       \
		ok_;                                             \
	})

#define PASS_LINE "msg=\"functions directory rescanned\""

static char *test_dir(const char *what)
{
	char *d = xasprintf("%s/%s", root, what);
	sh("mkdir -p '%s'%s", d, "");
	return d;
}

static void reset_log(void)
{
	if (ftruncate(log_fd, 0) < 0)
		abort();
}

/* A fresh log, then rig_new and rig_load_start. */
static int rig_up(struct rig *r, const char *dir, int64_t rescan_ns)
{
	reset_log();
	if (rig_new(r, dir, rescan_ns) < 0)
		return -1;
	return rig_load_start(r);
}

/* The log shown when the test failed, then rig_free. */
static void rig_down(struct rig *r)
{
	if (t_failed_)
		dump_log();
	rig_free(r);
}

/* ---- tests ------------------------------------------------------------ */

/*
 * An unchanged failing version is not looked at again by
 * the periodic pass, however many passes run; a change to it is.
 */
TEST(test_failing_version_not_retried_by_passes)
{
	struct rig r = {0};
	char *dir = test_dir("noretry");
	const char *bad = fname(&r, "bad");
	badfn(dir, bad, "6m");
	REQUIRE(rig_up(&r, dir, SEC / 5) == 0);
	CHECK_INT(log_count("msg=\"invalid function skipped\"", bad), 1);

	/* Five passes (200 ms apart) have run, each looking at every function. */
	bool passes = WAIT_UNTIL(20, log_count(PASS_LINE, "reason=periodic") >= 5);
	CHECK(passes);
	CHECK_INT(log_count("msg=\"invalid function skipped\"", bad), 1);
	CHECK(!served(&r, bad));

	/* A change is looked at: another failure, logged once more. */
	badfn(dir, bad, "7m");
	CHECK(WAIT_UNTIL(10, log_count("7m exceeds the maximum of 5m", bad) == 1));
	int64_t seen = log_count(PASS_LINE, "reason=periodic");
	CHECK(WAIT_UNTIL(20, log_count(PASS_LINE, "reason=periodic") >= seen + 5));
	CHECK_INT(log_count("7m exceeds the maximum of 5m", bad), 1);
	CHECK_INT(log_count("invalid function", bad), 2);
	rig_down(&r);
	free(dir);
}

/*
 * The functions directory is a symlink that a deploy points at another
 * directory: no watch sees that. The periodic pass finds the new directory,
 * serves what it holds and watches it.
 */
TEST(test_pass_finds_directory_replaced_behind_symlink)
{
	struct rig r = {0};
	char *v1 = test_dir("flip/v1"), *v2 = test_dir("flip/v2");
	char *link = xasprintf("%s/flip/functions", root);
	const char *a = fname(&r, "flip-a"), *b = fname(&r, "flip-b");
	pyfn(v1, a, "one");
	pyfn(v2, a, "one");
	pyfn(v2, b, "two");
	REQUIRE(symlink("v1", link) == 0);
	REQUIRE(rig_up(&r, link, 2 * SEC) == 0);
	CHECK(served(&r, a));
	CHECK(!served(&r, b));
	char img_a[128];
	served_image(&r, a, img_a, sizeof img_a);

	/* The flip, atomic as deploy tools do it: a new link renamed over. */
	int64_t passes = log_count(PASS_LINE, "reason=periodic");
	char *tmp = xasprintf("%s/flip/functions.new", root);
	REQUIRE(symlink("v2", tmp) == 0);
	REQUIRE(rename(tmp, link) == 0);
	CHECK(WAIT_UNTIL(60, served(&r, b)));
	CHECK_INT(log_count("msg=\"the functions directory was replaced; watching the new one\"",
			    NULL),
		  1);
	/* Found by a periodic pass, not by an event (its line comes once the
	 * pass is done, after it published b). */
	CHECK(WAIT_UNTIL(10, log_count(PASS_LINE, "reason=periodic") > passes));
	/* a is the same in v2: still served on the same image, not rebuilt. */
	char img[128];
	served_image(&r, a, img, sizeof img);
	CHECK_STR(img, img_a);
	CHECK_INT(log_count("msg=\"function updated\"", a), 0);
	rig_down(&r);
	free(tmp);
	free(link);
	free(v1);
	free(v2);
}

static long max_queued_events(void)
{
	FILE *f = fopen("/proc/sys/fs/inotify/max_queued_events", "r");
	long n = -1;
	if (f) {
		if (fscanf(f, "%ld", &n) != 1)
			n = -1;
		fclose(f);
	}
	return n;
}

/*
 * A real IN_Q_OVERFLOW: before the reconciler thread reads anything, more
 * events than the queue holds; then a new function and a new nested
 * directory whose events are lost. With passes an hour apart, only the
 * overflow's rescan can find the function, and only its re-watching lets
 * inotify see a later change inside the nested directory.
 */
TEST(test_queue_overflow_rescans_and_rewatches)
{
	struct rig r = {0};
	char *dir = test_dir("overflow");
	const char *a = fname(&r, "ovf-a"), *b = fname(&r, "ovf-b");
	badfn(dir, a, "6m");
	long max = max_queued_events();
	REQUIRE(max > 0);
	reset_log();
	REQUIRE(rig_new(&r, dir, HOUR) == 0);
	reconciler_load(r.rc, r.d);
	CHECK_INT(log_count("msg=\"invalid function skipped\"", a), 1);

	/* Fill the queue: each create and unlink is one event at the root. */
	char *junk = xasprintf("%s/junk", dir);
	for (long i = 0; i < max / 2 + 16; i++) {
		int fd = open(junk, O_CREAT | O_WRONLY, 0644);
		REQUIRE(fd >= 0);
		close(fd);
		unlink(junk);
	}
	free(junk);
	/* Lost: a new function, and a nested directory of a with a file. */
	pyfn(dir, b, "bee");
	char *adir = xasprintf("%s/%s", dir, a);
	t_write_file(adir, "pkg/one.py", "X = 1\n");

	char *err = NULL;
	struct docker *td = NULL;
	REQUIRE(docker_open(&td, &err) == 0);
	REQUIRE(reconciler_start(r.rc, td, &err) == 0);
	CHECK(WAIT_UNTIL(10, log_count("msg=\"inotify queue overflowed; rescanning every "
				       "function\"",
				       NULL) == 1));
	CHECK(WAIT_UNTIL(60, served(&r, b)));
	/* The pass logs its line once it is done, after it published b: on a
	 * loaded machine the test can see b served first. */
	CHECK(WAIT_UNTIL(10, log_count(PASS_LINE, "reason=overflow") >= 1));
	CHECK_INT(log_count(PASS_LINE, "reason=periodic"), 0);
	/* a changed (pkg/one.py): looked at again, still invalid. */
	CHECK(WAIT_UNTIL(10, log_count("msg=\"invalid function skipped\"", a) == 2));

	/* A change only inside the directory whose creation was lost. */
	t_write_file(adir, "pkg/one.py", "X = 2\n");
	CHECK(WAIT_UNTIL(10, log_count("msg=\"invalid function skipped\"", a) == 3));
	CHECK_INT(log_count(PASS_LINE, "reason=periodic"), 0);
	rig_down(&r);
	free(adir);
	free(dir);
}

/*
 * The functions directory moved away (mv functions functions.old): the
 * functions keep serving, an edit in the moved copy changes nothing; a new
 * directory moved into place is found within seconds (not at the next
 * hourly pass), reconciled, and watched: a later edit in it is seen.
 */
TEST(test_functions_dir_moved_away_and_replaced)
{
	struct rig r = {0};
	char *dir = xasprintf("%s/moved/functions", root);
	char *old = xasprintf("%s/moved/functions.old", root);
	char *next = test_dir("moved/functions.next");
	sh("mkdir -p '%s'%s", dir, "");
	const char *a = fname(&r, "mv-a"), *b = fname(&r, "mv-b");
	pyfn(dir, a, "one");
	REQUIRE(rig_up(&r, dir, HOUR) == 0);
	char img1[128];
	served_image(&r, a, img1, sizeof img1);
	CHECK(img1[0] != '\0');

	REQUIRE(rename(dir, old) == 0);
	CHECK(WAIT_UNTIL(10, log_count("msg=\"the functions directory is missing; keeping the "
				       "current functions until it is back\"",
				       NULL) == 1));
	/* An edit in the moved copy is not the functions directory's. */
	char *olda = xasprintf("%s/%s", old, a);
	t_write_file(olda, "main.py", "def handler(event):\n    print(\"stray\")\n");
	int64_t t0 = now_ns();
	/* Past the debounce an event would have started, a is unchanged. */
	while (now_ns() < t0 + RECONCILE_DEBOUNCE_NS + SEC)
		usleep(50 * 1000);
	char img[128];
	served_image(&r, a, img, sizeof img);
	CHECK_STR(img, img1);
	CHECK_INT(log_count("function changed", a), 0);

	/* The replacement: a changed, b new; renamed into place at once. */
	pyfn(next, a, "two");
	badfn(next, b, "6m");
	t0 = now_ns();
	REQUIRE(rename(next, dir) == 0);
	CHECK(WAIT_UNTIL(10, log_count("msg=\"the functions directory is back; watching it "
				       "again\"",
				       NULL) == 1));
	/* Within the 1 s retry (plus a slow machine's margin), not an hour. */
	CHECK(now_ns() - t0 < 10 * SEC);
	CHECK(WAIT_UNTIL(60, served_other_than(&r, a, img1)));
	/* b is reconciled beside a, not after it: its line may come later. */
	CHECK(WAIT_UNTIL(10, log_count("msg=\"invalid function skipped\"", b) >= 1));
	CHECK_INT(log_count("msg=\"invalid function skipped\"", b), 1);
	CHECK_INT(log_count(PASS_LINE, "reason=periodic"), 0);

	/* Watched again: an edit in the new directory is seen by inotify. */
	char img2[128];
	served_image(&r, a, img2, sizeof img2);
	char *newa = xasprintf("%s/%s", dir, a);
	t_write_file(newa, "main.py", "def handler(event):\n    print(\"three\")\n");
	CHECK(WAIT_UNTIL(60, served_other_than(&r, a, img2)));
	CHECK_INT(log_count("msg=\"function updated\"", a), 2);
	CHECK_INT(log_count(PASS_LINE, "reason=periodic"), 0);
	rig_down(&r);
	free(newa);
	free(olda);
	free(next);
	free(old);
	free(dir);
}

/*
 * rm -rf of the functions directory: nothing is unpublished while it is
 * missing (the per-function deletions are not taken for removals); once it
 * is back, what it lacks is removed and what it gains is served, its new
 * functions found by the watch on the recreated directory.
 */
TEST(test_functions_dir_removed_and_recreated)
{
	struct rig r = {0};
	char *dir = test_dir("removed/functions");
	const char *a = fname(&r, "rm-a");
	pyfn(dir, a, "one");
	REQUIRE(rig_up(&r, dir, HOUR) == 0);
	CHECK(served(&r, a));

	sh("rm -rf '%s'%s", dir, "");
	/* a's own deletion events led to a look, which kept it. */
	CHECK(WAIT_UNTIL(10, log_count("msg=\"the functions directory is missing; function kept\"",
				       a) >= 1));
	CHECK(log_count("msg=\"the functions directory is missing; keeping the current "
			"functions until it is back\"",
			NULL) == 1);
	CHECK(served(&r, a));
	CHECK_INT(log_count("msg=\"function removed\"", a), 0);

	/* Back, empty: a is removed. */
	sh("mkdir -p '%s'%s", dir, "");
	CHECK(WAIT_UNTIL(10, log_count("msg=\"the functions directory is back; watching it "
				       "again\"",
				       NULL) == 1));
	CHECK(WAIT_UNTIL(10, !served(&r, a)));
	/* Unpublished first, then logged (gone()): the line may come a moment
	 * after the registry says so. */
	CHECK(WAIT_UNTIL(10, log_count("msg=\"function removed\"", a) >= 1));
	CHECK_INT(log_count("msg=\"function removed\"", a), 1);

	/* A function added to the recreated directory is discovered by inotify. */
	pyfn(dir, a, "again");
	CHECK(WAIT_UNTIL(60, served(&r, a)));
	CHECK_INT(log_count("msg=\"function discovered\"", a), 1);
	CHECK_INT(log_count(PASS_LINE, "reason=periodic"), 0);
	rig_down(&r);
	free(dir);
}

/* ---- main ------------------------------------------------------------- */

static const struct t_case cases[] = {
	T_CASE(test_failing_version_not_retried_by_passes),
	T_CASE(test_pass_finds_directory_replaced_behind_symlink),
	T_CASE(test_queue_overflow_rescans_and_rewatches),
	T_CASE(test_functions_dir_moved_away_and_replaced),
	T_CASE(test_functions_dir_removed_and_recreated),
};

int main(int argc, char **argv)
{
	pid = (int)getpid();
	snprintf_(root, sizeof root, "/tmp/relay-rc.XXXXXX");
	if (!mkdtemp(root))
		return 2;
	snprintf_(log_path, sizeof log_path, "%s/relay.log", root);
	log_fd = open(log_path, O_CREAT | O_WRONLY | O_APPEND | O_CLOEXEC, 0644);
	if (log_fd < 0)
		return 2;
	log_set_fd(log_fd);
	log_set_level(LOG_DEBUG);
	int rc = t_run_(__FILE__, cases, sizeof cases / sizeof cases[0], argc, argv);
	log_set_fd(2);
	close(log_fd);
	sh("rm -rf '%s'%s", root, "");
	return rc;
}
