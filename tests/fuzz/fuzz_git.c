/*
 * Fuzzes what git sync and the GitHub webhook read from outside: repository
 * URLs, --path and --ref values (operator input persisted in source.json),
 * the identity a webhook payload's URLs are compared by, webhook payloads in
 * both encodings, X-Hub-Signature-256 headers, and the pushed ref a webhook
 * compares with the configured one (gitsync_ref_matches, against a model:
 * a commit id matches nothing, refs/heads/X and refs/tags/X only themselves,
 * a bare name only refs/heads/ or refs/tags/ followed by exactly that name).
 *
 * The signature check must agree with HMAC-SHA256 computed here through
 * OpenSSL's EVP_MAC interface (fed in two pieces, a different route from
 * Relay's one-shot HMAC()): the right signature for a key and body taken
 * from the input is accepted in either hex case, and one changed hex digit,
 * a changed key byte or a short header is refused; for the input taken as a
 * header, Relay accepts exactly when the header is "sha256=" and the
 * reference MAC in hex.
 */
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "git/gitsync.h"
#include "base/util.h"
#include "git/webhook.h"

/* HMAC-SHA256(key, body), independently of Relay. */
static void reference_hmac(const uint8_t *key, size_t keylen, const uint8_t *body, size_t len,
			   unsigned char out[32])
{
	static EVP_MAC *mac;
	if (!mac)
		mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	CHECK(mac != NULL, "OpenSSL has no HMAC");
	EVP_MAC_CTX *ctx = EVP_MAC_CTX_new(mac);
	char digest[] = "SHA256";
	OSSL_PARAM params[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
		OSSL_PARAM_construct_end(),
	};
	static const uint8_t empty[1];
	size_t half = len / 2, outl = 0;
	CHECK(ctx && EVP_MAC_init(ctx, keylen ? key : empty, keylen, params) == 1 &&
		      EVP_MAC_update(ctx, body, half) == 1 &&
		      EVP_MAC_update(ctx, body + half, len - half) == 1 &&
		      EVP_MAC_final(ctx, out, &outl, 32) == 1 && outl == 32,
	      "reference HMAC failed");
	EVP_MAC_CTX_free(ctx);
}

/* "sha256=" + hex of mac; upper-case digits where bit i of caps is set. */
static void signature_header(const unsigned char mac[32], uint64_t caps, char out[72])
{
	static const char lower[] = "0123456789abcdef", upper[] = "0123456789ABCDEF";
	memcpy(out, "sha256=", 7);
	for (size_t i = 0; i < 64; i++) {
		unsigned nib = i % 2 ? mac[i / 2] & 15 : mac[i / 2] >> 4;
		out[7 + i] = (caps >> (i % 64) & 1 ? upper : lower)[nib];
	}
	out[71] = '\0';
}

/* Does header name mac, by the X-Hub-Signature-256 format? */
static int header_matches(const char *header, const unsigned char mac[32])
{
	if (strncmp(header, "sha256=", 7) != 0 || strlen(header) != 71)
		return 0;
	for (size_t i = 0; i < 32; i++) {
		int hi = hex_digit((unsigned char)header[7 + 2 * i]),
		    lo = hex_digit((unsigned char)header[8 + 2 * i]);
		if (hi < 0 || lo < 0 || (hi << 4 | lo) != mac[i])
			return 0;
	}
	return 1;
}

static void check_signatures(const uint8_t *data, size_t size, const char *s)
{
	/* The input as a header over itself as the body, key "key". */
	unsigned char mac[32];
	reference_hmac((const uint8_t *)"key", 3, data, size, mac);
	bool ok = webhook_signature_ok(s, data, size, "key", 3);
	CHECK(ok == (bool)header_matches(s, mac), "signature header \"%s\": Relay says %s", s,
	      ok ? "valid" : "invalid");

	/* A key and body from the input: byte 0 is the key length. */
	if (size < 1)
		return;
	size_t keylen = data[0] % 80;
	if (keylen > size - 1)
		keylen = size - 1;
	const uint8_t *key = data + 1, *body = data + 1 + keylen;
	size_t len = size - 1 - keylen;
	uint64_t caps = 0;
	memcpy(&caps, body, len < 8 ? len : 8);
	char header[72];
	reference_hmac(key, keylen, body, len, mac);
	signature_header(mac, caps, header);
	CHECK(webhook_signature_ok(header, body, len, key, keylen),
	      "the right signature %s for a %zu-byte key and %zu-byte body is refused", header,
	      keylen, len);

	size_t pos = 7 + (size_t)(caps % 64);
	char saved = header[pos];
	header[pos] = hex_digit((unsigned char)saved) == 0 ? '1' : '0';
	CHECK(!webhook_signature_ok(header, body, len, key, keylen),
	      "a signature with hex digit %zu changed is accepted: %s", pos - 7, header);
	header[pos] = saved;

	header[70] = '\0';
	CHECK(!webhook_signature_ok(header, body, len, key, keylen),
	      "a signature one hex digit short is accepted: %s", header);

	if (keylen) {
		uint8_t *k2 = xmalloc(keylen);
		memcpy(k2, key, keylen);
		k2[caps % keylen] ^= 1;
		signature_header(mac, caps, header);
		CHECK(!webhook_signature_ok(header, body, len, k2, keylen),
		      "a signature made with another key is accepted");
		free(k2);
	}
}

/* The model of gitsync_ref_matches with nothing recorded (data_dir NULL). */
static bool model_matches(const char *ref, const char *pushed)
{
	size_t n = strspn(ref, "0123456789abcdefABCDEF");
	if (n == 40 && !ref[n])
		return false;
	if (!strncmp(ref, "refs/heads/", 11) || !strncmp(ref, "refs/tags/", 10))
		return !strcmp(ref, pushed);
	const char *name = !strncmp(pushed, "refs/heads/", 11)	? pushed + 11
			   : !strncmp(pushed, "refs/tags/", 10) ? pushed + 10
								: NULL;
	return name && !strcmp(name, ref);
}

static void check_refs(const char *s)
{
	static const char *const configured[] = {"main",
						 "v1",
						 "refs/heads/main",
						 "refs/tags/v1",
						 "0123456789abcdef0123456789abcdef01234567",
						 "0123abc"};
	char *err = NULL;
	bool valid = gitsync_ref_check(s, &err) == 0;
	CHECK(valid == (err == NULL), "ref \"%s\": valid %d with error %s", s, valid, err);
	free(err);
	/* The input as the pushed ref. */
	for (size_t i = 0; i < ARRAY_LEN(configured); i++)
		CHECK(gitsync_ref_matches(NULL, configured[i], s) ==
			      model_matches(configured[i], s),
		      "ref %s, push of \"%s\": Relay says %d", configured[i], s,
		      !model_matches(configured[i], s));
	/* The input as the configured ref: an invalid one matches nothing. */
	char *pushes[] = {xasprintf("refs/heads/%s", s), xasprintf("refs/tags/%s", s), xstrdup(s)};
	for (size_t i = 0; i < ARRAY_LEN(pushes); i++) {
		bool m = gitsync_ref_matches(NULL, s, pushes[i]);
		CHECK(m == (valid && model_matches(s, pushes[i])),
		      "ref \"%s\" (valid %d), push of \"%s\": Relay says %d", s, valid, pushes[i],
		      m);
		free(pushes[i]);
	}
	const char *kind = gitsync_ref_kind(s);
	CHECK(!kind || !strncmp(s, "refs/heads/", 11) || !strncmp(s, "refs/tags/", 10) ||
		      (strlen(s) == 40 && strspn(s, "0123456789abcdef") == 40),
	      "\"%s\" has kind %s", s, kind);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = xstrndup((const char *)data, size);
	char *err = NULL, *user = NULL, *host = NULL, *path = NULL;
	int port = 0;
	if (gitsync_url_parse(s, &user, &host, &port, &path, &err) == 0) {
		/* Every accepted SSH URL has an identity and a sane port. */
		char *id = gitsync_repo_identity(s);
		if (!id || port < 1 || port > 65535 || !*host || !*path)
			abort();
		free(id);
		free(user);
		free(host);
		free(path);
	} else {
		free(err);
	}
	free(gitsync_repo_identity(s));
	err = NULL;
	if (gitsync_path_check(s, &err) < 0)
		free(err);

	const char *why = NULL;
	static const char *const types[] = {"application/json", "application/x-www-form-urlencoded",
					    NULL};
	for (size_t i = 0; i < 3; i++) {
		enum webhook_verdict v =
			webhook_decide("push", types[i], (const char *)data, size,
				       "git@github.com:acme/repo.git", "main", &why);
		if (v != WEBHOOK_SYNC && v != WEBHOOK_IGNORE && v != WEBHOOK_BAD)
			abort();
	}
	check_signatures(data, size, s);
	check_refs(s);
	free(s);
	return 0;
}
