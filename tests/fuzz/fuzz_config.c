/*
 * Fuzzes the parsers that read configuration and other outside text: Go
 * durations, REDIS_URI (and its redaction), listen addresses, log levels,
 * and the slog value quoting.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "duration.h"
#include "log.h"
#include "redis.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = xstrndup((const char *)data, size);

	int64_t d;
	if (duration_parse_n((const char *)data, size, &d) == 0) {
		char out[DURATION_STR_MAX];
		duration_format(d, out);
		int64_t again;
		/* Formatting then parsing is the identity. */
		if (duration_parse(out, &again) != 0 || again != d)
			abort();
	}

	struct redis_uri u;
	char *why = NULL;
	if (redis_uri_parse(s, &u, &why) == 0) {
		if (u.password && u.password[0] && strlen(u.password) > 3) {
			char *red = redis_uri_redact(s);
			free(red);
		}
		redis_uri_free(&u);
	} else {
		free(why);
	}
	char *red = redis_uri_redact(s);
	free(red);

	(void)config_valid_listen_addr(s);
	enum log_level l;
	(void)log_parse_level(s, &l);

	struct buf b;
	buf_init(&b, 1 << 20);
	log_append_value(&b, s);
	buf_free(&b);

	free(s);
	return 0;
}
