/* The command table (src/cmd/cmd.c): specs that fit, flags that are true,
 * and the directories every command reads. */
#include <stdlib.h>
#include <string.h>

#include "cmd/cmd.h"
#include "t.h"
#include "base/util.h"

static const struct cmd *find(const char *words)
{
	for (size_t i = 0; i < cmd_table_len; i++)
		if (strcmp(cmd_table[i]->words, words) == 0)
			return cmd_table[i];
	return NULL;
}

TEST(every_entry_fits_its_bounds)
{
	for (size_t i = 0; i < cmd_table_len; i++) {
		const struct cmd *c = cmd_table[i];
		size_t nopts = 0;
		while (c->opts && c->opts[nopts].name)
			nopts++;
		if (nopts > CMD_OPTS_MAX)
			T_FAIL_("%s: %zu options, at most %d", c->words, nopts, CMD_OPTS_MAX);
		if (c->maxpos > CMD_POS_MAX || c->minpos > c->maxpos || c->minpos < 0)
			T_FAIL_("%s: positional arguments %d..%d", c->words, c->minpos, c->maxpos);
		if (!c->exec || !c->summary || !c->args)
			T_FAIL_("%s: entry incomplete", c->words);
		if (!cmd_touches_text(c->touches))
			T_FAIL_("%s: --help has no sentence for touches %#x", c->words, c->touches);
		if (find(c->words) != c)
			T_FAIL_("%s: listed twice", c->words);
		/* A local option is a flag of the command's own spec. */
		bool local_ok = !c->local_opt;
		for (size_t k = 0; k < nopts && !local_ok; k++)
			local_ok =
				strcmp(c->opts[k].name, c->local_opt) == 0 && !c->opts[k].has_arg;
		if (!local_ok)
			T_FAIL_("%s: local option %s is not a flag of its spec", c->words,
				c->local_opt);
	}
	CHECK_INT(cmd_table_len, 24);
}

TEST(touches_flags_are_true)
{
	/* Only relay start runs the runtime; relay health only pings. */
	for (size_t i = 0; i < cmd_table_len; i++) {
		const struct cmd *c = cmd_table[i];
		bool start = strcmp(c->words, "start") == 0;
		bool health = strcmp(c->words, "health") == 0;
		bool event = strncmp(c->words, "event ", 6) == 0;
		bool invoke = strcmp(c->words, "function invoke") == 0;
		CHECK(!!(c->touches & CMD_ENGINE) == start);
		CHECK(!!(c->touches & CMD_STATE_WRITE) == start);
		bool dlq = strncmp(c->words, "dlq ", 4) == 0;
		CHECK(!!(c->touches & CMD_DOCKER) == (start || health || invoke));
		CHECK(!!(c->touches & CMD_REDIS) == (start || health || event || dlq));
		/* The DLQ and event commands validate the stream settings like
		 * relay start. */
		CHECK(!!(c->touches & CMD_STREAM) == (event || dlq));
	}
	const unsigned all = CMD_ENGINE | CMD_REDIS | CMD_DOCKER | CMD_STATE_READ |
			     CMD_STATE_WRITE | CMD_DATA_FILES | CMD_FUNCTIONS_READ |
			     CMD_FUNCTIONS_WRITE | CMD_NETWORK;
	CHECK_INT(find("start")->touches, all);
	CHECK_INT(find("health")->touches, CMD_REDIS | CMD_DOCKER);
	/* git sync fetches over SSH and replaces function directories. */
	CHECK_INT(find("git sync")->touches, CMD_DATA_FILES | CMD_FUNCTIONS_WRITE | CMD_NETWORK);
	static const char *const data_files[] = {"secret ls",  "secret set", "secret rm",
						 "git keygen", "git set",    "git status",
						 "git remove"};
	for (size_t i = 0; i < ARRAY_LEN(data_files); i++)
		CHECK_INT(find(data_files[i])->touches, CMD_DATA_FILES);
	CHECK_INT(find("stats")->touches, CMD_STATE_READ);
	CHECK_INT(find("function ls")->touches, CMD_STATE_READ);
	CHECK_INT(find("function inspect")->touches, CMD_STATE_READ);
	CHECK_INT(find("function validate")->touches, CMD_FUNCTIONS_READ);
	CHECK_INT(find("function match")->touches, CMD_FUNCTIONS_READ);
	/* invoke: Docker, the function and its secrets; never Redis or state. */
	CHECK_INT(find("function invoke")->touches,
		  CMD_DOCKER | CMD_FUNCTIONS_READ | CMD_DATA_FILES);
	CHECK_INT(find("function new")->touches, CMD_FUNCTIONS_WRITE);
	CHECK_INT(find("schedule next")->touches, 0);
	/* event status reads Redis (the stream settings validated) and the
	 * functions directory: no Docker, no state database. */
	CHECK_INT(find("event status")->touches, CMD_REDIS | CMD_STREAM | CMD_FUNCTIONS_READ);
	/* event send XADDs to the stream; with --dry-run it reads the
	 * functions directory only. */
	CHECK_INT(find("event send")->touches, CMD_REDIS | CMD_STREAM | CMD_FUNCTIONS_READ);
	CHECK_STR(find("event send")->local_opt, "--dry-run");
	CHECK_INT(find("dlq ls")->touches, CMD_REDIS | CMD_STREAM);
	CHECK_INT(find("dlq show")->touches, CMD_REDIS | CMD_STREAM | CMD_FUNCTIONS_READ);
	CHECK_INT(find("dlq replay")->touches, CMD_REDIS | CMD_STREAM);
	CHECK_INT(find("dlq rm")->touches, CMD_REDIS | CMD_STREAM);
	CHECK_STR(cmd_touches_text(CMD_STATE_READ),
		  "Reads the state database only (no Redis, Docker or functions directory).");
	CHECK(cmd_touches_text(CMD_NETWORK) == NULL);
}

/* Loads the two directories as an administrative command does
 * (config_load_dirs) or as relay start does (config_load), and checks them. */
static void check_dirs(bool start, const char *data, const char *functions)
{
	struct config c = {0};
	char **errs = NULL;
	int nerrs = 0;
	if (!start) {
		config_load_dirs(&c);
	} else if (config_load(&c, CONFIG_NEED_ALL, &errs, &nerrs) < 0) {
		T_FAIL_("config_load: %s", nerrs ? errs[0] : "?");
		config_errors_free(errs, nerrs);
		return;
	}
	CHECK_STR(c.data_dir, data);
	CHECK_STR(c.functions_dir, functions);
	config_free(&c);
}

TEST(data_dir_default)
{
	unsetenv("RELAY_DATA_DIR");
	unsetenv("RELAY_FUNCTIONS_DIR");
	check_dirs(false, "/var/lib/relay", "/functions");
	setenv("RELAY_DATA_DIR", "", 1);
	setenv("RELAY_FUNCTIONS_DIR", "", 1);
	check_dirs(false, "/var/lib/relay", "/functions");
	setenv("RELAY_DATA_DIR", "/tmp/relay-data", 1);
	setenv("RELAY_FUNCTIONS_DIR", "/tmp/relay-fns", 1);
	/* A variable the administrative commands do not use never fails them. */
	setenv("MAX_CONCURRENCY", "many", 1);
	check_dirs(false, "/tmp/relay-data", "/tmp/relay-fns");

	/* The same directories as config_load gives relay start. */
	setenv("MAX_CONCURRENCY", "3", 1);
	setenv("REDIS_URI", "127.0.0.1:6379", 1);
	setenv("REDIS_STREAM", "s", 1);
	setenv("REDIS_GROUP", "g", 1);
	check_dirs(true, "/tmp/relay-data", "/tmp/relay-fns");
	setenv("RELAY_DATA_DIR", "", 1);
	unsetenv("RELAY_FUNCTIONS_DIR");
	check_dirs(true, "/var/lib/relay", "/functions");
	unsetenv("RELAY_DATA_DIR");
	unsetenv("MAX_CONCURRENCY");
	unsetenv("REDIS_URI");
	unsetenv("REDIS_STREAM");
	unsetenv("REDIS_GROUP");
}

T_MAIN(T_CASE(every_entry_fits_its_bounds), T_CASE(touches_flags_are_true),
       T_CASE(data_dir_default))
