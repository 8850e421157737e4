/*
 * REDIS_URI: parsing (the forms are in redis.h), freeing, copying and
 * redaction of the password for messages; and the checks of a port and of
 * a host that a server names (a slot map, a redirect, a sentinel), which
 * redis_cluster.c and redis_sentinel.c share.
 */
#include "io/redis.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "io/redis_internal.h"

/* Percent-decodes s[0..n) into a new string; NULL on a bad escape. */
static char *pct_decode(const char *s, size_t n)
{
	char *out = xmalloc(n + 1);
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] != '%') {
			out[o++] = s[i];
			continue;
		}
		int hi = i + 1 < n ? hex_digit((unsigned char)s[i + 1]) : -1;
		int lo = i + 2 < n ? hex_digit((unsigned char)s[i + 2]) : -1;
		if (hi < 0 || lo < 0) {
			free(out);
			return NULL;
		}
		out[o++] = (char)(hi * 16 + lo);
		i += 2;
	}
	out[o] = '\0';
	return out;
}

int redis_valid_port(const char *p, size_t n)
{
	if (n == 0 || n > 5)
		return 0;
	int v = 0;
	for (size_t i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return 0;
		v = v * 10 + (p[i] - '0');
	}
	return v >= 1 && v <= 65535;
}

bool redis_valid_host(const char *s, size_t n)
{
	if (n == 0 || n > 255)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f || s[i] == '/' ||
		    s[i] == '@' || s[i] == ',')
			return false;
	return true;
}

/* Parses "host:port" / "[v6]:port" / "host" (when default_port is set). */
static int parse_hostport(const char *s, size_t n, const char *default_port, struct redis_uri *u,
			  char **why)
{
	const char *host;
	size_t hostlen;
	const char *rest;
	if (n && s[0] == '[') {
		const char *close = memchr(s, ']', n);
		if (!close) {
			*why = xstrdup("unterminated [ in host");
			return -1;
		}
		host = s + 1;
		hostlen = (size_t)(close - s - 1);
		rest = close + 1;
		char tmp[64];
		struct in6_addr a6;
		if (hostlen == 0 || hostlen >= sizeof tmp) {
			*why = xstrdup("invalid IPv6 address");
			return -1;
		}
		memcpy(tmp, host, hostlen);
		tmp[hostlen] = '\0';
		if (inet_pton(AF_INET6, tmp, &a6) != 1) {
			*why = xstrdup("invalid IPv6 address");
			return -1;
		}
	} else {
		const char *colon = memchr(s, ':', n);
		host = s;
		hostlen = colon ? (size_t)(colon - s) : n;
		rest = s + hostlen;
		if (colon && memchr(colon + 1, ':', n - hostlen - 1)) {
			*why = xstrdup("an IPv6 host must be written in brackets, e.g. [::1]:6379");
			return -1;
		}
		for (size_t i = 0; i < hostlen; i++) {
			unsigned char c = (unsigned char)host[i];
			if (!(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') &&
			    !(c >= '0' && c <= '9') && c != '.' && c != '-' && c != '_') {
				*why = xasprintf("invalid character '%c' in host",
						 c >= 0x20 && c < 0x7f ? c : '?');
				return -1;
			}
		}
	}
	if (hostlen == 0) {
		*why = xstrdup("missing host");
		return -1;
	}
	size_t restlen = n - (size_t)(rest - s);
	const char *port;
	size_t portlen;
	if (restlen == 0) {
		if (!default_port) {
			*why = xstrdup("missing port");
			return -1;
		}
		port = default_port;
		portlen = strlen(default_port);
	} else {
		if (rest[0] != ':') {
			*why = xstrdup("unexpected text after host");
			return -1;
		}
		port = rest + 1;
		portlen = restlen - 1;
	}
	if (!redis_valid_port(port, portlen)) {
		*why = xstrdup("port must be a number from 1 to 65535");
		return -1;
	}
	u->host = xstrndup(host, hostlen);
	u->port = xstrndup(port, portlen);
	return 0;
}

/* Parses the comma-separated host list s[0..n) into u->hosts (and
 * u->host/port, the first). */
static int parse_hostlist(const char *s, size_t n, const char *default_port, struct redis_uri *u,
			  char **why)
{
	size_t count = 1;
	for (size_t i = 0; i < n; i++)
		if (s[i] == ',')
			count++;
	if (count > REDIS_HOSTS_MAX) {
		*why = xasprintf("at most %d hosts are allowed in the list, not %zu",
				 REDIS_HOSTS_MAX, count);
		return -1;
	}
	u->hosts = xcalloc(count, sizeof *u->hosts);
	const char *p = s;
	for (size_t k = 0; k < count; k++) {
		const char *end = memchr(p, ',', n - (size_t)(p - s));
		size_t len = end ? (size_t)(end - p) : n - (size_t)(p - s);
		if (len == 0 && count > 1) {
			*why = xasprintf("empty entry %zu in the host list", k + 1);
			return -1;
		}
		struct redis_uri tmp = {0};
		char *inner = NULL;
		if (parse_hostport(p, len, default_port, &tmp, &inner) < 0) {
			if (count > 1) {
				*why = xasprintf("host %zu of the list: %s", k + 1, inner);
				free(inner);
			} else {
				*why = inner;
			}
			return -1;
		}
		u->hosts[k].host = tmp.host;
		u->hosts[k].port = tmp.port;
		u->nhosts = k + 1;
		p = end ? end + 1 : p + len;
	}
	u->host = xstrdup(u->hosts[0].host);
	u->port = xstrdup(u->hosts[0].port);
	return 0;
}

static int parse_db(const char *s, struct redis_uri *u, char **why)
{
	int64_t db;
	if (parse_int64(s, &db) < 0 || db < 0 || db > 1000000 || s[0] == '+' || s[0] == '-') {
		*why = xstrdup("the path must be a database number, e.g. /0");
		return -1;
	}
	u->db = (int)db;
	return 0;
}

/* A value without a scheme: "host:port" or "host" alone, never a list. */
static int parse_bare(const char *s, struct redis_uri *u, char **why)
{
	if (parse_hostlist(s, strlen(s), NULL, u, why) < 0)
		return -1;
	if (u->nhosts > 1) {
		*why = xstrdup("a host list needs the redis:// form, e.g. "
			       "redis://h1:7000,h2:7001");
		return -1;
	}
	return 0;
}

/* The scheme s[0..n): TLS or not, sentinel mode or not. */
static int parse_scheme(const char *s, size_t n, struct redis_uri *u, bool *sentinel, char **why)
{
	*sentinel = false;
	if (n == 5 && strncmp(s, "redis", 5) == 0) {
		u->tls = false;
	} else if (n == 6 && strncmp(s, "rediss", 6) == 0) {
		u->tls = true;
	} else if (n == 14 && strncmp(s, "redis-sentinel", 14) == 0) {
		*sentinel = true;
	} else if (n == 15 && strncmp(s, "rediss-sentinel", 15) == 0) {
		u->tls = true;
		u->sentinel_tls = true;
		*sentinel = true;
	} else {
		char scheme[32];
		snprintf_(scheme, sizeof scheme, "%.*s", (int)(n < 20 ? n : 20), s);
		*why = xasprintf("unsupported scheme '%s'", scheme);
		return -1;
	}
	return 0;
}

/* What follows the scheme, p: refuses a query, a fragment and an '@' in
 * the path; *slash is where the path starts (NULL: none). */
static int find_path(const char *p, const char **slash, char **why)
{
	if (strpbrk(p, "?#")) {
		*why = xstrdup("query strings and fragments are not supported");
		return -1;
	}
	*slash = strchr(p, '/');
	/* Refused before anything else reads the path: redaction takes the
	 * password to end at the last '@', so an error about the master name
	 * or database would otherwise tell which bytes the password held. */
	if (*slash && strchr(*slash, '@')) {
		*why = xstrdup("'@' after the host list: a password holding '/' must be "
			       "percent-encoded as %2F");
		return -1;
	}
	return 0;
}

/* The user and password of the authority p[0..n), if any; *hp is where
 * its host list starts. */
static int parse_userinfo(const char *p, size_t n, struct redis_uri *u, const char **hp, char **why)
{
	/* The last '@' ends the userinfo: passwords may contain '@' unescaped. */
	const char *at = NULL;
	for (size_t i = 0; i < n; i++)
		if (p[i] == '@')
			at = p + i;
	*hp = p;
	if (!at)
		return 0;
	const char *colon = memchr(p, ':', (size_t)(at - p));
	size_t userlen = colon ? (size_t)(colon - p) : (size_t)(at - p);
	if (userlen) {
		u->user = pct_decode(p, userlen);
		if (!u->user) {
			*why = xstrdup("bad percent-encoding in user name");
			return -1;
		}
	}
	if (colon) {
		u->password = pct_decode(colon + 1, (size_t)(at - colon - 1));
		if (!u->password) {
			*why = xstrdup("bad percent-encoding in password");
			return -1;
		}
	}
	*hp = at + 1;
	return 0;
}

/* Sentinel mode's path (slash: NULL when none): "/<master-name>[/db]". */
static int parse_sentinel_path(const char *slash, struct redis_uri *u, char **why)
{
	const char *name = slash ? slash + 1 : "";
	const char *end = strchr(name, '/');
	size_t namelen = end ? (size_t)(end - name) : strlen(name);
	if (namelen == 0) {
		*why = xstrdup("missing master name: the form is "
			       "redis-sentinel://host:26379,.../<master-name>[/db]");
		return -1;
	}
	for (size_t i = 0; i < namelen; i++) {
		unsigned char c = (unsigned char)name[i];
		if (c <= 0x20 || c >= 0x7f) {
			*why = xstrdup("invalid character in the master name");
			return -1;
		}
	}
	u->sentinel_master = xstrndup(name, namelen);
	if (end && end[1] && parse_db(end + 1, u, why) < 0)
		return -1;
	return 0;
}

int redis_uri_parse(const char *s, struct redis_uri *u, char **why)
{
	memset(u, 0, sizeof *u);
	*why = NULL;
	const char *sep = strstr(s, "://");
	if (!sep) {
		if (parse_bare(s, u, why) < 0)
			goto fail;
		return 0;
	}
	bool sentinel;
	if (parse_scheme(s, (size_t)(sep - s), u, &sentinel, why) < 0)
		goto fail;
	const char *p = sep + 3, *slash, *hp;
	if (find_path(p, &slash, why) < 0)
		goto fail;
	size_t authlen = slash ? (size_t)(slash - p) : strlen(p);
	if (parse_userinfo(p, authlen, u, &hp, why) < 0)
		goto fail;
	if (parse_hostlist(hp, authlen - (size_t)(hp - p), sentinel ? "26379" : "6379", u, why) < 0)
		goto fail;
	if (sentinel) {
		if (parse_sentinel_path(slash, u, why) < 0)
			goto fail;
	} else if (slash && slash[1] && parse_db(slash + 1, u, why) < 0) {
		goto fail;
	}
	return 0;
fail:
	redis_uri_free(u);
	return -1;
}

static void free_secret(char *s)
{
	if (s) {
		memset(s, 0, strlen(s));
		free(s);
	}
}

void redis_uri_free(struct redis_uri *u)
{
	free(u->host);
	free(u->port);
	for (size_t i = 0; i < u->nhosts; i++) {
		free(u->hosts[i].host);
		free(u->hosts[i].port);
	}
	free(u->hosts);
	free(u->user);
	free_secret(u->password);
	free(u->sentinel_master);
	free(u->sentinel_user);
	free_secret(u->sentinel_password);
	free(u->route_key);
	memset(u, 0, sizeof *u);
}

static char *dup_or_null(const char *s)
{
	return s ? xstrdup(s) : NULL;
}

void redis_uri_copy(struct redis_uri *dst, const struct redis_uri *src)
{
	dst->host = xstrdup(src->host);
	dst->port = xstrdup(src->port);
	dst->nhosts = src->nhosts;
	dst->hosts = NULL;
	if (src->nhosts) {
		dst->hosts = xcalloc(src->nhosts, sizeof *dst->hosts);
		for (size_t i = 0; i < src->nhosts; i++) {
			dst->hosts[i].host = xstrdup(src->hosts[i].host);
			dst->hosts[i].port = xstrdup(src->hosts[i].port);
		}
	}
	dst->user = dup_or_null(src->user);
	dst->password = dup_or_null(src->password);
	dst->tls = src->tls;
	dst->sentinel_tls = src->sentinel_tls;
	dst->db = src->db;
	dst->sentinel_master = dup_or_null(src->sentinel_master);
	dst->sentinel_user = dup_or_null(src->sentinel_user);
	dst->sentinel_password = dup_or_null(src->sentinel_password);
	dst->route_key = dup_or_null(src->route_key);
}

char *redis_uri_redact(const char *s)
{
	/* More careful than the parser: whatever the URI's faults, a password
	 * ends at the last '@', even one holding '/', '?' or '#' unescaped or
	 * a value without a scheme, so no error message can show it. */
	const char *sep = strstr(s, "://");
	const char *p = sep ? sep + 3 : s;
	const char *at = strrchr(p, '@');
	if (!at)
		return xstrdup(s);
	const char *colon = memchr(p, ':', (size_t)(at - p));
	if (!colon)
		return xstrdup(s);
	return xasprintf("%.*sxxxxx%s", (int)(colon + 1 - s), s, at);
}
