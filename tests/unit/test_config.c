#include <stdlib.h>

#include "model/config.h"
#include "base/duration.h"
#include "io/redis.h"
#include "t.h"

static const char *const all_vars[] = {
	"REDIS_URI",
	"REDIS_STREAM",
	"REDIS_GROUP",
	"REDIS_STREAM_RETENTION",
	"METRICS_ADDR",
	"GIT_WEBHOOK_ADDR",
	"LOG_LEVEL",
	"MAX_CONCURRENCY",
	"MAX_BUFFERED_EVENTS",
	"RELAY_FUNCTIONS_DIR",
	"RELAY_DATA_DIR",
	"STANDBY_MAX",
	"STANDBY_IDLE",
	"RELAY_OCI_RUNTIME",
	"REDIS_SENTINEL_USERNAME",
	"REDIS_SENTINEL_PASSWORD",
	"REDIS_SENTINEL_TLS",
};

static void base_env(void)
{
	for (size_t i = 0; i < sizeof all_vars / sizeof all_vars[0]; i++)
		unsetenv(all_vars[i]);
	setenv("REDIS_URI", "127.0.0.1:6379", 1);
	setenv("REDIS_STREAM", "events", 1);
	setenv("REDIS_GROUP", "relay", 1);
}

TEST(defaults)
{
	base_env();
	struct config c;
	char **errs;
	int n;
	REQUIRE(config_load(&c, CONFIG_NEED_ALL, &errs, &n) == 0);
	CHECK_STR(c.redis_uri, "127.0.0.1:6379");
	CHECK_STR(c.redis_stream, "events");
	CHECK_STR(c.redis_group, "relay");
	CHECK_INT(c.stream_retention_ns, 0);
	CHECK(c.metrics_addr == NULL);
	CHECK(c.webhook_addr == NULL);
	CHECK_INT(c.log_level, LOG_INFO);
	CHECK_INT(c.max_concurrency, 8);
	CHECK_INT(c.max_buffered_events, 16);
	CHECK_INT(c.standby_max, 8); /* MAX_CONCURRENCY's */
	CHECK_INT(c.standby_idle_ns, 10 * NS_PER_MIN);
	CHECK(c.oci_runtime == NULL); /* the daemon's default runtime */
	CHECK_STR(c.functions_dir, "/functions");
	CHECK_STR(c.data_dir, "/var/lib/relay");
	config_free(&c);
}

TEST(all_set)
{
	base_env();
	setenv("REDIS_STREAM_RETENTION", "6h", 1);
	setenv("METRICS_ADDR", ":9090", 1);
	setenv("GIT_WEBHOOK_ADDR", "[::1]:8081", 1);
	setenv("LOG_LEVEL", "  debug ", 1);
	setenv("MAX_CONCURRENCY", "3", 1);
	setenv("MAX_BUFFERED_EVENTS", "100", 1);
	setenv("RELAY_FUNCTIONS_DIR", "/tmp/f", 1);
	setenv("RELAY_DATA_DIR", "/tmp/d", 1);
	setenv("STANDBY_MAX", "5", 1);
	setenv("STANDBY_IDLE", "1m30s", 1);
	struct config c;
	char **errs;
	int n;
	REQUIRE(config_load(&c, CONFIG_NEED_ALL, &errs, &n) == 0);
	CHECK_INT(c.standby_max, 5);
	CHECK_INT(c.standby_idle_ns, 90 * NS_PER_SEC);
	CHECK_INT(c.stream_retention_ns, 6 * NS_PER_HOUR);
	CHECK_STR(c.metrics_addr, ":9090");
	CHECK_STR(c.webhook_addr, "[::1]:8081");
	CHECK_INT(c.log_level, LOG_DEBUG);
	CHECK_INT(c.max_concurrency, 3);
	CHECK_INT(c.max_buffered_events, 100);
	CHECK_STR(c.functions_dir, "/tmp/f");
	CHECK_STR(c.data_dir, "/tmp/d");
	config_free(&c);
}

TEST(empty_optional_values_disable)
{
	base_env();
	setenv("REDIS_STREAM_RETENTION", "", 1);
	setenv("METRICS_ADDR", "", 1);
	setenv("GIT_WEBHOOK_ADDR", "", 1);
	setenv("LOG_LEVEL", "", 1);
	struct config c;
	char **errs;
	int n;
	REQUIRE(config_load(&c, CONFIG_NEED_ALL, &errs, &n) == 0);
	CHECK_INT(c.stream_retention_ns, 0);
	CHECK(c.metrics_addr == NULL);
	CHECK(c.webhook_addr == NULL);
	CHECK_INT(c.log_level, LOG_INFO);
	config_free(&c);
}

/* Each row: variable, value (NULL = unset), substring the error must contain. */
static const struct {
	const char *var;
	const char *value;
	const char *want;
} bad[] = {
	{"REDIS_URI", NULL, "REDIS_URI is required"},
	{"REDIS_URI", "", "REDIS_URI is required"},
	{"REDIS_STREAM", NULL, "REDIS_STREAM is required"},
	{"REDIS_STREAM", "", "REDIS_STREAM is required"},
	{"REDIS_GROUP", NULL, "REDIS_GROUP is required"},
	{"REDIS_GROUP", "", "REDIS_GROUP is required"},
	{"REDIS_URI", "http://h:1",
	 "REDIS_URI 'http://h:1' is invalid (unsupported scheme 'http')"},
	{"REDIS_URI", "localhost", "REDIS_URI 'localhost' is invalid (missing port)"},
	{"REDIS_URI", "redis://u:hunter2@h:99999",
	 "REDIS_URI 'redis://u:xxxxx@h:99999' is invalid"},
	{"REDIS_STREAM_RETENTION", "0", "REDIS_STREAM_RETENTION '0' is invalid (must be positive)"},
	{"REDIS_STREAM_RETENTION", "0s",
	 "REDIS_STREAM_RETENTION '0s' is invalid (must be positive)"},
	{"REDIS_STREAM_RETENTION", "-1h",
	 "REDIS_STREAM_RETENTION '-1h' is invalid (must be positive)"},
	{"REDIS_STREAM_RETENTION", "6",
	 "REDIS_STREAM_RETENTION '6' is invalid (not a Go duration)"},
	{"REDIS_STREAM_RETENTION", "1d",
	 "REDIS_STREAM_RETENTION '1d' is invalid (not a Go duration)"},
	{"REDIS_STREAM_RETENTION", "abc", "not a Go duration"},
	{"METRICS_ADDR", "9090", "METRICS_ADDR '9090' is invalid (not a listen address)"},
	{"METRICS_ADDR", "::1:9090", "METRICS_ADDR '::1:9090' is invalid"},
	{"METRICS_ADDR", ":99999", "METRICS_ADDR ':99999' is invalid"},
	{"METRICS_ADDR", "host:", "METRICS_ADDR 'host:' is invalid"},
	{"GIT_WEBHOOK_ADDR", "nope", "GIT_WEBHOOK_ADDR 'nope' is invalid"},
	{"LOG_LEVEL", "WARNING",
	 "LOG_LEVEL 'WARNING' is invalid (unknown log level); accepted: DEBUG, INFO, WARN or "
	 "ERROR"},
	{"LOG_LEVEL", "trace", "LOG_LEVEL 'trace' is invalid"},
	{"MAX_CONCURRENCY", "0",
	 "MAX_CONCURRENCY '0' is invalid (must be positive); accepted: a positive integer"},
	{"MAX_CONCURRENCY", "-1", "MAX_CONCURRENCY '-1' is invalid (must be positive)"},
	{"MAX_CONCURRENCY", "1.5", "MAX_CONCURRENCY '1.5' is invalid (not an integer)"},
	{"MAX_CONCURRENCY", "abc", "MAX_CONCURRENCY 'abc' is invalid (not an integer)"},
	{"MAX_CONCURRENCY", "", "MAX_CONCURRENCY '' is invalid (empty)"},
	{"MAX_CONCURRENCY", "99999999999999999999",
	 "MAX_CONCURRENCY '99999999999999999999' is invalid (not an integer)"},
	{"MAX_CONCURRENCY", " 4", "MAX_CONCURRENCY ' 4' is invalid (not an integer)"},
	{"MAX_BUFFERED_EVENTS", "0", "MAX_BUFFERED_EVENTS '0' is invalid (must be positive)"},
	{"MAX_BUFFERED_EVENTS", "-5", "MAX_BUFFERED_EVENTS '-5' is invalid (must be positive)"},
	{"MAX_BUFFERED_EVENTS", "2.0", "MAX_BUFFERED_EVENTS '2.0' is invalid (not an integer)"},
	{"MAX_BUFFERED_EVENTS", "+3", "MAX_BUFFERED_EVENTS '+3' is invalid (not an integer)"},
};

/* STANDBY_MAX's default is MAX_CONCURRENCY's value, capped at 1000 like a
 * set value; an explicit value, 0 included, is kept as it is (STANDBY_MAX
 * may exceed MAX_CONCURRENCY). */
TEST(standby_max_follows_max_concurrency)
{
	static const struct {
		const char *max_concurrency, *standby_max; /* NULL: unset */
		int64_t want;
	} rows[] = {
		{"3", NULL, 3},	      {"1", NULL, 1},	      {"1000000", NULL, 1000},
		{"3", "0", 0},	      {NULL, "0", 0},	      {"3", "20", 20},
		{NULL, "1000", 1000}, {"2000", "1000", 1000}, {"5", "007", 7},
	};
	for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
		base_env();
		if (rows[i].max_concurrency)
			setenv("MAX_CONCURRENCY", rows[i].max_concurrency, 1);
		if (rows[i].standby_max)
			setenv("STANDBY_MAX", rows[i].standby_max, 1);
		struct config c;
		char **errs = NULL;
		int n = 0;
		if (config_load(&c, CONFIG_NEED_ALL, &errs, &n) < 0) {
			T_FAIL_("row %zu refused: %s", i, n ? errs[0] : "");
			config_errors_free(errs, n);
			continue;
		}
		if (c.standby_max != rows[i].want)
			T_FAIL_("MAX_CONCURRENCY=%s STANDBY_MAX=%s: standby_max %lld, want %lld",
				rows[i].max_concurrency ? rows[i].max_concurrency : "(unset)",
				rows[i].standby_max ? rows[i].standby_max : "(unset)",
				(long long)c.standby_max, (long long)rows[i].want);
		config_free(&c);
	}
}

/* The standby variables' messages, whole. */
static const struct {
	const char *var;
	const char *value;
	const char *want;
} standby_bad[] = {
#define SBM_MAX_ACCEPTED                                                               \
	"accepted: an integer from 0 to 1000 (0 disables standby containers; default " \
	"MAX_CONCURRENCY, at most 1000)"
	{"STANDBY_MAX", "-1",
	 "STANDBY_MAX '-1' is invalid (must not be negative); " SBM_MAX_ACCEPTED},
	{"STANDBY_MAX", "x", "STANDBY_MAX 'x' is invalid (not an integer); " SBM_MAX_ACCEPTED},
	{"STANDBY_MAX", "", "STANDBY_MAX '' is invalid (empty); " SBM_MAX_ACCEPTED},
	{"STANDBY_MAX", "1.5", "STANDBY_MAX '1.5' is invalid (not an integer); " SBM_MAX_ACCEPTED},
	{"STANDBY_MAX", "+2", "STANDBY_MAX '+2' is invalid (not an integer); " SBM_MAX_ACCEPTED},
	{"STANDBY_MAX", " 2", "STANDBY_MAX ' 2' is invalid (not an integer); " SBM_MAX_ACCEPTED},
	{"STANDBY_MAX", "1001",
	 "STANDBY_MAX '1001' is invalid (must be at most 1000); " SBM_MAX_ACCEPTED},
	{"STANDBY_MAX", "99999999999999999999",
	 "STANDBY_MAX '99999999999999999999' is invalid (not an integer); " SBM_MAX_ACCEPTED},
#undef SBM_MAX_ACCEPTED
#define SBM_IDLE_ACCEPTED "accepted: a positive Go duration such as 30s, 10m or 1h (default 10m)"
	{"STANDBY_IDLE", "0s",
	 "STANDBY_IDLE '0s' is invalid (must be positive); " SBM_IDLE_ACCEPTED},
	{"STANDBY_IDLE", "0", "STANDBY_IDLE '0' is invalid (must be positive); " SBM_IDLE_ACCEPTED},
	{"STANDBY_IDLE", "-1m",
	 "STANDBY_IDLE '-1m' is invalid (must be positive); " SBM_IDLE_ACCEPTED},
	{"STANDBY_IDLE", "abc",
	 "STANDBY_IDLE 'abc' is invalid (not a Go duration); " SBM_IDLE_ACCEPTED},
	{"STANDBY_IDLE", "10",
	 "STANDBY_IDLE '10' is invalid (not a Go duration); " SBM_IDLE_ACCEPTED},
	{"STANDBY_IDLE", "", "STANDBY_IDLE '' is invalid (empty); " SBM_IDLE_ACCEPTED},
#undef SBM_IDLE_ACCEPTED
};

TEST(standby_bad_values)
{
	for (size_t i = 0; i < ARRAY_LEN(standby_bad); i++) {
		base_env();
		setenv(standby_bad[i].var, standby_bad[i].value, 1);
		struct config c;
		char **errs = NULL;
		int n = 0;
		if (config_load(&c, CONFIG_NEED_ALL, &errs, &n) == 0) {
			T_FAIL_("%s='%s' accepted", standby_bad[i].var, standby_bad[i].value);
			config_free(&c);
			continue;
		}
		CHECK_INT(n, 1);
		if (n >= 1)
			CHECK_STR(errs[0], standby_bad[i].want);
		config_errors_free(errs, n);
	}
}

/* RELAY_OCI_RUNTIME: 1..64 bytes of [A-Za-z0-9._-]; empty is unset. */
#define RT_ACCEPTED                                                                         \
	"accepted: a runtime name the Docker daemon knows, such as runc, crun or runsc (at " \
	"most 64 bytes of A-Z a-z 0-9 . _ -) (unset or empty: the daemon's default runtime)"
static const struct {
	const char *value;
	const char *want; /* NULL: accepted, and kept as it is */
} runtime_rows[] = {
	{"crun", NULL},
	{"io.containerd.runc.v2", NULL},
	{"my_runtime-2", NULL},
	{"a234567890123456789012345678901234567890123456789012345678901234", NULL}, /* 64 */
	{"a2345678901234567890123456789012345678901234567890123456789012345",
	 "RELAY_OCI_RUNTIME 'a2345678901234567890123456789012345678901234567890123456789012345' "
	 "is invalid (longer than 64 bytes); " RT_ACCEPTED},
	{"run c", "RELAY_OCI_RUNTIME 'run c' is invalid (a byte outside A-Z a-z 0-9 . _ -); " RT_ACCEPTED},
	{"../runc", "RELAY_OCI_RUNTIME '../runc' is invalid (a byte outside A-Z a-z 0-9 . _ -); " RT_ACCEPTED},
	{"runc\n", "RELAY_OCI_RUNTIME 'runc?' is invalid (a byte outside A-Z a-z 0-9 . _ -); " RT_ACCEPTED},
	{"r\"x", "RELAY_OCI_RUNTIME 'r\"x' is invalid (a byte outside A-Z a-z 0-9 . _ -); " RT_ACCEPTED},
};
#undef RT_ACCEPTED

TEST(oci_runtime_values)
{
	for (size_t i = 0; i < ARRAY_LEN(runtime_rows); i++) {
		base_env();
		setenv("RELAY_OCI_RUNTIME", runtime_rows[i].value, 1);
		struct config c;
		char **errs = NULL;
		int n = 0;
		int rc = config_load(&c, CONFIG_NEED_ALL, &errs, &n);
		if (!runtime_rows[i].want) {
			CHECK_INT(rc, 0);
			if (rc == 0) {
				CHECK_STR(c.oci_runtime, runtime_rows[i].value);
				config_free(&c);
			}
			config_errors_free(errs, n);
			continue;
		}
		CHECK_INT(rc, -1);
		CHECK_INT(n, 1);
		if (n >= 1)
			CHECK_STR(errs[0], runtime_rows[i].want);
		config_errors_free(errs, n);
	}
	base_env();
	setenv("RELAY_OCI_RUNTIME", "", 1);
	struct config c;
	char **errs;
	int n;
	REQUIRE(config_load(&c, CONFIG_NEED_ALL, &errs, &n) == 0);
	CHECK(c.oci_runtime == NULL);
	config_free(&c);
	CHECK_INT(config_valid_runtime_name(""), -1);
	CHECK_INT(config_valid_runtime_name("runsc"), 0);
}

TEST(bad_values)
{
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		base_env();
		if (bad[i].value)
			setenv(bad[i].var, bad[i].value, 1);
		else
			unsetenv(bad[i].var);
		struct config c;
		char **errs = NULL;
		int n = 0;
		if (config_load(&c, CONFIG_NEED_ALL, &errs, &n) == 0) {
			T_FAIL_("%s=%s accepted", bad[i].var,
				bad[i].value ? bad[i].value : "(unset)");
			config_free(&c);
			continue;
		}
		if (n != 1 || !strstr(errs[0], bad[i].want))
			T_FAIL_("%s=%s: got %d error(s), first: %s\n    want: %s", bad[i].var,
				bad[i].value ? bad[i].value : "(unset)", n, n ? errs[0] : "",
				bad[i].want);
		config_errors_free(errs, n);
	}
}

TEST(password_never_shown)
{
	base_env();
	setenv("REDIS_URI", "rediss://admin:s3cr3t-pw@h:1/x", 1);
	struct config c;
	char **errs = NULL;
	int n = 0;
	REQUIRE(config_load(&c, CONFIG_NEED_ALL, &errs, &n) < 0);
	REQUIRE(n == 1);
	CHECK(strstr(errs[0], "s3cr3t") == NULL);
	CHECK(strstr(errs[0], "REDIS_URI") != NULL);
	config_errors_free(errs, n);
}

TEST(every_error_reported)
{
	base_env();
	unsetenv("REDIS_STREAM");
	setenv("MAX_CONCURRENCY", "0", 1);
	setenv("LOG_LEVEL", "WARNING", 1);
	struct config c;
	char **errs = NULL;
	int n = 0;
	REQUIRE(config_load(&c, CONFIG_NEED_ALL, &errs, &n) < 0);
	CHECK_INT(n, 3);
	config_errors_free(errs, n);
}

TEST(health_needs_only_uri)
{
	base_env();
	unsetenv("REDIS_STREAM");
	unsetenv("REDIS_GROUP");
	struct config c;
	char **errs = NULL;
	int n = 0;
	REQUIRE(config_load(&c, CONFIG_NEED_REDIS_URI, &errs, &n) == 0);
	config_free(&c);
	unsetenv("REDIS_URI");
	CHECK(config_load(&c, CONFIG_NEED_REDIS_URI, &errs, &n) < 0);
	config_errors_free(errs, n);
}

TEST(listen_addresses)
{
	static const char *const ok[] = {
		":9090",     "127.0.0.1:9090", "[::1]:9090",	    "localhost:9090",
		"0.0.0.0:0", "[::]:65535",     "my-host.example:80"};
	static const char *const no[] = {
		"9090", "::1:9090", "[::1]9090", "[::1]:", "[zz]:1", ":65536",
		":-1",	"h:80a",    "a b:80",	 ":",	   "[]:80",  "h:+80"};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
		if (config_valid_listen_addr(ok[i]) != 0)
			T_FAIL_("rejected %s", ok[i]);
	for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
		if (config_valid_listen_addr(no[i]) == 0)
			T_FAIL_("accepted %s", no[i]);
}

static const struct {
	const char *in;
	const char *host, *port, *user, *pass;
	int tls, db;
} uris[] = {
	{"redis:6379", "redis", "6379", NULL, NULL, 0, 0},
	{"127.0.0.1:6380", "127.0.0.1", "6380", NULL, NULL, 0, 0},
	{"[::1]:6379", "::1", "6379", NULL, NULL, 0, 0},
	{"redis://h", "h", "6379", NULL, NULL, 0, 0},
	{"redis://h:1234", "h", "1234", NULL, NULL, 0, 0},
	{"redis://user:pass@h:1", "h", "1", "user", "pass", 0, 0},
	{"redis://:pass@h:1", "h", "1", NULL, "pass", 0, 0},
	{"redis://user@h:1", "h", "1", "user", NULL, 0, 0},
	{"redis://u:p%40ss%3A@h:1/3", "h", "1", "u", "p@ss:", 0, 3},
	{"redis://u:p@ss@h:1", "h", "1", "u", "p@ss", 0, 0},
	{"rediss://u:p@[::1]:6390/0", "::1", "6390", "u", "p", 1, 0},
	{"rediss://h", "h", "6379", NULL, NULL, 1, 0},
	{"redis://h:1/", "h", "1", NULL, NULL, 0, 0},
};

TEST(uri_parse)
{
	for (size_t i = 0; i < sizeof uris / sizeof uris[0]; i++) {
		struct redis_uri u;
		char *why = NULL;
		if (redis_uri_parse(uris[i].in, &u, &why) < 0) {
			T_FAIL_("%s rejected: %s", uris[i].in, why);
			free(why);
			continue;
		}
		CHECK_STR(u.host, uris[i].host);
		CHECK_STR(u.port, uris[i].port);
		if (uris[i].user)
			CHECK_STR(u.user, uris[i].user);
		else
			CHECK(u.user == NULL);
		if (uris[i].pass)
			CHECK_STR(u.password, uris[i].pass);
		else
			CHECK(u.password == NULL);
		CHECK_INT(u.tls, uris[i].tls);
		CHECK_INT(u.db, uris[i].db);
		redis_uri_free(&u);
	}
}

TEST(uri_reject)
{
	static const char *const no[] = {
		"",
		"host",
		"host:",
		"host:0",
		"host:65536",
		"host:abc",
		"::1:6379",
		"unix:///tmp/s",
		"http://h:1",
		"redis://",
		"redis://:p@",
		"redis://h:1/db",
		"redis://h:1/-1",
		"redis://h:1?db=1",
		"redis://u:%zz@h:1",
		"redis://h h:1",
		"[::1]",
		"[nothex]:1",
	};
	for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
		struct redis_uri u;
		char *why = NULL;
		if (redis_uri_parse(no[i], &u, &why) == 0) {
			T_FAIL_("accepted %s", no[i]);
			redis_uri_free(&u);
		} else {
			CHECK(why != NULL && why[0] != '\0');
			free(why);
		}
	}
}

TEST(uri_redact)
{
	static const struct {
		const char *in, *out;
	} rows[] = {
		{"redis://u:secret@h:1", "redis://u:xxxxx@h:1"},
		{"rediss://:secret@h:1/2", "rediss://:xxxxx@h:1/2"},
		{"redis://u:se@cret@h:1", "redis://u:xxxxx@h:1"},
		{"redis://u@h:1", "redis://u@h:1"},
		{"h:1", "h:1"},
		/* Invalid URIs are redacted too: their errors show them. */
		{"redis://u:s3cr?et@h", "redis://u:xxxxx@h"},
		{"redis://u:s3cr#et@h:1", "redis://u:xxxxx@h:1"},
		{"redis://u:s3cr/et@h:1", "redis://u:xxxxx@h:1"},
		{"redis://u:pw@h:1/0?x=@y", "redis://u:xxxxx@y"},
		{"u:s3cret@h:1", "u:xxxxx@h:1"},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		char *r = redis_uri_redact(rows[i].in);
		CHECK_STR(r, rows[i].out);
		free(r);
	}
}

/* TLS to the sentinels: as the scheme says (rediss-sentinel:// speaks TLS
 * to them too), unless REDIS_SENTINEL_TLS says otherwise. */
TEST(sentinel_tls)
{
	static const struct {
		const char *uri, *setting;
		int want;
	} rows[] = {
		{"rediss-sentinel://s1/m", NULL, 1},  {"rediss-sentinel://s1/m", "no", 0},
		{"rediss-sentinel://s1/m", "yes", 1}, {"redis-sentinel://s1/m", NULL, 0},
		{"redis-sentinel://s1/m", "yes", 1},  {"rediss://h:1", "no", 0},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		base_env();
		setenv("REDIS_URI", rows[i].uri, 1);
		if (rows[i].setting)
			setenv("REDIS_SENTINEL_TLS", rows[i].setting, 1);
		struct config c;
		char **errs;
		int n;
		REQUIRE(config_load(&c, CONFIG_NEED_ALL, &errs, &n) == 0);
		struct redis_uri u;
		char *why = NULL;
		REQUIRE(config_redis_uri(&c, &u, &why) == 0);
		if (u.sentinel_tls != (rows[i].want == 1))
			T_FAIL_("%s with REDIS_SENTINEL_TLS=%s: sentinel_tls %d, want %d",
				rows[i].uri, rows[i].setting ? rows[i].setting : "(unset)",
				u.sentinel_tls, rows[i].want);
		redis_uri_free(&u);
		config_free(&c);
	}
	static const char *const bad_tls[] = {"maybe", "YES", "1", "true", ""};
	for (size_t i = 0; i < sizeof bad_tls / sizeof bad_tls[0]; i++) {
		base_env();
		setenv("REDIS_URI", "rediss-sentinel://s1/m", 1);
		setenv("REDIS_SENTINEL_TLS", bad_tls[i], 1);
		struct config c;
		char **errs = NULL;
		int n = 0;
		if (config_load(&c, CONFIG_NEED_ALL, &errs, &n) == 0) {
			/* Empty is unset, as for every optional setting. */
			if (bad_tls[i][0])
				T_FAIL_("REDIS_SENTINEL_TLS=%s accepted", bad_tls[i]);
			config_free(&c);
			continue;
		}
		char *want = xasprintf("REDIS_SENTINEL_TLS '%s' is invalid (neither yes nor no); "
				       "accepted: yes or no (whether Relay speaks TLS to the "
				       "sentinels; unset: yes for rediss-sentinel://, no for "
				       "redis-sentinel://)",
				       bad_tls[i]);
		CHECK_INT(n, 1);
		if (n)
			CHECK_STR(errs[0], want);
		free(want);
		config_errors_free(errs, n);
	}
}

T_MAIN(T_CASE(defaults), T_CASE(all_set), T_CASE(empty_optional_values_disable),
       T_CASE(standby_max_follows_max_concurrency), T_CASE(standby_bad_values), T_CASE(oci_runtime_values), T_CASE(bad_values),
       T_CASE(password_never_shown), T_CASE(every_error_reported), T_CASE(health_needs_only_uri),
       T_CASE(listen_addresses), T_CASE(uri_parse), T_CASE(uri_reject), T_CASE(uri_redact),
       T_CASE(sentinel_tls))
