#include "base/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* A value longer than LOG_VALUE_MAX is cut (at a UTF-8 boundary) and marked,
 * so a huge attribute keeps the line well-formed; a record that is still
 * longer than LOG_LINE_MAX is cut hard as a last resort. */
#define LOG_VALUE_MAX (8 * 1024)
#define LOG_LINE_MAX (64 * 1024)

static atomic_int log_level_ = LOG_INFO;
static atomic_int log_fd_ = 2;

/* A line longer than PIPE_BUF (4096) written to a pipe may be split by the
 * kernel and interleaved with another thread's: one writer at a time. */
static pthread_mutex_t write_lock = PTHREAD_MUTEX_INITIALIZER;

static void emit(const char *p, size_t n)
{
	pthread_mutex_lock(&write_lock);
	(void)write_all(atomic_load(&log_fd_), p, n);
	pthread_mutex_unlock(&write_lock);
}

int log_parse_level(const char *s, enum log_level *out)
{
	static const struct {
		const char *name;
		enum log_level level;
	} names[] = {
		{"DEBUG", LOG_DEBUG},
		{"INFO", LOG_INFO},
		{"WARN", LOG_WARN},
		{"ERROR", LOG_ERROR},
	};
	if (!s)
		return -1;
	while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r' || *s == '\v' || *s == '\f')
		s++;
	size_t n = strlen(s);
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r' ||
		     s[n - 1] == '\v' || s[n - 1] == '\f'))
		n--;
	for (size_t i = 0; i < ARRAY_LEN(names); i++) {
		if (strlen(names[i].name) == n && strncasecmp(s, names[i].name, n) == 0) {
			*out = names[i].level;
			return 0;
		}
	}
	return -1;
}

const char *log_level_name(enum log_level level)
{
	switch (level) {
	case LOG_DEBUG: return "DEBUG";
	case LOG_INFO: return "INFO";
	case LOG_WARN: return "WARN";
	case LOG_ERROR: return "ERROR";
	}
	return "INFO";
}

void log_set_level(enum log_level level)
{
	atomic_store(&log_level_, level);
}

enum log_level log_get_level(void)
{
	return (enum log_level)atomic_load(&log_level_);
}

bool log_enabled(enum log_level level)
{
	return (int)level >= atomic_load(&log_level_);
}

void log_set_fd(int fd)
{
	atomic_store(&log_fd_, fd);
}

/* slog quotes a value that is empty or holds a space, '=', '"', or
 * anything strconv.Quote escapes (a backslash alone is left as is). */
static bool needs_quoting(const char *v)
{
	size_t n = strlen(v);
	return n == 0 || strpbrk(v, " =\"") != NULL ||
	       text_escape_needed(v, n, TEXT_GO | TEXT_KEEP_BACKSLASH);
}

/* strconv.Quote, through the one escaping routine. */
static void append_quoted(struct buf *b, const char *v)
{
	buf_append(b, "\"", 1);
	text_escape(b, v, strlen(v), 0, TEXT_GO | TEXT_QUOTE);
	buf_append(b, "\"", 1);
}

static void append_bounded(struct buf *b, const char *value)
{
	size_t n = strlen(value);
	if (n <= LOG_VALUE_MAX) {
		log_append_value(b, value);
		return;
	}
	n = LOG_VALUE_MAX;
	while (n > 0 && ((unsigned char)value[n] & 0xC0) == 0x80)
		n--;
	char *cut = xmalloc(n + sizeof "...[truncated]");
	memcpy(cut, value, n);
	memcpy(cut + n, "...[truncated]", sizeof "...[truncated]");
	log_append_value(b, cut);
	free(cut);
}

void log_append_value(struct buf *b, const char *value)
{
	if (!value)
		value = "";
	if (needs_quoting(value))
		append_quoted(b, value);
	else
		buf_append(b, value, strlen(value));
}

void log_render(struct buf *b, const struct tm *tm, long gmtoff, enum log_level level,
		const char *const *attrs, const char *msg)
{
	buf_appendf(b, "time=%04d-%02d-%02dT%02d:%02d:%02d", tm->tm_year + 1900, tm->tm_mon + 1,
		    tm->tm_mday, tm->tm_hour, tm->tm_min, tm->tm_sec);
	if (gmtoff == 0) {
		buf_append(b, "Z", 1);
	} else {
		long off = gmtoff < 0 ? -gmtoff : gmtoff;
		buf_appendf(b, "%c%02ld:%02ld", gmtoff < 0 ? '-' : '+', off / 3600,
			    (off / 60) % 60);
	}
	buf_appendf(b, " level=%s msg=", log_level_name(level));
	append_bounded(b, msg);
	for (size_t i = 0; attrs && attrs[i]; i += 2) {
		buf_append(b, " ", 1);
		append_bounded(b, attrs[i]);
		buf_append(b, "=", 1);
		append_bounded(b, attrs[i + 1]);
	}
}

void log_record(enum log_level level, const char *const *attrs, const char *fmt, ...)
{
	if (!log_enabled(level))
		return;
	va_list ap;
	va_start(ap, fmt);
	char *msg = xvasprintf(fmt, ap);
	va_end(ap);

	time_t t = time(NULL);
	struct tm tm;
	localtime_r(&t, &tm);

	struct buf b;
	buf_init(&b, 16 * LOG_LINE_MAX);
	log_render(&b, &tm, tm.tm_gmtoff, level, attrs, msg);
	free(msg);
	/* A record cut at the cap still ends in exactly one newline. */
	char *line = b.data ? b.data : "";
	size_t len = b.len < LOG_LINE_MAX - 1 ? b.len : LOG_LINE_MAX - 1;
	char *out = xmalloc(len + 1);
	memcpy(out, line, len);
	out[len] = '\n';
	emit(out, len + 1);
	free(out);
	buf_free(&b);
}

/* F or N of a say line: quoted, escaped ('"' and '\\' too), cut. */
static void say_value(struct buf *b, const char *s)
{
	s = s ? s : "";
	buf_append(b, "\"", 1);
	text_escape(b, s, strlen(s), LOG_SAY_VALUE_MAX, TEXT_QUOTE);
	buf_append(b, "\"", 1);
}

void log_say_head(struct buf *b, const char *function, const char *kind, const char *name)
{
	buf_appendf(b, "relay: function ");
	say_value(b, function);
	buf_appendf(b, " %s ", kind);
	say_value(b, name);
}

void log_say(const char *function, const char *kind, const char *name, const char *fmt, ...)
{
	struct buf b;
	buf_init(&b, 16 * LOG_LINE_MAX);
	log_say_head(&b, function, kind, name);
	va_list ap;
	va_start(ap, fmt);
	char *tail = xvasprintf(fmt, ap);
	va_end(ap);
	size_t tl = strlen(tail);
	text_escape(&b, tail, tl < LOG_LINE_MAX ? tl : LOG_LINE_MAX, 0, TEXT_VERBATIM);
	free(tail);
	/* Cut at the cap, the line still ends in exactly one newline. */
	if (b.len > LOG_LINE_MAX - 1)
		b.len = LOG_LINE_MAX - 1;
	char *out = xmalloc(b.len + 1);
	memcpy(out, b.data, b.len);
	out[b.len] = '\n';
	emit(out, b.len + 1);
	free(out);
	buf_free(&b);
}

void log_raw(const char *line, size_t len)
{
	emit(line, len);
}
