/*
 * SipHash-1-3, written from the algorithm's description in the SipHash
 * paper: four 64-bit lanes initialised from the key and fixed constants, one
 * SipRound per 8-byte little-endian message word, a last word holding the
 * remaining bytes and the length mod 256 in its top byte, then 0xff into v2
 * and three SipRounds. Checked against OpenSSL's implementation in
 * tests/unit/test_event.c.
 */
#include "base/siphash.h"

static inline uint64_t rotl(uint64_t x, int b)
{
	return (x << b) | (x >> (64 - b));
}

static inline uint64_t load_le64(const unsigned char *p)
{
	return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24 |
	       (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 |
	       (uint64_t)p[7] << 56;
}

static inline uint64_t load_le32(const unsigned char *p)
{
	return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24;
}

/* The r < 8 bytes at p as a little-endian word, by overlapping loads that
 * stay inside them: a memcpy into a zeroed word stalls on store forwarding
 * and a byte loop mispredicts, each adding half the cost of a short key. */
static inline uint64_t tail_word(const unsigned char *p, size_t r)
{
	if (r >= 4)
		return load_le32(p) | load_le32(p + r - 4) << (8 * (r - 4));
	if (r)
		return (uint64_t)p[0] | (uint64_t)p[r / 2] << (8 * (r / 2)) |
		       (uint64_t)p[r - 1] << (8 * (r - 1));
	return 0;
}

#define SIPROUND                   \
	do {                       \
		v0 += v1;          \
		v1 = rotl(v1, 13); \
		v1 ^= v0;          \
		v0 = rotl(v0, 32); \
		v2 += v3;          \
		v3 = rotl(v3, 16); \
		v3 ^= v2;          \
		v0 += v3;          \
		v3 = rotl(v3, 21); \
		v3 ^= v0;          \
		v2 += v1;          \
		v1 = rotl(v1, 17); \
		v1 ^= v2;          \
		v2 = rotl(v2, 32); \
	} while (0)

uint64_t siphash13(const unsigned char key[SIPHASH_KEY_BYTES], const void *data, size_t n)
{
	const unsigned char *p = data;
	uint64_t k0 = load_le64(key), k1 = load_le64(key + 8);
	uint64_t v0 = k0 ^ 0x736f6d6570736575ull;
	uint64_t v1 = k1 ^ 0x646f72616e646f6dull;
	uint64_t v2 = k0 ^ 0x6c7967656e657261ull;
	uint64_t v3 = k1 ^ 0x7465646279746573ull;

	const unsigned char *end = p + (n & ~(size_t)7);
	for (; p != end; p += 8) {
		uint64_t m = load_le64(p);
		v3 ^= m;
		SIPROUND;
		v0 ^= m;
	}
	uint64_t b = tail_word(p, n & 7) | (uint64_t)(n & 0xff) << 56;
	v3 ^= b;
	SIPROUND;
	v0 ^= b;
	v2 ^= 0xff;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	return v0 ^ v1 ^ v2 ^ v3;
}
