/*
 * Relay's small unit-test runner. A test file defines test functions with
 * TEST(name), lists them in T_MAIN(...), and uses the CHECK macros. Each
 * test prints "ok <file>/<name>" or "FAIL <file>/<name>" followed by the
 * failed checks; tests/run counts those lines. A failed CHECK records the
 * failure and continues; REQUIRE returns from the test.
 *
 * T_SKIP("reason") marks the running test skipped (a part of it could not
 * run here): unless a check failed it prints "SKIP <file>/<name>: reason"
 * and is counted as skipped, never as passed. A T_FIXTURE in T_MAIN (an
 * engine set-up or clean-up step) runs like a test but is not one: it prints
 * "fixture <file>/<name>" and is counted only when it fails. Under CI=true
 * a T_SKIP is a failure instead.
 */
#ifndef RELAY_T_H
#define RELAY_T_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int t_failed_;
static char t_skip_[256];

#define TEST(name) static void name(void)

#define T_FAIL_(...)                                              \
	do {                                                      \
		fprintf(stdout, "  %s:%d: ", __FILE__, __LINE__); \
		fprintf(stdout, __VA_ARGS__);                     \
		fputc('\n', stdout);                              \
		t_failed_ = 1;                                    \
	} while (0)

#define T_SKIP(...) snprintf(t_skip_, sizeof t_skip_, __VA_ARGS__)

#define CHECK(cond)                                         \
	do {                                                \
		if (!(cond))                                \
			T_FAIL_("check failed: %s", #cond); \
	} while (0)

#define REQUIRE(cond)                                             \
	do {                                                      \
		if (!(cond)) {                                    \
			T_FAIL_("requirement failed: %s", #cond); \
			return;                                   \
		}                                                 \
	} while (0)

#define CHECK_STR(got, want)                                                                \
	do {                                                                                \
		const char *g_ = (got), *w_ = (want);                                       \
		if (!g_ || !w_ || strcmp(g_, w_) != 0)                                      \
			T_FAIL_("%s\n    got:  %s\n    want: %s", #got, g_ ? g_ : "(null)", \
				w_ ? w_ : "(null)");                                        \
	} while (0)

#define CHECK_INT(got, want)                                              \
	do {                                                              \
		long long g_ = (long long)(got), w_ = (long long)(want);  \
		if (g_ != w_)                                             \
			T_FAIL_("%s: got %lld, want %lld", #got, g_, w_); \
	} while (0)

struct t_case {
	const char *name;
	void (*fn)(void);
	int fixture;
};

#define T_CASE(fn) {#fn, fn, 0}
#define T_FIXTURE(fn) {#fn, fn, 1}

static inline int t_run_(const char *file, const struct t_case *cases, size_t n, int argc,
			 char **argv)
{
	int failures = 0;
	const char *base = strrchr(file, '/');
	base = base ? base + 1 : file;
	for (size_t i = 0; i < n; i++) {
		if (argc > 1 && strcmp(argv[1], cases[i].name) != 0)
			continue;
		t_failed_ = 0;
		t_skip_[0] = '\0';
		fflush(stdout);
		cases[i].fn();
		int len = (int)(strlen(base) - 2);
		/* Under CI=true nothing may be skipped (the test command installs
		 * and starts everything a test needs): a skip is a failure. */
		const char *ci = getenv("CI");
		if (t_skip_[0] && !t_failed_ && ci && strcmp(ci, "true") == 0) {
			printf("  would skip under CI=true, where nothing may be skipped: %s\n", t_skip_);
			t_failed_ = 1;
		}
		if (t_failed_)
			printf("FAIL %.*s/%s%s\n", len, base, cases[i].name,
			       cases[i].fixture ? " (fixture)" : "");
		else if (cases[i].fixture)
			printf("fixture %.*s/%s\n", len, base, cases[i].name);
		else if (t_skip_[0])
			printf("SKIP %.*s/%s: %s\n", len, base, cases[i].name, t_skip_);
		else
			printf("ok %.*s/%s\n", len, base, cases[i].name);
		failures += t_failed_;
	}
	fflush(stdout);
	return failures ? 1 : 0;
}

#define T_MAIN(...)                                                                            \
	int main(int argc, char **argv)                                                        \
	{                                                                                      \
		static const struct t_case cases_[] = {__VA_ARGS__};                           \
		return t_run_(__FILE__, cases_, sizeof cases_ / sizeof cases_[0], argc, argv); \
	}

#endif
