/*
 * relay function invoke NAME [--handler H] [--event EVENT|@file|-] [--timeout D]
 *
 * The function author's local run: one function's handlers, once, without a
 * worker. Everything that decides what runs and how is relay start's own
 * code, so a handler that works here works under relay start:
 *
 *   - the function is loaded and validated by function_load (the discovery
 *     rule for its name first, as the reconciler checks it);
 *   - its image is prepared by image_prepare_tree from the same tree
 *     snapshot relay start fingerprints: same fingerprint, same
 *     relay-fn-<name>:<fp16> reference, so an image relay start built is
 *     reused without a build, and one built here is relay start's;
 *   - each handler runs through runner_invoke with a struct runner_request made
 *     as the executor makes it (the template's env and secrets, the file
 *     secret provider over RELAY_DATA_DIR, the rule's timeout), so every
 *     hardening setting, label and the output prefix are the consumer's;
 *   - without --handler, the rules the event matches run in execution order
 *     (pattern_set over the function's rules: rule i has id i, as
 *     relay function match orders them), stopping at the first that does
 *     not succeed, as the consumer stops a message's plan;
 *   - a schedule handler named by --handler without --event reads the
 *     schedule envelope (schedule_payload) for the current second.
 *
 * It needs Docker only: no Redis connection, no state database.
 *
 * Exit status: the failing handler's exit status; 124 when it timed out;
 * 128+signal when SIGINT or SIGTERM stopped it (its container removed
 * first: the signal handlers only set a flag, which the runner polls as
 * its cancellation callback and which tears the container down); 1 for any
 * other failure (a missing secret, an invalid function, the daemon), 2 for
 * invalid arguments. Each failure is one line on stderr.
 *
 * Progress: build steps are logged at INFO (image.h "Progress"). When
 * stderr is a terminal they are shown instead as one status line that each
 * step overwrites ("\r" and erase-line: "relay: building F dependencies,
 * step 4/5 (3s): RUN pip install ..."), redrawn every second so the time
 * moves during a long step, cut to the terminal's width and
 * cleared once the image is ready; the INFO log lines of the preparation
 * are held back meanwhile (the level is WARN while preparing).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "cmd/cmd.h"
#include "cmd/match.h"
#include "model/config.h"
#include "io/docker.h"
#include "base/duration.h"
#include "io/event.h"
#include "model/fingerprint.h"
#include "model/function.h"
#include "engine/image.h"
#include "base/log.h"
#include "model/pattern.h"
#include "engine/runner.h"
#include "engine/scheduler.h"
#include "model/secret.h"
#include "model/template.h"
#include "base/util.h"

#define WORDS "function invoke"

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	stop_signal = sig;
}

static bool stop_asked(void *ctx)
{
	(void)ctx;
	return stop_signal != 0;
}

/* One handler to run. Strings are borrowed from the template or owned by
 * the plan (payload). */
struct step {
	const char *handler;
	int64_t timeout_ns;
};

/* ---- the terminal status line ------------------------------------------ */

static int term_width(void)
{
	struct winsize ws;
	if (ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 10)
		return ws.ws_col;
	return 80;
}

static void status_write(const char *text)
{
	struct buf b;
	buf_init(&b, 1024);
	buf_appendf(&b, "\r\033[K%s", text);
	if (write(2, b.data, b.len) < 0) {
		/* a status line that cannot be shown is not an error */
	}
	buf_free(&b);
}

/*
 * The status line's state: the last step announced, redrawn by its
 * progress hook (the building thread) and once a second by a ticker thread
 * so the elapsed time moves during a long step. Guarded by lock.
 */
struct status {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done, have, drawn;
	struct image_step st; /* strings below, not the hook's */
	char function[FUNCTION_NAME_MAX + 1];
	char image[160];
	char instruction[IMAGE_STEP_TEXT_MAX + 4];
	int64_t at_ns; /* when st arrived (monotonic) */
};

/* Draws s->st with its elapsed time as of now. Lock held. */
static void status_draw(struct status *s)
{
	char line[512];
	const struct image_step *st = &s->st;
	int64_t elapsed = st->elapsed_ns + (now_mono_ns() - s->at_ns);
	bool dep = strncmp(st->image, IMAGE_DEP_PREFIX, strlen(IMAGE_DEP_PREFIX)) == 0;
	snprintf_(line, sizeof line, "relay: building %s%s, step %d/%d (%.0fs): %s", st->function,
		  dep ? " dependencies" : "", st->step, st->total, (double)elapsed / 1e9,
		  st->instruction);
	size_t w = (size_t)term_width() - 1, n = strlen(line);
	if (n > w) { /* one terminal row, cut at a UTF-8 boundary */
		n = w;
		while (n && ((unsigned char)line[n] & 0xC0) == 0x80)
			n--;
		line[n] = '\0';
	}
	status_write(line);
	s->drawn = true;
}

/* image_progress_fn for a terminal: the step overwrites the status line. */
static void status_progress(void *ctx, const struct image_step *st)
{
	struct status *s = ctx;
	pthread_mutex_lock(&s->lock);
	s->st = *st;
	snprintf_(s->function, sizeof s->function, "%s", st->function);
	snprintf_(s->image, sizeof s->image, "%s", st->image);
	snprintf_(s->instruction, sizeof s->instruction, "%s", st->instruction);
	s->st.function = s->function;
	s->st.image = s->image;
	s->st.instruction = s->instruction;
	s->at_ns = now_mono_ns();
	s->have = true;
	status_draw(s);
	pthread_mutex_unlock(&s->lock);
}

static void *status_ticker(void *arg)
{
	struct status *s = arg;
	pthread_mutex_lock(&s->lock);
	while (!s->done) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += 1;
		pthread_cond_timedwait(&s->cond, &s->lock, &ts);
		if (!s->done && s->have)
			status_draw(s);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* ---- what to run ------------------------------------------------------ */

/* The event handlers of tpl that ev matches, in execution order. */
static size_t match_rules(const struct template *tpl, const struct event *ev, struct step *out)
{
	const struct pattern **pats = xcalloc(tpl->nrules + 1, sizeof *pats);
	for (size_t i = 0; i < tpl->nrules; i++)
		pats[i] = tpl->rules[i].pattern;
	struct pattern_set *set = pattern_set_new(pats, tpl->nrules);
	uint32_t *ids = xcalloc(tpl->nrules + 1, sizeof *ids);
	size_t n = pattern_set_match(set, ev, now_wall_ns(), ids);
	for (size_t i = 0; i < n; i++)
		out[i] = (struct step){tpl->rules[ids[i]].handler, tpl->rules[ids[i]].timeout_ns};
	free(ids);
	pattern_set_free(set);
	free(pats);
	return n;
}

/* "a, b, c": every handler of tpl, for the error naming an unknown one. */
static char *handler_list(const struct template *tpl)
{
	struct buf b;
	buf_init(&b, 64 * 1024);
	for (size_t i = 0; i < tpl->nrules; i++) {
		bool seen = false; /* a handler of several rules is named once */
		for (size_t k = 0; k < i && !seen; k++)
			seen = strcmp(tpl->rules[k].handler, tpl->rules[i].handler) == 0;
		if (!seen)
			buf_appendf(&b, "%s%s", b.len ? ", " : "", tpl->rules[i].handler);
	}
	for (size_t i = 0; i < tpl->nschedules; i++)
		buf_appendf(&b, "%s%s (schedule)", b.len ? ", " : "", tpl->schedules[i].handler);
	char *s = xstrdup(b.len ? b.data : "none");
	buf_free(&b);
	return s;
}

/* Loads and validates NAME as discovery does. 0 with *out, or 1 after one
 * line on stderr. */
static int load_function(const char *dir, const char *name, struct function **out)
{
	const char *why = NULL;
	if (!function_name_valid(name, &why))
		return cmd_fail(WORDS ": invalid function name \"%s\": %s", name, why);
	struct function_entry e = {.name = (char *)name};
	e.status = function_load(dir, name, &e.fn, &e.errors, &e.warnings);
	int rc = 0;
	if (e.status == FUNCTION_NO_TEMPLATE) {
		rc = cmd_fail(WORDS ": no function \"%s\" in %s (no %s/template.yaml)", name, dir,
			      name);
	} else if (e.status == FUNCTION_INVALID) {
		char *errs = function_entry_errors(&e);
		rc = cmd_fail(WORDS ": function \"%s\" is invalid: %s", name, errs);
		free(errs);
	} else {
		function_entry_log(&e); /* warnings only, as relay start logs them */
		*out = e.fn;
		e.fn = NULL;
	}
	function_free(e.fn);
	strlist_free(&e.errors);
	strlist_free(&e.warnings);
	return rc;
}

/* Prepares fn's image exactly as the reconciler does: the tree of
 * dir/name, image_prepare_tree. 0 with *res, or 1 after one line. */
static int prepare_image(struct docker *d, const char *dir, const struct function *fn,
			 struct image_result *res)
{
	char *fdir = xasprintf("%s/%s", dir, fn->name), *err = NULL;
	struct fn_tree tree;
	int rc = 0;
	if (fn_tree_load(fdir, &tree, &err) < 0) {
		rc = cmd_fail(WORDS ": function \"%s\": %s", fn->name, err);
		goto out;
	}
	bool tty = isatty(2);
	enum log_level level = log_get_level();
	struct status st = {.done = false};
	pthread_t ticker;
	bool ticking = false;
	if (tty) {
		pthread_mutex_init(&st.lock, NULL);
		pthread_condattr_t ca;
		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&st.cond, &ca);
		pthread_condattr_destroy(&ca);
		image_set_progress(status_progress, &st);
		ticking = pthread_create(&ticker, NULL, status_ticker, &st) == 0;
		if (level < LOG_WARN)
			log_set_level(LOG_WARN);
	}
	int r = image_prepare_tree(d, fn->name, fn->tpl->runtime, &tree, res, &err);
	if (tty) {
		pthread_mutex_lock(&st.lock);
		st.done = true;
		pthread_cond_signal(&st.cond);
		pthread_mutex_unlock(&st.lock);
		if (ticking)
			pthread_join(ticker, NULL);
		if (st.drawn)
			status_write(""); /* clears the status line */
		image_set_progress(NULL, NULL);
		log_set_level(level);
		pthread_cond_destroy(&st.cond);
		pthread_mutex_destroy(&st.lock);
	}
	fn_tree_free(&tree);
	if (r < 0)
		rc = cmd_fail(WORDS ": %s", err);
out:
	free(err);
	free(fdir);
	return rc;
}

/* Bound on waiting for the daemon to finish removing a container. */
#define INVOKE_REMOVED_WAIT_MS 10000L

/*
 * Waits until container id is gone. A container that exits on its own is
 * removed by the daemon (AutoRemove) a moment after its exit status is
 * known; returning before that would leave it listed after invoke exited
 * (docker run --rm waits the same way). POST /wait?condition=removed
 * answers once it is removed, 404 when it already is. Bounded; an error
 * is only worth a WARN (the orphan sweep of a later relay start removes
 * what is left: it carries the relay.* labels).
 */
static void wait_removed(struct docker *d, const char *id)
{
	char path[160];
	snprintf_(path, sizeof path, "/containers/%s/wait?condition=removed", id);
	struct docker_response r = {0};
	if (docker_request(d, "POST", path, NULL, 0, NULL, INVOKE_REMOVED_WAIT_MS, &r) < 0 ||
	    (r.status >= 400 && r.status != 404))
		log_warn(LOG_ATTRS("container", id, "error", docker_errmsg(d)),
			 "could not confirm the container was removed");
	docker_response_free(&r);
}

/* Runs one handler. 0 on success, else the exit status to end with (after
 * one line on stderr). */
static int run_step(struct docker *d, const struct function *fn, const char *image,
		    const struct step *st, const struct secret_provider *secrets,
		    const char *payload, size_t plen)
{
	const struct template *t = fn->tpl;
	struct runner_request in = {
		.function = fn->name,
		.handler = st->handler,
		.image = image,
		.timeout_ns = st->timeout_ns,
		.env = t->env,
		.nenv = t->nenv,
		.secrets = t->secrets,
		.nsecrets = t->nsecrets,
		.provider = secrets,
		.payload = payload,
		.payload_len = plen,
		.cancelled = stop_asked,
	};
	struct runner_result out;
	memset(&out, 0, sizeof out);
	runner_invoke(d, &in, &out);
	if (out.container_id[0])
		wait_removed(d, out.container_id);
	int rc = 0;
	const char *why = out.error ? out.error : runner_outcome_name(out.outcome);
	switch (out.outcome) {
	case RUNNER_SUCCESS: break;
	case RUNNER_FAILURE:
		cmd_fail(WORDS ": %s", why);
		rc = out.exit_code > 0 && out.exit_code < 256 ? out.exit_code : 1;
		break;
	case RUNNER_TIMEOUT:
		cmd_fail(WORDS ": %s", why);
		rc = 124;
		break;
	case RUNNER_CANCELLED:
		cmd_fail(WORDS ": function \"%s\" handler \"%s\" stopped by %s; container removed",
			 fn->name, st->handler, strsignal(stop_signal));
		rc = 128 + stop_signal;
		break;
	case RUNNER_ERROR:
		cmd_fail(WORDS ": %s", why);
		rc = 1;
		break;
	}
	runner_result_free(&out);
	return rc;
}

/* One invoke's state: what it was asked, what it read and opened. */
struct invoke {
	const struct config *cfg;
	const char *name, *handler, *event_arg;
	int64_t timeout_ns; /* --timeout, 0 when not given */
	char *text, *why, *sched;
	size_t len;
	struct event *ev;
	struct function *fn;
	struct step *steps;
	size_t nsteps;
	struct docker *d;
	struct image_result res;
	struct secret_provider *secrets;
};

/* Checks the options. 0, or 2 after one line on stderr. */
static int invoke_check_args(struct invoke *iv, const struct cmd_args *args)
{
	const char *timeout_arg = cmd_opt(args, "--timeout");
	if (timeout_arg &&
	    (duration_parse(timeout_arg, &iv->timeout_ns) < 0 || iv->timeout_ns <= 0)) {
		fprintf(stderr,
			"relay " WORDS ": --timeout %s is not a positive duration (e.g. 30s)\n",
			timeout_arg);
		return 2;
	}
	if (!iv->handler && !iv->event_arg) {
		fprintf(stderr, "relay " WORDS ": give --event, or --handler naming a handler\n");
		return 2;
	}
	return 0;
}

/* Reads and decodes --event when given. 0, or 2 after one line. */
static int invoke_read_event(struct invoke *iv)
{
	if (!iv->event_arg)
		return 0;
	if (cmd_read_event(iv->event_arg, &iv->text, &iv->len, &iv->why) < 0) {
		fprintf(stderr, "relay " WORDS ": %s\n", iv->why);
		return 2;
	}
	if (event_parse_json(iv->text, iv->len, &iv->ev, &iv->why) != EVENT_OK) {
		fprintf(stderr, "relay " WORDS ": invalid event: %s\n",
			iv->why ? iv->why : "invalid");
		return 2;
	}
	return 0;
}

/* The one step --handler names: its rule's or schedule's timeout, the
 * schedule envelope as the payload when there is no event. 0, 1 or 2
 * after one line. */
static int invoke_plan_handler(struct invoke *iv)
{
	const struct template *t = iv->fn->tpl;
	const char *handler = iv->handler;
	const struct rule *r = NULL;
	const struct schedule *s = NULL;
	for (size_t i = 0; !r && i < t->nrules; i++)
		if (strcmp(t->rules[i].handler, handler) == 0)
			r = &t->rules[i];
	for (size_t i = 0; !s && i < t->nschedules; i++)
		if (strcmp(t->schedules[i].handler, handler) == 0)
			s = &t->schedules[i];
	if (!r && !s) {
		char *all = handler_list(t);
		cmd_fail(WORDS ": function \"%s\" has no handler \"%s\" (handlers: %s)", iv->name,
			 handler, all);
		free(all);
		return 1;
	}
	if (!iv->ev && !s) {
		fprintf(stderr, "relay " WORDS ": handler \"%s\" handles events: give --event\n",
			handler);
		return 2;
	}
	if (!iv->ev) {
		iv->sched = schedule_payload(now_wall_ns() / NS_PER_SEC);
		iv->steps[0] = (struct step){handler, s->timeout_ns};
	} else {
		iv->steps[0] = (struct step){handler, r ? r->timeout_ns : s->timeout_ns};
	}
	iv->nsteps = 1;
	return 0;
}

/* The steps to run: the handler named, else the rules the event matches;
 * --timeout replaces each one's. 0, 1 or 2 after one line. */
static int invoke_plan(struct invoke *iv)
{
	iv->steps = xcalloc(iv->fn->tpl->nrules + 1, sizeof *iv->steps);
	if (iv->handler) {
		int rc = invoke_plan_handler(iv);
		if (rc)
			return rc;
	} else {
		iv->nsteps = match_rules(iv->fn->tpl, iv->ev, iv->steps);
		if (!iv->nsteps)
			return cmd_fail(WORDS ": the event matches no handler of function \"%s\"",
					iv->name);
	}
	for (size_t i = 0; iv->timeout_ns && i < iv->nsteps; i++)
		iv->steps[i].timeout_ns = iv->timeout_ns;
	return 0;
}

/* Connects to the Docker daemon and takes RELAY_OCI_RUNTIME as relay start
 * reads it (only the directories are loaded for this command,
 * config_load_dirs). 0, or 1 after one line. */
static int invoke_open_docker(struct invoke *iv)
{
	if (docker_open(&iv->d, &iv->why) < 0)
		return cmd_fail(WORDS ": cannot reach the Docker daemon: %s", iv->why);
	const char *rt_name = getenv("RELAY_OCI_RUNTIME");
	if (rt_name && *rt_name) {
		if (config_valid_runtime_name(rt_name) < 0)
			return cmd_fail(WORDS ": RELAY_OCI_RUNTIME is invalid: at most %d bytes of "
					      "A-Z a-z 0-9 . _ -",
					OCI_RUNTIME_NAME_MAX);
		if (docker_check_runtime(iv->d, rt_name, &iv->why) < 0)
			return cmd_fail(WORDS ": %s", iv->why);
		runner_set_oci_runtime(rt_name);
	}
	return 0;
}

/* Runs the steps in order, stopping at the first that does not succeed;
 * from here a signal removes the running container before exiting. The
 * exit status. */
static int invoke_run(struct invoke *iv)
{
	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	iv->secrets = secret_file_provider_new(iv->cfg->data_dir);
	const char *payload = iv->sched ? iv->sched : iv->text;
	size_t plen = iv->sched ? strlen(iv->sched) : iv->len;
	int rc = 0;
	for (size_t i = 0; i < iv->nsteps && rc == 0; i++) {
		if (stop_signal) {
			rc = 128 + stop_signal;
			break;
		}
		rc = run_step(iv->d, iv->fn, iv->res.ref, &iv->steps[i], iv->secrets, payload,
			      plen);
	}
	return rc;
}

/* Releases what iv holds (each part may be unset). */
static void invoke_free(struct invoke *iv)
{
	secret_provider_free(iv->secrets);
	image_result_free(&iv->res);
	docker_close(iv->d);
	free(iv->steps);
	function_free(iv->fn);
	event_free(iv->ev);
	free(iv->sched);
	free(iv->text);
	free(iv->why);
}

static int invoke_exec(const struct cmd *self, const struct cmd_args *args,
		       const struct config *cfg)
{
	(void)self;
	struct invoke iv = {
		.cfg = cfg,
		.name = args->pos[0],
		.handler = cmd_opt(args, "--handler"),
		.event_arg = cmd_opt(args, "--event"),
	};
	int rc = invoke_check_args(&iv, args);
	if (rc)
		return rc;
	runner_set_local(); /* a relay start's orphan sweep leaves these alone */
	rc = invoke_read_event(&iv);
	if (rc == 0)
		rc = load_function(cfg->functions_dir, iv.name, &iv.fn);
	if (rc == 0)
		rc = invoke_plan(&iv);
	if (rc == 0)
		rc = invoke_open_docker(&iv);
	if (rc == 0)
		rc = prepare_image(iv.d, cfg->functions_dir, iv.fn, &iv.res);
	if (rc == 0)
		rc = invoke_run(&iv);
	invoke_free(&iv);
	return rc;
}

const struct cmd cmd_function_invoke = {
	.words = WORDS,
	.args = "<name> [--handler H] [--event EVENT] [--timeout D]",
	.summary = "run a function's handlers once, locally, in their containers",
	.opts = (const struct cmd_opt[]){{"--handler", NULL, true},
					 {"--event", NULL, true},
					 {"--timeout", NULL, true},
					 {NULL}},
	.minpos = 1,
	.maxpos = 1,
	.help = "Prepares NAME's image as relay start does (the same image and cache) and runs\n"
		"the handler in a container hardened and configured as a real invocation (env,\n"
		"secrets from RELAY_DATA_DIR), the event on its stdin, its output forwarded as\n"
		"relay: function \"NAME\" handler \"H\": <line>. EVENT is JSON text, @file, or - "
		"for\n"
		"stdin. Without --handler, the handlers the event matches run in order, stopping\n"
		"at the first failure; --handler naming a schedule handler without --event runs\n"
		"it with the schedule envelope. --timeout replaces the rule's timeout. Exit "
		"status:\n"
		"the handler's (0 when all succeeded), 124 on a timeout, 1 for other failures.\n",
	.touches = CMD_DOCKER | CMD_FUNCTIONS_READ | CMD_DATA_FILES,
	.exec = invoke_exec,
};
