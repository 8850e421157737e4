/*
 * bench/validate: time and peak memory of validating the worst template.yaml
 * files this author could build, each at or past one of the bounds in
 * template.h (TEMPLATE_MAX_BYTES, _NODES, _EXPANDED_BYTES, _DEPTH, _LINE,
 * _ITEMS): aliases multiplied over many rules, one long text aliased 1,000
 * times, 20,000 distinct pattern paths, a 100,000-node
 * list, 50,000 keys, 30,000 anchors, deep nesting, long lines, many errors
 * and warnings, 1,000 schedules. Each case runs in its own child process
 * (template_parse, then pattern_set_new over its rules, as a reload does)
 * whose peak RSS is read from wait4(); the child is stopped after 30 s or
 * 4 GiB of address space, so the program also runs against older code that
 * does not bound these inputs.
 *
 * Targets: every case under 1 s and under 128 MiB of peak RSS.
 *
 * `validate -w DIR` writes each case to DIR/NAME.yaml instead (seeds for
 * fuzz_template at -max_len=1048576, or files for `relay function
 * validate`).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model/pattern.h"
#include "model/template.h"
#include "base/util.h"

#define LIMIT_S 30
#define LIMIT_AS (4ULL << 30)

#define HDR "runtime: python3.14\n"

/* 1,000 rules aliasing one 91,000-node pattern (32 KB). */
static void alias_rules(struct buf *b)
{
	buf_appendf(b, HDR "events:\n- handler: m.f\n  pattern: &big\n"
			   "    a: &l [1,1,1,1,1,1,1,1,1]\n");
	const char *names[] = {"l", "m", "n", "o"};
	for (int lv = 1; lv < 4; lv++) {
		buf_appendf(b, "    %c: &%s {", 'a' + lv, names[lv]);
		for (int k = 0; k < 10; k++)
			buf_appendf(b, "%sk%d: *%s", k ? ", " : "", k, names[lv - 1]);
		buf_appendf(b, "}\n");
	}
	buf_appendf(b, "    e: {k0: *o, k1: *o, k2: *o, k3: *o, k4: *o, k5: *o, k6: *o}\n");
	for (int i = 1; i < 1000; i++)
		buf_appendf(b, "- {handler: m.f, pattern: *big}\n");
}

/* 1,000 valid rules sharing one 90-node pattern by alias: just under the
 * node bound, every rule compiled and indexed. */
static void alias_fit(struct buf *b)
{
	buf_appendf(b, HDR "x: &p {t: [");
	for (int i = 0; i < 40; i++)
		buf_appendf(b, "%s%d", i ? ", " : "", i);
	buf_appendf(b, "], u: {v: [a, b, c], w: {prefix: [x, y]}}, n: {gt: 5}}\nevents:\n");
	for (int i = 0; i < 1000; i++)
		buf_appendf(b, "- {handler: m.f%d, pattern: *p}\n", i);
}

/* One rule with 21,110 required equalities, each at its own path (600
 * bytes of YAML through aliases), and 50 more rules sharing them. */
static void many_paths(struct buf *b)
{
	buf_appendf(b, HDR "events:\n- handler: m.f\n  pattern:\n"
			   "    v: &a0 {k0: [0], k1: [1], k2: [2], k3: [3], k4: [4], k5: [5], k6: "
			   "[6], k7: [7], k8: [8], k9: [9]}\n");
	for (int lv = 1; lv < 4; lv++) {
		buf_appendf(b, "    v%d: &a%d {", lv, lv);
		for (int k = 0; k < 10; k++)
			buf_appendf(b, "%sk%d: *a%d", k ? ", " : "", k, lv - 1);
		buf_appendf(b, "}\n");
	}
	buf_appendf(b, "    w: *a3\n");
	for (int r = 0; r < 50; r++)
		buf_appendf(b, "- {handler: m.g, pattern: {v: {k%d: [%d, 1.0, \"x\"]}}}\n", r % 10,
			    r);
}

/* One equality list of 99,950 values, 20 per line. */
static void big_list(struct buf *b)
{
	buf_appendf(b, HDR "events:\n- handler: m.f\n  pattern:\n    id: [");
	for (int i = 0; i < 99950; i++)
		buf_appendf(b, "%s%d", i ? (i % 20 ? "," : ",\n      ") : "", i);
	buf_appendf(b, "]\n");
}

/* 49,990 keys in one map (an unknown top-level key: only warned about). */
static void many_keys(struct buf *b)
{
	buf_appendf(b, HDR "events: [{handler: m.f, pattern: {a: [1]}}]\nx-data:\n");
	for (int i = 0; i < 49990; i++)
		buf_appendf(b, "  key%d: %d\n", i, i);
}

/* 30,000 anchors, each aliased once, in shuffled order. */
static void many_anchors(struct buf *b)
{
	buf_appendf(b, HDR "events: [{handler: m.f, pattern: {a: [1]}}]\nx-a:\n");
	for (int i = 0; i < 30000; i++)
		buf_appendf(b, "  - &a%d %d\n", i, i);
	buf_appendf(b, "x-b:\n");
	for (int i = 0; i < 30000; i++)
		buf_appendf(b, "  - *a%d\n", (int)(((long)i * 7919) % 30000));
}

/* A node at the depth bound, and 1,000 rules each aliasing a pattern
 * nested to PATTERN_MAX_DEPTH. */
static void deep(struct buf *b)
{
	buf_appendf(b, HDR "x-deep: ");
	for (int i = 0; i < TEMPLATE_MAX_DEPTH - 1; i++)
		buf_appendf(b, "{k%d: ", i);
	buf_appendf(b, "1");
	for (int i = 0; i < TEMPLATE_MAX_DEPTH - 1; i++)
		buf_appendf(b, "}");
	buf_appendf(b, "\nx-pattern: &d ");
	for (int i = 0; i < PATTERN_MAX_DEPTH - 1; i++)
		buf_appendf(b, "{k%d: ", i);
	buf_appendf(b, "[1]");
	for (int i = 0; i < PATTERN_MAX_DEPTH - 1; i++)
		buf_appendf(b, "}");
	buf_appendf(b, "\nevents:\n");
	for (int i = 0; i < 1000; i++)
		buf_appendf(b, "- {handler: m.f, pattern: {p: [%d], q: *d}}\n", i);
}

/* Lines of 64 KiB of "[:,:,...]", the most tokens libfyaml queues per
 * byte (past the node bound within two lines). */
static void long_lines(struct buf *b)
{
	buf_appendf(b, HDR "events: [{handler: m.f, pattern: {a: [1]}}]\nx:\n");
	for (int l = 0; l < 15; l++) {
		size_t start = b->len;
		buf_appendf(b, "- [");
		while (b->len - start < TEMPLATE_MAX_LINE - 3)
			buf_append(b, ":,", 2);
		buf_appendf(b, "]\n");
	}
}

/* The same past the line bound: one 1 MiB line of nested flow sequences
 * (before the line bound: 1.4 s and 355 MiB inside libfyaml). */
static void one_line(struct buf *b)
{
	buf_appendf(b, HDR "events: [{handler: m.f, pattern: {a: [1]}}]\nx: [[");
	while (b->len < TEMPLATE_MAX_BYTES - 8)
		buf_append(b, "1,", 2);
	buf_appendf(b, "1]]\n");
}

/* 30,000 invalid operands at the bottom of a 31-deep path of long keys:
 * one error line each, with the whole path. */
static void many_errors(struct buf *b)
{
	buf_appendf(b, HDR "events:\n- handler: m.f\n  pattern:\n    ");
	for (int i = 0; i < PATTERN_MAX_DEPTH - 1; i++)
		buf_appendf(b, "%s_%d%s: {", "a-very-long-field-name-to-make-each-error-path-long",
			    i, "-still-going-on-and-on-until-it-is-quite-long");
	buf_appendf(b, "x: {gt: [");
	for (int i = 0; i < 30000; i++)
		buf_appendf(b, "%sbad", i ? (i % 20 ? "," : ",\n      ") : "");
	buf_appendf(b, "]}");
	for (int i = 0; i < PATTERN_MAX_DEPTH - 1; i++)
		buf_appendf(b, "}");
	buf_appendf(b, "\n");
}

/* 1,000 rules with 30 unknown keys each: 30,000 warnings. */
static void many_warnings(struct buf *b)
{
	buf_appendf(b, HDR "events:\n");
	for (int i = 0; i < 1000; i++) {
		buf_appendf(b, "- handler: m.f\n  pattern: {a: [1]}\n");
		for (int k = 0; k < 30; k++)
			buf_appendf(b, "  unknown%d: %d\n", k, k);
	}
}

/* 1,000 schedules in as many time zones as there are, seconds fields. */
static void many_schedules(struct buf *b)
{
	static const char *const zones[] = {"UTC",
					    "Europe/Rome",
					    "America/New_York",
					    "Asia/Kolkata",
					    "Australia/Sydney",
					    "America/Sao_Paulo",
					    "Pacific/Chatham",
					    "Asia/Kathmandu"};
	buf_appendf(b, HDR "schedules:\n");
	for (int i = 0; i < TEMPLATE_MAX_ITEMS; i++)
		buf_appendf(b,
			    "- {handler: m.f, cron: \"*/%d 1-59/3 0-23 1-31 1-12 0-6\", timezone: "
			    "%s}\n",
			    1 + i % 59, zones[i % (sizeof zones / sizeof zones[0])]);
}

/* 1,000 env variables and 1,000 secrets (checked against each other). */
static void env_secrets(struct buf *b)
{
	buf_appendf(b, HDR "events: [{handler: m.f, pattern: {a: [1]}}]\nenv:\n");
	for (int i = 0; i < TEMPLATE_MAX_ITEMS; i++)
		buf_appendf(b, "  VAR_%d: value-%d\n", i, i);
	buf_appendf(b, "secrets:\n");
	for (int i = 0; i < TEMPLATE_MAX_ITEMS; i++)
		buf_appendf(b, "  SECRET_%d: secret-%d\n", i, i);
}

/* 1 MiB, nearly all of it in 64 KiB-line quoted scalars. */
static void big_scalars(struct buf *b)
{
	buf_appendf(b, HDR "events: [{handler: m.f, pattern: {a: [1]}}]\nenv:\n");
	for (int v = 0; b->len < TEMPLATE_MAX_BYTES - 70000; v++) {
		buf_appendf(b, "  V%d: \"", v);
		for (int i = 0; i < 65000; i++)
			buf_append(b, "x", 1);
		buf_appendf(b, "\"\n");
	}
}

/* One 600,010-byte block scalar under an anchor and uses aliases of it in
 * a pattern's list. */
static void aliased_text(struct buf *b, int uses)
{
	buf_appendf(b, HDR "x-big: &big |\n");
	for (int l = 0; l < 10; l++) {
		buf_appendf(b, "  ");
		for (int i = 0; i < 60000; i++)
			buf_append(b, "x", 1);
		buf_appendf(b, "\n");
	}
	buf_appendf(b, "events:\n- handler: m.f\n  pattern:\n    a:\n");
	for (int i = 0; i < uses; i++)
		buf_appendf(b, "    - *big\n");
}

/* 1,000 aliases: 611 KB and 2,000 nodes standing for 600 MB of text (past
 * TEMPLATE_MAX_EXPANDED_BYTES at the 6th). */
static void alias_text(struct buf *b)
{
	aliased_text(b, 1000);
}

/* 5 aliases: 3.6 MB of text, just under the bound, every copy made. */
static void alias_text_fit(struct buf *b)
{
	aliased_text(b, 5);
}

static const struct {
	const char *name;
	void (*make)(struct buf *b);
} cases[] = {
	{"alias-rules", alias_rules},
	{"alias-fit", alias_fit},
	{"paths", many_paths},
	{"big-list", big_list},
	{"keys", many_keys},
	{"anchors", many_anchors},
	{"deep", deep},
	{"long-lines", long_lines},
	{"one-line", one_line},
	{"errors", many_errors},
	{"warnings", many_warnings},
	{"schedules", many_schedules},
	{"env-secrets", env_secrets},
	{"big-scalars", big_scalars},
	{"alias-text", alias_text},
	{"alias-text-fit", alias_text_fit},
};

/* In the child: validate and compile; one result line into fd. */
static void child(int fd, const char *text, size_t len)
{
	struct rlimit rl = {LIMIT_AS, LIMIT_AS};
	setrlimit(RLIMIT_AS, &rl);
	alarm(LIMIT_S);
	int64_t t0 = now_mono_ns();
	struct strlist errors = {0}, warnings = {0};
	struct template *t = NULL;
	int rc = template_parse(text, len, &t, &errors, &warnings);
	int64_t t1 = now_mono_ns();
	size_t nrules = t ? t->nrules : 0;
	const struct pattern **pats = xcalloc(nrules + 1, sizeof *pats);
	for (size_t i = 0; i < nrules; i++)
		pats[i] = t->rules[i].pattern;
	struct pattern_set *set = pattern_set_new(pats, nrules);
	int64_t t2 = now_mono_ns();
	char first[61];
	snprintf_(first, sizeof first, "%s", errors.n ? errors.v[0] : "valid");
	dprintf(fd, "%d %.1f %.1f %zu %zu %zu %s\n", rc, (double)(t1 - t0) / 1e6,
		(double)(t2 - t1) / 1e6, nrules, errors.n, warnings.n, first);
	pattern_set_free(set);
	free(pats);
	template_free(t);
	strlist_free(&errors);
	strlist_free(&warnings);
}

static int write_cases(const char *dir)
{
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		struct buf b;
		buf_init(&b, 2 * TEMPLATE_MAX_BYTES);
		cases[c].make(&b);
		char *path = xasprintf("%s/%s.yaml", dir, cases[c].name);
		FILE *f = fopen(path, "wb");
		if (!f || fwrite(b.data, 1, b.len, f) != b.len || fclose(f) != 0) {
			perror(path);
			return 1;
		}
		free(path);
		buf_free(&b);
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "-w") == 0)
		return write_cases(argv[2]);
	int misses = 0;
	printf("%-14s %8s %9s %8s %9s  %s\n", "case", "bytes", "validate", "compile", "peak RSS",
	       "result");
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		struct buf b;
		buf_init(&b, 2 * TEMPLATE_MAX_BYTES);
		cases[c].make(&b);
		int p[2];
		if (pipe(p) < 0)
			return 1;
		fflush(stdout);
		pid_t pid = fork();
		if (pid == 0) {
			close(p[0]);
			child(p[1], b.data, b.len);
			_exit(0);
		}
		close(p[1]);
		char line[256] = "";
		FILE *f = fdopen(p[0], "r");
		if (!fgets(line, sizeof line, f))
			line[0] = '\0';
		fclose(f);
		int status = 0;
		struct rusage ru;
		wait4(pid, &status, 0, &ru);
		double rss = (double)ru.ru_maxrss / 1024;
		int rc = 0;
		double tv = 0, tc = 0;
		size_t nrules = 0, nerr = 0, nwarn = 0;
		int off = 0;
		if (WIFSIGNALED(status) || !*line ||
		    sscanf(line, "%d %lf %lf %zu %zu %zu %n", &rc, &tv, &tc, &nrules, &nerr, &nwarn,
			   &off) < 6) {
			printf("%-14s %8zu %9s %8s %7.0f M  stopped (%s)\n", cases[c].name, b.len,
			       "-", "-", rss,
			       WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM
				       ? "over "
					 "30 s"
				       : "out of memory or crashed");
			misses++;
		} else {
			line[strcspn(line, "\n")] = '\0';
			bool ok = tv + tc < 1000 && rss < 128;
			misses += !ok;
			printf("%-14s %8zu %7.1fms %6.1fms %7.1f M  %s%zu rules, %zu errors, %zu "
			       "warnings: %s\n",
			       cases[c].name, b.len, tv, tc, rss, ok ? "" : "MISS ", nrules, nerr,
			       nwarn, line + off);
		}
		buf_free(&b);
	}
	printf("targets: each case < 1 s and < 128 MiB peak RSS: %s\n", misses ? "MISSED" : "met");
	return 0;
}
