/*
 * bench/match: decode + match throughput for one ~1 KB event against 3, 30,
 * 300 and 3000 rules, on one core.
 *
 * The rules mimic a growing deployment: every rule pins table_name (the
 * number of distinct tables grows with the rule count, about ten rules per
 * table) and adds a mix of event_name equality, prefix, nested fields,
 * numeric and now() comparisons, exists, and a multi-value equality on a
 * nested field. Each iteration decodes the event text (event_parse_json),
 * runs pattern_set_match and frees the event, as the consumer does.
 *
 * Targets: >= 200,000 events/s at 300 rules, and the 3000-rule
 * figure at least half the 30-rule figure.
 *
 * Last, the shape of bench/many-functions.sh: 200 functions x 5
 * rules, rule r pinning table_name to table_<r % 100>, so the same event
 * matches 10 of the 1000 rules.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/event.h"
#include "model/pattern.h"
#include "base/util.h"

static const char event_text[] =
	"{\"event_name\":\"INSERT\",\"table_name\":\"table_1\",\"event_id\":\"7d1c0f6e-9a8b-4c3d-"
	"8e2f-1a2b3c4d5e6f\",\"source\":\"dynamodb\",\"region\":\"eu-west-1\",\"created_at\":"
	"\"2026-09-13T22:47:41.123456+02:00\",\"new_image\":{\"id\":\"user_12345\",\"name\":"
	"\"Ada Lovelace\",\"email\":\"ada@example.com\",\"age\":36,\"score\":98.5,\"active\":"
	"true,\"created_at\":\"2026-09-13T20:47:00Z\",\"tags\":[\"admin\",\"beta\",\"early\"],"
	"\"address\":{\"street\":\"12 Analytical Engine Road\",\"city\":\"London\",\"country\":"
	"\"GB\",\"zip\":\"NW1 6XE\"},\"preferences\":{\"theme\":\"dark\",\"lang\":\"en\","
	"\"notifications\":{\"email\":true,\"sms\":false,\"push\":true}}},\"old_image\":{\"id\":"
	"\"user_12345\",\"name\":\"Ada King\",\"email\":\"ada.king@example.com\",\"age\":35,"
	"\"score\":97.25,\"active\":true,\"created_at\":\"2025-09-13T20:47:00Z\",\"tags\":["
	"\"admin\",\"beta\"],\"address\":{\"street\":\"12 Analytical Engine Road\",\"city\":"
	"\"London\",\"country\":\"GB\",\"zip\":\"NW1 6XE\"}},\"metadata\":{\"trace_id\":"
	"\"0af7651916cd43dd8448eb211c80319c\",\"span_id\":\"b7ad6b7169203331\",\"attempt\":1,"
	"\"producer\":\"users-service\",\"version\":\"1.4.2\",\"sequence\":184467440737095516}}";

/* 2026-09-13T20:50:00Z */
#define NOW_NS 1789332600000000000LL

static json_t *make_rule(int i, int ntables)
{
	static const char *const names[] = {"INSERT", "MODIFY", "REMOVE"};
	char table[32], next[32];
	snprintf_(table, sizeof table, "table_%d", i % ntables);
	snprintf_(next, sizeof next, "table_%d", (i + 1) % ntables);
	const char *name = names[(i / ntables) % 3];
	switch (i % 6) {
	case 0: return json_pack("{s:[s],s:[s]}", "event_name", name, "table_name", table);
	case 1:
		return json_pack("{s:[s],s:{s:{s:[s]}}}", "table_name", table, "new_image", "id",
				 "prefix", "user_");
	case 2:
		return json_pack("{s:[s],s:{s:{s:i}},s:[s]}", "table_name", table, "new_image",
				 "age", "gte", 18, "event_name", name);
	case 3:
		return json_pack("{s:[s],s:{s:{s:s}}}", "table_name", table, "new_image",
				 "created_at", "gt", "now()-5m");
	case 4:
		return json_pack("{s:[s],s:[s,s],s:{s:{s:[s,s]}}}", "source", "dynamodb",
				 "table_name", table, next, "new_image", "address", "country", "GB",
				 "FR");
	default:
		return json_pack("{s:[s],s:{s:{s:[s]},s:{s:f}},s:{s:{s:b}}}", "table_name", table,
				 "metadata", "producer", "prefix", "users-", "attempt", "lt", 5.0,
				 "old_image", "name", "exists", 1);
	}
}

/* bench/many-functions.sh's rule r (of 200 x 5). */
static json_t *make_many_rule(int i, int ntables)
{
	char table[32];
	snprintf_(table, sizeof table, "table_%d", i % 100);
	return json_pack("{s:[s]}", "table_name", table);
}

static double run_with(json_t *(*make)(int, int), int nrules, size_t *matches, size_t *unindexed)
{
	int ntables = nrules / 10 < 3 ? 3 : nrules / 10;
	struct pattern **pats = xcalloc((size_t)nrules, sizeof *pats);
	for (int i = 0; i < nrules; i++) {
		json_t *j = make(i, ntables);
		struct buf errs;
		buf_init(&errs, 4096);
		if (!j || pattern_compile(j, "bench", &pats[i], &errs) != 0) {
			fprintf(stderr, "bench rule %d: %s\n", i, errs.data ? errs.data : "pack");
			exit(1);
		}
		buf_free(&errs);
		json_decref(j);
	}
	struct pattern_set *set =
		pattern_set_new((const struct pattern *const *)pats, (size_t)nrules);
	*unindexed = pattern_set_unindexed(set);
	uint32_t *ids = xmalloc((size_t)nrules * sizeof *ids);
	size_t len = sizeof event_text - 1;

	long iters = 0;
	int64_t start = now_mono_ns(), elapsed = 0;
	while (elapsed < 1000000000LL) {
		for (int k = 0; k < 1000; k++) {
			struct event *ev = NULL;
			if (event_parse_json(event_text, len, &ev, NULL) != EVENT_OK)
				abort();
			*matches = pattern_set_match(set, ev, NOW_NS, ids);
			event_free(ev);
		}
		iters += 1000;
		elapsed = now_mono_ns() - start;
	}
	pattern_set_free(set);
	for (int i = 0; i < nrules; i++)
		pattern_free(pats[i]);
	free(pats);
	free(ids);
	return (double)iters / ((double)elapsed / 1e9);
}

static double run(int nrules, size_t *matches, size_t *unindexed)
{
	return run_with(make_rule, nrules, matches, unindexed);
}

int main(void)
{
	static const int sizes[] = {3, 30, 300, 3000};
	double rate[4];
	printf("event: %zu bytes, decode + match on one core\n", sizeof event_text - 1);
	for (int i = 0; i < 4; i++) {
		size_t matches = 0, unindexed = 0;
		rate[i] = run(sizes[i], &matches, &unindexed);
		printf("%5d rules: %9.0f events/s  (%zu matches per event, %zu unindexed rules)\n",
		       sizes[i], rate[i], matches, unindexed);
	}
	printf("3000/30 ratio: %.2f (target >= 0.50)\n", rate[3] / rate[1]);
	printf("300 rules: %s 200000 events/s target\n", rate[2] >= 200000 ? "meets" : "MISSES");
	size_t m = 0, u = 0;
	double r = run_with(make_many_rule, 1000, &m, &u);
	printf("200 functions x 5 rules: %9.0f events/s, %.2f us per event decode + match  (%zu "
	       "matches per event, %zu unindexed rules)\n",
	       r, 1e6 / r, m, u);
	return 0;
}
