/*
 * relay schedule next "<cron>" [--timezone TZ] [--from RFC3339] [-n N]
 *
 * Prints the human-readable description, then the next N occurrences
 * strictly after --from (default: now), one per line: the UTC instant and
 * the wall time in the zone with its offset, both RFC 3339 (a zero offset
 * is written "Z", as Go's time.RFC3339 does). Uses exactly the evaluator
 * `relay start` schedules with (cron.h, tz.h); touches no Redis, Docker or
 * state database.
 *
 * Exit status: 0; 1 for an invalid expression or zone (one line naming
 * it); 2 for a usage error (bad option, -n not in 1..1000, malformed
 * --from).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cmd.h"
#include "model/cron.h"
#include "base/duration.h"
#include "base/rfc3339.h"
#include "base/tz.h"
#include "base/util.h"

#define NEXT_DEFAULT 5
#define NEXT_MAX 1000

/* The instant t as RFC 3339 wall time in zone z with its offset. */
static void format_local(const struct tz *z, int64_t t, char *out, size_t n)
{
	struct tz_tm tm;
	tz_localtime(z, t, &tm);
	char off[16] = "Z";
	if (tm.offset != 0) {
		long a = tm.offset < 0 ? -tm.offset : tm.offset;
		snprintf_(off, sizeof off, "%c%02ld:%02ld", tm.offset < 0 ? '-' : '+', a / 3600,
			  a / 60 % 60);
	}
	snprintf_(out, n, "%04" PRId64 "-%02d-%02dT%02d:%02d:%02d%s", tm.year, tm.mon, tm.mday,
		  tm.hour, tm.min, tm.sec, off);
}

static int usage_fail(const struct cmd *self, const char *what, const char *value)
{
	fprintf(stderr, "relay %s: %s: %s\n", self->words, what, value);
	cmd_usage(self, stderr);
	return 2;
}

static int next_exec(const struct cmd *self, const struct cmd_args *args, const struct config *cfg)
{
	const char *zone = cmd_opt(args, "--timezone"), *from = cmd_opt(args, "--from");
	const char *count = cmd_opt(args, "-n");

	int64_t n = NEXT_DEFAULT;
	if (count && (parse_int64(count, &n) < 0 || n < 1 || n > NEXT_MAX))
		return usage_fail(self, "-n must be an integer from 1 to 1000", count);
	int64_t after = now_wall_ns() / NS_PER_SEC;
	if (from) {
		int64_t sec;
		int32_t nsec;
		if (rfc3339_parse(from, strlen(from), &sec, &nsec) < 0)
			return usage_fail(
				self,
				"--from must be an RFC 3339 time such as 2026-03-29T00:00:00Z",
				from);
		/* Occurrences are whole seconds: strictly after sec.nsec is
		 * strictly after sec. */
		after = sec;
	}

	int rc = 1;
	struct cron *c = NULL;
	char *err = NULL, *desc = NULL;
	const struct tz *z = tz_utc();
	struct buf out;
	buf_init(&out, 1 << 20);
	if (cron_parse(args->pos[0], &c, &err) < 0) {
		rc = cmd_fail("%s", err);
		goto done;
	}
	if (zone && tz_load(zone, &z, &err) < 0) {
		rc = cmd_fail("--timezone: %s", err);
		goto done;
	}
	desc = cron_describe(c);
	buf_appendf(&out, "Description: %s\n", desc ? desc : "(none)");
	for (int64_t i = 0; i < n; i++) {
		int64_t t = cron_next(c, z, after);
		if (t < 0)
			break;
		char utc[RFC3339_STR_MAX], local[64];
		rfc3339_format_utc(t * NS_PER_SEC, utc);
		format_local(z, t, local, sizeof local);
		buf_appendf(&out, "%s  %s\n", utc, local);
		after = t;
	}
	if (fwrite(out.data, 1, out.len, stdout) != out.len || fflush(stdout) != 0) {
		rc = cmd_fail("%s: write: output error", self->words);
		goto done;
	}
	rc = 0;
done:
	buf_free(&out);
	free(desc);
	free(err);
	cron_free(c);
	return rc;
}

const struct cmd cmd_schedule_next = {
	.words = "schedule next",
	.args = "\"<cron>\" [--timezone TZ] [--from RFC3339] [-n N]",
	.summary = "print the next occurrences of a cron expression",
	.opts = (const struct cmd_opt[]){{"--timezone", NULL, true},
					 {"--from", NULL, true},
					 {"-n", NULL, true},
					 {NULL}},
	.minpos = 1,
	.maxpos = 1,
	.help = "Prints the expression's description, then its next N occurrences (default 5, at "
		"most\n"
		"1000) strictly after --from (default: now), one per line: the UTC instant and "
		"the\n"
		"local time in --timezone (default UTC) with its offset, both RFC 3339:\n"
		"\n"
		"  $ relay schedule next \"30 2 * * *\" --timezone Europe/Rome --from "
		"2026-03-28T12:00:00Z "
		"-n 2\n"
		"  Description: At 02:30\n"
		"  2026-03-29T01:00:00Z  2026-03-29T03:00:00+02:00\n"
		"  2026-03-30T00:30:00Z  2026-03-30T02:30:00+02:00\n"
		"\n"
		"An invalid expression or zone exits 1 with a message naming it; usage errors exit "
		"2.\n",
	.touches = 0,
	.exec = next_exec,
};
