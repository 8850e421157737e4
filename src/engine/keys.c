/* Key naming; the contract is in keys.h. */
#include "engine/keys.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

static atomic_bool cluster_keys;

void keys_set_cluster(bool on)
{
	atomic_store(&cluster_keys, on);
}

int keys_stream_slot_check(const struct redis *r, const char *stream, char **why)
{
	size_t off, len;
	if (redis_mode(r) != REDIS_MODE_CLUSTER ||
	    redis_hash_tag(stream, strlen(stream), &off, &len))
		return 0;
	*why = xasprintf("REDIS_STREAM '%.200s' has no hash tag: on Redis Cluster every key Relay "
			 "uses must live in the stream's hash slot, so the stream's name needs a "
			 "non-empty part in braces, e.g. REDIS_STREAM={events} or orders{relay}",
			 stream);
	return -1;
}

bool keys_cluster(void)
{
	return atomic_load(&cluster_keys);
}

static char *encode(const char *s, bool braces)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = strlen(s);
	char *out = xmalloc(n * 3 + 1);
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		    c == '.' || c == '_' || c == '~' || c == '-' ||
		    (braces && (c == '{' || c == '}'))) {
			out[o++] = (char)c;
		} else {
			out[o++] = '%';
			out[o++] = hex[c >> 4];
			out[o++] = hex[c & 15];
		}
	}
	out[o] = '\0';
	return out;
}

char *keys_pct_encode(const char *s)
{
	return encode(s, false);
}

char *keys_encode(const char *s)
{
	return encode(s, keys_cluster());
}
