#include "base/duration.h"
#include "t.h"

static const struct {
	const char *in;
	int ok;
	int64_t want;
} parse_cases[] = {
	{"0", 1, 0},
	{"5s", 1, 5 * NS_PER_SEC},
	{"30s", 1, 30 * NS_PER_SEC},
	{"1478s", 1, 1478 * NS_PER_SEC},
	{"-5s", 1, -5 * NS_PER_SEC},
	{"+5s", 1, 5 * NS_PER_SEC},
	{"-0", 1, 0},
	{"+0", 1, 0},
	{"5.0s", 1, 5 * NS_PER_SEC},
	{"5.6s", 1, 5 * NS_PER_SEC + 600 * NS_PER_MS},
	{"5.s", 1, 5 * NS_PER_SEC},
	{".5s", 1, 500 * NS_PER_MS},
	{"1.0s", 1, NS_PER_SEC},
	{"1.00s", 1, NS_PER_SEC},
	{"1.004s", 1, NS_PER_SEC + 4 * NS_PER_MS},
	{"1.0040s", 1, NS_PER_SEC + 4 * NS_PER_MS},
	{"100.00100s", 1, 100 * NS_PER_SEC + 1 * NS_PER_MS},
	{"10ns", 1, 10},
	{"11us", 1, 11 * NS_PER_US},
	{"12\xc2\xb5s", 1, 12 * NS_PER_US},
	{"12\xce\xbcs", 1, 12 * NS_PER_US},
	{"13ms", 1, 13 * NS_PER_MS},
	{"14s", 1, 14 * NS_PER_SEC},
	{"15m", 1, 15 * NS_PER_MIN},
	{"16h", 1, 16 * NS_PER_HOUR},
	{"3h30m", 1, 3 * NS_PER_HOUR + 30 * NS_PER_MIN},
	{"10.5s4m", 1, 4 * NS_PER_MIN + 10 * NS_PER_SEC + 500 * NS_PER_MS},
	{"-2m3.4s", 1, -(2 * NS_PER_MIN + 3 * NS_PER_SEC + 400 * NS_PER_MS)},
	{"1h2m3s4ms5us6ns", 1,
	 NS_PER_HOUR + 2 * NS_PER_MIN + 3 * NS_PER_SEC + 4 * NS_PER_MS + 5 * NS_PER_US + 6},
	{"39h9m14.425s", 1, 39 * NS_PER_HOUR + 9 * NS_PER_MIN + 14 * NS_PER_SEC + 425 * NS_PER_MS},
	{"52763797000ns", 1, 52763797000LL},
	{"0.3333333333333333333h", 1, 20 * NS_PER_MIN},
	{"9007199254740993ns", 1, 9007199254740993LL},
	{"9223372036854775807ns", 1, INT64_MAX},
	{"9223372036854775.807us", 1, INT64_MAX},
	{"9223372036s854ms775us807ns", 1, INT64_MAX},
	{"-9223372036854775808ns", 1, INT64_MIN},
	{"-9223372036854775.808us", 1, INT64_MIN},
	{"0.100000000000000000000h", 1, 6 * NS_PER_MIN},
	{"0.830103483285477580700h", 1, 49 * NS_PER_MIN + 48 * NS_PER_SEC + 372539827},
	{"300ms", 1, 300 * NS_PER_MS},
	{"1.5h", 1, 90 * NS_PER_MIN},
	{"2m3.5s", 1, 2 * NS_PER_MIN + 3500 * NS_PER_MS},
	{"0s", 1, 0},
	{"0h0m", 1, 0},
	/* errors */
	{"", 0, 0},
	{"3", 0, 0},
	{"-", 0, 0},
	{"+", 0, 0},
	{"s", 0, 0},
	{".", 0, 0},
	{"-.", 0, 0},
	{".s", 0, 0},
	{"+.s", 0, 0},
	{"1d", 0, 0},
	{"1w", 0, 0},
	{"1y", 0, 0},
	{"5 s", 0, 0},
	{" 5s", 0, 0},
	{"5s ", 0, 0},
	{"1S", 0, 0},
	{"1H", 0, 0},
	{"1.2.3s", 0, 0},
	{"9223372036854775808ns", 0, 0},
	{"9223372036854775.808us", 0, 0},
	{"-9223372036854775809ns", 0, 0},
	{"3000000h", 0, 0},
	{"9223372036854ms775us808ns", 0, 0},
	{"now", 0, 0},
	{"5m-", 0, 0},
	{"--5s", 0, 0},
	{"5ss", 0, 0},
	{"\xc2s", 0, 0},
};

TEST(parse_table)
{
	for (size_t i = 0; i < sizeof parse_cases / sizeof parse_cases[0]; i++) {
		int64_t got = 12345;
		int rc = duration_parse(parse_cases[i].in, &got);
		if (parse_cases[i].ok) {
			if (rc != 0 || got != parse_cases[i].want)
				T_FAIL_("duration_parse(\"%s\") = rc %d, %" PRId64
					"; want %" PRId64,
					parse_cases[i].in, rc, got, parse_cases[i].want);
		} else if (rc == 0) {
			T_FAIL_("duration_parse(\"%s\") accepted (%" PRId64 "), want error",
				parse_cases[i].in, got);
		}
	}
}

TEST(parse_n_stops_at_length)
{
	int64_t d;
	CHECK_INT(duration_parse_n("5mXYZ", 2, &d), 0);
	CHECK_INT(d, 5 * NS_PER_MIN);
	CHECK_INT(duration_parse_n("5m", 0, &d), -1);
}

static const struct {
	int64_t d;
	const char *want;
} format_cases[] = {
	{0, "0s"},
	{1, "1ns"},
	{1100, "1.1\xc2\xb5s"},
	{2200 * NS_PER_US, "2.2ms"},
	{3300 * NS_PER_MS, "3.3s"},
	{4 * NS_PER_MIN + 5 * NS_PER_SEC, "4m5s"},
	{4 * NS_PER_MIN + 5001 * NS_PER_MS, "4m5.001s"},
	{5 * NS_PER_HOUR + 6 * NS_PER_MIN + 7001 * NS_PER_MS, "5h6m7.001s"},
	{8 * NS_PER_MIN + 1, "8m0.000000001s"},
	{INT64_MAX, "2562047h47m16.854775807s"},
	{INT64_MIN, "-2562047h47m16.854775808s"},
	{6 * NS_PER_SEC, "6s"},
	{90 * NS_PER_SEC, "1m30s"},
	{5 * NS_PER_MIN, "5m0s"},
	{20 * NS_PER_SEC, "20s"},
	{-NS_PER_SEC, "-1s"},
	{NS_PER_HOUR, "1h0m0s"},
	{300 * NS_PER_MS, "300ms"},
};

TEST(format_table)
{
	for (size_t i = 0; i < sizeof format_cases / sizeof format_cases[0]; i++) {
		char out[DURATION_STR_MAX];
		CHECK_STR(duration_format(format_cases[i].d, out), format_cases[i].want);
	}
}

TEST(round_trip)
{
	static const char *const in[] = {"6s", "1m30s", "5m0s", "1.5ms", "2h45m0.5s", "-3m0s"};
	for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
		int64_t d;
		char out[DURATION_STR_MAX];
		REQUIRE(duration_parse(in[i], &d) == 0);
		CHECK_STR(duration_format(d, out), in[i]);
	}
}

T_MAIN(T_CASE(parse_table), T_CASE(parse_n_stops_at_length), T_CASE(format_table),
       T_CASE(round_trip))
