/*
 * Small helpers shared by every module.
 *
 * Allocation wrappers (x*) never return NULL: on out-of-memory they print one
 * line and abort, so callers never test their result (tmux's xmalloc.c).
 *
 * struct buf is a growable byte buffer with a hard cap (curl's dynbuf): every
 * append fails with -1 once the cap would be exceeded, so data read from
 * outside (events, daemon replies, handler output) can never grow without
 * bound. The contents are always NUL-terminated for convenience.
 */
#ifndef RELAY_UTIL_H
#define RELAY_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *xvasprintf(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

/* Bounded copy/format into a fixed array; always NUL-terminates, truncates. */
void strlcpy_(char *dst, const char *src, size_t size);
void snprintf_(char *dst, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

struct buf {
	char *data; /* NUL-terminated; NULL until the first append */
	size_t len;
	size_t cap; /* allocated bytes */
	size_t max; /* hard limit on len */
};

void buf_init(struct buf *b, size_t max);
int buf_append(struct buf *b, const void *p, size_t n);
int buf_appendf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_reset(struct buf *b);
void buf_free(struct buf *b);
/* Transfers ownership of the contents (never NULL) to the caller. */
char *buf_steal(struct buf *b);

/* Strict base-10 integer parse of the whole string; no sign for _u. */
int parse_int64(const char *s, int64_t *out);

/* Decodes one UTF-8 sequence at s (n >= 1 bytes available): returns its
 * length and stores the code point, or returns 0 when the bytes are not
 * valid UTF-8 (overlong forms, surrogates and values past U+10FFFF are
 * invalid, as in Go). */
size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *rune);

/* Copies s (NULL reads as "") into out (outsz >= 4) bounded to
 * min(outsz-1, max) bytes: valid UTF-8 is kept whole, control characters
 * and invalid bytes become '?'. Returns out. */
char *printable_copy(const char *s, char *out, size_t outsz, size_t max);

/* The value of one hexadecimal digit (either case), or -1. */
int hex_digit(int c);
/* Trim ASCII whitespace in place; returns s. */
char *str_trim(char *s);
/* s as it may appear in a message when it may be anything a user typed:
 * printable ASCII kept except quotes and backslash, every other byte as
 * \xNN, cut with "..." after max bytes. malloc'd. */
char *str_for_message(const char *s, size_t max);
/* Writes all n bytes, retrying on EINTR and short writes. 0 or -1 (errno). */
int write_all(int fd, const void *p, size_t n);
/* Sets *err to "<what> <path>: <strerror(e)>" (malloc'd); returns -1. */
int sys_error(char **err, const char *what, const char *path, int e);
/*
 * Writes name in the directory dfd (whose path is dir, for messages)
 * atomically: a temporary ".<name>.tmp-XXXXXXXX" beside it (O_EXCL,
 * O_NOFOLLOW), exactly `mode` whatever the umask, write, fsync, rename,
 * fsync of the directory. With noreplace an existing name is kept and -2
 * returned. 0, -2, or -1 with *err; no temporary file is left behind.
 */
int write_file_atomic(int dfd, const char *dir, const char *name, const void *data, size_t len,
		      unsigned mode, bool noreplace, char **err);
bool str_has_prefix(const char *s, const char *prefix);

/* Monotonic and wall clocks. */
int64_t now_mono_ns(void);
int64_t now_wall_ns(void);

/* Sleep up to ms milliseconds; returns early if *stop becomes true (may be NULL). */
void sleep_ms_interruptible(int64_t ms, const volatile int *stop);

/* Uniform random in [0, n) from a thread-local generator. */
uint64_t rand_below(uint64_t n);

#endif
