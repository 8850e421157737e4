/*
 * The SSH deploy key and Relay's known_hosts (see sshkey.h).
 *
 * OpenSSL has no writer for OpenSSH's private key format, so it is built
 * here (OpenSSH's PROTOCOL.key). Unencrypted, the file is PEM-like armor
 * around the base64 of
 *
 *	"openssh-key-v1\0"  string "none" (cipher)  string "none" (kdf)
 *	string "" (kdf options)  uint32 1 (keys)  string public-blob
 *	string private-section
 *
 * where public-blob is (string "ssh-ed25519", string pub32) and the private
 * section is (uint32 check, uint32 check, string "ssh-ed25519", string
 * pub32, string seed32||pub32, string comment, padding 1,2,3... to a
 * multiple of 8). The base64 is wrapped at 70 columns like ssh-keygen's:
 * libssh2 (under libgit2) reads the armor line by line into a small buffer.
 *
 * Files are used through a descriptor of the checked SSH directory
 * (openat/renameat), opened with O_NOFOLLOW and checked with fstat, so the
 * checked file is the one read. Key material (seed, encoded file, decoded
 * file) is cleansed before it is freed; messages carry paths only.
 *
 * known_hosts decisions are serialized by a process-local mutex and, across
 * processes, by flock on the file, so a host is pinned at most once.
 */
#include "git/sshkey.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"

#define KEY_TYPE "ssh-ed25519"
#define KEY_COMMENT "relay"
#define KEY_MAGIC "openssh-key-v1" /* NUL-terminated in the file */
#define PEM_BEGIN "-----BEGIN OPENSSH PRIVATE KEY-----\n"
#define PEM_END "-----END OPENSSH PRIVATE KEY-----"
#define PEM_COLUMNS 70
#define BLOB_LEN (4 + sizeof KEY_TYPE - 1 + 4 + 32) /* 51 */
#define KEY_FILE_MAX (64 * 1024)
#define HOST_BLOB_MAX (16 * 1024)
#define KEY_TYPE_MAX 64

static pthread_mutex_t known_hosts_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- SSH wire encoding ---- */

struct wire {
	unsigned char *p;
	size_t len, cap;
};

static void put_raw(struct wire *w, const void *p, size_t n)
{
	if (n > w->cap - w->len)
		abort(); /* the buffers are sized for our one key layout */
	memcpy(w->p + w->len, p, n);
	w->len += n;
}

static void put_u32(struct wire *w, uint32_t v)
{
	unsigned char b[4] = {v >> 24, v >> 16 & 0xff, v >> 8 & 0xff, v & 0xff};
	put_raw(w, b, 4);
}

static void put_str(struct wire *w, const void *p, size_t n)
{
	put_u32(w, (uint32_t)n);
	put_raw(w, p, n);
}

static void put_cstr(struct wire *w, const char *s)
{
	put_str(w, s, strlen(s));
}

/* A bounds-checked cursor; every getter fails rather than read past n. */
struct reader {
	const unsigned char *p;
	size_t n;
};

static bool get_raw(struct reader *r, size_t n, const unsigned char **p)
{
	if (n > r->n)
		return false;
	*p = r->p;
	r->p += n;
	r->n -= n;
	return true;
}

static bool get_u32(struct reader *r, uint32_t *v)
{
	const unsigned char *b;
	if (!get_raw(r, 4, &b))
		return false;
	*v = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
	return true;
}

static bool get_str(struct reader *r, struct reader *s)
{
	uint32_t n;
	return get_u32(r, &n) && get_raw(r, n, &s->p) && (s->n = n, true);
}

static bool get_str_is(struct reader *r, const char *want, size_t want_len)
{
	struct reader s;
	return get_str(r, &s) && s.n == want_len && memcmp(s.p, want, want_len) == 0;
}

/* Validates a public key blob: a key type name, then one or more strings
 * that exactly fill it (ed25519: pub32; rsa: e, n; ecdsa: curve, point).
 * Stores the NUL-terminated type in type[KEY_TYPE_MAX + 1]. */
static bool blob_type(const unsigned char *blob, size_t len, char *type)
{
	struct reader r = {blob, len}, s;
	if (len > HOST_BLOB_MAX || !get_str(&r, &s) || s.n == 0 || s.n > KEY_TYPE_MAX)
		return false;
	for (size_t i = 0; i < s.n; i++)
		if (s.p[i] <= ' ' || s.p[i] >= 0x7f)
			return false;
	memcpy(type, s.p, s.n);
	type[s.n] = '\0';
	struct reader part;
	if (!get_str(&r, &part))
		return false;
	while (r.n > 0)
		if (!get_str(&r, &part))
			return false;
	return true;
}

/* ---- base64 and fingerprints ---- */

static char *b64_encode(const unsigned char *p, size_t n)
{
	char *s = xmalloc(4 * ((n + 2) / 3) + 1);
	EVP_EncodeBlock((unsigned char *)s, p, (int)n);
	return s;
}

static int b64_value(char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Strict padded base64 of s[0..n); NULL when invalid. */
static unsigned char *b64_decode(const char *s, size_t n, size_t *out_len)
{
	if (n == 0 || n % 4)
		return NULL;
	size_t pad = s[n - 1] == '=' ? (s[n - 2] == '=' ? 2 : 1) : 0;
	size_t total = n / 4 * 3 - pad, o = 0;
	unsigned char *out = xmalloc(total);
	for (size_t i = 0; i < n; i += 4) {
		uint32_t v = 0;
		for (size_t j = i; j < i + 4; j++) {
			int d = j < n - pad ? b64_value(s[j]) : 0;
			if (d < 0) {
				OPENSSL_cleanse(out, o);
				free(out);
				return NULL;
			}
			v = v << 6 | (uint32_t)d;
		}
		for (int shift = 16; shift >= 0 && o < total; shift -= 8)
			out[o++] = (unsigned char)(v >> shift);
	}
	*out_len = total;
	return out;
}

char *sshkey_fingerprint(const unsigned char *blob, size_t len)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;
	if (EVP_Digest(blob, len, md, &n, EVP_sha256(), NULL) != 1)
		abort(); /* SHA-256 is always available in OpenSSL 3 */
	char *b64 = b64_encode(md, n);
	b64[strcspn(b64, "=")] = '\0';
	char *fp = xasprintf("SHA256:%s", b64);
	free(b64);
	return fp;
}

static void make_blob(const unsigned char pub[32], unsigned char blob[BLOB_LEN])
{
	struct wire w = {blob, 0, BLOB_LEN};
	put_cstr(&w, KEY_TYPE);
	put_str(&w, pub, 32);
}

static void public_outputs(const unsigned char *blob, char **public_line, char **fingerprint)
{
	char *b64 = b64_encode(blob, BLOB_LEN);
	*public_line = xasprintf(KEY_TYPE " %s " KEY_COMMENT, b64);
	*fingerprint = sshkey_fingerprint(blob, BLOB_LEN);
	free(b64);
}

/* ---- the private key file ---- */

/* The armored file text (malloc'd; the caller cleanses it). */
static char *encode_private(const unsigned char seed[32], const unsigned char pub[32],
			    uint32_t check, size_t *text_len)
{
	unsigned char blob[BLOB_LEN], keypair[64], secbuf[256], bin[512];
	struct wire sec = {secbuf, 0, sizeof secbuf}, w = {bin, 0, sizeof bin};
	make_blob(pub, blob);
	memcpy(keypair, seed, 32);
	memcpy(keypair + 32, pub, 32);
	put_u32(&sec, check);
	put_u32(&sec, check);
	put_cstr(&sec, KEY_TYPE);
	put_str(&sec, pub, 32);
	put_str(&sec, keypair, sizeof keypair);
	put_cstr(&sec, KEY_COMMENT);
	for (unsigned char i = 1; sec.len % 8; i++)
		put_raw(&sec, &i, 1);
	put_raw(&w, KEY_MAGIC, sizeof KEY_MAGIC);
	put_cstr(&w, "none");
	put_cstr(&w, "none");
	put_cstr(&w, "");
	put_u32(&w, 1);
	put_str(&w, blob, sizeof blob);
	put_str(&w, sec.p, sec.len);

	char *b64 = b64_encode(bin, w.len);
	size_t n = strlen(b64), t = strlen(PEM_BEGIN);
	char *text = xmalloc(t + n + n / PEM_COLUMNS + 1 + sizeof PEM_END + 1);
	memcpy(text, PEM_BEGIN, t);
	for (size_t i = 0; i < n; i += PEM_COLUMNS) {
		size_t k = n - i < PEM_COLUMNS ? n - i : PEM_COLUMNS;
		memcpy(text + t, b64 + i, k);
		t += k;
		text[t++] = '\n';
	}
	memcpy(text + t, PEM_END "\n", sizeof PEM_END + 1);
	*text_len = t + sizeof PEM_END;
	OPENSSL_cleanse(keypair, sizeof keypair);
	OPENSSL_cleanse(secbuf, sizeof secbuf);
	OPENSSL_cleanse(bin, sizeof bin);
	OPENSSL_cleanse(b64, n);
	free(b64);
	return text;
}

/* Whether seed derives pub: the halves of the file belong together. */
static bool seed_matches(const unsigned char *seed, const unsigned char *pub)
{
	unsigned char derived[32];
	size_t n = sizeof derived;
	EVP_PKEY *k = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, seed, 32);
	bool ok = k && EVP_PKEY_get_raw_public_key(k, derived, &n) == 1 && n == 32 &&
		  memcmp(derived, pub, 32) == 0;
	EVP_PKEY_free(k);
	return ok;
}

/* Parses the decoded file (layout at the top) into its public blob; returns
 * what is wrong with it, or NULL. */
static const char *parse_key(const unsigned char *bin, size_t len, unsigned char blob[BLOB_LEN])
{
	struct reader r = {bin, len}, kdfopts, pk, sec, pub, pub2, priv, comment;
	const unsigned char *magic;
	uint32_t nkeys, check1, check2;
	size_t type_len = strlen(KEY_TYPE);
	if (!get_raw(&r, sizeof KEY_MAGIC, &magic) || memcmp(magic, KEY_MAGIC, sizeof KEY_MAGIC))
		return "not openssh-key-v1";
	if (!get_str_is(&r, "none", 4) || !get_str_is(&r, "none", 4))
		return "encrypted keys are not supported";
	if (!get_str(&r, &kdfopts) || kdfopts.n || !get_u32(&r, &nkeys) || nkeys != 1 ||
	    !get_str(&r, &pk) || !get_str(&r, &sec) || r.n)
		return "malformed header";
	if (pk.n != BLOB_LEN)
		return "not an ed25519 key";
	memcpy(blob, pk.p, BLOB_LEN);
	if (!get_str_is(&pk, KEY_TYPE, type_len) || !get_str(&pk, &pub) || pub.n != 32)
		return "not an ed25519 key";
	if (sec.n % 8 || !get_u32(&sec, &check1) || !get_u32(&sec, &check2) || check1 != check2)
		return "malformed private section";
	if (!get_str_is(&sec, KEY_TYPE, type_len) || !get_str(&sec, &pub2) || pub2.n != 32 ||
	    memcmp(pub2.p, pub.p, 32) || !get_str(&sec, &priv) || priv.n != 64 ||
	    memcmp(priv.p + 32, pub.p, 32) || !get_str(&sec, &comment))
		return "malformed private key";
	if (sec.n >= 8)
		return "bad padding";
	for (size_t i = 0; i < sec.n; i++)
		if (sec.p[i] != i + 1)
			return "bad padding";
	if (!seed_matches(priv.p, pub.p))
		return "private and public halves differ";
	return NULL;
}

/* Strictly parses the whole key file text into its public blob. */
static int decode_private(const char *text, size_t len, const char *path,
			  unsigned char blob[BLOB_LEN], char **err)
{
	const char *why = "no OPENSSH PRIVATE KEY armor";
	size_t begin = strlen(PEM_BEGIN), n = 0, bin_len = 0;
	char *b64 = xmalloc(len + 1);
	unsigned char *bin = NULL;
	const char *end = len > begin && memcmp(text, PEM_BEGIN, begin) == 0
				  ? memmem(text + begin, len - begin, PEM_END, strlen(PEM_END))
				  : NULL;
	if (end) {
		for (const char *p = text + begin; p < end; p++)
			if (*p != '\n' && *p != '\r')
				b64[n++] = *p;
		bin = b64_decode(b64, n, &bin_len);
		why = bin ? parse_key(bin, bin_len, blob) : "invalid base64";
	}
	if (why)
		*err = xasprintf("SSH key %s: not a valid unencrypted ed25519 OpenSSH key (%s)",
				 path, why);
	OPENSSL_cleanse(b64, len + 1);
	free(b64);
	if (bin)
		OPENSSL_cleanse(bin, bin_len);
	free(bin);
	return why ? -1 : 0;
}

/* ---- files ---- */

/* Opens the SSH directory, refusing one writable by others. -ENOENT (no
 * message) when it does not exist and create is false. */
static int open_ssh_dir(const char *dir, bool create, int *dfd, char **err)
{
	struct stat st;
	if (!*dir) {
		*err = xstrdup("the SSH directory path is empty");
		return -1;
	}
	if (create && mkdir_p(dir, 0700, MKDIR_EXACT_MODE, NULL, NULL, err) < 0)
		return -1;
	*dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (*dfd < 0 && errno == ENOENT && !create)
		return -ENOENT;
	if (*dfd < 0)
		return sys_error(err, "cannot open SSH directory", dir, errno);
	if (fstat(*dfd, &st) < 0)
		return sys_error(err, "cannot stat SSH directory", dir, errno);
	if (!owner_mode_ok(&st, 022)) {
		*err = xasprintf("SSH directory %s: must be owned by uid %u and not writable by "
				 "group or others (owner %u, mode %04o); refusing to use it",
				 dir, (unsigned)geteuid(), (unsigned)st.st_uid,
				 (unsigned)(st.st_mode & 07777));
		return -1;
	}
	return 0;
}

/* Opens name in dfd without following a symlink and refuses anything but a
 * regular file of ours without the mode bits in `loose`. -ENOENT (no
 * message) when missing. */
static int open_checked(int dfd, const char *name, const char *path, int flags, mode_t loose,
			int *fd, char **err)
{
	struct stat st;
	*fd = openat(dfd, name, flags | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0600);
	if (*fd < 0 && errno == ENOENT)
		return -ENOENT;
	if (*fd < 0 && errno == ELOOP) {
		*err = xasprintf("%s: is a symbolic link; refusing to use it", path);
		return -1;
	}
	if (*fd < 0)
		return sys_error(err, "cannot open", path, errno);
	if (fstat(*fd, &st) < 0)
		return sys_error(err, "cannot stat", path, errno);
	if (!S_ISREG(st.st_mode) || !owner_mode_ok(&st, loose)) {
		*err = xasprintf(
			"%s: must be a regular file owned by uid %u with mode %04o at most "
			"(is uid %u, mode %06o); refusing to use it",
			path, (unsigned)geteuid(), (unsigned)(0666 & ~loose), (unsigned)st.st_uid,
			(unsigned)st.st_mode);
		return -1;
	}
	return 0;
}

/* Reads fd to its end into *out (NUL-terminated; the caller frees it). A
 * file over max bytes is refused. What is read may be a private key: every
 * buffer let go of on the way is wiped. */
static int read_bounded(int fd, size_t max, const char *path, char **out, size_t *len, char **err)
{
	if (read_fd_bounded(fd, max, READ_WIPE, out, len) == 0)
		return 0;
	if (errno == EFBIG)
		*err = xasprintf("%s: larger than %zu bytes; refusing to read it", path, max);
	else
		sys_error(err, "cannot read", path, errno);
	return -1;
}

char *sshkey_path(const char *ssh_dir)
{
	return xasprintf("%s/%s", ssh_dir, SSHKEY_FILE);
}

static int key_exists(const char *path, char **err)
{
	*err = xasprintf("an SSH key already exists at %s; refusing to overwrite it", path);
	return -EEXIST;
}

int sshkey_generate(const char *ssh_dir, bool force, char **public_line, char **fingerprint,
		    char **err)
{
	*public_line = *fingerprint = NULL;
	char *path = sshkey_path(ssh_dir), *text = NULL, *pubtext = NULL, *line = NULL, *fp = NULL;
	unsigned char seed[32], pub[32], blob[BLOB_LEN];
	size_t seed_len = sizeof seed, pub_len = sizeof pub, text_len = 0;
	uint32_t check;
	EVP_PKEY *pkey = NULL;
	struct stat st;
	int dfd = -1;
	int rc = open_ssh_dir(ssh_dir, true, &dfd, err);
	if (rc < 0)
		goto out;
	if (!force && fstatat(dfd, SSHKEY_FILE, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		rc = key_exists(path, err);
		goto out;
	}
	pkey = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
	if (!pkey || EVP_PKEY_get_raw_private_key(pkey, seed, &seed_len) != 1 ||
	    EVP_PKEY_get_raw_public_key(pkey, pub, &pub_len) != 1 || seed_len != 32 ||
	    pub_len != 32 || RAND_bytes((unsigned char *)&check, sizeof check) != 1) {
		char why[256];
		ERR_error_string_n(ERR_get_error(), why, sizeof why);
		*err = xasprintf("cannot generate an ed25519 key: %s", why);
		rc = -1;
		goto out;
	}
	text = encode_private(seed, pub, check, &text_len);
	rc = write_file_atomic(dfd, ssh_dir, SSHKEY_FILE, text, text_len, 0600, !force, err);
	if (rc == -EEXIST)
		rc = key_exists(path, err); /* created meanwhile by someone else */
	if (rc < 0)
		goto out;
	make_blob(pub, blob);
	public_outputs(blob, &line, &fp);
	pubtext = xasprintf("%s\n", line);
	rc = write_file_atomic(dfd, ssh_dir, SSHKEY_FILE ".pub", pubtext, strlen(pubtext), 0644,
			       false, err);
	if (rc < 0)
		goto out;
	*public_line = line;
	*fingerprint = fp;
	line = fp = NULL;
out:
	OPENSSL_cleanse(seed, sizeof seed);
	if (text)
		OPENSSL_cleanse(text, text_len);
	free(text);
	free(pubtext);
	free(line);
	free(fp);
	EVP_PKEY_free(pkey);
	if (dfd >= 0)
		close(dfd);
	free(path);
	return rc;
}

int sshkey_public(const char *ssh_dir, char **public_line, char **fingerprint, char **err)
{
	*public_line = *fingerprint = NULL;
	char *path = sshkey_path(ssh_dir), *text = NULL;
	unsigned char blob[BLOB_LEN];
	size_t len = 0;
	int dfd = -1, fd = -1;
	int rc = open_ssh_dir(ssh_dir, false, &dfd, err);
	if (rc == 0)
		rc = open_checked(dfd, SSHKEY_FILE, path, O_RDONLY, 077, &fd, err);
	if (rc == -ENOENT)
		*err = xasprintf("no SSH key at %s (generate one with relay git keygen)", path);
	if (rc == 0)
		rc = read_bounded(fd, KEY_FILE_MAX, path, &text, &len, err);
	if (rc == 0)
		rc = decode_private(text, len, path, blob, err);
	if (rc == 0)
		public_outputs(blob, public_line, fingerprint);
	if (text)
		OPENSSL_cleanse(text, len);
	free(text);
	if (fd >= 0)
		close(fd);
	if (dfd >= 0)
		close(dfd);
	free(path);
	return rc;
}

/* ---- known_hosts ---- */

/*
 * OpenSSH's format (sshd(8), SSH_KNOWN_HOSTS FILE FORMAT), one entry a line:
 *
 *	[@revoked | @cert-authority] hosts keytype base64-blob [comment]
 *
 * hosts is either one hashed entry, "|1|" base64(salt) "|" base64(HMAC-SHA1
 * keyed with the 20-byte salt over the name), as ssh-keygen -H and
 * ssh-keyscan -H write it, or a comma-separated list of patterns: '*' and
 * '?' are wildcards, and a name matching a pattern negated with '!' is not
 * matched by the line at all. The name looked up is the lowercased "host"
 * for port 22 and "[host]:port" otherwise, in both forms (what OpenSSH
 * hashes for a non-standard port is that bracketed form).
 *
 * The decision (decide() below), in this order:
 *  1. a @revoked line for the name listing the presented key refuses it
 *     (MISMATCH, naming the file and line), even when a plain line pins the
 *     same key: revocation wins, as in OpenSSH;
 *  2. a @revoked or @cert-authority line for the name whose key cannot be
 *     read refuses (ERROR, naming the line): the operator meant to restrict
 *     this host, and a typo must not turn that into acceptance;
 *  3. a plain line pinning the presented key: MATCH;
 *  4. a @cert-authority line for the name: ERROR. Relay verifies plain host
 *     keys only (libgit2 hands over the raw key, never a certificate), so it
 *     cannot honour a CA, and a host the operator put under a CA must not
 *     fall back to trust on first use either. When the presented key is
 *     also pinned by a plain line (case 3), that pin alone establishes trust,
 *     the CA adds nothing Relay could check, and the CA line is ignored with
 *     a WARN naming it;
 *  5. a plain line pinning another key for the name: MISMATCH (MITM);
 *  6. otherwise the name is new: trust on first use.
 * Other malformed lines (no key, bad base64, a blob whose type disagrees
 * with the keytype field), unknown @-markers and hashed entries whose salt
 * or hash is not 20 bytes of base64 are skipped, as OpenSSH skips them.
 *
 * Bounds (each breach refuses the whole file, naming it): KNOWN_HOSTS_MAX
 * bytes (read_bounded), KNOWN_HOSTS_MAX_LINES lines and KNOWN_HOSTS_LINE_MAX
 * bytes a line (scan()). The cost is linear in the file: a few word
 * operations per pattern byte (match_glob runs the pattern over the set of
 * name positions, never backtracking) and one HMAC-SHA1 per hashed entry.
 * A backtracking glob matcher would not be: "*aaaaaaaaab" patterns against
 * a long name cost ~250 steps per byte, most of a second for 1 MiB.
 */

_Static_assert(KNOWN_HOSTS_LINE_MAX > 4 * HOST_BLOB_MAX / 3, "any key we accept fits a line");
#define HOST_NAME_MAX_ 255	       /* host_ok() */
#define NAME_MAX_ (HOST_NAME_MAX_ + 8) /* "[host]:65535" */
#define NAME_WORDS ((NAME_MAX_ + 1 + 63) / 64)
#define HASH_MAGIC "|1|"
#define HASH_LEN 20 /* SHA-1: the salt and the MAC */

/* The next blank-separated field of *p (NUL-terminated in place), or NULL. */
static char *next_field(char **p)
{
	char *s = *p + strspn(*p, " \t\r");
	if (!*s)
		return NULL;
	char *e = s + strcspn(s, " \t\r");
	if (*e)
		*e++ = '\0';
	*p = e;
	return s;
}

static char lower(char c)
{
	return (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
}

/* The lookup name as sets of positions, so that a pattern is matched in one
 * pass over the pattern: bit i of a set stands for "the pattern so far
 * matches name[0..i)". after[c] has bit i+1 set where name[i] is c; any
 * has bits 1..n; upto has bits 0..n. The name is printable ASCII
 * (host_ok), so 128 characters cover it. */
struct name_sets {
	const char *name;
	size_t n;
	uint64_t after[128][NAME_WORDS];
	uint64_t any[NAME_WORDS], upto[NAME_WORDS];
};

static void set_bit(uint64_t *w, size_t i)
{
	w[i / 64] |= (uint64_t)1 << (i % 64);
}

static void name_sets_init(struct name_sets *ns, const char *name)
{
	memset(ns, 0, sizeof *ns);
	ns->name = name;
	ns->n = strlen(name);
	set_bit(ns->upto, 0);
	for (size_t i = 0; i < ns->n; i++) {
		set_bit(ns->after[(unsigned char)name[i] & 0x7f], i + 1);
		set_bit(ns->any, i + 1);
		set_bit(ns->upto, i + 1);
	}
}

/* Whether pattern p[0..pn) matches the whole name ('*' any run, '?' any one
 * character, others case-insensitively). NAME_WORDS word operations per
 * pattern character: linear in the pattern, whatever its stars. */
static bool match_glob(const struct name_sets *ns, const char *p, size_t pn)
{
	uint64_t set[NAME_WORDS] = {1}; /* the empty prefix matches name[0..0) */
	for (size_t k = 0; k < pn; k++) {
		unsigned char c = (unsigned char)lower(p[k]);
		bool live = false;
		if (c == '*') { /* from the first live position on, all live */
			bool from = false;
			for (size_t w = 0; w < NAME_WORDS; w++) {
				if (from) {
					set[w] = ns->upto[w];
				} else if (set[w]) {
					uint64_t low = set[w] & -set[w]; /* lowest live */
					set[w] = ~(low - 1) & ns->upto[w];
					from = true;
				}
				live |= set[w] != 0;
			}
		} else {
			const uint64_t *next = c == '?' ? ns->any : c < 128 ? ns->after[c] : NULL;
			for (size_t w = NAME_WORDS; w-- > 0;) {
				uint64_t shifted = set[w] << 1 | (w ? set[w - 1] >> 63 : 0);
				set[w] = next ? shifted & next[w] : 0;
				live |= set[w] != 0;
			}
		}
		if (!live)
			return false;
	}
	return set[ns->n / 64] >> (ns->n % 64) & 1;
}

/* A comma-separated pattern list against the name: 1 matched, 0 not, -1 a
 * negated pattern matched (the line does not apply, whatever else does). */
static int match_pattern_list(const struct name_sets *ns, const char *list)
{
	int got = 0;
	for (const char *p = list;; p++) {
		size_t k = strcspn(p, ",");
		bool neg = *p == '!';
		if (match_glob(ns, p + neg, k - neg)) {
			if (neg)
				return -1;
			got = 1;
		}
		p += k;
		if (!*p)
			return got;
	}
}

/* A hashed entry (the text after "|1|": "salt|hash") against name. */
static bool match_hashed(const char *entry, const char *name)
{
	const char *bar = strchr(entry, '|');
	size_t slen = 0, hlen = 0;
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	if (!bar)
		return false;
	unsigned char *salt = b64_decode(entry, (size_t)(bar - entry), &slen);
	unsigned char *hash = b64_decode(bar + 1, strlen(bar + 1), &hlen);
	bool ok = salt && hash && slen == HASH_LEN && hlen == HASH_LEN &&
		  HMAC(EVP_sha1(), salt, HASH_LEN, (const unsigned char *)name, strlen(name), md,
		       &mdlen) &&
		  mdlen == HASH_LEN && CRYPTO_memcmp(md, hash, HASH_LEN) == 0;
	free(salt);
	free(hash);
	return ok;
}

/* 1 when the hosts field names the name, 0 when not, -1 when negated. */
static int hosts_match(const char *hosts, const struct name_sets *ns)
{
	if (strncmp(hosts, HASH_MAGIC, strlen(HASH_MAGIC)) == 0)
		return match_hashed(hosts + strlen(HASH_MAGIC), ns->name);
	return match_pattern_list(ns, hosts);
}

enum marker { MARK_NONE, MARK_REVOKED, MARK_CA };

/* What the lines that apply to one name say about one presented key. Line
 * numbers are 1-based; 0 means no such line. */
struct kh_scan {
	struct name_sets ns; /* of the lowercased lookup name */
	const char *name;
	const unsigned char *blob;
	size_t len;
	size_t same_line;    /* first plain line pinning blob */
	size_t revoked_line; /* first @revoked line listing blob */
	size_t ca_line;	     /* first @cert-authority line */
	size_t broken_line;  /* first @-marker line with an unreadable key */
	char *other;	     /* fingerprint of the first other pinned key */
};

static void scan_line(struct kh_scan *s, char *line, size_t lineno)
{
	char *p = line, *hosts = next_field(&p);
	enum marker m = MARK_NONE;
	if (!hosts || hosts[0] == '#')
		return;
	if (hosts[0] == '@') {
		if (strcmp(hosts, "@revoked") == 0)
			m = MARK_REVOKED;
		else if (strcmp(hosts, "@cert-authority") == 0)
			m = MARK_CA;
		else
			return; /* an unknown marker: OpenSSH skips the line too */
		hosts = next_field(&p);
	}
	if (!hosts || hosts_match(hosts, &s->ns) <= 0)
		return;
	char *type = next_field(&p), *b64 = type ? next_field(&p) : NULL;
	char ktype[KEY_TYPE_MAX + 1];
	size_t klen = 0;
	unsigned char *key = b64 ? b64_decode(b64, strlen(b64), &klen) : NULL;
	bool readable = key && blob_type(key, klen, ktype) && strcmp(ktype, type) == 0;
	bool same = readable && klen == s->len && memcmp(key, s->blob, klen) == 0;
	if (!readable && m != MARK_NONE && !s->broken_line)
		s->broken_line = lineno;
	else if (readable && m == MARK_REVOKED && same && !s->revoked_line)
		s->revoked_line = lineno;
	else if (readable && m == MARK_CA && !s->ca_line)
		s->ca_line = lineno;
	else if (readable && m == MARK_NONE && same && !s->same_line)
		s->same_line = lineno;
	else if (readable && m == MARK_NONE && !same && !s->other)
		s->other = sshkey_fingerprint(key, klen);
	free(key);
}

/* Runs scan_line over every line of text[0..n) (a copy is cut up), within
 * the bounds at the top of this section. -1 with *err past one of them. */
static int scan(struct kh_scan *s, const char *text, size_t n, const char *path, char **err)
{
	char *copy = xmalloc(n + 1), *end = copy + n;
	int rc = 0;
	memcpy(copy, text, n);
	copy[n] = '\0';
	size_t lineno = 0;
	for (char *line = copy; line < end && rc == 0;) {
		char *nl = memchr(line, '\n', (size_t)(end - line));
		size_t linelen = (size_t)((nl ? nl : end) - line);
		if (++lineno > KNOWN_HOSTS_MAX_LINES) {
			*err = xasprintf("%s: more than %d lines; refusing to use it", path,
					 KNOWN_HOSTS_MAX_LINES);
			rc = -1;
		} else if (linelen > KNOWN_HOSTS_LINE_MAX) {
			*err = xasprintf("%s line %zu: longer than %d bytes; refusing to use the "
					 "file",
					 path, lineno, KNOWN_HOSTS_LINE_MAX);
			rc = -1;
		} else {
			line[linelen] = '\0';
			scan_line(s, line, lineno);
			line += linelen + 1;
		}
	}
	free(copy);
	return rc;
}

/* Steps 1-6 at the top of this section, on a completed scan. */
static enum known_hosts_result decide(const struct kh_scan *s, const char *path, char **err)
{
	if (s->revoked_line) {
		char *fp = sshkey_fingerprint(s->blob, s->len);
		*err = xasprintf("host key %s presented by %s is marked @revoked in %s line %zu; "
				 "refusing to connect",
				 fp, s->name, path, s->revoked_line);
		free(fp);
		return KNOWN_HOSTS_MISMATCH;
	}
	if (s->broken_line) {
		*err = xasprintf("%s line %zu: unreadable key in a @revoked or @cert-authority "
				 "entry for %s; refusing to connect until it is fixed",
				 path, s->broken_line, s->name);
		return KNOWN_HOSTS_ERROR;
	}
	if (s->same_line) {
		if (s->ca_line) {
			char *ca = xasprintf("%zu", s->ca_line);
			log_warn(LOG_ATTRS("host", s->name, "path", path, "line", ca),
				 "known_hosts @cert-authority entry ignored: Relay verifies plain "
				 "host keys only, and the presented key is pinned");
			free(ca);
		}
		return KNOWN_HOSTS_MATCH;
	}
	if (s->ca_line) {
		*err = xasprintf("%s line %zu: @cert-authority entries are not supported (Relay "
				 "verifies plain host keys, not certificates), and %s has no plain "
				 "entry for the presented key; refusing to connect. Pin the host's "
				 "key with a plain line instead",
				 path, s->ca_line, s->name);
		return KNOWN_HOSTS_ERROR;
	}
	if (s->other) {
		char *presented = sshkey_fingerprint(s->blob, s->len);
		*err = xasprintf("host key for %s has CHANGED (pinned %s, presented %s): possible "
				 "man-in-the-middle attack; refusing to connect. If the server's "
				 "key was genuinely rotated, edit %s and sync again",
				 s->name, s->other, presented, path);
		free(presented);
		return KNOWN_HOSTS_MISMATCH;
	}
	return KNOWN_HOSTS_NEW;
}

static bool host_ok(const char *host)
{
	size_t n = strlen(host);
	if (n == 0 || n > HOST_NAME_MAX_ || strchr("#|@", host[0]))
		return false;
	/* ',' would split the appended line's host list; '*', '?' and '!'
	 * would make the pin a pattern for other hosts */
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)host[i] <= ' ' || (unsigned char)host[i] >= 0x7f ||
		    strchr(",*?!", host[i]))
			return false;
	return true;
}

/* The lowercased lookup name of host:port and the blob's type, or NULL
 * with *err for a bad host, port or blob. */
static char *lookup_name(const char *host, int port, const unsigned char *blob, size_t len,
			 char type[KEY_TYPE_MAX + 1], char **err)
{
	if (!host || !host_ok(host) || port < 1 || port > 65535) {
		*err = xstrdup("invalid host name or port for known_hosts");
		return NULL;
	}
	char *name = port == 22 ? xstrdup(host) : xasprintf("[%s]:%d", host, port);
	for (char *c = name; *c; c++)
		*c = lower(*c);
	if (!blob || !blob_type(blob, len, type)) {
		*err = xasprintf("malformed host key presented by %s (%zu bytes)", name, len);
		free(name);
		return NULL;
	}
	return name;
}

enum known_hosts_result sshkey_known_hosts_check(const char *text, size_t n, const char *path,
						 const char *host, int port,
						 const unsigned char *blob, size_t len, char **err)
{
	char type[KEY_TYPE_MAX + 1];
	char *name = lookup_name(host, port, blob, len, type, err);
	if (!name)
		return KNOWN_HOSTS_ERROR;
	struct kh_scan *s = xcalloc(1, sizeof *s); /* ~6 KiB: not on the stack */
	name_sets_init(&s->ns, name);
	s->name = name;
	s->blob = blob;
	s->len = len;
	enum known_hosts_result res = KNOWN_HOSTS_ERROR;
	if (scan(s, text, n, path, err) == 0)
		res = decide(s, path, err);
	free(s->other);
	free(s);
	free(name);
	return res;
}

enum known_hosts_result sshkey_known_hosts_verify(const char *ssh_dir, const char *host, int port,
						  const unsigned char *blob, size_t len, char **err)
{
	char type[KEY_TYPE_MAX + 1];
	char *name = lookup_name(host, port, blob, len, type, err);
	if (!name)
		return KNOWN_HOSTS_ERROR;
	char *path = xasprintf("%s/%s", ssh_dir, SSHKEY_KNOWN_HOSTS);
	char *text = NULL, *line = NULL, *b64 = NULL;
	size_t n = 0;
	int dfd = -1, fd = -1;
	enum known_hosts_result res = KNOWN_HOSTS_ERROR;
	pthread_mutex_lock(&known_hosts_lock);
	if (open_ssh_dir(ssh_dir, true, &dfd, err) < 0 ||
	    open_checked(dfd, SSHKEY_KNOWN_HOSTS, path, O_RDWR | O_CREAT | O_APPEND, 022, &fd,
			 err) < 0)
		goto out;
	if (flock(fd, LOCK_EX) < 0) {
		sys_error(err, "cannot lock", path, errno);
		goto out;
	}
	/* KNOWN_HOSTS_MAX: a larger file is refused before it is scanned */
	if (read_bounded(fd, KNOWN_HOSTS_MAX, path, &text, &n, err) < 0)
		goto out;
	res = sshkey_known_hosts_check(text, n, path, host, port, blob, len, err);
	if (res != KNOWN_HOSTS_NEW)
		goto out;
	b64 = b64_encode(blob, len);
	line = xasprintf("%s%s %s %s\n", n > 0 && text[n - 1] != '\n' ? "\n" : "", name, type, b64);
	if (write_all(fd, line, strlen(line)) < 0 || fsync(fd) < 0) {
		sys_error(err, "cannot append to", path, errno);
		res = KNOWN_HOSTS_ERROR;
	}
out:
	if (fd >= 0)
		close(fd); /* releases the flock */
	if (dfd >= 0)
		close(dfd);
	pthread_mutex_unlock(&known_hosts_lock);
	free(text);
	free(line);
	free(b64);
	free(path);
	free(name);
	return res;
}
