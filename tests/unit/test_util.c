/* util: the shared helpers (mkdir_p, read_fd_bounded, owner and mode
 * checks, hex, thread_start). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "t.h"
#include "tfiles.h"
#include "util.h"

TEST(hex_encode_and_digit)
{
	static const unsigned char b[] = {0x00, 0x01, 0x7f, 0x80, 0xab, 0xff};
	char out[2 * sizeof b + 1];
	CHECK_STR(hex_encode(b, sizeof b, out), "00017f80abff");
	for (int i = 0; i < 12; i++)
		CHECK_INT(hex_digit(out[i]), (b[i / 2] >> (i % 2 ? 0 : 4)) & 15);
	CHECK_STR(hex_encode(b, 0, out), "");
	CHECK_INT(hex_digit('F'), 15);
	CHECK_INT(hex_digit('g'), -1);
	CHECK_INT(hex_digit('/'), -1);
}

TEST(mkdir_p_makes_each_missing_directory)
{
	char *d = t_tmpdir();
	char *p = xasprintf("%s/a/b/c", d), *err = NULL;
	bool created = false;
	mode_t old = umask(022);
	CHECK_INT(mkdir_p(p, 0750, 0, NULL, &created, &err), 0);
	CHECK(created);
	char *a = xasprintf("%s/a", d);
	CHECK_INT(t_mode_of(a), 0750);
	CHECK_INT(t_mode_of(p), 0750);
	/* Again: nothing to make, not created, existing modes kept. */
	CHECK_INT(mkdir_p(p, 0700, 0, NULL, &created, &err), 0);
	CHECK(!created);
	CHECK_INT(t_mode_of(p), 0750);
	/* A trailing slash and doubled slashes are fine. */
	char *q = xasprintf("%s//x//y/", d);
	CHECK_INT(mkdir_p(q, 0700, 0, NULL, NULL, &err), 0);
	/* The umask applies unless MKDIR_EXACT_MODE. */
	umask(077);
	char *u = xasprintf("%s/u/v", d), *e = xasprintf("%s/e/f", d), *ee = xasprintf("%s/e", d);
	CHECK_INT(mkdir_p(u, 0750, 0, NULL, NULL, &err), 0);
	CHECK_INT(t_mode_of(u), 0700);
	CHECK_INT(mkdir_p(e, 0750, MKDIR_EXACT_MODE, NULL, NULL, &err), 0);
	CHECK_INT(t_mode_of(e), 0750);
	CHECK_INT(t_mode_of(ee), 0750);
	umask(old);
	free(u);
	free(e);
	free(ee);
	free(q);
	free(a);
	free(p);
	t_rmtree(d);
	free(d);
}

TEST(mkdir_p_names_the_component_that_failed)
{
	char *d = t_tmpdir();
	char *f = xasprintf("%s/file", d), *p = xasprintf("%s/file/sub/dir", d), *err = NULL;
	FILE *fp = fopen(f, "w");
	REQUIRE(fp);
	fclose(fp);
	CHECK_INT(mkdir_p(p, 0700, 0, NULL, NULL, &err), -1);
	char *want = xasprintf("cannot create directory %s/sub: Not a directory", f);
	CHECK_STR(err, want);
	free(err);
	free(want);
	err = NULL;
	CHECK_INT(mkdir_p(p, 0700, 0, "state database: create directory", NULL, &err), -1);
	want = xasprintf("state database: create directory %s/sub: Not a directory", f);
	CHECK_STR(err, want);
	free(err);
	free(want);
	err = NULL;
	CHECK_INT(mkdir_p("", 0700, 0, NULL, NULL, &err), -1);
	CHECK_STR(err, "cannot create directory : No such file or directory");
	free(err);
	free(p);
	free(f);
	t_rmtree(d);
	free(d);
}

/* A file of n bytes 'x' in d; its open descriptor. */
static int file_of(const char *d, size_t n)
{
	char *p = xasprintf("%s/f%zu", d, n);
	int fd = open(p, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	char *b = xmalloc(n + 1);
	memset(b, 'x', n);
	if (fd >= 0 && write_all(fd, b, n) == 0)
		lseek(fd, 0, SEEK_SET);
	free(b);
	free(p);
	return fd;
}

TEST(read_fd_bounded_takes_up_to_max)
{
	char *d = t_tmpdir();
	static const size_t maxes[] = {0, 1, 100, 8190, 8191, 8192, 20000};
	for (size_t m = 0; m < ARRAY_LEN(maxes); m++) {
		size_t max = maxes[m];
		size_t sizes[] = {0, max > 0 ? max - 1 : 0, max, max + 1, max + 9000};
		for (size_t k = 0; k < ARRAY_LEN(sizes); k++) {
			for (unsigned flags = 0; flags <= READ_WIPE; flags += READ_WIPE) {
				int fd = file_of(d, sizes[k]);
				REQUIRE(fd >= 0);
				char *data = NULL;
				size_t len = 12345;
				errno = 0;
				int rc = read_fd_bounded(fd, max, flags, &data, &len);
				if (sizes[k] <= max) {
					CHECK_INT(rc, 0);
					CHECK_INT(len, sizes[k]);
					CHECK(data && data[len] == '\0' &&
					      strspn(data, "x") == sizes[k]);
				} else {
					CHECK_INT(rc, -1);
					CHECK_INT(errno, EFBIG);
					CHECK(!data);
					CHECK_INT(len, 12345);
					/* Never more than one byte past max was read. */
					CHECK_INT(lseek(fd, 0, SEEK_CUR), max + 1);
				}
				free(data);
				close(fd);
			}
		}
	}
	t_rmtree(d);
	free(d);
}

TEST(read_fd_bounded_read_error)
{
	char *data = NULL;
	size_t len = 0;
	int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	REQUIRE(fd >= 0);
	CHECK_INT(read_fd_bounded(fd, 100, 0, &data, &len), -1);
	CHECK_INT(errno, EISDIR);
	CHECK(!data);
	close(fd);
}

TEST(owner_and_mode_checks)
{
	struct stat st = {0};
	char *err = NULL;
	st.st_uid = geteuid();
	st.st_mode = S_IFDIR | 0700;
	CHECK(owner_mode_ok(&st, 077));
	CHECK_INT(check_owner_mode(&st, 077, "git directory", "/d", "use", &err), 0);
	st.st_mode = S_IFDIR | 0750;
	CHECK(!owner_mode_ok(&st, 077));
	CHECK(owner_mode_ok(&st, 022));
	CHECK_INT(check_owner_mode(&st, 077, "git directory", "/d", "use", &err), -1);
	CHECK_STR(err, "git directory /d: permissions 0750 are too open (want 0700); refusing "
		       "to use it");
	free(err);
	st.st_mode = S_IFREG | 0604;
	CHECK_INT(check_owner_mode(&st, 077, "secret file", "/f", "read", &err), -1);
	CHECK_STR(err, "secret file /f: permissions 0604 are too open (want 0600); refusing to "
		       "read it");
	free(err);
	st.st_mode = S_IFREG | 0600;
	st.st_uid = geteuid() + 1;
	CHECK(!owner_mode_ok(&st, 077));
	CHECK_INT(check_owner_mode(&st, 077, "secret file", "/f", "read", &err), -1);
	char *want = xasprintf("secret file /f: owned by uid %u, not by the current user (uid "
			       "%u); refusing to read it",
			       geteuid() + 1, geteuid());
	CHECK_STR(err, want);
	free(want);
	free(err);
}

static void *report_mask(void *arg)
{
	sigset_t now;
	pthread_sigmask(SIG_SETMASK, NULL, &now);
	int *blocked = arg;
	blocked[0] = sigismember(&now, SIGTERM) == 1 && sigismember(&now, SIGINT) == 1 &&
		     sigismember(&now, SIGHUP) == 1;
	char name[32] = "";
	pthread_getname_np(pthread_self(), name, sizeof name);
	blocked[1] = strcmp(name, "a-long-thread-n") == 0; /* cut to 15 bytes */
	return NULL;
}

TEST(thread_start_blocks_signals_and_names)
{
	sigset_t before, after;
	pthread_sigmask(SIG_SETMASK, NULL, &before);
	int seen[2] = {0, 0};
	pthread_t t;
	REQUIRE(thread_start(&t, "a-long-thread-name", report_mask, seen) == 0);
	pthread_join(t, NULL);
	CHECK(seen[0]);
	CHECK(seen[1]);
	pthread_sigmask(SIG_SETMASK, NULL, &after);
	for (int s = 1; s < SIGRTMIN; s++)
		CHECK_INT(sigismember(&after, s), sigismember(&before, s));
}

T_MAIN(T_CASE(hex_encode_and_digit), T_CASE(mkdir_p_makes_each_missing_directory),
       T_CASE(mkdir_p_names_the_component_that_failed), T_CASE(read_fd_bounded_takes_up_to_max),
       T_CASE(read_fd_bounded_read_error), T_CASE(owner_and_mode_checks),
       T_CASE(thread_start_blocks_signals_and_names))
