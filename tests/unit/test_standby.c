/* The standby pool's arrival-rate sizing (standby_rate_need, standby.h):
 * a steady stream keeps what it uses up during one start, concurrency at
 * one moment and old or sparse begins count for nothing, and the ring is
 * read the right way round once it wrapped. The pool itself runs against
 * the real daemon in tests/it/standby_pool.c. */
#include "engine/standby.h"
#include "base/duration.h"
#include "t.h"
#include "base/util.h"

#define MS (1000000LL)

/* Records begins at t0, t0 + gap, ... (n of them) into a ring. */
static unsigned record(int64_t *ring, unsigned have, int64_t t0, int64_t gap, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		ring[have++ % STANDBY_RATE_SAMPLES] = t0 + (int64_t)i * gap;
	return have;
}

TEST(a_steady_stream_keeps_what_one_start_uses_up)
{
	int64_t ring[STANDBY_RATE_SAMPLES] = {0};
	int64_t t0 = 100 * NS_PER_SEC;
	/* Events 0.5 s apart: 2 a second. */
	unsigned n = record(ring, 0, t0, 500 * MS, 10);
	int64_t now = t0 + 9 * 500 * MS;
	CHECK_INT(standby_rate_need(ring, n, 1000 * MS, now), 2);
	CHECK_INT(standby_rate_need(ring, n, 1200 * MS, now), 3); /* 2.4, rounded up */
	CHECK_INT(standby_rate_need(ring, n, 400 * MS, now), 1);
	/* No start measured yet: 1 s. */
	CHECK_INT(standby_rate_need(ring, n, 0, now), 2);
}

TEST(concurrency_at_one_moment_is_not_a_rate)
{
	int64_t ring[STANDBY_RATE_SAMPLES] = {0};
	int64_t t0 = 100 * NS_PER_SEC;
	/* Eight at once, then eight 10 ms apart: under a second from first to last. */
	unsigned n = record(ring, 0, t0, 0, 8);
	CHECK_INT(standby_rate_need(ring, n, NS_PER_SEC, t0), 0);
	n = record(ring, 0, t0, 10 * MS, 8);
	CHECK_INT(standby_rate_need(ring, n, NS_PER_SEC, t0 + 70 * MS), 0);
}

TEST(two_begins_or_old_ones_are_no_stream)
{
	int64_t ring[STANDBY_RATE_SAMPLES] = {0};
	int64_t t0 = 100 * NS_PER_SEC;
	CHECK_INT(standby_rate_need(ring, 0, NS_PER_SEC, t0), 0);
	unsigned n = record(ring, 0, t0, 2 * NS_PER_SEC, 2);
	CHECK_INT(standby_rate_need(ring, n, NS_PER_SEC, t0 + 2 * NS_PER_SEC), 0);
	/* Ten a second apart, then silence: only those within the span count. */
	n = record(ring, 0, t0, NS_PER_SEC, 10);
	int64_t last = t0 + 9 * NS_PER_SEC;
	CHECK_INT(standby_rate_need(ring, n, 2 * NS_PER_SEC, last), 2);
	/* 8 s later: the last 3 (7..9 s) are within 10 s, 1 a second. */
	CHECK_INT(standby_rate_need(ring, n, 2 * NS_PER_SEC, last + 8 * NS_PER_SEC), 2);
	/* 9.5 s later: 2 left, no stream. */
	CHECK_INT(standby_rate_need(ring, n, 2 * NS_PER_SEC, last + 9500 * MS), 0);
	CHECK_INT(standby_rate_need(ring, n, 2 * NS_PER_SEC, last + 60 * NS_PER_SEC), 0);
}

TEST(a_wrapped_ring_is_read_newest_first)
{
	int64_t ring[STANDBY_RATE_SAMPLES] = {0};
	int64_t t0 = 100 * NS_PER_SEC;
	/* 40 begins 5 s apart, then 20 more 250 ms apart: the ring holds the
	 * latest 16, all of the fast stream (4 a second). */
	unsigned n = record(ring, 0, t0, 5 * NS_PER_SEC, 40);
	int64_t t1 = t0 + 40 * 5 * NS_PER_SEC;
	n = record(ring, n, t1, 250 * MS, 20);
	int64_t now = t1 + 19 * 250 * MS;
	CHECK_INT(standby_rate_need(ring, n, NS_PER_SEC, now), 4);
	/* An absurd start time is capped. */
	CHECK_INT(standby_rate_need(ring, n, 3600 * NS_PER_SEC, now), STANDBY_RATE_SAMPLES);
}

T_MAIN(T_CASE(a_steady_stream_keeps_what_one_start_uses_up),
       T_CASE(concurrency_at_one_moment_is_not_a_rate), T_CASE(two_begins_or_old_ones_are_no_stream),
       T_CASE(a_wrapped_ring_is_read_newest_first))
