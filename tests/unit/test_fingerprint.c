/* Fingerprint stability and the in-memory tree (fingerprint.h). */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model/fingerprint.h"
#include "model/function.h"
#include "t.h"
#include "tfiles.h"
#include "base/util.h"

static const unsigned char zero_recipe[32];

static void fp(const struct fn_tree *t, char out[65])
{
	fingerprint_tree_with_recipe(t, zero_recipe, out);
}

static void base_tree(struct fn_tree *t)
{
	memset(t, 0, sizeof *t);
	fn_tree_put(t, "template.yaml", FN_ENTRY_FILE, "runtime: python3.14\n", 20);
	fn_tree_put(t, "events/created.py", FN_ENTRY_FILE, "def handler(e):\n    pass\n", 25);
	fn_tree_put(t, "ok.py", FN_ENTRY_FILE, "x = 1\n", 6);
}

TEST(golden_value)
{
	/* Pins the encoding documented in fingerprint.h (checked independently
	 * with Python's hashlib when written): changing it
	 * changes every image tag, so it must be deliberate. */
	struct fn_tree t;
	base_tree(&t);
	char a[65];
	fp(&t, a);
	CHECK_STR(a, "2beb9e68305854dc5ed4e5e1d5c437422151baaf34b8c728bce67b2533806fb1");
	fn_tree_free(&t);
}

TEST(same_tree_same_hash)
{
	struct fn_tree t1, t2;
	base_tree(&t1);
	memset(&t2, 0, sizeof t2);
	/* Inserted in another order. */
	fn_tree_put(&t2, "ok.py", FN_ENTRY_FILE, "x = 1\n", 6);
	fn_tree_put(&t2, "events/created.py", FN_ENTRY_FILE, "def handler(e):\n    pass\n", 25);
	fn_tree_put(&t2, "template.yaml", FN_ENTRY_FILE, "runtime: python3.14\n", 20);
	char a[65], b[65];
	fp(&t1, a);
	fp(&t2, b);
	CHECK_STR(a, b);
	CHECK_INT(strlen(a), 64);
	fingerprint_tree(&t1, a);
	fingerprint_tree(&t2, b);
	CHECK_STR(a, b);
	fn_tree_free(&t1);
	fn_tree_free(&t2);
}

TEST(every_change_changes_the_hash)
{
	struct fn_tree t;
	char base[65], got[65];
	base_tree(&t);
	fp(&t, base);
	fn_tree_free(&t);

	/* Each case: one mutation of the base tree. */
	for (int c = 0; c < 7; c++) {
		base_tree(&t);
		switch (c) {
		case 0: /* edit one byte */
			fn_tree_put(&t, "ok.py", FN_ENTRY_FILE, "x = 2\n", 6);
			break;
		case 1: /* add a file */ fn_tree_put(&t, "new.py", FN_ENTRY_FILE, "", 0); break;
		case 2: /* rename */
			fn_tree_free(&t);
			memset(&t, 0, sizeof t);
			fn_tree_put(&t, "template.yaml", FN_ENTRY_FILE, "runtime: python3.14\n",
				    20);
			fn_tree_put(&t, "events/created.py", FN_ENTRY_FILE,
				    "def handler(e):\n    pass\n", 25);
			fn_tree_put(&t, "ok2.py", FN_ENTRY_FILE, "x = 1\n", 6);
			break;
		case 3: /* template.yaml counts (env values live there) */
			fn_tree_put(&t, "template.yaml", FN_ENTRY_FILE, "runtime: python3.14 \n",
				    21);
			break;
		case 4: /* executable bit */
			fn_tree_put(&t, "ok.py", FN_ENTRY_EXEC, "x = 1\n", 6);
			break;
		case 5: /* a symlink with the same text is not the file */
			fn_tree_put(&t, "ok.py", FN_ENTRY_SYMLINK, "x = 1\n", 6);
			break;
		case 6: /* append a byte */
			fn_tree_put(&t, "ok.py", FN_ENTRY_FILE, "x = 1\n\n", 7);
			break;
		}
		fp(&t, got);
		if (strcmp(got, base) == 0)
			T_FAIL_("mutation %d left the fingerprint unchanged", c);
		fn_tree_free(&t);
	}
}

TEST(no_ambiguity_between_path_and_content)
{
	/* "ab" + "c" vs "a" + "bc": length prefixes keep them apart. */
	struct fn_tree t1 = {0}, t2 = {0};
	fn_tree_put(&t1, "ab", FN_ENTRY_FILE, "c", 1);
	fn_tree_put(&t2, "a", FN_ENTRY_FILE, "bc", 2);
	char a[65], b[65];
	fp(&t1, a);
	fp(&t2, b);
	CHECK(strcmp(a, b) != 0);
	fn_tree_free(&t1);
	fn_tree_free(&t2);
	/* One file "a" holding "x" vs two files. */
	struct fn_tree t3 = {0}, t4 = {0};
	fn_tree_put(&t3, "a", FN_ENTRY_FILE, "xfb", 3);
	fn_tree_put(&t4, "a", FN_ENTRY_FILE, "x", 1);
	fn_tree_put(&t4, "b", FN_ENTRY_FILE, "", 0);
	fp(&t3, a);
	fp(&t4, b);
	CHECK(strcmp(a, b) != 0);
	fn_tree_free(&t3);
	fn_tree_free(&t4);
}

TEST(recipe_is_part_of_the_fingerprint)
{
	struct fn_tree t;
	base_tree(&t);
	unsigned char r1[32], r2[32];
	fingerprint_recipe(r1);
	fingerprint_recipe(r2);
	CHECK(memcmp(r1, r2, 32) == 0);
	CHECK(memcmp(r1, zero_recipe, 32) != 0);
	char a[65], b[65];
	fp(&t, a);
	fingerprint_tree(&t, b);
	CHECK(strcmp(a, b) != 0);
	fn_tree_free(&t);
}

static char *mkdtemp_(void)
{
	char *d = xstrdup("/tmp/relay-test-fp-XXXXXX");
	if (!mkdtemp(d))
		abort();
	return d;
}

TEST(disk_order_and_location_do_not_matter)
{
	char *d1 = mkdtemp_(), *d2 = mkdtemp_();
	char *s1 = xasprintf("%s/pkg", d1), *s2 = xasprintf("%s/pkg", d2);
	mkdir(s1, 0755);
	mkdir(s2, 0755);
	/* Same content, created in opposite orders. */
	t_write_file(d1, "b.py", "B");
	t_write_file(d1, "a.py", "A");
	t_write_file(d1, "pkg/z.py", "Z");
	t_write_file(d1, "template.yaml", "T");
	t_write_file(d2, "template.yaml", "T");
	t_write_file(d2, "pkg/z.py", "Z");
	t_write_file(d2, "a.py", "A");
	t_write_file(d2, "b.py", "B");
	char a[65], b[65];
	char *e = NULL;
	REQUIRE(fingerprint_dir(d1, a, &e) == 0);
	REQUIRE(fingerprint_dir(d2, b, &e) == 0);
	CHECK_STR(a, b);
	struct fn_tree t;
	REQUIRE(fn_tree_load(d1, &t, &e) == 0);
	CHECK_INT(t.n, 4);
	CHECK_STR(t.v[0].path, "a.py");
	CHECK_STR(t.v[1].path, "b.py");
	CHECK_STR(t.v[2].path, "pkg/z.py");
	CHECK_STR(t.v[3].path, "template.yaml");
	CHECK(fn_tree_get(&t, "pkg/z.py") != NULL);
	CHECK(fn_tree_get(&t, "pkg") == NULL);
	fn_tree_free(&t);
	/* Editing one byte on disk changes it. */
	t_write_file(d2, "pkg/z.py", "Y");
	REQUIRE(fingerprint_dir(d2, b, &e) == 0);
	CHECK(strcmp(a, b) != 0);
	t_rmtree(d1);
	t_rmtree(d2);
	free(s1);
	free(s2);
	free(d1);
	free(d2);
}

TEST(symlinks_recorded_special_files_refused)
{
	char *d = mkdtemp_();
	t_write_file(d, "a.py", "A");
	char *l = xasprintf("%s/link.py", d);
	REQUIRE(symlink("a.py", l) == 0);
	struct fn_tree t;
	char *e = NULL;
	REQUIRE(fn_tree_load(d, &t, &e) == 0);
	const struct fn_entry *x = fn_tree_get(&t, "link.py");
	REQUIRE(x != NULL);
	CHECK_INT(x->kind, FN_ENTRY_SYMLINK);
	CHECK_STR(x->data, "a.py");
	fn_tree_free(&t);
	char *fifo = xasprintf("%s/pipe", d);
	REQUIRE(mkfifo(fifo, 0644) == 0);
	CHECK(fn_tree_load(d, &t, &e) < 0);
	CHECK(e && strstr(e, "pipe: not a regular file") != NULL);
	free(e);
	CHECK(fn_tree_load("/nonexistent-relay-dir", &t, &e) < 0);
	free(e);
	t_rmtree(d);
	free(l);
	free(fifo);
	free(d);
}

/* A fresh directory on a tmpfs when there is one: the trees below hold
 * 10,000 files, which a loaded disk creates in tens of seconds. */
static char *fast_tmpdir(void)
{
	char *d = xstrdup("/dev/shm/relay-test-fp-XXXXXX");
	if (mkdtemp(d))
		return d;
	free(d);
	return mkdtemp_();
}

/* Descriptors open in this process (the one reading /proc/self/fd aside). */
static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1;
}

/* dir/rel/ as nested directories "d/d/d..." levels deep; returns the
 * deepest one (malloc'd). */
static char *nest(const char *dir, int levels)
{
	char *p = xstrdup(dir);
	for (int i = 0; i < levels; i++) {
		char *q = xasprintf("%s/d", p);
		free(p);
		p = q;
		if (mkdir(p, 0755) < 0)
			abort();
	}
	return p;
}

/* Loads and fingerprints dir times times, each expected to fail with a
 * message holding want (or to succeed when want is NULL); returns the
 * growth in open descriptors. */
static int fds_leaked_by(const char *dir, const char *want, int times)
{
	int before = open_fds();
	for (int i = 0; i < times; i++) {
		struct fn_tree t;
		char *e = NULL;
		int rc = fn_tree_load(dir, &t, &e);
		if (want) {
			CHECK(rc < 0);
			if (!e || !strstr(e, want))
				T_FAIL_("error \"%s\" does not say \"%s\"", e ? e : "(none)", want);
		} else {
			CHECK(rc == 0);
			fn_tree_free(&t);
		}
		free(e);
		char hex[FINGERPRINT_HEX_LEN + 1];
		e = NULL;
		CHECK((fingerprint_dir(dir, hex, &e) == 0) == (want == NULL));
		free(e);
	}
	return open_fds() - before;
}

/* Every early return of the tree walk closes what it opened: 100 loads
 * of each tree that stops it leave the descriptor count where it was. */
TEST(early_returns_close_their_descriptors)
{
	REQUIRE(open_fds() > 0);
	char *d = fast_tmpdir();

	char *deep = xasprintf("%s/deep", d);
	mkdir(deep, 0755);
	char *bottom = nest(deep, FN_TREE_MAX_DEPTH + 2);
	t_write_file(bottom, "x.py", "X");
	CHECK_INT(fds_leaked_by(deep, "nested deeper than", 100), 0);

	/* The cap is hit three directories down, with all of them open; each
	 * load reads 10,000 files, so fewer loads (a leak shows after one). */
	char *many = xasprintf("%s/many", d);
	mkdir(many, 0755);
	char *mdir = nest(many, 3);
	for (int i = 0; i <= FN_TREE_MAX_FILES; i++) {
		char name[32];
		snprintf_(name, sizeof name, "f%d", i);
		t_write_file(mdir, name, "");
	}
	CHECK_INT(fds_leaked_by(many, "more than", 3), 0);

	char *special = xasprintf("%s/special", d);
	mkdir(special, 0755);
	char *sdir = nest(special, 3);
	char *fifo = xasprintf("%s/pipe", sdir);
	REQUIRE(mkfifo(fifo, 0644) == 0);
	CHECK_INT(fds_leaked_by(special, "not a regular file", 100), 0);

	/* Symbolic links are recorded, never followed: a loop is just two
	 * entries, and loading it succeeds. */
	char *loop = xasprintf("%s/loop", d);
	mkdir(loop, 0755);
	char *l1 = xasprintf("%s/a", loop), *l2 = xasprintf("%s/b", loop),
	     *l3 = xasprintf("%s/self", loop);
	REQUIRE(symlink("b", l1) == 0 && symlink("a", l2) == 0 && symlink(".", l3) == 0);
	CHECK_INT(fds_leaked_by(loop, NULL, 100), 0);

	/* function.c walks the same trees (check_tree) when it loads one. */
	t_write_file(deep, "template.yaml", "runtime: python3.14\n");
	t_write_file(loop, "template.yaml", "runtime: python3.14\n");
	int before = open_fds();
	for (int i = 0; i < 100; i++) {
		const char *names[] = {"deep", "loop"};
		for (size_t k = 0; k < 2; k++) {
			struct function *f = NULL;
			struct strlist errors = {0}, warnings = {0};
			CHECK(function_load(d, names[k], &f, &errors, &warnings) ==
			      FUNCTION_INVALID);
			function_free(f);
			strlist_free(&errors);
			strlist_free(&warnings);
		}
	}
	CHECK_INT(open_fds() - before, 0);

	t_rmtree(d);
	free(deep);
	free(bottom);
	free(many);
	free(mdir);
	free(special);
	free(sdir);
	free(fifo);
	free(loop);
	free(l1);
	free(l2);
	free(l3);
	free(d);
}

/* A directory the walk may not read stops it too. Root reads anything, so
 * the loads run in a child that drops to nobody when started as root. */
TEST(unreadable_directory_closes_its_descriptors)
{
	char *d = mkdtemp_();
	REQUIRE(chmod(d, 0755) == 0);
	char *bottom = nest(d, 3);
	t_write_file(bottom, "x.py", "X");
	char *locked = xasprintf("%s/locked", bottom);
	REQUIRE(mkdir(locked, 0) == 0);
	REQUIRE(chmod(locked, 0) == 0);
	fflush(stdout);
	pid_t pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		if (geteuid() == 0 && (setgid(65534) < 0 || setuid(65534) < 0))
			_exit(100);
		int leaked = fds_leaked_by(d, "cannot open directory", 100);
		_exit(t_failed_ ? 101 : leaked > 99 ? 99 : leaked < 0 ? 98 : leaked);
	}
	int status = 0;
	REQUIRE(waitpid(pid, &status, 0) == pid);
	REQUIRE(WIFEXITED(status));
	if (WEXITSTATUS(status) == 100)
		T_SKIP("cannot switch to uid 65534");
	else if (WEXITSTATUS(status) == 101)
		T_FAIL_("the walk did not fail on the unreadable directory");
	else
		CHECK_INT(WEXITSTATUS(status), 0);
	t_rmtree(d);
	free(bottom);
	free(locked);
	free(d);
}

T_MAIN(T_CASE(golden_value), T_CASE(same_tree_same_hash), T_CASE(every_change_changes_the_hash),
       T_CASE(no_ambiguity_between_path_and_content), T_CASE(recipe_is_part_of_the_fingerprint),
       T_CASE(disk_order_and_location_do_not_matter),
       T_CASE(symlinks_recorded_special_files_refused),
       T_CASE(early_returns_close_their_descriptors),
       T_CASE(unreadable_directory_closes_its_descriptors))
