/*
 * libFuzzer target: arbitrary bytes as a cron expression. Valid expressions
 * are described and evaluated a few times in UTC and in a DST zone, from an
 * instant taken from the input, so the search and the zone arithmetic see
 * arbitrary starting points too.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cron.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const zones[] = {"Europe/Rome", "America/Sao_Paulo", "Africa/Cairo",
					    "Australia/Lord_Howe"};
	if (size > 2 * CRON_EXPR_MAX)
		return 0;
	/* The first 8 bytes, when present, pick the starting instant. */
	uint64_t seed = 0;
	if (size > 8) {
		memcpy(&seed, data, 8);
		data += 8;
		size -= 8;
	}
	char *expr = xstrndup((const char *)data, size);
	struct cron *c = NULL;
	char *err = NULL;
	if (cron_parse(expr, &c, &err) != 0) {
		if (!err || strncmp(err, "cron ", 5) != 0)
			abort(); /* every failure carries a message */
		free(err);
		free(expr);
		return 0;
	}
	if (err)
		abort();
	char *d = cron_describe(c);
	free(d);

	const struct tz *z;
	char *zerr;
	if (tz_load(zones[seed % 4], &z, &zerr) != 0)
		abort();
	/* 1970 .. ~2230, plus the edges of the domain. */
	int64_t starts[] = {(int64_t)(seed % 8200000000ULL), 0, 253402300799 - 86400};
	for (size_t s = 0; s < 3; s++) {
		int64_t tu = starts[s], tzt = starts[s];
		for (int i = 0; i < 4; i++) {
			int64_t nu = cron_next(c, NULL, tu);
			int64_t nz = cron_next(c, z, tzt);
			/* A parsed expression always fires within the search window,
			 * except when the window runs past year 9999. */
			if ((nu != -1 && nu <= tu) || (nz != -1 && nz <= tzt))
				abort();
			if ((nu == -1 || nz == -1) && s == 0 && tu < 4102444800)
				abort();
			if (nu == -1 || nz == -1)
				break;
			tu = nu;
			tzt = nz;
		}
	}
	cron_free(c);
	free(expr);
	return 0;
}
