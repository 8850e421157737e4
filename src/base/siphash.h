/*
 * SipHash-1-3: a keyed 64-bit hash (Aumasson and Bernstein, "SipHash: a fast
 * short-input PRF", with one compression and three finalization rounds, the
 * variant Rust's HashMap and CPython's str hash use).
 *
 * For hash tables fed with keys from outside: without the 128-bit key an
 * attacker cannot predict which keys collide, so they cannot make a table
 * degrade (hash flooding). Not a MAC for authentication: 1-3 trades margin
 * for speed.
 */
#ifndef RELAY_SIPHASH_H
#define RELAY_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

#define SIPHASH_KEY_BYTES 16

/* The hash of the n bytes at data under key (read as two little-endian
 * 64-bit words, as in the reference). Pure function; thread-safe. Equals
 * OpenSSL's EVP_MAC "SIPHASH" with size 8, c-rounds 1, d-rounds 3, read as a
 * little-endian integer. */
uint64_t siphash13(const unsigned char key[SIPHASH_KEY_BYTES], const void *data, size_t n);

#endif
