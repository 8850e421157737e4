/*
 * The process-wide Prometheus registry and the /metrics server (contract in
 * metrics.h).
 *
 * Design notes.
 *
 * Unlabelled counters and gauges are fixed arrays of atomics, each padded to
 * its own cache line: the reader thread bumps events_received_total while
 * workers bump events_processed_total, and they must not share a line.
 * Gauges store a double's bits in a 64-bit atomic; _add is a CAS loop.
 *
 * Labelled series live in two fixed-size chained hash tables (functions;
 * function/handler pairs). Entries are only ever added, never moved or
 * removed while the process runs: a new entry is fully initialised, then
 * published at the head of its chain with a release store under
 * `create_mu`. Readers walk chains with acquire loads and no lock, so the
 * hot path for an existing series is a hash, a short walk and a few relaxed
 * atomic adds. The tables never resize (that is what keeps reads lock-free);
 * with METRICS_MAX_SERIES label sets over TABLE_SIZE buckets chains stay
 * short. The same mutex guards the series count and the one-time WARN.
 *
 * Histograms keep one non-cumulative atomic count per bucket (the last one
 * is +Inf) and the sum as double bits (CAS). Rendering accumulates buckets
 * and derives _count from them, so _count always equals the +Inf bucket
 * even while observations race with a scrape.
 *
 * Number formatting follows the Go client (strconv 'g', shortest): 0.005,
 * 2.5, 1e+06, +Inf, NaN. Integer-valued series (counters, bucket counts,
 * _count) are printed as exact integers.
 */
#include "engine/metrics.h"
#include "io/otlp.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/http.h"
#include "base/log.h"

#define TABLE_SIZE 4096 /* power of two */
#define RENDER_MAX ((size_t)256 << 20)

static const double handler_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
					2.5,   5,    10,    30,	  60,  120,  300};
static const double build_bounds[] = {0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600};
#define HANDLER_NB (ARRAY_LEN(handler_bounds) + 1)
#define BUILD_NB (ARRAY_LEN(build_bounds) + 1)

struct padded_atomic {
	_Alignas(64) _Atomic uint64_t v;
};

struct histogram_handler {
	_Atomic uint64_t buckets[HANDLER_NB];
	_Atomic uint64_t sum_bits;
};

struct histogram_build {
	_Atomic uint64_t buckets[BUILD_NB];
	_Atomic uint64_t sum_bits;
};

struct fn_series {
	struct fn_series *_Atomic next;
	uint64_t hash;
	char *function;
	_Atomic uint64_t events;
	_Atomic uint64_t successes;
	_Atomic uint64_t failures;
	_Atomic uint64_t retries;
	_Atomic uint64_t dlq;
	_Atomic uint64_t key_waits;
	_Atomic uint64_t build_failures;
	struct histogram_build build;
	_Atomic int64_t warm; /* warm_containers */
};

struct metrics_handler {
	struct metrics_handler *_Atomic next;
	uint64_t hash;
	char *function;
	char *handler;
	struct fn_series *fn;
	_Atomic uint64_t invocations[METRIC_OUTCOME_COUNT];
	struct histogram_handler duration;
	_Atomic int64_t standby; /* standby_containers */
};

static struct padded_atomic counters[METRIC_COUNTER_COUNT];
static struct padded_atomic gauges[METRIC_GAUGE_COUNT]; /* double bits; 0 bits == 0.0 */
static struct padded_atomic standby_discarded[METRIC_STANDBY_REASON_COUNT];
static struct padded_atomic warm_retired[METRIC_WARM_REASON_COUNT];
static _Atomic bool enabled = true;

static struct fn_series *_Atomic fn_table[TABLE_SIZE];
static struct metrics_handler *_Atomic handler_table[TABLE_SIZE];
static pthread_mutex_t create_mu = PTHREAD_MUTEX_INITIALIZER;
static size_t nseries;	  /* under create_mu */
static bool limit_warned; /* under create_mu */

static const char *const outcome_names[METRIC_OUTCOME_COUNT] = {"success", "failure", "timeout"};

const char *metrics_outcome_name(enum metric_outcome outcome)
{
	return (unsigned)outcome < METRIC_OUTCOME_COUNT ? outcome_names[outcome] : "failure";
}

static const char *const standby_reason_names[METRIC_STANDBY_REASON_COUNT] = {
	[METRIC_STANDBY_VERSION] = "version",	[METRIC_STANDBY_SECRET] = "secret",
	[METRIC_STANDBY_IDLE] = "idle",		[METRIC_STANDBY_EXCESS] = "excess",
	[METRIC_STANDBY_EXITED] = "exited",	[METRIC_STANDBY_LOST] = "lost",
	[METRIC_STANDBY_SHUTDOWN] = "shutdown", [METRIC_STANDBY_AGE] = "age",
};

static const char *const warm_reason_names[METRIC_WARM_REASON_COUNT] = {
	[METRIC_WARM_VERSION] = "version",   [METRIC_WARM_SECRET] = "secret",
	[METRIC_WARM_IDLE] = "idle",	     [METRIC_WARM_MAX_USES] = "max_uses",
	[METRIC_WARM_EXCESS] = "excess",     [METRIC_WARM_EXITED] = "exited",
	[METRIC_WARM_TIMEOUT] = "timeout",   [METRIC_WARM_ERROR] = "error",
	[METRIC_WARM_SHUTDOWN] = "shutdown",
};

const char *metrics_warm_reason_name(enum metric_warm_reason r)
{
	return (unsigned)r < METRIC_WARM_REASON_COUNT ? warm_reason_names[r] : "unknown";
}

const char *metrics_standby_reason_name(enum metric_standby_reason r)
{
	return (unsigned)r < METRIC_STANDBY_REASON_COUNT ? standby_reason_names[r] : "unknown";
}

/* ---- atomics helpers -------------------------------------------------- */

static uint64_t dbits(double d)
{
	uint64_t u;
	memcpy(&u, &d, sizeof u);
	return u;
}

static double bitsd(uint64_t u)
{
	double d;
	memcpy(&d, &u, sizeof d);
	return d;
}

static void atomic_add_double(_Atomic uint64_t *p, double delta)
{
	uint64_t old = atomic_load_explicit(p, memory_order_relaxed);
	while (!atomic_compare_exchange_weak_explicit(p, &old, dbits(bitsd(old) + delta),
						      memory_order_relaxed, memory_order_relaxed)) {
	}
}

static inline bool is_enabled(void)
{
	return atomic_load_explicit(&enabled, memory_order_relaxed);
}

static inline void bump(_Atomic uint64_t *p)
{
	atomic_fetch_add_explicit(p, 1, memory_order_relaxed);
}

static inline uint64_t load(_Atomic uint64_t *p)
{
	return atomic_load_explicit(p, memory_order_relaxed);
}

static double clean_duration(double s)
{
	return (isnan(s) || s < 0) ? 0 : s;
}

static void observe(_Atomic uint64_t *buckets, _Atomic uint64_t *sum_bits, const double *bounds,
		    size_t nbounds, double v)
{
	size_t i = 0;
	while (i < nbounds && v > bounds[i])
		i++;
	bump(&buckets[i]);
	atomic_add_double(sum_bits, v);
}

/* ---- switches --------------------------------------------------------- */

void metrics_set_enabled(bool on)
{
	atomic_store_explicit(&enabled, on, memory_order_relaxed);
}

bool metrics_enabled(void)
{
	return is_enabled();
}

void metrics_reset_for_tests(void)
{
	pthread_mutex_lock(&create_mu);
	for (size_t b = 0; b < TABLE_SIZE; b++) {
		struct metrics_handler *h = atomic_load(&handler_table[b]);
		while (h) {
			struct metrics_handler *next = atomic_load(&h->next);
			free(h->function);
			free(h->handler);
			free(h);
			h = next;
		}
		atomic_store(&handler_table[b], NULL);
		struct fn_series *f = atomic_load(&fn_table[b]);
		while (f) {
			struct fn_series *next = atomic_load(&f->next);
			free(f->function);
			free(f);
			f = next;
		}
		atomic_store(&fn_table[b], NULL);
	}
	nseries = 0;
	limit_warned = false;
	pthread_mutex_unlock(&create_mu);
	for (size_t i = 0; i < METRIC_COUNTER_COUNT; i++)
		atomic_store(&counters[i].v, 0);
	for (size_t i = 0; i < METRIC_GAUGE_COUNT; i++)
		atomic_store(&gauges[i].v, dbits(0));
	for (size_t i = 0; i < METRIC_STANDBY_REASON_COUNT; i++)
		atomic_store(&standby_discarded[i].v, 0);
	for (size_t i = 0; i < METRIC_WARM_REASON_COUNT; i++)
		atomic_store(&warm_retired[i].v, 0);
	atomic_store(&enabled, true);
}

/* ---- unlabelled ------------------------------------------------------- */

void metrics_inc(enum metric_counter c)
{
	if (is_enabled() && (unsigned)c < METRIC_COUNTER_COUNT)
		bump(&counters[c].v);
}

void metrics_add(enum metric_counter c, uint64_t n)
{
	if (is_enabled() && (unsigned)c < METRIC_COUNTER_COUNT)
		atomic_fetch_add_explicit(&counters[c].v, n, memory_order_relaxed);
}

void metrics_gauge_set(enum metric_gauge g, double value)
{
	if (is_enabled() && (unsigned)g < METRIC_GAUGE_COUNT)
		atomic_store_explicit(&gauges[g].v, dbits(value), memory_order_relaxed);
}

void metrics_gauge_add(enum metric_gauge g, double delta)
{
	if (is_enabled() && (unsigned)g < METRIC_GAUGE_COUNT)
		atomic_add_double(&gauges[g].v, delta);
}

uint64_t metrics_counter_value(enum metric_counter c)
{
	return (unsigned)c < METRIC_COUNTER_COUNT ? load(&counters[c].v) : 0;
}

double metrics_gauge_value(enum metric_gauge g)
{
	return (unsigned)g < METRIC_GAUGE_COUNT ? bitsd(load(&gauges[g].v)) : 0;
}

/* ---- labelled series -------------------------------------------------- */

/* FNV-1a over the function name, a NUL, and the handler name. */
static uint64_t hash_labels(const char *function, const char *handler)
{
	uint64_t h = 1469598103934665603ULL;
	for (const unsigned char *p = (const unsigned char *)function; *p; p++)
		h = (h ^ *p) * 1099511628211ULL;
	h = (h ^ 0) * 1099511628211ULL;
	if (handler)
		for (const unsigned char *p = (const unsigned char *)handler; *p; p++)
			h = (h ^ *p) * 1099511628211ULL;
	return h;
}

static struct fn_series *fn_find(const char *function, uint64_t h)
{
	struct fn_series *f =
		atomic_load_explicit(&fn_table[h & (TABLE_SIZE - 1)], memory_order_acquire);
	for (; f; f = atomic_load_explicit(&f->next, memory_order_acquire))
		if (f->hash == h && strcmp(f->function, function) == 0)
			return f;
	return NULL;
}

static struct metrics_handler *handler_find(const char *function, const char *handler, uint64_t h)
{
	struct metrics_handler *s =
		atomic_load_explicit(&handler_table[h & (TABLE_SIZE - 1)], memory_order_acquire);
	for (; s; s = atomic_load_explicit(&s->next, memory_order_acquire))
		if (s->hash == h && strcmp(s->function, function) == 0 &&
		    strcmp(s->handler, handler) == 0)
			return s;
	return NULL;
}

static void warn_limit(const char *function, const char *handler)
{
	log_warn(LOG_ATTRS("limit", "10000", "function", function, "handler",
			   handler ? handler : ""),
		 "metrics series limit reached; updates for new label sets are dropped");
}

/* Under create_mu: may one more label set be created? Sets *warn the first
 * time the answer is no. */
static bool room_locked(bool *warn)
{
	if (nseries < METRICS_MAX_SERIES)
		return true;
	if (!limit_warned) {
		limit_warned = true;
		*warn = true;
	}
	return false;
}

static struct fn_series *fn_get(const char *function)
{
	if (!function)
		function = "";
	uint64_t h = hash_labels(function, NULL);
	struct fn_series *f = fn_find(function, h);
	if (f)
		return f;
	bool warn = false;
	pthread_mutex_lock(&create_mu);
	f = fn_find(function, h);
	if (!f && room_locked(&warn)) {
		f = xcalloc(1, sizeof *f);
		f->hash = h;
		f->function = xstrdup(function);
		_Atomic(struct fn_series *) *head = &fn_table[h & (TABLE_SIZE - 1)];
		atomic_store_explicit(&f->next, atomic_load_explicit(head, memory_order_relaxed),
				      memory_order_relaxed);
		atomic_store_explicit(head, f, memory_order_release);
		nseries++;
	}
	pthread_mutex_unlock(&create_mu);
	if (warn)
		warn_limit(function, NULL);
	return f;
}

struct metrics_handler *metrics_handler_get(const char *function, const char *handler)
{
	if (!function)
		function = "";
	if (!handler)
		handler = "";
	uint64_t h = hash_labels(function, handler);
	struct metrics_handler *s = handler_find(function, handler, h);
	if (s)
		return s;
	struct fn_series *f = fn_get(function);
	if (!f)
		return NULL;
	bool warn = false;
	pthread_mutex_lock(&create_mu);
	s = handler_find(function, handler, h);
	if (!s && room_locked(&warn)) {
		s = xcalloc(1, sizeof *s);
		s->hash = h;
		s->function = xstrdup(function);
		s->handler = xstrdup(handler);
		s->fn = f;
		_Atomic(struct metrics_handler *) *head = &handler_table[h & (TABLE_SIZE - 1)];
		atomic_store_explicit(&s->next, atomic_load_explicit(head, memory_order_relaxed),
				      memory_order_relaxed);
		atomic_store_explicit(head, s, memory_order_release);
		nseries++;
	}
	pthread_mutex_unlock(&create_mu);
	if (warn)
		warn_limit(function, handler);
	return s;
}

void metrics_handler_observe(struct metrics_handler *s, enum metric_outcome outcome,
			     double duration_seconds)
{
	if (!s || !is_enabled())
		return;
	if ((unsigned)outcome >= METRIC_OUTCOME_COUNT)
		outcome = METRIC_OUTCOME_FAILURE;
	bump(&s->invocations[outcome]);
	observe(s->duration.buckets, &s->duration.sum_bits, handler_bounds,
		ARRAY_LEN(handler_bounds), clean_duration(duration_seconds));
	if (outcome == METRIC_OUTCOME_SUCCESS) {
		bump(&counters[METRIC_HANDLER_SUCCESS].v);
		bump(&s->fn->successes);
	} else {
		bump(&counters[METRIC_HANDLER_FAILURE].v);
		bump(&s->fn->failures);
	}
}

void metrics_handler_invocation(const char *function, const char *handler,
				enum metric_outcome outcome, double duration_seconds)
{
	if (!is_enabled())
		return;
	metrics_handler_observe(metrics_handler_get(function, handler), outcome, duration_seconds);
}

void metrics_function_event(const char *function)
{
	if (!is_enabled())
		return;
	struct fn_series *f = fn_get(function);
	if (f)
		bump(&f->events);
}

void metrics_function_retry(const char *function)
{
	if (!is_enabled())
		return;
	bump(&counters[METRIC_RETRIES].v);
	struct fn_series *f = function ? fn_get(function) : NULL;
	if (f)
		bump(&f->retries);
}

void metrics_function_key_wait(const char *function)
{
	if (!is_enabled())
		return;
	struct fn_series *f = fn_get(function);
	if (f)
		bump(&f->key_waits);
}

void metrics_function_dlq(const char *function)
{
	if (!is_enabled())
		return;
	bump(&counters[METRIC_DLQ_ENTRIES].v);
	struct fn_series *f = function ? fn_get(function) : NULL;
	if (f)
		bump(&f->dlq);
}

void metrics_build(const char *function, bool ok, double duration_seconds)
{
	if (!is_enabled())
		return;
	struct fn_series *f = fn_get(function);
	if (!f)
		return;
	observe(f->build.buckets, &f->build.sum_bits, build_bounds, ARRAY_LEN(build_bounds),
		clean_duration(duration_seconds));
	if (!ok)
		bump(&f->build_failures);
}

int metrics_function_register(const char *function)
{
	return fn_get(function) ? 0 : -1;
}

void metrics_standby_containers(const char *function, const char *handler, int64_t delta)
{
	if (!is_enabled())
		return;
	struct metrics_handler *s = metrics_handler_get(function, handler);
	if (s)
		atomic_fetch_add_explicit(&s->standby, delta, memory_order_relaxed);
}

void metrics_standby_discarded(enum metric_standby_reason r)
{
	if (is_enabled() && (unsigned)r < METRIC_STANDBY_REASON_COUNT)
		bump(&standby_discarded[r].v);
}

uint64_t metrics_standby_discarded_value(enum metric_standby_reason r)
{
	return (unsigned)r < METRIC_STANDBY_REASON_COUNT ? load(&standby_discarded[r].v) : 0;
}

int64_t metrics_standby_containers_value(const char *function, const char *handler)
{
	if (!function)
		function = "";
	if (!handler)
		handler = "";
	struct metrics_handler *s = handler_find(function, handler, hash_labels(function, handler));
	return s ? atomic_load_explicit(&s->standby, memory_order_relaxed) : 0;
}

void metrics_warm_containers(const char *function, int64_t delta)
{
	if (!is_enabled())
		return;
	struct fn_series *f = fn_get(function);
	if (f)
		atomic_fetch_add_explicit(&f->warm, delta, memory_order_relaxed);
}

void metrics_warm_retired(enum metric_warm_reason r)
{
	if (is_enabled() && (unsigned)r < METRIC_WARM_REASON_COUNT)
		bump(&warm_retired[r].v);
}

uint64_t metrics_warm_retired_value(enum metric_warm_reason r)
{
	return (unsigned)r < METRIC_WARM_REASON_COUNT ? load(&warm_retired[r].v) : 0;
}

int64_t metrics_warm_containers_value(const char *function)
{
	struct fn_series *f = function ? fn_find(function, hash_labels(function, NULL)) : NULL;
	return f ? atomic_load_explicit(&f->warm, memory_order_relaxed) : 0;
}

/* ---- collecting series for reads -------------------------------------- */

static int cmp_fn(const void *a, const void *b)
{
	const struct fn_series *x = *(const struct fn_series *const *)a;
	const struct fn_series *y = *(const struct fn_series *const *)b;
	return strcmp(x->function, y->function);
}

static int cmp_handler(const void *a, const void *b)
{
	const struct metrics_handler *x = *(const struct metrics_handler *const *)a;
	const struct metrics_handler *y = *(const struct metrics_handler *const *)b;
	int c = strcmp(x->function, y->function);
	return c ? c : strcmp(x->handler, y->handler);
}

/* Sorted arrays of every series (borrowed pointers; the arrays are owned by
 * the caller). Series are never freed outside reset_for_tests, so the
 * pointers stay valid after the lock is dropped. */
static void collect(struct fn_series ***fns, size_t *nfn, struct metrics_handler ***hs, size_t *nh)
{
	pthread_mutex_lock(&create_mu);
	size_t cap = nseries;
	struct fn_series **fa = xmalloc(sizeof *fa * (cap ? cap : 1));
	struct metrics_handler **ha = xmalloc(sizeof *ha * (cap ? cap : 1));
	size_t nf = 0, nhh = 0;
	for (size_t b = 0; b < TABLE_SIZE; b++) {
		for (struct fn_series *f = atomic_load(&fn_table[b]); f; f = atomic_load(&f->next))
			fa[nf++] = f;
		for (struct metrics_handler *h = atomic_load(&handler_table[b]); h;
		     h = atomic_load(&h->next))
			ha[nhh++] = h;
	}
	pthread_mutex_unlock(&create_mu);
	qsort(fa, nf, sizeof *fa, cmp_fn);
	qsort(ha, nhh, sizeof *ha, cmp_handler);
	*fns = fa;
	*nfn = nf;
	*hs = ha;
	*nh = nhh;
}

/* ---- rendering -------------------------------------------------------- */

/* Rendering target: remembers the first append that hit the cap, so a
 * truncated exposition is reported instead of served. */
struct out {
	struct buf *b;
	int err;
};

static void put(struct out *o, const void *p, size_t n)
{
	if (buf_append(o->b, p, n) < 0)
		o->err = -1;
}

static void putf(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(struct out *o, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *s = xvasprintf(fmt, ap);
	va_end(ap);
	put(o, s, strlen(s));
	free(s);
}

/* Go's strconv.FormatFloat(v, 'g', -1, 64), as the Go client prints floats. */
static void format_double(char *dst, size_t size, double v)
{
	if (isnan(v)) {
		strlcpy_(dst, "NaN", size);
		return;
	}
	if (isinf(v)) {
		strlcpy_(dst, v > 0 ? "+Inf" : "-Inf", size);
		return;
	}
	if (v == 0) {
		strlcpy_(dst, "0", size); /* -0 too, as the Go client */
		return;
	}
	char e[40];
	int prec = 1;
	for (; prec <= 17; prec++) {
		snprintf(e, sizeof e, "%.*e", prec - 1, v);
		if (strtod(e, NULL) == v)
			break;
	}
	if (prec > 17)
		prec = 17;
	const char *ep = strchr(e, 'e');
	int64_t exp = 0;
	if (!ep || parse_int64(ep + 1, &exp) < 0)
		exp = 0;
	if (exp < -4 || exp >= 6) { /* as Go's shortest 'g' */
		strlcpy_(dst, e, size);
		return;
	}
	int decimals = prec - 1 - (int)exp;
	if (decimals < 0)
		decimals = 0;
	snprintf(dst, size, "%.*f", decimals, v);
}

static void append_escaped(struct out *out, const char *s, bool quote)
{
	const char *run = s;
	for (const char *p = s; *p; p++) {
		const char *rep = NULL;
		if (*p == '\\')
			rep = "\\\\";
		else if (*p == '\n')
			rep = "\\n";
		else if (*p == '"' && quote)
			rep = "\\\"";
		if (!rep)
			continue;
		put(out, run, (size_t)(p - run));
		put(out, rep, strlen(rep));
		run = p + 1;
	}
	put(out, run, strlen(run));
}

static void family_header(struct out *out, const char *name, const char *type, const char *help)
{
	putf(out, "# HELP %s ", name);
	append_escaped(out, help, false);
	putf(out, "\n# TYPE %s %s\n", name, type);
}

/* name{function="..",handler="..",<extra>} value-prefix: writes the name and
 * label block; handler and extra may be NULL. extra is pre-escaped. */
static void series_name(struct out *out, const char *name, const char *function,
			const char *handler, const char *extra)
{
	put(out, name, strlen(name));
	bool any = function || handler || extra;
	if (!any)
		return;
	const char *sep = "{";
	if (function) {
		putf(out, "%sfunction=\"", sep);
		append_escaped(out, function, true);
		put(out, "\"", 1);
		sep = ",";
	}
	if (handler) {
		putf(out, "%shandler=\"", sep);
		append_escaped(out, handler, true);
		put(out, "\"", 1);
		sep = ",";
	}
	if (extra)
		putf(out, "%s%s", sep, extra);
	put(out, "}", 1);
}

static void sample_u64(struct out *out, const char *name, const char *function, const char *handler,
		       const char *extra, uint64_t v)
{
	series_name(out, name, function, handler, extra);
	putf(out, " %llu\n", (unsigned long long)v);
}

static void sample_double(struct out *out, const char *name, const char *function,
			  const char *handler, const char *extra, double v)
{
	char num[48];
	format_double(num, sizeof num, v);
	series_name(out, name, function, handler, extra);
	putf(out, " %s\n", num);
}

static void histogram_series(struct out *out, const char *name, const char *function,
			     const char *handler, _Atomic uint64_t *buckets,
			     _Atomic uint64_t *sum_bits, const double *bounds, size_t nbounds)
{
	char bucket_name[128], le[80], num[48];
	snprintf_(bucket_name, sizeof bucket_name, "%s_bucket", name);
	uint64_t cum = 0;
	for (size_t i = 0; i <= nbounds; i++) {
		cum += load(&buckets[i]);
		if (i < nbounds)
			format_double(num, sizeof num, bounds[i]);
		else
			strlcpy_(num, "+Inf", sizeof num);
		snprintf_(le, sizeof le, "le=\"%s\"", num);
		sample_u64(out, bucket_name, function, handler, le, cum);
	}
	char sum_name[128], count_name[128];
	snprintf_(sum_name, sizeof sum_name, "%s_sum", name);
	snprintf_(count_name, sizeof count_name, "%s_count", name);
	sample_double(out, sum_name, function, handler, NULL, bitsd(load(sum_bits)));
	sample_u64(out, count_name, function, handler, NULL, cum);
}

static const struct {
	const char *name;
	const char *help;
} counter_info[METRIC_COUNTER_COUNT] = {
	[METRIC_EVENTS_RECEIVED] = {"events_received_total", "Events read from the Redis stream."},
	[METRIC_EVENTS_PROCESSED] = {"events_processed_total",
				     "Events finished (acknowledged or dead-lettered)."},
	[METRIC_HANDLER_SUCCESS] = {"handler_success_total", "Handler invocations that succeeded."},
	[METRIC_HANDLER_FAILURE] = {"handler_failure_total",
				    "Handler invocations that failed or timed out."},
	[METRIC_RETRIES] = {"retries_total", "Event retries scheduled."},
	[METRIC_DLQ_ENTRIES] = {"dlq_entries_total", "Entries written to the dead-letter queue."},
	[METRIC_DLQ_REPLAYED] = {"dlq_replayed_total",
				 "Events read that relay dlq replay put back on the stream."},
	[METRIC_CONCURRENCY_WAITS] =
		{"concurrency_waits_total",
		 "Invocations whose concurrency-slot acquisition had to block."},
	[METRIC_SCHEDULE_PUBLISHED] = {"schedule_occurrences_published_total",
				       "Scheduled occurrences this worker published first."},
	[METRIC_SCHEDULE_DUPLICATE] =
		{"schedule_occurrences_duplicate_total",
		 "Scheduled occurrences already published by another worker."},
	[METRIC_SCHEDULE_PUBLISH_FAILURE] =
		{"schedule_publish_failures_total",
		 "Scheduled occurrences this worker failed to publish."},
	[METRIC_STANDBY_DISPATCHES] = {"standby_dispatches_total",
				       "Invocations given to a standby container."},
	[METRIC_STANDBY_MISSES] =
		{"standby_misses_total",
		 "Invocations that found no standby container ready while standby was enabled."},
	[METRIC_WARM_INVOCATIONS] = {"warm_invocations_total",
				     "Invocations run in a warm container."},
	[METRIC_CONSUMERS_DELETED] =
		{"consumers_deleted_total",
		 "Consumers of the group deleted by this worker: no pending entry and no live "
		 "worker under the name."},
};

static const struct {
	const char *name;
	const char *help;
} gauge_info[METRIC_GAUGE_COUNT] = {
	[METRIC_PENDING_ENTRIES] = {"pending_entries",
				    "Entries pending in the consumer group (sampled every 15s)."},
	[METRIC_PENDING_OLDEST_AGE] =
		{"pending_oldest_age_seconds",
		 "Age of the oldest pending entry, from its stream id (sampled every 15s)."},
	[METRIC_BUFFERED_EVENTS] = {"buffered_events", "Events held in the local buffer."},
	[METRIC_IN_FLIGHT] = {"in_flight_invocations",
			      "Handler invocations currently executing in this worker."},
	[METRIC_RETRIES_SCHEDULED] =
		{"retries_scheduled",
		 "Retries waiting for their due time in the retry index (sampled every 15s)."},
};

static void render_counter(struct out *out, enum metric_counter c)
{
	family_header(out, counter_info[c].name, "counter", counter_info[c].help);
	sample_u64(out, counter_info[c].name, NULL, NULL, NULL, load(&counters[c].v));
}

static void render_gauge(struct out *out, enum metric_gauge g)
{
	family_header(out, gauge_info[g].name, "gauge", gauge_info[g].help);
	sample_double(out, gauge_info[g].name, NULL, NULL, NULL, bitsd(load(&gauges[g].v)));
}

/* The per-function counter families, in rendering order. */
enum fn_field {
	FN_BUILD_FAILURES,
	FN_EVENTS,
	FN_SUCCESSES,
	FN_FAILURES,
	FN_RETRIES,
	FN_DLQ,
	FN_KEY_WAITS,
};

static const struct {
	const char *name;
	const char *help;
	enum fn_field field;
} fn_families[] = {
	{"build_failures_total", "Function image builds that failed.", FN_BUILD_FAILURES},
	{"function_events_total", "Events processed per function.", FN_EVENTS},
	{"function_successes_total", "Handler successes per function.", FN_SUCCESSES},
	{"function_failures_total", "Handler failures (including timeouts) per function.",
	 FN_FAILURES},
	{"function_retries_total", "Event retries per function.", FN_RETRIES},
	{"function_dlq_entries_total", "Dead-letter queue entries per function.", FN_DLQ},
	{"key_waits_total", "Invocations that waited for their key (key_concurrency) per function.",
	 FN_KEY_WAITS},
};

static uint64_t fn_value(struct fn_series *f, enum fn_field field)
{
	switch (field) {
	case FN_BUILD_FAILURES: return load(&f->build_failures);
	case FN_EVENTS: return load(&f->events);
	case FN_SUCCESSES: return load(&f->successes);
	case FN_FAILURES: return load(&f->failures);
	case FN_RETRIES: return load(&f->retries);
	case FN_DLQ: return load(&f->dlq);
	case FN_KEY_WAITS: return load(&f->key_waits);
	}
	return 0;
}

/* The standby families (metrics_render's step): the gauge per handler,
 * dispatches, misses, and the discards by reason. */
static void render_standby(struct out *out, struct metrics_handler **hs, size_t nh)
{
	family_header(out, "standby_containers", "gauge",
		      "Standby containers started and not yet dispatched or discarded.");
	for (size_t i = 0; i < nh; i++) {
		series_name(out, "standby_containers", hs[i]->function, hs[i]->handler, NULL);
		putf(out, " %lld\n",
		     (long long)atomic_load_explicit(&hs[i]->standby, memory_order_relaxed));
	}
	render_counter(out, METRIC_STANDBY_DISPATCHES);
	render_counter(out, METRIC_STANDBY_MISSES);
	family_header(out, "standby_discarded_total", "counter",
		      "Standby containers removed without an event, by reason.");
	for (int r = 0; r < METRIC_STANDBY_REASON_COUNT; r++) {
		char extra[32];
		snprintf_(extra, sizeof extra, "reason=\"%s\"", standby_reason_names[r]);
		sample_u64(out, "standby_discarded_total", NULL, NULL, extra,
			   load(&standby_discarded[r].v));
	}
}

/* The warm families (metrics_render's step): the gauge per function, the
 * invocations, and the retirements by reason. */
static void render_warm(struct out *out, struct fn_series **fns, size_t nfn)
{
	family_header(out, "warm_containers", "gauge",
		      "Warm containers running, idle or serving an invocation.");
	for (size_t i = 0; i < nfn; i++) {
		series_name(out, "warm_containers", fns[i]->function, NULL, NULL);
		putf(out, " %lld\n",
		     (long long)atomic_load_explicit(&fns[i]->warm, memory_order_relaxed));
	}
	render_counter(out, METRIC_WARM_INVOCATIONS);
	family_header(out, "warm_retired_total", "counter", "Warm containers removed, by reason.");
	for (int r = 0; r < METRIC_WARM_REASON_COUNT; r++) {
		char extra[32];
		snprintf_(extra, sizeof extra, "reason=\"%s\"", warm_reason_names[r]);
		sample_u64(out, "warm_retired_total", NULL, NULL, extra, load(&warm_retired[r].v));
	}
}

int metrics_render(struct buf *b)
{
	struct out ro = {.b = b, .err = 0}, *out = &ro;
	struct fn_series **fns;
	struct metrics_handler **hs;
	size_t nfn, nh;
	collect(&fns, &nfn, &hs, &nh);

	for (int c = METRIC_EVENTS_RECEIVED; c <= METRIC_DLQ_ENTRIES; c++)
		render_counter(out, (enum metric_counter)c);
	render_counter(out, METRIC_DLQ_REPLAYED);

	family_header(out, "handler_invocations_total", "counter",
		      "Handler invocations by outcome (success, failure, timeout).");
	for (size_t i = 0; i < nh; i++)
		for (int o = 0; o < METRIC_OUTCOME_COUNT; o++) {
			char extra[32];
			snprintf_(extra, sizeof extra, "outcome=\"%s\"", outcome_names[o]);
			sample_u64(out, "handler_invocations_total", hs[i]->function,
				   hs[i]->handler, extra, load(&hs[i]->invocations[o]));
		}

	for (size_t k = 0; k < ARRAY_LEN(fn_families); k++) {
		family_header(out, fn_families[k].name, "counter", fn_families[k].help);
		for (size_t i = 0; i < nfn; i++)
			sample_u64(out, fn_families[k].name, fns[i]->function, NULL, NULL,
				   fn_value(fns[i], fn_families[k].field));
	}

	family_header(out, "handler_duration_seconds", "histogram",
		      "Handler invocation duration in seconds.");
	for (size_t i = 0; i < nh; i++)
		histogram_series(out, "handler_duration_seconds", hs[i]->function, hs[i]->handler,
				 hs[i]->duration.buckets, &hs[i]->duration.sum_bits, handler_bounds,
				 ARRAY_LEN(handler_bounds));

	family_header(out, "function_build_seconds", "histogram",
		      "Function image build duration in seconds.");
	for (size_t i = 0; i < nfn; i++)
		histogram_series(out, "function_build_seconds", fns[i]->function, NULL,
				 fns[i]->build.buckets, &fns[i]->build.sum_bits, build_bounds,
				 ARRAY_LEN(build_bounds));

	for (int g = 0; g < METRIC_GAUGE_COUNT; g++)
		render_gauge(out, (enum metric_gauge)g);
	for (int c = METRIC_CONCURRENCY_WAITS; c <= METRIC_SCHEDULE_PUBLISH_FAILURE; c++)
		render_counter(out, (enum metric_counter)c);

	render_standby(out, hs, nh);
	render_warm(out, fns, nfn);
	render_counter(out, METRIC_CONSUMERS_DELETED);
	/* The span exporter's own counters (otlp.h). */
	family_header(out, "otel_spans_exported_total", "counter",
		      "Spans the collector accepted (a 2xx answer to their request).");
	sample_u64(out, "otel_spans_exported_total", NULL, NULL, NULL, otlp_spans_exported());
	family_header(out, "otel_spans_dropped_total", "counter",
		      "Spans dropped: the export queue was full, or their export failed.");
	sample_u64(out, "otel_spans_dropped_total", NULL, NULL, NULL, otlp_spans_dropped());
	family_header(out, "otel_export_failures_total", "counter",
		      "Span export requests that failed (no answer, timeout, or not 2xx).");
	sample_u64(out, "otel_export_failures_total", NULL, NULL, NULL, otlp_export_failures());

	free(fns);
	free(hs);
	return ro.err;
}

/* ---- snapshot --------------------------------------------------------- */

void metrics_snapshot(struct metrics_global_snapshot *global,
		      struct metrics_function_snapshot **functions, size_t *nfunctions)
{
	if (global) {
		global->events_received = load(&counters[METRIC_EVENTS_RECEIVED].v);
		global->events_processed = load(&counters[METRIC_EVENTS_PROCESSED].v);
		global->handler_successes = load(&counters[METRIC_HANDLER_SUCCESS].v);
		global->handler_failures = load(&counters[METRIC_HANDLER_FAILURE].v);
		global->retries = load(&counters[METRIC_RETRIES].v);
		global->dlq_entries = load(&counters[METRIC_DLQ_ENTRIES].v);
		global->pending_entries = metrics_gauge_value(METRIC_PENDING_ENTRIES);
		global->pending_oldest_age_seconds = metrics_gauge_value(METRIC_PENDING_OLDEST_AGE);
		global->buffered_events = metrics_gauge_value(METRIC_BUFFERED_EVENTS);
		global->in_flight_invocations = metrics_gauge_value(METRIC_IN_FLIGHT);
	}
	if (!functions || !nfunctions)
		return;
	struct fn_series **fns;
	struct metrics_handler **hs;
	size_t nfn, nh;
	collect(&fns, &nfn, &hs, &nh);
	free(hs);
	struct metrics_function_snapshot *arr = NULL;
	if (nfn) {
		arr = xcalloc(nfn, sizeof *arr);
		for (size_t i = 0; i < nfn; i++) {
			arr[i].function = xstrdup(fns[i]->function);
			arr[i].events = load(&fns[i]->events);
			arr[i].successes = load(&fns[i]->successes);
			arr[i].failures = load(&fns[i]->failures);
			arr[i].retries = load(&fns[i]->retries);
			arr[i].dlq_entries = load(&fns[i]->dlq);
			arr[i].build_failures = load(&fns[i]->build_failures);
		}
	}
	free(fns);
	*functions = arr;
	*nfunctions = nfn;
}

void metrics_snapshot_free(struct metrics_function_snapshot *functions, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(functions[i].function);
	free(functions);
}

/* ---- the /metrics server ---------------------------------------------- */

#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

static struct http_server *server; /* main thread only */

static void serve(const struct http_request *req, struct http_response *resp, void *arg)
{
	if (strcmp(req->path, "/metrics") != 0) {
		http_response_text(resp, 404, "text/plain; charset=utf-8", "404 page not found\n");
		return;
	}
	if (strcmp(req->method, "GET") != 0 && strcmp(req->method, "HEAD") != 0) {
		http_response_header(resp, "Allow", "GET, HEAD");
		http_response_text(resp, 405, "text/plain; charset=utf-8", "method not allowed\n");
		return;
	}
	struct buf b;
	buf_init(&b, RENDER_MAX);
	if (metrics_render(&b) < 0) {
		buf_free(&b);
		log_warn(NULL, "metrics exposition exceeds its size limit");
		http_response_text(resp, 500, "text/plain; charset=utf-8",
				   "metrics exposition too large\n");
		return;
	}
	size_t len = b.len;
	resp->status = 200;
	http_response_header(resp, "Content-Type", METRICS_CONTENT_TYPE);
	http_response_take_body(resp, buf_steal(&b), len);
}

int metrics_server_start(const char *listen_addr)
{
	if (server)
		return -1;
	struct http_server_config cfg = {
		.name = "Metrics",
		.listen_addr = listen_addr,
		.handler = serve,
		.max_body = 64 << 10,
		/* connections (HTTP_DEFAULT_CONNECTION_LIMIT, per address
		 * HTTP_DEFAULT_PER_IP_LIMIT) and the headers' deadline
		 * (HTTP_DEFAULT_HEADER_TIMEOUT_SECONDS): http.h's defaults */
		.timeout_seconds = 10,
		.retry_bind = true,
		.retry_interval_ms = 2000,
	};
	char *err = NULL;
	if (http_server_start(&cfg, &server, &err) < 0) {
		log_error(LOG_ATTRS("addr", listen_addr ? listen_addr : "", "error", err),
			  "cannot start the metrics http server");
		free(err);
		return -1;
	}
	return 0;
}

int metrics_server_port(void)
{
	return http_server_port(server);
}

void metrics_server_stop(void)
{
	http_server_stop(server);
	server = NULL;
}
