/*
 * libFuzzer target: arbitrary bytes as a traceparent and as a tracestate
 * (io/traceparent.h), and as an OTEL_* key=value list (io/otlp.h).
 *
 * Invariants: a traceparent accepted has non-zero ids and formats to a
 * version-00 text of 55 bytes that parses back to the same context, and
 * the input it came from agrees with a reference check written here from
 * the W3C rules; a tracestate accepted is at most 512 printable ASCII bytes
 * in at most 32 members; a list parsed has at most OTLP_KV_MAX entries with
 * non-empty keys and values without line breaks; a span whose strings are
 * pieces of the input encodes to a JSON object (jansson parses it) whose
 * strings are those pieces, or their text_escape when a piece is not valid
 * UTF-8.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "check.h"
#include "io/otlp.h"
#include "io/traceparent.h"

static int lchex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

/* The W3C rules, spelled out. */
static int ref_valid(const char *s, size_t n)
{
	if (n < 55)
		return 0;
	for (size_t i = 0; i < 55; i++) {
		int dash = i == 2 || i == 35 || i == 52;
		if (dash ? s[i] != '-' : !lchex(s[i]))
			return 0;
	}
	if (s[0] == 'f' && s[1] == 'f')
		return 0;
	if (s[0] == '0' && s[1] == '0' && n != 55)
		return 0;
	if (n > 55 && s[55] != '-')
		return 0;
	int zt = 1, zs = 1;
	for (int i = 3; i < 35; i++)
		zt &= s[i] == '0';
	for (int i = 36; i < 52; i++)
		zs &= s[i] == '0';
	return !zt && !zs;
}

static void check_traceparent(const char *s, size_t n)
{
	struct traceparent tp, back;
	int rc = traceparent_parse(s, n, &tp);
	CHECK((rc == 0) == ref_valid(s, n), "parse %d disagrees with the reference for %.*s", rc,
	      (int)(n > 80 ? 80 : n), s);
	if (rc < 0)
		return;
	char out[TRACEPARENT_LEN + 1];
	traceparent_format(&tp, out);
	CHECK(strlen(out) == TRACEPARENT_LEN && out[0] == '0' && out[1] == '0', "format: %s", out);
	CHECK(traceparent_parse(out, strlen(out), &back) == 0 && memcmp(&tp, &back, sizeof tp) == 0,
	      "round trip of %s", out);
	CHECK(memcmp(s + 3, out + 3, 49) == 0, "ids changed: %s", out);
}

static void check_state(const char *s, size_t n)
{
	if (!traceparent_state_valid(s, n))
		return;
	CHECK(n > 0 && n <= TRACEPARENT_STATE_MAX, "tracestate of %zu bytes accepted", n);
	size_t members = 1;
	for (size_t i = 0; i < n; i++) {
		CHECK(s[i] >= 0x20 && s[i] <= 0x7e, "byte %d accepted", s[i]);
		members += s[i] == ',';
	}
	CHECK(members <= TRACEPARENT_STATE_MEMBERS, "%zu members accepted", members);
}

static void check_kv(const char *s)
{
	struct otlp_kv *kv;
	size_t n;
	char *why = NULL;
	if (otlp_kv_parse(s, &kv, &n, &why) < 0) {
		CHECK(why != NULL, "an error without a reason");
		free(why);
		return;
	}
	CHECK(n <= OTLP_KV_MAX, "%zu entries", n);
	for (size_t i = 0; i < n; i++) {
		CHECK(kv[i].key[0] != '\0', "an empty key");
		CHECK(!strpbrk(kv[i].value, "\r\n") && !strpbrk(kv[i].key, "\r\n: "),
		      "a line break in entry %zu", i);
	}
	otlp_kv_free(kv, n);
}

/* What the encoder must have written for piece p: p itself when it is
 * valid UTF-8, else its text_escape (malloc'd). */
static char *expected(const char *p)
{
	size_t n = strlen(p);
	uint32_t rune;
	for (size_t i = 0, k; i < n; i += k)
		if ((k = utf8_decode((const unsigned char *)p + i, n - i, &rune)) == 0)
			return text_escaped(p, n, 0, 0);
	return strdup(p);
}

static const char *str_at(json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

/* The input in four pieces (each cut at its first NUL) as a span's
 * strings. */
static void check_span(const uint8_t *data, size_t size)
{
	char *piece[4];
	size_t at = 0;
	for (int i = 0; i < 4; i++) {
		size_t len = i < 3 ? size / 4 : size - at;
		piece[i] = strndup((const char *)data + at, len);
		at += len;
	}
	int64_t num = 0;
	memcpy(&num, data, size < sizeof num ? size : sizeof num);
	struct otlp_span s = {.name = {piece[0], piece[1]},
			      .kind = OTLP_KIND_CONSUMER,
			      .trace_state = piece[1],
			      .status = OTLP_STATUS_ERROR,
			      .status_message = piece[3],
			      .start_ns = num,
			      .end_ns = num / 2};
	otlp_span_attr_str(&s, "a", piece[2]);
	otlp_span_attr_int(&s, "n", num);
	char *text = otlp_span_encode(&s);
	json_error_t err;
	json_t *o = json_loads(text, 0, &err);
	CHECK(json_is_object(o), "not JSON (%s): %s", err.text, text);
	char *e[4];
	for (int i = 0; i < 4; i++)
		e[i] = expected(piece[i]);
	char *name = malloc(strlen(e[0]) + strlen(e[1]) + 1);
	strcpy(stpcpy(name, e[0]), e[1]);
	CHECK(str_at(o, "name") && strcmp(str_at(o, "name"), name) == 0, "name of %s", text);
	CHECK(str_at(o, "traceState") && strcmp(str_at(o, "traceState"), e[1]) == 0,
	      "traceState of %s", text);
	json_t *attrs = json_object_get(o, "attributes");
	json_t *v0 = json_object_get(json_array_get(attrs, 0), "value");
	json_t *v1 = json_object_get(json_array_get(attrs, 1), "value");
	CHECK(str_at(v0, "stringValue") && strcmp(str_at(v0, "stringValue"), e[2]) == 0,
	      "attribute of %s", text);
	char want[24];
	snprintf(want, sizeof want, "%lld", (long long)num);
	CHECK(str_at(v1, "intValue") && strcmp(str_at(v1, "intValue"), want) == 0 &&
		      strcmp(str_at(o, "startTimeUnixNano"), want) == 0,
	      "number %s in %s", want, text);
	json_t *st = json_object_get(o, "status");
	CHECK(str_at(st, "message") && strcmp(str_at(st, "message"), e[3]) == 0,
	      "status of %s", text);
	json_decref(o);
	free(name);
	free(text);
	for (int i = 0; i < 4; i++) {
		free(e[i]);
		free(piece[i]);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	memcpy(s, data, size);
	s[size] = '\0';
	check_traceparent(s, size);
	check_state(s, size);
	check_kv(s);
	free(s);
	check_span(data, size);
	return 0;
}
