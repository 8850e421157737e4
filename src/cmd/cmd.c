#include "cmd/cmd.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/util.h"
#include "engine/invocation.h"
#include "engine/keys.h"
#include "io/redis.h"

#define RELAY_VERSION "0.1.0"

/* The command table: every subcommand of relay, in the order --help lists them. */
const struct cmd *const cmd_table[] = {
	&cmd_start,	     &cmd_health,	    &cmd_stats,
	&cmd_function_ls,    &cmd_function_inspect, &cmd_function_validate,
	&cmd_function_match, &cmd_function_invoke,  &cmd_function_new,
	&cmd_secret_ls,	     &cmd_secret_set,	    &cmd_secret_rm,
	&cmd_git_keygen,     &cmd_git_set,	    &cmd_git_sync,
	&cmd_git_status,     &cmd_git_remove,	    &cmd_schedule_next,
	&cmd_event_status,   &cmd_event_send,	    &cmd_dlq_ls,
	&cmd_dlq_show,	     &cmd_dlq_replay,	    &cmd_dlq_rm,
};
const size_t cmd_table_len = ARRAY_LEN(cmd_table);

/* One line per command; a long synopsis gets the summary on its own line. */
static void print_entry(FILE *f, const struct cmd *c)
{
	char left[160];
	snprintf_(left, sizeof left, "%s %s", c->words, c->args);
	if (strlen(left) > 34)
		fprintf(f, "  %s\n  %-34s %s\n", left, "", c->summary);
	else
		fprintf(f, "  %-34s %s\n", left, c->summary);
}

static void main_usage(FILE *f)
{
	fprintf(f, "usage: relay <command> [arguments]\n\n"
		   "Relay runs functions in containers for events read from a Redis stream.\n\n"
		   "Commands:\n");
	for (size_t i = 0; i < cmd_table_len; i++)
		print_entry(f, cmd_table[i]);
	fprintf(f, "\nRun 'relay <command> --help' for details of one command.\n");
}

/* Usage of a family ("relay function"): the commands that start with it. */
static void family_usage(const char *family, FILE *f)
{
	fprintf(f, "usage: relay %s <command> [arguments]\n\nCommands:\n", family);
	size_t n = strlen(family);
	for (size_t i = 0; i < cmd_table_len; i++) {
		if (strncmp(cmd_table[i]->words, family, n) == 0 && cmd_table[i]->words[n] == ' ')
			print_entry(f, cmd_table[i]);
	}
}

/* What --help says a command touches, one sentence per combination of
 * flags that some command has. */
static const struct {
	unsigned touches;
	const char *text;
} touches_texts[] = {
	{CMD_ENGINE | CMD_REDIS | CMD_DOCKER | CMD_STATE_READ | CMD_STATE_WRITE | CMD_DATA_FILES |
		 CMD_FUNCTIONS_READ | CMD_FUNCTIONS_WRITE | CMD_NETWORK,
	 "Starts the engine: Redis, Docker and the functions directory."},
	{CMD_REDIS | CMD_DOCKER,
	 "Connects to Redis and Docker only; starts nothing and reads no functions or state."},
	{CMD_STATE_READ,
	 "Reads the state database only (no Redis, Docker or functions directory)."},
	{CMD_DATA_FILES,
	 "Reads and writes files under the data directory only; never starts the engine."},
	{CMD_DATA_FILES | CMD_FUNCTIONS_WRITE | CMD_NETWORK,
	 "Fetches from the git remote over SSH, reads and writes files under the data directory\n"
	 "and replaces function directories in the functions directory; touches no Redis,\n"
	 "Docker or state database and never starts the engine."},
	{CMD_REDIS | CMD_STREAM,
	 "Connects to Redis only (REDIS_URI, REDIS_STREAM and REDIS_GROUP, validated like\n"
	 "relay start); touches no Docker, functions directory or state database."},
	{CMD_REDIS | CMD_STREAM | CMD_FUNCTIONS_READ,
	 "Connects to Redis (REDIS_URI, REDIS_STREAM and REDIS_GROUP, validated like relay\n"
	 "start) and reads the functions directory; touches no Docker or state database."},
	{CMD_DOCKER | CMD_FUNCTIONS_READ | CMD_DATA_FILES,
	 "Reads the functions directory and the secrets under the data directory, and uses\n"
	 "Docker only (the function's image, one container per handler); touches no Redis\n"
	 "or state database."},
	{CMD_FUNCTIONS_READ, "Touches no Redis, Docker or state database."},
	{CMD_FUNCTIONS_WRITE,
	 "Creates one directory in the functions directory (or DIR); touches no\n"
	 "Redis, Docker or state database."},
	{0, "Touches no Redis, Docker or state database."},
};

const char *cmd_touches_text(unsigned touches)
{
	for (size_t i = 0; i < ARRAY_LEN(touches_texts); i++)
		if (touches_texts[i].touches == touches)
			return touches_texts[i].text;
	return NULL;
}

void cmd_usage(const struct cmd *c, FILE *f)
{
	fprintf(f, "usage: relay %s%s%s\n\n%s\n", c->words, *c->args ? " " : "", c->args,
		c->summary);
	if (c->help)
		fprintf(f, "\n%s", c->help);
	const char *touches = cmd_touches_text(c->touches);
	if (touches)
		fprintf(f, "\n%s\n", touches);
}

int cmd_fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *msg = xvasprintf(fmt, ap);
	va_end(ap);
	struct buf b;
	buf_init(&b, 4 * strlen(msg) + 16);
	text_escape(&b, msg, strlen(msg), 0, TEXT_VERBATIM);
	fprintf(stderr, "relay: %s\n", b.data);
	buf_free(&b);
	free(msg);
	return 1;
}

void cmd_print_line(FILE *f, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *msg = xvasprintf(fmt, ap);
	va_end(ap);
	struct buf b;
	buf_init(&b, 4 * strlen(msg) + 16);
	text_escape(&b, msg, strlen(msg), 0, TEXT_VERBATIM);
	buf_append(&b, "\n", 1);
	fwrite(b.data, 1, b.len, f);
	buf_free(&b);
	free(msg);
}

/* The index in c's spec of the option named (or aliased) name[0..len), -1
 * when there is none. */
static int opt_index(const struct cmd *c, const char *name, size_t len)
{
	for (int k = 0; c->opts && c->opts[k].name; k++) {
		const struct cmd_opt *o = &c->opts[k];
		if ((strlen(o->name) == len && strncmp(o->name, name, len) == 0) ||
		    (o->alias && strlen(o->alias) == len && strncmp(o->alias, name, len) == 0))
			return k;
	}
	return -1;
}

static int known_opt(const struct cmd_args *a, const char *name)
{
	int k = opt_index(a->cmd, name, strlen(name));
	if (k < 0) {
		fprintf(stderr, "relay %s: option %s is not in its spec\n", a->cmd->words, name);
		abort();
	}
	return k;
}

const char *cmd_opt(const struct cmd_args *a, const char *name)
{
	return a->opt[known_opt(a, name)];
}

bool cmd_flag(const struct cmd_args *a, const char *name)
{
	return a->opt[known_opt(a, name)] != NULL;
}

static int usage_error(const struct cmd *c, const char *fmt, const char *arg)
{
	fprintf(stderr, "relay %s: ", c->words);
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n");
	cmd_usage(c, stderr);
	return 2;
}

/*
 * Parses argv (argv[0] is the last command word) against c's spec into *a.
 * "-h"/"--help" print usage to stdout (returns 1: exit 0). An unknown
 * option, a missing or unexpected value, or too few or too many positional
 * arguments print usage to stderr (returns 2: exit 2). "-" alone is a
 * positional (stdin). Returns 0 on success.
 */
static int parse_args(const struct cmd *c, int argc, char **argv, struct cmd_args *a)
{
	*a = (struct cmd_args){.cmd = c};
	bool only_pos = false;
	for (int i = 1; i < argc; i++) {
		const char *w = argv[i];
		if (!only_pos && strcmp(w, "--") == 0) {
			only_pos = true;
			continue;
		}
		if (!only_pos && (strcmp(w, "-h") == 0 || strcmp(w, "--help") == 0)) {
			cmd_usage(c, stdout);
			return 1;
		}
		/* "-" alone is a positional (stdin), as is anything not starting with '-'. */
		if (only_pos || w[0] != '-' || w[1] == '\0') {
			if (a->npos >= c->maxpos)
				return usage_error(c, "unexpected argument '%s'", w);
			a->pos[a->npos++] = w;
			continue;
		}
		const char *eq = strchr(w, '=');
		int k = opt_index(c, w, eq ? (size_t)(eq - w) : strlen(w));
		if (k < 0)
			return usage_error(c, "unknown option '%s'", w);
		if (c->opts[k].has_arg) {
			if (eq)
				a->opt[k] = eq + 1;
			else if (i + 1 >= argc)
				return usage_error(c, "option '%s' needs a value", w);
			else
				a->opt[k] = argv[++i];
		} else {
			if (eq)
				return usage_error(c, "option '%s' takes no value", w);
			a->opt[k] = w;
		}
	}
	if (a->npos < c->minpos)
		return usage_error(c, "%s", "missing argument");
	return 0;
}

/* The settings c reads, from what it touches (see cmd.h) with the
 * arguments a. Returns 0, or -1 after logging every invalid variable. */
static int load_settings(const struct cmd *c, const struct cmd_args *a, struct config *cfg)
{
	if (c->local_opt && cmd_flag(a, c->local_opt)) {
		config_load_dirs(cfg);
		return 0;
	}
	if (c->touches & (CMD_ENGINE | CMD_STREAM))
		return config_load_or_log(cfg, CONFIG_NEED_ALL);
	if (c->touches & CMD_REDIS)
		return config_load_or_log(cfg, CONFIG_NEED_REDIS_URI);
	config_load_dirs(cfg);
	return 0;
}

int cmd_redis_connect(const struct cmd *self, const struct config *cfg, struct redis **out)
{
	struct redis_uri uri;
	char *why = NULL;
	*out = NULL;
	if (config_redis_uri(cfg, &uri, &why) < 0) {
		cmd_fail("%s: invalid REDIS_URI: %s", self->words, why);
		free(why);
		return -1;
	}
	struct redis *r = redis_new(&uri, NULL);
	redis_uri_free(&uri);
	if (redis_connect(r) < 0) {
		cmd_fail("%s: cannot reach Redis: %s", self->words, redis_errmsg(r));
		redis_free(r);
		return -1;
	}
	if (redis_mode(r) == REDIS_MODE_CLUSTER)
		keys_set_cluster(true); /* before any key is named (invocation.h) */
	if (cfg->redis_stream && keys_stream_slot_check(r, cfg->redis_stream, &why) < 0) {
		cmd_fail("%s: %s", self->words, why);
		free(why);
		redis_free(r);
		return -1;
	}
	*out = r;
	return 0;
}

int cmd_print_json(const struct cmd *self, json_t *doc)
{
	int rc = 0;
	char *text = doc ? json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
	json_decref(doc);
	struct buf b;
	size_t n = text ? strlen(text) : 0;
	buf_init(&b, 6 * n + 16);
	if (text)
		text_escape_json(&b, text, n);
	free(text);
	if (!b.data || fwrite(b.data, 1, b.len, stdout) != b.len || fputc('\n', stdout) == EOF ||
	    fflush(stdout) != 0)
		rc = cmd_fail("%s: write: output error", self->words);
	buf_free(&b);
	return rc;
}

/* Parses c's arguments, loads its settings and runs it: the exit status. */
static int run(const struct cmd *c, int argc, char **argv)
{
	struct cmd_args a;
	int r = parse_args(c, argc, argv, &a);
	if (r != 0)
		return r == 1 ? 0 : 2;
	struct config cfg = {0};
	if (load_settings(c, &a, &cfg) < 0)
		return 1;
	int status = c->exec(c, &a, &cfg);
	config_free(&cfg);
	return status;
}

/* Number of words of c matched by argv[0..]; 0 when it does not match. */
static int match_words(const struct cmd *c, int argc, char **argv)
{
	const char *w = c->words;
	int i = 0;
	while (*w) {
		size_t len = strcspn(w, " ");
		if (i >= argc || strlen(argv[i]) != len || strncmp(argv[i], w, len) != 0)
			return 0;
		i++;
		w += len;
		if (*w == ' ')
			w++;
	}
	return i;
}

static bool is_family(const char *word)
{
	size_t n = strlen(word);
	for (size_t i = 0; i < cmd_table_len; i++)
		if (strncmp(cmd_table[i]->words, word, n) == 0 && cmd_table[i]->words[n] == ' ')
			return true;
	return false;
}

int cmd_main(int argc, char **argv)
{
	if (argc < 2) {
		main_usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		main_usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
		printf("relay %s\n", RELAY_VERSION);
		return 0;
	}
	for (size_t i = 0; i < cmd_table_len; i++) {
		int used = match_words(cmd_table[i], argc - 1, argv + 1);
		if (used) {
			/* argv[0] of the handler is the last command word. */
			return run(cmd_table[i], argc - used, argv + used);
		}
	}
	if (is_family(argv[1])) {
		if (argc >= 3 && (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0)) {
			family_usage(argv[1], stdout);
			return 0;
		}
		if (argc >= 3)
			fprintf(stderr, "relay %s: unknown command '%s'\n", argv[1], argv[2]);
		family_usage(argv[1], stderr);
		return 2;
	}
	fprintf(stderr, "relay: unknown command '%s'\n", argv[1]);
	main_usage(stderr);
	return 2;
}
