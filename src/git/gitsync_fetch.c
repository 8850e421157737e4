/*
 * Git sync (see gitsync.h and README "relay git").
 *
 * One sync, under an exclusive flock on git/.lock:
 *
 *   1. source.json is (re)loaded under the lock, the deploy key checked;
 *   2. git/checkout is opened, or deleted and re-created when its "origin"
 *      remote is another repository (or it is not a usable repository);
 *   3. fetch over SSH with libgit2: the credentials callback hands out the
 *      deploy key file only (never ssh-agent, never a password) and gives
 *      up after AUTH_ATTEMPTS offers, since libgit2 would otherwise ask
 *      again forever; the certificate callback takes the raw host key blob
 *      and makes the TOFU decision with known_hosts_verify (libgit2's own
 *      `valid`, from $HOME/.ssh/known_hosts, is ignored). A callback's
 *      message is kept in struct remote_ctx and preferred over libgit2's
 *      vaguer one ("user rejected certificate");
 *   4. ref is resolved (origin branch, tag, commit id) and checked out
 *      detached with a forced checkout that also drops untracked and
 *      ignored files: a hard reset, never a merge;
 *   5. every function of the source directory is first copied into a
 *      temporary directory next to its destination (phase 1, all bounds
 *      checked here, so a repository over the limits leaves the functions
 *      directory exactly as it was), then swapped in with one
 *      renameat2(RENAME_EXCHANGE) each (or two renames where the file
 *      system lacks it), then every other directory is removed.
 *
 * libgit2 is initialized once per process; its global, XDG and system
 * configuration search paths are emptied, so an operator's ~/.gitconfig
 * (insteadOf, sshCommand, ...) cannot change what a sync does.
 */
#include "git/gitsync.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <git2.h>
#include <git2/sys/stream.h>
#include <jansson.h>
#include <limits.h>
#include <linux/tcp.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/duration.h"
#include "model/function.h"
#include "base/rfc3339.h"
#include "model/secret.h"
#include "git/sshkey.h"
#include "base/util.h"

#define URL_MAX 1024
#define REF_MAX 255
#define SUBPATH_MAX 1024
#define SOURCE_FILE_MAX (64 * 1024)
#define AUTH_ATTEMPTS 2
#define SYNC_PREFIX FUNCTION_STAGING_PREFIX
/* A wait for the sync lock looks for gitsync_cancel_all this often. */
#define LOCK_POLL_MS 50

/* gitsync_cancel_all: Relay is shutting down (see "network bounds"). */
static atomic_bool cancel_all;

#define URL_HINT "use git@host:org/repo.git or ssh://git@host/org/repo.git (HTTPS is not supported)"

/* ---- small helpers ---- */

/* s as it may appear in a message (it may be anything a user typed). */
static char *shown(const char *s)
{
	return str_for_message(s, 200);
}

static bool has_space_or_ctl(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s <= 0x20 || (unsigned char)*s == 0x7f)
			return true;
	return false;
}

static const char *gerr(void)
{
	const git_error *e = git_error_last();
	return e && e->message ? e->message : "unknown libgit2 error";
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void strv_free(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

/* ---- URLs ---- */

struct url_parts {
	char *scheme; /* lowercased; NULL for scp-like */
	char *user;   /* NULL when absent */
	char *host;
	int port; /* 0 when absent */
	char *path;
};

static void url_parts_free(struct url_parts *u)
{
	free(u->scheme);
	free(u->user);
	free(u->host);
	free(u->path);
	memset(u, 0, sizeof *u);
}

static bool host_ok(const char *h, bool bracketed)
{
	if (!*h || *h == '-')
		return false;
	for (; *h; h++) {
		char c = *h;
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_' ||
			  (bracketed && (c == ':' || c == '%'));
		if (!ok)
			return false;
	}
	return true;
}

/* "host", "host:port", "[v6]" or "[v6]:port" (port only when allowed). */
static int split_hostport(const char *s, size_t n, bool allow_port, struct url_parts *u,
			  const char **why)
{
	const char *end = s + n, *hend, *colon = NULL;
	bool bracketed = n > 0 && *s == '[';
	if (bracketed) {
		const char *rb = memchr(s, ']', n);
		if (!rb) {
			*why = "unterminated '[' in the host";
			return -1;
		}
		u->host = xstrndup(s + 1, (size_t)(rb - s - 1));
		hend = rb + 1;
		if (hend < end && *hend != ':') {
			*why = "unexpected characters after ']'";
			return -1;
		}
		colon = hend < end ? hend : NULL;
	} else {
		colon = allow_port ? memchr(s, ':', n) : NULL;
		u->host = xstrndup(s, colon ? (size_t)(colon - s) : n);
	}
	if (!*u->host) {
		*why = "empty host";
		return -1;
	}
	if (!host_ok(u->host, bracketed)) {
		*why = "invalid host name";
		return -1;
	}
	if (colon) {
		if (!allow_port) {
			*why = "unexpected ':' after the host";
			return -1;
		}
		int64_t port;
		char *digits = xstrndup(colon + 1, (size_t)(end - colon - 1));
		int bad = parse_int64(digits, &port) < 0 || digits[0] == '+' || digits[0] == '-' ||
			  port < 1 || port > 65535;
		free(digits);
		if (bad) {
			*why = "port must be a number from 1 to 65535";
			return -1;
		}
		u->port = (int)port;
	}
	return 0;
}

static int split_user(const char *s, size_t n, struct url_parts *u, const char **why)
{
	u->user = xstrndup(s, n);
	if (!*u->user || *u->user == '-' || strpbrk(u->user, "/:@[]")) {
		*why = "invalid user name";
		return -1;
	}
	return 0;
}

/*
 * Splits scheme://[user@]host[:port]/path (any scheme) or scp-like
 * [user@]host:path. On failure *why is a static reason; u holds partial
 * results either way (url_parts_free).
 */
/* The repository part of a URL path: without leading and trailing '/' and
 * a trailing ".git". *n is 0 when nothing names a repository ("/", ".git"). */
static const char *repo_path_span(const char *path, size_t *n)
{
	while (*path == '/')
		path++;
	size_t k = strlen(path);
	while (k > 0 && path[k - 1] == '/')
		k--;
	if (k >= 4 && memcmp(path + k - 4, ".git", 4) == 0)
		k -= 4;
	while (k > 0 && path[k - 1] == '/')
		k--;
	*n = k;
	return path;
}

static int url_split_raw(const char *url, struct url_parts *u, const char **why)
{
	memset(u, 0, sizeof *u);
	size_t len = strlen(url);
	if (len == 0) {
		*why = "empty";
		return -1;
	}
	if (len > URL_MAX) {
		*why = "longer than 1024 bytes";
		return -1;
	}
	if (has_space_or_ctl(url)) {
		*why = "contains whitespace or control characters";
		return -1;
	}
	const char *sep = strstr(url, "://");
	const char *slash = strchr(url, '/');
	if (sep && sep > url && slash == sep + 1) {
		u->scheme = xstrndup(url, (size_t)(sep - url));
		for (char *p = u->scheme; *p; p++)
			if (*p >= 'A' && *p <= 'Z')
				*p = (char)(*p - 'A' + 'a');
		const char *auth = sep + 3;
		const char *pslash = strchr(auth, '/');
		size_t alen = pslash ? (size_t)(pslash - auth) : strlen(auth);
		const char *at = memchr(auth, '@', alen);
		if (at && split_user(auth, (size_t)(at - auth), u, why) < 0)
			return -1;
		const char *hp = at ? at + 1 : auth;
		if (split_hostport(hp, alen - (size_t)(hp - auth), true, u, why) < 0)
			return -1;
		if (!pslash || !pslash[1]) {
			*why = "empty path";
			return -1;
		}
		u->path = xstrdup(pslash);
		return 0;
	}
	/* scp-like: the host part ends at the first ':' outside brackets and
	 * must come before any '/' (git treats "a/b:c" as a local path). */
	const char *p = url;
	size_t ulen = strcspn(url, "@:/[");
	if (url[ulen] == '@') {
		if (split_user(url, ulen, u, why) < 0)
			return -1;
		p = url + ulen + 1;
	}
	const char *colon;
	if (*p == '[') {
		const char *rb = strchr(p, ']');
		colon = rb && rb[1] == ':' ? rb + 1 : NULL;
	} else {
		colon = strchr(p, ':');
	}
	if (!colon || (slash && slash < colon)) {
		*why = "a local path";
		return -1;
	}
	if (!u->user && colon == p + 1 && ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z'))) {
		*why = "a Windows drive path";
		return -1;
	}
	if (split_hostport(p, (size_t)(colon - p), false, u, why) < 0)
		return -1;
	if (!colon[1]) {
		*why = "empty path";
		return -1;
	}
	u->path = xstrdup(colon + 1);
	return 0;
}

/* Splits url; the path must name a repository. */
static int url_split(const char *url, struct url_parts *u, const char **why)
{
	if (url_split_raw(url, u, why) < 0)
		return -1;
	size_t n;
	repo_path_span(u->path, &n);
	if (n == 0) {
		*why = "no repository path";
		return -1;
	}
	return 0;
}

int git_url_parse(const char *url, char **user, char **host, int *port, char **path, char **err)
{
	struct url_parts u;
	const char *why = NULL;
	int rc = url_split(url, &u, &why);
	if (rc == 0 && u.scheme && strcmp(u.scheme, "ssh") != 0)
		rc = -1, why = NULL;
	if (rc < 0) {
		char *s = shown(url);
		if (!why || strcmp(why, "a local path") == 0)
			*err = xasprintf("repository '%s' is not an SSH URL: %s", s, URL_HINT);
		else
			*err = xasprintf("repository '%s' is not a valid SSH URL (%s): %s", s, why,
					 URL_HINT);
		free(s);
		url_parts_free(&u);
		return -1;
	}
	if (user) {
		*user = u.user ? u.user : xstrdup("git");
		u.user = NULL;
	}
	if (host) {
		*host = u.host;
		u.host = NULL;
	}
	if (port)
		*port = u.port ? u.port : 22;
	if (path) {
		*path = u.path;
		u.path = NULL;
	}
	url_parts_free(&u);
	return 0;
}

char *git_repo_identity(const char *url)
{
	struct url_parts u;
	const char *why;
	char *id = NULL;
	if (url_split(url, &u, &why) < 0)
		goto out;
	if (u.scheme && strcmp(u.scheme, "ssh") && strcmp(u.scheme, "https") &&
	    strcmp(u.scheme, "http") && strcmp(u.scheme, "git"))
		goto out;
	for (char *h = u.host; *h; h++)
		if (*h >= 'A' && *h <= 'Z')
			*h = (char)(*h - 'A' + 'a');
	size_t n;
	const char *p = repo_path_span(u.path, &n);
	if (n > 0)
		id = xasprintf("%s/%.*s", u.host, (int)n, p);
out:
	url_parts_free(&u);
	return id;
}

int git_path_check(const char *path, char **err)
{
	const char *why = NULL;
	size_t n = strlen(path);
	if (n == 0)
		why = "it is empty";
	else if (n > SUBPATH_MAX)
		why = "it is longer than 1024 bytes";
	else if (path[0] == '/')
		why = "it must be relative to the repository root";
	else if (strcmp(path, ".") != 0) {
		for (const char *s = path; !why;) {
			size_t k = strcspn(s, "/");
			if (k == 0 || (k == 1 && s[0] == '.'))
				why = "empty or '.' segments are not allowed";
			else if (k == 2 && s[0] == '.' && s[1] == '.')
				why = "'..' segments are not allowed";
			if (!s[k])
				break;
			s += k + 1;
		}
	}
	for (const char *s = path; !why && *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			why = "it contains control characters";
	if (!why)
		return 0;
	char *s = shown(path);
	*err = xasprintf("invalid path '%s': %s", s, why);
	free(s);
	return -1;
}

static bool is_hex(const char *s, size_t min, size_t max)
{
	size_t n = strspn(s, "0123456789abcdefABCDEF");
	return !s[n] && n >= min && n <= max;
}

static bool hex40(const char *s)
{
	size_t n = strspn(s, "0123456789abcdef");
	return n == 40 && !s[n];
}

/* refs/heads/NAME or refs/tags/NAME: the name part, else NULL. */
static const char *explicit_name(const char *ref)
{
	if (str_has_prefix(ref, "refs/heads/"))
		return ref + strlen("refs/heads/");
	if (str_has_prefix(ref, "refs/tags/"))
		return ref + strlen("refs/tags/");
	return NULL;
}

static pthread_once_t git_once = PTHREAD_ONCE_INIT;
static void git_init_once(void);

/* Why ref cannot be a --ref (a static reason), or NULL. */
static const char *ref_why(const char *ref)
{
	size_t n = strlen(ref);
	if (n == 0)
		return "it is empty";
	if (n > REF_MAX)
		return "it is longer than 255 bytes";
	if (has_space_or_ctl(ref))
		return "it contains whitespace or control characters";
	if (is_hex(ref, 40, 40))
		return NULL;
	const char *name = explicit_name(ref);
	if (!name && str_has_prefix(ref, "refs/"))
		return "a full ref must be refs/heads/NAME (a branch) or refs/tags/NAME (a tag)";
	if (name && !*name)
		return "the branch or tag name is empty";
	/* A bare name is checked as the branch it may be. */
	char *full = name ? xstrdup(ref) : xasprintf("refs/heads/%s", ref);
	int valid = 0;
	pthread_once(&git_once, git_init_once);
	bool ok = git_reference_name_is_valid(&valid, full) == 0 && valid;
	free(full);
	return ok ? NULL : "it is not a valid git branch or tag name";
}

int gitsync_ref_check(const char *ref, char **err)
{
	const char *why = ref_why(ref);
	if (!why)
		return 0;
	if (err) {
		char *s = shown(ref);
		*err = xasprintf("invalid ref '%s': %s", s, why);
		free(s);
	}
	return -1;
}

/* Can resolved (a last_ref) be what ref resolves to? */
static bool resolves_to(const char *ref, const char *resolved)
{
	if (is_hex(ref, 40, 40))
		return hex40(resolved) && strncasecmp(ref, resolved, 40) == 0;
	if (explicit_name(ref))
		return strcmp(ref, resolved) == 0;
	const char *name = explicit_name(resolved);
	if (name)
		return strcmp(name, ref) == 0;
	return hex40(resolved) && is_hex(ref, 4, 39) &&
	       strncasecmp(ref, resolved, strlen(ref)) == 0;
}

const char *gitsync_ref_kind(const char *resolved)
{
	if (!resolved)
		return NULL;
	if (str_has_prefix(resolved, "refs/heads/"))
		return "branch";
	if (str_has_prefix(resolved, "refs/tags/"))
		return "tag";
	return hex40(resolved) ? "commit" : NULL;
}

/* Everything a source must satisfy, whether loaded or about to be saved. */
static int source_validate(const struct git_source *s, char **err)
{
	if (!s->repository) {
		*err = xstrdup("no repository");
		return -1;
	}
	if (git_url_parse(s->repository, NULL, NULL, NULL, NULL, err) < 0)
		return -1;
	if (!s->ref) {
		*err = xstrdup("no ref");
		return -1;
	}
	if (gitsync_ref_check(s->ref, err) < 0)
		return -1;
	if (s->path && git_path_check(s->path, err) < 0)
		return -1;
	if (s->webhook_secret && secret_name_check(s->webhook_secret, err) < 0)
		return -1;
	int64_t sec;
	int32_t nsec;
	if (s->last_sync && rfc3339_parse(s->last_sync, strlen(s->last_sync), &sec, &nsec) < 0) {
		*err = xstrdup("last_sync is not an RFC 3339 timestamp");
		return -1;
	}
	if (s->last_commit && !hex40(s->last_commit)) {
		*err = xstrdup("last_commit is not a 40-digit commit id");
		return -1;
	}
	if (s->last_ref && !resolves_to(s->ref, s->last_ref)) {
		*err = xstrdup("last_ref is not what ref can resolve to");
		return -1;
	}
	return 0;
}

void git_source_free(struct git_source *s)
{
	if (!s)
		return;
	free(s->repository);
	free(s->ref);
	free(s->path);
	free(s->webhook_secret);
	free(s->last_sync);
	free(s->last_commit);
	free(s->last_ref);
	memset(s, 0, sizeof *s);
}

/* ---- git/ and source.json ---- */

/* <data_dir>/<sub>; "dir" and "dir/" give the same. */
static char *data_path(const char *data_dir, const char *sub)
{
	size_t n = strlen(data_dir);
	while (n > 1 && data_dir[n - 1] == '/')
		n--;
	return xasprintf("%.*s/%s", (int)n, data_dir, sub);
}

static char *git_dir_path(const char *data_dir)
{
	return data_path(data_dir, "git");
}

/* Opens and checks git/ into *fd (0700, ours, not a symlink). With create,
 * git/ (and missing parents) are made 0700; without, a missing git/ is
 * -ENOENT (no message). */
static int open_git_dir(const char *data_dir, bool create, int *fd, char **err)
{
	char *dir = git_dir_path(data_dir);
	int rc = 0, d = -1;
	bool created = false;
	*fd = -1;
	if (create && (rc = mkdir_p(dir, 0700, 0, NULL, &created, err)) < 0)
		goto out;
	d = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (d < 0) {
		if (errno == ENOENT && !create)
			rc = -ENOENT;
		else if (errno == ELOOP || errno == ENOTDIR)
			*err = xasprintf("git directory %s: not a directory (or a symbolic link); "
					 "refusing to use it",
					 dir),
			rc = -1;
		else
			rc = sys_error(err, "cannot open git directory", dir, errno);
		goto out;
	}
	struct stat st;
	if (created && fchmod(d, 0700) < 0) {
		rc = sys_error(err, "cannot set the mode of", dir, errno);
		goto out;
	}
	if (fstat(d, &st) < 0) {
		rc = sys_error(err, "cannot stat", dir, errno);
		goto out;
	}
	rc = check_owner_mode(&st, 077, "git directory", dir, "use", err);
out:
	if (rc < 0 && d >= 0)
		close(d);
	else if (rc == 0)
		*fd = d;
	free(dir);
	return rc;
}

/* Reads source.json through dfd (checked, bounded) into a NUL-terminated
 * buffer. -ENOENT (no message) when it does not exist. */
static int read_source_file(int dfd, const char *path, char **out, char **err)
{
	struct stat before, after;
	int fd = -1, rc = -1;
	if (fstatat(dfd, "source.json", &before, AT_SYMLINK_NOFOLLOW) < 0) {
		if (errno == ENOENT)
			return -ENOENT;
		return sys_error(err, "cannot stat", path, errno);
	}
	if (!S_ISREG(before.st_mode)) {
		*err = xasprintf("%s: not a regular file; refusing to read it", path);
		return -1;
	}
	if (check_owner_mode(&before, 077, "git source file", path, "use", err) < 0)
		return -1;
	fd = openat(dfd, "source.json", O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		rc = errno == ENOENT ? -ENOENT : sys_error(err, "cannot open", path, errno);
		goto out;
	}
	if (fstat(fd, &after) < 0) {
		rc = sys_error(err, "cannot stat", path, errno);
		goto out;
	}
	if (after.st_ino != before.st_ino || after.st_dev != before.st_dev) {
		*err = xasprintf("%s: replaced while being opened; try again", path);
		goto out;
	}
	if (check_owner_mode(&after, 077, "git source file", path, "use", err) < 0)
		goto out;
	size_t len;
	if (read_fd_bounded(fd, SOURCE_FILE_MAX, 0, out, &len) < 0) {
		if (errno == EFBIG)
			*err = xasprintf("%s: larger than %d bytes", path, SOURCE_FILE_MAX);
		else
			sys_error(err, "cannot read", path, errno);
		goto out;
	}
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	return rc;
}

/* One optional string member: absent or null leaves *out NULL. */
static int json_member(json_t *obj, const char *key, char **out, const char *path, char **err)
{
	json_t *v = json_object_get(obj, key);
	*out = NULL;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v)) {
		*err = xasprintf("%s: \"%s\" must be a string or null", path, key);
		return -1;
	}
	*out = xstrdup(json_string_value(v));
	return 0;
}

int git_source_load(const char *data_dir, struct git_source *out, char **err)
{
	static const char *const keys[] = {"repository", "ref",		"path",	   "webhook_secret",
					   "last_sync",	 "last_commit", "last_ref"};
	char *dir = git_dir_path(data_dir);
	char *path = xasprintf("%s/source.json", dir);
	char *text = NULL, *why = NULL;
	json_t *root = NULL;
	int dfd = -1;
	memset(out, 0, sizeof *out);
	int rc = open_git_dir(data_dir, false, &dfd, err);
	if (rc < 0)
		goto out;
	if ((rc = read_source_file(dfd, path, &text, err)) < 0)
		goto out;
	rc = -1;
	json_error_t je;
	root = json_loads(text, JSON_REJECT_DUPLICATES, &je);
	if (!root) {
		*err = xasprintf("%s: invalid JSON at line %d: %s", path, je.line, je.text);
		goto out;
	}
	if (!json_is_object(root)) {
		*err = xasprintf("%s: not a JSON object", path);
		goto out;
	}
	char **fields[] = {&out->repository, &out->ref,		&out->path,    &out->webhook_secret,
			   &out->last_sync,  &out->last_commit, &out->last_ref};
	for (size_t i = 0; i < ARRAY_LEN(keys); i++)
		if (json_member(root, keys[i], fields[i], path, err) < 0)
			goto out;
	if (!out->repository) {
		*err = xasprintf("%s: \"repository\" is missing", path);
		goto out;
	}
	if (!out->ref)
		out->ref = xstrdup("main");
	if (source_validate(out, &why) < 0) {
		*err = xasprintf("%s: %s", path, why);
		goto out;
	}
	rc = 0;
out:
	if (rc < 0)
		git_source_free(out);
	json_decref(root);
	if (dfd >= 0)
		close(dfd);
	free(why);
	free(text);
	free(path);
	free(dir);
	return rc;
}

static json_t *json_str_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

int git_source_save(const char *data_dir, const struct git_source *src, char **err)
{
	char *dir = git_dir_path(data_dir);
	char *text = NULL, *why = NULL;
	int dfd = -1, rc = -1;
	if (source_validate(src, &why) < 0) {
		*err = xasprintf("cannot save the git source: %s", why);
		goto out;
	}
	if (open_git_dir(data_dir, true, &dfd, err) < 0)
		goto out;
	json_t *root = json_object();
	json_object_set_new(root, "repository", json_string(src->repository));
	json_object_set_new(root, "ref", json_string(src->ref));
	json_object_set_new(root, "path", json_str_or_null(src->path));
	json_object_set_new(root, "webhook_secret", json_str_or_null(src->webhook_secret));
	json_object_set_new(root, "last_sync", json_str_or_null(src->last_sync));
	json_object_set_new(root, "last_commit", json_str_or_null(src->last_commit));
	json_object_set_new(root, "last_ref", json_str_or_null(src->last_ref));
	text = json_dumps(root, JSON_INDENT(2));
	json_decref(root);
	if (!text) {
		*err = xstrdup("cannot encode the git source as JSON");
		goto out;
	}
	char *line = xasprintf("%s\n", text);
	rc = write_file_atomic(dfd, dir, "source.json", line, strlen(line), 0600, false, err);
	free(line);
out:
	if (dfd >= 0)
		close(dfd);
	free(text);
	free(why);
	free(dir);
	return rc;
}

/* ---- trees on disk ---- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	return (flag == FTW_DP || flag == FTW_DNR ? rmdir(path) : unlink(path)) < 0 &&
			       errno != ENOENT
		       ? errno
		       : 0;
}

/* rm -rf that never follows a symbolic link; a missing path is fine. */
static int rm_tree(const char *path, char **err)
{
	struct stat st;
	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : sys_error(err, "cannot stat", path, errno);
	if (!S_ISDIR(st.st_mode))
		return unlink(path) < 0 && errno != ENOENT
			       ? sys_error(err, "cannot remove", path, errno)
			       : 0;
	int e = nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
	if (e != 0)
		return sys_error(err, "cannot remove", path, e > 0 ? e : errno);
	return 0;
}

/* Takes the exclusive sync lock; returns the descriptor. Waits while
 * another sync holds it (that one ends within its own bounds), but not
 * past gitsync_cancel_all. */
static int lock_git_dir(int dfd, const char *data_dir, char **err)
{
	int fd = openat(dfd, ".lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		char *dir = git_dir_path(data_dir);
		sys_error(err, "cannot open the lock file in", dir, errno);
		free(dir);
		return -1;
	}
	while (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		if (errno == EWOULDBLOCK && !atomic_load(&cancel_all)) {
			struct timespec ts = {0, LOCK_POLL_MS * 1000000L};
			nanosleep(&ts, NULL);
			continue;
		}
		if (errno == EINTR)
			continue;
		if (errno == EWOULDBLOCK) {
			*err = xstrdup("interrupted: Relay is shutting down");
		} else {
			char *dir = git_dir_path(data_dir);
			sys_error(err, "cannot lock", dir, errno);
			free(dir);
		}
		close(fd);
		return -1;
	}
	return fd;
}

int git_source_remove(const char *data_dir, char **err)
{
	struct git_source src;
	int rc = git_source_load(data_dir, &src, err);
	if (rc < 0)
		return rc;
	git_source_free(&src);
	char *dir = git_dir_path(data_dir);
	char *checkout = xasprintf("%s/checkout", dir);
	int dfd = -1, lfd = -1;
	if ((rc = open_git_dir(data_dir, false, &dfd, err)) < 0)
		goto out;
	rc = -1;
	if ((lfd = lock_git_dir(dfd, data_dir, err)) < 0)
		goto out;
	/* The checkout first: a failure part-way leaves the config, and the
	 * next sync re-clones a checkout it cannot open. */
	if (rm_tree(checkout, err) < 0)
		goto out;
	if (unlinkat(dfd, "source.json", 0) < 0 && errno != ENOENT) {
		sys_error(err, "cannot remove", dir, errno);
		goto out;
	}
	fsync(dfd);
	rc = 0;
out:
	if (lfd >= 0)
		close(lfd);
	if (dfd >= 0)
		close(dfd);
	free(checkout);
	free(dir);
	return rc;
}

struct copy_ctx {
	const char *fn; /* function name, for messages */
	size_t files;
	unsigned long long bytes;
	char *err;
};

static int copy_fail(struct copy_ctx *c, const char *rel, const char *what, int e)
{
	char tmp[128];
	if (!c->err)
		c->err = e ? xasprintf("function %s: %s: %s: %s", c->fn, rel, what,
				       strerror_r(e, tmp, sizeof tmp))
			   : xasprintf("function %s: %s: %s", c->fn, rel, what);
	return -1;
}

static int copy_file(struct copy_ctx *c, int sfd, int dfd, const char *name, const char *rel,
		     const struct stat *st)
{
	mode_t mode = st->st_mode & 0111 ? 0755 : 0644;
	char buf[65536];
	int rc = -1, out = -1;
	int in = openat(sfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (in < 0)
		return copy_fail(c, rel, "cannot open", errno);
	out = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
	if (out < 0) {
		copy_fail(c, rel, "cannot create the copy", errno);
		goto out;
	}
	for (;;) {
		ssize_t n = read(in, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			copy_fail(c, rel, "cannot read", errno);
			goto out;
		}
		if (n == 0)
			break;
		c->bytes += (unsigned long long)n;
		if (c->bytes > GITSYNC_COPY_MAX_BYTES) {
			copy_fail(c, rel, "the functions exceed 512 MiB in total", 0);
			goto out;
		}
		if (write_all(out, buf, (size_t)n) < 0) {
			copy_fail(c, rel, "cannot write the copy", errno);
			goto out;
		}
	}
	if (fchmod(out, mode) < 0) {
		copy_fail(c, rel, "cannot set the mode of the copy", errno);
		goto out;
	}
	int cfd = out;
	out = -1;
	if (close(cfd) < 0) {
		copy_fail(c, rel, "cannot write the copy", errno);
		goto out;
	}
	rc = 0;
out:
	if (out >= 0)
		close(out);
	close(in);
	return rc;
}

/* Copies the contents of directory sfd into the (empty) directory dfd.
 * Both descriptors stay owned by the caller. */
static int copy_dir(struct copy_ctx *c, int sfd, int dfd, const char *rel, int depth)
{
	int rc = 0;
	int dup_fd = dup(sfd);
	DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
	if (!d) {
		if (dup_fd >= 0)
			close(dup_fd);
		return copy_fail(c, rel, "cannot read directory", errno);
	}
	struct dirent *de;
	while (rc == 0 && (errno = 0, de = readdir(d))) {
		const char *name = de->d_name;
		if (!strcmp(name, ".") || !strcmp(name, "..") || !strcmp(name, ".git"))
			continue;
		char *r = xasprintf("%s/%s", rel, name);
		struct stat st;
		if (fstatat(sfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			rc = copy_fail(c, r, "cannot stat", errno);
		} else if (S_ISDIR(st.st_mode)) {
			if (depth + 1 > GITSYNC_COPY_MAX_DEPTH) {
				rc = copy_fail(c, r, "nested deeper than 64 directories", 0);
			} else if (mkdirat(dfd, name, 0755) < 0 ||
				   fchmodat(dfd, name, 0755, 0) < 0) {
				rc = copy_fail(c, r, "cannot create the copy", errno);
			} else {
				int s2 = openat(sfd, name,
						O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
				int d2 = openat(dfd, name,
						O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
				if (s2 < 0 || d2 < 0)
					rc = copy_fail(c, r, "cannot open directory", errno);
				else
					rc = copy_dir(c, s2, d2, r, depth + 1);
				if (s2 >= 0)
					close(s2);
				if (d2 >= 0)
					close(d2);
			}
		} else if (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) {
			if (++c->files > GITSYNC_COPY_MAX_FILES) {
				rc = copy_fail(c, r, "the functions hold more than 20000 files", 0);
			} else if (S_ISREG(st.st_mode)) {
				rc = copy_file(c, sfd, dfd, name, r, &st);
			} else {
				char target[PATH_MAX];
				ssize_t n = readlinkat(sfd, name, target, sizeof target - 1);
				if (n < 0)
					rc = copy_fail(c, r, "cannot read the symbolic link",
						       errno);
				else if ((target[n] = '\0', symlinkat(target, dfd, name) < 0))
					rc = copy_fail(c, r, "cannot create the symbolic link",
						       errno);
			}
		}
		free(r);
	}
	if (rc == 0 && errno)
		rc = copy_fail(c, rel, "cannot read directory", errno);
	closedir(d);
	return rc;
}

/* The functions of src: direct subdirectories (not symbolic links) with a
 * regular template.yaml, sorted. Hidden directories (".git", ".github",
 * never valid function names) are skipped. */
static int list_functions(const char *src, char ***out, size_t *count, char **err)
{
	char **v = NULL;
	size_t n = 0, cap = 0;
	DIR *d = opendir(src);
	*out = NULL;
	*count = 0;
	if (!d)
		return sys_error(err, "cannot read the source directory", src, errno);
	struct dirent *de;
	while ((errno = 0, de = readdir(d))) {
		struct stat st;
		if (de->d_name[0] == '.' ||
		    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISDIR(st.st_mode))
			continue;
		char *t = xasprintf("%s/template.yaml", de->d_name);
		bool fn =
			fstatat(dirfd(d), t, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
		free(t);
		if (!fn)
			continue;
		if (n == cap)
			v = xrealloc(v, (cap = cap ? cap * 2 : 16) * sizeof *v);
		v[n++] = xstrdup(de->d_name);
	}
	int e = errno;
	closedir(d);
	if (e) {
		strv_free(v, n);
		return sys_error(err, "cannot read the source directory", src, e);
	}
	if (n)
		qsort(v, n, sizeof *v, cmp_str);
	*out = v;
	*count = n;
	return 0;
}

/* Moves tmp (a finished copy) to dst, atomically where the file system
 * allows: the reconciler never sees the function missing. */
static int swap_in(const char *fdir, const char *name, const char *tmp, char **err)
{
	char *dst = xasprintf("%s/%s", fdir, name);
	char *old = NULL;
	int rc = -1;
	struct stat st;
	if (lstat(dst, &st) < 0) {
		if (rename(tmp, dst) < 0)
			sys_error(err, "cannot rename a copy to", dst, errno);
		else
			rc = 0;
		goto out;
	}
	if (renameat2(AT_FDCWD, tmp, AT_FDCWD, dst, RENAME_EXCHANGE) == 0) {
		rc = rm_tree(tmp, err); /* now the previous version */
		goto out;
	}
	if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) {
		sys_error(err, "cannot replace", dst, errno);
		goto out;
	}
	old = xasprintf("%s/" SYNC_PREFIX "old-%.64s-%08llx", fdir, name,
			(unsigned long long)rand_below(UINT64_C(1) << 32));
	if (rename(dst, old) < 0) {
		sys_error(err, "cannot move aside", dst, errno);
		goto out;
	}
	if (rename(tmp, dst) < 0) {
		sys_error(err, "cannot rename a copy to", dst, errno);
		rename(old, dst);
		goto out;
	}
	rc = rm_tree(old, err);
out:
	free(old);
	free(dst);
	return rc;
}

/* Copies the function name of the open directory sfd into a new temporary
 * directory of fdir, *tmp (left for the caller to swap in or remove). */
static int copy_function(struct copy_ctx *c, int sfd, const char *fdir, const char *name,
			 char **tmp, char **err)
{
	*tmp = xasprintf("%s/" SYNC_PREFIX "%.64s.tmp-XXXXXX", fdir, name);
	if (!mkdtemp(*tmp) || chmod(*tmp, 0755) < 0) {
		sys_error(err, "cannot create a temporary directory in", fdir, errno);
		free(*tmp);
		*tmp = NULL;
		return -1;
	}
	c->fn = name;
	int s2 = openat(sfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int d2 = open(*tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int crc = s2 < 0 || d2 < 0 ? copy_fail(c, ".", "cannot open directory", errno)
				   : copy_dir(c, s2, d2, ".", 1);
	if (s2 >= 0)
		close(s2);
	if (d2 >= 0)
		close(d2);
	if (crc < 0) {
		*err = c->err;
		c->err = NULL;
	}
	return crc < 0 ? -1 : 0;
}

/* Removes every directory of fdir but the n sorted names, stale temporary
 * copies included; res->removed counts the functions among them. */
static int remove_others(const char *fdir, char **names, size_t n, struct git_sync_result *res,
			 char **err)
{
	char **stale = NULL;
	size_t nstale = 0, cap = 0;
	int rc = -1;
	DIR *d = opendir(fdir);
	if (!d)
		return sys_error(err, "cannot read", fdir, errno);
	struct dirent *de;
	while ((de = readdir(d))) {
		struct stat st;
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISDIR(st.st_mode) ||
		    (n > 0 &&
		     bsearch(&(const char *){de->d_name}, names, n, sizeof *names, cmp_str)))
			continue;
		if (nstale == cap)
			stale = xrealloc(stale, (cap = cap ? cap * 2 : 8) * sizeof *stale);
		stale[nstale++] = xstrdup(de->d_name);
	}
	closedir(d);
	for (size_t i = 0; i < nstale; i++) {
		char *p = xasprintf("%s/%s", fdir, stale[i]);
		int r = rm_tree(p, err);
		free(p);
		if (r < 0)
			goto out;
		if (!str_has_prefix(stale[i], SYNC_PREFIX))
			res->removed++;
	}
	rc = 0;
out:
	strv_free(stale, nstale);
	return rc;
}

/*
 * Makes fdir hold exactly the functions of src (see the top of the file):
 * copy all, then swap each, then remove every other directory.
 */
static int replace_functions(const char *src, const char *fdir, struct git_sync_result *res,
			     char **err)
{
	char **names = NULL, **tmps = NULL;
	size_t n = 0;
	struct copy_ctx c = {0};
	int sfd = -1, rc = -1;
	if (list_functions(src, &names, &n, err) < 0)
		return -1;
	tmps = xcalloc(n + 1, sizeof *tmps);
	if (mkdir_p(fdir, 0755, 0, NULL, NULL, err) < 0)
		goto out;
	sfd = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sfd < 0) {
		sys_error(err, "cannot open", src, errno);
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		if (copy_function(&c, sfd, fdir, names[i], &tmps[i], err) < 0)
			goto out;
	for (size_t i = 0; i < n; i++) {
		if (swap_in(fdir, names[i], tmps[i], err) < 0)
			goto out;
		free(tmps[i]);
		tmps[i] = NULL;
	}
	res->functions = n;
	rc = remove_others(fdir, names, n, res, err);
out:
	for (size_t i = 0; i < n; i++) {
		if (tmps[i]) {
			char *ignored = NULL;
			rm_tree(tmps[i], &ignored);
			free(ignored);
		}
		free(tmps[i]);
	}
	free(tmps);
	free(c.err);
	if (sfd >= 0)
		close(sfd);
	strv_free(names, n);
	return rc;
}

/* ---- network bounds ---- */

/*
 * libgit2 1.5 has no network timeouts (GIT_OPT_SET_SERVER_TIMEOUT and
 * GIT_OPT_SET_SERVER_CONNECT_TIMEOUT came with 1.7), and its SSH transport
 * hands the socket to libssh2, whose blocking calls wait in poll() without
 * end: a server that accepted the connection and then said nothing held a
 * sync - the sync lock, the webhook's sync thread, relay start's shutdown -
 * forever. Progress callbacks cannot help: nothing calls them while nothing
 * arrives.
 *
 * So Relay supplies the socket: a stream registered as libgit2's standard
 * stream (git_stream_register), which the SSH transport creates for each
 * connection. Its connect is bounded (connect_ms). While a fetch runs, a
 * watchdog thread reads the socket's received-byte count (TCP_INFO) every
 * tick; when stall_ms pass without a new byte, or on gitsync_cancel_all, it
 * shuts the socket down. libssh2 then sees the end of the stream, libgit2
 * fails the fetch on its own thread and cleans up as after any network
 * error, and fetch() reports the watchdog's reason instead of libgit2's.
 *
 * libgit2's libssh2 transport (1.5, and the later 1.x seen so far) takes
 * the descriptor straight out of its private git_socket_stream {parent,
 * host, port, s}, past the stream's read and write: struct net_stream
 * starts with exactly those members. (Were that ever wrong, no SSH sync
 * could connect at all, which every sync test would show.)
 */
#if LIBGIT2_VER_MAJOR != 1
#error "check that libgit2's git_socket_stream still starts as struct net_stream does"
#endif

/* How often the watchdog looks, at most (and at least stall_ms / 10). */
#define WATCH_TICK_MS 1000

static atomic_int connect_ms_setting = GITSYNC_CONNECT_TIMEOUT_MS;
static atomic_int stall_ms_setting = GITSYNC_STALL_TIMEOUT_MS;
static atomic_int fetch_ms_setting = GITSYNC_FETCH_TIMEOUT_MS;

enum cut { CUT_NONE, CUT_STALLED, CUT_TOO_LONG, CUT_CANCELLED };

/* One fetch's watch: mu guards the members from fd to done. */
struct fetch_guard {
	pthread_mutex_t mu;
	pthread_cond_t wake;
	int fd;		   /* the open connection's socket, else -1 */
	uint64_t seen;	   /* its received bytes at the last look */
	int64_t last_ns;   /* monotonic time of the last byte (or phase) */
	const char *phase; /* for the message */
	enum cut cut;
	bool done; /* the fetch returned: the watchdog ends */
	int stall_ms;
	int fetch_ms;		  /* the whole fetch, however the server paces it */
	int64_t start_ns;	  /* monotonic time the fetch started */
	struct fetch_guard *next; /* in guards (guards_mu) */
	pthread_t thread;
};

/* Running fetches, for gitsync_cancel_all. Lock order: guards_mu, then a
 * guard's mu. */
static pthread_mutex_t guards_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fetch_guard *guards;
/* The fetch running on this thread: libgit2 creates its streams on the
 * thread that called git_remote_fetch. */
static _Thread_local struct fetch_guard *thread_guard;
/* net_stream is libgit2's standard stream (git_init_once). */
static bool net_registered;

void gitsync_set_timeouts(int connect_ms, int stall_ms)
{
	atomic_store(&connect_ms_setting, connect_ms > 0 ? connect_ms : GITSYNC_CONNECT_TIMEOUT_MS);
	atomic_store(&stall_ms_setting, stall_ms > 0 ? stall_ms : GITSYNC_STALL_TIMEOUT_MS);
}

void gitsync_set_fetch_timeout(int fetch_ms)
{
	atomic_store(&fetch_ms_setting, fetch_ms > 0 ? fetch_ms : GITSYNC_FETCH_TIMEOUT_MS);
}

/* Under g->mu: cut the connection (now and any made later). */
static void guard_cut_locked(struct fetch_guard *g, enum cut why)
{
	if (g->cut == CUT_NONE)
		g->cut = why;
	if (g->fd >= 0)
		shutdown(g->fd, SHUT_RDWR);
}

void gitsync_cancel_all(bool on)
{
	pthread_mutex_lock(&guards_mu);
	atomic_store(&cancel_all, on);
	for (struct fetch_guard *g = on ? guards : NULL; g; g = g->next) {
		pthread_mutex_lock(&g->mu);
		guard_cut_locked(g, CUT_CANCELLED);
		pthread_cond_signal(&g->wake);
		pthread_mutex_unlock(&g->mu);
	}
	pthread_mutex_unlock(&guards_mu);
}

static bool received_bytes(int fd, uint64_t *out)
{
	struct tcp_info ti;
	socklen_t len = sizeof ti;
	memset(&ti, 0, sizeof ti);
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0 ||
	    len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received)
		return false;
	*out = ti.tcpi_bytes_received;
	return true;
}

static void *watchdog_main(void *arg)
{
	struct fetch_guard *g = arg;
	int least = g->stall_ms < g->fetch_ms ? g->stall_ms : g->fetch_ms;
	int tick = least / 10 < WATCH_TICK_MS ? least / 10 : WATCH_TICK_MS;
	if (tick < 1)
		tick = 1;
	pthread_mutex_lock(&g->mu);
	while (!g->done) {
		struct timespec until;
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_nsec += (long)tick * 1000000L;
		until.tv_sec += until.tv_nsec / 1000000000L;
		until.tv_nsec %= 1000000000L;
		pthread_cond_timedwait(&g->wake, &g->mu, &until);
		if (g->done)
			break;
		int64_t now = now_mono_ns();
		uint64_t b;
		if (g->fd >= 0 && received_bytes(g->fd, &b) && b != g->seen) {
			g->seen = b;
			g->last_ns = now;
		}
		if (atomic_load(&cancel_all))
			guard_cut_locked(g, CUT_CANCELLED);
		else if (now - g->start_ns >= (int64_t)g->fetch_ms * 1000000)
			guard_cut_locked(g, CUT_TOO_LONG);
		else if (g->cut != CUT_NONE || now - g->last_ns >= (int64_t)g->stall_ms * 1000000)
			guard_cut_locked(g, CUT_STALLED);
	}
	pthread_mutex_unlock(&g->mu);
	return NULL;
}

/* Starts watching the fetch about to run on this thread. */
static int guard_start(struct fetch_guard *g, char **err)
{
	memset(g, 0, sizeof *g);
	pthread_mutex_init(&g->mu, NULL);
	cond_init_monotonic(&g->wake);
	g->fd = -1;
	g->last_ns = now_mono_ns();
	g->phase = "connecting";
	g->stall_ms = atomic_load(&stall_ms_setting);
	g->fetch_ms = atomic_load(&fetch_ms_setting);
	g->start_ns = g->last_ns;
	int e = thread_start(&g->thread, "git-watchdog", watchdog_main, g);
	if (e) {
		/* No fetch without its bound. */
		*err = xasprintf("cannot start the fetch watchdog: %s", strerror(e));
		pthread_cond_destroy(&g->wake);
		pthread_mutex_destroy(&g->mu);
		return -1;
	}
	/* Listed for gitsync_cancel_all, which may already have been called. */
	pthread_mutex_lock(&guards_mu);
	pthread_mutex_lock(&g->mu);
	if (atomic_load(&cancel_all))
		g->cut = CUT_CANCELLED;
	pthread_mutex_unlock(&g->mu);
	g->next = guards;
	guards = g;
	pthread_mutex_unlock(&guards_mu);
	thread_guard = g;
	return 0;
}

static void guard_stop(struct fetch_guard *g)
{
	thread_guard = NULL;
	pthread_mutex_lock(&guards_mu);
	for (struct fetch_guard **p = &guards; *p; p = &(*p)->next)
		if (*p == g) {
			*p = g->next;
			break;
		}
	pthread_mutex_unlock(&guards_mu);
	pthread_mutex_lock(&g->mu);
	g->done = true;
	pthread_cond_signal(&g->wake);
	pthread_mutex_unlock(&g->mu);
	pthread_join(g->thread, NULL);
	pthread_cond_destroy(&g->wake);
	pthread_mutex_destroy(&g->mu);
}

/* Marks progress (a callback ran: data came) and names the phase; false
 * when the fetch is cut, so the callback fails it. g may be NULL. */
static bool guard_phase(struct fetch_guard *g, const char *phase)
{
	if (!g)
		return !atomic_load(&cancel_all);
	pthread_mutex_lock(&g->mu);
	if (phase)
		g->phase = phase;
	g->last_ns = now_mono_ns();
	if (atomic_load(&cancel_all))
		guard_cut_locked(g, CUT_CANCELLED);
	bool ok = g->cut == CUT_NONE;
	pthread_mutex_unlock(&g->mu);
	return ok;
}

static void guard_attach(struct fetch_guard *g, int fd)
{
	pthread_mutex_lock(&g->mu);
	g->fd = fd;
	g->seen = 0;
	g->last_ns = now_mono_ns();
	if (g->cut != CUT_NONE)
		shutdown(fd, SHUT_RDWR);
	pthread_mutex_unlock(&g->mu);
}

/* Before fd is closed: the watchdog must never touch a reused number. */
static void guard_detach(struct fetch_guard *g, int fd)
{
	pthread_mutex_lock(&g->mu);
	if (g->fd == fd)
		g->fd = -1;
	pthread_mutex_unlock(&g->mu);
}

/* The reason the fetch was cut, or NULL. */
static char *guard_reason(struct fetch_guard *g)
{
	char d[DURATION_STR_MAX];
	char *why = NULL;
	pthread_mutex_lock(&g->mu);
	if (g->cut == CUT_CANCELLED)
		why = xstrdup("interrupted: Relay is shutting down");
	else if (g->cut == CUT_STALLED)
		why = xasprintf("no data from the server for %s during %s; giving up",
				duration_format((int64_t)g->stall_ms * 1000000, d), g->phase);
	else if (g->cut == CUT_TOO_LONG)
		why = xasprintf("the fetch took longer than %s (still in %s); giving up",
				duration_format((int64_t)g->fetch_ms * 1000000, d), g->phase);
	pthread_mutex_unlock(&g->mu);
	return why;
}

/* A libgit2 stream: a TCP socket that connect() opens within connect_ms
 * and the fetch's guard watches. */
struct net_stream {
	git_stream parent; /* these four members: libgit2's git_socket_stream */
	char *host;
	char *port;
	int s;
	struct fetch_guard *guard; /* NULL outside a fetch */
};

static bool guard_is_cut(struct fetch_guard *g)
{
	if (!g)
		return atomic_load(&cancel_all);
	pthread_mutex_lock(&g->mu);
	bool cut = g->cut != CUT_NONE;
	pthread_mutex_unlock(&g->mu);
	return cut;
}

/* connect() on a non-blocking fd, waited for until deadline in slices, so
 * a cut is noticed. 0 or an errno value (ETIMEDOUT, ECANCELED). */
static int connect_bounded(struct net_stream *st, int fd, const struct addrinfo *p,
			   int64_t deadline)
{
	if (connect(fd, p->ai_addr, p->ai_addrlen) == 0)
		return 0;
	if (errno != EINPROGRESS)
		return errno;
	for (;;) {
		if (guard_is_cut(st->guard))
			return ECANCELED;
		int64_t left = (deadline - now_mono_ns()) / 1000000;
		if (left <= 0)
			return ETIMEDOUT;
		struct pollfd pfd = {.fd = fd, .events = POLLOUT};
		int n = poll(&pfd, 1, left < 100 ? (int)left : 100);
		if (n < 0 && errno != EINTR)
			return errno;
		if (n > 0) {
			int soerr = 0;
			socklen_t len = sizeof soerr;
			if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
				return errno;
			return soerr ? soerr : guard_is_cut(st->guard) ? ECANCELED : 0;
		}
	}
}

static int net_connect(git_stream *stream)
{
	struct net_stream *st = (struct net_stream *)stream;
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
	int connect_ms = atomic_load(&connect_ms_setting);
	/* Name resolution is bounded by the resolver's own timeouts
	 * (resolv.conf), not by connect_ms. */
	int gai = getaddrinfo(st->host, st->port, &hints, &ai);
	if (gai) {
		char *msg = xasprintf("cannot resolve %s: %s", st->host, gai_strerror(gai));
		git_error_set_str(GIT_ERROR_NET, msg);
		free(msg);
		return -1;
	}
	int64_t deadline = now_mono_ns() + (int64_t)connect_ms * 1000000;
	int fd = -1, e = ENOENT;
	for (const struct addrinfo *p = ai; p; p = p->ai_next) {
		fd = socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
			    p->ai_protocol);
		if (fd < 0) {
			e = errno;
			continue;
		}
		if (st->guard)
			guard_attach(st->guard, fd);
		e = connect_bounded(st, fd, p, deadline);
		if (e == 0)
			break;
		if (st->guard)
			guard_detach(st->guard, fd);
		close(fd);
		fd = -1;
		if (e == ETIMEDOUT || e == ECANCELED)
			break;
	}
	freeaddrinfo(ai);
	if (fd < 0) {
		char d[DURATION_STR_MAX];
		char *msg = e == ETIMEDOUT
				    ? xasprintf("cannot connect to %s port %s: no answer within %s",
						st->host, st->port,
						duration_format((int64_t)connect_ms * 1000000, d))
				    : xasprintf("cannot connect to %s port %s: %s", st->host,
						st->port, strerror(e));
		git_error_set_str(GIT_ERROR_NET, msg);
		free(msg);
		return -1;
	}
	/* Blocking, as libgit2's own socket is (libssh2 sets what it needs). */
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	st->s = fd;
	if (st->guard)
		guard_phase(st->guard, "the SSH handshake");
	return 0;
}

static ssize_t net_read(git_stream *stream, void *data, size_t len)
{
	struct net_stream *st = (struct net_stream *)stream;
	ssize_t n;
	while ((n = recv(st->s, data, len, 0)) < 0 && errno == EINTR)
		;
	if (n < 0)
		git_error_set_str(GIT_ERROR_NET, "cannot read from the server");
	return n;
}

static ssize_t net_write(git_stream *stream, const char *data, size_t len, int flags)
{
	struct net_stream *st = (struct net_stream *)stream;
	ssize_t n;
	(void)flags;
	while ((n = send(st->s, data, len, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	if (n < 0)
		git_error_set_str(GIT_ERROR_NET, "cannot write to the server");
	return n;
}

static int net_close(git_stream *stream)
{
	struct net_stream *st = (struct net_stream *)stream;
	if (st->s >= 0) {
		if (st->guard)
			guard_detach(st->guard, st->s);
		close(st->s);
		st->s = -1;
	}
	return 0;
}

static void net_free(git_stream *stream)
{
	struct net_stream *st = (struct net_stream *)stream;
	net_close(stream);
	free(st->host);
	free(st->port);
	free(st);
}

static int net_stream_new(git_stream **out, const char *host, const char *port)
{
	struct net_stream *st = xcalloc(1, sizeof *st);
	st->parent.version = GIT_STREAM_VERSION;
	st->parent.connect = net_connect;
	st->parent.read = net_read;
	st->parent.write = net_write;
	st->parent.close = net_close;
	st->parent.free = net_free;
	st->host = xstrdup(host);
	st->port = xstrdup(port && *port ? port : "22");
	st->s = -1;
	st->guard = thread_guard;
	*out = &st->parent;
	return 0;
}

/* ---- libgit2 ---- */

static void git_init_once(void)
{
	git_libgit2_init();
	/* No ~/.gitconfig, XDG or /etc/gitconfig: only the checkout's own. */
	static const int levels[] = {GIT_CONFIG_LEVEL_SYSTEM, GIT_CONFIG_LEVEL_XDG,
				     GIT_CONFIG_LEVEL_GLOBAL, GIT_CONFIG_LEVEL_PROGRAMDATA};
	for (size_t i = 0; i < ARRAY_LEN(levels); i++)
		git_libgit2_opts(GIT_OPT_SET_SEARCH_PATH, levels[i], "");
	/* Every connection through net_stream (see "network bounds"). */
	git_stream_registration reg = {.version = GIT_STREAM_VERSION, .init = net_stream_new};
	net_registered = git_stream_register(GIT_STREAM_STANDARD, &reg) == 0;
}

struct remote_ctx {
	const char *ssh_dir;
	const char *key_path;
	int port;
	int auth_offers;
	void (*notice)(void *arg, const char *msg);
	void *notice_arg;
	struct fetch_guard *guard;
	char *err; /* the first callback failure, preferred over libgit2's */
};

static int cb_credentials(git_credential **out, const char *url, const char *username_from_url,
			  unsigned int allowed, void *payload)
{
	struct remote_ctx *c = payload;
	const char *user = username_from_url && *username_from_url ? username_from_url : "git";
	(void)url;
	if (!guard_phase(c->guard, "authentication and ref negotiation"))
		return GIT_EUSER;
	if (allowed & GIT_CREDENTIAL_USERNAME)
		return git_credential_username_new(out, user);
	if (!(allowed & GIT_CREDENTIAL_SSH_KEY)) {
		if (!c->err)
			c->err = xstrdup("SSH authentication failed: the server does not offer "
					 "public-key authentication");
		return GIT_EUSER;
	}
	/* libgit2 asks again after every rejected key, without end. */
	if (++c->auth_offers > AUTH_ATTEMPTS) {
		if (!c->err)
			c->err = xstrdup("SSH authentication failed: is the deploy key (relay git "
					 "keygen) registered with the server?");
		return GIT_EUSER;
	}
	return git_credential_ssh_key_new(out, user, NULL, c->key_path, NULL);
}

static int cb_certificate(git_cert *cert, int valid, const char *host, void *payload)
{
	struct remote_ctx *c = payload;
	(void)valid; /* from $HOME/.ssh/known_hosts: not Relay's decision */
	const git_cert_hostkey *hk = (const git_cert_hostkey *)cert;
	if (!guard_phase(c->guard, "authentication and ref negotiation"))
		return GIT_EUSER;
	if (cert->cert_type != GIT_CERT_HOSTKEY_LIBSSH2 || !(hk->type & GIT_CERT_SSH_RAW) ||
	    !hk->hostkey || hk->hostkey_len == 0) {
		if (!c->err)
			c->err = xasprintf("host %s: no SSH host key to verify", host);
		return GIT_ECERTIFICATE;
	}
	char *kerr = NULL;
	const unsigned char *blob = (const unsigned char *)hk->hostkey;
	switch (known_hosts_verify(c->ssh_dir, host, c->port, blob, hk->hostkey_len, &kerr)) {
	case KNOWN_HOSTS_MATCH: return 0;
	case KNOWN_HOSTS_NEW: {
		if (c->notice) {
			char *fp = ssh_fingerprint(blob, hk->hostkey_len);
			char *token =
				c->port == 22 ? xstrdup(host) : xasprintf("[%s]:%d", host, c->port);
			char *msg = xasprintf("Trusted new host %s (fingerprint %s)", token, fp);
			c->notice(c->notice_arg, msg);
			free(msg);
			free(token);
			free(fp);
		}
		return 0;
	}
	case KNOWN_HOSTS_MISMATCH:
	case KNOWN_HOSTS_ERROR: break;
	}
	if (!c->err)
		c->err = kerr ? kerr : xasprintf("host %s: cannot verify the host key", host);
	else
		free(kerr);
	return GIT_ECERTIFICATE;
}

/* git/checkout for url: reused when its origin is url, else made anew. */
/* The checkout's remote.origin.url, read straight from its config (see
 * make_remote for why not git_remote_lookup). */
static bool origin_is(git_repository *repo, const char *url)
{
	git_config *cfg = NULL;
	git_buf b = {0};
	bool same = git_repository_config(&cfg, repo) == 0 &&
		    git_config_get_string_buf(&b, cfg, "remote.origin.url") == 0 &&
		    strcmp(b.ptr, url) == 0;
	git_buf_dispose(&b);
	git_config_free(cfg);
	return same;
}

/*
 * A remote for url (name NULL: anonymous). url.<base>.insteadOf is never
 * applied: it is not Relay's configuration, and libgit2 1.5.1 leaks a PCRE2
 * match block (~20 KiB) for every config entry its insteadOf scan (and
 * git_remote_lookup's) does not match - fixed upstream after 1.5 (libgit2
 * PR #6382) - which a long-running worker syncing on webhooks would feel.
 */
static int make_remote(git_remote **out, git_repository *repo, const char *name, const char *url)
{
	git_remote_create_options ro;
	git_remote_create_options_init(&ro, GIT_REMOTE_CREATE_OPTIONS_VERSION);
	ro.repository = repo;
	ro.name = name;
	ro.flags = GIT_REMOTE_CREATE_SKIP_INSTEADOF;
	if (!name)
		ro.flags |= GIT_REMOTE_CREATE_SKIP_DEFAULT_FETCHSPEC;
	return git_remote_create_with_opts(out, url, &ro);
}

/* git/checkout for url: reused when its origin is url, else made anew. */
static int open_checkout(const char *path, const char *url, git_repository **out, char **err)
{
	git_repository *repo = NULL;
	git_remote *remote = NULL;
	struct stat st;
	*out = NULL;
	if (lstat(path, &st) == 0) {
		if (S_ISDIR(st.st_mode) &&
		    git_repository_open_ext(&repo, path, GIT_REPOSITORY_OPEN_NO_SEARCH, NULL) ==
			    0 &&
		    origin_is(repo, url)) {
			*out = repo;
			return 0;
		}
		git_repository_free(repo);
		repo = NULL;
		if (rm_tree(path, err) < 0)
			return -1;
	}
	git_repository_init_options io;
	git_repository_init_options_init(&io, GIT_REPOSITORY_INIT_OPTIONS_VERSION);
	io.flags = GIT_REPOSITORY_INIT_NO_REINIT | GIT_REPOSITORY_INIT_MKPATH;
	if (git_repository_init_ext(&repo, path, &io) < 0) {
		*err = xasprintf("cannot create the checkout %s: %s", path, gerr());
		return -1;
	}
	/* "origin" is what tells the next sync which repository this is. */
	if (make_remote(&remote, repo, "origin", url) < 0) {
		*err = xasprintf("cannot configure the checkout %s: %s", path, gerr());
		git_repository_free(repo);
		return -1;
	}
	git_remote_free(remote);
	*out = repo;
	return 0;
}

/* Data is coming: the stall bound restarts; a cut fetch stops here. */
static int cb_sideband(const char *str, int len, void *payload)
{
	struct remote_ctx *c = payload;
	(void)str;
	(void)len;
	return guard_phase(c->guard, "the pack transfer") ? 0 : GIT_EUSER;
}

static int cb_transfer(const git_indexer_progress *stats, void *payload)
{
	struct remote_ctx *c = payload;
	if (stats->received_bytes > GITSYNC_PACK_MAX_BYTES) {
		if (!c->err)
			c->err = xstrdup("the server sent more than 1 GiB; giving up");
		return GIT_EUSER;
	}
	return guard_phase(c->guard, "the pack transfer") ? 0 : GIT_EUSER;
}

static int fetch(git_repository *repo, const char *url, struct remote_ctx *ctx, char **err)
{
	static char *specs[] = {"+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*"};
	git_strarray refspecs = {specs, ARRAY_LEN(specs)};
	git_remote *remote = NULL;
	git_fetch_options fo;
	struct fetch_guard guard;
	if (!net_registered) {
		*err = xstrdup("cannot fetch: libgit2 refused Relay's bounded network stream");
		return -1;
	}
	if (guard_start(&guard, err) < 0)
		return -1;
	ctx->guard = &guard;
	git_fetch_options_init(&fo, GIT_FETCH_OPTIONS_VERSION);
	fo.callbacks.credentials = cb_credentials;
	fo.callbacks.certificate_check = cb_certificate;
	fo.callbacks.sideband_progress = cb_sideband;
	fo.callbacks.transfer_progress = cb_transfer;
	fo.callbacks.payload = ctx;
	fo.prune = GIT_FETCH_PRUNE;
	fo.download_tags = GIT_REMOTE_DOWNLOAD_TAGS_NONE;
	int rc = make_remote(&remote, repo, NULL, url);
	if (rc == 0)
		rc = git_remote_fetch(remote, &refspecs, &fo, "relay git sync");
	git_remote_free(remote);
	char *cut = guard_reason(&guard);
	guard_stop(&guard);
	ctx->guard = NULL;
	if (rc == 0 && !cut)
		return 0;
	/* The watchdog's reason first: libgit2 only saw the connection end. */
	char *s = shown(url);
	*err = xasprintf("cannot fetch %s: %s", s, cut ? cut : ctx->err ? ctx->err : gerr());
	free(s);
	free(cut);
	return -1;
}

/* The commit a fetched ref points to: refs/heads/NAME is looked up as
 * origin's branch. 0 found, 1 no such ref, -1 error (*err). */
static int lookup_ref(git_repository *repo, const char *full, git_object **out, char **err)
{
	const char *branch =
		str_has_prefix(full, "refs/heads/") ? full + strlen("refs/heads/") : NULL;
	char *local = branch ? xasprintf("refs/remotes/origin/%s", branch) : xstrdup(full);
	git_reference *r = NULL;
	int rc = git_reference_lookup(&r, repo, local);
	free(local);
	if (rc == GIT_ENOTFOUND || rc == GIT_EINVALIDSPEC)
		return 1;
	if (rc == 0)
		rc = git_reference_peel(out, r, GIT_OBJECT_COMMIT);
	git_reference_free(r);
	if (rc == 0)
		return 0;
	char *s = shown(full);
	*err = xasprintf("ref '%s' does not point to a commit: %s", s, gerr());
	free(s);
	return -1;
}

/* The message for a ref that names n (2 or 3) things, e.g.: ref "v1" is
 * ambiguous: both refs/heads/v1 and refs/tags/v1 exist; use --ref
 * refs/heads/v1 or refs/tags/v1. malloc'd. */
static char *ambiguous_ref(const char *ref, char *const *names, size_t n)
{
	char *s = shown(ref);
	char *what = n == 2 ? xasprintf("both %s and %s", names[0], names[1])
			    : xasprintf("%s, %s and %s", names[0], names[1], names[2]);
	const char *last =
		str_has_prefix(names[n - 1], "commit ") ? "the full commit id" : names[n - 1];
	char *hint = n == 2 ? xasprintf("%s or %s", names[0], last)
			    : xasprintf("%s, %s or %s", names[0], names[1], last);
	char *msg = xasprintf("ref \"%s\" is ambiguous: %s exist; use --ref %s", s, what, hint);
	free(hint);
	free(what);
	free(s);
	return msg;
}

/*
 * ref to a commit (*out) by the rules in gitsync.h, never guessing
 * between kinds; *resolved is what it resolved to: "refs/heads/NAME",
 * "refs/tags/NAME" or the 40-hex id.
 */
static int resolve_ref(git_repository *repo, const char *url, const char *ref, git_object **out,
		       char **resolved, char **err)
{
	git_object *found[3] = {NULL, NULL, NULL};
	char *names[3] = {NULL, NULL, NULL};
	size_t n = 0;
	int rc = -1;
	*out = NULL;
	*resolved = NULL;
	git_oid oid;
	size_t len = strlen(ref);
	if (is_hex(ref, 40, 40)) {
		/* A full id is that commit, whatever branches are named. */
		if (git_oid_fromstrn(&oid, ref, len) == 0 &&
		    git_object_lookup(&found[0], repo, &oid, GIT_OBJECT_COMMIT) == 0)
			names[n++] = xstrdup(git_oid_tostr_s(&oid));
	} else if (explicit_name(ref)) {
		if ((rc = lookup_ref(repo, ref, &found[0], err)) < 0)
			goto out;
		if (rc == 0)
			names[n++] = xstrdup(ref);
	} else {
		static const char *const forms[] = {"refs/heads/%s", "refs/tags/%s"};
		for (size_t i = 0; i < ARRAY_LEN(forms); i++) {
			char *full = xasprintf(forms[i], ref);
			if ((rc = lookup_ref(repo, full, &found[n], err)) < 0) {
				free(full);
				goto out;
			}
			if (rc == 0)
				names[n++] = full;
			else
				free(full);
		}
		/* An abbreviated id, which a branch or tag must not shadow. */
		if (is_hex(ref, 4, 39) && git_oid_fromstrn(&oid, ref, len) == 0) {
			rc = git_object_lookup_prefix(&found[n], repo, &oid, len,
						      GIT_OBJECT_COMMIT);
			if (rc == GIT_EAMBIGUOUS) {
				char *s = shown(ref);
				*err = xasprintf("ref \"%s\" is ambiguous: more than one commit id "
						 "starts with it; use the full commit id",
						 s);
				free(s);
				rc = -1;
				goto out;
			}
			if (rc == 0) {
				names[n] = xasprintf("commit %s",
						     git_oid_tostr_s(git_object_id(found[n])));
				n++;
			}
		}
	}
	rc = -1;
	if (n == 0) {
		char *s = shown(ref), *u = shown(url);
		*err = xasprintf("ref '%s' not found in %s", s, u);
		free(s);
		free(u);
	} else if (n > 1) {
		*err = ambiguous_ref(ref, names, n);
	} else {
		*out = found[0];
		found[0] = NULL;
		if (str_has_prefix(names[0], "commit "))
			*resolved = xstrdup(names[0] + strlen("commit "));
		else
			*resolved = xstrdup(names[0]);
		rc = 0;
	}
out:
	for (size_t i = 0; i < ARRAY_LEN(found); i++) {
		git_object_free(found[i]);
		free(names[i]);
	}
	return rc;
}

static int checkout_commit(git_repository *repo, git_object *commit, char **err)
{
	git_checkout_options co;
	git_checkout_options_init(&co, GIT_CHECKOUT_OPTIONS_VERSION);
	co.checkout_strategy =
		GIT_CHECKOUT_FORCE | GIT_CHECKOUT_REMOVE_UNTRACKED | GIT_CHECKOUT_REMOVE_IGNORED;
	if (git_checkout_tree(repo, commit, &co) < 0 ||
	    git_repository_set_head_detached(repo, git_object_id(commit)) < 0) {
		*err = xasprintf("cannot check out %s: %s", git_oid_tostr_s(git_object_id(commit)),
				 gerr());
		return -1;
	}
	return 0;
}

/* checkout or checkout/<path>, resolved, a directory inside the checkout. */
static char *source_dir(const char *checkout, const char *path, char **err)
{
	char *root = realpath(checkout, NULL), *want = NULL, *real = NULL;
	if (!root) {
		sys_error(err, "cannot resolve", checkout, errno);
		return NULL;
	}
	want = path ? xasprintf("%s/%s", root, path) : xstrdup(root);
	real = realpath(want, NULL);
	struct stat st;
	size_t n = strlen(root);
	if (!real && errno != ENOENT) {
		sys_error(err, "cannot resolve", want, errno);
	} else if (!real) {
		char *s = shown(path ? path : ".");
		*err = xasprintf("path '%s' does not exist in the repository", s);
		free(s);
	} else if (strncmp(real, root, n) != 0 || (real[n] != '/' && real[n] != '\0')) {
		char *s = shown(path);
		*err = xasprintf("path '%s' leads outside the repository (symbolic link)", s);
		free(s);
		free(real);
		real = NULL;
	} else if (stat(real, &st) < 0 || !S_ISDIR(st.st_mode)) {
		char *s = shown(path ? path : ".");
		*err = xasprintf("path '%s' is not a directory in the repository", s);
		free(s);
		free(real);
		real = NULL;
	}
	free(want);
	free(root);
	return real;
}

char *git_sync_checkout_head(const char *data_dir)
{
	pthread_once(&git_once, git_init_once);
	char *dir = git_dir_path(data_dir);
	char *path = xasprintf("%s/checkout", dir);
	git_repository *repo = NULL;
	git_oid oid;
	char *hex = NULL;
	struct stat st;
	if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode) &&
	    git_repository_open_ext(&repo, path, GIT_REPOSITORY_OPEN_NO_SEARCH, NULL) == 0 &&
	    git_reference_name_to_id(&oid, repo, "HEAD") == 0)
		hex = xstrdup(git_oid_tostr_s(&oid));
	git_repository_free(repo);
	free(path);
	free(dir);
	return hex;
}

/* The deploy key must exist and be readable before any network access. */
static int check_deploy_key(const char *ssh_dir, const char *key, char **err)
{
	char *pub = NULL, *fp = NULL, *kerr = NULL;
	int k = sshkey_public(ssh_dir, &pub, &fp, &kerr);
	free(pub);
	free(fp);
	if (k == -ENOENT) {
		*err = xasprintf("no deploy key: run relay git keygen (%s does not exist)", key);
		free(kerr);
	} else if (k < 0) {
		*err = kerr;
	}
	return k < 0 ? -1 : 0;
}

/* Writes the sync's outcome (now, commit, what ref resolved to: taken from
 * *resolved) into source.json. */
static int record_sync(const char *data_dir, struct git_source *src, const char *commit,
		       char **resolved, char **err)
{
	char now[RFC3339_STR_MAX];
	free(src->last_sync);
	free(src->last_commit);
	src->last_sync = xstrdup(rfc3339_format_utc(now_wall_ns(), now));
	src->last_commit = xstrdup(commit);
	free(src->last_ref);
	src->last_ref = *resolved;
	*resolved = NULL;
	return git_source_save(data_dir, src, err);
}

int git_sync(const char *data_dir, const char *functions_dir,
	     void (*notice)(void *arg, const char *msg), void *notice_arg,
	     struct git_sync_result *res, char **err)
{
	struct git_source src = {0};
	char *dir = git_dir_path(data_dir);
	char *checkout = xasprintf("%s/checkout", dir);
	char *ssh_dir = data_path(data_dir, "ssh");
	char *key = NULL, *srcdir = NULL, *resolved = NULL;
	struct remote_ctx ctx = {.ssh_dir = ssh_dir, .notice = notice, .notice_arg = notice_arg};
	git_repository *repo = NULL;
	git_object *commit = NULL;
	int dfd = -1, lfd = -1;
	memset(res, 0, sizeof *res);
	/* A cheap answer for "nothing configured" before creating a lock. */
	int rc = git_source_load(data_dir, &src, err);
	if (rc < 0)
		goto out;
	git_source_free(&src);
	/* git/ gone meanwhile: nothing configured any more. */
	if ((rc = open_git_dir(data_dir, false, &dfd, err)) < 0)
		goto out;
	rc = -1;
	if ((lfd = lock_git_dir(dfd, data_dir, err)) < 0)
		goto out;
	/* Again under the lock: a `git set` may have run meanwhile. */
	if ((rc = git_source_load(data_dir, &src, err)) < 0)
		goto out;
	rc = -1;
	if (git_url_parse(src.repository, NULL, NULL, &ctx.port, NULL, err) < 0)
		goto out;
	key = sshkey_path(ssh_dir);
	ctx.key_path = key;
	if (check_deploy_key(ssh_dir, key, err) < 0)
		goto out;
	pthread_once(&git_once, git_init_once);
	if (open_checkout(checkout, src.repository, &repo, err) < 0 ||
	    fetch(repo, src.repository, &ctx, err) < 0 ||
	    resolve_ref(repo, src.repository, src.ref, &commit, &resolved, err) < 0 ||
	    checkout_commit(repo, commit, err) < 0 ||
	    !(srcdir = source_dir(checkout, src.path, err)))
		goto out;
	/* Shutting down: the functions directory stays as it is. */
	if (atomic_load(&cancel_all)) {
		*err = xstrdup("interrupted: Relay is shutting down");
		goto out;
	}
	if (replace_functions(srcdir, functions_dir, res, err) < 0)
		goto out;
	git_oid_tostr(res->commit, sizeof res->commit, git_object_id(commit));
	if (record_sync(data_dir, &src, res->commit, &resolved, err) < 0)
		goto out;
	rc = 0;
out:
	git_object_free(commit);
	git_repository_free(repo);
	if (lfd >= 0)
		close(lfd);
	if (dfd >= 0)
		close(dfd);
	git_source_free(&src);
	free(ctx.err);
	free(resolved);
	free(srcdir);
	free(key);
	free(ssh_dir);
	free(checkout);
	free(dir);
	return rc;
}

bool gitsync_ref_matches(const char *data_dir, const char *ref, const char *pushed_ref)
{
	if (!ref || !pushed_ref || ref_why(ref))
		return false;
	if (is_hex(ref, 40, 40))
		return false; /* a commit: no push moves it */
	if (explicit_name(ref))
		return strcmp(ref, pushed_ref) == 0;
	struct git_source src;
	char *err = NULL;
	if (data_dir && git_source_load(data_dir, &src, &err) == 0) {
		bool recorded = strcmp(src.ref, ref) == 0 && src.last_ref;
		bool same = recorded && strcmp(src.last_ref, pushed_ref) == 0;
		git_source_free(&src);
		if (recorded)
			return same;
	}
	free(err);
	/* Not resolved yet: the sync this triggers resolves the name (or
	 * refuses it as ambiguous). */
	const char *name = explicit_name(pushed_ref);
	return name && strcmp(name, ref) == 0;
}
