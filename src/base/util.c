#include "base/util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void oom(size_t n)
{
	char msg[96];
	int len = snprintf(msg, sizeof msg, "relay: out of memory allocating %zu bytes\n", n);
	if (len > 0 && write(2, msg, (size_t)len) < 0) {
		/* nothing left to do */
	}
	abort();
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		oom(n);
	return p;
}

void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	if (!p)
		oom(n * size);
	return p;
}

void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	if (!q)
		oom(n);
	return q;
}

char *xstrdup(const char *s)
{
	return xstrndup(s, strlen(s));
}

char *xstrndup(const char *s, size_t n)
{
	char *p = xmalloc(n + 1);
	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

char *xvasprintf(const char *fmt, va_list ap)
{
	va_list aq;
	va_copy(aq, ap);
	int n = vsnprintf(NULL, 0, fmt, aq);
	va_end(aq);
	if (n < 0)
		return xstrdup("");
	char *p = xmalloc((size_t)n + 1);
	vsnprintf(p, (size_t)n + 1, fmt, ap);
	return p;
}

char *xasprintf(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *p = xvasprintf(fmt, ap);
	va_end(ap);
	return p;
}

void strlcpy_(char *dst, const char *src, size_t size)
{
	if (size == 0)
		return;
	size_t n = strnlen(src, size - 1);
	memcpy(dst, src, n);
	dst[n] = '\0';
}

void snprintf_(char *dst, size_t size, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(dst, size, fmt, ap);
	va_end(ap);
	if (n < 0 && size)
		dst[0] = '\0';
}

void buf_init(struct buf *b, size_t max)
{
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
	b->max = max;
}

int buf_append(struct buf *b, const void *p, size_t n)
{
	if (n > b->max - b->len)
		return -1;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 64;
		while (cap < b->len + n + 1)
			cap *= 2;
		if (cap > b->max + 1)
			cap = b->max + 1;
		b->data = xrealloc(b->data, cap);
		b->cap = cap;
	}
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
	return 0;
}

int buf_appendf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *s = xvasprintf(fmt, ap);
	va_end(ap);
	int rc = buf_append(b, s, strlen(s));
	free(s);
	return rc;
}

void buf_reset(struct buf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = '\0';
}

void buf_free(struct buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}

char *buf_steal(struct buf *b)
{
	char *p = b->data ? b->data : xstrdup("");
	b->data = NULL;
	b->len = b->cap = 0;
	return p;
}

int parse_int64(const char *s, int64_t *out)
{
	if (!s || !*s)
		return -1;
	const char *p = s;
	if (*p == '-' || *p == '+')
		p++;
	if (!isdigit((unsigned char)*p))
		return -1;
	for (const char *q = p; *q; q++)
		if (!isdigit((unsigned char)*q))
			return -1;
	errno = 0;
	char *end;
	long long v = strtoll(s, &end, 10);
	if (errno || *end)
		return -1;
	*out = v;
	return 0;
}

size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *rune)
{
	if (s[0] < 0x80) {
		*rune = s[0];
		return 1;
	}
	size_t len;
	uint32_t r, min;
	if ((s[0] & 0xE0) == 0xC0) {
		len = 2, r = s[0] & 0x1F, min = 0x80;
	} else if ((s[0] & 0xF0) == 0xE0) {
		len = 3, r = s[0] & 0x0F, min = 0x800;
	} else if ((s[0] & 0xF8) == 0xF0) {
		len = 4, r = s[0] & 0x07, min = 0x10000;
	} else {
		return 0;
	}
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		r = (r << 6) | (s[i] & 0x3F);
	}
	if (r < min || r > 0x10FFFF || (r >= 0xD800 && r <= 0xDFFF))
		return 0;
	*rune = r;
	return len;
}

/* Whether r is shown as it is (flags: TEXT_GO takes Go's printable set). */
static bool rune_shown(uint32_t r, unsigned flags)
{
	if (r < 0x20 || r == 0x7F || (r >= 0x80 && r <= 0x9F))
		return false;
	if (r == 0x061C || r == 0x200E || r == 0x200F || (r >= 0x202A && r <= 0x202E) ||
	    (r >= 0x2066 && r <= 0x2069) || r == 0x2028 || r == 0x2029)
		return false;
	if (!(flags & TEXT_GO))
		return true;
	/* An approximation of Go's unicode.IsPrint: the spaces, format
	 * characters, private use and non-characters that matter in logs. */
	if (r == 0xA0 || r == 0xAD || (r >= 0x2000 && r <= 0x200F) ||
	    (r >= 0x2028 && r <= 0x202F) || (r >= 0x205F && r <= 0x206F) || r == 0x3000 ||
	    r == 0x1680)
		return false;
	if (r == 0xFEFF || (r >= 0xFFF9 && r <= 0xFFFB) || (r & 0xFFFE) == 0xFFFE)
		return false;
	if ((r >= 0xE000 && r <= 0xF8FF) || r >= 0xF0000)
		return false;
	return true;
}

/* The unit at p (n >= 1 bytes left) as text_escape writes it: into out
 * (its length returned), *k the bytes of p it stands for, *cols its
 * columns. */
static size_t escape_unit(const unsigned char *p, size_t n, unsigned flags, char out[12], size_t *k,
			  size_t *cols)
{
	static const char hex[] = "0123456789abcdef";
	uint32_t r;
	size_t u = utf8_decode(p, n, &r);
	*cols = 1;
	if (u == 0) { /* not UTF-8: the byte */
		*k = 1;
		out[0] = '\\', out[1] = 'x', out[2] = hex[p[0] >> 4], out[3] = hex[p[0] & 15];
		return *cols = 4;
	}
	*k = u;
	if ((r == '\\' && !(flags & TEXT_KEEP_BACKSLASH)) || (r == '"' && (flags & TEXT_QUOTE))) {
		out[0] = '\\', out[1] = (char)r;
		return *cols = 2;
	}
	if ((r == '\t' && (flags & TEXT_KEEP_TAB)) || rune_shown(r, flags)) {
		memcpy(out, p, u);
		return u;
	}
	const char *named = r == '\n' ? "\\n" : r == '\r' ? "\\r" : r == '\t' ? "\\t" : NULL;
	if (!named && (flags & TEXT_GO))
		named = r == '\a'   ? "\\a"
			: r == '\b' ? "\\b"
			: r == '\f' ? "\\f"
			: r == '\v' ? "\\v"
				    : NULL;
	if (named) {
		memcpy(out, named, 2);
		return *cols = 2;
	}
	if (r < 0x80)
		snprintf_(out, 12, "\\x%02x", (unsigned)r);
	else if (r < 0x10000)
		snprintf_(out, 12, "\\u%04x", (unsigned)r);
	else
		snprintf_(out, 12, "\\U%08x", (unsigned)r);
	return *cols = strlen(out);
}

void text_escape(struct buf *b, const char *s, size_t n, size_t max_cols, unsigned flags)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t budget = SIZE_MAX;
	if (max_cols > 0) {
		size_t total = 0;
		for (size_t i = 0; i < n && total <= max_cols;) {
			char u[12];
			size_t k, cols;
			escape_unit(p + i, n - i, flags, u, &k, &cols);
			total += cols;
			i += k;
		}
		if (total > max_cols)
			budget = max_cols > 3 ? max_cols - 3 : 0;
	}
	size_t used = 0, i = 0;
	while (i < n) {
		char u[12];
		size_t k, cols, len = escape_unit(p + i, n - i, flags, u, &k, &cols);
		if (used + cols > budget || buf_append(b, u, len) < 0)
			break;
		used += cols;
		i += k;
	}
	if (budget != SIZE_MAX)
		buf_append(b, "...", 3);
	else if (b->data == NULL)
		buf_append(b, "", 0);
}

char *text_escaped(const char *s, size_t n, size_t max_cols, unsigned flags)
{
	struct buf b;
	buf_init(&b, n * 10 + 8); /* every unit escaped, then "..." */
	text_escape(&b, s, n, max_cols, flags);
	return b.data ? buf_steal(&b) : xstrdup("");
}

bool text_escape_needed(const char *s, size_t n, unsigned flags)
{
	const unsigned char *p = (const unsigned char *)s;
	for (size_t i = 0; i < n;) {
		char u[12];
		size_t k, cols, len = escape_unit(p + i, n - i, flags, u, &k, &cols);
		if (len != k || memcmp(u, p + i, k) != 0)
			return true;
		i += k;
	}
	return false;
}

size_t text_cols(const char *escaped)
{
	size_t n = 0;
	for (; *escaped; escaped++)
		if (((unsigned char)*escaped & 0xc0) != 0x80)
			n++;
	return n;
}

void text_escape_json(struct buf *b, const char *json, size_t n)
{
	const unsigned char *p = (const unsigned char *)json;
	size_t from = 0, i = 0;
	while (i < n) {
		uint32_t r;
		size_t u = utf8_decode(p + i, n - i, &r);
		if (u == 0)
			r = 0xFFFD, u = 1; /* not from an encoder: the replacement character */
		else if ((r < 0x80 && r != 0x7F) || rune_shown(r, 0)) {
			/* ASCII as the encoder wrote it: whitespace between
			 * tokens, controls inside strings escaped already */
			i += u;
			continue;
		}
		buf_append(b, p + from, i - from);
		buf_appendf(b, "\\u%04X", (unsigned)r); /* as jansson writes them */
		i += u;
		from = i;
	}
	buf_append(b, p + from, i - from);
}

char *printable_copy(const char *s, char *out, size_t outsz, size_t max)
{
	if (max > outsz - 1)
		max = outsz - 1;
	size_t o = 0;
	const unsigned char *p = (const unsigned char *)(s ? s : "");
	size_t n = strlen((const char *)p);
	for (size_t i = 0; i < n;) {
		uint32_t rune;
		size_t k = utf8_decode(p + i, n - i, &rune);
		if (k == 0 || !rune_shown(rune, 0)) {
			if (o + 1 > max)
				break;
			out[o++] = '?';
			i += k ? k : 1;
			continue;
		}
		if (o + k > max)
			break;
		memcpy(out + o, p + i, k);
		o += k;
		i += k;
	}
	out[o] = '\0';
	return out;
}

int hex_digit(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

char *hex_encode(const void *p, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[b[i] >> 4];
		out[2 * i + 1] = digits[b[i] & 15];
	}
	out[2 * n] = '\0';
	return out;
}

char *str_trim(char *s)
{
	size_t n = strlen(s);
	while (n && isspace((unsigned char)s[n - 1]))
		s[--n] = '\0';
	size_t i = 0;
	while (s[i] && isspace((unsigned char)s[i]))
		i++;
	if (i)
		memmove(s, s + i, n - i + 1);
	return s;
}

bool str_has_prefix(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

static int64_t clock_ns(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t now_mono_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

int64_t now_wall_ns(void)
{
	return clock_ns(CLOCK_REALTIME);
}

void sleep_ms_interruptible(int64_t ms, const atomic_int *stop)
{
	int64_t end = now_mono_ns() + ms * 1000000LL;
	for (;;) {
		if (stop && atomic_load(stop))
			return;
		int64_t left = end - now_mono_ns();
		if (left <= 0)
			return;
		if (left > 100000000LL)
			left = 100000000LL;
		struct timespec ts = {left / 1000000000LL, left % 1000000000LL};
		nanosleep(&ts, NULL);
	}
}

size_t random_fill(void *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = getrandom((char *)buf + got, n - got, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	return got;
}

uint64_t rand_below(uint64_t n)
{
	static _Thread_local uint64_t state;
	if (state == 0)
		state = (uint64_t)now_wall_ns() ^ ((uint64_t)getpid() << 32) ^
			(uint64_t)(uintptr_t)&state;
	/* xorshift64* */
	state ^= state >> 12;
	state ^= state << 25;
	state ^= state >> 27;
	uint64_t r = state * 0x2545F4914F6CDD1DULL;
	return n ? r % n : 0;
}

char *str_for_message(const char *s, size_t max)
{
	struct buf b;
	buf_init(&b, 4 * max + 8);
	size_t i;
	for (i = 0; s[i] && i < max; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c < 0x7f && c != '\'' && c != '"' && c != '\\')
			buf_append(&b, &s[i], 1);
		else
			buf_appendf(&b, "\\x%02x", c);
	}
	if (s[i])
		buf_append(&b, "...", 3);
	if (!b.data)
		return xstrdup("");
	return buf_steal(&b);
}

int write_all(int fd, const void *p, size_t n)
{
	const char *q = p;
	while (n > 0) {
		ssize_t w = write(fd, q, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		q += w;
		n -= (size_t)w;
	}
	return 0;
}

int sys_error(char **err, const char *what, const char *path, int e)
{
	char tmp[128];
	*err = xasprintf("%s %s: %s", what, path, strerror_r(e, tmp, sizeof tmp));
	return -1;
}

int write_file_atomic(int dfd, const char *dir, const char *name, const void *data, size_t len,
		      unsigned mode, bool noreplace, char **err)
{
	char *tmp = NULL;
	int fd = -1;
	for (int i = 0; i < 100 && fd < 0; i++) {
		free(tmp);
		tmp = xasprintf(".%s.tmp-%08llx", name,
				(unsigned long long)rand_below(UINT64_C(1) << 32));
		fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0 && errno != EEXIST)
			break;
	}
	if (fd < 0) {
		free(tmp);
		return sys_error(err, "cannot create a temporary file in", dir, errno);
	}
	bool ok = fchmod(fd, (mode_t)mode) == 0 && write_all(fd, data, len) == 0 && fsync(fd) == 0;
	ok = close(fd) == 0 && ok;
	int r = ok ? renameat2(dfd, tmp, dfd, name, noreplace ? RENAME_NOREPLACE : 0) : -1;
	if (r < 0 && ok && errno == EINVAL && noreplace) /* a file system without the flag */
		r = renameat(dfd, tmp, dfd, name);
	int e = errno;
	if (r < 0)
		unlinkat(dfd, tmp, 0);
	free(tmp);
	if (r < 0)
		return ok && e == EEXIST ? -EEXIST
					 : sys_error(err, "cannot write a file in", dir, e);
	if (fsync(dfd) < 0)
		return sys_error(err, "cannot sync directory", dir, errno);
	return 0;
}

int mkdir_p(const char *path, mode_t mode, unsigned flags, const char *what, bool *created,
	    char **err)
{
	char *p = xstrdup(path);
	int rc = 0;
	if (created)
		*created = false;
	/* From p + 1: a leading '/' is the root, not a directory to make. */
	for (char *s = *p ? p + 1 : p;; s++) {
		if (*s != '/' && *s != '\0')
			continue;
		char saved = *s;
		*s = '\0';
		if (mkdir(p, mode) == 0) {
			if (flags & MKDIR_EXACT_MODE)
				chmod(p, mode);
			if (created && !saved)
				*created = true;
		} else if (errno != EEXIST) {
			rc = sys_error(err, what ? what : "cannot create directory", p, errno);
			break;
		}
		*s = saved;
		if (!saved)
			break;
	}
	free(p);
	return rc;
}

/* Moves the first n bytes of *b (cap bytes) into a new buffer of ncap
 * bytes; with READ_WIPE the old one is zeroed before it is freed. */
static void regrow(char **b, size_t n, size_t cap, size_t ncap, unsigned flags)
{
	if (!(flags & READ_WIPE)) {
		*b = xrealloc(*b, ncap);
		return;
	}
	char *nb = xmalloc(ncap);
	memcpy(nb, *b, n);
	explicit_bzero(*b, cap);
	free(*b);
	*b = nb;
}

int read_fd_bounded(int fd, size_t max, unsigned flags, char **data, size_t *len)
{
	/* Room for max + 1 bytes (to see a file over max) and the NUL. */
	size_t cap = max < 8190 ? max + 2 : 8192, n = 0;
	char *b = xmalloc(cap);
	int e = 0;
	for (;;) {
		if (n + 1 == cap) {
			if (n > max) {
				e = EFBIG;
				break;
			}
			size_t ncap = cap > (max + 2) / 2 ? max + 2 : cap * 2;
			regrow(&b, n, cap, ncap, flags);
			cap = ncap;
		}
		ssize_t r = read(fd, b + n, cap - 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			e = r < 0 ? errno : 0;
			break;
		}
		n += (size_t)r;
	}
	if (!e && n > max)
		e = EFBIG;
	if (e) {
		if (flags & READ_WIPE)
			explicit_bzero(b, cap);
		free(b);
		errno = e;
		return -1;
	}
	b[n] = '\0';
	*data = b;
	*len = n;
	return 0;
}

bool owner_mode_ok(const struct stat *st, mode_t loose)
{
	return st->st_uid == geteuid() && !(st->st_mode & loose);
}

int check_owner_mode(const struct stat *st, mode_t loose, const char *what, const char *path,
		     const char *verb, char **err)
{
	if (st->st_uid != geteuid()) {
		*err = xasprintf("%s %s: owned by uid %u, not by the current user (uid %u); "
				 "refusing to %s it",
				 what, path, (unsigned)st->st_uid, (unsigned)geteuid(), verb);
		return -1;
	}
	if (st->st_mode & loose) {
		unsigned want = (S_ISDIR(st->st_mode) ? 0777u : 0666u) & ~(unsigned)loose;
		*err = xasprintf(
			"%s %s: permissions %04o are too open (want %04o); refusing to %s it", what,
			path, (unsigned)(st->st_mode & 07777), want, verb);
		return -1;
	}
	return 0;
}

void signals_block_all(sigset_t *old)
{
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, old);
}

void signals_restore(const sigset_t *old)
{
	pthread_sigmask(SIG_SETMASK, old, NULL);
}

void cond_init_monotonic(pthread_cond_t *c)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(c, &a);
	pthread_condattr_destroy(&a);
}

struct thread_boot {
	void *(*fn)(void *);
	void *arg;
	char comm[16]; /* the kernel's TASK_COMM_LEN */
};

/* Names the thread before it runs anything: named by its creator, it
 * could run (and read or log its name) first. */
static void *thread_boot(void *p)
{
	struct thread_boot b = *(struct thread_boot *)p;
	free(p);
	pthread_setname_np(pthread_self(), b.comm);
	return b.fn(b.arg);
}

int thread_start(pthread_t *t, const char *name, void *(*fn)(void *), void *arg)
{
	struct thread_boot *b = xmalloc(sizeof *b);
	b->fn = fn;
	b->arg = arg;
	strlcpy_(b->comm, name, sizeof b->comm);
	/* The new thread inherits the mask in force when it is created. */
	sigset_t old;
	signals_block_all(&old);
	int e = pthread_create(t, NULL, thread_boot, b);
	signals_restore(&old);
	if (e != 0)
		free(b);
	return e;
}
