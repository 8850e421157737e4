/*
 * Relay's operational logger: Go slog's text format, one line per record.
 *
 *   time=2026-09-13T22:47:41+02:00 level=INFO msg="Loaded 3 function(s)" function=user-events-python
 *
 * Attributes are NULL-terminated key/value string arrays; LOG_ATTRS() builds
 * one in place. Values are quoted exactly as Go's strconv.Quote would when
 * they are empty or contain a space, '=', '"', or a non-printable byte or
 * rune (escaped by util.h's text_escape, TEXT_GO). The level is checked before anything is formatted. Each record is
 * written whole under one lock (a single write(2) is atomic on a pipe only
 * up to PIPE_BUF bytes, and forwarded lines reach 16 KiB), so lines from
 * different threads never interleave. Safe to call from any thread.
 *
 * Handler output forwarding does NOT go through here (it is unaffected by
 * LOG_LEVEL); see log_raw().
 */
#ifndef RELAY_LOG_H
#define RELAY_LOG_H

#include <stdbool.h>
#include <time.h>

#include "base/util.h"

/* Numeric values follow slog so comparisons read naturally. */
enum log_level {
	LOG_DEBUG = -4,
	LOG_INFO = 0,
	LOG_WARN = 4,
	LOG_ERROR = 8,
};

#define LOG_ATTRS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* Parses DEBUG/INFO/WARN/ERROR, case-insensitive, surrounding whitespace
 * ignored. Returns 0, or -1 for anything else (there is no WARNING alias). */
int log_parse_level(const char *s, enum log_level *out);
const char *log_level_name(enum log_level level);

void log_set_level(enum log_level level);
enum log_level log_get_level(void);
bool log_enabled(enum log_level level);
/* Destination file descriptor; default 2 (stderr). */
void log_set_fd(int fd);

void log_record(enum log_level level, const char *const *attrs, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#define log_debug(attrs, ...) log_record(LOG_DEBUG, attrs, __VA_ARGS__)
#define log_info(attrs, ...) log_record(LOG_INFO, attrs, __VA_ARGS__)
#define log_warn(attrs, ...) log_record(LOG_WARN, attrs, __VA_ARGS__)
#define log_error(attrs, ...) log_record(LOG_ERROR, attrs, __VA_ARGS__)

/* Renders one record (with its trailing newline) into b; exposed for tests.
 * tm/gmtoff give the local time and its UTC offset in seconds. */
void log_render(struct buf *b, const struct tm *tm, long gmtoff, enum log_level level,
		const char *const *attrs, const char *msg);

/* Appends value to b, quoted as slog's text handler would. */
void log_append_value(struct buf *b, const char *value);

/*
 * The plain lines that tell what Relay did with a message (the spec's
 * "Try it" output), next to the forwarded handler output:
 *
 *   relay: function "F" rule "R" matched event "<msg-id>"
 *   relay: function "F" handler "H" executed for event "<msg-id>"
 *
 * log_say() writes `relay: function "F" <kind> "N"` followed by the tail
 * formatted from fmt and a newline, written whole, whatever LOG_LEVEL
 * says. F and N go through text_escape with '"' and '\\' escaped too, cut
 * to LOG_SAY_VALUE_MAX columns (log_say_head, shared with the forwarding
 * prefix); the tail goes through text_escape keeping tabs and backslashes
 * (normal text unchanged), so one call is always exactly one line and no
 * control character reaches the terminal.
 */
#define LOG_SAY_VALUE_MAX 128
void log_say(const char *function, const char *kind, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Appends `relay: function "F" <kind> "N"` to b. */
void log_say_head(struct buf *b, const char *function, const char *kind, const char *name);

/* Writes an already formatted line as is, whole (as above), regardless of
 * the level (used to forward handler output, escaped by the caller with
 * text_escape, TEXT_VERBATIM). */
void log_raw(const char *line, size_t len);

#endif
