/*
 * Fuzzes the parsers that read configuration and other outside text: Go
 * durations, REDIS_URI (and its redaction), listen addresses, log levels,
 * and the slog value quoting. Each has an invariant a user relies on:
 *
 * - A duration that parses formats to text that parses back to the same
 *   value, and every int64 formats to text that parses back to itself.
 * - The password of a REDIS_URI never reaches a message: redaction, the
 *   parse error and config_load's messages are the same whatever the
 *   password is (checked by swapping in another password), the redacted
 *   text does not contain it, and the redacted URI still parses to the same
 *   host, port, user and database.
 * - A logged value reads back as itself: a quoted value unquotes (Go
 *   strconv.Unquote rules, implemented here) to the input, an unquoted one
 *   is the input verbatim and needed no quoting; no value spans lines.
 * - A log level that parses names itself.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model/config.h"
#include "base/duration.h"
#include "base/log.h"
#include "io/redis.h"
#include "base/util.h"

static void check_duration(const uint8_t *data, size_t size)
{
	int64_t d;
	if (duration_parse_n((const char *)data, size, &d) == 0) {
		char out[DURATION_STR_MAX], out2[DURATION_STR_MAX];
		duration_format(d, out);
		int64_t again;
		CHECK(duration_parse(out, &again) == 0 && again == d,
		      "duration %lld formats as \"%s\", which does not parse back to it",
		      (long long)d, out);
		duration_format(again, out2);
		CHECK(strcmp(out, out2) == 0, "duration format not canonical: \"%s\" vs \"%s\"",
		      out, out2);
	}
	/* Any int64, taken from the first 8 bytes. */
	if (size >= 8) {
		memcpy(&d, data, 8);
		char out[DURATION_STR_MAX];
		duration_format(d, out);
		int64_t again;
		CHECK(duration_parse(out, &again) == 0 && again == d,
		      "duration %lld formats as \"%s\", which does not parse back to it",
		      (long long)d, out);
	}
}

/* ---- REDIS_URI ---------------------------------------------------------- */

#define OTHER_PASSWORD "Zq9Zq9"

/* Where a password may be written in s, as its author meant it, valid URI
 * or not: the userinfo ends at the last '@' (a password may hold '/', '?',
 * '#' or '@' unescaped, which makes the URI invalid but is still secret, and
 * a value without a scheme may carry one too); the password starts after
 * the userinfo's first ':'. For a valid URI this is exactly what
 * redis_uri_parse reads. */
static int password_span(const char *s, size_t *off, size_t *len)
{
	const char *sep = strstr(s, "://");
	const char *p = sep ? sep + 3 : s;
	const char *at = strrchr(p, '@');
	if (!at)
		return -1;
	const char *colon = memchr(p, ':', (size_t)(at - p));
	if (!colon)
		return -1;
	*off = (size_t)(colon + 1 - s);
	*len = (size_t)(at - colon - 1);
	return 0;
}

/* Fixed text of the messages about a REDIS_URI (redis_uri.c, config.c): a
 * "password" found in it is there by coincidence. */
static const char *const FIXED_TEXT[] = {
	"an IPv6 host must be written in brackets, e.g. [::1]:6379",
	"a host list needs the redis:// form, e.g. redis://h1:7000,h2:7001",
	"the path must be a database number, e.g. /0",
	"'@' after the host list: a password holding '/' must be percent-encoded as %2F",
	"missing master name: the form is redis-sentinel://host:26379,.../<master-name>[/db]",
	"invalid configuration: REDIS_URI is invalid; accepted: host:port, "
	"redis://[user[:password]@]host:port[,host:port...][/db], rediss://... (TLS) or "
	"redis-sentinel://[user[:password]@]host:port[,host:port...]/master-name[/db]",
};

/* Could secret appear in out only by coincidence with the rest of the URI,
 * the "xxxxx" mask or the messages' fixed text? rest is the URI with the
 * password swapped out. */
static int distinctive(const char *secret, const char *rest)
{
	for (size_t i = 0; i < sizeof FIXED_TEXT / sizeof FIXED_TEXT[0]; i++)
		if (strstr(FIXED_TEXT[i], secret))
			return 0;
	/* Messages show a control character as '?' and the URI in single
	 * quotes: compare with the rest as a message shows it too. */
	char *shown = xasprintf("'%s'", rest);
	for (char *c = shown; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			*c = '?';
	int d = secret[0] && !strchr(secret, 'x') && !strstr(rest, secret) &&
		!strstr(shown, secret) && !strstr(OTHER_PASSWORD, secret);
	free(shown);
	return d;
}

static void config_messages(const char *uri, struct buf *out)
{
	struct config c;
	char **errs = NULL;
	int nerrs = 0;
	/* putenv with a string the harness owns: glibc keeps every value ever
	 * given to setenv, which at 128 KiB inputs exhausts the RSS limit of a
	 * long run (bench/fuzz-long) though Relay only reads the environment. */
	char *entry = xasprintf("REDIS_URI=%s", uri);
	putenv(entry);
	if (config_load(&c, CONFIG_NEED_REDIS_URI, &errs, &nerrs) == 0)
		config_free(&c);
	for (int i = 0; i < nerrs; i++) {
		buf_append(out, errs[i], strlen(errs[i]));
		buf_append(out, "\n", 1);
	}
	config_errors_free(errs, nerrs);
	unsetenv("REDIS_URI");
	free(entry);
}

static int same_uri_but_password(const struct redis_uri *a, const struct redis_uri *b)
{
	return strcmp(a->host, b->host) == 0 && strcmp(a->port, b->port) == 0 &&
	       (a->user == NULL) == (b->user == NULL) &&
	       (!a->user || strcmp(a->user, b->user) == 0) && a->tls == b->tls && a->db == b->db;
}

static void check_redis_uri(const char *s)
{
	char *red = redis_uri_redact(s);
	struct redis_uri u;
	char *why = NULL;
	int rc = redis_uri_parse(s, &u, &why);
	size_t off, len;
	if (password_span(s, &off, &len) < 0) {
		CHECK(strcmp(red, s) == 0, "redaction changed a URI without a password: %s -> %s",
		      s, red);
		CHECK(rc != 0 || !u.password, "parse found a password in %s, redaction did not", s);
		if (rc == 0)
			redis_uri_free(&u);
		free(why);
		free(red);
		return;
	}
	char *pw = xstrndup(s + off, len);
	char *s2 = xasprintf("%.*s%s%s", (int)off, s, OTHER_PASSWORD, s + off + len);
	char *red2 = redis_uri_redact(s2);
	CHECK(strcmp(red, red2) == 0, "redaction depends on the password: %s -> %s but %s -> %s", s,
	      red, s2, red2);
	CHECK(!distinctive(pw, s2) || !strstr(red, pw), "redacted URI %s contains the password %s",
	      red, pw);

	struct redis_uri u2;
	char *why2 = NULL;
	int rc2 = redis_uri_parse(s2, &u2, &why2);
	if (rc == 0) {
		CHECK(u.password != NULL, "parse of %s lost the password", s);
		CHECK(rc2 == 0 && same_uri_but_password(&u, &u2) &&
			      strcmp(u2.password, OTHER_PASSWORD) == 0,
		      "swapping the password of %s changed how it parses", s);
		CHECK(!distinctive(u.password, s2) || !strstr(red, u.password),
		      "redacted URI %s contains the decoded password", red);
		struct redis_uri ur;
		char *whyr = NULL;
		CHECK(redis_uri_parse(red, &ur, &whyr) == 0,
		      "the redacted form %s of valid %s does not parse: %s", red, s, whyr);
		CHECK(same_uri_but_password(&u, &ur) && strcmp(ur.password, "xxxxx") == 0,
		      "the redacted form %s of %s names another server", red, s);
		redis_uri_free(&ur);
		redis_uri_free(&u);
		redis_uri_free(&u2);
	} else {
		/* The one message that may differ: the password's own encoding. */
		static const char bad_pct[] = "bad percent-encoding in password";
		CHECK(why != NULL, "parse of %s failed without a reason", s);
		/* A password holding '/', '?' or '#' is what made the URI invalid,
		 * and a value without a scheme is read as host:port: then only the
		 * messages' secrecy is checked, not their sameness. */
		bool structural = strpbrk(pw, "/?#") != NULL || !strstr(s, "://");
		CHECK(structural || strcmp(why, bad_pct) == 0 ||
			      (rc2 != 0 && strcmp(why, why2) == 0),
		      "parse error depends on the password: \"%s\" vs \"%s\"", why,
		      why2 ? why2 : "(parsed)");
		CHECK(!distinctive(pw, s2) || !strstr(why, pw) || (why2 && strstr(why2, pw)),
		      "parse error \"%s\" contains the password %s", why, pw);
		if (rc2 == 0)
			redis_uri_free(&u2);
		struct buf m1, m2;
		buf_init(&m1, 1 << 20);
		buf_init(&m2, 1 << 20);
		config_messages(s, &m1);
		config_messages(s2, &m2);
		CHECK(structural || strcmp(why, bad_pct) == 0 ||
			      (m1.len == m2.len &&
			       (m1.len == 0 || memcmp(m1.data, m2.data, m1.len) == 0)),
		      "config_load's messages depend on the password:\n%.*s\nvs\n%.*s", (int)m1.len,
		      m1.data, (int)m2.len, m2.data);
		buf_append(&m1, "", 1);
		buf_append(&m2, "", 1);
		CHECK(!distinctive(pw, s2) || !strstr(m1.data, pw) || strstr(m2.data, pw),
		      "config_load's messages contain the password %s:\n%s", pw, m1.data);
		buf_free(&m1);
		buf_free(&m2);
	}
	free(why);
	free(why2);
	free(red2);
	free(s2);
	free(pw);
	free(red);
}

/* ---- log value quoting -------------------------------------------------- */

static void put_utf8(struct buf *b, uint32_t r)
{
	unsigned char u[4];
	size_t n;
	if (r < 0x80) {
		u[0] = (unsigned char)r, n = 1;
	} else if (r < 0x800) {
		u[0] = (unsigned char)(0xC0 | r >> 6), u[1] = (unsigned char)(0x80 | (r & 0x3F));
		n = 2;
	} else if (r < 0x10000) {
		u[0] = (unsigned char)(0xE0 | r >> 12);
		u[1] = (unsigned char)(0x80 | ((r >> 6) & 0x3F));
		u[2] = (unsigned char)(0x80 | (r & 0x3F));
		n = 3;
	} else {
		u[0] = (unsigned char)(0xF0 | r >> 18);
		u[1] = (unsigned char)(0x80 | ((r >> 12) & 0x3F));
		u[2] = (unsigned char)(0x80 | ((r >> 6) & 0x3F));
		u[3] = (unsigned char)(0x80 | (r & 0x3F));
		n = 4;
	}
	buf_append(b, u, n);
}

/* Go's strconv.Unquote for a double-quoted literal q[0..n). 0 or -1. */
static int go_unquote(const char *q, size_t n, struct buf *out)
{
	if (n < 2 || q[0] != '"' || q[n - 1] != '"')
		return -1;
	for (size_t i = 1; i < n - 1;) {
		unsigned char c = (unsigned char)q[i];
		if (c == '"' || c == '\n' || c < 0x20)
			return -1;
		if (c != '\\') {
			buf_append(out, &q[i], 1);
			i++;
			continue;
		}
		if (i + 1 >= n - 1)
			return -1;
		char e = q[i + 1];
		const char *simple = strchr("a\ab\bf\fn\nr\rt\tv\v\\\\\"\"", e);
		if (e && simple && (simple - "a\ab\bf\fn\nr\rt\tv\v\\\\\"\"") % 2 == 0) {
			buf_append(out, simple + 1, 1);
			i += 2;
			continue;
		}
		int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
		if (!digits || i + 2 + (size_t)digits > n - 1)
			return -1;
		uint32_t v = 0;
		for (int k = 0; k < digits; k++) {
			int h = hex_digit((unsigned char)q[i + 2 + (size_t)k]);
			if (h < 0)
				return -1;
			v = v << 4 | (uint32_t)h;
		}
		if (e == 'x') {
			unsigned char byte = (unsigned char)v;
			buf_append(out, &byte, 1);
		} else {
			if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
				return -1;
			put_utf8(out, v);
		}
		i += 2 + (size_t)digits;
	}
	return 0;
}

/* Is s[0..n) valid UTF-8 (no overlongs, surrogates or values past U+10FFFF)? */
static int valid_utf8(const unsigned char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		unsigned char c = s[i];
		size_t len;
		uint32_t r, min;
		if (c < 0x80) {
			i++;
			continue;
		} else if ((c & 0xE0) == 0xC0) {
			len = 2, r = c & 0x1F, min = 0x80;
		} else if ((c & 0xF0) == 0xE0) {
			len = 3, r = c & 0x0F, min = 0x800;
		} else if ((c & 0xF8) == 0xF0) {
			len = 4, r = c & 0x07, min = 0x10000;
		} else {
			return 0;
		}
		if (i + len > n)
			return 0;
		for (size_t k = 1; k < len; k++) {
			if ((s[i + k] & 0xC0) != 0x80)
				return 0;
			r = r << 6 | (s[i + k] & 0x3F);
		}
		if (r < min || r > 0x10FFFF || (r >= 0xD800 && r <= 0xDFFF))
			return 0;
		i += len;
	}
	return 1;
}

static void check_log_value(const char *s)
{
	size_t n = strlen(s);
	struct buf b;
	buf_init(&b, 1 << 20);
	log_append_value(&b, s);
	CHECK(!memchr(b.data, '\n', b.len) && !memchr(b.data, '\r', b.len),
	      "logged value spans lines: %.*s", (int)b.len, b.data);

	/* slog quotes an empty value, ' ', '=', '"', control bytes and anything
	 * that is not valid UTF-8; plain printable ASCII never. */
	int must_quote = n == 0 || !valid_utf8((const unsigned char *)s, n);
	int ascii = 1;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == ' ' || c == '=' || c == '"' || c < 0x20 || c == 0x7F)
			must_quote = 1;
		if (c >= 0x80)
			ascii = 0;
	}
	int quoted = b.len > 0 && b.data[0] == '"';
	if (must_quote)
		CHECK(quoted, "value needing quotes logged bare: %.*s", (int)b.len, b.data);
	if (ascii && !must_quote)
		CHECK(!quoted, "plain value %s logged quoted: %.*s", s, (int)b.len, b.data);
	if (quoted) {
		struct buf u;
		buf_init(&u, 1 << 20);
		CHECK(go_unquote(b.data, b.len, &u) == 0,
		      "logged value is not a Go string literal: %.*s", (int)b.len, b.data);
		CHECK(u.len == n && (n == 0 || memcmp(u.data, s, n) == 0),
		      "logged value %.*s does not unquote to the input (%zu bytes vs %zu)",
		      (int)b.len, b.data, u.len, n);
		buf_free(&u);
	} else {
		CHECK(b.len == n && (n == 0 || memcmp(b.data, s, n) == 0),
		      "bare logged value %.*s is not %s", (int)b.len, b.data, s);
	}
	buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = xstrndup((const char *)data, size);

	check_duration(data, size);
	check_redis_uri(s);
	check_log_value(s);

	enum log_level l, l2;
	if (log_parse_level(s, &l) == 0)
		CHECK(log_parse_level(log_level_name(l), &l2) == 0 && l2 == l,
		      "log level %s parses to %d, whose name %s does not parse back", s, (int)l,
		      log_level_name(l));
	(void)config_valid_listen_addr(s);

	free(s);
	return 0;
}
