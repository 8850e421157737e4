/*
 * Keys that flood a hash table, shared by the decoder's flooding tests
 * (test_event.c) and its benchmark (bench/decode.c, which includes this
 * file by its relative path): a seeded generator for random keys, the
 * SipHash key "known to the attacker", and the two steps of the Joux
 * multicollision against the old decoder's unseeded FNV-1a index. Each
 * caller builds its own key sets from these. Header-only, like t.h;
 * everything is static.
 */
#ifndef RELAY_TFLOOD_H
#define RELAY_TFLOOD_H

#include <stdint.h>
#include <string.h>

/* A fixed key "known to the attacker": 00 01 .. 0f. */
static const unsigned char known_key[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

/* 64 characters a key is made of (index with a value % 64). */
static const char key_chars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-";

/* The next value of the splitmix64 sequence seeded by *s. */
static inline uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The printable characters a JSON string holds unescaped ('"' and '\\'
 * left out), into alpha; returns how many (93). */
static inline size_t fnv_alphabet(char alpha[96])
{
	size_t na = 0;
	for (int c = 0x20; c < 0x7f; c++)
		if (c != '"' && c != '\\')
			alpha[na++] = (char)c;
	return na;
}

/* The state FNV-1a reaches from `state` over 3 bytes, in the low bits. */
static inline uint32_t fnv_block(uint32_t state, const char b[3], uint32_t mask)
{
	for (int j = 0; j < 3; j++)
		state = ((state ^ (unsigned char)b[j]) * 16777619u) & mask;
	return state;
}

/* Buckets every 3-character block over alpha (na characters) by the state
 * it leads to from `state` (within mask), shifted right by shift; returns
 * the fullest bucket. count (mask + 1 entries) is left holding the size of
 * each bucket. */
static inline uint32_t fnv_fullest(uint32_t state, uint32_t mask, unsigned shift, const char *alpha,
				   size_t na, uint32_t *count)
{
	size_t ncand = na * na * na;
	memset(count, 0, ((size_t)mask + 1) * sizeof *count);
	uint32_t best = 0;
	for (size_t a = 0; a < ncand; a++) {
		char b[3] = {alpha[a % na], alpha[a / na % na], alpha[a / na / na]};
		uint32_t s = fnv_block(state, b, mask) >> shift;
		if (++count[s] > count[best])
			best = s;
	}
	return best;
}

/* The blocks of bucket `best` (as fnv_fullest sorted them), in order, into
 * out (room for count[best]); returns how many. */
static inline size_t fnv_bucket(uint32_t state, uint32_t mask, unsigned shift, uint32_t best,
				const char *alpha, size_t na, char (*out)[3])
{
	size_t ncand = na * na * na, k = 0;
	for (size_t a = 0; a < ncand; a++) {
		char b[3] = {alpha[a % na], alpha[a / na % na], alpha[a / na / na]};
		if (fnv_block(state, b, mask) >> shift == best)
			memcpy(out[k++], b, 3);
	}
	return k;
}

#endif
