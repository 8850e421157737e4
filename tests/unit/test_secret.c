#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model/secret.h"
#include "t.h"
#include "tfiles.h"
#include "base/util.h"

TEST(name_rule_table)
{
	static const struct {
		const char *name;
		bool ok;
	} cases[] = {
		{"a", true},
		{"database-url", true},
		{"api_key.v2", true},
		{"0", true},
		{"a.b.c", true},
		{"a..b", true},
		{"a_", true},
		{"a-", true},
		{"abc", true},
		{"0abc", true},
		{"9-_.x", true},
		{"123456789012345678901234567890123456789012345678901234567890123", true},
		{"1234567890123456789012345678901234567890123456789012345678901234", false},
		{"", false},
		{".", false},
		{"..", false},
		{".a", false},
		{"_lead", false}, /* the first character is a lowercase letter or a digit */
		{"-lead", false},
		{"_", false},
		{"-", false},
		{"a.", false},
		{"A", false},
		{"Database", false},
		{"a b", false},
		{"a/b", false},
		{"../a", false},
		{"a\n", false},
		{"caf\xc3\xa9", false},
		{"a:b", false},
		{"a+b", false},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		if (secret_name_ok(cases[i].name) != cases[i].ok)
			T_FAIL_("secret_name_ok(\"%s\") != %d", cases[i].name, cases[i].ok);
		char *err = NULL;
		int rc = secret_name_check(cases[i].name, &err);
		CHECK_INT(rc, cases[i].ok ? 0 : SECRET_INVALID_NAME);
		if (!cases[i].ok)
			CHECK(t_contains(err, "starts with a lowercase letter or a digit") &&
			      t_contains(err, "at most 63 characters"));
		free(err);
	}
}

TEST(round_trip)
{
	char *tmp = t_tmpdir();
	char *data = xasprintf("%s/a/b/data", tmp);
	char *dir = xasprintf("%s/secrets", data);
	struct secret_provider *p = secret_file_provider_new(data);
	char *err = NULL, *v = NULL, **names = NULL;
	size_t len = 0, n = 0;

	/* Nothing exists yet: empty list, not found, nothing created. */
	CHECK_INT(secret_list(p, &names, &n, &err), 0);
	CHECK_INT(n, 0);
	CHECK_INT(secret_get(p, "x", &v, &len, &err), SECRET_NOT_FOUND);
	free(err);
	err = NULL;
	CHECK_INT(t_mode_of(data), -1);

	CHECK_INT(secret_set(p, "database-url", "postgres://u:p@h/db", 19, &err), 0);
	CHECK_INT(secret_set(p, "api-key", "k1", 2, &err), 0);
	CHECK_INT(secret_set(p, "b.c_d-0", "", 0, &err), 0);
	CHECK(err == NULL);
	CHECK_INT(t_mode_of(dir), 0700);
	CHECK_INT(t_mode_of(data), 0700);
	char *f = xasprintf("%s/database-url", dir);
	CHECK_INT(t_mode_of(f), 0600);
	free(f);

	REQUIRE(secret_list(p, &names, &n, &err) == 0);
	REQUIRE(n == 3);
	CHECK_STR(names[0], "api-key");
	CHECK_STR(names[1], "b.c_d-0");
	CHECK_STR(names[2], "database-url");
	secret_names_free(names, n);

	REQUIRE(secret_get(p, "database-url", &v, &len, &err) == 0);
	CHECK_INT(len, 19);
	CHECK_STR(v, "postgres://u:p@h/db");
	secret_value_free(v, len);
	REQUIRE(secret_get(p, "b.c_d-0", &v, &len, &err) == 0);
	CHECK_INT(len, 0);
	CHECK_STR(v, "");
	secret_value_free(v, len);

	/* Rotation replaces the value in place. */
	CHECK_INT(secret_set(p, "api-key", "k2-longer", 9, &err), 0);
	REQUIRE(secret_get(p, "api-key", &v, &len, &err) == 0);
	CHECK_STR(v, "k2-longer");
	secret_value_free(v, len);

	CHECK_INT(secret_file_check(p, "api-key", &err), 0);
	CHECK_INT(secret_remove(p, "api-key", &err), 0);
	CHECK_INT(secret_get(p, "api-key", &v, &len, &err), SECRET_NOT_FOUND);
	CHECK(t_contains(err, "\"api-key\" not found"));
	free(err);
	err = NULL;
	CHECK_INT(secret_remove(p, "api-key", &err), SECRET_NOT_FOUND);
	free(err);
	err = NULL;
	CHECK_INT(secret_file_check(p, "api-key", &err), SECRET_NOT_FOUND);
	free(err);
	err = NULL;
	REQUIRE(secret_list(p, &names, &n, &err) == 0);
	CHECK_INT(n, 2);
	secret_names_free(names, n);
	CHECK_INT(t_hidden_entries(dir), 0);

	secret_provider_free(p);
	t_rmtree(tmp);
	free(dir);
	free(data);
	free(tmp);
}

TEST(trailing_slash_and_default_dir)
{
	char *tmp = t_tmpdir();
	char *data = xasprintf("%s/data///", tmp);
	struct secret_provider *p = secret_file_provider_new(data);
	char *err = NULL;
	CHECK_INT(secret_set(p, "x", "1", 1, &err), 0);
	char *f = xasprintf("%s/data/secrets/x", tmp);
	CHECK_INT(t_mode_of(f), 0600);
	free(f);
	secret_provider_free(p);
	/* Which data directory the commands use: test_cmd.c (data_dir_default). */
	t_rmtree(tmp);
	free(data);
	free(tmp);
}

/* A file provider over a fresh directory. */
struct secfix {
	char *tmp;
	struct secret_provider *p;
};

static void secfix_open(struct secfix *fx)
{
	fx->tmp = t_tmpdir();
	fx->p = secret_file_provider_new(fx->tmp);
}

static void secfix_close(struct secfix *fx)
{
	secret_provider_free(fx->p);
	t_rmtree(fx->tmp);
	free(fx->tmp);
}

TEST(binary_values)
{
	struct secfix fx;
	secfix_open(&fx);
	static const char val[] = "\0line1\nline2\r\n\0\0\xff\x01 end\n";
	size_t vlen = sizeof val - 1;
	char *err = NULL, *v = NULL;
	size_t len = 0;
	CHECK_INT(secret_set(fx.p, "bin", val, vlen, &err), 0);
	REQUIRE(secret_get(fx.p, "bin", &v, &len, &err) == 0);
	CHECK_INT(len, vlen);
	CHECK(memcmp(v, val, vlen) == 0);
	CHECK(v[len] == '\0');
	secret_value_free(v, len);
	/* The file holds exactly the bytes. */
	char *f = xasprintf("%s/secrets/bin", fx.tmp);
	struct stat st;
	REQUIRE(stat(f, &st) == 0);
	CHECK_INT(st.st_size, vlen);
	free(f);
	secfix_close(&fx);
}

TEST(one_mib_value)
{
	struct secfix fx;
	secfix_open(&fx);
	size_t max = SECRET_VALUE_MAX;
	CHECK_INT(max, 1048576);
	char *big = xmalloc(max + 1);
	for (size_t i = 0; i <= max; i++)
		big[i] = (char)(i * 31 + (i >> 9));
	char *err = NULL, *v = NULL;
	size_t len = 0;
	CHECK_INT(secret_set(fx.p, "big", big, max, &err), 0);
	REQUIRE(secret_get(fx.p, "big", &v, &len, &err) == 0);
	CHECK_INT(len, max);
	CHECK(memcmp(v, big, max) == 0);
	secret_value_free(v, len);

	/* One byte more is refused on write, and a file that size on read. */
	CHECK_INT(secret_set(fx.p, "big", big, max + 1, &err), SECRET_ERROR);
	CHECK(t_contains(err, "exceeds the maximum of 1048576 bytes"));
	free(err);
	err = NULL;
	char *f = xasprintf("%s/secrets/huge", fx.tmp);
	t_write_mode(f, big, max + 1, 0600);
	CHECK_INT(secret_get(fx.p, "huge", &v, &len, &err), SECRET_ERROR);
	CHECK(v == NULL);
	CHECK(t_contains(err, f));
	CHECK(t_contains(err, "exceeds the maximum"));
	free(err);
	err = NULL;
	CHECK_INT(secret_file_check(fx.p, "huge", &err), SECRET_ERROR);
	free(err);
	free(f);
	free(big);
	secfix_close(&fx);
}

TEST(loose_file_permissions_refused)
{
	struct secfix fx;
	secfix_open(&fx);
	char *err = NULL, *v = NULL;
	size_t len = 0;
	CHECK_INT(secret_set(fx.p, "s", "CANARY-7f3a", 11, &err), 0);
	char *f = xasprintf("%s/secrets/s", fx.tmp);
	static const int loose[] = {0644, 0640, 0604, 0660, 0606, 0666};
	for (size_t i = 0; i < ARRAY_LEN(loose); i++) {
		REQUIRE(chmod(f, (mode_t)loose[i]) == 0);
		CHECK_INT(secret_get(fx.p, "s", &v, &len, &err), SECRET_ERROR);
		CHECK(v == NULL);
		char want[64];
		snprintf_(want, sizeof want, "permissions %04o are too open (want 0600)", loose[i]);
		CHECK(t_contains(err, want));
		CHECK(t_contains(err, f));
		CHECK(!t_contains(err, "CANARY"));
		free(err);
		err = NULL;
		CHECK_INT(secret_file_check(fx.p, "s", &err), SECRET_ERROR);
		CHECK(t_contains(err, want));
		free(err);
		err = NULL;
	}
	/* Stricter than 0600 is fine. */
	REQUIRE(chmod(f, 0400) == 0);
	REQUIRE(secret_get(fx.p, "s", &v, &len, &err) == 0);
	CHECK_STR(v, "CANARY-7f3a");
	secret_value_free(v, len);
	/* Rewriting restores 0600. */
	REQUIRE(chmod(f, 0644) == 0);
	CHECK_INT(secret_set(fx.p, "s", "new", 3, &err), 0);
	CHECK_INT(t_mode_of(f), 0600);

	if (geteuid() == 0) {
		REQUIRE(chown(f, 65534, 65534) == 0);
		CHECK_INT(secret_get(fx.p, "s", &v, &len, &err), SECRET_ERROR);
		CHECK(t_contains(err, "owned by uid 65534, not by the current user (uid 0)"));
		CHECK(t_contains(err, f));
		free(err);
		err = NULL;
	}
	free(f);
	secfix_close(&fx);
}

TEST(loose_directory_refused)
{
	struct secfix fx;
	secfix_open(&fx);
	char *dir = xasprintf("%s/secrets", fx.tmp);
	char *err = NULL, *v = NULL, **names = NULL;
	size_t len = 0, n = 0;
	CHECK_INT(secret_set(fx.p, "s", "CANARY-7f3a", 11, &err), 0);
	REQUIRE(chmod(dir, 0755) == 0);
	CHECK_INT(secret_get(fx.p, "s", &v, &len, &err), SECRET_ERROR);
	CHECK(t_contains(err, "secrets directory"));
	CHECK(t_contains(err, dir));
	CHECK(t_contains(err, "permissions 0755 are too open (want 0700)"));
	free(err);
	err = NULL;
	CHECK_INT(secret_list(fx.p, &names, &n, &err), SECRET_ERROR);
	CHECK_INT(n, 0);
	free(err);
	err = NULL;
	CHECK_INT(secret_set(fx.p, "t", "x", 1, &err), SECRET_ERROR);
	free(err);
	err = NULL;
	CHECK_INT(secret_remove(fx.p, "s", &err), SECRET_ERROR);
	free(err);
	err = NULL;
	REQUIRE(chmod(dir, 0710) == 0);
	CHECK_INT(secret_get(fx.p, "s", &v, &len, &err), SECRET_ERROR);
	CHECK(t_contains(err, "permissions 0710"));
	free(err);
	err = NULL;
	/* 0700 again: everything works, nothing was written meanwhile. */
	REQUIRE(chmod(dir, 0700) == 0);
	REQUIRE(secret_get(fx.p, "s", &v, &len, &err) == 0);
	CHECK_STR(v, "CANARY-7f3a");
	secret_value_free(v, len);
	CHECK_INT(secret_get(fx.p, "t", &v, &len, &err), SECRET_NOT_FOUND);
	free(err);
	err = NULL;
	if (geteuid() == 0) {
		REQUIRE(chown(dir, 65534, 65534) == 0);
		CHECK_INT(secret_get(fx.p, "s", &v, &len, &err), SECRET_ERROR);
		CHECK(t_contains(err, "owned by uid 65534"));
		free(err);
		err = NULL;
		REQUIRE(chown(dir, 0, 0) == 0);
	}
	free(dir);
	secfix_close(&fx);
}

TEST(symlinks_refused)
{
	struct secfix fx;
	secfix_open(&fx);
	char *err = NULL, *v = NULL;
	size_t len = 0;
	CHECK_INT(secret_set(fx.p, "real", "v", 1, &err), 0);
	char *target = xasprintf("%s/outside", fx.tmp);
	t_write_mode(target, "CANARY", 6, 0600);
	char *link = xasprintf("%s/secrets/linked", fx.tmp);
	REQUIRE(symlink(target, link) == 0);
	CHECK_INT(secret_get(fx.p, "linked", &v, &len, &err), SECRET_ERROR);
	CHECK(t_contains(err, "is a symbolic link"));
	free(err);
	err = NULL;
	/* rm removes the link itself, never the target. */
	CHECK_INT(secret_remove(fx.p, "linked", &err), 0);
	CHECK_INT(t_mode_of(target), 0600);

	/* The directory itself as a symbolic link. */
	char *tmp2 = t_tmpdir();
	char *dir2 = xasprintf("%s/secrets", tmp2);
	char *real = xasprintf("%s/secrets", fx.tmp);
	REQUIRE(symlink(real, dir2) == 0);
	struct secret_provider *p2 = secret_file_provider_new(tmp2);
	CHECK_INT(secret_get(p2, "real", &v, &len, &err), SECRET_ERROR);
	CHECK(t_contains(err, "is a symbolic link"));
	CHECK(t_contains(err, dir2));
	free(err);
	err = NULL;
	CHECK_INT(secret_set(p2, "x", "v", 1, &err), SECRET_ERROR);
	free(err);
	secret_provider_free(p2);
	t_rmtree(tmp2);
	free(tmp2);
	free(dir2);
	free(real);
	free(target);
	free(link);
	secfix_close(&fx);
}

TEST(umask_does_not_matter)
{
	char *tmp = t_tmpdir();
	char *data = xasprintf("%s/d", tmp);
	struct secret_provider *p = secret_file_provider_new(data);
	char *err = NULL;
	mode_t old = umask(0);
	CHECK_INT(secret_set(p, "a", "1", 1, &err), 0);
	umask(0277);
	CHECK_INT(secret_set(p, "b", "2", 1, &err), 0);
	umask(old);
	char *d = xasprintf("%s/secrets", data), *a = xasprintf("%s/a", d),
	     *b = xasprintf("%s/b", d);
	CHECK_INT(t_mode_of(d), 0700);
	CHECK_INT(t_mode_of(a), 0600);
	CHECK_INT(t_mode_of(b), 0600);
	free(d);
	free(a);
	free(b);
	free(data);
	secret_provider_free(p);
	t_rmtree(tmp);
	free(tmp);
}

TEST(writes_are_atomic)
{
	struct secfix fx;
	secfix_open(&fx);
	char *dir = xasprintf("%s/secrets", fx.tmp);
	size_t na = 200000, nb = 3000;
	char *a = xmalloc(na), *b = xmalloc(nb);
	memset(a, 'a', na);
	memset(b, 'b', nb);
	char *err = NULL, *v = NULL;
	size_t len = 0;
	REQUIRE(secret_set(fx.p, "rot", a, na, &err) == 0);
	fflush(stdout);
	pid_t pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		for (int i = 0; i < 300; i++) {
			char *e = NULL;
			if (secret_set(fx.p, "rot", i % 2 ? a : b, i % 2 ? na : nb, &e) < 0)
				_exit(1);
		}
		_exit(0);
	}
	/* Every read sees one whole value, never a mix or a truncation. */
	int torn = 0, reads = 0;
	for (int i = 0; i < 2000; i++) {
		int rc = secret_get(fx.p, "rot", &v, &len, &err);
		if (rc != 0) {
			torn++;
			free(err);
			err = NULL;
			continue;
		}
		reads++;
		if (!((len == na && memcmp(v, a, na) == 0) || (len == nb && memcmp(v, b, nb) == 0)))
			torn++;
		secret_value_free(v, len);
		int st;
		if (waitpid(pid, &st, WNOHANG) == pid) {
			CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
			pid = 0;
			break;
		}
	}
	if (pid > 0) {
		int st;
		waitpid(pid, &st, 0);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	CHECK_INT(torn, 0);
	CHECK(reads > 0);
	/* No temporary file left behind. */
	CHECK_INT(t_hidden_entries(dir), 0);
	char **names = NULL;
	size_t n = 0;
	REQUIRE(secret_list(fx.p, &names, &n, &err) == 0);
	CHECK_INT(n, 1);
	secret_names_free(names, n);
	free(a);
	free(b);
	free(dir);
	secfix_close(&fx);
}

TEST(stray_entries_not_listed)
{
	struct secfix fx;
	secfix_open(&fx);
	char *err = NULL, **names = NULL;
	size_t n = 0;
	CHECK_INT(secret_set(fx.p, "good", "1", 1, &err), 0);
	char *f1 = xasprintf("%s/secrets/.good.tmp-deadbeef", fx.tmp);
	char *f2 = xasprintf("%s/secrets/Upper", fx.tmp);
	char *d1 = xasprintf("%s/secrets/subdir", fx.tmp);
	t_write_mode(f1, "x", 1, 0600);
	t_write_mode(f2, "x", 1, 0600);
	REQUIRE(mkdir(d1, 0700) == 0);
	REQUIRE(secret_list(fx.p, &names, &n, &err) == 0);
	REQUIRE(n == 1);
	CHECK_STR(names[0], "good");
	secret_names_free(names, n);
	char *v = NULL;
	size_t len = 0;
	CHECK_INT(secret_remove(fx.p, "subdir", &err), SECRET_NOT_FOUND);
	free(err);
	err = NULL;
	CHECK_INT(secret_get(fx.p, "subdir", &v, &len, &err), SECRET_ERROR);
	CHECK(t_contains(err, "not a regular file"));
	free(err);
	free(f1);
	free(f2);
	free(d1);
	secfix_close(&fx);
}

TEST(not_found_and_invalid_names)
{
	struct secfix fx;
	secfix_open(&fx);
	char *err = NULL, *v = NULL;
	size_t len = 0;
	/* Missing directory and missing file alike. */
	CHECK_INT(secret_get(fx.p, "database-url", &v, &len, &err), SECRET_NOT_FOUND);
	CHECK_STR(err, "secret \"database-url\" not found");
	free(err);
	err = NULL;
	CHECK_INT(secret_remove(fx.p, "database-url", &err), SECRET_NOT_FOUND);
	free(err);
	err = NULL;
	CHECK_INT(secret_set(fx.p, "other", "1", 1, &err), 0);
	CHECK_INT(secret_get(fx.p, "database-url", &v, &len, &err), SECRET_NOT_FOUND);
	CHECK(v == NULL);
	CHECK_INT(len, 0);
	free(err);
	err = NULL;

	static const char *const bad[] = {"",	   "../other", "Other",	  ".other",
					  "_lead", "-lead",    "a\x01\"b"};
	for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
		CHECK_INT(secret_get(fx.p, bad[i], &v, &len, &err), SECRET_INVALID_NAME);
		CHECK(t_contains(err, "invalid secret name"));
		free(err);
		err = NULL;
		CHECK_INT(secret_set(fx.p, bad[i], "v", 1, &err), SECRET_INVALID_NAME);
		free(err);
		err = NULL;
		CHECK_INT(secret_remove(fx.p, bad[i], &err), SECRET_INVALID_NAME);
		free(err);
		err = NULL;
		CHECK_INT(secret_file_check(fx.p, bad[i], &err), SECRET_INVALID_NAME);
		free(err);
		err = NULL;
	}
	/* Control bytes in a bad name are escaped in the message. */
	CHECK_INT(secret_name_check("a\x01\"b", &err), SECRET_INVALID_NAME);
	CHECK(t_contains(err, "\"a\\x01\\x22b\""));
	free(err);
	/* Nothing was created by the rejected names. */
	char **names = NULL;
	size_t n = 0;
	REQUIRE(secret_list(fx.p, &names, &n, &err) == 0);
	CHECK_INT(n, 1);
	secret_names_free(names, n);
	secfix_close(&fx);
}

/* A second provider is one struct: an in-memory, read-only one here. */
static int mem_get(void *ctx, const char *name, char **value, size_t *len, char **err)
{
	if (strcmp(name, "k") != 0) {
		*err = xasprintf("secret \"%s\" not found", name);
		return SECRET_NOT_FOUND;
	}
	*value = xstrdup((const char *)ctx);
	*len = strlen(ctx);
	return 0;
}

TEST(second_provider)
{
	struct secret_provider *p = xcalloc(1, sizeof *p);
	p->kind = "memory";
	p->ctx = (void *)"v";
	p->get = mem_get;
	char *err = NULL, *v = NULL, **names = NULL;
	size_t len = 0, n = 0;
	REQUIRE(secret_get(p, "k", &v, &len, &err) == 0);
	CHECK_STR(v, "v");
	secret_value_free(v, len);
	CHECK_INT(secret_get(p, "nope", &v, &len, &err), SECRET_NOT_FOUND);
	free(err);
	err = NULL;
	CHECK_INT(secret_list(p, &names, &n, &err), SECRET_UNSUPPORTED);
	CHECK_STR(err, "the memory secret provider cannot list secrets");
	free(err);
	err = NULL;
	CHECK_INT(secret_set(p, "k", "x", 1, &err), SECRET_UNSUPPORTED);
	free(err);
	err = NULL;
	CHECK_INT(secret_remove(p, "k", &err), SECRET_UNSUPPORTED);
	free(err);
	err = NULL;
	CHECK_INT(secret_file_check(p, "k", &err), SECRET_ERROR);
	free(err);
	secret_provider_free(p);
}

T_MAIN(T_CASE(name_rule_table), T_CASE(round_trip), T_CASE(trailing_slash_and_default_dir),
       T_CASE(binary_values), T_CASE(one_mib_value), T_CASE(loose_file_permissions_refused),
       T_CASE(loose_directory_refused), T_CASE(symlinks_refused), T_CASE(umask_does_not_matter),
       T_CASE(writes_are_atomic), T_CASE(stray_entries_not_listed),
       T_CASE(not_found_and_invalid_names), T_CASE(second_provider))
