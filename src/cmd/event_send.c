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
#include "io/traceparent.h"
#include "engine/scheduler.h"
#include "base/util.h"

/* The line for an EVENT that cmd_read_event refused with why: one too
 * large in the consumer's words, anything else as it is. Answers 1. */
static int send_read_failed(const struct cmd *self, const char *arg, const char *why)
{
	struct stat st;
	if (strncmp(why, "event larger", 12) != 0)
		return cmd_fail("%s: %s", self->words, why);
	if (arg[0] == '@' && stat(arg + 1, &st) == 0 &&
	    st.st_size > EVENT_MAX_BYTES) /* the consumer's words */
		return cmd_fail("%s: malformed event (%s): event is %lld bytes, more than the "
				"maximum of %d",
				self->words, event_err_name(EVENT_ERR_TOO_LARGE),
				(long long)st.st_size, EVENT_MAX_BYTES);
	return cmd_fail("%s: malformed event (%s): event is more than the maximum of %d "
			"bytes",
			self->words, event_err_name(EVENT_ERR_TOO_LARGE), EVENT_MAX_BYTES);
}

/* Decodes text as the consumer will read the entry (one field, `event`)
 * and refuses what it would dead-letter. 0 with *ev, or 1 after one line
 * (*why, when set, is the caller's to free). */
static int send_check(const struct cmd *self, const char *text, size_t len, struct event **ev,
		      char **why)
{
	const char *fields[2] = {"event", text};
	size_t lens[2] = {5, len};
	int derr = event_decode(fields, lens, 2, ev, why);
	if (derr != EVENT_OK)
		return cmd_fail("%s: malformed event (%s): %s", self->words, event_err_name(derr),
				*why ? *why : "");
	if (schedule_claimed(*ev))
		return cmd_fail("%s: the event claims to be a scheduled occurrence (source \"%s\" "
				"with function, handler and occurrence_id): relay would "
				"dead-letter it as forged",
				self->words, SCHEDULE_SOURCE);
	return 0;
}

/* Prints the handlers ev matches in the functions directory, in execution
 * order (stderr says when none does). 0, or 1 after one line. */
static int send_print_matches(const struct cmd *self, const struct config *cfg,
			      const struct event *ev)
{
	struct cmd_match *m = NULL;
	size_t n = 0;
	char *err = NULL;
	int rc = 0;
	if (cmd_match_event(self->words, cfg->functions_dir, ev, now_wall_ns(), &m, &n, &err) < 0) {
		rc = cmd_fail("%s: %s", self->words, err);
	} else {
		for (size_t i = 0; i < n; i++)
			printf("match: %s/%s\n", m[i].function, m[i].handler);
		if (n == 0)
			fprintf(stderr, "relay: %s: no handler in %s matches the event\n",
				self->words, cfg->functions_dir);
	}
	cmd_match_free(m, n);
	free(err);
	return rc;
}

/* XADDs text to REDIS_STREAM as the field `event`, with the field
 * `traceparent` (tp: docs/operations.md, "Tracing"), and prints the id. 0,
 * or 1 after one line. */
static int send_xadd(const struct cmd *self, const struct config *cfg, const char *text, size_t len,
		     const char *tp)
{
	struct redis *r = NULL;
	if (cmd_redis_connect(self, cfg, &r) < 0)
		return 1;
	const char *argv[7] = {"XADD", cfg->redis_stream, "*", "event", text, "traceparent", tp};
	size_t argl[7] = {4, strlen(cfg->redis_stream), 1, 5, len, 11, strlen(tp)};
	redisReply *rep = redis_command_argv(r, 7, argv, argl);
	int rc = 1;
	if (!rep)
		cmd_fail("%s: XADD %s: %s", self->words, cfg->redis_stream, redis_errmsg(r));
	else if (rep->type != REDIS_REPLY_STRING)
		cmd_fail("%s: XADD %s: %s", self->words, cfg->redis_stream,
			 rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
	else {
		printf("sent: %s\n", rep->str);
		rc = 0;
	}
	if (rep)
		freeReplyObject(rep);
	redis_free(r);
	return rc;
}

/* The entry's traceparent: --traceparent's (valid, written back as
 * version 00), else a new trace, sampled. 0, or 1 after one line. */
static int send_traceparent(const struct cmd *self, const struct cmd_args *args,
			    char out[TRACEPARENT_LEN + 1])
{
	const char *given = cmd_opt(args, "--traceparent");
	struct traceparent tp;
	if (!given) {
		traceparent_new(&tp, TRACEPARENT_FLAG_SAMPLED);
	} else if (traceparent_parse(given, strlen(given), &tp) < 0) {
		char *shown = text_escaped(given, strlen(given), 80, 0);
		int rc = cmd_fail("%s: --traceparent '%s' is not a W3C traceparent "
				  "(00-<32 hex trace-id>-<16 hex parent-id>-<2 hex flags>, "
				  "lowercase, ids not all zero); nothing sent",
				  self->words, shown);
		free(shown);
		return rc;
	}
	traceparent_format(&tp, out);
	return 0;
}

static int send_exec(const struct cmd *self, const struct cmd_args *args, const struct config *cfg)
{
	bool dry = cmd_flag(args, "--dry-run");
	char *text = NULL, *why = NULL;
	size_t len = 0;
	char tp[TRACEPARENT_LEN + 1];
	if (send_traceparent(self, args, tp) != 0)
		return 1;
	if (cmd_read_event(args->pos[0], &text, &len, &why) < 0) {
		int rc = send_read_failed(self, args->pos[0], why);
		free(why);
		return rc;
	}
	struct event *ev = NULL;
	int rc = send_check(self, text, len, &ev, &why);
	if (rc == 0)
		rc = send_print_matches(self, cfg, ev);
	if (rc == 0 && dry) {
		printf("not sent (--dry-run)\n");
	} else if (rc == 0) {
		fflush(stdout);
		rc = send_xadd(self, cfg, text, len, tp);
	}
	if (rc == 0 && fflush(stdout) != 0)
		rc = cmd_fail("%s: write: output error", self->words);
	event_free(ev);
	free(why);
	free(text);
	return rc;
}

const struct cmd cmd_event_send = {
	.words = "event send",
	.args = "EVENT [--dry-run] [--traceparent TP]",
	.summary = "check an event, show what it matches, XADD it",
	.opts = (const struct cmd_opt[]){{"--dry-run", NULL, false},
					 {"--traceparent", NULL, true},
					 {NULL}},
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
		"would dead-letter, an unreadable functions directory, or a Redis failure.\n"
		"The entry also gets a `traceparent` field: --traceparent's (a W3C "
		"traceparent,\n"
		"to continue a trace of yours), else a new trace; relay event status shows "
		"its id.\n",
	.touches = CMD_REDIS | CMD_STREAM | CMD_FUNCTIONS_READ,
	.local_opt = "--dry-run",
	.exec = send_exec,
};
