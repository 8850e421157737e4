/*
 * TZif reader and zone arithmetic.
 *
 * A zone is a sequence of periods, each a half-open instant range [start,
 * end) with one UTC offset. Up to the last transition of the file the
 * periods come from the transition table; after it, from the POSIX TZ footer
 * rule, whose transitions are generated per year on demand (no table is
 * built, so far-future instants cost the same as near ones). Every query is
 * expressed through period_at(), which makes the gap/overlap logic of the
 * wall-time conversions independent of where the data came from.
 *
 * Offsets are bounded to +-26 h (RFC 8536 requires -89999..93599), so every
 * instant showing a given wall time lies within 26 h of it: the wall-time
 * queries only ever walk the periods in that window. A file may put at most
 * TZ_WINDOW_TRANS transitions in any such window (real zones never put two
 * closer than four days apart), and a footer rule adds at most four more, so
 * the walks' bound of TZ_WALK_MAX periods is never reached and their answers
 * are exact (a denser file is refused when it is parsed).
 */
#include "base/tz.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"

#define TZ_DEFAULT_ROOT "/usr/share/zoneinfo"
#define TZ_NAME_MAX 255
#define TZ_MAX_OFF (26 * 3600)
/* Transitions allowed within any 2 * TZ_MAX_OFF + 2 seconds, and the number
 * of periods a wall-time walk may visit (more than the window can hold). */
#define TZ_WINDOW_TRANS 16
#define TZ_WALK_MAX 64
/* Instants are clamped to about +-100,000 years so calendar maths cannot overflow. */
#define TZ_T_LIMIT ((int64_t)3155760000000)
#define TZ_ABBR_MAX 32

struct tz_type {
	int32_t utoff;
	bool isdst;
	uint8_t abbr; /* index into chars */
};

/* One end of a POSIX TZ rule: a date form and a local time of day. */
struct rule_date {
	char kind; /* 'J' (Jn, 1-365, no Feb 29), 'N' (n, 0-365), 'M' (Mm.w.d) */
	int n, m, w, d;
	int32_t time; /* seconds, -167h..167h */
};

struct tz_rule {
	bool present;
	bool has_dst;
	int32_t std_off, dst_off; /* UTC offsets, east positive */
	char std_abbr[TZ_ABBR_MAX], dst_abbr[TZ_ABBR_MAX];
	struct rule_date start, end;
};

struct tz {
	char *name;
	char *path; /* cache key; NULL for the built-in UTC */
	size_t ntrans;
	int64_t *trans;
	uint8_t *tidx;
	size_t ntypes;
	struct tz_type *types;
	char *chars;
	size_t nchars;
	struct tz_rule rule;
	struct tz *next; /* cache list */
};

struct period {
	int64_t start, end; /* INT64_MIN / INT64_MAX when unbounded */
	int32_t off;
	bool isdst;
	const char *abbr;
};

static struct tz utc_zone = {
	.name = "UTC",
	.rule = {.present = true, .std_abbr = "UTC"},
};

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static struct tz *cache_head; /* guarded by cache_mu */
static char *root_override;   /* guarded by cache_mu */

/* ---- calendar ---------------------------------------------------------- */

/* Howard Hinnant's days_from_civil / civil_from_days. */
int64_t tz_days_from_civil(int64_t y, int m, int d)
{
	y -= m <= 2;
	int64_t era = (y >= 0 ? y : y - 399) / 400;
	int64_t yoe = y - era * 400;
	int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

void tz_civil_from_days(int64_t z, int64_t *year, int *mon, int *mday)
{
	z += 719468;
	int64_t era = (z >= 0 ? z : z - 146096) / 146097;
	int64_t doe = z - era * 146097;
	int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	int64_t mp = (5 * doy + 2) / 153;
	int d = (int)(doy - (153 * mp + 2) / 5 + 1);
	int m = (int)(mp < 10 ? mp + 3 : mp - 9);
	*year = yoe + era * 400 + (m <= 2);
	*mon = m;
	*mday = d;
}

int tz_is_leap(int64_t y)
{
	return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

int tz_days_in_month(int64_t y, int m)
{
	static const int dim[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	if (m < 1 || m > 12)
		return 0;
	return m == 2 && tz_is_leap(y) ? 29 : dim[m - 1];
}

static int64_t floor_div(int64_t a, int64_t b)
{
	int64_t q = a / b;
	return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

static int64_t clamp_t(int64_t t)
{
	return t < -TZ_T_LIMIT ? -TZ_T_LIMIT : t > TZ_T_LIMIT ? TZ_T_LIMIT : t;
}

/* ---- POSIX TZ rules ---------------------------------------------------- */

/* Day of the year (0-based) on which a rule date falls in year y. */
static int64_t rule_yday(const struct rule_date *r, int64_t y)
{
	switch (r->kind) {
	case 'J': return r->n - 1 + (tz_is_leap(y) && r->n >= 60);
	case 'N': return r->n;
	default: {
		int64_t first = tz_days_from_civil(y, r->m, 1);
		int wd1 = (int)((first % 7 + 7 + 4) % 7); /* 1970-01-01 was a Thursday */
		int day = 1 + (r->d - wd1 + 7) % 7 + (r->w - 1) * 7;
		int dim = tz_days_in_month(y, r->m);
		while (day > dim)
			day -= 7;
		return first + day - 1 - tz_days_from_civil(y, 1, 1);
	}
	}
}

struct rule_trans {
	int64_t at;
	bool to_dst;
};

/* The period of a DST-observing rule that contains t. */
static void rule_period(const struct tz_rule *r, int64_t t, struct period *p)
{
	if (!r->has_dst) {
		p->start = INT64_MIN;
		p->end = INT64_MAX;
		p->off = r->std_off;
		p->isdst = false;
		p->abbr = r->std_abbr;
		return;
	}
	int64_t y0;
	int mon, mday;
	tz_civil_from_days(floor_div(t + r->std_off, 86400), &y0, &mon, &mday);
	/* Offsets and times of day move a transition at most ~8 days away from
	 * its local date, so years y0-2..y0+2 surely bracket t. */
	struct rule_trans tr[10];
	int n = 0;
	for (int64_t y = y0 - 2; y <= y0 + 2; y++) {
		int64_t jan1 = tz_days_from_civil(y, 1, 1);
		/* DST starts at a local standard time and ends at a local DST time. */
		tr[n].at = (jan1 + rule_yday(&r->start, y)) * 86400 + r->start.time - r->std_off;
		tr[n++].to_dst = true;
		tr[n].at = (jan1 + rule_yday(&r->end, y)) * 86400 + r->end.time - r->dst_off;
		tr[n++].to_dst = false;
	}
	/* Stable insertion sort: southern-hemisphere rules end before they start. */
	for (int i = 1; i < n; i++) {
		struct rule_trans x = tr[i];
		int j = i - 1;
		while (j >= 0 && tr[j].at > x.at) {
			tr[j + 1] = tr[j];
			j--;
		}
		tr[j + 1] = x;
	}
	int k = -1;
	for (int i = 0; i < n && tr[i].at <= t; i++)
		k = i;
	bool dst;
	if (k < 0) {
		p->start = INT64_MIN;
		dst = !tr[0].to_dst;
	} else {
		p->start = tr[k].at;
		dst = tr[k].to_dst;
	}
	p->end = k + 1 < n ? tr[k + 1].at : INT64_MAX;
	p->off = dst ? r->dst_off : r->std_off;
	p->isdst = dst;
	p->abbr = dst ? r->dst_abbr : r->std_abbr;
}

/* ---- periods ----------------------------------------------------------- */

static void type_period(const struct tz *z, size_t type, struct period *p)
{
	p->off = z->types[type].utoff;
	p->isdst = z->types[type].isdst;
	p->abbr = z->chars + z->types[type].abbr;
}

static void period_at(const struct tz *z, int64_t t, struct period *p)
{
	if (z->ntrans == 0) {
		if (z->rule.present) {
			rule_period(&z->rule, t, p);
		} else {
			p->start = INT64_MIN;
			p->end = INT64_MAX;
			type_period(z, 0, p);
		}
		return;
	}
	if (t < z->trans[0]) {
		/* RFC 8536: type 0 describes the time before the first transition. */
		p->start = INT64_MIN;
		p->end = z->trans[0];
		type_period(z, 0, p);
		return;
	}
	size_t lo = 0, hi = z->ntrans; /* last i with trans[i] <= t */
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (z->trans[mid] <= t)
			lo = mid;
		else
			hi = mid;
	}
	if (lo + 1 < z->ntrans) {
		p->start = z->trans[lo];
		p->end = z->trans[lo + 1];
		type_period(z, z->tidx[lo], p);
		return;
	}
	if (z->rule.present) {
		rule_period(&z->rule, t, p);
		if (p->start < z->trans[lo])
			p->start = z->trans[lo];
		return;
	}
	p->start = z->trans[lo];
	p->end = INT64_MAX;
	type_period(z, z->tidx[lo], p);
}

long tz_offset(const struct tz *z, int64_t t)
{
	struct period p;
	period_at(z, clamp_t(t), &p);
	return p.off;
}

void tz_localtime(const struct tz *z, int64_t t, struct tz_tm *out)
{
	struct period p;
	t = clamp_t(t);
	period_at(z, t, &p);
	int64_t w = t + p.off;
	int64_t days = floor_div(w, 86400);
	int64_t secs = w - days * 86400;
	tz_civil_from_days(days, &out->year, &out->mon, &out->mday);
	out->hour = (int)(secs / 3600);
	out->min = (int)(secs / 60 % 60);
	out->sec = (int)(secs % 60);
	out->wday = (int)((days % 7 + 7 + 4) % 7);
	out->yday = (int)(days - tz_days_from_civil(out->year, 1, 1));
	out->offset = p.off;
	out->isdst = p.isdst;
	out->abbr = p.abbr;
}

/* Upper bound of the wall times shown during p (exclusive); saturating. */
static int64_t wall_end(const struct period *p)
{
	return p->end == INT64_MAX ? INT64_MAX : p->end + p->off;
}

int64_t tz_local_first(const struct tz *z, int64_t wall)
{
	wall = clamp_t(wall);
	/* Every instant before lo shows a wall time below wall. */
	int64_t t = wall - TZ_MAX_OFF - 1;
	for (int i = 0; i < TZ_WALK_MAX; i++) {
		struct period p;
		period_at(z, t, &p);
		if (wall < wall_end(&p)) {
			int64_t cand = p.start > t ? p.start : t;
			if (wall - p.off > cand)
				cand = wall - p.off;
			if (cand < p.end)
				return cand;
		}
		if (p.end == INT64_MAX)
			break;
		t = p.end;
	}
	return wall; /* unreachable with offsets bounded by TZ_MAX_OFF */
}

int tz_local_resolve(const struct tz *z, int64_t wall, int64_t out[2])
{
	wall = clamp_t(wall);
	int n = 0;
	int64_t t = wall - TZ_MAX_OFF - 1;
	int64_t hi = wall + TZ_MAX_OFF + 1;
	for (int i = 0; i < TZ_WALK_MAX && t <= hi; i++) {
		struct period p;
		period_at(z, t, &p);
		int64_t cand = wall - p.off;
		if (cand >= p.start && cand < p.end && cand >= t && n < 2)
			out[n++] = cand;
		if (p.end == INT64_MAX)
			break;
		t = p.end;
	}
	if (n == 0)
		out[0] = tz_local_first(z, wall);
	return n;
}

int64_t tz_wall_reached(const struct tz *z, int64_t t)
{
	struct period p;
	t = clamp_t(t);
	period_at(z, t, &p);
	int64_t best = t + p.off;
	for (int i = 0; i < TZ_WALK_MAX; i++) {
		/* Instants before p.start show wall times below p.start + 26 h. */
		if (p.start == INT64_MIN || p.start + TZ_MAX_OFF <= best)
			break;
		int64_t s = p.start;
		period_at(z, s - 1, &p);
		if (s - 1 + p.off > best)
			best = s - 1 + p.off;
	}
	return best;
}

/* ---- POSIX TZ string parsing ------------------------------------------- */

static int parse_num(const char **s, int max, int *out)
{
	const char *p = *s;
	int v = 0, digits = 0;
	while (*p >= '0' && *p <= '9') {
		v = v * 10 + (*p - '0');
		if (v > max || ++digits > 3)
			return -1;
		p++;
	}
	if (!digits)
		return -1;
	*s = p;
	*out = v;
	return 0;
}

/* [+-]hh[:mm[:ss]] with hh <= max_h; returns seconds. */
static int parse_hms(const char **s, int max_h, int32_t *out)
{
	const char *p = *s;
	int sign = 1, h, m = 0, sec = 0;
	if (*p == '+' || *p == '-')
		sign = *p++ == '-' ? -1 : 1;
	if (parse_num(&p, max_h, &h) < 0)
		return -1;
	if (*p == ':') {
		p++;
		if (parse_num(&p, 59, &m) < 0)
			return -1;
		if (*p == ':') {
			p++;
			if (parse_num(&p, 59, &sec) < 0)
				return -1;
		}
	}
	*s = p;
	*out = sign * (h * 3600 + m * 60 + sec);
	return 0;
}

static int parse_abbr(const char **s, char *dst)
{
	const char *p = *s, *b, *e;
	if (*p == '<') {
		b = ++p;
		while (*p && *p != '>') {
			if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
			      (*p >= '0' && *p <= '9') || *p == '+' || *p == '-'))
				return -1;
			p++;
		}
		if (*p != '>')
			return -1;
		e = p++;
	} else {
		b = p;
		while ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z'))
			p++;
		e = p;
	}
	size_t n = (size_t)(e - b);
	if (n < 3 || n >= TZ_ABBR_MAX)
		return -1;
	memcpy(dst, b, n);
	dst[n] = '\0';
	*s = p;
	return 0;
}

static int parse_rule_date(const char **s, struct rule_date *d)
{
	const char *p = *s;
	if (*p == 'J') {
		p++;
		d->kind = 'J';
		if (parse_num(&p, 365, &d->n) < 0 || d->n < 1)
			return -1;
	} else if (*p == 'M') {
		p++;
		d->kind = 'M';
		if (parse_num(&p, 12, &d->m) < 0 || d->m < 1 || *p++ != '.' ||
		    parse_num(&p, 5, &d->w) < 0 || d->w < 1 || *p++ != '.' ||
		    parse_num(&p, 6, &d->d) < 0)
			return -1;
	} else {
		d->kind = 'N';
		if (parse_num(&p, 365, &d->n) < 0)
			return -1;
	}
	d->time = 2 * 3600;
	if (*p == '/') {
		p++;
		/* RFC 8536 3.3.1 extends POSIX: hours from -167 to 167. */
		if (parse_hms(&p, 167, &d->time) < 0)
			return -1;
	}
	*s = p;
	return 0;
}

static int parse_posix_tz(const char *s, struct tz_rule *r)
{
	memset(r, 0, sizeof *r);
	int32_t off;
	if (parse_abbr(&s, r->std_abbr) < 0 || parse_hms(&s, 24, &off) < 0)
		return -1;
	r->std_off = -off; /* POSIX counts west positive */
	r->present = true;
	if (!*s)
		return 0;
	if (parse_abbr(&s, r->dst_abbr) < 0)
		return -1;
	r->has_dst = true;
	r->dst_off = r->std_off + 3600;
	if (*s && *s != ',') {
		if (parse_hms(&s, 24, &off) < 0)
			return -1;
		r->dst_off = -off;
	}
	if (!*s) {
		/* No rule: the POSIX-unspecified default tzcode and Go use (US). */
		r->start = (struct rule_date){.kind = 'M', .m = 3, .w = 2, .d = 0, .time = 7200};
		r->end = (struct rule_date){.kind = 'M', .m = 11, .w = 1, .d = 0, .time = 7200};
		return 0;
	}
	if (*s++ != ',' || parse_rule_date(&s, &r->start) < 0 || *s++ != ',' ||
	    parse_rule_date(&s, &r->end) < 0 || *s)
		return -1;
	return 0;
}

/* ---- TZif parsing ------------------------------------------------------ */

static uint32_t be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int64_t be64(const unsigned char *p)
{
	return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}

struct tzif_counts {
	uint32_t isut, isstd, leap, time, type, chr;
};

static int read_header(const unsigned char *d, size_t len, int *version, struct tzif_counts *c)
{
	if (len < 44 || memcmp(d, "TZif", 4) != 0)
		return -1;
	*version = d[4] ? d[4] - '0' : 1;
	c->isut = be32(d + 20);
	c->isstd = be32(d + 24);
	c->leap = be32(d + 28);
	c->time = be32(d + 32);
	c->type = be32(d + 36);
	c->chr = be32(d + 40);
	if (c->type == 0 || c->type > 256 || c->chr == 0 || c->time > 100000 || c->leap > 100000 ||
	    c->chr > 100000 || (c->isut && c->isut != c->type) || (c->isstd && c->isstd != c->type))
		return -1;
	return 0;
}

static size_t block_len(const struct tzif_counts *c, size_t tsize)
{
	return c->time * tsize + c->time + c->type * 6 + c->chr + c->leap * (tsize + 4) + c->isstd +
	       c->isut;
}

/* The v2+ footer at p (before end): "\n<POSIX TZ rule>\n", the rule for
 * instants after the last transition (none when empty). NULL, or why not. */
static const char *parse_footer(const unsigned char *p, const unsigned char *end, struct tz *z)
{
	if (p >= end || *p != '\n')
		return "missing footer";
	const unsigned char *nl = memchr(p + 1, '\n', (size_t)(end - p - 1));
	if (!nl)
		return "unterminated footer";
	if (nl == p + 1)
		return NULL;
	char rule[256];
	size_t n = (size_t)(nl - p - 1);
	if (n >= sizeof rule)
		return "footer too long";
	memcpy(rule, p + 1, n);
	rule[n] = '\0';
	if (parse_posix_tz(rule, &z->rule) < 0)
		return "bad TZ footer";
	if (z->rule.std_off < -TZ_MAX_OFF || z->rule.std_off > TZ_MAX_OFF ||
	    z->rule.dst_off < -TZ_MAX_OFF || z->rule.dst_off > TZ_MAX_OFF)
		return "bad TZ footer offset";
	return NULL;
}

/* Parses a whole TZif file into z; returns a reason on failure. */
static const char *parse_tzif(const unsigned char *d, size_t len, struct tz *z)
{
	int version;
	struct tzif_counts c;
	if (read_header(d, len, &version, &c) < 0)
		return "not a TZif file";
	size_t tsize = 4;
	size_t off = 44;
	if (version >= 2) {
		size_t v1 = block_len(&c, 4);
		if (len - off < v1)
			return "truncated data";
		off += v1;
		int v2version;
		if (read_header(d + off, len - off, &v2version, &c) < 0)
			return "bad v2 header";
		off += 44;
		tsize = 8;
	}
	if (len - off < block_len(&c, tsize))
		return "truncated data";
	const unsigned char *p = d + off;
	z->ntrans = c.time;
	z->trans = xcalloc(c.time ? c.time : 1, sizeof *z->trans);
	z->tidx = xcalloc(c.time ? c.time : 1, 1);
	for (size_t i = 0; i < c.time; i++, p += tsize) {
		z->trans[i] = tsize == 8 ? be64(p) : (int64_t)(int32_t)be32(p);
		if (i && z->trans[i] <= z->trans[i - 1])
			return "transitions out of order";
		if (z->trans[i] < -TZ_T_LIMIT || z->trans[i] > TZ_T_LIMIT)
			return "transition out of range";
		/* TZ_WINDOW_TRANS: the wall-time walks visit every period within
		 * TZ_MAX_OFF of a wall time; a window must not hold more. */
		if (i >= TZ_WINDOW_TRANS &&
		    z->trans[i] - z->trans[i - TZ_WINDOW_TRANS] <= 2 * TZ_MAX_OFF + 2)
			return "more than 16 transitions within 52 hours";
	}
	for (size_t i = 0; i < c.time; i++, p++) {
		if (*p >= c.type)
			return "bad type index";
		z->tidx[i] = *p;
	}
	z->ntypes = c.type;
	z->types = xcalloc(c.type, sizeof *z->types);
	for (size_t i = 0; i < c.type; i++, p += 6) {
		int32_t utoff = (int32_t)be32(p);
		if (utoff < -TZ_MAX_OFF || utoff > TZ_MAX_OFF || p[4] > 1 || p[5] >= c.chr)
			return "bad local time type";
		z->types[i].utoff = utoff;
		z->types[i].isdst = p[4];
		z->types[i].abbr = p[5];
	}
	z->nchars = c.chr;
	z->chars = xmalloc(c.chr + 1);
	memcpy(z->chars, p, c.chr);
	z->chars[c.chr] = '\0'; /* an unterminated last abbreviation stays bounded */
	p += c.chr;
	/* Leap-second records, standard/wall and UT/local indicators: unused. */
	p += c.leap * (tsize + 4) + c.isstd + c.isut;
	return version >= 2 ? parse_footer(p, d + len, z) : NULL;
}

void tz_free(struct tz *z)
{
	if (!z)
		return;
	free(z->name);
	free(z->path);
	free(z->trans);
	free(z->tidx);
	free(z->types);
	free(z->chars);
	free(z);
}

static int valid_name(const char *name)
{
	size_t n = strlen(name);
	if (n > TZ_NAME_MAX || name[0] == '/' || name[n - 1] == '/')
		return 0;
	for (size_t i = 0; i < n; i++) {
		char ch = name[i];
		if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
		      (ch >= '0' && ch <= '9') || ch == '_' || ch == '+' || ch == '-' ||
		      ch == '.' || ch == '/'))
			return 0;
		/* Each component must be non-empty and must not start with '.'. */
		if ((i == 0 || name[i - 1] == '/') && (ch == '.' || ch == '/'))
			return 0;
	}
	return 1;
}

/* Reads the whole file; -1 with errno EFBIG when it holds more than
 * TZ_FILE_MAX bytes (the bound on a TZif file, tz.h), never reading more
 * than one byte past it. */
static int read_file(const char *path, unsigned char **data, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	char *text;
	int rc = read_fd_bounded(fd, TZ_FILE_MAX, 0, &text, len);
	int e = errno;
	close(fd);
	errno = e;
	if (rc == 0)
		*data = (unsigned char *)text;
	return rc;
}

/* "<prefix>\"name\"" with bytes outside printable ASCII escaped as \xNN. */
static char *quoted_error(const char *prefix, const char *name)
{
	struct buf b;
	buf_init(&b, 4096);
	buf_appendf(&b, "%s\"", prefix);
	for (const unsigned char *p = (const unsigned char *)name; *p && b.len < 1024; p++) {
		if (*p < 0x20 || *p >= 0x7f || *p == '"' || *p == '\\')
			buf_appendf(&b, "\\x%02x", *p);
		else
			buf_append(&b, p, 1);
	}
	buf_append(&b, "\"", 1);
	return buf_steal(&b);
}

const struct tz *tz_utc(void)
{
	return &utc_zone;
}

const char *tz_name(const struct tz *z)
{
	return z->name;
}

struct tz *tz_parse(const void *buf, size_t n, const char *name, char **err)
{
	*err = NULL;
	/* TZ_FILE_MAX: the bound on a TZif file, also when it comes as bytes. */
	if (n > TZ_FILE_MAX) {
		*err = xasprintf("time zone %s: tz data larger than %d bytes", name, TZ_FILE_MAX);
		return NULL;
	}
	struct tz *z = xcalloc(1, sizeof *z);
	const char *why = parse_tzif(buf, n, z);
	if (why) {
		*err = xasprintf("time zone %s: malformed tz data (%s)", name, why);
		tz_free(z);
		return NULL;
	}
	z->name = xstrdup(name);
	return z;
}

void tz_set_root_for_tests(const char *dir)
{
	pthread_mutex_lock(&cache_mu);
	free(root_override);
	root_override = dir ? xstrdup(dir) : NULL;
	pthread_mutex_unlock(&cache_mu);
}

int tz_load(const char *name, const struct tz **out, char **err)
{
	int rc = -1;
	unsigned char *data = NULL;
	size_t len = 0;
	char *path = NULL;
	struct tz *z = NULL;

	*err = NULL;
	if (!name || !*name || strcmp(name, "UTC") == 0) {
		*out = &utc_zone;
		return 0;
	}
	if (strcmp(name, "Local") == 0) {
		*err = xstrdup(
			"time zone Local is not allowed: name an IANA zone such as Europe/Rome");
		return -1;
	}
	if (!valid_name(name)) {
		*err = quoted_error("invalid time zone name ", name);
		return -1;
	}

	pthread_mutex_lock(&cache_mu);
	path = xasprintf("%s/%s", root_override ? root_override : TZ_DEFAULT_ROOT, name);
	for (struct tz *c = cache_head; c; c = c->next) {
		if (strcmp(c->path, path) == 0) {
			*out = c;
			rc = 0;
			goto done;
		}
	}
	if (read_file(path, &data, &len) < 0) {
		if (errno == EFBIG)
			*err = xasprintf("time zone %s: tz data larger than %d bytes", name,
					 TZ_FILE_MAX);
		else
			*err = xasprintf("unknown time zone %s", name);
		goto done;
	}
	z = tz_parse(data, len, name, err);
	if (!z)
		goto done;
	z->path = path;
	path = NULL;
	z->next = cache_head;
	cache_head = z;
	*out = z;
	z = NULL;
	rc = 0;
done:
	pthread_mutex_unlock(&cache_mu);
	tz_free(z);
	free(path);
	free(data);
	return rc;
}
