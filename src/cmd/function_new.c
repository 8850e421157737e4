/*
 * relay function new NAME --runtime RUNTIME [--dir DIR]: scaffolds a
 * function, DIR/NAME (DIR defaults to the functions directory), holding a
 * template.yaml that validates (one rule matching NEW_SAMPLE_EVENT), one
 * handler with a commented example, and the runtime's dependency manifest
 * with nothing in it.
 *
 * The files are written into a staging directory beside DIR/NAME (named
 * with FUNCTION_STAGING_PREFIX, which every reader of the functions
 * directory skips) and renamed into place without replacing anything: a
 * failure leaves no DIR/NAME and no staging directory, and a running relay
 * never sees a half-written function. Touches the functions directory
 * only (no Redis, Docker or state database).
 *
 * The empty manifests are byte-identical for every function of a runtime,
 * so their dependency image (image.h: keyed by the manifest's content) is
 * built once per Docker host and shared.
 *
 * Exit status: 0; 1 for an invalid name, an existing DIR/NAME or a write
 * error (one line on stderr); 2 for a usage error (an unknown runtime).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd/cmd.h"
#include "model/function.h"
#include "model/runtime.h"
#include "base/util.h"

/* The event the scaffold's rule matches and its comments and the printed
 * next step show. */
#define NEW_SAMPLE_EVENT "{\"event_name\":\"hello\",\"name\":\"world\"}"

/* What one runtime's scaffold holds: NAME in a text is replaced by the
 * function's name. */
struct scaffold {
	const char *runtime;
	const char *handler_file, *handler_text;
	const char *manifest_file, *manifest_text;
};

static const struct scaffold scaffolds[] = {
	{
		"python3.14",
		"handler.py",
		"# The handler of function NAME: relay calls handler(event) for each event\n"
		"# that a rule in template.yaml matches. Relay's bootstrap reads the event\n"
		"# (one JSON object) from stdin and passes it decoded, as a dict. What the\n"
		"# handler prints goes to relay's log line by line, prefixed with the\n"
		"# function and handler; an exception fails the invocation, which is\n"
		"# retried and at last dead-lettered.\n"
		"#\n"
		"# Try it:\n"
		"#   relay function invoke NAME --event '" NEW_SAMPLE_EVENT "'\n"
		"#   relay event send '" NEW_SAMPLE_EVENT "'   (to a running relay)\n"
		"\n"
		"\n"
		"def handler(event):\n"
		"    # " NEW_SAMPLE_EVENT " prints \"hello, world\".\n"
		"    name = event.get(\"name\", \"world\")\n"
		"    print(f\"hello, {name}\")\n",
		"requirements.txt",
		"# One requirement per line (pip's format), e.g. requests==2.32.3.\n"
		"# Relay installs them when it builds the function's image.\n",
	},
	{
		"node24",
		"handler.js",
		"// The handler of function NAME: relay calls handler(event) for each event\n"
		"// that a rule in template.yaml matches. Relay's bootstrap reads the event\n"
		"// (one JSON object) from stdin and passes it parsed. What the handler\n"
		"// prints goes to relay's log line by line, prefixed with the function and\n"
		"// handler; a thrown error (or a rejected promise) fails the invocation,\n"
		"// which is retried and at last dead-lettered.\n"
		"//\n"
		"// Try it:\n"
		"//   relay function invoke NAME --event '" NEW_SAMPLE_EVENT "'\n"
		"//   relay event send '" NEW_SAMPLE_EVENT "'   (to a running relay)\n"
		"\n"
		"export async function handler(event) {\n"
		"  // " NEW_SAMPLE_EVENT " prints \"hello, world\".\n"
		"  const name = event.name ?? \"world\";\n"
		"  console.log(`hello, ${name}`);\n"
		"}\n",
		"package.json",
		/* "type": "module": handler.js is an ES module (a function's own
		 * package.json replaces the one relay adds, runtime.c). */
		"{\n"
		"  \"private\": true,\n"
		"  \"type\": \"module\",\n"
		"  \"dependencies\": {}\n"
		"}\n",
	},
};

static const char template_text[] =
	"# Function NAME: one rule, run for each event whose event_name is \"hello\".\n"
	"# Every key and pattern operator: docs/template.md.\n"
	"runtime: RUNTIME\n"
	"\n"
	"events:\n"
	"  - handler: handler.handler   # module.function: HANDLER_FILE, handler()\n"
	"    pattern:\n"
	"      event_name: [hello]\n";

/* text with every NAME, RUNTIME and HANDLER_FILE replaced. malloc'd. */
static char *fill(const char *text, const char *name, const struct scaffold *s)
{
	static const char *const keys[] = {"NAME", "RUNTIME", "HANDLER_FILE"};
	const char *vals[] = {name, s->runtime, s->handler_file};
	struct buf b;
	buf_init(&b, 64 * 1024);
	for (const char *p = text; *p;) {
		size_t k = 0;
		while (k < ARRAY_LEN(keys) && strncmp(p, keys[k], strlen(keys[k])) != 0)
			k++;
		if (k < ARRAY_LEN(keys)) {
			buf_appendf(&b, "%s", vals[k]);
			p += strlen(keys[k]);
		} else {
			buf_append(&b, p++, 1);
		}
	}
	return buf_steal(&b);
}

/* Writes name (new) in the directory dfd. 0, or -1 with *err. */
static int write_new(int dfd, const char *dir, const char *name, const char *text, char **err)
{
	int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0)
		return sys_error(err, "cannot create a file in", dir, errno);
	bool ok = write_all(fd, text, strlen(text)) == 0 && fsync(fd) == 0;
	int e = errno;
	if (close(fd) < 0 && ok) {
		ok = false;
		e = errno;
	}
	return ok ? 0 : sys_error(err, "cannot write a file in", dir, e);
}

/* s as one shell word: as it is when it needs no quoting, else in single
 * quotes. malloc'd. */
static char *shell_word(const char *s)
{
	if (*s && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
			    "_-./:,+=@%") == strlen(s))
		return xstrdup(s);
	struct buf b;
	buf_init(&b, 64 * 1024);
	buf_appendf(&b, "'");
	for (const char *p = s; *p; p++)
		buf_appendf(&b, *p == '\'' ? "'\\''" : "%c", *p);
	buf_appendf(&b, "'");
	return buf_steal(&b);
}

/* One function new's state. Each step answers 0, -1 with err (the line
 * new_exec prints), or 1 when it printed its line itself. */
struct new_fn {
	const struct cmd *self;
	const char *name, *dir;
	const struct scaffold *s;
	char *target; /* dir/name */
	char *stage;  /* the staging directory while it exists, else NULL */
	int dfd, sfd; /* dir and stage, open; -1 when not */
	const char *files[3];
	char *texts[3];
	char *err;
};

/* Checks the options and the name: *s is the runtime's scaffold, *dir
 * where the function goes. 0, 1 (an invalid name) or 2 after one line. */
static int new_check_args(const struct cmd *self, const struct cmd_args *args,
			  const struct config *cfg, const struct scaffold **s, const char **dir)
{
	const char *name = args->pos[0], *rt_name = cmd_opt(args, "--runtime");
	const char *dir_opt = cmd_opt(args, "--dir");
	*dir = dir_opt ? dir_opt : cfg->functions_dir;
	if (dir_opt && !*dir_opt) {
		fprintf(stderr, "relay %s: --dir must not be empty\n", self->words);
		return 2;
	}
	if (!rt_name) {
		fprintf(stderr, "relay %s: --runtime is required (one of %s)\n", self->words,
			runtime_names());
		return 2;
	}
	*s = NULL;
	for (size_t i = 0; i < ARRAY_LEN(scaffolds); i++)
		if (strcmp(scaffolds[i].runtime, rt_name) == 0 && runtime_find(rt_name))
			*s = &scaffolds[i];
	if (!*s) {
		char *shown = str_for_message(rt_name, 64);
		fprintf(stderr, "relay %s: unsupported runtime \"%s\" (supported: %s)\n",
			self->words, shown, runtime_names());
		free(shown);
		return 2;
	}
	const char *why = NULL;
	if (!function_name_valid(name, &why)) {
		char *shown = str_for_message(name, 80);
		int rc = cmd_fail("%s: invalid function name \"%s\": %s (" FUNCTION_NAME_RULE ")",
				  self->words, shown, why);
		free(shown);
		return rc;
	}
	return 0;
}

/* Refuses a target that exists. */
static int new_check_target(struct new_fn *nf)
{
	struct stat st;
	if (lstat(nf->target, &st) == 0)
		return cmd_fail("%s: %s already exists", nf->self->words, nf->target);
	if (errno != ENOENT)
		return sys_error(&nf->err, "cannot create", nf->target, errno);
	return 0;
}

/* Makes dir when missing and the staging directory in it, both open. */
static int new_make_stage(struct new_fn *nf)
{
	if (mkdir_p(nf->dir, 0755, 0, NULL, NULL, &nf->err) < 0)
		return -1;
	nf->dfd = open(nf->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (nf->dfd < 0)
		return sys_error(&nf->err, "cannot open directory", nf->dir, errno);
	nf->stage = xasprintf("%s/" FUNCTION_STAGING_PREFIX "new-%s.tmp-XXXXXX", nf->dir, nf->name);
	if (!mkdtemp(nf->stage)) {
		sys_error(&nf->err, "cannot create a temporary directory in", nf->dir, errno);
		free(nf->stage);
		nf->stage = NULL;
		return -1;
	}
	nf->sfd = open(nf->stage, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (nf->sfd < 0 || fchmod(nf->sfd, 0755) < 0)
		return sys_error(&nf->err, "cannot open directory", nf->stage, errno);
	return 0;
}

/* Writes the scaffold's files into the staging directory, synced. */
static int new_write_files(struct new_fn *nf)
{
	nf->texts[0] = fill(template_text, nf->name, nf->s);
	nf->texts[1] = fill(nf->s->handler_text, nf->name, nf->s);
	nf->texts[2] = fill(nf->s->manifest_text, nf->name, nf->s);
	for (size_t i = 0; i < 3; i++)
		if (write_new(nf->sfd, nf->stage, nf->files[i], nf->texts[i], &nf->err) < 0)
			return -1;
	if (fsync(nf->sfd) < 0)
		return sys_error(&nf->err, "cannot write a file in", nf->stage, errno);
	return 0;
}

/* Renames the staging directory to the target, replacing nothing. */
static int new_rename(struct new_fn *nf)
{
	if (renameat2(AT_FDCWD, nf->stage, AT_FDCWD, nf->target, RENAME_NOREPLACE) < 0) {
		if (errno == EEXIST || errno == ENOTEMPTY)
			return cmd_fail("%s: %s already exists", nf->self->words, nf->target);
		return sys_error(&nf->err, "cannot create", nf->target, errno);
	}
	free(nf->stage);
	nf->stage = NULL;
	fsync(nf->dfd);
	return 0;
}

/* Prints the files created and the command that runs the handler once
 * (with RELAY_FUNCTIONS_DIR when --dir is not the functions directory). */
static int new_report(struct new_fn *nf, const char *dir_opt, const struct config *cfg)
{
	for (size_t i = 0; i < 3; i++)
		printf("created %s/%s\n", nf->target, nf->files[i]);
	if (dir_opt && strcmp(dir_opt, cfg->functions_dir) != 0) {
		char *w = shell_word(nf->dir);
		printf("next: RELAY_FUNCTIONS_DIR=%s relay function invoke %s --event '%s'\n", w,
		       nf->name, NEW_SAMPLE_EVENT);
		free(w);
	} else {
		printf("next: relay function invoke %s --event '%s'\n", nf->name, NEW_SAMPLE_EVENT);
	}
	return fflush(stdout) == 0 ? 0 : cmd_fail("%s: write: output error", nf->self->words);
}

/* After a failed step: its line when it left one in err, and the staging
 * directory removed; then what every path releases. */
static void new_finish(struct new_fn *nf, int rc)
{
	if (rc < 0)
		cmd_fail("%s: %s", nf->self->words, nf->err);
	if (rc && nf->stage) {
		for (size_t i = 0; nf->sfd >= 0 && i < 3; i++)
			unlinkat(nf->sfd, nf->files[i], 0);
		rmdir(nf->stage);
	}
	if (nf->sfd >= 0)
		close(nf->sfd);
	if (nf->dfd >= 0)
		close(nf->dfd);
	for (size_t i = 0; i < 3; i++)
		free(nf->texts[i]);
	free(nf->stage);
	free(nf->err);
	free(nf->target);
}

static int new_exec(const struct cmd *self, const struct cmd_args *args, const struct config *cfg)
{
	const struct scaffold *s;
	const char *dir;
	int rc = new_check_args(self, args, cfg, &s, &dir);
	if (rc)
		return rc;
	struct new_fn nf = {
		.self = self,
		.name = args->pos[0],
		.dir = dir,
		.s = s,
		.target = xasprintf("%s/%s", dir, args->pos[0]),
		.dfd = -1,
		.sfd = -1,
		.files = {"template.yaml", s->handler_file, s->manifest_file},
	};
	rc = new_check_target(&nf);
	if (rc == 0)
		rc = new_make_stage(&nf);
	if (rc == 0)
		rc = new_write_files(&nf);
	if (rc == 0)
		rc = new_rename(&nf);
	if (rc == 0)
		rc = new_report(&nf, cmd_opt(args, "--dir"), cfg);
	new_finish(&nf, rc);
	return rc < 0 ? 1 : rc;
}

const struct cmd cmd_function_new = {
	.words = "function new",
	.args = "<name> --runtime RUNTIME [--dir DIR]",
	.summary = "create a function to start from",
	.opts = (const struct cmd_opt[]){{"--runtime", NULL, true}, {"--dir", NULL, true}, {NULL}},
	.minpos = 1,
	.maxpos = 1,
	.help = "Creates DIR/<name> (DIR: the functions directory, RELAY_FUNCTIONS_DIR, else\n"
		"/functions; made if missing) with template.yaml (one rule: event_name "
		"\"hello\"),\n"
		"a handler (handler.py or handler.js) and an empty dependency manifest\n"
		"(requirements.txt or package.json). RUNTIME is python3.14 or node24. Prints\n"
		"\"created <path>\" for each file, then \"next: \" and the command that runs the\n"
		"handler once. Exit 1 for an invalid name or an existing DIR/<name> (nothing is\n"
		"written), 2 for a usage error.\n",
	.touches = CMD_FUNCTIONS_WRITE,
	.exec = new_exec,
};
