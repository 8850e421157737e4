#include "cmd/cmd.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define RELAY_VERSION "0.1.0"

/* The command table: every subcommand of relay, in the order --help lists them. */
static const struct cmd *const commands[] = {
	&cmd_start,	     &cmd_health,	    &cmd_stats,
	&cmd_function_ls,    &cmd_function_inspect, &cmd_function_validate,
	&cmd_function_match, &cmd_secret_ls,	    &cmd_secret_set,
	&cmd_secret_rm,	     &cmd_git_keygen,	    &cmd_git_set,
	&cmd_git_sync,	     &cmd_git_status,	    &cmd_git_remove,
	&cmd_schedule_next,
};

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
	for (size_t i = 0; i < ARRAY_LEN(commands); i++)
		print_entry(f, commands[i]);
	fprintf(f, "\nRun 'relay <command> --help' for details of one command.\n");
}

/* Usage of a family ("relay function"): the commands that start with it. */
static void family_usage(const char *family, FILE *f)
{
	fprintf(f, "usage: relay %s <command> [arguments]\n\nCommands:\n", family);
	size_t n = strlen(family);
	for (size_t i = 0; i < ARRAY_LEN(commands); i++) {
		if (strncmp(commands[i]->words, family, n) == 0 && commands[i]->words[n] == ' ')
			print_entry(f, commands[i]);
	}
}

static const char *touches_text(unsigned t)
{
	if (t & CMD_RUNTIME)
		return "Starts the runtime: Redis, Docker and the functions directory.";
	if (t & CMD_PING)
		return "Connects to Redis and Docker only; starts nothing and reads no functions "
		       "or state.";
	if (t & CMD_STATE_RO)
		return "Reads the state database only (no Redis, Docker or functions directory).";
	if (t & CMD_FILES)
		return "Reads and writes files under the data directory only; never starts the "
		       "runtime.";
	return "Touches no Redis, Docker or state database.";
}

void cmd_usage(const struct cmd *c, FILE *f)
{
	fprintf(f, "usage: relay %s%s%s\n\n%s\n", c->words, *c->args ? " " : "", c->args,
		c->summary);
	if (c->help)
		fprintf(f, "\n%s", c->help);
	fprintf(f, "\n%s\n", touches_text(c->touches));
}

int cmd_fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *msg = xvasprintf(fmt, ap);
	va_end(ap);
	fprintf(stderr, "relay: %s\n", msg);
	free(msg);
	return 1;
}

int cmd_not_implemented(const struct cmd *self, int argc, char **argv)
{
	CMD_PARSE_OR_RETURN(self, argc, argv, NULL, NULL, 0, 64, NULL);
	return cmd_fail("%s: not implemented yet in this build", self->words);
}

static int usage_error(const struct cmd *c, const char *fmt, const char *arg)
{
	fprintf(stderr, "relay %s: ", c->words);
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n");
	cmd_usage(c, stderr);
	return 2;
}

int cmd_parse(const struct cmd *c, int argc, char **argv, const struct cmd_opt *opts,
	      const char **pos, int minpos, int maxpos, int *npos)
{
	int n = 0;
	bool only_pos = false;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!only_pos && strcmp(a, "--") == 0) {
			only_pos = true;
			continue;
		}
		if (!only_pos && (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)) {
			cmd_usage(c, stdout);
			return 1;
		}
		/* "-" alone is a positional (stdin), as is anything not starting with '-'. */
		if (only_pos || a[0] != '-' || a[1] == '\0') {
			if (n >= maxpos)
				return usage_error(c, "unexpected argument '%s'", a);
			if (pos)
				pos[n] = a;
			n++;
			continue;
		}
		const char *eq = strchr(a, '=');
		size_t namelen = eq ? (size_t)(eq - a) : strlen(a);
		const struct cmd_opt *o = NULL;
		for (size_t k = 0; opts && opts[k].name; k++) {
			if ((strlen(opts[k].name) == namelen &&
			     strncmp(opts[k].name, a, namelen) == 0) ||
			    (opts[k].alias && strlen(opts[k].alias) == namelen &&
			     strncmp(opts[k].alias, a, namelen) == 0)) {
				o = &opts[k];
				break;
			}
		}
		if (!o)
			return usage_error(c, "unknown option '%s'", a);
		if (o->has_arg) {
			if (eq) {
				*o->value = eq + 1;
			} else {
				if (i + 1 >= argc)
					return usage_error(c, "option '%s' needs a value", a);
				*o->value = argv[++i];
			}
		} else {
			if (eq)
				return usage_error(c, "option '%s' takes no value", a);
			*o->flag = true;
		}
	}
	if (n < minpos)
		return usage_error(c, "%s", "missing argument");
	if (npos)
		*npos = n;
	return 0;
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
	for (size_t i = 0; i < ARRAY_LEN(commands); i++)
		if (strncmp(commands[i]->words, word, n) == 0 && commands[i]->words[n] == ' ')
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
	for (size_t i = 0; i < ARRAY_LEN(commands); i++) {
		int used = match_words(commands[i], argc - 1, argv + 1);
		if (used) {
			/* argv[0] of the handler is the last command word. */
			return commands[i]->exec(commands[i], argc - used, argv + used);
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
