/*
 * OTLP/HTTP JSON span export: see otlp.h for the encoding, the bounds and
 * what the exporter thread does when the collector misbehaves.
 *
 * Design notes:
 * - The queue is a ring of batches under one mutex, each batch the text of
 *   its encoded spans. The producer (a consumer worker) holds the mutex to
 *   encode its span into the last batch, the exporter thread to take the
 *   oldest one, swapping its buffer for the one it sent last. So spans
 *   cost no allocation once the buffers have grown, and none is freed on
 *   another thread than the one that made it. The POST happens without
 *   the mutex.
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

void otlp_span_attr_str(struct otlp_span *s, const char *key, const char *value)
{
	if (s->nattrs < OTLP_SPAN_ATTRS)
		s->attrs[s->nattrs++] = (struct otlp_attr){key, value, 0};
}

void otlp_span_attr_int(struct otlp_span *s, const char *key, int64_t value)
{
	if (s->nattrs < OTLP_SPAN_ATTRS)
		s->attrs[s->nattrs++] = (struct otlp_attr){key, NULL, value};
}

/* ---- encoding ------------------------------------------------------------- */

/*
 * Written straight into a buffer rather than through a jansson tree, with
 * no allocation but the buffer's: the exporter's CPU is spent on the event
 * path's machine (bench/consume, "traced"). The text is what jansson's
 * compact, order-preserving dump writes for the same document.
 */

/* Appends n bytes to b: buf_append, with its common case inline for the
 * many short pieces of a span. */
static inline void put(struct buf *b, const void *p, size_t n)
{
	if (b->data && n < b->cap - b->len) {
		memcpy(b->data + b->len, p, n);
		b->len += n;
		b->data[b->len] = '\0';
	} else {
		buf_append(b, p, n);
	}
}

/* A constant piece of the document. */
#define PUT(b, lit) put((b), (lit), sizeof(lit) - 1)

/* The inside of a JSON string for s: '"', '\\' and the C0 controls escaped
 * as jansson does; text that is not valid UTF-8 is first escaped by
 * text_escape (so that nothing is lost and the document stays valid). */
static void put_str_body(struct buf *b, const char *s)
{
	/* Most text (names, ids, attribute values) is printable ASCII with
	 * nothing to escape: copied as it is, without the UTF-8 check. */
	const unsigned char *p = (const unsigned char *)s;
	while (*p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\')
		p++;
	if (!*p) {
		put(b, s, (size_t)(p - (const unsigned char *)s));
		return;
	}
	size_t n = strlen(s);
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
	size_t run = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		buf_append(b, s + run, i - run);
		run = i + 1;
		switch (c) {
		case '"': PUT(b, "\\\""); break;
		case '\\': PUT(b, "\\\\"); break;
		case '\b': PUT(b, "\\b"); break;
		case '\f': PUT(b, "\\f"); break;
		case '\n': PUT(b, "\\n"); break;
		case '\r': PUT(b, "\\r"); break;
		case '\t': PUT(b, "\\t"); break;
		default: {
			char u[7] = "\\u00";
			hex_encode(&c, 1, u + 4);
			buf_append(b, u, 6);
			break;
		}
		}
	}
	buf_append(b, s + run, n - run);
	free(escaped);
}

static void put_str(struct buf *b, const char *s)
{
	PUT(b, "\"");
	put_str_body(b, s);
	PUT(b, "\"");
}

static void put_hex(struct buf *b, const uint8_t *p, size_t n)
{
	char h[35];
	hex_encode(p, n, h + 1);
	h[0] = h[2 * n + 1] = '"';
	put(b, h, 2 * n + 2);
}

/* v in decimal, in quotes when quoted (OTLP's JSON form of a 64-bit
 * integer). */
static void put_int(struct buf *b, int64_t v, bool quoted)
{
	char d[24], *p = d + sizeof d;
	uint64_t u = v < 0 ? -(uint64_t)v : (uint64_t)v;
	if (quoted)
		*--p = '"';
	do {
		*--p = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (v < 0)
		*--p = '-';
	if (quoted)
		*--p = '"';
	put(b, p, (size_t)(d + sizeof d - p));
}

/* {"key":K,"value":{"stringValue":V}} or {"intValue":"N"} */
static void put_attr(struct buf *b, const char *key, const char *str, int64_t num)
{
	PUT(b, "{\"key\":");
	put_str(b, key);
	if (str) {
		PUT(b, ",\"value\":{\"stringValue\":");
		put_str(b, str);
	} else {
		PUT(b, ",\"value\":{\"intValue\":");
		put_int(b, num, true);
	}
	PUT(b, "}}");
}

/* Appends the span's JSON object to b. */
static void encode_span(struct buf *b, const struct otlp_span *s)
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
	PUT(b, ",\"name\":\"");
	for (size_t i = 0; i < OTLP_NAME_PARTS && s->name[i]; i++)
		put_str_body(b, s->name[i]);
	PUT(b, "\",\"kind\":");
	put_int(b, s->kind, false);
	PUT(b, ",\"startTimeUnixNano\":");
	put_int(b, s->start_ns, true);
	PUT(b, ",\"endTimeUnixNano\":");
	put_int(b, s->end_ns, true);
	PUT(b, ",\"attributes\":[");
	for (size_t i = 0; i < s->nattrs; i++) {
		if (i)
			PUT(b, ",");
		put_attr(b, s->attrs[i].key, s->attrs[i].str, s->attrs[i].num);
	}
	PUT(b, "],\"status\":{");
	if (s->status != OTLP_STATUS_UNSET) {
		PUT(b, "\"code\":");
		put_int(b, s->status, false);
		if (s->status_message)
			PUT(b, ",");
	}
	if (s->status_message) {
		PUT(b, "\"message\":");
		put_str(b, s->status_message);
	}
	PUT(b, "}}");
}

char *otlp_span_encode(const struct otlp_span *s)
{
	struct buf b;
	buf_init(&b, SIZE_MAX / 2);
	encode_span(&b, s);
	return buf_steal(&b);
}

/* The request around spans (len bytes: span objects separated by commas),
 * into b (emptied first). */
static void encode_request(struct buf *b, const struct otlp_kv *resource, size_t nresource,
			   const char *spans, size_t len)
{
	buf_reset(b);
	PUT(b, "{\"resourceSpans\":[{\"resource\":{\"attributes\":[");
	for (size_t i = 0; i < nresource; i++) {
		if (i)
			PUT(b, ",");
		put_attr(b, resource[i].key, resource[i].value, 0);
	}
	PUT(b, "]},\"scopeSpans\":[{\"scope\":{\"name\":\"relay\"},\"spans\":[");
	buf_append(b, spans, len);
	PUT(b, "]}]}]}");
}

char *otlp_encode(const struct otlp_kv *resource, size_t nresource, char *const *spans,
		  size_t n)
{
	struct buf list, b;
	buf_init(&list, SIZE_MAX / 2);
	buf_init(&b, SIZE_MAX / 2);
	for (size_t i = 0; i < n; i++) {
		if (i)
			PUT(&list, ",");
		buf_append(&list, spans[i], strlen(spans[i]));
	}
	encode_request(&b, resource, nresource, list.data ? list.data : "", list.len);
	buf_free(&list);
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
	/* The queue: a ring of nbatches batches, used of them holding spans
	 * from head on; the last of those is the one spans are added to. */
	struct batch *batches;
	size_t nbatches, head, used, count;
	bool stopping;
	int64_t flush_deadline; /* monotonic, once stopping */
	pthread_t thread;
};

/* Encoded spans, separated by commas: the "spans" list of one request.
 * Its buffer is kept when the batch is sent, so that a steady stream of
 * spans allocates nothing. */
struct batch {
	struct buf text;
	size_t n;
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
static void send_batch(struct otlp_exporter *e, CURL *c, struct buf *body,
		       const struct batch *batch, bool *failing)
{
	size_t n = batch->n;
	encode_request(body, e->resource, e->nresource, batch->text.data, batch->text.len);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body->data);
	curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)body->len);
	CURLcode rc = curl_easy_perform(c);
	long status = 0;
	if (rc == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
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

/* Whether a batch waits to be sent: a full one, or (partial) when due. */
static bool batch_ready_locked(const struct otlp_exporter *e, bool due)
{
	return e->used > 1 || (e->used == 1 && (due || e->batches[e->head].n == e->batch_max));
}

/* Takes the oldest batch into *out, whose buffer (emptied, with the
 * capacity of the batch sent before) takes its place in the ring; lock
 * held. */
static void take_locked(struct otlp_exporter *e, struct batch *out)
{
	struct batch *b = &e->batches[e->head];
	struct buf spare = out->text;
	*out = *b;
	b->text = spare;
	b->n = 0;
	e->count -= out->n;
	e->head = (e->head + 1) % e->nbatches;
	e->used--;
}

static void *exporter_main(void *arg)
{
	struct otlp_exporter *e = arg;
	CURL *c = curl_easy_init();
	if (c)
		setup_curl(e, c);
	/* The request body, kept across requests: it grows to a batch's size
	 * once. */
	struct buf body;
	buf_init(&body, SIZE_MAX / 2);
	struct batch out = {0};
	buf_init(&out.text, SIZE_MAX / 2);
	bool failing = false;
	pthread_mutex_lock(&e->lock);
	for (;;) {
		int64_t due = now_mono_ns() + e->interval_ns;
		/* While exports fail, one attempt per interval: the spans that
		 * come meanwhile are dropped at the queue, never encoded. */
		while (!e->stopping && (failing || !batch_ready_locked(e, false)) &&
		       now_mono_ns() < due) {
			struct timespec ts = {due / NS_PER_SEC, due % NS_PER_SEC};
			pthread_cond_timedwait(&e->cond, &e->lock, &ts);
		}
		if (e->stopping && (!e->count || now_mono_ns() >= e->flush_deadline))
			break;
		if (!batch_ready_locked(e, true))
			continue;
		take_locked(e, &out);
		pthread_mutex_unlock(&e->lock);
		if (c)
			send_batch(e, c, &body, &out, &failing);
		else
			atomic_fetch_add(&dropped, out.n);
		buf_reset(&out.text);
		pthread_mutex_lock(&e->lock);
	}
	size_t left = e->count; /* past the flush bound */
	e->count = 0;
	e->used = 0;
	pthread_mutex_unlock(&e->lock);
	atomic_fetch_add(&dropped, left);
	buf_free(&out.text);
	buf_free(&body);
	if (c)
		curl_easy_cleanup(c);
	return NULL;
}

static struct curl_slist *header_list(const struct otlp_kv *h, size_t n)
{
	struct curl_slist *l = curl_slist_append(NULL, "Content-Type: application/json");
	/* No "Expect: 100-continue" (libcurl's default for a body over 1 MiB):
	 * a collector that ignores it would cost every large request a
	 * second's wait. */
	l = curl_slist_append(l, "Expect:");
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
	for (size_t i = 0; i < e->nbatches; i++)
		buf_free(&e->batches[i].text);
	free(e->batches);
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
	if (e->batch_max > e->queue_max)
		e->batch_max = e->queue_max;
	e->nbatches = (e->queue_max + e->batch_max - 1) / e->batch_max;
	e->batches = xcalloc(e->nbatches, sizeof *e->batches);
	for (size_t i = 0; i < e->nbatches; i++)
		buf_init(&e->batches[i].text, SIZE_MAX / 2);
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

/* The batch a span goes to, or NULL when the queue is full or stopping;
 * lock held. */
static struct batch *tail_locked(struct otlp_exporter *e)
{
	if (e->stopping || e->count >= e->queue_max)
		return NULL;
	if (e->used) {
		struct batch *t = &e->batches[(e->head + e->used - 1) % e->nbatches];
		if (t->n < e->batch_max)
			return t;
	}
	if (e->used == e->nbatches)
		return NULL;
	e->used++;
	return &e->batches[(e->head + e->used - 1) % e->nbatches];
}

void otlp_exporter_submit(struct otlp_exporter *e, const struct otlp_span *s)
{
	if (!e)
		return;
	/* Encoded straight into its batch, under the lock (about a
	 * microsecond): no allocation once the batches have grown, and none
	 * at all when the queue is full, so that a collector that is down
	 * costs the event path a lock, not an encoding. */
	pthread_mutex_lock(&e->lock);
	struct batch *t = tail_locked(e);
	if (t) {
		if (t->n)
			PUT(&t->text, ",");
		encode_span(&t->text, s);
		e->count++;
		if (++t->n == e->batch_max)
			pthread_cond_signal(&e->cond);
	}
	pthread_mutex_unlock(&e->lock);
	if (!t)
		atomic_fetch_add(&dropped, 1);
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
