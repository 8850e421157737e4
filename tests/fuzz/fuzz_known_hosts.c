/*
 * Fuzzes Relay's known_hosts parser and decision (sshkey_known_hosts_check, the
 * pure part of sshkey_known_hosts_verify): hashed "|1|salt|hash" entries, host
 * patterns, @revoked / @cert-authority markers, malformed lines and the
 * line bounds.
 *
 * Input: byte 0 picks the lookup (bits 0-1 the host, bit 2 the port 22 or
 * 2222, bits 3-4 the presented key); the rest is the file's text. Inputs go
 * up to the real bound on the file, KNOWN_HOSTS_MAX (1 MiB) plus that byte:
 * LLVMFuzzerInitialize sets -max_len to it unless the command line does.
 *
 * Invariants, besides no crash, leak, hang or undefined behaviour:
 *  - *err is set exactly for MISMATCH and ERROR; the decision and message
 *    are the same when asked twice;
 *  - NEW ("nothing applies to this name") turns into MATCH once a hashed
 *    entry for the name and key, computed here with OpenSSL's HMAC-SHA1, is
 *    appended: the hashed form pins exactly like a plain one;
 *  - MATCH turns into a refusal naming "@revoked" once a @revoked line for
 *    the name and key is appended: revocation wins over any pin.
 * Appending may cross the line bound, which must then be the error.
 */
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "base/log.h"
#include "git/sshkey.h"
#include "base/util.h"

#define MAX_LINES_MSG "more than 16384 lines"

static const char *const hosts[] = {"github.com", "h.example", "10.0.0.1", "GitLab.COM"};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	for (int i = 1; i < *argc; i++)
		if (strncmp((*argv)[i], "-max_len=", 9) == 0)
			return 0;
	static char flag[32];
	snprintf(flag, sizeof flag, "-max_len=%d", KNOWN_HOSTS_MAX + 1);
	char **args = calloc((size_t)*argc + 2, sizeof *args);
	CHECK(args != NULL, "out of memory");
	memcpy(args, *argv, (size_t)*argc * sizeof *args);
	args[(*argc)++] = flag;
	*argv = args; /* kept for the life of the process */
	log_set_level(LOG_ERROR); /* the @cert-authority WARN */
	return 0;
}

/* The three ed25519 keys (fill 0x11, 0x22, 0x33) and an RSA-shaped one. */
static size_t make_key(int which, unsigned char *out)
{
	const char *type = which == 3 ? "ssh-rsa" : "ssh-ed25519";
	size_t n = 0, tl = strlen(type);
	int parts = which == 3 ? 2 : 1;
	out[n++] = 0, out[n++] = 0, out[n++] = 0, out[n++] = (unsigned char)tl;
	memcpy(out + n, type, tl);
	n += tl;
	for (int i = 0; i < parts; i++) {
		out[n++] = 0, out[n++] = 0, out[n++] = 0, out[n++] = 32;
		memset(out + n, 0x11 * (which + 1) + i, 32);
		n += 32;
	}
	return n;
}

static char *b64(const unsigned char *p, size_t n)
{
	char *s = xmalloc(4 * ((n + 2) / 3) + 1);
	EVP_EncodeBlock((unsigned char *)s, p, (int)n);
	return s;
}

/* The lowercased lookup name, as sshkey_known_hosts_check forms it. */
static char *lookup_name(const char *host, int port)
{
	char *name = port == 22 ? xstrdup(host) : xasprintf("[%s]:%d", host, port);
	for (char *c = name; *c; c++)
		if (*c >= 'A' && *c <= 'Z')
			*c = (char)(*c - 'A' + 'a');
	return name;
}

static char *hashed(const char *name, const uint8_t *data, size_t size)
{
	unsigned char salt[20] = {0}, md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;
	memcpy(salt, data, size < sizeof salt ? size : sizeof salt);
	CHECK(HMAC(EVP_sha1(), salt, sizeof salt, (const unsigned char *)name, strlen(name), md,
		   &n) != NULL &&
		      n == 20,
	      "reference HMAC-SHA1 failed");
	char *s = b64(salt, sizeof salt), *h = b64(md, n);
	char *out = xasprintf("|1|%s|%s", s, h);
	free(s);
	free(h);
	return out;
}

/* sshkey_known_hosts_check on text + line (NULL: text alone). */
static enum known_hosts_result check(const char *text, size_t n, const char *line,
				     const char *host, int port, const unsigned char *key,
				     size_t klen, char **err)
{
	*err = NULL;
	if (!line)
		return sshkey_known_hosts_check(text, n, "kh", host, port, key, klen, err);
	size_t ln = strlen(line);
	char *t = xmalloc(n + ln + 1);
	memcpy(t, text, n);
	memcpy(t + n, line, ln + 1);
	enum known_hosts_result r =
		sshkey_known_hosts_check(t, n + ln, "kh", host, port, key, klen, err);
	free(t);
	return r;
}

static bool over_lines(enum known_hosts_result r, const char *err)
{
	return r == KNOWN_HOSTS_ERROR && err && strstr(err, MAX_LINES_MSG);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const char *host = hosts[data[0] & 3];
	int port = data[0] & 4 ? 2222 : 22, which = data[0] >> 3 & 3;
	const char *text = (const char *)data + 1;
	size_t n = size - 1;
	unsigned char key[128];
	size_t klen = make_key(which, key);
	char *err = NULL, *err2 = NULL;

	enum known_hosts_result r = check(text, n, NULL, host, port, key, klen, &err);
	bool refused = r == KNOWN_HOSTS_MISMATCH || r == KNOWN_HOSTS_ERROR;
	CHECK(r >= KNOWN_HOSTS_MATCH && r <= KNOWN_HOSTS_ERROR, "result %d out of range", r);
	CHECK(refused == (err != NULL), "result %d with message %s", r, err ? err : "(none)");
	enum known_hosts_result r2 = check(text, n, NULL, host, port, key, klen, &err2);
	CHECK(r2 == r && (!err || strcmp(err, err2) == 0), "not deterministic: %d/%d", r, r2);
	free(err2);

	char *name = lookup_name(host, port), *kb = b64(key, klen);
	const char *type = which == 3 ? "ssh-rsa" : "ssh-ed25519";
	if (r == KNOWN_HOSTS_NEW) {
		char *h = hashed(name, data, size);
		char *line = xasprintf("\n%s %s %s\n", h, type, kb);
		enum known_hosts_result m = check(text, n, line, host, port, key, klen, &err2);
		CHECK(m == KNOWN_HOSTS_MATCH || over_lines(m, err2),
		      "a new name stays unpinned by its hashed entry %s: %d (%s)", h, m,
		      err2 ? err2 : "");
		free(err2);
		free(line);
		free(h);
	} else if (r == KNOWN_HOSTS_MATCH) {
		char *line = xasprintf("\n@revoked %s %s %s\n", name, type, kb);
		enum known_hosts_result m = check(text, n, line, host, port, key, klen, &err2);
		CHECK((m == KNOWN_HOSTS_MISMATCH && strstr(err2, "@revoked")) || over_lines(m, err2),
		      "a pinned key survives its @revoked line: %d (%s)", m, err2 ? err2 : "");
		free(err2);
		free(line);
	}
	free(name);
	free(kb);
	free(err);
	return 0;
}
