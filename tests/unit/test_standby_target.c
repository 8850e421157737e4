/* standby_rate_target: the arrival-rate part of a handler's standby
 * target (standby.h "Sizing"). */
#include "standby.h"
#include "t.h"
#include "util.h"

#define MS (1000000LL)

TEST(unknown_is_zero)
{
	CHECK_INT(standby_rate_target(0, 0, 800 * MS), 0);   /* no gap yet */
	CHECK_INT(standby_rate_target(500 * MS, 0, 0), 0);   /* no start measured */
	CHECK_INT(standby_rate_target(-1, 0, 800 * MS), 0);
}

TEST(steady_stream)
{
	/* 0.5 s apart, a start of 750 ms (+250 ms import): 2 arrive during one. */
	CHECK_INT(standby_rate_target(500 * MS, 100 * MS, 750 * MS), 2);
	/* 751 ms: just over two gaps, 3. */
	CHECK_INT(standby_rate_target(500 * MS, 100 * MS, 751 * MS), 3);
	/* slower than a start: one is enough */
	CHECK_INT(standby_rate_target(5000 * MS, 0, 750 * MS), 1);
}

TEST(a_stopped_stream_counts_less)
{
	/* The gap is at least the time since the last arrival. */
	CHECK_INT(standby_rate_target(100 * MS, 100 * MS, 750 * MS), 10);
	CHECK_INT(standby_rate_target(100 * MS, 1000 * MS, 750 * MS), 1);
}

TEST(capped)
{
	CHECK_INT(standby_rate_target(1 * MS, 0, 10000 * MS), STANDBY_RATE_TARGET_MAX);
	CHECK_INT(standby_rate_target(1, 0, INT64_MAX / 4), STANDBY_RATE_TARGET_MAX);
}

T_MAIN(T_CASE(unknown_is_zero), T_CASE(steady_stream), T_CASE(a_stopped_stream_counts_less),
       T_CASE(capped))
