/*
 * relay secret ls|set|rm: the local secret store under <data dir>/secrets
 * (see secret.h). These commands use only RELAY_DATA_DIR from the
 * environment and touch nothing but that directory.
 *
 * `set` never echoes or prints the value. From a terminal it reads one
 * line with echo off (the terminal is restored on every path, a signal
 * included: the handler only records the signal, the read returns EINTR,
 * the terminal is restored and the signal re-raised). Otherwise it takes
 * all of stdin as is, binary-safe. The value is held in one buffer
 * allocated once (no realloc copies left behind) and zeroed before exit.
 *
 * `ls` lists names without reading any value. It also checks each file's
 * metadata as the runner would before reading it, and reports every file
 * that would be refused (loose permissions, foreign owner, too large) on
 * stderr, still listing its name, then exits 1.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include <jansson.h>

#include "cmd/cmd.h"
#include "model/secret.h"
#include "base/util.h"

static int ls_exec(const struct cmd *self, const struct cmd_args *args, const struct config *cfg)
{
	struct secret_provider *p = secret_file_provider_new(cfg->data_dir);
	char **names = NULL;
	size_t n = 0;
	char *err = NULL;
	int status = 0;
	if (secret_list(p, &names, &n, &err) < 0) {
		status = cmd_fail("secret ls: %s", err);
		goto out;
	}
	bool as_json = cmd_flag(args, "--json");
	json_t *doc = as_json ? json_array() : NULL;
	if (!as_json)
		printf("NAME\n");
	for (size_t i = 0; i < n; i++) {
		if (as_json) {
			json_t *o = json_object();
			json_object_set_new(o, "name", json_string(names[i]));
			json_array_append_new(doc, o);
		} else {
			printf("%s\n", names[i]);
		}
		char *why = NULL;
		/* Gone since listing: not an error, it is simply no longer there. */
		int rc = secret_file_check(p, names[i], &why);
		if (rc < 0 && rc != SECRET_NOT_FOUND) {
			fflush(stdout);
			status = cmd_fail("secret ls: %s", why);
		}
		free(why);
	}
	if (as_json && cmd_print_json(self, doc) != 0)
		status = 1;
out:
	free(err);
	secret_names_free(names, n);
	secret_provider_free(p);
	return status;
}

/* read_hidden_line and read_all: -1 with a reason, or this. */
#define READ_TOO_LONG (-2)

static volatile sig_atomic_t got_signal;

static void on_signal(int sig)
{
	got_signal = sig;
}

static const int caught_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

/*
 * Reads one line from the terminal on fd 0 into v (capacity max bytes,
 * max - 1 usable so an over-long value is noticed) with echo off. Strips
 * the trailing newline. Returns 0, READ_TOO_LONG, or -1 with *why set
 * (static text). On a signal, returns -1 with got_signal set.
 */
static int read_hidden_line(const char *name, char *v, size_t max, size_t *len, const char **why)
{
	struct termios saved, quiet;
	struct sigaction sa, old[ARRAY_LEN(caught_signals)];
	int rc = -1;
	*len = 0;
	if (tcgetattr(0, &saved) < 0) {
		*why = "cannot read the terminal settings";
		return -1;
	}
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal; /* no SA_RESTART: read() returns EINTR */
	sigemptyset(&sa.sa_mask);
	got_signal = 0;
	for (size_t i = 0; i < ARRAY_LEN(caught_signals); i++)
		sigaction(caught_signals[i], &sa, &old[i]);

	quiet = saved;
	quiet.c_lflag &= ~(tcflag_t)(ECHO | ECHOE | ECHOK | ECHONL);
	quiet.c_lflag |= ICANON;
	if (tcsetattr(0, TCSAFLUSH, &quiet) < 0) {
		*why = "cannot turn off the terminal echo";
		goto out;
	}
	/* Prompt only once echo is off: whatever is typed after it is hidden. */
	fprintf(stderr, "Value for %s: ", name);
	fflush(stderr);
	/* Canonical mode: each read returns at most one line. */
	bool done = false;
	while (!done && !got_signal) {
		ssize_t r = read(0, v + *len, max - *len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			*why = "cannot read from the terminal";
			goto out;
		}
		if (r == 0)
			break; /* end of input (^D) */
		*len += (size_t)r;
		if (v[*len - 1] == '\n') {
			(*len)--;
			done = true;
		} else if (*len == max) {
			rc = READ_TOO_LONG;
			goto out;
		}
	}
	if (got_signal) {
		*why = "interrupted";
		goto out;
	}
	if (*len == 0) {
		*why = "empty value; nothing saved";
		goto out;
	}
	rc = 0;
out:
	/* TCSAFLUSH also drops anything typed ahead so it never reaches the shell. */
	tcsetattr(0, TCSAFLUSH, &saved);
	fputc('\n', stderr);
	for (size_t i = 0; i < ARRAY_LEN(caught_signals); i++)
		sigaction(caught_signals[i], &old[i], NULL);
	return rc;
}

/* All of stdin into v (capacity max, max - 1 usable so an over-long value
 * is noticed, as read_hidden_line). Returns 0, READ_TOO_LONG, or -1 with
 * *why set. */
static int read_all(char *v, size_t max, size_t *len, const char **why)
{
	char *data = NULL;
	if (read_fd_bounded(0, max - 1, READ_WIPE, &data, len) < 0) {
		if (errno == EFBIG)
			return READ_TOO_LONG;
		*why = "cannot read standard input";
		return -1;
	}
	memcpy(v, data, *len);
	explicit_bzero(data, *len);
	free(data);
	return 0;
}

static int set_exec(const struct cmd *self, const struct cmd_args *args, const struct config *cfg)
{
	const char *name = args->pos[0];
	char *bad = NULL;
	if (secret_name_check(name, &bad) < 0) { /* before prompting */
		int status = cmd_fail("secret set: %s", bad);
		free(bad);
		return status;
	}
	/* One byte more than the limit so that an over-long value is noticed. */
	size_t cap = (size_t)SECRET_VALUE_MAX + 1;
	char *value = xmalloc(cap);
	size_t len = 0;
	const char *why = NULL;
	char *err = NULL;
	struct secret_provider *p = NULL;
	int status = 0;
	int rc = isatty(0) ? read_hidden_line(name, value, cap, &len, &why)
			   : read_all(value, cap, &len, &why);
	if (got_signal)
		goto out; /* the terminal is restored; die of the signal below */
	if (rc == READ_TOO_LONG) {
		status =
			cmd_fail("secret set: value exceeds the maximum of %d bytes; nothing saved",
				 SECRET_VALUE_MAX);
		goto out;
	}
	if (rc < 0) {
		status = cmd_fail("secret set: %s", why);
		goto out;
	}
	p = secret_file_provider_new(cfg->data_dir);
	if (secret_set(p, name, value, len, &err) < 0)
		status = cmd_fail("secret set: %s", err);
out:
	explicit_bzero(value, cap);
	free(value);
	free(err);
	secret_provider_free(p);
	if (got_signal) {
		int sig = got_signal;
		signal(sig, SIG_DFL);
		raise(sig);
		status = 128 + sig; /* not reached with the default dispositions */
	}
	return status;
}

static int rm_exec(const struct cmd *self, const struct cmd_args *args, const struct config *cfg)
{
	struct secret_provider *p = secret_file_provider_new(cfg->data_dir);
	char *err = NULL;
	int status = 0;
	if (secret_remove(p, args->pos[0], &err) < 0)
		status = cmd_fail("secret rm: %s", err);
	free(err);
	secret_provider_free(p);
	return status;
}

#define STORE_HELP                                                                            \
	"Secrets are files under $RELAY_DATA_DIR/secrets (default /var/lib/relay/secrets):\n" \
	"the directory has mode 0700, each file mode 0600, owned by the current user.\n"

const struct cmd cmd_secret_ls = {
	.words = "secret ls",
	.args = "[--json]",
	.opts = (const struct cmd_opt[]){{"--json", NULL, false}, {NULL}},
	.summary = "list secret names",
	.help = "Prints the header NAME, then one secret name per line, sorted. Values are never\n"
		"read. A secret file that would be refused when used (permissions looser than\n"
		"0600, another owner, larger than 1 MiB) is still listed and also reported on\n"
		"stderr, and the exit status is then 1. --json prints a JSON array of {\"name\"}\n"
		"objects instead (docs/json.md).\n\n" STORE_HELP,
	.touches = CMD_DATA_FILES,
	.exec = ls_exec,
};

const struct cmd cmd_secret_set = {
	.words = "secret set",
	.args = "NAME",
	.summary = "store a secret read from the terminal or stdin",
	.minpos = 1,
	.maxpos = 1,
	.help = "From a terminal, prompts on stderr and reads one line with echo off (the newline\n"
		"is not part of the value; an empty line saves nothing). Otherwise reads all of\n"
		"stdin as is, binary-safe, a trailing newline included: printf 'value' | relay\n"
		"secret set NAME. The value is never echoed or printed; at most 1 MiB.\n"
		"Creates or replaces the secret atomically.\n\n"
		"NAME: " SECRET_NAME_RULE ".\n\n" STORE_HELP,
	.touches = CMD_DATA_FILES,
	.exec = set_exec,
};

const struct cmd cmd_secret_rm = {
	.words = "secret rm",
	.args = "NAME",
	.summary = "remove a secret",
	.help = "Exit status 1 when there is no secret NAME.\n\n" STORE_HELP,
	.minpos = 1,
	.maxpos = 1,
	.touches = CMD_DATA_FILES,
	.exec = rm_exec,
};
