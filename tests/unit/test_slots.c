/* Concurrency slots (slots.h): the global limit intersected with each
 * function's, first-wins per-function limits, the bounded wait, stop and
 * wake, and the limits held under many threads at once. */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "engine/slots.h"
#include "t.h"
#include "base/util.h"

#define MS (1000000LL)

/* Acquires without waiting long; the result, and whether it blocked. */
static int try(struct slots *s, const char *fn, int limit, bool *waited)
{
	return slots_acquire(s, fn, limit, 20 * MS, NULL, waited);
}

TEST(global_and_function_limits_intersect)
{
	struct slots *s = slots_new(3);
	bool waited = true;
	CHECK_INT(try(s, "a", 1, &waited), 0);
	CHECK(!waited);				/* acquired at once */
	CHECK_INT(try(s, "a", 1, &waited), -1); /* a's own limit */
	CHECK(waited);
	CHECK_INT(try(s, "b", 5, &waited), 0);
	CHECK_INT(try(s, "b", 5, &waited), 0);
	CHECK_INT(slots_in_use(s), 3);
	CHECK_INT(try(s, "b", 5, &waited), -1); /* the global limit, though b has room */
	CHECK_INT(try(s, "c", 5, &waited), -1);
	CHECK_INT(slots_function_in_use(s, "a"), 1);
	CHECK_INT(slots_function_in_use(s, "b"), 2);
	CHECK_INT(slots_function_in_use(s, "c"), 0); /* a failed acquire holds nothing */
	CHECK_INT(slots_function_in_use(s, "never-seen"), 0);
	slots_release(s, "a");
	CHECK_INT(slots_in_use(s), 2);
	CHECK_INT(try(s, "c", 5, &waited), 0);
	CHECK_INT(slots_function_in_use(s, "c"), 1);
	slots_release(s, "b");
	slots_release(s, "b");
	slots_release(s, "c");
	CHECK_INT(slots_in_use(s), 0);
	CHECK_INT(slots_function_in_use(s, "b"), 0);
	/* releasing what is not held never goes below zero */
	slots_release(s, "b");
	CHECK_INT(slots_in_use(s), 0);
	CHECK_INT(slots_function_in_use(s, "b"), 0);
	CHECK_INT(try(s, "b", 5, &waited), 0);
	CHECK_INT(slots_in_use(s), 1);
	slots_free(s);
	slots_free(NULL);
}

/* A function's limit is the one given the first time its name is seen: a
 * changed concurrency needs a restart. */
TEST(function_limit_first_wins)
{
	struct slots *s = slots_new(100);
	bool waited;
	CHECK_INT(try(s, "f", 2, &waited), 0);
	CHECK_INT(try(s, "f", 50, &waited), 0);
	CHECK_INT(try(s, "f", 50, &waited), -1);
	slots_release(s, "f");
	slots_release(s, "f");
	/* seen first with 1: stays 1 */
	CHECK_INT(try(s, "g", 1, &waited), 0);
	CHECK_INT(try(s, "g", 10, &waited), -1);
	slots_release(s, "g");
	slots_free(s);
}

/* Limits below 1 are 1, never "unlimited" or "nothing". */
TEST(limits_below_one_are_one)
{
	static const int limits[] = {0, -1};
	for (size_t i = 0; i < ARRAY_LEN(limits); i++) {
		struct slots *s = slots_new(limits[i]);
		bool waited;
		CHECK_INT(try(s, "x", 10, &waited), 0);
		CHECK_INT(try(s, "y", 10, &waited), -1);
		slots_release(s, "x");
		CHECK_INT(try(s, "z", limits[i], &waited), 0);
		CHECK_INT(try(s, "z", limits[i], &waited), -1);
		slots_free(s);
		s = slots_new(10);
		CHECK_INT(try(s, "z", limits[i], &waited), 0);
		CHECK_INT(try(s, "z", limits[i], &waited), -1);
		slots_free(s);
	}
}

TEST(wait_is_bounded)
{
	struct slots *s = slots_new(1);
	bool waited;
	REQUIRE(try(s, "a", 1, &waited) == 0);
	int64_t t0 = now_mono_ns();
	CHECK_INT(slots_acquire(s, "b", 1, 150 * MS, NULL, &waited), -1);
	int64_t took = now_mono_ns() - t0;
	CHECK(waited);
	CHECK(took >= 140 * MS && took < 2000 * MS);
	/* no wait at all: refused at once */
	t0 = now_mono_ns();
	CHECK_INT(slots_acquire(s, "b", 1, 0, NULL, &waited), -1);
	CHECK(now_mono_ns() - t0 < 1000 * MS);
	slots_release(s, "a");
	slots_free(s);
}

struct waiter {
	struct slots *s;
	const char *fn;
	int64_t wait_ns;
	atomic_int *stop;
	int rc;
	bool waited;
	int64_t took_ns;
};

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;
	int64_t t0 = now_mono_ns();
	w->rc = slots_acquire(w->s, w->fn, 1, w->wait_ns, w->stop, &w->waited);
	w->took_ns = now_mono_ns() - t0;
	return NULL;
}

/* A release hands the slot to a blocked waiter well before its deadline. */
TEST(release_wakes_a_waiter)
{
	struct slots *s = slots_new(1);
	bool waited;
	REQUIRE(try(s, "a", 1, &waited) == 0);
	struct waiter w = {s, "b", 10000 * MS, NULL, -2, false, 0};
	pthread_t t;
	REQUIRE(pthread_create(&t, NULL, waiter_main, &w) == 0);
	usleep(100 * 1000);
	slots_release(s, "a");
	pthread_join(t, NULL);
	CHECK_INT(w.rc, 0);
	CHECK(w.waited);
	CHECK(w.took_ns < 5000 * MS);
	CHECK_INT(slots_function_in_use(s, "b"), 1);
	slots_release(s, "b");
	slots_free(s);
}

/* *stop ends a wait: at once when already set, and from another thread
 * with slots_wake (shutdown). */
TEST(stop_ends_the_wait)
{
	struct slots *s = slots_new(1);
	bool waited;
	REQUIRE(try(s, "a", 1, &waited) == 0);
	atomic_int stop = 1;
	int64_t t0 = now_mono_ns();
	CHECK_INT(slots_acquire(s, "b", 1, 10000 * MS, &stop, &waited), -1);
	CHECK(now_mono_ns() - t0 < 1000 * MS);
	CHECK(!waited);

	atomic_store(&stop, 0);
	struct waiter w = {s, "b", 10000 * MS, &stop, -2, false, 0};
	pthread_t t;
	REQUIRE(pthread_create(&t, NULL, waiter_main, &w) == 0);
	usleep(100 * 1000);
	atomic_store(&stop, 1);
	slots_wake(s);
	pthread_join(t, NULL);
	CHECK_INT(w.rc, -1);
	CHECK(w.waited);
	CHECK(w.took_ns < 5000 * MS);
	CHECK_INT(slots_in_use(s), 1);
	CHECK_INT(slots_function_in_use(s, "b"), 0);
	slots_release(s, "a");
	slots_free(s);
}

enum { GLOBAL = 4, PER_FN = 2, THREADS = 12, ROUNDS = 200 };
static const char *const fns[] = {"f0", "f1", "f2"};
static atomic_int held_global, held_fn[3], over_limit;

static void *hammer(void *arg)
{
	struct slots *s = arg;
	for (int i = 0; i < ROUNDS; i++) {
		int k = (int)rand_below(3);
		bool waited;
		if (slots_acquire(s, fns[k], PER_FN, 5000 * MS, NULL, &waited) < 0)
			continue;
		int g = atomic_fetch_add(&held_global, 1) + 1;
		int f = atomic_fetch_add(&held_fn[k], 1) + 1;
		if (g > GLOBAL || f > PER_FN)
			atomic_fetch_add(&over_limit, 1);
		if (rand_below(4) == 0)
			usleep(100);
		atomic_fetch_sub(&held_fn[k], 1);
		atomic_fetch_sub(&held_global, 1);
		slots_release(s, fns[k]);
	}
	return NULL;
}

/* Many threads, three functions (one more than the names first seen grow
 * the table): the global and per-function limits always hold, and every
 * slot comes back. */
TEST(limits_hold_under_contention)
{
	struct slots *s = slots_new(GLOBAL);
	pthread_t t[THREADS];
	for (int i = 0; i < THREADS; i++)
		REQUIRE(pthread_create(&t[i], NULL, hammer, s) == 0);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	CHECK_INT(atomic_load(&over_limit), 0);
	CHECK_INT(slots_in_use(s), 0);
	for (int k = 0; k < 3; k++)
		CHECK_INT(slots_function_in_use(s, fns[k]), 0);
	slots_free(s);
}

/* Past 16 functions the table grows (moves), here while a waiter blocks
 * on one of them: every function keeps its own count, and the waiter gets
 * its slot when it is released. */
TEST(many_functions)
{
	struct slots *s = slots_new(1000);
	bool waited;
	REQUIRE(try(s, "fn-0", 1, &waited) == 0);
	struct waiter w = {s, "fn-0", 10000 * MS, NULL, -2, false, 0};
	pthread_t t;
	REQUIRE(pthread_create(&t, NULL, waiter_main, &w) == 0);
	usleep(50 * 1000);
	char name[16];
	for (int i = 1; i < 100; i++) {
		snprintf_(name, sizeof name, "fn-%d", i);
		CHECK_INT(try(s, name, 1, &waited), 0);
	}
	CHECK_INT(slots_in_use(s), 100);
	slots_release(s, "fn-0");
	pthread_join(t, NULL);
	CHECK_INT(w.rc, 0);
	CHECK(w.waited);
	for (int i = 0; i < 100; i++) {
		snprintf_(name, sizeof name, "fn-%d", i);
		CHECK_INT(slots_function_in_use(s, name), 1);
		CHECK_INT(try(s, name, 1, &waited), -1);
		slots_release(s, name);
		CHECK_INT(slots_function_in_use(s, name), 0);
	}
	CHECK_INT(slots_in_use(s), 0);
	slots_free(s);
}

/* The standby pool's admission: a spare global slot only when one is free
 * and nobody waits for it; never per function; never blocking. */
TEST(spare_slots_yield_to_waiters)
{
	struct slots *s = slots_new(2);
	bool waited;
	CHECK_INT(slots_try_acquire_spare(s), 0);
	CHECK_INT(slots_in_use(s), 1);
	CHECK_INT(slots_function_in_use(s, "a"), 0);
	CHECK_INT(try(s, "a", 5, &waited), 0);
	CHECK_INT(slots_try_acquire_spare(s), -1); /* none free */
	/* A waiter blocks on the full set: a spare slot freed meanwhile goes
	 * to it, and no spare is handed out while it waits. */
	struct waiter w = {s, "b", 10000 * MS, NULL, -2, false, 0};
	pthread_t t;
	REQUIRE(pthread_create(&t, NULL, waiter_main, &w) == 0);
	usleep(50 * 1000);
	slots_release_spare(s);
	pthread_join(t, NULL);
	CHECK_INT(w.rc, 0);
	CHECK_INT(slots_in_use(s), 2);
	CHECK_INT(slots_try_acquire_spare(s), -1);
	slots_release(s, "a");
	CHECK_INT(slots_try_acquire_spare(s), 0);
	CHECK_INT(slots_in_use(s), 2);
	slots_release_spare(s);
	slots_release(s, "b");
	CHECK_INT(slots_in_use(s), 0);
	slots_free(s);
}

/* While an acquire waits (here on its function's own limit, with global
 * room left), the spare slot is refused: waiters come first. */
TEST(spare_slot_refused_while_someone_waits)
{
	struct slots *s = slots_new(4);
	bool waited;
	CHECK_INT(try(s, "f", 1, &waited), 0);
	struct waiter w = {s, "f", 300 * MS, NULL, -2, false, 0};
	pthread_t t;
	REQUIRE(pthread_create(&t, NULL, waiter_main, &w) == 0);
	usleep(100 * 1000);
	CHECK_INT(slots_try_acquire_spare(s), -1);
	pthread_join(t, NULL);
	CHECK_INT(w.rc, -1);
	CHECK_INT(slots_try_acquire_spare(s), 0);
	slots_release_spare(s);
	slots_release(s, "f");
	slots_free(s);
}

/* Without waiting: both or neither, whichever limit is reached. */
TEST(try_acquire_is_both_or_neither)
{
	struct slots *s = slots_new(3);
	CHECK_INT(slots_try_acquire(s, "a", 2), 0);
	CHECK_INT(slots_try_acquire(s, "a", 2), 0);
	CHECK_INT(slots_try_acquire(s, "a", 2), -1); /* its function's limit */
	CHECK_INT(slots_in_use(s), 2);
	CHECK_INT(slots_function_in_use(s, "a"), 2);
	CHECK_INT(slots_try_acquire(s, "b", 5), 0);
	CHECK_INT(slots_try_acquire(s, "c", 5), -1); /* the global limit */
	CHECK_INT(slots_in_use(s), 3);
	CHECK_INT(slots_function_in_use(s, "c"), 0); /* neither taken */
	slots_release(s, "a");
	CHECK_INT(slots_try_acquire(s, "c", 5), 0);
	slots_release(s, "a");
	slots_release(s, "b");
	slots_release(s, "c");
	CHECK_INT(slots_in_use(s), 0);
	slots_free(s);
}

/* Parked demand (slots_defer): a parked invocation whose function has room
 * waits on the global limit, so no spare slot is handed out; one blocked
 * on its own function's limit leaves the spare to the standby pool. */
TEST(spare_slot_refused_while_a_parked_invocation_needs_a_global_one)
{
	struct slots *s = slots_new(2);
	CHECK_INT(slots_try_acquire(s, "f", 1), 0);
	slots_defer(s, "f", 1, 1); /* waits on f's own limit */
	CHECK_INT(slots_try_acquire_spare(s), 0);
	slots_release_spare(s);
	slots_defer(s, "g", 4, 1); /* g has room: it waits for a global slot */
	CHECK_INT(slots_try_acquire_spare(s), -1);
	slots_defer(s, "g", 4, -1);
	CHECK_INT(slots_try_acquire_spare(s), 0);
	slots_release_spare(s);
	/* f's own slot freed: its parked one now waits on the global limit */
	slots_release(s, "f");
	CHECK_INT(slots_try_acquire_spare(s), -1);
	slots_defer(s, "f", 1, -1);
	slots_defer(s, "f", 1, -1); /* never below zero */
	CHECK_INT(slots_try_acquire_spare(s), 0);
	slots_release_spare(s);
	slots_free(s);
}

static atomic_int released;
static void count_release(void *ctx)
{
	(void)ctx;
	atomic_fetch_add(&released, 1);
}

/* slots_on_release: called after every release, spare or not; cleared
 * with NULL. */
TEST(release_callback_runs_after_every_release)
{
	struct slots *s = slots_new(2);
	atomic_store(&released, 0);
	slots_on_release(s, count_release, NULL);
	CHECK_INT(slots_try_acquire(s, "a", 1), 0);
	CHECK_INT(slots_try_acquire_spare(s), 0);
	slots_release(s, "a");
	CHECK_INT(atomic_load(&released), 1);
	slots_release_spare(s);
	CHECK_INT(atomic_load(&released), 2);
	slots_on_release(s, NULL, NULL);
	CHECK_INT(slots_try_acquire(s, "a", 1), 0);
	slots_release(s, "a");
	CHECK_INT(atomic_load(&released), 2);
	slots_free(s);
}

T_MAIN(T_CASE(try_acquire_is_both_or_neither),
       T_CASE(spare_slot_refused_while_a_parked_invocation_needs_a_global_one),
       T_CASE(release_callback_runs_after_every_release), T_CASE(spare_slots_yield_to_waiters),
       T_CASE(spare_slot_refused_while_someone_waits), T_CASE(global_and_function_limits_intersect),
       T_CASE(function_limit_first_wins), T_CASE(limits_below_one_are_one), T_CASE(wait_is_bounded),
       T_CASE(release_wakes_a_waiter), T_CASE(stop_ends_the_wait),
       T_CASE(limits_hold_under_contention), T_CASE(many_functions))
