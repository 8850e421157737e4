/*
 * Cron parsing, next-occurrence search and descriptions.
 *
 * An expression becomes one bitmask per field. The search runs on local wall
 * time (seconds counted like Unix time, see tz.h) and advances field by
 * field, biggest first: a month not in the mask jumps to the next month in
 * it, a day to the next matching day of that month (one 31-bit mask per
 * month combining day-of-month and day-of-week), and so on down to seconds.
 * Each step either lands on a match or moves a larger field forward, so the
 * cost is a few dozen operations per month searched, never a scan of minutes.
 *
 * Time zones enter only at the two ends, which is what makes DST handling
 * exact. With I(w) = the first instant whose wall clock reads w or later
 * (tz_local_first), I is non-decreasing in w, so the next occurrence after
 * instant t is I(w) for the smallest matching w with I(w) > t, and that w is
 * the first match at or after tz_wall_reached(t) + 1. A wall time skipped by
 * a spring-forward gap maps to the transition instant (ISC cron fires it
 * then); several skipped times, and the first real time after the gap, all
 * share that instant and so fire once. A wall time repeated by a fall-back
 * overlap maps to its first instant, and tz_wall_reached() steps over the
 * second pass, so it fires once. A transition at midnight moves "00:00" to
 * 01:00 or leaves it in place, and never skips the day.
 */
#include "model/cron.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/util.h"

enum { F_SEC, F_MIN, F_HOUR, F_DOM, F_MON, F_DOW, F_COUNT };

struct cron {
	uint64_t bits[F_COUNT];	 /* bit v set when value v matches; Sunday is bit 0 */
	bool dom_star, dow_star; /* the field was "*" or "?": unrestricted */
	bool seconds;		 /* 6-field expression */
};

static const char *const month_names[] = {"JAN", "FEB", "MAR", "APR", "MAY", "JUN",
					  "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"};
static const char *const dow_names[] = {"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"};

static const struct field_spec {
	const char *name;
	int min, max;		  /* accepted values (day-of-week takes 7 for Sunday) */
	int top;		  /* upper end of "*" and "a/step" */
	const char *const *names; /* names[i] is value i + name_base */
	int name_base, nnames;
} fields[F_COUNT] = {
	[F_SEC] = {"second", 0, 59, 59, NULL, 0, 0},
	[F_MIN] = {"minute", 0, 59, 59, NULL, 0, 0},
	[F_HOUR] = {"hour", 0, 23, 23, NULL, 0, 0},
	[F_DOM] = {"day-of-month", 1, 31, 31, NULL, 0, 0},
	[F_MON] = {"month", 1, 12, 12, month_names, 1, 12},
	[F_DOW] = {"day-of-week", 0, 7, 6, dow_names, 0, 7},
};

static const struct {
	const char *name;
	const char *expr;
} descriptors[] = {
	{"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"},
	{"@weekly", "0 0 * * 0"}, {"@daily", "0 0 * * *"},    {"@midnight", "0 0 * * *"},
	{"@hourly", "0 * * * *"},
};

#define T_MIN ((int64_t)0)	      /* 1970: -1 is the "none" result */
#define T_MAX ((int64_t)253402300799) /* 9999-12-31T23:59:59Z */
#define SEARCH_YEARS 10		      /* Feb 29 can be 8 years away (2096 -> 2104) */

/* ---- parsing ----------------------------------------------------------- */

struct perr {
	char *msg; /* the first problem found, without the expression */
};

static void set_err(struct perr *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_err(struct perr *e, const char *fmt, ...)
{
	if (e->msg)
		return;
	va_list ap;
	va_start(ap, fmt);
	e->msg = xvasprintf(fmt, ap);
	va_end(ap);
}

/* Appends s[0..n) to b, escaping quotes, backslashes and non-printable bytes. */
static void append_quoted(struct buf *b, const char *s, size_t n)
{
	buf_append(b, "\"", 1);
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch < 0x20 || ch >= 0x7f || ch == '"' || ch == '\\')
			buf_appendf(b, "\\x%02x", ch);
		else
			buf_append(b, &ch, 1);
	}
	buf_append(b, "\"", 1);
}

static char *quoted(const char *s, size_t n)
{
	struct buf b;
	buf_init(&b, 8 * CRON_EXPR_MAX);
	append_quoted(&b, s, n);
	return buf_steal(&b);
}

static bool is_space(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f';
}

static char upper(char ch)
{
	return ch >= 'a' && ch <= 'z' ? (char)(ch - 'a' + 'A') : ch;
}

/*
 * One value of field f: digits or (months, weekdays) a three-letter name.
 * *is_name tells the caller a name was used (SUN closing a range means 7).
 */
static int parse_value(const struct field_spec *f, const char *s, size_t n, int *out, bool *is_name,
		       struct perr *e)
{
	*is_name = false;
	if (n == 0) {
		set_err(e, "%s: missing value", f->name);
		return -1;
	}
	if (s[0] >= '0' && s[0] <= '9') {
		long v = 0;
		for (size_t i = 0; i < n; i++) {
			if (s[i] < '0' || s[i] > '9') {
				char *q = quoted(s, n);
				set_err(e, "%s: %s is not a number", f->name, q);
				free(q);
				return -1;
			}
			if (v < 100000)
				v = v * 10 + (s[i] - '0');
		}
		if (v < f->min || v > f->max) {
			set_err(e, "%s %.*s out of range %d-%d", f->name, (int)n, s, f->min,
				f->max);
			return -1;
		}
		*out = (int)v;
		return 0;
	}
	if (f->names && n == 3) {
		for (int i = 0; i < f->nnames; i++) {
			const char *nm = f->names[i];
			if (upper(s[0]) == nm[0] && upper(s[1]) == nm[1] && upper(s[2]) == nm[2]) {
				*out = i + f->name_base;
				*is_name = true;
				return 0;
			}
		}
	}
	char *q = quoted(s, n);
	if (f->names)
		set_err(e, "%s: %s is not a number or a %s name", f->name, q,
			f == &fields[F_MON] ? "month" : "weekday");
	else
		set_err(e, "%s: %s is not a number", f->name, q);
	free(q);
	return -1;
}

/* One list item: "*", "?", "a", "a-b", each with an optional "/step". */
static int parse_item(int fi, const char *s, size_t n, uint64_t *mask, bool *star, struct perr *e)
{
	const struct field_spec *f = &fields[fi];
	const char *slash = memchr(s, '/', n);
	size_t rn = slash ? (size_t)(slash - s) : n;
	int lo, hi, step = 1;
	bool wildcard = false;

	if (slash) {
		const char *st = slash + 1;
		size_t sn = n - rn - 1;
		long v = 0;
		if (sn == 0) {
			set_err(e, "%s: missing step after '/'", f->name);
			return -1;
		}
		for (size_t i = 0; i < sn; i++) {
			if (st[i] < '0' || st[i] > '9') {
				char *q = quoted(st, sn);
				set_err(e, "%s: step %s is not a number", f->name, q);
				free(q);
				return -1;
			}
			if (v < 100000)
				v = v * 10 + (st[i] - '0');
		}
		int span = f->top - f->min + 1;
		if (v < 1 || v > span) {
			set_err(e, "%s step %.*s out of range 1-%d", f->name, (int)sn, st, span);
			return -1;
		}
		step = (int)v;
	}
	if (rn == 1 && (s[0] == '*' || s[0] == '?')) {
		if (s[0] == '?' && fi != F_DOM && fi != F_DOW) {
			set_err(e, "%s: '?' is only allowed for day-of-month and day-of-week",
				f->name);
			return -1;
		}
		lo = f->min;
		hi = f->top;
		wildcard = true;
	} else {
		const char *dash = memchr(s, '-', rn);
		bool lo_name, hi_name;
		if (dash && (dash == s || dash == s + rn - 1)) {
			char *q = quoted(s, rn);
			set_err(e, "%s: range %s is missing an end", f->name, q);
			free(q);
			return -1;
		}
		if (parse_value(f, s, dash ? (size_t)(dash - s) : rn, &lo, &lo_name, e) < 0)
			return -1;
		if (dash) {
			if (parse_value(f, dash + 1, rn - (size_t)(dash - s) - 1, &hi, &hi_name,
					e) < 0)
				return -1;
			if (fi == F_DOW && hi_name && hi == 0)
				hi = 7; /* MON-SUN */
			if (hi < lo) {
				set_err(e, "%s range %.*s is reversed", f->name, (int)rn, s);
				return -1;
			}
		} else {
			hi = slash ? f->top : lo;
			if (hi < lo) /* "7/2" in day-of-week */
				hi = lo;
		}
	}
	for (int v = lo; v <= hi; v += step)
		*mask |= (uint64_t)1 << v;
	if (wildcard && step == 1)
		*star = true;
	return 0;
}

static int parse_field(int fi, const char *s, size_t n, uint64_t *mask, bool *star, struct perr *e)
{
	size_t i = 0;
	int items = 0;
	bool item_star = false;
	*mask = 0;
	for (;;) {
		size_t j = i;
		while (j < n && s[j] != ',')
			j++;
		if (j == i) {
			set_err(e, "%s: empty list item", fields[fi].name);
			return -1;
		}
		if (parse_item(fi, s + i, j - i, mask, &item_star, e) < 0)
			return -1;
		items++;
		if (j == n)
			break;
		i = j + 1;
	}
	/* Only a lone "*" or "?" leaves the day fields unrestricted. */
	*star = items == 1 && item_star;
	if (fi == F_DOW && (*mask & ((uint64_t)1 << 7))) {
		*mask &= ~((uint64_t)1 << 7);
		*mask |= 1;
	}
	return 0;
}

/* Could some month in the mask ever contain one of the selected days? */
static bool can_fire(const struct cron *c)
{
	if (c->dom_star || !c->dow_star)
		return true; /* every month has every weekday */
	for (int m = 1; m <= 12; m++) {
		if (!(c->bits[F_MON] & ((uint64_t)1 << m)))
			continue;
		int dim = m == 2 ? 29 : tz_days_in_month(2001, m);
		uint64_t days = (((uint64_t)1 << (dim + 1)) - 1) & ~(uint64_t)1;
		if (c->bits[F_DOM] & days)
			return true;
	}
	return false;
}

static int parse_fields(const char *s, struct cron *c, struct perr *e)
{
	const char *tok[F_COUNT + 1];
	size_t len[F_COUNT + 1];
	int n = 0;
	const char *p = s;
	for (;;) {
		while (*p && is_space(*p))
			p++;
		if (!*p)
			break;
		const char *b = p;
		while (*p && !is_space(*p))
			p++;
		if (n < F_COUNT) {
			tok[n] = b;
			len[n] = (size_t)(p - b);
		}
		n++;
	}
	if (n != 5 && n != 6) {
		set_err(e, "expected 5 or 6 fields, found %d", n);
		return -1;
	}
	c->seconds = n == 6;
	int first = n == 6 ? F_SEC : F_MIN;
	if (n == 5)
		c->bits[F_SEC] = 1;
	for (int fi = first; fi < F_COUNT; fi++) {
		bool star = false;
		if (parse_field(fi, tok[fi - first], len[fi - first], &c->bits[fi], &star, e) < 0)
			return -1;
		if (fi == F_DOM)
			c->dom_star = star;
		if (fi == F_DOW)
			c->dow_star = star;
	}
	if (!can_fire(c)) {
		set_err(e, "never fires: the selected days of the month do not occur in the "
			   "selected months");
		return -1;
	}
	return 0;
}

int cron_parse(const char *expr, struct cron **out, char **err)
{
	struct perr e = {NULL};
	struct cron *c = NULL;
	*out = NULL;
	*err = NULL;
	size_t n = strlen(expr);
	if (n > CRON_EXPR_MAX) {
		*err = xasprintf("cron expression longer than %d bytes", CRON_EXPR_MAX);
		return -1;
	}
	const char *s = expr;
	while (is_space(*s))
		s++;
	size_t sn = strlen(s);
	while (sn && is_space(s[sn - 1]))
		sn--;

	c = xcalloc(1, sizeof *c);
	if (sn == 0) {
		set_err(&e, "empty expression");
	} else if (strncasecmp(s, "TZ=", 3) == 0 || strncasecmp(s, "CRON_TZ=", 8) == 0) {
		set_err(&e, "a time zone prefix is not allowed (set the schedule's timezone)");
	} else if (s[0] == '@') {
		size_t i;
		for (i = 0; i < ARRAY_LEN(descriptors); i++) {
			if (strlen(descriptors[i].name) == sn &&
			    strncasecmp(s, descriptors[i].name, sn) == 0)
				break;
		}
		if (i == ARRAY_LEN(descriptors)) {
			size_t wn = 0;
			while (wn < sn && !is_space(s[wn]))
				wn++;
			for (i = 0; i < ARRAY_LEN(descriptors); i++) {
				if (strlen(descriptors[i].name) == wn &&
				    strncasecmp(s, descriptors[i].name, wn) == 0)
					break;
			}
			char *q = quoted(s, wn);
			if (i < ARRAY_LEN(descriptors))
				set_err(&e, "descriptor %s takes no fields", descriptors[i].name);
			else
				set_err(&e, "unknown descriptor %s", q);
			free(q);
		} else {
			parse_fields(descriptors[i].expr, c, &e);
		}
	} else {
		parse_fields(s, c, &e);
	}
	if (e.msg) {
		struct buf b;
		buf_init(&b, 16 * CRON_EXPR_MAX);
		buf_append(&b, "cron ", 5);
		append_quoted(&b, expr, n);
		buf_appendf(&b, ": %s", e.msg);
		*err = buf_steal(&b);
		free(e.msg);
		free(c);
		return -1;
	}
	*out = c;
	return 0;
}

void cron_free(struct cron *c)
{
	free(c);
}

bool cron_has_seconds(const struct cron *c)
{
	return c->seconds;
}

/* ---- next occurrence --------------------------------------------------- */

/* Smallest set bit >= from, or -1. */
static int next_bit(uint64_t mask, int from)
{
	if (from > 63)
		return -1;
	uint64_t m = mask & (~(uint64_t)0 << from);
	return m ? __builtin_ctzll(m) : -1;
}

static int64_t floor_div(int64_t a, int64_t b)
{
	int64_t q = a / b;
	return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

/* Days of month mo of year y that match: bit d for day d. */
static uint64_t day_mask(const struct cron *c, int64_t y, int mo)
{
	int dim = tz_days_in_month(y, mo);
	uint64_t valid = (((uint64_t)1 << (dim + 1)) - 1) & ~(uint64_t)1;
	if (c->dom_star && c->dow_star)
		return valid;
	uint64_t dow = 0;
	if (!c->dow_star) {
		int64_t first = tz_days_from_civil(y, mo, 1);
		int wd1 = (int)(((first % 7) + 7 + 4) % 7); /* 1970-01-01 was a Thursday */
		uint64_t pat = 0;			    /* bit k: day 1 + k */
		for (int k = 0; k < 7; k++)
			if (c->bits[F_DOW] & ((uint64_t)1 << ((wd1 + k) % 7)))
				pat |= (uint64_t)1 << k;
		dow = (pat | pat << 7 | pat << 14 | pat << 21 | pat << 28) << 1;
	}
	uint64_t m;
	if (c->dom_star)
		m = dow;
	else if (c->dow_star)
		m = c->bits[F_DOM];
	else
		m = c->bits[F_DOM] | dow;
	return m & valid;
}

#define NO_WALL INT64_MIN

/* The first matching wall time >= w within SEARCH_YEARS, or NO_WALL. */
static int64_t next_wall(const struct cron *c, int64_t w)
{
	int64_t days = floor_div(w, 86400);
	int secs = (int)(w - days * 86400);
	int64_t y;
	int mo, d;
	tz_civil_from_days(days, &y, &mo, &d);
	int h = secs / 3600, mi = secs / 60 % 60, s = secs % 60;
	int64_t ylimit = y + SEARCH_YEARS;

	for (;;) {
		if (y > ylimit || y > 9999)
			return NO_WALL;
		int nmo = next_bit(c->bits[F_MON], mo);
		if (nmo < 0) {
			y++;
			mo = d = 1;
			h = mi = s = 0;
			continue;
		}
		if (nmo != mo) {
			mo = nmo;
			d = 1;
			h = mi = s = 0;
		}
		int nd = next_bit(day_mask(c, y, mo), d);
		if (nd < 0) {
			if (++mo > 12) {
				y++;
				mo = 1;
			}
			d = 1;
			h = mi = s = 0;
			continue;
		}
		if (nd != d) {
			d = nd;
			h = mi = s = 0;
		}
		int nh = next_bit(c->bits[F_HOUR], h);
		if (nh < 0) {
			d++; /* past the month's end day_mask finds nothing: next month */
			h = mi = s = 0;
			continue;
		}
		if (nh != h) {
			h = nh;
			mi = s = 0;
		}
		int nmi = next_bit(c->bits[F_MIN], mi);
		if (nmi < 0) {
			h++;
			mi = s = 0;
			continue;
		}
		if (nmi != mi) {
			mi = nmi;
			s = 0;
		}
		int ns = next_bit(c->bits[F_SEC], s);
		if (ns < 0) {
			mi++;
			s = 0;
			continue;
		}
		return tz_days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + ns;
	}
}

int64_t cron_next(const struct cron *c, const struct tz *z, int64_t after)
{
	if (after < T_MIN || after >= T_MAX)
		return -1;
	if (!z || z == tz_utc()) {
		int64_t m = next_wall(c, after + 1);
		return m == NO_WALL ? -1 : m;
	}
	int64_t w = tz_wall_reached(z, after) + 1;
	/* One pass suffices (see the top of the file); the loop is a guard. */
	for (int i = 0; i < 4; i++) {
		int64_t m = next_wall(c, w);
		if (m == NO_WALL)
			return -1; /* wall times before 1970 are fine, hence no "< 0" */
		int64_t t = tz_local_first(z, m);
		if (t > after)
			return t;
		w = m + 1;
	}
	return -1;
}

/* ---- descriptions ------------------------------------------------------ */

#define LIST_MAX 8 /* more groups than this is not worth reading */

enum shape { S_FULL, S_SINGLE, S_STEP, S_STEP_FROM, S_RANGE, S_LIST };

struct vals {
	int v[64];
	int n;
	int lo, hi; /* the field's bounds */
	enum shape shape;
	int step;
};

static void classify(uint64_t mask, int lo, int hi, struct vals *s)
{
	s->n = 0;
	s->lo = lo;
	s->hi = hi;
	for (int v = lo; v <= hi; v++)
		if (mask & ((uint64_t)1 << v))
			s->v[s->n++] = v;
	s->step = 0;
	if (s->n == hi - lo + 1) {
		s->shape = S_FULL;
		return;
	}
	if (s->n == 1) {
		s->shape = S_SINGLE;
		return;
	}
	int step = s->v[1] - s->v[0];
	bool even = true;
	for (int i = 2; i < s->n; i++)
		if (s->v[i] - s->v[i - 1] != step)
			even = false;
	if (even && step == 1 && s->n >= 3) {
		s->shape = S_RANGE;
		return;
	}
	/* What "*\/n" or "a/n" produces: evenly spaced up to the field's end. */
	if (even && step >= 2 && s->v[s->n - 1] + step > hi && s->v[0] - lo < step) {
		if (s->v[0] == lo) {
			s->shape = S_STEP;
			s->step = step;
			return;
		}
		if (s->n >= 3) {
			s->shape = S_STEP_FROM;
			s->step = step;
			return;
		}
	}
	s->shape = S_LIST;
}

typedef void (*fmt_fn)(struct buf *b, int v);

static void fmt_num(struct buf *b, int v)
{
	buf_appendf(b, "%d", v);
}

static void fmt_hour(struct buf *b, int v)
{
	buf_appendf(b, "%02d", v);
}

static void fmt_month(struct buf *b, int v)
{
	static const char *const names[] = {"January",	 "February", "March",	 "April",
					    "May",	 "June",     "July",	 "August",
					    "September", "October",  "November", "December"};
	buf_appendf(b, "%s", names[v - 1]);
}

static void fmt_dow(struct buf *b, int v)
{
	static const char *const names[] = {"Sunday",	"Monday", "Tuesday", "Wednesday",
					    "Thursday", "Friday", "Saturday"};
	buf_appendf(b, "%s", names[v]);
}

/* "a, b through c and d": runs of three or more become ranges. */
static int append_list(struct buf *b, const struct vals *s, fmt_fn fmt)
{
	int starts[64], ends[64], g = 0;
	for (int i = 0; i < s->n;) {
		int j = i;
		while (j + 1 < s->n && s->v[j + 1] == s->v[j] + 1)
			j++;
		if (j - i >= 2) {
			starts[g] = s->v[i];
			ends[g++] = s->v[j];
		} else {
			for (int k = i; k <= j; k++) {
				starts[g] = ends[g] = s->v[k];
				g++;
			}
		}
		i = j + 1;
	}
	if (g > LIST_MAX)
		return -1;
	for (int i = 0; i < g; i++) {
		if (i)
			buf_appendf(b, i == g - 1 ? " and " : ", ");
		fmt(b, starts[i]);
		if (ends[i] != starts[i]) {
			buf_appendf(b, " through ");
			fmt(b, ends[i]);
		}
	}
	return 0;
}

/* Seconds or minutes: unit "second"/"minute", of "minute"/"hour". */
static int phrase_sub(struct buf *b, const struct vals *s, const char *unit, const char *of)
{
	switch (s->shape) {
	case S_FULL: buf_appendf(b, "every %s", unit); return 0;
	case S_STEP: buf_appendf(b, "every %d %ss", s->step, unit); return 0;
	case S_STEP_FROM:
		buf_appendf(b, "every %d %ss, starting at %d %s%s past the %s", s->step, unit,
			    s->v[0], unit, s->v[0] == 1 ? "" : "s", of);
		return 0;
	case S_SINGLE:
		buf_appendf(b, "at %d %s%s past the %s", s->v[0], unit, s->v[0] == 1 ? "" : "s",
			    of);
		return 0;
	case S_RANGE:
		buf_appendf(b, "%ss %d through %d past the %s", unit, s->v[0], s->v[s->n - 1], of);
		return 0;
	case S_LIST:
		buf_appendf(b, "at ");
		if (append_list(b, s, fmt_num) < 0)
			return -1;
		buf_appendf(b, " %ss past the %s", unit, of);
		return 0;
	}
	return -1;
}

static int phrase_hour(struct buf *b, const struct vals *s)
{
	switch (s->shape) {
	case S_FULL: return 0;
	case S_STEP: buf_appendf(b, "every %d hours", s->step); return 0;
	case S_STEP_FROM:
		buf_appendf(b, "every %d hours, starting at %02d:00", s->step, s->v[0]);
		return 0;
	case S_SINGLE:
	case S_RANGE:
		buf_appendf(b, "between %02d:00 and %02d:59", s->v[0], s->v[s->n - 1]);
		return 0;
	case S_LIST: buf_appendf(b, "during hours "); return append_list(b, s, fmt_hour);
	}
	return -1;
}

/* Two values read better as a list than as a step ("1,7" is not "every 6"). */
static enum shape calendar_shape(const struct vals *s)
{
	return s->shape == S_STEP && s->n == 2 ? S_LIST : s->shape;
}

static int phrase_dom(struct buf *b, const struct vals *s)
{
	switch (calendar_shape(s)) {
	case S_FULL: return 0;
	case S_SINGLE: buf_appendf(b, "on day %d of the month", s->v[0]); return 0;
	case S_RANGE:
		buf_appendf(b, "between day %d and %d of the month", s->v[0], s->v[s->n - 1]);
		return 0;
	case S_STEP: buf_appendf(b, "every %d days", s->step); return 0;
	case S_STEP_FROM:
		buf_appendf(b, "every %d days, starting on day %d of the month", s->step, s->v[0]);
		return 0;
	case S_LIST:
		buf_appendf(b, "on days ");
		if (append_list(b, s, fmt_num) < 0)
			return -1;
		buf_appendf(b, " of the month");
		return 0;
	}
	return -1;
}

static int phrase_dow(struct buf *b, const struct vals *s, bool in_or)
{
	if (s->shape == S_FULL)
		return 0;
	/* Monday-first ranges read better ("Friday through Sunday"). */
	uint64_t mask = 0;
	for (int i = 0; i < s->n; i++)
		mask |= (uint64_t)1 << s->v[i];
	uint64_t mon_first = mask & 1 ? (mask & ~(uint64_t)1) | (uint64_t)1 << 7 : mask;
	struct vals r;
	classify(mon_first, 1, 7, &r);
	if (s->n >= 3 && (s->shape == S_RANGE || r.shape == S_RANGE)) {
		const struct vals *x = s->shape == S_RANGE ? s : &r;
		buf_appendf(b, "%s", in_or ? "on " : "");
		fmt_dow(b, x->v[0] % 7);
		buf_appendf(b, " through ");
		fmt_dow(b, x->v[x->n - 1] % 7);
		return 0;
	}
	buf_appendf(b, in_or ? "on " : "only on ");
	struct vals l = *s;
	l.shape = S_LIST;
	return append_list(b, &l, fmt_dow);
}

static int phrase_month(struct buf *b, const struct vals *s)
{
	switch (calendar_shape(s)) {
	case S_FULL: return 0;
	case S_SINGLE:
		buf_appendf(b, "only in ");
		fmt_month(b, s->v[0]);
		return 0;
	case S_RANGE:
		fmt_month(b, s->v[0]);
		buf_appendf(b, " through ");
		fmt_month(b, s->v[s->n - 1]);
		return 0;
	case S_STEP: buf_appendf(b, "every %d months", s->step); return 0;
	case S_STEP_FROM:
		buf_appendf(b, "every %d months, starting in ", s->step);
		fmt_month(b, s->v[0]);
		return 0;
	case S_LIST: buf_appendf(b, "only in "); return append_list(b, s, fmt_month);
	}
	return -1;
}

/* Appends ", " unless b is empty. */
static void sep(struct buf *b)
{
	if (b->len)
		buf_appendf(b, ", ");
}

static int describe_time(struct buf *b, const struct cron *c)
{
	struct vals S, M, H;
	classify(c->bits[F_SEC], 0, 59, &S);
	classify(c->bits[F_MIN], 0, 59, &M);
	classify(c->bits[F_HOUR], 0, 23, &H);
	bool sec0 = S.shape == S_SINGLE && S.v[0] == 0;

	/* A handful of exact times: "At 08:00 and 17:30" (but "Every 6 hours"). */
	bool hourly_steps = sec0 && M.shape == S_SINGLE && M.v[0] == 0 && H.shape == S_STEP;
	if (S.shape == S_SINGLE && M.shape != S_FULL && H.shape != S_FULL && !hourly_steps &&
	    M.n * H.n <= (M.n == 1 ? 8 : 6)) {
		buf_appendf(b, "at ");
		int k = 0, total = M.n * H.n;
		for (int i = 0; i < H.n; i++) {
			for (int j = 0; j < M.n; j++, k++) {
				if (k)
					buf_appendf(b, k == total - 1 ? " and " : ", ");
				buf_appendf(b, "%02d:%02d", H.v[i], M.v[j]);
				if (!sec0)
					buf_appendf(b, ":%02d", S.v[0]);
			}
		}
		return 0;
	}
	if (!sec0 && phrase_sub(b, &S, "second", "minute") < 0)
		return -1;
	if (M.shape == S_FULL) {
		if (sec0)
			buf_appendf(b, "every minute");
	} else if (sec0 && M.shape == S_SINGLE && M.v[0] == 0) {
		if (H.shape != S_STEP) /* "every 2 hours" says it all */
			buf_appendf(b, "every hour");
	} else {
		sep(b);
		if (phrase_sub(b, &M, "minute", "hour") < 0)
			return -1;
	}
	if (H.shape != S_FULL) {
		sep(b);
		if (phrase_hour(b, &H) < 0)
			return -1;
	}
	return 0;
}

static int describe_days(struct buf *b, const struct cron *c)
{
	struct vals D, W, Mo;
	classify(c->bits[F_DOM], 1, 31, &D);
	classify(c->bits[F_DOW], 0, 6, &W);
	classify(c->bits[F_MON], 1, 12, &Mo);
	if (!c->dom_star && !c->dow_star) {
		/* Either matches (Vixie cron); a full side means every day. */
		if (D.shape != S_FULL && W.shape != S_FULL) {
			sep(b);
			if (phrase_dom(b, &D) < 0)
				return -1;
			buf_appendf(b, " or ");
			if (phrase_dow(b, &W, true) < 0)
				return -1;
		}
	} else if (!c->dom_star && D.shape != S_FULL) {
		sep(b);
		if (phrase_dom(b, &D) < 0)
			return -1;
	} else if (!c->dow_star && W.shape != S_FULL) {
		sep(b);
		if (phrase_dow(b, &W, false) < 0)
			return -1;
	}
	if (Mo.shape != S_FULL) {
		sep(b);
		if (phrase_month(b, &Mo) < 0)
			return -1;
	}
	return 0;
}

char *cron_describe(const struct cron *c)
{
	struct buf b;
	buf_init(&b, 4096);
	if (describe_time(&b, c) < 0 || describe_days(&b, c) < 0 || b.len == 0) {
		buf_free(&b);
		return NULL;
	}
	char *s = buf_steal(&b);
	s[0] = upper(s[0]);
	return s;
}
