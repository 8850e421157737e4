/*
 * Relay's small unit-test runner. A test file defines test functions with
 * TEST(name), lists them in T_MAIN(...), and uses the CHECK macros. Each
 * test prints "ok <file>/<name>" or "FAIL <file>/<name>" followed by the
 * failed checks; tests/run counts those lines. A failed CHECK records the
 * failure and continues; REQUIRE returns from the test.
 */
#ifndef RELAY_T_H
#define RELAY_T_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int t_failed_;

#define TEST(name) static void name(void)

#define T_FAIL_(...)                                              \
	do {                                                      \
		fprintf(stdout, "  %s:%d: ", __FILE__, __LINE__); \
		fprintf(stdout, __VA_ARGS__);                     \
		fputc('\n', stdout);                              \
		t_failed_ = 1;                                    \
	} while (0)

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
};

#define T_CASE(fn)      \
	{               \
#fn, fn \
	}

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
		fflush(stdout);
		cases[i].fn();
		printf("%s %.*s/%s\n", t_failed_ ? "FAIL" : "ok", (int)(strlen(base) - 2), base,
		       cases[i].name);
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
