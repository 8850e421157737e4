#include <sys/stat.h>
#include <unistd.h>

#include "model/function.h"
#include "base/log.h"
#include "t.h"
#include "tfiles.h"

TEST(name_rule)
{
	static const char *const ok[] = {
		"user-events", "welcome_email",
		"jobs.v2",     "a",
		"0",	       "a.b-c_d",
		"9lives",      "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghij123"};
	static const char *const no[] = {
		"User Events", "hello/world",
		".hidden",     "",
		"-x",	       "_x",
		"end.",	       "UPPER",
		"sp ace",      "caf\xc3\xa9",
		"a:b",	       "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghij1234"};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
		if (!function_name_valid(ok[i], NULL))
			T_FAIL_("rejected %s", ok[i]);
	for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
		const char *why = NULL;
		if (function_name_valid(no[i], &why))
			T_FAIL_("accepted %s", no[i]);
		else
			CHECK(why != NULL);
	}
}

static char root[] = "/tmp/relay-fn-XXXXXX";

static void make_dir(const char *rel)
{
	char *p = xasprintf("%s/%s", root, rel);
	mkdir(p, 0755);
	free(p);
}

#define GOOD "runtime: python3.14\nevents:\n  - handler: m.f\n    pattern: {a: [1]}\n"

TEST(scan)
{
	REQUIRE(mkdtemp(root) != NULL);
	make_dir("zeta");
	t_write_file(root, "zeta/template.yaml", GOOD);
	make_dir("alpha");
	t_write_file(root, "alpha/template.yaml", GOOD);
	make_dir("alpha/pkg");
	t_write_file(root, "alpha/pkg/mod.py", "x = 1\n");
	make_dir("Bad Name");
	t_write_file(root, "Bad Name/template.yaml", GOOD);
	make_dir("no-template");
	t_write_file(root, "no-template/handler.py", "");
	make_dir("broken");
	t_write_file(root, "broken/template.yaml", "runtime: cobol\n");
	make_dir("leaky");
	t_write_file(root, "leaky/template.yaml", GOOD);
	char *link = xasprintf("%s/leaky/passwd", root);
	CHECK(symlink("/etc/passwd", link) == 0);
	free(link);
	make_dir("inside");
	t_write_file(root, "inside/template.yaml", GOOD);
	t_write_file(root, "inside/real.py", "");
	link = xasprintf("%s/inside/alias.py", root);
	CHECK(symlink("real.py", link) == 0);
	free(link);
	t_write_file(root, "not-a-dir", "");
	/* git sync's staging directory: not a function, not even an invalid one. */
	make_dir(".relay-sync-alpha.tmp-1a2b3c");
	t_write_file(root, ".relay-sync-alpha.tmp-1a2b3c/template.yaml", GOOD);

	struct function_scan s;
	char *err = NULL;
	REQUIRE(function_scan_dir(root, &s, &err) == 0);
	REQUIRE(s.n == 7);
	/* byte order: uppercase first */
	CHECK_STR(s.v[0].name, "Bad Name");
	CHECK_INT(s.v[0].status, FUNCTION_INVALID);
	CHECK(s.v[0].errors.n == 1 && strstr(s.v[0].errors.v[0], "invalid function name") != NULL);
	CHECK_STR(s.v[1].name, "alpha");
	CHECK_INT(s.v[1].status, FUNCTION_OK);
	CHECK_STR(s.v[2].name, "broken");
	CHECK_INT(s.v[2].status, FUNCTION_INVALID);
	CHECK(s.v[2].errors.n == 2);
	CHECK_STR(s.v[3].name, "inside");
	CHECK_INT(s.v[3].status, FUNCTION_OK);
	CHECK_STR(s.v[4].name, "leaky");
	CHECK_INT(s.v[4].status, FUNCTION_INVALID);
	CHECK(s.v[4].errors.n == 1 &&
	      strcmp(s.v[4].errors.v[0], "passwd: symlink points outside the function directory") ==
		      0);
	CHECK_STR(s.v[5].name, "no-template");
	CHECK_INT(s.v[5].status, FUNCTION_NO_TEMPLATE);
	/* One WARN line naming the function and every error. */
	t_capture_logs();
	function_entry_log(&s.v[2]);
	function_entry_log(&s.v[1]);
	function_entry_log(&s.v[5]);
	char *out = t_captured_logs();
	t_release_logs();
	size_t n = strlen(out);
	REQUIRE(n > 0);
	CHECK(strchr(out, '\n') == out + n - 1);
	CHECK(strstr(out, "level=WARN msg=\"invalid function skipped\" function=broken "
			  "errors=\"runtime: "
			  "unsupported runtime \\\"cobol\\\" (supported: python3.14, node24); "
			  "events: a function "
			  "needs at least one event rule or schedule\"") != NULL);
	free(out);
	CHECK_STR(s.v[6].name, "zeta");
	CHECK_INT(s.v[6].status, FUNCTION_OK);
	function_scan_free(&s);

	CHECK(function_scan_dir("/nonexistent-relay-dir", &s, &err) < 0);
	CHECK(err && strstr(err, "/nonexistent-relay-dir") != NULL);
	free(err);
	char *cmd = xasprintf("rm -rf '%s'", root);
	CHECK(system(cmd) == 0);
	free(cmd);
}

T_MAIN(T_CASE(name_rule), T_CASE(scan))
