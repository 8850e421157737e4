#include "config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "duration.h"
#include "redis.h"

enum kind {
	K_STRING, /* required non-empty or optional */
	K_REDIS_URI,
	K_DURATION, /* positive Go duration */
	K_LISTEN,
	K_LOG_LEVEL,
	K_POSITIVE_INT,
	K_PATH,
};

struct var {
	const char *name;
	enum kind kind;
	int required; /* under CONFIG_NEED_ALL */
	const char *accepted;
	size_t offset;
	int64_t def_int;
	const char *def_str;
};

#define OFF(field) offsetof(struct config, field)

static const struct var vars[] = {
	{"REDIS_URI", K_REDIS_URI, 1,
	 "host:port, redis://[user[:password]@]host:port[/db] or "
	 "rediss://[user[:password]@]host:port[/db]",
	 OFF(redis_uri), 0, NULL},
	{"REDIS_STREAM", K_STRING, 1, "a non-empty stream name", OFF(redis_stream), 0, NULL},
	{"REDIS_GROUP", K_STRING, 1, "a non-empty consumer group name", OFF(redis_group), 0, NULL},
	{"REDIS_STREAM_RETENTION", K_DURATION, 0,
	 "a positive Go duration such as 6h or 90m (unset or empty disables retention)",
	 OFF(stream_retention_ns), 0, NULL},
	{"METRICS_ADDR", K_LISTEN, 0,
	 "a listen address such as :9090, 127.0.0.1:9090 or [::1]:9090 (unset or empty disables "
	 "metrics)",
	 OFF(metrics_addr), 0, NULL},
	{"GIT_WEBHOOK_ADDR", K_LISTEN, 0,
	 "a listen address such as :8081, 127.0.0.1:8081 or [::1]:8081 (unset or empty disables "
	 "the webhook)",
	 OFF(webhook_addr), 0, NULL},
	{"LOG_LEVEL", K_LOG_LEVEL, 0, "DEBUG, INFO, WARN or ERROR (case-insensitive; default INFO)",
	 OFF(log_level), 0, NULL},
	{"MAX_CONCURRENCY", K_POSITIVE_INT, 0, "a positive integer (default 8)",
	 OFF(max_concurrency), DEFAULT_MAX_CONCURRENCY, NULL},
	{"MAX_BUFFERED_EVENTS", K_POSITIVE_INT, 0, "a positive integer (default 16)",
	 OFF(max_buffered_events), DEFAULT_MAX_BUFFERED_EVENTS, NULL},
	{"RELAY_FUNCTIONS_DIR", K_PATH, 0, "a directory path (default /functions)",
	 OFF(functions_dir), 0, DEFAULT_FUNCTIONS_DIR},
	{"RELAY_DATA_DIR", K_PATH, 0, "a directory path (default /var/lib/relay)", OFF(data_dir), 0,
	 DEFAULT_DATA_DIR},
};

int config_valid_listen_addr(const char *s)
{
	const char *colon;
	char host[256];
	if (s[0] == '[') {
		const char *close = strchr(s, ']');
		if (!close || close[1] != ':')
			return -1;
		size_t n = (size_t)(close - s - 1);
		if (n == 0 || n >= sizeof host)
			return -1;
		memcpy(host, s + 1, n);
		host[n] = '\0';
		struct in6_addr a6;
		if (inet_pton(AF_INET6, host, &a6) != 1)
			return -1;
		colon = close + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon)
			return -1;
		size_t n = (size_t)(colon - s);
		if (n >= sizeof host)
			return -1;
		memcpy(host, s, n);
		host[n] = '\0';
		if (memchr(host, ':', n))
			return -1; /* an IPv6 host must be bracketed */
		for (size_t i = 0; i < n; i++) {
			unsigned char ch = (unsigned char)host[i];
			if (!isalnum(ch) && ch != '.' && ch != '-' && ch != '_')
				return -1;
		}
	}
	const char *port = colon + 1;
	int64_t p;
	if (!*port || strlen(port) > 5)
		return -1;
	for (const char *q = port; *q; q++)
		if (!isdigit((unsigned char)*q))
			return -1;
	if (parse_int64(port, &p) < 0 || p < 0 || p > 65535)
		return -1;
	return 0;
}

static void add_err(char ***errs, int *nerrs, char *msg)
{
	*errs = xrealloc(*errs, sizeof(char *) * (size_t)(*nerrs + 1));
	(*errs)[(*nerrs)++] = msg;
}

/* The value as it may appear in a message: single-quoted, cut at 200 bytes,
 * control bytes shown as '?', and never a password. */
static char *shown_value(const struct var *v, const char *value)
{
	char *redacted = v->kind == K_REDIS_URI ? redis_uri_redact(value) : xstrdup(value);
	size_t n = strlen(redacted);
	bool cut = n > 200;
	if (cut)
		n = 200;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)redacted[i] < 0x20 || redacted[i] == 0x7f)
			redacted[i] = '?';
	char *out = xasprintf("'%.*s'%s", (int)n, redacted, cut ? "..." : "");
	free(redacted);
	return out;
}

int config_load(struct config *c, enum config_need need, char ***errs, int *nerrs)
{
	memset(c, 0, sizeof *c);
	*errs = NULL;
	*nerrs = 0;
	for (size_t i = 0; i < ARRAY_LEN(vars); i++) {
		const struct var *v = &vars[i];
		const char *raw = getenv(v->name);
		char *field = (char *)c + v->offset;
		bool required = v->required && (need == CONFIG_NEED_ALL || v->kind == K_REDIS_URI);
		bool empty = !raw || !*raw;

		if (v->kind == K_POSITIVE_INT)
			*(int64_t *)(void *)field = v->def_int;
		if (v->kind == K_LOG_LEVEL)
			*(enum log_level *)(void *)field = LOG_INFO;
		if (v->kind == K_PATH)
			*(char **)(void *)field = xstrdup(v->def_str);

		if (empty && v->kind != K_LOG_LEVEL && v->kind != K_POSITIVE_INT) {
			if (required)
				add_err(errs, nerrs,
					xasprintf("%s is required and must not be empty; accepted: "
						  "%s",
						  v->name, v->accepted));
			continue;
		}
		if (!raw)
			continue;

		char *err = NULL;
		switch (v->kind) {
		case K_STRING:
		case K_PATH:
			free(*(char **)(void *)field);
			*(char **)(void *)field = xstrdup(raw);
			break;
		case K_REDIS_URI: {
			struct redis_uri u;
			char *why = NULL;
			if (redis_uri_parse(raw, &u, &why) < 0) {
				err = why;
			} else {
				redis_uri_free(&u);
				*(char **)(void *)field = xstrdup(raw);
			}
			break;
		}
		case K_DURATION: {
			int64_t d;
			if (duration_parse(raw, &d) < 0)
				err = xstrdup("not a Go duration");
			else if (d <= 0)
				err = xstrdup("must be positive");
			else
				*(int64_t *)(void *)field = d;
			break;
		}
		case K_LISTEN:
			if (config_valid_listen_addr(raw) < 0)
				err = xstrdup("not a listen address");
			else
				*(char **)(void *)field = xstrdup(raw);
			break;
		case K_LOG_LEVEL: {
			enum log_level l;
			if (empty)
				break; /* unset or empty: the default INFO */
			if (log_parse_level(raw, &l) < 0)
				err = xstrdup("unknown log level");
			else
				*(enum log_level *)(void *)field = l;
			break;
		}
		case K_POSITIVE_INT: {
			int64_t n;
			if (empty)
				err = xstrdup("empty");
			else if (parse_int64(raw, &n) < 0 || raw[0] == '+')
				err = xstrdup("not an integer");
			else if (n <= 0)
				err = xstrdup("must be positive");
			else
				*(int64_t *)(void *)field = n;
			break;
		}
		}
		if (err) {
			char *shown = shown_value(v, raw);
			add_err(errs, nerrs,
				xasprintf("%s %s is invalid (%s); accepted: %s", v->name, shown,
					  err, v->accepted));
			free(shown);
			free(err);
		}
	}
	if (*nerrs) {
		config_free(c);
		return -1;
	}
	return 0;
}

void config_free(struct config *c)
{
	free(c->redis_uri);
	free(c->redis_stream);
	free(c->redis_group);
	free(c->metrics_addr);
	free(c->webhook_addr);
	free(c->functions_dir);
	free(c->data_dir);
	memset(c, 0, sizeof *c);
}

void config_errors_free(char **errs, int nerrs)
{
	for (int i = 0; i < nerrs; i++)
		free(errs[i]);
	free(errs);
}

int config_load_or_log(struct config *c, enum config_need need)
{
	char **errs;
	int nerrs;
	if (config_load(c, need, &errs, &nerrs) < 0) {
		for (int i = 0; i < nerrs; i++)
			log_error(NULL, "invalid configuration: %s", errs[i]);
		config_errors_free(errs, nerrs);
		return -1;
	}
	log_set_level(c->log_level);
	return 0;
}
