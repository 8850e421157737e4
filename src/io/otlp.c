/*
 * OTLP/HTTP JSON span export: see otlp.h for the encoding, the bounds and
 * what the exporter thread does when the collector misbehaves.
 *
 * Design notes:
 * - The queue is a ring of span pointers under one mutex; the producer
 *   (a consumer worker) holds it for a pointer store, the exporter thread
 *   to take a batch. Encoding and the POST happen without it.
 * - The thread's curl handle is its own and kept for the whole run
 *   (connection reuse). Every request is bounded by CURLOPT_TIMEOUT_MS;
 *   at stop, a progress callback also cuts a request in flight at the
 *   flush deadline, so shutdown waits at most the bound whatever the
 *   collector does.
 */
#include "io/otlp.h"

#include <curl/curl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/duration.h"
#include "base/log.h"
#include "base/util.h"

static atomic_uint_fast64_t dropped, failures, exported;

uint64_t otlp_spans_dropped(void)
{
	return atomic_load(&dropped);
}

uint64_t otlp_export_failures(void)
{
	return atomic_load(&failures);
}

uint64_t otlp_spans_exported(void)
{
	return atomic_load(&exported);
}

/* ---- key=value lists ---------------------------------------------------- */

void otlp_kv_free(struct otlp_kv *kv, size_t n)
{
	for (size_t i = 0; kv && i < n; i++) {
		free(kv[i].key);
		if (kv[i].value) /* may be a secret (a header) */
			memset(kv[i].value, 0, strlen(kv[i].value));
		free(kv[i].value);
	}
	free(kv);
}

/* s[0..n) trimmed and percent-decoded (malloc'd), or NULL when a '%' is
 * not followed by two hex digits. */
static char *pct_decode(const char *s, size_t n)
{
	while (n && (*s == ' ' || *s == '\t'))
		s++, n--;
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
		n--;
	char *out = xmalloc(n + 1), *o = out;
	for (size_t i = 0; i < n; i++) {
		if (s[i] != '%') {
			*o++ = s[i];
			continue;
		}
		int hi = i + 2 < n ? hex_digit((unsigned char)s[i + 1]) : -1;
		int lo = hi >= 0 ? hex_digit((unsigned char)s[i + 2]) : -1;
		if (hi < 0 || lo < 0) {
			free(out);
			return NULL;
		}
		*o++ = (char)(hi << 4 | lo);
		i += 2;
	}
	*o = '\0';
	return out;
}

/* One `key=value` entry (number pos, 1-based) into *kv. NULL or why. */
static char *kv_entry(const char *s, size_t n, size_t pos, struct otlp_kv *kv)
{
	const char *eq = memchr(s, '=', n);
	if (!eq)
		return xasprintf("entry %zu has no '='", pos);
	kv->key = pct_decode(s, (size_t)(eq - s));
	kv->value = pct_decode(eq + 1, n - (size_t)(eq - s) - 1);
	if (!kv->key || !kv->key[0])
		return xasprintf("entry %zu has an empty or badly escaped key", pos);
	if (!kv->value)
		return xasprintf("entry %zu (%s) has a badly percent-encoded value", pos,
				 kv->key);
	if (memchr(kv->value, '\0', strlen(kv->value)) || strpbrk(kv->value, "\r\n") ||
	    strpbrk(kv->key, "\r\n: "))
		return xasprintf("entry %zu has a line break, ':' or space in its key or a line "
				 "break in its value",
				 pos);
	return NULL;
}

int otlp_kv_parse(const char *text, struct otlp_kv **out, size_t *n, char **why)
{
	*out = NULL;
	*n = 0;
	size_t len = strlen(text);
	if (len > OTLP_KV_TEXT_MAX) {
		*why = xasprintf("longer than %d bytes", OTLP_KV_TEXT_MAX);
		return -1;
	}
	struct otlp_kv *kv = xcalloc(OTLP_KV_MAX, sizeof *kv);
	size_t k = 0;
	const char *p = text, *end = text + len;
	while (p < end) {
		const char *comma = memchr(p, ',', (size_t)(end - p));
		const char *stop = comma ? comma : end;
		size_t el = (size_t)(stop - p);
		const char *q = p;
		while (q < stop && (*q == ' ' || *q == '\t'))
			q++;
		if (q < stop) { /* an empty entry (",,") is skipped */
			if (k == OTLP_KV_MAX) {
				*why = xasprintf("more than %d entries", OTLP_KV_MAX);
				goto fail;
			}
			char *e = kv_entry(p, el, k + 1, &kv[k]);
			k++;
			if (e) {
				*why = e;
				goto fail;
			}
		}
		p = comma ? comma + 1 : end;
	}
	*out = kv;
	*n = k;
	return 0;
fail:
	otlp_kv_free(kv, k);
	return -1;
}

/* ---- spans ---------------------------------------------------------------- */

struct otlp_span *otlp_span_new(const char *name, int kind)
{
	struct otlp_span *s = xcalloc(1, sizeof *s);
	s->name = xstrdup(name);
	s->kind = kind;
	return s;
}

void otlp_span_attr_str(struct otlp_span *s, const char *key, const char *value)
{
	if (s->nattrs == OTLP_SPAN_ATTRS)
		return;
	s->attrs[s->nattrs++] = (struct otlp_attr){key, false, xstrdup(value), 0};
}

void otlp_span_attr_int(struct otlp_span *s, const char *key, int64_t value)
{
	if (s->nattrs == OTLP_SPAN_ATTRS)
		return;
	s->attrs[s->nattrs++] = (struct otlp_attr){key, true, NULL, value};
}

void otlp_span_free(struct otlp_span *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->nattrs; i++)
		free(s->attrs[i].str);
	free(s->trace_state);
	free(s->name);
	free(s->status_message);
	free(s);
}

/* ---- encoding ------------------------------------------------------------- */

/*
 * Written straight into a buffer rather than through a jansson tree: one
 * allocation per request instead of a dozen per span, which is most of the
 * exporter's CPU (bench/consume, "traced"). The text is what jansson's
 * compact, order-preserving dump writes for the same document.
 */

/* A JSON string of s: '"', '\\' and the C0 controls escaped as jansson
 * does; text that is not valid UTF-8 is first escaped by text_escape (so
 * that nothing is lost and the document stays valid). */
static void put_str(struct buf *b, const char *s)
{
	size_t n = strlen(s), plain = 0;
	/* Most text (names, ids, attribute values) is printable ASCII with
	 * nothing to escape: copied as it is, without the UTF-8 check. */
	while (plain < n) {
		unsigned char c = (unsigned char)s[plain];
		if (c < 0x20 || c >= 0x80 || c == '"' || c == '\\')
			break;
		plain++;
	}
	if (plain == n) {
		buf_append(b, "\"", 1);
		buf_append(b, s, n);
		buf_append(b, "\"", 1);
		return;
	}
	char *escaped = NULL;
	for (size_t i = 0; i < n;) {
		uint32_t rune;
		size_t k = utf8_decode((const unsigned char *)s + i, n - i, &rune);
		if (k == 0) {
			escaped = text_escaped(s, n, 0, 0);
			s = escaped;
			n = strlen(s);
			break;
		}
		i += k;
	}
	buf_append(b, "\"", 1);
	size_t run = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		buf_append(b, s + run, i - run);
		run = i + 1;
		switch (c) {
		case '"': buf_append(b, "\\\"", 2); break;
		case '\\': buf_append(b, "\\\\", 2); break;
		case '\b': buf_append(b, "\\b", 2); break;
		case '\f': buf_append(b, "\\f", 2); break;
		case '\n': buf_append(b, "\\n", 2); break;
		case '\r': buf_append(b, "\\r", 2); break;
		case '\t': buf_append(b, "\\t", 2); break;
		default: buf_appendf(b, "\\u%04x", c); break;
		}
	}
	buf_append(b, s + run, n - run);
	buf_append(b, "\"", 1);
	free(escaped);
}

static void put_hex(struct buf *b, const uint8_t *p, size_t n)
{
	char h[35];
	hex_encode(p, n, h + 1);
	h[0] = h[2 * n + 1] = '"';
	buf_append(b, h, 2 * n + 2);
}

/* A constant piece of the document. */
#define PUT(b, lit) buf_append((b), (lit), sizeof(lit) - 1)

/* {"key":K,"value":{"stringValue":V}} or {"intValue":"N"} */
static void put_attr(struct buf *b, const char *key, const char *str, int64_t num)
{
	buf_append(b, "{\"key\":", 7);
	put_str(b, key);
	if (str) {
		PUT(b, ",\"value\":{\"stringValue\":");
		put_str(b, str);
		buf_append(b, "}}", 2);
	} else {
		buf_appendf(b, ",\"value\":{\"intValue\":\"%" PRId64 "\"}}", num);
	}
}

static void put_span(struct buf *b, const struct otlp_span *s)
{
	PUT(b, "{\"traceId\":");
	put_hex(b, s->trace_id, 16);
	PUT(b, ",\"spanId\":");
	put_hex(b, s->span_id, 8);
	if (s->has_parent) {
		PUT(b, ",\"parentSpanId\":");
		put_hex(b, s->parent_id, 8);
	}
	if (s->trace_state) {
		PUT(b, ",\"traceState\":");
		put_str(b, s->trace_state);
	}
	PUT(b, ",\"name\":");
	put_str(b, s->name);
	buf_appendf(b,
		    ",\"kind\":%d,\"startTimeUnixNano\":\"%" PRId64 "\",\"endTimeUnixNano\":\"%" PRId64
		    "\",\"attributes\":[",
		    s->kind, s->start_ns, s->end_ns);
	for (size_t i = 0; i < s->nattrs; i++) {
		if (i)
			buf_append(b, ",", 1);
		const struct otlp_attr *a = &s->attrs[i];
		put_attr(b, a->key, a->is_int ? NULL : a->str, a->num);
	}
	PUT(b, "],\"status\":{");
	if (s->status != OTLP_STATUS_UNSET)
		buf_appendf(b, "\"code\":%d%s", s->status, s->status_message ? "," : "");
	if (s->status_message) {
		PUT(b, "\"message\":");
		put_str(b, s->status_message);
	}
	buf_append(b, "}}", 2);
}

char *otlp_encode(const struct otlp_kv *resource, size_t nresource,
		  struct otlp_span *const *spans, size_t n)
{
	struct buf b;
	buf_init(&b, SIZE_MAX / 2);
	PUT(&b, "{\"resourceSpans\":[{\"resource\":{\"attributes\":[");
	for (size_t i = 0; i < nresource; i++) {
		if (i)
			buf_append(&b, ",", 1);
		put_attr(&b, resource[i].key, resource[i].value, 0);
	}
	PUT(&b, "]},\"scopeSpans\":[{\"scope\":{\"name\":\"relay\"},\"spans\":[");
	for (size_t i = 0; i < n; i++) {
		if (i)
			buf_append(&b, ",", 1);
		put_span(&b, spans[i]);
	}
	PUT(&b, "]}]}]}");
	return buf_steal(&b);
}

/* ---- the exporter ------------------------------------------------------------ */

struct otlp_exporter {
	char *url, *ca_file;
	struct otlp_kv *resource;
	size_t nresource;
	struct curl_slist *headers;
	int64_t timeout_ns, interval_ns;
	size_t queue_max, batch_max;

	pthread_mutex_t lock;
	pthread_cond_t cond; /* a batch is full / stop */
	struct otlp_span **ring;
	size_t head, count;
	bool stopping;
	int64_t flush_deadline; /* monotonic, once stopping */
	pthread_t thread;
};

static size_t discard_body(char *p, size_t size, size_t n, void *ctx)
{
	(void)p;
	(void)ctx;
	return size * n;
}

/* Cuts a request in flight at the flush deadline once stopping. */
static int progress(void *ctx, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
	struct otlp_exporter *e = ctx;
	pthread_mutex_lock(&e->lock);
	bool late = e->stopping && now_mono_ns() >= e->flush_deadline;
	pthread_mutex_unlock(&e->lock);
	return late ? 1 : 0;
}

static void setup_curl(struct otlp_exporter *e, CURL *c)
{
	curl_easy_setopt(c, CURLOPT_URL, e->url);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, e->headers);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard_body);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(e->timeout_ns / NS_PER_MS));
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)(e->timeout_ns / NS_PER_MS));
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, progress);
	curl_easy_setopt(c, CURLOPT_XFERINFODATA, e);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	if (e->ca_file)
		curl_easy_setopt(c, CURLOPT_CAINFO, e->ca_file);
}

/* POSTs one batch; counts it as exported, or as a failure and dropped. A
 * failure is logged once when exports start failing and once when they
 * work again (*failing), never with a header value. */
static void send_batch(struct otlp_exporter *e, CURL *c, struct otlp_span **batch, size_t n,
		       bool *failing)
{
	char *body = otlp_encode(e->resource, e->nresource, batch, n);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	CURLcode rc = curl_easy_perform(c);
	long status = 0;
	if (rc == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	free(body);
	if (rc == CURLE_OK && status >= 200 && status < 300) {
		atomic_fetch_add(&exported, n);
		if (*failing)
			log_info(LOG_ATTRS("endpoint", e->url), "span export works again");
		*failing = false;
		return;
	}
	atomic_fetch_add(&failures, 1);
	atomic_fetch_add(&dropped, n);
	if (!*failing) {
		char st[24];
		snprintf_(st, sizeof st, "%ld", status);
		log_warn(LOG_ATTRS("endpoint", e->url, "error",
				   rc == CURLE_OK ? st : curl_easy_strerror(rc)),
			 "span export failed; spans are dropped until it works again");
	}
	*failing = true;
}

/* Takes at most batch_max spans into batch; lock held. */
static size_t take_locked(struct otlp_exporter *e, struct otlp_span **batch)
{
	size_t n = 0;
	while (e->count && n < e->batch_max) {
		batch[n++] = e->ring[e->head];
		e->head = (e->head + 1) % e->queue_max;
		e->count--;
	}
	return n;
}

static void *exporter_main(void *arg)
{
	struct otlp_exporter *e = arg;
	CURL *c = curl_easy_init();
	if (c)
		setup_curl(e, c);
	struct otlp_span **batch = xcalloc(e->batch_max, sizeof *batch);
	bool failing = false;
	pthread_mutex_lock(&e->lock);
	for (;;) {
		int64_t due = now_mono_ns() + e->interval_ns;
		/* While exports fail, one attempt per interval: the spans that
		 * come meanwhile are dropped at the queue, never encoded. */
		while (!e->stopping && (failing || e->count < e->batch_max) &&
		       now_mono_ns() < due) {
			struct timespec ts = {due / NS_PER_SEC, due % NS_PER_SEC};
			pthread_cond_timedwait(&e->cond, &e->lock, &ts);
		}
		if (e->stopping && (!e->count || now_mono_ns() >= e->flush_deadline))
			break;
		size_t n = take_locked(e, batch);
		pthread_mutex_unlock(&e->lock);
		if (n && c)
			send_batch(e, c, batch, n, &failing);
		else if (n)
			atomic_fetch_add(&dropped, n);
		for (size_t i = 0; i < n; i++)
			otlp_span_free(batch[i]);
		pthread_mutex_lock(&e->lock);
	}
	size_t left = e->count;
	while (e->count) { /* past the flush bound */
		otlp_span_free(e->ring[e->head]);
		e->head = (e->head + 1) % e->queue_max;
		e->count--;
	}
	pthread_mutex_unlock(&e->lock);
	atomic_fetch_add(&dropped, left);
	free(batch);
	if (c)
		curl_easy_cleanup(c);
	return NULL;
}

static struct curl_slist *header_list(const struct otlp_kv *h, size_t n)
{
	struct curl_slist *l = curl_slist_append(NULL, "Content-Type: application/json");
	for (size_t i = 0; i < n; i++) {
		char *line = xasprintf("%s: %s", h[i].key, h[i].value);
		l = curl_slist_append(l, line);
		memset(line, 0, strlen(line));
		free(line);
	}
	return l;
}

static struct otlp_kv *kv_copy(const struct otlp_kv *kv, size_t n)
{
	struct otlp_kv *c = xcalloc(n + 1, sizeof *c);
	for (size_t i = 0; i < n; i++)
		c[i] = (struct otlp_kv){xstrdup(kv[i].key), xstrdup(kv[i].value)};
	return c;
}

static void exporter_free(struct otlp_exporter *e)
{
	free(e->url);
	free(e->ca_file);
	otlp_kv_free(e->resource, e->nresource);
	curl_slist_free_all(e->headers); /* header values: libcurl's copies */
	pthread_mutex_destroy(&e->lock);
	pthread_cond_destroy(&e->cond);
	free(e->ring);
	free(e);
}

struct otlp_exporter *otlp_exporter_start(const struct otlp_exporter_config *cfg, char **why)
{
	curl_global_init(CURL_GLOBAL_ALL); /* reference-counted, thread-safe in 7.84+ */
	struct otlp_exporter *e = xcalloc(1, sizeof *e);
	e->url = xstrdup(cfg->url);
	e->ca_file = cfg->ca_file ? xstrdup(cfg->ca_file) : NULL;
	e->resource = kv_copy(cfg->resource, cfg->nresource);
	e->nresource = cfg->nresource;
	e->headers = header_list(cfg->headers, cfg->nheaders);
	e->timeout_ns = cfg->timeout_ns > 0 ? cfg->timeout_ns : 10 * NS_PER_SEC;
	e->interval_ns = cfg->interval_ns > 0 ? cfg->interval_ns : 2 * NS_PER_SEC;
	e->queue_max = cfg->queue_max ? cfg->queue_max : 2048;
	e->batch_max = cfg->batch_max ? cfg->batch_max : 512;
	e->ring = xcalloc(e->queue_max, sizeof *e->ring);
	pthread_mutex_init(&e->lock, NULL);
	cond_init_monotonic(&e->cond);
	int rc = thread_start(&e->thread, "otlp", exporter_main, e);
	if (rc != 0) {
		*why = xasprintf("cannot start the span exporter thread: %s", strerror(rc));
		exporter_free(e);
		return NULL;
	}
	return e;
}

void otlp_exporter_submit(struct otlp_exporter *e, struct otlp_span *s)
{
	if (!e) {
		otlp_span_free(s);
		return;
	}
	pthread_mutex_lock(&e->lock);
	bool full = e->count == e->queue_max || e->stopping;
	if (!full) {
		e->ring[(e->head + e->count) % e->queue_max] = s;
		if (++e->count == e->batch_max)
			pthread_cond_signal(&e->cond);
	}
	pthread_mutex_unlock(&e->lock);
	if (full) {
		atomic_fetch_add(&dropped, 1);
		otlp_span_free(s);
	}
}

void otlp_exporter_stop(struct otlp_exporter *e, int64_t bound_ns)
{
	if (!e)
		return;
	pthread_mutex_lock(&e->lock);
	e->stopping = true;
	e->flush_deadline = now_mono_ns() + bound_ns;
	pthread_cond_signal(&e->cond);
	pthread_mutex_unlock(&e->lock);
	pthread_join(e->thread, NULL);
	exporter_free(e);
}
