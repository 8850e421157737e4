/*
 * relay git keygen|set|sync|status|remove: the git source of the functions
 * directory (docs/commands.md, "relay git"). Everything lives under the data directory
 * (RELAY_DATA_DIR, else /var/lib/relay): ssh/id_ed25519 and ssh/known_hosts
 * (sshkey.h), git/source.json and git/checkout (gitsync.h). Only `sync`
 * talks to a remote, and only when run; nothing here touches Redis or
 * Docker. No command ever prints key material: keygen prints the public
 * half, which is what the operator registers as a deploy key.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "cmd/cmd.h"
#include "model/config.h"
#include "base/duration.h"
#include "git/gitsync.h"
#include "base/rfc3339.h"
#include "model/secret.h"
#include "git/sshkey.h"
#include "base/util.h"

/* <data dir>/ssh: the deploy key and known_hosts (sshkey.h). */
static char *ssh_dir(const struct config *cfg)
{
	return xasprintf("%s/ssh", cfg->data_dir);
}

static int keygen_exec(const struct cmd *self, const struct cmd_args *args,
		       const struct config *cfg)
{
	bool force = cmd_flag(args, "--force");
	char *dir = ssh_dir(cfg), *line = NULL, *fp = NULL, *err = NULL, *path = sshkey_path(dir);
	int status = 0;
	int rc = sshkey_generate(dir, force, &line, &fp, &err);
	if (rc == -EEXIST)
		status = cmd_fail("git keygen: %s; `relay git keygen --force` replaces it (the "
				  "old key then stops working wherever it is registered)",
				  err);
	else if (rc < 0)
		status = cmd_fail("git keygen: %s", err);
	else
		printf("Generated SSH deploy key %s\n"
		       "Fingerprint: %s\n"
		       "Add this public key as a read-only deploy key with your git provider:\n"
		       "%s\n",
		       path, fp, line);
	free(dir);
	free(path);
	free(line);
	free(fp);
	free(err);
	return status;
}

static int set_exec(const struct cmd *self, const struct cmd_args *args, const struct config *cfg)
{
	const char *ref = cmd_opt(args, "--ref"), *path = cmd_opt(args, "--path");
	const char *secret = cmd_opt(args, "--webhook-secret"), *repository = args->pos[0];
	char *err = NULL;
	int status = 0;
	struct gitsync_source src = {0}, old = {0};
	if (gitsync_url_parse(repository, NULL, NULL, NULL, NULL, &err) < 0) {
		status = cmd_fail("git set: %s", err);
		goto out;
	}
	if (ref && gitsync_ref_check(ref, &err) < 0) {
		status = cmd_fail("git set: --ref: %s", err);
		goto out;
	}
	if (path && gitsync_path_check(path, &err) < 0) {
		status = cmd_fail("git set: --path: %s", err);
		goto out;
	}
	if (secret && secret_name_check(secret, &err) < 0) {
		status = cmd_fail("git set: --webhook-secret: %s", err);
		goto out;
	}
	src.repository = xstrdup(repository);
	src.ref = xstrdup(ref ? ref : "main");
	src.path = path && strcmp(path, ".") != 0 ? xstrdup(path) : NULL;
	src.webhook_secret = secret ? xstrdup(secret) : NULL;
	/* The sync history belongs to the checkout: kept while the repository
	 * stays the same. A corrupt old file is simply replaced. */
	char *olderr = NULL;
	if (gitsync_source_load(cfg->data_dir, &old, &olderr) == 0 &&
	    strcmp(old.repository, src.repository) == 0) {
		src.last_sync = old.last_sync ? xstrdup(old.last_sync) : NULL;
		src.last_commit = old.last_commit ? xstrdup(old.last_commit) : NULL;
		/* What the ref resolved to holds for that ref only. */
		if (strcmp(old.ref, src.ref) == 0 && old.last_ref)
			src.last_ref = xstrdup(old.last_ref);
	}
	free(olderr);
	if (gitsync_source_save(cfg->data_dir, &src, &err) < 0) {
		status = cmd_fail("git set: %s", err);
		goto out;
	}
	printf("Git source set: %s (ref %s, path %s)\n", src.repository, src.ref,
	       src.path ? src.path : "repository root");
	if (src.webhook_secret)
		printf("Webhook deliveries must be signed with secret '%s'\n", src.webhook_secret);

	/* Hints, not errors: both can be fixed before the first sync. */
	char *dir = ssh_dir(cfg), *line = NULL, *fp = NULL, *kerr = NULL;
	if (sshkey_public(dir, &line, &fp, &kerr) == -ENOENT)
		fprintf(stderr, "relay: note: no deploy key yet: run `relay git keygen` and "
				"register it before `relay git sync`\n");
	free(dir);
	free(line);
	free(fp);
	free(kerr);
	if (src.webhook_secret) {
		struct secret_provider *p = secret_file_provider_new(cfg->data_dir);
		char *v = NULL, *serr = NULL;
		size_t vlen = 0;
		if (secret_get(p, src.webhook_secret, &v, &vlen, &serr) == SECRET_NOT_FOUND)
			fprintf(stderr,
				"relay: note: secret '%s' is not in the secret store yet: run "
				"`relay secret set %s`\n",
				src.webhook_secret, src.webhook_secret);
		secret_value_free(v, vlen);
		free(serr);
		secret_provider_free(p);
	}
out:
	gitsync_source_free(&src);
	gitsync_source_free(&old);
	free(err);
	return status;
}

static void print_notice(void *arg, const char *msg)
{
	(void)arg;
	printf("%s\n", msg);
	fflush(stdout);
}

/* Into the functions directory `relay start` watches (RELAY_FUNCTIONS_DIR,
 * else /functions). */
static int sync_exec(const struct cmd *self, const struct cmd_args *args, const struct config *cfg)
{
	struct gitsync_result res;
	char *err = NULL;
	int status = 0;
	const char *fdir = cfg->functions_dir;
	int rc = gitsync_run(cfg->data_dir, fdir, print_notice, NULL, &res, &err);
	if (rc == -ENOENT)
		status = cmd_fail("git sync: no git source configured: run `relay git set "
				  "<repository>` first");
	else if (rc < 0)
		status = cmd_fail("git sync: %s", err);
	else
		printf("Synced commit %s: %zu function(s) in %s, %zu removed\n", res.commit,
		       res.functions, fdir, res.removed);
	free(err);
	return status;
}

/* git status --json: the same facts as the text (docs/json.md). */
static json_t *status_json(const struct gitsync_source *src, const char *keypath, int krc,
			   const char *fp, const char *kerr, const char *checkout, const char *head)
{
	json_t *o = json_object();
	json_object_set_new(o, "configured", json_true());
	json_object_set_new(o, "repository", json_string(src->repository));
	json_object_set_new(o, "ref", json_string(src->ref));
	json_object_set_new(o, "path", src->path ? json_string(src->path) : json_null());
	json_object_set_new(o, "webhook_secret",
			    src->webhook_secret ? json_string(src->webhook_secret) : json_null());
	json_t *k = json_object();
	json_object_set_new(k, "state",
			    json_string(krc == 0	 ? "present"
					: krc == -ENOENT ? "missing"
							 : "unusable"));
	json_object_set_new(k, "path", json_string(keypath));
	json_object_set_new(k, "fingerprint", krc == 0 ? json_string(fp) : json_null());
	json_object_set_new(k, "error",
			    krc != 0 && krc != -ENOENT ? json_string(kerr) : json_null());
	json_object_set_new(o, "ssh_key", k);
	json_object_set_new(o, "checkout", checkout ? json_string(checkout) : json_null());
	json_object_set_new(o, "commit", head ? json_string(head) : json_null());
	json_t *r = json_null();
	if (src->last_ref) {
		r = json_object();
		json_object_set_new(r, "kind", json_string(gitsync_ref_kind(src->last_ref)));
		json_object_set_new(r, "ref", json_string(src->last_ref));
	}
	json_object_set_new(o, "resolved_as", r);
	int64_t sec;
	int32_t nsec;
	char t[RFC3339_STR_MAX];
	json_object_set_new(
		o, "last_sync",
		!src->last_sync ? json_null()
		: rfc3339_parse(src->last_sync, strlen(src->last_sync), &sec, &nsec) == 0 &&
				sec < INT64_MAX / NS_PER_SEC && sec > INT64_MIN / NS_PER_SEC
			? json_string(rfc3339_format_utc(sec * NS_PER_SEC, t))
			: json_string(src->last_sync));
	return o;
}

static int status_exec(const struct cmd *self, const struct cmd_args *args,
		       const struct config *cfg)
{
	bool as_json = cmd_flag(args, "--json");
	struct gitsync_source src = {0};
	char *err = NULL;
	int rc = gitsync_source_load(cfg->data_dir, &src, &err);
	if (rc == -ENOENT) {
		free(err);
		if (as_json) {
			json_t *o = json_object();
			json_object_set_new(o, "configured", json_false());
			return cmd_print_json(self, o);
		}
		printf("No git source configured.\n");
		return 0;
	}
	if (rc < 0) {
		int status = cmd_fail("git status: %s", err);
		free(err);
		return status;
	}
	char *dir = ssh_dir(cfg), *keypath = sshkey_path(dir), *line = NULL, *fp = NULL;
	char *kerr = NULL, *head = gitsync_checkout_head(cfg->data_dir);
	char *checkout = xasprintf("%s/git/checkout", cfg->data_dir);
	int krc = sshkey_public(dir, &line, &fp, &kerr);
	struct stat st;
	bool have_checkout = lstat(checkout, &st) == 0 && S_ISDIR(st.st_mode);
	int status = 0;
	if (as_json) {
		status = cmd_print_json(self, status_json(&src, keypath, krc, fp, kerr,
							  have_checkout ? checkout : NULL, head));
		goto out;
	}
	printf("Repository:     %s\n", src.repository);
	printf("Ref:            %s\n", src.ref);
	printf("Path:           %s\n", src.path ? src.path : "(repository root)");
	printf("Webhook secret: %s\n", src.webhook_secret ? src.webhook_secret : "(none)");
	if (krc == 0)
		printf("SSH key:        present (%s, %s)\n", keypath, fp);
	else if (krc == -ENOENT)
		printf("SSH key:        missing (run `relay git keygen`)\n");
	else
		printf("SSH key:        unusable: %s\n", kerr);
	printf("Checkout:       %s%s%s\n", have_checkout ? "present (" : "absent",
	       have_checkout ? checkout : "", have_checkout ? ")" : "");
	printf("Commit:         %s\n", head ? head : "(none)");
	/* The kind the ref resolved to: branch, tag or commit. */
	if (src.last_ref)
		printf("Resolved as:    %s %s\n", gitsync_ref_kind(src.last_ref), src.last_ref);
	else
		printf("Resolved as:    (not yet: relay git sync resolves the ref)\n");
	printf("Last sync:      %s\n", src.last_sync ? src.last_sync : "never");
out:
	free(dir);
	free(keypath);
	free(line);
	free(fp);
	free(kerr);
	free(head);
	free(checkout);
	gitsync_source_free(&src);
	return status;
}

static int remove_exec(const struct cmd *self, const struct cmd_args *args,
		       const struct config *cfg)
{
	char *err = NULL;
	int status = 0;
	int rc = gitsync_source_remove(cfg->data_dir, &err);
	if (rc == -ENOENT)
		printf("No git source configured.\n");
	else if (rc < 0)
		status = cmd_fail("git remove: %s", err);
	else
		printf("Removed the git source and its checkout (the functions directory and "
		       "the SSH key are kept).\n");
	free(err);
	return status;
}

const struct cmd cmd_git_keygen = {
	.words = "git keygen",
	.args = "[--force]",
	.summary = "generate an SSH deploy key",
	.opts = (const struct cmd_opt[]){{"--force", NULL, false}, {NULL}},
	.help = "Writes an ed25519 key to <data dir>/ssh/id_ed25519 (0600) and prints its public\n"
		"half to register as a read-only deploy key. An existing key is kept unless "
		"--force.\n",
	.touches = CMD_DATA_FILES,
	.exec = keygen_exec,
};
const struct cmd cmd_git_set = {
	.words = "git set",
	.args = "[--ref REF] [--path PATH] [--webhook-secret NAME] <repository>",
	.summary = "set the git source to sync from",
	.opts = (const struct cmd_opt[]){{"--ref", NULL, true},
					 {"--path", NULL, true},
					 {"--webhook-secret", NULL, true},
					 {NULL}},
	.minpos = 1,
	.maxpos = 1,
	.help = "<repository> is an SSH URL: git@host:org/repo.git or "
		"ssh://git@host[:port]/org/repo.git.\n"
		"--ref is a branch, tag or commit (default main): a full 40-hex id is always that\n"
		"commit; refs/heads/NAME or refs/tags/NAME select a branch or a tag; a bare NAME "
		"is\n"
		"whichever of the two exists, and a sync refuses it when both do. --path is a\n"
		"subdirectory holding the functions; --webhook-secret names the secret GitHub\n"
		"webhook deliveries are signed with. Running it again replaces the source.\n",
	.touches = CMD_DATA_FILES,
	.exec = set_exec,
};
const struct cmd cmd_git_sync = {
	.words = "git sync",
	.args = "",
	.summary = "sync the source into the functions directory",
	.help = "Fetches the configured ref over SSH with the deploy key, checks it out "
		"(detached,\n"
		"hard reset) and makes the functions directory (RELAY_FUNCTIONS_DIR, else "
		"/functions)\n"
		"hold exactly the source's functions. A first contact with a host pins its key in\n"
		"<data dir>/ssh/known_hosts; a changed key fails the sync.\n",
	.touches = CMD_DATA_FILES | CMD_FUNCTIONS_WRITE | CMD_NETWORK,
	.exec = sync_exec,
};
const struct cmd cmd_git_status = {
	.words = "git status",
	.args = "[--json]",
	.summary = "show git sync state",
	.opts = (const struct cmd_opt[]){{"--json", NULL, false}, {NULL}},
	.help = "--json prints one JSON document (docs/json.md).\n",
	.touches = CMD_DATA_FILES,
	.exec = status_exec,
};
const struct cmd cmd_git_remove = {
	.words = "git remove",
	.args = "",
	.summary = "forget the source and drop the checkout",
	.help = "Deletes <data dir>/git/source.json and the checkout; keeps the functions "
		"directory\n"
		"and the SSH key.\n",
	.touches = CMD_DATA_FILES,
	.exec = remove_exec,
};
