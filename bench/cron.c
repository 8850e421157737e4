/*
 * Next-occurrence throughput of Relay's cron evaluator on one core.
 *
 * For each zone and expression, chains cron_next() from a fixed instant
 * (each result is the next call's input, so nothing can be hoisted) for a
 * fixed number of calls, and prints calls per second. Sparse expressions
 * (yearly, Feb 29) are the costly ones: each call walks months or years.
 * The target is over 100,000 computations per second.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/cron.h"
#include "base/util.h"

#define CALLS 200000
#define TARGET 100000.0

static const char *const zones[] = {
	"UTC",		"Europe/Rome",	      "America/New_York", "America/Sao_Paulo",
	"Africa/Cairo", "Australia/Lord_Howe"};

static const char *const exprs[] = {
	"* * * * * *",	    "*/15 * * * *",   "0 3 * * *", "0 8 * * 1-5",
	"30 2 * * *",	    "0 0 13 * 5",     "0 0 1 1 *", "0 0 29 2 *",
	"*/10 0 9 * * 1-5", "5/10 1-3 * * *", "@hourly",   "0 0 31 * *",
};

int main(void)
{
	uint64_t sink = 0;
	double total_calls = 0, total_ns = 0, worst = 1e30;
	const char *worst_what = "";
	char worst_buf[160];

	printf("%-22s %-20s %14s\n", "zone", "cron", "calls/s");
	for (size_t zi = 0; zi < ARRAY_LEN(zones); zi++) {
		const struct tz *z;
		char *err;
		if (tz_load(zones[zi], &z, &err) != 0) {
			fprintf(stderr, "bench: %s\n", err);
			free(err);
			return 1;
		}
		double zone_calls = 0, zone_ns = 0;
		for (size_t ei = 0; ei < ARRAY_LEN(exprs); ei++) {
			struct cron *c;
			if (cron_parse(exprs[ei], &c, &err) != 0) {
				fprintf(stderr, "bench: %s\n", err);
				free(err);
				return 1;
			}
			/* Chains run from 2020 and restart past 2100 (sparse schedules). */
			int64_t start = 1577836800, t = start;
			int64_t t0 = now_mono_ns();
			for (int i = 0; i < CALLS; i++) {
				t = cron_next(c, z, t);
				if (t < 0 || t > 4102444800)
					t = start;
				sink += (uint64_t)t;
			}
			double ns = (double)(now_mono_ns() - t0);
			double rate = CALLS / (ns / 1e9);
			printf("%-22s %-20s %14.0f\n", zones[zi], exprs[ei], rate);
			if (rate < worst) {
				worst = rate;
				snprintf_(worst_buf, sizeof worst_buf, "%s in %s", exprs[ei],
					  zones[zi]);
				worst_what = worst_buf;
			}
			zone_calls += CALLS;
			zone_ns += ns;
			cron_free(c);
		}
		printf("%-22s %-20s %14.0f\n", zones[zi], "(all)", zone_calls / (zone_ns / 1e9));
		total_calls += zone_calls;
		total_ns += zone_ns;
	}
	double overall = total_calls / (total_ns / 1e9);
	printf("\noverall: %.0f next-occurrence computations/s on one core (target %.0f): %.1fx\n",
	       overall, TARGET, overall / TARGET);
	printf("slowest: %.0f/s (%s): %.1fx the target\n", worst, worst_what, worst / TARGET);
	printf("(checksum %" PRIu64 ")\n", sink);
	return 0;
}
