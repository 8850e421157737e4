#include <stdlib.h>
#include <string.h>

#include "engine/liveness.h"
#include "engine/runner.h"
#include "t.h"

#define INST "0123456789abcdef0123456789abcdef"

TEST(key_names_stream_group_and_consumer)
{
	static const struct {
		const char *stream, *group, *consumer, *want;
	} cases[] = {
		{"events", "relay", "worker-a", "relay:consumer:events:relay:worker-a"},
		/* each part percent-encoded as in relay:invocation:* keys, so a
		 * ':' in one part cannot make two triples collide */
		{"a:b", "c", "d", "relay:consumer:a%3Ab:c:d"},
		{"a", "b:c", "d", "relay:consumer:a:b%3Ac:d"},
		{"ev s", "g/1", "h*", "relay:consumer:ev%20s:g%2F1:h%2A"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char *k = liveness_key(cases[i].stream, cases[i].group, cases[i].consumer);
		CHECK_STR(k, cases[i].want);
		free(k);
	}
}

TEST(encode_then_parse_round_trips)
{
	struct liveness_record rec = {.instance = INST, .pid = 4242}, got = {.pid = -7};
	strcpy(rec.started, "2026-12-02T00:51:24Z");
	strcpy(rec.machine, "5d1f0c0e2b7a4e9c8f3d2a1b0c9e8f7a");
	char v[LIVENESS_VALUE_MAX];
	CHECK(liveness_record_encode(&rec, v, sizeof v) == 0);
	CHECK_STR(v, "instance=" INST " pid=4242 started=2026-12-02T00:51:24Z "
		     "machine=5d1f0c0e2b7a4e9c8f3d2a1b0c9e8f7a");
	CHECK(liveness_record_parse(v, &got) == 0);
	CHECK_STR(got.instance, INST);
	CHECK_INT(got.pid, 4242);
	CHECK_STR(got.started, rec.started);
	CHECK_STR(got.machine, rec.machine);
}

TEST(encode_refuses_bad_fields)
{
	char v[LIVENESS_VALUE_MAX];
	struct liveness_record ok = {.instance = INST, .pid = 1, .started = "t", .machine = "-"};
	CHECK(liveness_record_encode(&ok, v, sizeof v) == 0);
	struct liveness_record r = ok;
	strcpy(r.instance, "0123456789ABCDEF0123456789abcdef"); /* upper case */
	CHECK(liveness_record_encode(&r, v, sizeof v) < 0);
	r = ok;
	r.instance[31] = '\0'; /* 31 digits */
	CHECK(liveness_record_encode(&r, v, sizeof v) < 0);
	r = ok;
	strcpy(r.started, "two words");
	CHECK(liveness_record_encode(&r, v, sizeof v) < 0);
	r = ok;
	r.machine[0] = '\0';
	CHECK(liveness_record_encode(&r, v, sizeof v) < 0);
	r = ok;
	r.pid = -1;
	CHECK(liveness_record_encode(&r, v, sizeof v) < 0);
	CHECK(liveness_record_encode(&ok, v, 100) < 0); /* too small a buffer */
}

TEST(parse_table)
{
	static const struct {
		const char *in;
		int ok;
		long long pid;
	} cases[] = {
		{"instance=" INST " pid=1 started=2026-01-01T00:00:00Z machine=-", 1, 1},
		{"instance=" INST " pid=99999 started=x machine=m extra=later", 1, 99999},
		{"instance=" INST " pid=0 started=x machine=m", 1, 0},
		/* errors */
		{"", 0, 0},
		{"garbage", 0, 0},
		{"instance=" INST " pid=1 started=x", 0, 0},		  /* no machine */
		{"pid=1 instance=" INST " started=x machine=m", 0, 0},	  /* order */
		{"instance=" INST "0 pid=1 started=x machine=m", 0, 0},	  /* 33 digits */
		{"instance=0123 pid=1 started=x machine=m", 0, 0},	  /* short */
		{"instance=" INST " pid=-1 started=x machine=m", 0, 0},	  /* negative */
		{"instance=" INST " pid=+1 started=x machine=m", 0, 0},	  /* sign */
		{"instance=" INST " pid=1x started=x machine=m", 0, 0},	  /* not a number */
		{"instance=" INST " pid= started=x machine=m", 0, 0},	  /* empty */
		{"instance=" INST " pid=1  started=x machine=m", 0, 0},	  /* two spaces */
		{"instance=" INST " pid=1 started=x machine=\x01", 0, 0}, /* control */
		{"instance=" INST " pid=99999999999999999999 started=x machine=m", 0, 0},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct liveness_record got;
		int rc = liveness_record_parse(cases[i].in, &got);
		if (cases[i].ok && (rc != 0 || got.pid != cases[i].pid))
			T_FAIL_("parse(\"%s\") = rc %d, pid %lld; want pid %lld\n", cases[i].in, rc,
				got.pid, cases[i].pid);
		else if (!cases[i].ok && (rc == 0 || got.instance[0]))
			T_FAIL_("parse(\"%s\") accepted, want error\n", cases[i].in);
	}
}

TEST(parse_refuses_an_overlong_value)
{
	char v[LIVENESS_VALUE_MAX + 10];
	snprintf(v, sizeof v, "instance=%s pid=1 started=x machine=m extra=", INST);
	size_t n = strlen(v);
	memset(v + n, 'y', sizeof v - n - 1);
	v[sizeof v - 1] = '\0';
	struct liveness_record got;
	CHECK(liveness_record_parse(v, &got) < 0);
}

TEST(instance_id_is_32_hex_digits_and_stable)
{
	const char *a = runner_instance_id(), *b = runner_instance_id();
	CHECK(a == b);
	CHECK_INT(strlen(a), RUNNER_INSTANCE_LEN);
	CHECK(strspn(a, "0123456789abcdef") == RUNNER_INSTANCE_LEN);
	CHECK(strcmp(a, "00000000000000000000000000000000") != 0);
}

T_MAIN(T_CASE(key_names_stream_group_and_consumer), T_CASE(encode_then_parse_round_trips),
       T_CASE(encode_refuses_bad_fields), T_CASE(parse_table),
       T_CASE(parse_refuses_an_overlong_value), T_CASE(instance_id_is_32_hex_digits_and_stable))
