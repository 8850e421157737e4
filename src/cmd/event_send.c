/*
 * relay event send EVENT|@file|- [--dry-run]: publishes one test event the
 * way a producer would, after checking it the way the consumer will.
 *
 * The event is decoded by event_decode as the `event` field of a stream
 * entry, exactly as the consumer decodes what it reads (same errors, same
 * limits, event.h); one that the consumer would dead-letter as malformed is
 * refused with the reason the DLQ entry would carry, and so is one that
 * claims to be a scheduled occurrence (scheduler.h: the consumer
 * dead-letters such an entry as forged). The handlers it matches in the
 * functions directory are listed in execution order (cmd_match_event, as
 * relay function match), then the event is XADDed to REDIS_STREAM as the
 * single field `event` and the entry's id printed. With --dry-run nothing
 * connects to Redis: only the functions directory is read.
 *
 * Output (stdout), one line each:
 *   match: <function>/<handler>   per matching rule, in execution order
 *   sent: <message id>            the id XADD returned
 *   not sent (--dry-run)          instead of sent: with --dry-run
 * When nothing matches, stderr says so (the event is still sent: the
 * consumer acknowledges it without running anything).
 *
 * Exit status: 0; 1 for an event the consumer would not run (one line
 * naming why, nothing sent), an unreadable functions directory or EVENT
 * file, or a Redis failure; 2 for a usage error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <hiredis/hiredis.h>

#include "cmd/cmd.h"
#include "cmd/match.h"
#include "io/event.h"
#include "io/redis.h"
#include "engine/scheduler.h"
#include "base/util.h"

static int send_exec(const struct cmd *self, const struct cmd_args *args, const struct config *cfg)
{
	bool dry = cmd_flag(args, "--dry-run");
	char *text = NULL, *why = NULL, *err = NULL;
	size_t len = 0;
	if (cmd_read_event(args->pos[0], &text, &len, &why) < 0) {
		int rc;
		struct stat st;
		if (strncmp(why, "event larger", 12) != 0)
			rc = cmd_fail("%s: %s", self->words, why);
		else if (args->pos[0][0] == '@' && stat(args->pos[0] + 1, &st) == 0 &&
			 st.st_size > EVENT_MAX_BYTES) /* the consumer's words */
			rc = cmd_fail(
				"%s: malformed event (%s): event is %lld bytes, more than the "
				"maximum of %d",
				self->words, event_err_name(EVENT_ERR_TOO_LARGE),
				(long long)st.st_size, EVENT_MAX_BYTES);
		else
			rc = cmd_fail(
				"%s: malformed event (%s): event is more than the maximum of %d "
				"bytes",
				self->words, event_err_name(EVENT_ERR_TOO_LARGE), EVENT_MAX_BYTES);
		free(why);
		return rc;
	}

	/* The entry as the consumer will read it: one field, `event`. */
	const char *fields[2] = {"event", text};
	size_t lens[2] = {5, len};
	struct event *ev = NULL;
	int derr = event_decode(fields, lens, 2, &ev, &why);
	int rc = 1;
	struct cmd_match *m = NULL;
	size_t n = 0;
	struct redis *r = NULL;
	redisReply *rep = NULL;
	if (derr != EVENT_OK) {
		cmd_fail("%s: malformed event (%s): %s", self->words, event_err_name(derr),
			 why ? why : "");
		goto out;
	}
	if (schedule_claimed(ev)) {
		cmd_fail("%s: the event claims to be a scheduled occurrence (source \"%s\" with "
			 "function, handler and occurrence_id): relay would dead-letter it as "
			 "forged",
			 self->words, SCHEDULE_SOURCE);
		goto out;
	}
	if (cmd_match_event(self->words, cfg->functions_dir, ev, now_wall_ns(), &m, &n, &err) < 0) {
		cmd_fail("%s: %s", self->words, err);
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		printf("match: %s/%s\n", m[i].function, m[i].handler);
	if (n == 0)
		fprintf(stderr, "relay: %s: no handler in %s matches the event\n", self->words,
			cfg->functions_dir);
	if (dry) {
		printf("not sent (--dry-run)\n");
		rc = 0;
		goto out;
	}
	fflush(stdout);
	if (cmd_redis_connect(self, cfg, &r) < 0)
		goto out;
	const char *argv[5] = {"XADD", cfg->redis_stream, "*", "event", text};
	size_t argl[5] = {4, strlen(cfg->redis_stream), 1, 5, len};
	rep = redis_command_argv(r, 5, argv, argl);
	if (!rep)
		cmd_fail("%s: XADD %s: %s", self->words, cfg->redis_stream, redis_errmsg(r));
	else if (rep->type != REDIS_REPLY_STRING)
		cmd_fail("%s: XADD %s: %s", self->words, cfg->redis_stream,
			 rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
	else {
		printf("sent: %s\n", rep->str);
		rc = 0;
	}
out:
	if (rc == 0 && fflush(stdout) != 0)
		rc = cmd_fail("%s: write: output error", self->words);
	if (rep)
		freeReplyObject(rep);
	redis_free(r);
	cmd_match_free(m, n);
	event_free(ev);
	free(why);
	free(err);
	free(text);
	return rc;
}

const struct cmd cmd_event_send = {
	.words = "event send",
	.args = "EVENT [--dry-run]",
	.summary = "check an event, show what it matches, XADD it",
	.opts = (const struct cmd_opt[]){{"--dry-run", NULL, false}, {NULL}},
	.minpos = 1,
	.maxpos = 1,
	.help = "EVENT is JSON text, @file, or - for stdin. It is decoded as the consumer decodes "
		"the\n"
		"`event` field (same errors and limits: a JSON object, UTF-8, at most 1 MiB and "
		"128\n"
		"levels). Prints \"match: <function>/<handler>\" for each rule it matches in the\n"
		"functions directory, in execution order, then XADDs it to REDIS_STREAM and "
		"prints\n"
		"\"sent: <message id>\". --dry-run stops before Redis (\"not sent (--dry-run)\") "
		"and\n"
		"needs only the functions directory. Exit 1, nothing sent, for an event the "
		"consumer\n"
		"would dead-letter, an unreadable functions directory, or a Redis failure.\n",
	.touches = CMD_REDIS | CMD_STREAM | CMD_FUNCTIONS_READ,
	.local_opt = "--dry-run",
	.exec = send_exec,
};
