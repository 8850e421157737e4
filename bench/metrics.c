/*
 * Cost of Relay's hot-path metric updates, in nanoseconds per call, with 1
 * and 2 threads updating the same series, metrics enabled vs disabled.
 *
 *   build/bench/metrics [ITERATIONS]
 *
 * Operations measured (what a worker does per event / per invocation):
 *   inc          metrics_inc(METRIC_EVENTS_RECEIVED)
 *   gauge_add    metrics_gauge_add(METRIC_IN_FLIGHT, +1) (a CAS loop)
 *   invocation   metrics_handler_invocation(fn, handler, ...) by name: a
 *                lock-free lookup among 200 series, then 5 atomic updates
 *   observe      metrics_handler_observe(cached handle, ...)
 *   per_event    what one event with one handler costs in total: received,
 *                buffered +1/-1, in_flight +1/-1, invocation, function event,
 *                processed
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/metrics.h"
#include "base/util.h"

enum op { OP_INC, OP_GAUGE, OP_INVOCATION, OP_OBSERVE, OP_PER_EVENT, OP_COUNT };
static const char *const op_names[OP_COUNT] = {"inc", "gauge_add", "invocation", "observe",
					       "per_event"};

struct job {
	enum op op;
	long iters;
	int id;
};

static void *run(void *arg)
{
	struct job *j = arg;
	char fn[32];
	snprintf_(fn, sizeof fn, "function-%03d", 77 + j->id);
	struct metrics_handler *h = metrics_handler_get(fn, "main.handler");
	for (long i = 0; i < j->iters; i++) {
		switch (j->op) {
		case OP_INC: metrics_inc(METRIC_EVENTS_RECEIVED); break;
		case OP_GAUGE: metrics_gauge_add(METRIC_IN_FLIGHT, 1); break;
		case OP_INVOCATION:
			metrics_handler_invocation(fn, "main.handler", METRIC_OUTCOME_SUCCESS,
						   0.042);
			break;
		case OP_OBSERVE: metrics_handler_observe(h, METRIC_OUTCOME_SUCCESS, 0.042); break;
		case OP_PER_EVENT:
			metrics_inc(METRIC_EVENTS_RECEIVED);
			metrics_gauge_add(METRIC_BUFFERED_EVENTS, 1);
			metrics_gauge_add(METRIC_IN_FLIGHT, 1);
			metrics_handler_invocation(fn, "main.handler", METRIC_OUTCOME_SUCCESS,
						   0.042);
			metrics_gauge_add(METRIC_IN_FLIGHT, -1);
			metrics_function_event(fn);
			metrics_inc(METRIC_EVENTS_PROCESSED);
			metrics_gauge_add(METRIC_BUFFERED_EVENTS, -1);
			break;
		case OP_COUNT: break;
		}
	}
	return NULL;
}

/* ns per call, per thread (wall time / calls made by each thread). */
static double measure(enum op op, int threads, long iters)
{
	pthread_t t[2];
	struct job jobs[2];
	int64_t t0 = now_mono_ns();
	for (int i = 0; i < threads; i++) {
		jobs[i] = (struct job){.op = op, .iters = iters, .id = 0};
		pthread_create(&t[i], NULL, run, &jobs[i]);
	}
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	return (double)(now_mono_ns() - t0) / (double)iters;
}

int main(int argc, char **argv)
{
	long iters = 5000000;
	int64_t v;
	if (argc > 1 && parse_int64(argv[1], &v) == 0 && v > 0)
		iters = (long)v;
	/* 200 other series so lookups walk a realistically filled table */
	char fn[32];
	for (int i = 0; i < 200; i++) {
		snprintf_(fn, sizeof fn, "function-%03d", i);
		metrics_handler_get(fn, "main.handler");
	}
	printf("metrics hot path, %ld calls per thread, ns per call (wall time per thread)\n",
	       iters);
	printf("%-12s %10s %10s %10s %10s %8s\n", "op", "on/1thr", "off/1thr", "on/2thr",
	       "off/2thr", "on/off1");
	for (int op = 0; op < OP_COUNT; op++) {
		double r[4];
		for (int threads = 1; threads <= 2; threads++) {
			metrics_set_enabled(true);
			measure((enum op)op, threads, iters / 10); /* warm-up */
			r[(threads - 1) * 2] = measure((enum op)op, threads, iters);
			metrics_set_enabled(false);
			r[(threads - 1) * 2 + 1] = measure((enum op)op, threads, iters);
		}
		printf("%-12s %10.1f %10.1f %10.1f %10.1f %7.1fx\n", op_names[op], r[0], r[1], r[2],
		       r[3], r[1] > 0 ? r[0] / r[1] : 0);
	}
	metrics_set_enabled(true);
	return 0;
}
