/*
 * Fuzzes template loading from bytes: YAML parsing, core-schema typing,
 * every field rule, pattern compilation, cron and time-zone validation.
 * Whatever the input, template_parse either succeeds or reports at least
 * one error, and frees everything. Besides that it checks what
 * `relay function validate` users rely on:
 *
 * - Validation is deterministic: the same bytes parsed twice give the same
 *   verdict and the very same error and warning lines (inputs up to 64 KiB;
 *   a larger one is parsed once, since under this file's slow-unwinding
 *   ASan a worst-case template of several hundred KiB costs seconds per
 *   parse, and long runs time a unit out at 2 s).
 * - Messages are bounded: at most TEMPLATE_MAX_MESSAGES error lines and as
 *   many warnings, plus one "N more ... not shown" line each, every line
 *   shorter than 16 KiB (a path grows at most ~90 bytes a level).
 * - A valid template's rules each have a pattern (a failed allocation is
 *   an error, never a rule without one) and a handler template_handler_valid()
 *   accepts, and they build a pattern set (pattern_set_new, the sorting
 *   index a reload builds). Seeds alias one long text many times, past the
 *   bound on text with aliases expanded and just under it.
 * - The fuzzed patterns match: each valid template's rules are matched
 *   against a few fixed events (arrays, nested objects, addresses, numbers,
 *   cased text), and the set agrees with rule-by-rule evaluation.
 * - Every error and warning names where it is: it starts with a path into
 *   the template ("events[1].timeout: ", "events[0].pattern.a[\"b c\"]: ",
 *   "secrets.TOKEN: ", "template.yaml: " for the whole file) or, for YAML
 *   syntax, "invalid YAML at line N, column M: ", followed by a message.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "io/event.h"
#include "model/pattern.h"
#include "model/template.h"

#define TWICE_MAX (64 * 1024)
#define LINE_MAX_BYTES (16 * 1024)

/* The fields a path may start with: template.yaml's top-level keys, the
 * whole file, and "template" for a problem with the top-level map. */
static const char *const roots[] = {"template.yaml", "template",    "runtime", "concurrency",
				    "events",	     "schedules",   "env",     "secrets",
				    "warm",	     "match_arrays", "retry",   "key_concurrency"};

/* Length of a quoted key "..." at s, or 0; "..." follows the closing quote
 * when the key was cut. Pattern paths escape '"' and '\\' (escapes true);
 * an unknown-key warning shows the key with '"' replaced, unescaped. */
static size_t quoted_len(const char *s, int escapes)
{
	if (*s != '"')
		return 0;
	for (size_t i = 1; s[i]; i++) {
		if (escapes && s[i] == '\\' && s[i + 1]) {
			i++;
		} else if (s[i] == '"') {
			i++;
			return strncmp(s + i, "...", 3) == 0 ? i + 3 : i;
		}
	}
	return 0;
}

static int word_char(unsigned char c)
{
	return c >= 0x80 || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '$';
}

/* Does line start with "<path>: <message>" or a YAML position? A warning
 * (always about an unknown key) may also end its path with the key as
 * shown: `events[0]."patern": unknown key, ignored`, or start with it for a
 * top-level key. */
static int names_a_place(const char *line, int warning)
{
	int l, c, n = 0;
	if (sscanf(line, "invalid YAML at line %d, column %d: %n", &l, &c, &n) == 2 && n > 0)
		return line[n] != '\0';
	const char *p = NULL;
	for (size_t i = 0; i < sizeof roots / sizeof roots[0]; i++) {
		size_t rl = strlen(roots[i]);
		if (strncmp(line, roots[i], rl) == 0 &&
		    (line[rl] == ':' || line[rl] == '.' || line[rl] == '[')) {
			p = line + rl;
			break;
		}
	}
	if (!p && warning && quoted_len(line, 0))
		p = line + quoted_len(line, 0);
	if (!p)
		return 0;
	/* Segments: .word, [index] or ["quoted key"]. */
	while (*p != ':') {
		if (*p == '.' && warning && quoted_len(p + 1, 0)) {
			p += 1 + quoted_len(p + 1, 0);
		} else if (*p == '.') {
			size_t k = 1;
			while (word_char((unsigned char)p[k]))
				k++;
			if (k == 1)
				return 0;
			p += k;
		} else if (*p == '[' && p[1] >= '0' && p[1] <= '9') {
			size_t k = 1;
			while (p[k] >= '0' && p[k] <= '9')
				k++;
			if (p[k] != ']')
				return 0;
			p += k + 1;
		} else if (*p == '[') {
			size_t k = quoted_len(p + 1, 1);
			if (!k || p[1 + k] != ']')
				return 0;
			p += k + 2;
		} else {
			return 0;
		}
	}
	return p[1] == ' ' && p[2] != '\0';
}

/* Events for the fuzzed patterns, with the shapes the operators look at. */
static const char *const event_texts[] = {
	"{\"a\":\"x\",\"b\":1,\"c\":[1,\"x\",null,{\"d\":\"e\"}],\"ip\":\"10.1.2.3\"}",
	"{\"s\":\"Stra\\u00dfe\",\"t\":\"dir/a/x.png\",\"n\":5.5,\"ip\":\"2001:db8::1\","
	"\"items\":[{\"sku\":\"A\",\"qty\":2},{\"sku\":\"B\"}],\"e\":{\"f\":{\"g\":[true]}}}",
	"{\"a\":[],\"b\":{},\"c\":\"\",\"n\":-0,\"m\":1e300,\"ip\":\"::ffff:10.0.0.1\"}",
};

static void check_matching(const struct template *t, const struct pattern **pats,
			   const struct pattern_set *set)
{
	static struct event *events[sizeof event_texts / sizeof event_texts[0]];
	if (!events[0])
		for (size_t i = 0; i < sizeof event_texts / sizeof event_texts[0]; i++)
			CHECK(event_parse_json(event_texts[i], strlen(event_texts[i]), &events[i],
					       NULL) == EVENT_OK,
			      "fixed event %zu does not parse", i);
	uint32_t *ids = calloc(t->nrules + 1, sizeof *ids);
	if (!ids)
		return;
	for (size_t e = 0; e < sizeof event_texts / sizeof event_texts[0]; e++) {
		size_t n = pattern_set_match(set, events[e], 0, ids), k = 0;
		for (size_t i = 0; i < t->nrules; i++) {
			if (!pattern_match(pats[i], events[e], 0))
				continue;
			CHECK(k < n && ids[k] == i,
			      "event %zu: rule %zu matches alone, not in the set", e, i);
			k++;
		}
		CHECK(k == n, "event %zu: the set matches %zu rules, rule by rule %zu", e, n, k);
	}
	free(ids);
}

static void parse(const uint8_t *data, size_t size, int *rc, struct strlist *errors,
		  struct strlist *warnings, bool build)
{
	struct template *t = NULL;
	*rc = template_parse((const char *)data, size, &t, errors, warnings);
	CHECK((*rc == 0) == (t != NULL), "template_parse returned %d with template %p", *rc,
	      (void *)t);
	CHECK(*rc == 0 || errors->n > 0, "template_parse failed without an error line");
	CHECK(*rc != 0 || errors->n == 0, "template_parse succeeded with %zu error lines",
	      errors->n);
	CHECK(errors->n <= TEMPLATE_MAX_MESSAGES + 1, "%zu error lines", errors->n);
	CHECK(warnings->n <= TEMPLATE_MAX_MESSAGES + 1, "%zu warning lines", warnings->n);
	if (t && build) {
		CHECK(t->nrules <= TEMPLATE_MAX_ITEMS, "%zu rules", t->nrules);
		for (size_t i = 0; i < t->nrules; i++) {
			CHECK(t->rules[i].pattern != NULL, "rule %zu has no pattern", i);
			CHECK(template_handler_valid(t->rules[i].handler,
						     strlen(t->rules[i].handler), NULL),
			      "rule %zu: template_handler_valid refuses its handler", i);
		}
		for (size_t i = 0; i < t->nschedules; i++)
			CHECK(template_handler_valid(t->schedules[i].handler,
						     strlen(t->schedules[i].handler), NULL),
			      "schedule %zu: template_handler_valid refuses its handler", i);
		const struct pattern **pats = calloc(t->nrules + 1, sizeof *pats);
		for (size_t i = 0; pats && i < t->nrules; i++)
			pats[i] = t->rules[i].pattern;
		if (pats) {
			struct pattern_set *set = pattern_set_new(pats, t->nrules);
			check_matching(t, pats, set);
			pattern_set_free(set);
		}
		free(pats);
	}
	template_free(t);
}

static void same_lines(const struct strlist *a, const struct strlist *b, const char *what)
{
	CHECK(a->n == b->n, "validating twice gave %zu then %zu %s", a->n, b->n, what);
	for (size_t i = 0; i < a->n; i++)
		CHECK(strcmp(a->v[i], b->v[i]) == 0, "validating twice gave %s \"%s\" then \"%s\"",
		      what, a->v[i], b->v[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct strlist errors = {0}, warnings = {0}, errors2 = {0}, warnings2 = {0};
	int rc, rc2;
	parse(data, size, &rc, &errors, &warnings, true);
	if (size <= TWICE_MAX) {
		parse(data, size, &rc2, &errors2, &warnings2, false);
		CHECK(rc == rc2, "validating twice gave %d then %d", rc, rc2);
		same_lines(&errors, &errors2, "errors");
		same_lines(&warnings, &warnings2, "warnings");
	}
	for (size_t i = 0; i < errors.n; i++) {
		CHECK(names_a_place(errors.v[i], 0), "error names no path: \"%s\"", errors.v[i]);
		CHECK(strlen(errors.v[i]) < LINE_MAX_BYTES, "an error line of %zu bytes",
		      strlen(errors.v[i]));
	}
	for (size_t i = 0; i < warnings.n; i++) {
		CHECK(names_a_place(warnings.v[i], 1), "warning names no path: \"%s\"",
		      warnings.v[i]);
		CHECK(strlen(warnings.v[i]) < LINE_MAX_BYTES, "a warning line of %zu bytes",
		      strlen(warnings.v[i]));
	}
	strlist_free(&errors);
	strlist_free(&warnings);
	strlist_free(&errors2);
	strlist_free(&warnings2);
	return 0;
}

/* libfyaml's known leak (tests/fuzz/lsan.supp) is suppressed by a frame
 * inside the library, which only whole allocation stacks show: Debian's
 * libfyaml has no frame pointers, so the fast unwinder stops at its first
 * frame. A short slow unwind keeps the cost bearable. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "fast_unwind_on_malloc=0:malloc_context_size=8";
}
