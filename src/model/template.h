/*
 * template.yaml: parsing and full validation.
 *
 * The YAML is read by yaml.c (libfyaml's parser, bounded) and typed with the YAML 1.2 core schema
 * (an explicit tag wins; any quoted scalar is a string; plain scalars are
 * null/bool/int/float/string by the core-schema patterns), so `2` is an
 * integer, `"2"` a string, `1.5` a float and `true` a boolean. Every
 * problem is collected, each as one line starting with the path of the
 * offending field ("events[1].timeout: 6m exceeds the maximum of 5m");
 * unknown keys are warnings ("events[0].patern: unknown key, ignored").
 * A parsed struct template is immutable and may be shared across threads.
 */
#ifndef RELAY_TEMPLATE_H
#define RELAY_TEMPLATE_H

#include <jansson.h>
#include <stdint.h>

#include "base/strlist.h"
#include "base/tz.h"
#include "base/util.h"
#include "model/cron.h"
#include "model/pattern.h"
#include "model/keyconc.h"
#include "model/retry.h"
#include "model/runtime.h"

/*
 * Cost model of template.yaml, an input from whoever can push functions:
 *
 *   bytes  at most TEMPLATE_MAX_BYTES (template_parse; function.c reads no
 *          more), valid UTF-8, no NUL byte;
 *   nodes  at most TEMPLATE_MAX_NODES YAML nodes in the whole file (rules,
 *          schedules, env, secrets and unknown keys together; keys count),
 *          an alias counting as every node it stands for;
 *   text   at most TEMPLATE_MAX_EXPANDED_BYTES bytes of scalar text in the
 *          whole file (keys count), an alias counting as all the text of
 *          the node it stands for: what the walks below copy (a pattern's
 *          jansson strings, then its compiled operands; env values) is
 *          bounded by it, so one 600 KB scalar aliased 1,000 times (600 MB
 *          of copies) is refused, not built;
 *   depth  at most TEMPLATE_MAX_DEPTH nested collections, aliases expanded;
 *   lines  at most TEMPLATE_MAX_LINE bytes each (libfyaml queues a whole
 *          line's tokens while an implicit key may be pending: ~400 bytes
 *          of memory per byte of line);
 *   items  at most TEMPLATE_MAX_ITEMS rules, schedules, env and secrets
 *          entries each;
 *   output at most TEMPLATE_MAX_MESSAGES error lines and as many warnings
 *          (PATTERN_MAX_MESSAGES per pattern), each with a path of at most
 *          ~90 bytes per level.
 * yaml.c checks lines before parsing, nodes, text and depth at each YAML event,
 * before the node is allocated and before any expansion could be: an alias
 * shares the anchored node, whose expanded size is computed once. Later
 * step (typing, the pattern's JSON, pattern_compile, pattern_set_new) is
 * O(nodes · log nodes) in time and O(nodes) in memory over that bounded
 * tree, duplicate keys and alias lookups included (balanced trees, no
 * linear rescans), and O(text) in the bytes it copies. Worst case measured
 * by bench/validate: under 1 s and 128 MiB of peak RSS.
 *
 * A failed allocation on the way (jansson's) is an error of the rule it
 * was for ("... out of memory ..."), never a rule without a pattern.
 */
#define TEMPLATE_MAX_BYTES (1024 * 1024)
#define TEMPLATE_MAX_NODES 100000
#define TEMPLATE_MAX_EXPANDED_BYTES (4 * 1024 * 1024)
#define TEMPLATE_MAX_DEPTH 64
#define TEMPLATE_MAX_LINE (64 * 1024)
#define TEMPLATE_MAX_ITEMS 1000
/* Error lines and warning lines kept per template (the rest are counted). */
#define TEMPLATE_MAX_MESSAGES 100
/* Defaults and limits of the fields; the messages quote these. */
#define TEMPLATE_DEFAULT_CONCURRENCY 2
#define TEMPLATE_DEFAULT_TIMEOUT_NS (6LL * 1000000000LL)
#define TEMPLATE_MAX_TIMEOUT_MINUTES 5
#define TEMPLATE_MAX_TIMEOUT_NS (TEMPLATE_MAX_TIMEOUT_MINUTES * 60 * 1000000000LL)
/* Bytes in a handler name (template_handler_valid says what they may be). */
#define TEMPLATE_MAX_HANDLER 255
#define TEMPLATE_DEFAULT_RETRIES 4
#define TEMPLATE_MAX_RETRIES 1000
/* warm: (docs/template.md, "Warm containers"). */
#define TEMPLATE_DEFAULT_WARM_IDLE_NS (60LL * 1000000000LL)
#define TEMPLATE_MIN_WARM_IDLE_NS (1LL * 1000000000LL)
#define TEMPLATE_MAX_WARM_IDLE_NS (3600LL * 1000000000LL)
#define TEMPLATE_DEFAULT_WARM_MAX_USES 1000
#define TEMPLATE_MAX_WARM_MAX_USES 100000

struct rule {
	char *handler;	/* "events.created.handler" */
	char *module;	/* "events.created" */
	char *function; /* "handler" */
	struct pattern *pattern;
	int64_t timeout_ns;
	int retries;
	/* The template's top-level retry: with the rule's own keys over it
	 * (retry_policy_merge puts the built-in defaults under it). */
	struct retry_policy retry;
	int index; /* position in events[] */
};

struct schedule {
	char *handler;
	char *module;
	char *function;
	char *cron_expr;
	struct cron *cron;
	const struct tz *tz; /* shared, never freed */
	char *timezone;	     /* as written, "UTC" when omitted */
	int64_t timeout_ns;
	int retries;
	struct retry_policy retry; /* as struct rule's */
	int index;
};

struct env_var {
	char *name;
	char *value; /* env: the literal text; secrets: the reference name */
};

struct template
{
	const struct runtime *runtime;
	int64_t concurrency;
	struct rule *rules;
	size_t nrules;
	struct schedule *schedules;
	size_t nschedules;
	struct env_var *env;
	size_t nenv;
	struct env_var *secrets;
	size_t nsecrets;
	/* warm: present (a mapping, possibly {}): the function's invocations
	 * run in warm containers (warm.h), each retired after warm_idle_ns
	 * without an invocation or after warm_max_uses of them. Absent: false,
	 * one fresh container per invocation as always. */
	bool warm;
	int64_t warm_idle_ns;
	int64_t warm_max_uses;
	/* retry: the top level's keys (retry.h); the rules' hold it merged. */
	struct retry_policy retry;
	/* key_concurrency: (keyconc.h) key.path NULL when absent. */
	struct keyconc key;
	/* match_arrays: elements (docs/template.md, "Arrays in events"): the
	 * rules' patterns were compiled with PATTERN_ARRAYS_ELEMENTS. */
	bool match_arrays_elements;
};

/*
 * Parses and validates text[0..len). Returns 0 and a new template in *out,
 * or -1 with at least one line in errors (and *out NULL). Warnings are
 * added either way. Never crashes on any input.
 */
int template_parse(const char *text, size_t len, struct template **out, struct strlist *errors,
		   struct strlist *warnings);
void template_free(struct template *t);

/*
 * The handler rule, the only place it is decided (docs/template.md,
 * "Handlers"): s[0..len) has a last dot with a non-empty module before it
 * and a non-empty function after it; no NUL byte, no whitespace (Unicode
 * White_Space, as Go's unicode.IsSpace), valid UTF-8 with no control or
 * invisible formatting character (C0, DEL, C1, soft hyphen, zero-width and
 * bidirectional controls, BOM); the module only ASCII letters, digits,
 * "_$-./" and characters beyond ASCII; the function an identifier (an ASCII
 * letter, '_', '$' or a character beyond ASCII, then those or digits). So
 * "a..b" is module "a.", function "b"; what the module names is the
 * bootstrap's to resolve (bootstrap.c says how each runtime finds it).
 * Returns true when valid; otherwise false and, if why is given, a static
 * reason ("split at the last dot, no empty part", "no whitespace", "no
 * control or formatting character", ...). Pure; any thread.
 */
bool template_handler_valid(const char *s, size_t len, const char **why);

/* The variable-name rule of env and secrets keys. (Secret names, the values
 * of secrets, follow secret.h's secret_name_ok.) */
int template_env_name_valid(const char *s);

#endif
