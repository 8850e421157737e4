/*
 * Git sync's persisted source (see gitsync.h): the checks of what an
 * operator gives (the SSH URL, --ref, --path) and what a webhook payload's
 * URLs are compared by, git/ and source.json (loaded and saved, every
 * field validated either way), and which pushed ref the configured ref
 * matches.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "git/gitsync.h"
#include "git/gitsync_internal.h"
#include "base/rfc3339.h"
#include "model/secret.h"
#include "base/util.h"

#define URL_MAX 1024
#define REF_MAX 255
#define SUBPATH_MAX 1024
#define SOURCE_FILE_MAX (64 * 1024)

#define URL_HINT "use git@host:org/repo.git or ssh://git@host/org/repo.git (HTTPS is not supported)"

/* ---- small helpers ---- */

char *gitsync_shown(const char *s)
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

/*
 * Splits scheme://[user@]host[:port]/path (any scheme) or scp-like
 * [user@]host:path. On failure *why is a static reason; u holds partial
 * results either way (url_parts_free).
 */
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

int gitsync_url_parse(const char *url, char **user, char **host, int *port, char **path, char **err)
{
	struct url_parts u;
	const char *why = NULL;
	int rc = url_split(url, &u, &why);
	if (rc == 0 && u.scheme && strcmp(u.scheme, "ssh") != 0)
		rc = -1, why = NULL;
	if (rc < 0) {
		char *s = gitsync_shown(url);
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

char *gitsync_repo_identity(const char *url)
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

int gitsync_path_check(const char *path, char **err)
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
	char *s = gitsync_shown(path);
	*err = xasprintf("invalid path '%s': %s", s, why);
	free(s);
	return -1;
}

/* ---- refs ---- */

bool gitsync_is_hex(const char *s, size_t min, size_t max)
{
	size_t n = strspn(s, "0123456789abcdefABCDEF");
	return !s[n] && n >= min && n <= max;
}

static bool hex40(const char *s)
{
	size_t n = strspn(s, "0123456789abcdef");
	return n == 40 && !s[n];
}

const char *gitsync_explicit_name(const char *ref)
{
	if (str_has_prefix(ref, "refs/heads/"))
		return ref + strlen("refs/heads/");
	if (str_has_prefix(ref, "refs/tags/"))
		return ref + strlen("refs/tags/");
	return NULL;
}

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
	if (gitsync_is_hex(ref, 40, 40))
		return NULL;
	const char *name = gitsync_explicit_name(ref);
	if (!name && str_has_prefix(ref, "refs/"))
		return "a full ref must be refs/heads/NAME (a branch) or refs/tags/NAME (a tag)";
	if (name && !*name)
		return "the branch or tag name is empty";
	/* A bare name is checked as the branch it may be. */
	char *full = name ? xstrdup(ref) : xasprintf("refs/heads/%s", ref);
	int valid = 0;
	gitsync_libgit2_init();
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
		char *s = gitsync_shown(ref);
		*err = xasprintf("invalid ref '%s': %s", s, why);
		free(s);
	}
	return -1;
}

/* Can resolved (a last_ref) be what ref resolves to? */
static bool resolves_to(const char *ref, const char *resolved)
{
	if (gitsync_is_hex(ref, 40, 40))
		return hex40(resolved) && strncasecmp(ref, resolved, 40) == 0;
	if (gitsync_explicit_name(ref))
		return strcmp(ref, resolved) == 0;
	const char *name = gitsync_explicit_name(resolved);
	if (name)
		return strcmp(name, ref) == 0;
	return hex40(resolved) && gitsync_is_hex(ref, 4, 39) &&
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
static int source_validate(const struct gitsync_source *s, char **err)
{
	if (!s->repository) {
		*err = xstrdup("no repository");
		return -1;
	}
	if (gitsync_url_parse(s->repository, NULL, NULL, NULL, NULL, err) < 0)
		return -1;
	if (!s->ref) {
		*err = xstrdup("no ref");
		return -1;
	}
	if (gitsync_ref_check(s->ref, err) < 0)
		return -1;
	if (s->path && gitsync_path_check(s->path, err) < 0)
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

void gitsync_source_free(struct gitsync_source *s)
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

char *gitsync_data_path(const char *data_dir, const char *sub)
{
	size_t n = strlen(data_dir);
	while (n > 1 && data_dir[n - 1] == '/')
		n--;
	return xasprintf("%.*s/%s", (int)n, data_dir, sub);
}

char *gitsync_dir_path(const char *data_dir)
{
	return gitsync_data_path(data_dir, "git");
}

int gitsync_open_dir(const char *data_dir, bool create, int *fd, char **err)
{
	char *dir = gitsync_dir_path(data_dir);
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

int gitsync_source_load(const char *data_dir, struct gitsync_source *out, char **err)
{
	static const char *const keys[] = {"repository", "ref",		"path",	   "webhook_secret",
					   "last_sync",	 "last_commit", "last_ref"};
	char *dir = gitsync_dir_path(data_dir);
	char *path = xasprintf("%s/source.json", dir);
	char *text = NULL, *why = NULL;
	json_t *root = NULL;
	int dfd = -1;
	memset(out, 0, sizeof *out);
	int rc = gitsync_open_dir(data_dir, false, &dfd, err);
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
		gitsync_source_free(out);
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

int gitsync_source_save(const char *data_dir, const struct gitsync_source *src, char **err)
{
	char *dir = gitsync_dir_path(data_dir);
	char *text = NULL, *why = NULL;
	int dfd = -1, rc = -1;
	if (source_validate(src, &why) < 0) {
		*err = xasprintf("cannot save the git source: %s", why);
		goto out;
	}
	if (gitsync_open_dir(data_dir, true, &dfd, err) < 0)
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

bool gitsync_ref_matches(const char *data_dir, const char *ref, const char *pushed_ref)
{
	if (!ref || !pushed_ref || ref_why(ref))
		return false;
	if (gitsync_is_hex(ref, 40, 40))
		return false; /* a commit: no push moves it */
	if (gitsync_explicit_name(ref))
		return strcmp(ref, pushed_ref) == 0;
	struct gitsync_source src;
	char *err = NULL;
	if (data_dir && gitsync_source_load(data_dir, &src, &err) == 0) {
		bool recorded = strcmp(src.ref, ref) == 0 && src.last_ref;
		bool same = recorded && strcmp(src.last_ref, pushed_ref) == 0;
		gitsync_source_free(&src);
		if (recorded)
			return same;
	}
	free(err);
	/* Not resolved yet: the sync this triggers resolves the name (or
	 * refuses it as ambiguous). */
	const char *name = gitsync_explicit_name(pushed_ref);
	return name && strcmp(name, ref) == 0;
}
