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
 *
 * Truncation policy of buf_append and buf_appendf: an append is all or
 * nothing. On -1 nothing was added, the buffer keeps what it had (still
 * NUL-terminated and usable: a later, smaller append may still fit). So:
 *   - where the bytes come from outside (a peer, a file, a handler, a
 *     request), the result is checked and the overflow is an error;
 *   - where Relay builds a text from pieces it bounds itself (a Dockerfile,
 *     a listing, a message, an escaped copy), the cap is a safety net sized
 *     well above what the pieces can reach, the result is not checked, and
 *     a piece that would not fit is dropped whole: the text stays valid
 *     (never half an escape or a cut UTF-8 sequence), it may only lack that
 *     piece. The callers that ignore the result rely on exactly this.
 *
 * Threads are started with thread_start only: named (top -H, gdb, /proc
 * show it) and with every signal blocked, so that the process's signals
 * reach only the thread that waits for them (relay start's main thread).
 */
#ifndef RELAY_UTIL_H
#define RELAY_UTIL_H

#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

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

/* ---- text for terminals and logs ---- */

/*
 * text_escape is the one routine through which every byte of outside text
 * (event fields, handler output, error reasons, names read from Redis or a
 * repository) reaches a terminal or a log line; the others below wrap it.
 * Valid UTF-8 of printable code points is kept as it is, so normal text
 * passes unchanged. Escaped:
 *   - backslash as \\ (TEXT_KEEP_BACKSLASH keeps it) and, with TEXT_QUOTE,
 *     '"' as \";
 *   - newline, carriage return and tab as \n \r \t (TEXT_KEEP_TAB keeps tab),
 *     every other C0 control (ESC among them) and DEL as \xNN;
 *   - each byte that is not valid UTF-8 as \xNN;
 *   - the C1 controls U+0080..U+009F (CSI U+009B among them), the bidi
 *     controls U+061C, U+200E, U+200F, U+202A..U+202E and U+2066..U+2069,
 *     and the separators U+2028, U+2029 as \uNNNN;
 *   - with TEXT_GO, as Go's strconv.Quote does (the log's values): \a \b
 *     \f \v by name, and also the code points Go's unicode.IsPrint does not
 *     take (spaces other than ' ', format characters, private use,
 *     non-characters) as \uNNNN or \UNNNNNNNN.
 * An escape names the code point or byte it replaces, so an escaped text
 * says exactly what was there. max_cols > 0 cuts the result to at most
 * max_cols columns (a code point kept is one column, an escape as many as
 * its characters), ending in "..." when something was left out; the
 * result is also cut where the next unit would not fit in b's cap. Never
 * inside an escape or a UTF-8 sequence. Appends to b.
 */
#define TEXT_KEEP_BACKSLASH 1u
#define TEXT_KEEP_TAB 2u
#define TEXT_QUOTE 4u
#define TEXT_GO 8u
/* Handler output and other free text that is shown verbatim when normal. */
#define TEXT_VERBATIM (TEXT_KEEP_BACKSLASH | TEXT_KEEP_TAB)
void text_escape(struct buf *b, const char *s, size_t n, size_t max_cols, unsigned flags);
/* text_escape of s (n bytes) as a malloc'd string. */
char *text_escaped(const char *s, size_t n, size_t max_cols, unsigned flags);
/* Whether text_escape would change s (n bytes). */
bool text_escape_needed(const char *s, size_t n, unsigned flags);
/* Columns of an escaped text: its code points. */
size_t text_cols(const char *escaped);
/*
 * Appends JSON text (n bytes, as a JSON encoder wrote it: valid UTF-8,
 * C0 controls already escaped) to b with every code point text_escape
 * would escape as \uNNNN (DEL, C1, bidi, separators): still valid JSON
 * meaning the same, safe on a terminal.
 */
void text_escape_json(struct buf *b, const char *json, size_t n);

/* Copies s (NULL reads as "") into out (outsz >= 4) bounded to
 * min(outsz-1, max) bytes, for a fixed-size field (a container label, a
 * short name in a message): valid UTF-8 is kept whole, and what
 * text_escape would escape (controls, C1, bidi, invalid bytes) becomes '?'
 * (backslash and quotes are kept). Returns out. */
char *printable_copy(const char *s, char *out, size_t outsz, size_t max);

/* The value of one hexadecimal digit (either case), or -1. */
int hex_digit(int c);
/* Writes the n bytes at p as 2n lowercase hexadecimal digits and a NUL
 * into out (2n + 1 bytes). Returns out. */
char *hex_encode(const void *p, size_t n, char *out);
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
 * fsync of the directory. With noreplace an existing name is kept and
 * -EEXIST returned (no message). 0, -EEXIST, or -1 with *err; no temporary
 * file is left behind.
 */
int write_file_atomic(int dfd, const char *dir, const char *name, const void *data, size_t len,
		      unsigned mode, bool noreplace, char **err);
bool str_has_prefix(const char *s, const char *prefix);

/* ---- files ---- */

/* mkdir_p flag: each directory made gets exactly `mode`, whatever the umask. */
#define MKDIR_EXACT_MODE 1u
/*
 * mkdir -p: makes each missing directory along path (each prefix ending
 * before a '/', then path itself) with mode, masked by the umask unless
 * MKDIR_EXACT_MODE. What exists already is left as it is (whatever it is:
 * the caller opens and checks the result). *created (may be NULL) tells
 * whether path itself was made by this call. 0, or -1 with
 * *err = "<what> <component>: <strerror>" naming the component that could
 * not be made; what NULL reads "cannot create directory".
 */
int mkdir_p(const char *path, mode_t mode, unsigned flags, const char *what, bool *created,
	    char **err);

/* read_fd_bounded flag: zero every buffer it lets go of (secrets, keys). */
#define READ_WIPE 1u
/*
 * Reads the open file fd to its end into *data (malloc'd, NUL-terminated,
 * *len bytes; the caller frees it), retrying on EINTR. Reads at most
 * max + 1 bytes: a file holding more than max bytes gives -1 with errno
 * EFBIG. -1 with errno on a read error. On -1, *data and *len are left
 * alone and nothing stays allocated. The messages are the caller's.
 */
int read_fd_bounded(int fd, size_t max, unsigned flags, char **data, size_t *len);

/* True when st is owned by the effective uid and has none of the mode bits
 * in `loose` (077: nothing for group or others; 022: not writable by them). */
bool owner_mode_ok(const struct stat *st, mode_t loose);
/*
 * Refuses st unless owner_mode_ok(st, loose); path is called `what path`
 * in the messages and verb says what was refused ("use", "read"):
 *   "<what> <path>: owned by uid U, not by the current user (uid E); refusing to <verb> it"
 *   "<what> <path>: permissions MMMM are too open (want WWWW); refusing to <verb> it"
 * where WWWW is (0777 for a directory, else 0666) without the bits in loose.
 * The type checks (directory, regular file, symbolic link) stay with the
 * caller, whose messages differ. 0, or -1 with *err.
 */
int check_owner_mode(const struct stat *st, mode_t loose, const char *what, const char *path,
		     const char *verb, char **err);

/* ---- threads ---- */

/* Initialises c so that pthread_cond_timedwait takes CLOCK_MONOTONIC
 * deadlines (a wall-clock step never stretches or cuts a wait). */
void cond_init_monotonic(pthread_cond_t *c);

/*
 * Starts fn(arg) on a new joinable thread *t with every signal blocked and
 * named name (cut to the 15 bytes Linux keeps) so that top -H, gdb and
 * /proc/PID/task/TID/comm show it. The calling thread's mask is unchanged
 * when it returns. 0, or an errno value (pthread_create's; *t is then
 * unset and nothing runs).
 */
int thread_start(pthread_t *t, const char *name, void *(*fn)(void *), void *arg);
/* For threads a library starts (libmicrohttpd's): blocks every signal in
 * the calling thread, keeping the previous mask in *old for
 * signals_restore. What thread_start does around pthread_create. */
void signals_block_all(sigset_t *old);
void signals_restore(const sigset_t *old);

/* Monotonic and wall clocks. */
int64_t now_mono_ns(void);
int64_t now_wall_ns(void);

/* Sleep up to ms milliseconds; returns early if *stop becomes true (may be NULL). */
void sleep_ms_interruptible(int64_t ms, const atomic_int *stop);

/* Uniform random in [0, n) from a thread-local generator. */
uint64_t rand_below(uint64_t n);

/* Fills buf with n bytes from getrandom(2), the kernel's CSPRNG (EINTR
 * retried). Returns the bytes filled: fewer than n only when getrandom
 * fails (no such call, a seccomp filter); the caller decides what then. */
size_t random_fill(void *buf, size_t n);

#endif
