#include "model/config.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/duration.h"
#include "io/http.h"
#include "io/redis.h"

enum kind {
	K_STRING, /* required non-empty or optional */
	K_REDIS_URI,
	K_DURATION, /* positive Go duration */
	K_LISTEN,
	K_LOG_LEVEL,
	K_POSITIVE_INT,
	K_NONNEG_INT, /* 0 to max */
	K_PATH,
	K_YESNO, /* yes or no, into an int: CONFIG_YES or CONFIG_NO (0: unset) */
	K_RUNTIME, /* an OCI runtime name: config_valid_runtime_name */
};

/* A macro's value as a string literal, for texts made from a constant. */
#define STR_(x) #x
#define STR(x) STR_(x)

/*
 * One variable. Its messages say what is accepted as
 * "accepted (note; default X)": the parenthesis holds whichever of the
 * note and the default there are, and the default is written from def_int
 * or def_str, the DEFAULT_* constant the field is set to, or def_var, the
 * variable whose value it copies, so the text and the value cannot drift.
 */
struct var {
	const char *name;
	enum kind kind;
	int required; /* under CONFIG_NEED_ALL */
	const char *accepted;
	const char *note; /* NULL, or a remark for the parenthesis */
	size_t offset;
	int64_t def_int;     /* K_POSITIVE_INT; K_LOG_LEVEL (an enum log_level) */
	const char *def_str; /* K_PATH; K_DURATION (NULL: unset or empty is off) */
	const char *def_var; /* K_NONNEG_INT: the default is this variable's
				value (an int64_t of an earlier entry), capped
				at max */
	int64_t max;	     /* K_NONNEG_INT: the largest value accepted */
};

#define OFF(field) offsetof(struct config, field)

static const struct var vars[] = {
	{"REDIS_URI", K_REDIS_URI, 1,
	 "host:port, redis://[user[:password]@]host:port[,host:port...][/db], rediss://... (TLS) "
	 "or redis-sentinel://[user[:password]@]host:port[,host:port...]/master-name[/db]",
	 NULL, OFF(redis_uri), 0, NULL, NULL, 0},
	{"REDIS_SENTINEL_USERNAME", K_STRING, 0, "a user name for AUTH to the sentinels",
	 "redis-sentinel:// only", OFF(redis_sentinel_user), 0, NULL, NULL, 0},
	{"REDIS_SENTINEL_PASSWORD", K_STRING, 0, "a password for AUTH to the sentinels",
	 "redis-sentinel:// only; unset: the sentinels are not authenticated",
	 OFF(redis_sentinel_password), 0, NULL, NULL, 0},
	{"REDIS_SENTINEL_TLS", K_YESNO, 0, "yes or no",
	 "whether Relay speaks TLS to the sentinels; unset: yes for rediss-sentinel://, "
	 "no for redis-sentinel://",
	 OFF(redis_sentinel_tls), 0, NULL, NULL, 0},
	{"REDIS_STREAM", K_STRING, 1, "a non-empty stream name", NULL, OFF(redis_stream), 0, NULL,
	 NULL, 0},
	{"REDIS_GROUP", K_STRING, 1, "a non-empty consumer group name", NULL, OFF(redis_group), 0,
	 NULL, NULL, 0},
	{"REDIS_STREAM_RETENTION", K_DURATION, 0, "a positive Go duration such as 6h or 90m",
	 "unset or empty disables retention", OFF(stream_retention_ns), 0, NULL, NULL, 0},
	{"METRICS_ADDR", K_LISTEN, 0,
	 "a listen address such as :9090, 127.0.0.1:9090 or [::1]:9090",
	 "unset or empty disables metrics", OFF(metrics_addr), 0, NULL, NULL, 0},
	{"GIT_WEBHOOK_ADDR", K_LISTEN, 0,
	 "a listen address such as :8081, 127.0.0.1:8081 or [::1]:8081",
	 "unset or empty disables the webhook", OFF(webhook_addr), 0, NULL, NULL, 0},
	{"LOG_LEVEL", K_LOG_LEVEL, 0, "DEBUG, INFO, WARN or ERROR", "case-insensitive",
	 OFF(log_level), DEFAULT_LOG_LEVEL, NULL, NULL, 0},
	{"MAX_CONCURRENCY", K_POSITIVE_INT, 0, "a positive integer", NULL, OFF(max_concurrency),
	 DEFAULT_MAX_CONCURRENCY, NULL, NULL, 0},
	{"MAX_BUFFERED_EVENTS", K_POSITIVE_INT, 0, "a positive integer", NULL,
	 OFF(max_buffered_events), DEFAULT_MAX_BUFFERED_EVENTS, NULL, NULL, 0},
	{"STANDBY_MAX", K_NONNEG_INT, 0, "an integer from 0 to " STR(STANDBY_MAX_LIMIT),
	 "0 disables standby containers", OFF(standby_max), 0, NULL, "MAX_CONCURRENCY",
	 STANDBY_MAX_LIMIT},
	{"STANDBY_IDLE", K_DURATION, 0, "a positive Go duration such as 30s, 10m or 1h", NULL,
	 OFF(standby_idle_ns), 0, DEFAULT_STANDBY_IDLE, NULL, 0},
	{"RELAY_OCI_RUNTIME", K_RUNTIME, 0,
	 "a runtime name the Docker daemon knows, such as runc, crun or runsc (at most "
	 STR(OCI_RUNTIME_NAME_MAX) " bytes of A-Z a-z 0-9 . _ -)",
	 "unset or empty: the daemon's default runtime", OFF(oci_runtime), 0, NULL, NULL, 0},
	{"RELAY_FUNCTIONS_DIR", K_PATH, 0, "a directory path", NULL, OFF(functions_dir), 0,
	 DEFAULT_FUNCTIONS_DIR, NULL, 0},
	{"RELAY_DATA_DIR", K_PATH, 0, "a directory path", NULL, OFF(data_dir), 0, DEFAULT_DATA_DIR,
	 NULL, 0},
};

int config_valid_listen_addr(const char *s)
{
	char host[HTTP_LISTEN_HOST_MAX];
	unsigned port;
	return http_parse_listen_addr(s, host, sizeof host, &port);
}

int config_valid_runtime_name(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > OCI_RUNTIME_NAME_MAX)
		return -1;
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
		      ch == '.' || ch == '_' || ch == '-'))
			return -1;
	}
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

/* v's default as a user would write it (in num when a number), or NULL
 * when it has none: unset, the setting is off (or required). */
static const char *default_text(const struct var *v, char *num, size_t size)
{
	switch (v->kind) {
	case K_POSITIVE_INT: snprintf_(num, size, "%" PRId64, v->def_int); return num;
	case K_NONNEG_INT:
		snprintf_(num, size, "%s, at most %" PRId64, v->def_var, v->max);
		return num;
	case K_LOG_LEVEL: return log_level_name((enum log_level)v->def_int);
	case K_PATH:
	case K_DURATION: return v->def_str;
	default: return NULL;
	}
}

/* What v accepts, for a message (malloc'd): see struct var. */
static char *accepted_text(const struct var *v)
{
	char num[64];
	const char *def = default_text(v, num, sizeof num);
	if (!def && !v->note)
		return xstrdup(v->accepted);
	return xasprintf("%s (%s%s%s%s)", v->accepted, v->note ? v->note : "",
			 v->note && def ? "; " : "", def ? "default " : "", def ? def : "");
}

/* The entry named name; NULL when the table has none. */
static const struct var *find_var(const char *name)
{
	for (size_t i = 0; i < ARRAY_LEN(vars); i++)
		if (strcmp(vars[i].name, name) == 0)
			return &vars[i];
	return NULL;
}

/* Sets v's field in c to v's default; without one it stays zero (NULL, 0:
 * off). A def_var default copies that variable's field, loaded earlier (the
 * table's order), capped at max: the field never exceeds what a set value
 * may be. */
static void set_default(const struct var *v, struct config *c)
{
	void *field = (char *)c + v->offset;
	switch (v->kind) {
	case K_POSITIVE_INT: *(int64_t *)field = v->def_int; break;
	case K_NONNEG_INT: {
		const struct var *from = find_var(v->def_var);
		int64_t d = from ? *(int64_t *)((char *)c + from->offset) : 0;
		*(int64_t *)field = d < v->max ? d : v->max;
		break;
	}
	case K_LOG_LEVEL: *(enum log_level *)field = (enum log_level)v->def_int; break;
	case K_PATH: *(char **)field = xstrdup(v->def_str); break;
	case K_DURATION:
		if (v->def_str && duration_parse(v->def_str, (int64_t *)field) < 0)
			*(int64_t *)field = 0; /* unreachable: test_config checks the defaults */
		break;
	default: break;
	}
}

/* Unset is the default (or off), and so is empty, except for a number
 * with a default: MAX_CONCURRENCY= or STANDBY_IDLE= is a mistake, not a
 * request for the default. */
static bool empty_refused(const struct var *v)
{
	return v->kind == K_POSITIVE_INT || v->kind == K_NONNEG_INT ||
	       (v->kind == K_DURATION && v->def_str);
}

/* Parses raw, set and non-empty (empty only when empty_refused), into
 * field. Returns NULL, or why raw is refused (malloc'd). */
static char *set_value(const struct var *v, const char *raw, void *field)
{
	if (!*raw)
		return xstrdup("empty");
	switch (v->kind) {
	case K_STRING:
	case K_PATH:
		free(*(char **)field);
		*(char **)field = xstrdup(raw);
		return NULL;
	case K_REDIS_URI: {
		struct redis_uri u;
		char *why = NULL;
		if (redis_uri_parse(raw, &u, &why) < 0)
			return why;
		redis_uri_free(&u);
		*(char **)field = xstrdup(raw);
		return NULL;
	}
	case K_DURATION: {
		int64_t d;
		if (duration_parse(raw, &d) < 0)
			return xstrdup("not a Go duration");
		if (d <= 0)
			return xstrdup("must be positive");
		*(int64_t *)field = d;
		return NULL;
	}
	case K_LISTEN:
		if (config_valid_listen_addr(raw) < 0)
			return xstrdup("not a listen address");
		*(char **)field = xstrdup(raw);
		return NULL;
	case K_LOG_LEVEL: {
		enum log_level l;
		if (log_parse_level(raw, &l) < 0)
			return xstrdup("unknown log level");
		*(enum log_level *)field = l;
		return NULL;
	}
	case K_POSITIVE_INT: {
		int64_t n;
		if (parse_int64(raw, &n) < 0 || raw[0] == '+')
			return xstrdup("not an integer");
		if (n <= 0)
			return xstrdup("must be positive");
		*(int64_t *)field = n;
		return NULL;
	}
	case K_RUNTIME:
		if (strlen(raw) > OCI_RUNTIME_NAME_MAX)
			return xstrdup("longer than " STR(OCI_RUNTIME_NAME_MAX) " bytes");
		if (config_valid_runtime_name(raw) < 0)
			return xstrdup("a byte outside A-Z a-z 0-9 . _ -");
		*(char **)field = xstrdup(raw);
		return NULL;
	case K_YESNO:
		if (strcmp(raw, "yes") != 0 && strcmp(raw, "no") != 0)
			return xstrdup("neither yes nor no");
		*(int *)field = strcmp(raw, "yes") == 0 ? CONFIG_YES : CONFIG_NO;
		return NULL;
	case K_NONNEG_INT: {
		int64_t n;
		if (parse_int64(raw, &n) < 0 || raw[0] == '+')
			return xstrdup("not an integer");
		if (n < 0)
			return xstrdup("must not be negative");
		if (n > v->max)
			return xasprintf("must be at most %" PRId64, v->max);
		*(int64_t *)field = n;
		return NULL;
	}
	}
	return NULL;
}

/* Sets v's field in c from the environment. Returns NULL, or the message
 * of its error (malloc'd). */
static char *load_var(const struct var *v, enum config_need need, struct config *c)
{
	const char *raw = getenv(v->name);
	bool required = v->required && (need == CONFIG_NEED_ALL || v->kind == K_REDIS_URI);
	void *field = (char *)c + v->offset;
	set_default(v, c);
	if (!raw || (!*raw && !empty_refused(v))) {
		if (!required)
			return NULL;
		char *accepted = accepted_text(v);
		char *msg = xasprintf("%s is required and must not be empty; accepted: %s", v->name,
				      accepted);
		free(accepted);
		return msg;
	}
	char *why = set_value(v, raw, field);
	if (!why)
		return NULL;
	char *shown = shown_value(v, raw);
	char *accepted = accepted_text(v);
	char *msg = xasprintf("%s %s is invalid (%s); accepted: %s", v->name, shown, why, accepted);
	free(accepted);
	free(shown);
	free(why);
	return msg;
}

int config_load(struct config *c, enum config_need need, char ***errs, int *nerrs)
{
	memset(c, 0, sizeof *c);
	*errs = NULL;
	*nerrs = 0;
	for (size_t i = 0; i < ARRAY_LEN(vars); i++) {
		char *msg = load_var(&vars[i], need, c);
		if (msg)
			add_err(errs, nerrs, msg);
	}
	otel_settings_load(&c->otel, errs, nerrs);
	if (*nerrs) {
		config_free(c);
		return -1;
	}
	return 0;
}

void config_load_dirs(struct config *c)
{
	for (size_t i = 0; i < ARRAY_LEN(vars); i++)
		if (vars[i].kind == K_PATH)
			free(load_var(&vars[i], CONFIG_NEED_ALL, c));
}

void config_free(struct config *c)
{
	if (c->redis_uri)
		memset(c->redis_uri, 0, strlen(c->redis_uri)); /* may hold a password */
	free(c->redis_uri);
	free(c->redis_sentinel_user);
	if (c->redis_sentinel_password)
		memset(c->redis_sentinel_password, 0, strlen(c->redis_sentinel_password));
	free(c->redis_sentinel_password);
	free(c->redis_stream);
	free(c->redis_group);
	free(c->metrics_addr);
	free(c->webhook_addr);
	free(c->oci_runtime);
	free(c->functions_dir);
	free(c->data_dir);
	otel_settings_free(&c->otel);
	memset(c, 0, sizeof *c);
}

int config_redis_uri(const struct config *c, struct redis_uri *u, char **why)
{
	if (redis_uri_parse(c->redis_uri, u, why) < 0)
		return -1;
	if (c->redis_stream)
		u->route_key = xstrdup(c->redis_stream);
	if (u->sentinel_master) {
		if (c->redis_sentinel_user)
			u->sentinel_user = xstrdup(c->redis_sentinel_user);
		if (c->redis_sentinel_password)
			u->sentinel_password = xstrdup(c->redis_sentinel_password);
		if (c->redis_sentinel_tls)
			u->sentinel_tls = c->redis_sentinel_tls == CONFIG_YES;
	}
	return 0;
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
