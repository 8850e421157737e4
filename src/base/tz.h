/*
 * IANA time zones read from the host tz database (/usr/share/zoneinfo,
 * Debian package tzdata), the C counterpart of Go's time.LoadLocation.
 *
 * The daemon is multithreaded, so nothing here touches TZ, tzset() or
 * localtime(): a zone is a TZif file (RFC 8536, v1 and v2+) parsed into an
 * immutable object: the 64-bit transition table, then the POSIX TZ footer
 * rule (e.g. "CET-1CEST,M3.5.0,M10.5.0/3", with the Jn, n and Mm.w.d date
 * forms and transition hours outside 0-24 such as Cairo's "M10.5.4/24") for
 * instants after the last transition. Leap-second records ("right/" zones)
 * are ignored, as Go does.
 *
 * Zones are cached process-wide: each file is read once, under a mutex, and
 * the object stays valid until the process exits. Every query on a loaded
 * zone is lock-free and safe from any thread.
 *
 * Instants are Unix seconds (UTC). A "wall" time is local civil time counted
 * the same way, i.e. the Unix seconds a UTC clock would show at that reading
 * (2024-03-10 02:30 local is 1710037800 whatever the zone).
 */
#ifndef RELAY_TZ_H
#define RELAY_TZ_H

#include <stddef.h>
#include <stdint.h>

struct tz;

/*
 * Loads the zone called name ("Europe/Rome"). "UTC" and "" are built in and
 * need no file. "Local" is rejected (a configuration must name its zone), as
 * is any name that is not a plain relative path over [A-Za-z0-9_+-./] (no
 * "..", no leading '/', no empty or dot-led component).
 * On success *out borrows a cached immutable zone (never free it); returns 0.
 * On failure returns -1 and *err is a malloc'd message naming the zone, e.g.
 * `unknown time zone Europe/Nowhere`. Thread-safe.
 */
int tz_load(const char *name, const struct tz **out, char **err);

/* The built-in UTC zone (borrowed, never NULL). Thread-safe. */
const struct tz *tz_utc(void);

/* The name the zone was loaded under ("UTC" for the built-in one). Borrowed. */
const char *tz_name(const struct tz *z);

/* UTC offset in seconds (east positive) in effect at the instant t. */
long tz_offset(const struct tz *z, int64_t t);

/* Civil fields; mon 1-12, mday 1-31, wday 0-6 with Sunday 0, yday 0-365. */
struct tz_tm {
	int64_t year;
	int mon, mday, hour, min, sec, wday, yday;
	long offset;	  /* UTC offset in seconds in effect */
	int isdst;	  /* 1 during daylight saving time */
	const char *abbr; /* "CEST", "-03"; borrowed from the zone */
};

/* Breaks the instant t down into local civil time in zone z. */
void tz_localtime(const struct tz *z, int64_t t, struct tz_tm *out);

/*
 * Local wall time -> instants. Fills out[] with the instants (ascending) at
 * which the local clock reads wall and returns how many there are: 1 for an
 * ordinary time, 2 in a fall-back overlap, 0 in a spring-forward gap (then
 * out[0] is the transition instant, the first one after the gap). At most
 * two are reported.
 */
int tz_local_resolve(const struct tz *z, int64_t wall, int64_t out[2]);

/*
 * The first instant at which the local clock reads wall or later: the
 * instant itself for an ordinary time, the earlier of two in an overlap, the
 * transition instant for a time skipped by a gap. Non-decreasing in wall.
 */
int64_t tz_local_first(const struct tz *z, int64_t wall);

/*
 * The latest wall time the local clock has shown at or before the instant t.
 * That is t's own wall time except during the second pass of a fall-back
 * overlap, where it is the last wall second before the clocks went back.
 * tz_local_first(z, w) > t exactly when w > tz_wall_reached(z, t).
 */
int64_t tz_wall_reached(const struct tz *z, int64_t t);

/* Pure civil-calendar helpers (proleptic Gregorian, no zone involved; days
 * count from 1970-01-01, H. Hinnant's algorithms). The one copy: rfc3339.c
 * and cron.c use them too. tz_days_in_month is 0 for a month outside 1-12. */
int64_t tz_days_from_civil(int64_t year, int mon, int mday);
void tz_civil_from_days(int64_t days, int64_t *year, int *mon, int *mday);
int tz_is_leap(int64_t year);
int tz_days_in_month(int64_t year, int mon);

/*
 * Parses the TZif bytes buf[0..n) (RFC 8536 v1 or v2+, at most TZ_FILE_MAX
 * bytes) into a new zone called name, outside the cache: tz_load reads a
 * file and calls this; tests and the fuzz target call it on a buffer. On
 * success returns the zone (release it with tz_free); on failure returns
 * NULL and *err is a malloc'd message naming the zone and the problem, e.g.
 * `time zone Europe/Rome: malformed tz data (bad v2 header)`.
 *
 * Cost: linear in n. Bounds, all checked here: TZ_FILE_MAX bytes, at most
 * 100,000 transitions and 256 local time types (so a zone holds at most
 * about 1 MiB), at most 16 transitions within any 52 hours (what lets every
 * wall-time query below visit a bounded number of periods), a footer rule
 * under 256 bytes. tz_load keeps each zone it loads for the life of the
 * process, one per distinct name.
 */
#define TZ_FILE_MAX (1024 * 1024) /* real files are a few KiB */
struct tz *tz_parse(const void *buf, size_t n, const char *name, char **err);

/* Frees a zone from tz_parse (never one from tz_load or tz_utc). */
void tz_free(struct tz *z);

/*
 * Tests only: read zone files from dir instead of /usr/share/zoneinfo (NULL
 * restores the default). Zones already loaded stay cached under their full
 * path, so switching back and forth is safe. Deliberately not reachable
 * through the environment.
 */
void tz_set_root_for_tests(const char *dir);

#endif
