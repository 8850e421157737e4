#include <fcntl.h>
#include <fnmatch.h>
#include <git2.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "git/sshkey.h"
#include "t.h"
#include "tfiles.h"
#include "base/util.h"

/* First line of a shell command's standard output. */
static char *run(const char *cmd)
{
	FILE *p = popen(cmd, "r");
	char line[1024] = "";
	if (!p)
		return NULL;
	if (!fgets(line, sizeof line, p))
		line[0] = '\0';
	pclose(p);
	line[strcspn(line, "\n")] = '\0';
	return xstrdup(line);
}

/* An SSH public key blob: string type, then each part as a string. */
static size_t make_blob(unsigned char *out, const char *type, int nparts, size_t part_len,
			unsigned char fill)
{
	size_t n = 0;
	size_t tl = strlen(type);
	out[n++] = 0, out[n++] = 0, out[n++] = 0, out[n++] = (unsigned char)tl;
	memcpy(out + n, type, tl);
	n += tl;
	for (int i = 0; i < nparts; i++) {
		out[n++] = 0, out[n++] = 0, out[n++] = 0, out[n++] = (unsigned char)part_len;
		memset(out + n, fill + i, part_len);
		n += part_len;
	}
	return n;
}

static char *b64(const unsigned char *p, size_t n)
{
	char *s = xmalloc(4 * ((n + 2) / 3) + 1);
	EVP_EncodeBlock((unsigned char *)s, p, (int)n);
	return s;
}

TEST(generate_writes_key_files)
{
	char *tmp = t_tmpdir();
	char *parent = xasprintf("%s/data", tmp), *dir = xasprintf("%s/data/ssh", tmp);
	char *key = xasprintf("%s/id_ed25519", dir), *pubpath = xasprintf("%s.pub", key);
	char *line = NULL, *fp = NULL, *err = NULL;
	CHECK_INT(sshkey_generate(dir, false, &line, &fp, &err), 0);
	CHECK(err == NULL);
	CHECK_INT(t_mode_of(parent), 0700);
	CHECK_INT(t_mode_of(dir), 0700);
	CHECK_INT(t_mode_of(key), 0600);
	CHECK_INT(t_mode_of(pubpath), 0644);
	CHECK_INT(t_hidden_entries(dir), 0);
	CHECK(str_has_prefix(line, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI"));
	CHECK_INT(strlen(line), strlen("ssh-ed25519 ") + 68 + strlen(" relay"));
	CHECK(t_contains(line, " relay") && strcmp(line + strlen(line) - 6, " relay") == 0);
	CHECK(str_has_prefix(fp, "SHA256:"));
	CHECK_INT(strlen(fp), 7 + 43);
	char *pubtext = t_read_file(pubpath, 1 << 20, NULL), *want = xasprintf("%s\n", line);
	CHECK_STR(pubtext, want);
	char *text = t_read_file(key, 1 << 20, NULL);
	CHECK(str_has_prefix(text, "-----BEGIN OPENSSH PRIVATE KEY-----\n"));
	CHECK(t_contains(text, "\n-----END OPENSSH PRIVATE KEY-----\n"));
	int longest = 0;
	for (char *p = text; p && *p;) {
		char *nl = strchr(p, '\n');
		int n = nl ? (int)(nl - p) : (int)strlen(p);
		if (n > longest && !str_has_prefix(p, "-----"))
			longest = n;
		p = nl ? nl + 1 : NULL;
	}
	CHECK_INT(longest, 70);
	char *line2 = NULL, *fp2 = NULL;
	CHECK_INT(sshkey_public(dir, &line2, &fp2, &err), 0);
	CHECK_STR(line2, line);
	CHECK_STR(fp2, fp);
	char *path = sshkey_path(dir);
	CHECK_STR(path, key);
	free(path);
	free(line2);
	free(fp2);
	free(text);
	free(pubtext);
	free(want);
	free(line);
	free(fp);
	free(err);
	t_rmtree(tmp);
	free(key);
	free(pubpath);
	free(dir);
	free(parent);
	free(tmp);
}

/* A fresh directory and the path of the key file in it (not created). */
struct keyfix {
	char *tmp, *key;
};

static void keyfix_open(struct keyfix *fx)
{
	fx->tmp = t_tmpdir();
	fx->key = xasprintf("%s/id_ed25519", fx->tmp);
}

static void keyfix_close(struct keyfix *fx)
{
	t_rmtree(fx->tmp);
	free(fx->key);
	free(fx->tmp);
}

TEST(ssh_keygen_reads_the_key)
{
	struct keyfix fx;
	keyfix_open(&fx);
	char *line = NULL, *fp = NULL, *err = NULL;
	REQUIRE(sshkey_generate(fx.tmp, false, &line, &fp, &err) == 0);
	char *cmd = xasprintf("ssh-keygen -y -f '%s' 2>&1", fx.key);
	char *out = run(cmd);
	/* type and base64 must agree; the comment may or may not be printed */
	char *type_b64 = xstrndup(line, strlen(line) - strlen(" relay"));
	CHECK(str_has_prefix(out, type_b64));
	CHECK(out && (out[strlen(type_b64)] == '\0' || out[strlen(type_b64)] == ' '));
	free(cmd);
	free(out);
	/* without the .pub beside it, ssh-keygen must read the private key */
	char *pubpath = xasprintf("%s.pub", fx.key);
	unlink(pubpath);
	free(pubpath);
	cmd = xasprintf("ssh-keygen -lf '%s' 2>&1", fx.key);
	out = run(cmd);
	char *want = xasprintf("256 %s relay (ED25519)", fp);
	CHECK_STR(out, want);
	free(want);
	free(cmd);
	free(out);
	free(type_b64);
	free(line);
	free(fp);
	free(err);
	keyfix_close(&fx);
}

TEST(generate_refuses_overwrite_without_force)
{
	struct keyfix fx;
	keyfix_open(&fx);
	char *line = NULL, *fp = NULL, *err = NULL;
	REQUIRE(sshkey_generate(fx.tmp, false, &line, &fp, &err) == 0);
	char *before = t_read_file(fx.key, 1 << 20, NULL);
	char *line2 = NULL, *fp2 = NULL;
	CHECK_INT(sshkey_generate(fx.tmp, false, &line2, &fp2, &err), -EEXIST);
	CHECK(t_contains(err, fx.key));
	CHECK(line2 == NULL && fp2 == NULL);
	char *after = t_read_file(fx.key, 1 << 20, NULL);
	CHECK_STR(after, before);
	free(err);
	err = NULL;
	CHECK_INT(sshkey_generate(fx.tmp, true, &line2, &fp2, &err), 0);
	CHECK(line2 && strcmp(line2, line) != 0);
	CHECK(fp2 && strcmp(fp2, fp) != 0);
	CHECK_INT(t_mode_of(fx.key), 0600);
	CHECK_INT(t_hidden_entries(fx.tmp), 0);
	char *line3 = NULL, *fp3 = NULL;
	CHECK_INT(sshkey_public(fx.tmp, &line3, &fp3, &err), 0);
	CHECK_STR(line3, line2);
	CHECK_STR(fp3, fp2);
	free(line3);
	free(fp3);
	free(line2);
	free(fp2);
	free(before);
	free(after);
	free(line);
	free(fp);
	free(err);
	keyfix_close(&fx);
}

TEST(public_missing_or_refused)
{
	struct keyfix fx;
	keyfix_open(&fx);
	char *nodir = xasprintf("%s/nope", fx.tmp), *other = xasprintf("%s/other", fx.tmp);
	char *line = NULL, *fp = NULL, *err = NULL;
	CHECK_INT(sshkey_public(nodir, &line, &fp, &err), -ENOENT);
	free(err);
	err = NULL;
	CHECK_INT(sshkey_public(fx.tmp, &line, &fp, &err), -ENOENT);
	CHECK(t_contains(err, fx.key));
	free(err);
	err = NULL;
	REQUIRE(sshkey_generate(fx.tmp, false, &line, &fp, &err) == 0);
	free(line);
	free(fp);
	static const int loose[] = {0640, 0604, 0644, 0660, 0620, 0602};
	for (size_t i = 0; i < ARRAY_LEN(loose); i++) {
		chmod(fx.key, (mode_t)loose[i]);
		CHECK_INT(sshkey_public(fx.tmp, &line, &fp, &err), -1);
		CHECK(t_contains(err, fx.key));
		CHECK(line == NULL && fp == NULL);
		free(err);
		err = NULL;
	}
	chmod(fx.key, 0400);
	CHECK_INT(sshkey_public(fx.tmp, &line, &fp, &err), 0);
	free(line);
	free(fp);
	/* a symlink to a good key is refused */
	char *cmd = xasprintf("mv '%s' '%s' && ln -s '%s' '%s'", fx.key, other, other, fx.key);
	REQUIRE(system(cmd) == 0);
	CHECK_INT(sshkey_public(fx.tmp, &line, &fp, &err), -1);
	CHECK(t_contains(err, fx.key) && t_contains(err, "symbolic link"));
	free(err);
	err = NULL;
	/* so is a directory with that name */
	unlink(fx.key);
	mkdir(fx.key, 0700);
	CHECK_INT(sshkey_public(fx.tmp, &line, &fp, &err), -1);
	CHECK(t_contains(err, fx.key));
	free(err);
	free(cmd);
	keyfix_close(&fx);
	free(other);
	free(nodir);
}

/* Writes the armored base64 of bin[0..n) as the key file and reads it back. */
static int public_of(const char *dir, const char *key, const unsigned char *bin, size_t n)
{
	char *body = b64(bin, n);
	struct buf b;
	buf_init(&b, 1 << 20);
	buf_appendf(&b, "-----BEGIN OPENSSH PRIVATE KEY-----\n");
	for (size_t i = 0; i < strlen(body); i += 70)
		buf_appendf(&b, "%.70s\n", body + i);
	buf_appendf(&b, "-----END OPENSSH PRIVATE KEY-----\n");
	t_write_mode(key, b.data, b.len, 0600);
	char *line = NULL, *fp = NULL, *err = NULL;
	int rc = sshkey_public(dir, &line, &fp, &err);
	if (rc == 0 && (!line || !fp || err))
		rc = 99;
	if (rc < 0 && !t_contains(err, key))
		rc = 98;
	free(line);
	free(fp);
	free(err);
	buf_free(&b);
	free(body);
	return rc;
}

TEST(public_rejects_damaged_files)
{
	struct keyfix fx;
	keyfix_open(&fx);
	char *line = NULL, *fp = NULL, *err = NULL;
	REQUIRE(sshkey_generate(fx.tmp, false, &line, &fp, &err) == 0);
	free(line);
	free(fp);
	size_t len = 0;
	char *text = t_read_file(fx.key, 1 << 20, &len);
	/* the binary form, decoded from the file itself */
	const char *begin = "-----BEGIN OPENSSH PRIVATE KEY-----\n";
	char *body = xstrdup(text + strlen(begin));
	*strstr(body, "-----END") = '\0';
	size_t m = 0;
	for (size_t i = 0; body[i]; i++)
		if (body[i] != '\n')
			body[m++] = body[i];
	body[m] = '\0';
	unsigned char bin[1024];
	REQUIRE(m % 4 == 0 && m / 4 * 3 <= sizeof bin);
	int n = EVP_DecodeBlock(bin, (unsigned char *)body, (int)m);
	n -= body[m - 1] == '=' ? (body[m - 2] == '=' ? 2 : 1) : 0;
	REQUIRE(n == 234);
	CHECK_INT(public_of(fx.tmp, fx.key, bin, (size_t)n), 0); /* re-encoding round-trips */

	/* every truncation of the binary, and one byte too many */
	for (int k = 0; k < n; k++)
		if (public_of(fx.tmp, fx.key, bin, (size_t)k) != -1)
			T_FAIL_("truncated to %d bytes: accepted", k);
	bin[n] = 0;
	CHECK_INT(public_of(fx.tmp, fx.key, bin, (size_t)n + 1), -1);

	/* one corrupted byte in each field but the comment: magic, cipher, kdf,
	 * nkeys, public blob length and key, checkint, key type, public key, seed
	 * (no longer derives the public key), its public half, comment length */
	static const int at[] = {0, 19, 28, 38, 41, 80, 100, 110, 140, 170, 200, 228};
	for (size_t i = 0; i < ARRAY_LEN(at); i++) {
		bin[at[i]] ^= 0x01;
		if (public_of(fx.tmp, fx.key, bin, (size_t)n) != -1)
			T_FAIL_("byte %d corrupted: accepted", at[i]);
		bin[at[i]] ^= 0x01;
	}

	/* text-level damage */
	static const char *const texts[] = {
		"",
		"garbage",
		"-----BEGIN OPENSSH PRIVATE KEY-----\n",
		"-----BEGIN OPENSSH PRIVATE KEY-----\n-----END OPENSSH PRIVATE KEY-----\n",
		"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEA!!!!\n"
		"-----END OPENSSH PRIVATE KEY-----\n",
		"-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn=zaC1rZXktdjEA\n"
		"-----END OPENSSH PRIVATE KEY-----\n",
		"-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n",
	};
	for (size_t i = 0; i < ARRAY_LEN(texts); i++) {
		t_write_mode(fx.key, texts[i], strlen(texts[i]), 0600);
		char *l = NULL, *f = NULL, *e = NULL;
		if (sshkey_public(fx.tmp, &l, &f, &e) != -1 || !t_contains(e, fx.key))
			T_FAIL_("text %zu: accepted or no message", i);
		free(l);
		free(f);
		free(e);
	}
	/* truncations of the text itself (all but the final newline) */
	for (size_t k = 0; k + 1 < len; k += 7) {
		t_write_mode(fx.key, text, k, 0600);
		char *l = NULL, *f = NULL, *e = NULL;
		if (sshkey_public(fx.tmp, &l, &f, &e) != -1)
			T_FAIL_("text truncated to %zu bytes: accepted", k);
		free(l);
		free(f);
		free(e);
	}
	/* an oversized file is refused without being parsed */
	char *big = xmalloc(70 * 1024);
	memset(big, 'A', 70 * 1024);
	t_write_mode(fx.key, big, 70 * 1024, 0600);
	CHECK_INT(sshkey_public(fx.tmp, &line, &fp, &err), -1);
	CHECK(t_contains(err, "larger"));
	free(err);
	free(big);
	free(body);
	free(text);
	keyfix_close(&fx);
}

TEST(libgit2_accepts_the_key)
{
	struct keyfix fx;
	keyfix_open(&fx);
	char *line = NULL, *fp = NULL, *err = NULL;
	REQUIRE(sshkey_generate(fx.tmp, false, &line, &fp, &err) == 0);
	CHECK(git_libgit2_init() > 0);
	git_credential *cred = NULL;
	CHECK_INT(git_credential_ssh_key_new(&cred, "git", NULL, fx.key, NULL), 0);
	CHECK(cred != NULL);
	if (cred)
		git_credential_free(cred);
	git_libgit2_shutdown();
	free(line);
	free(fp);
	keyfix_close(&fx);
}

/* ---- known_hosts ---- */

/* A known_hosts path in a fresh directory (not created yet) and the two
 * ed25519 keys most tests pin: A (bytes 0x11) and B (0x22), with their
 * base64. */
struct khfix {
	char *tmp, *kh;
	unsigned char a[64], b[64];
	size_t alen, blen;
	char *ba, *bb;
};

static void kh_open(struct khfix *fx)
{
	fx->tmp = t_tmpdir();
	fx->kh = xasprintf("%s/known_hosts", fx->tmp);
	fx->alen = make_blob(fx->a, "ssh-ed25519", 1, 32, 0x11);
	fx->blen = make_blob(fx->b, "ssh-ed25519", 1, 32, 0x22);
	fx->ba = b64(fx->a, fx->alen);
	fx->bb = b64(fx->b, fx->blen);
}

static void kh_close(struct khfix *fx)
{
	free(fx->ba);
	free(fx->bb);
	t_rmtree(fx->tmp);
	free(fx->kh);
	free(fx->tmp);
}

TEST(known_hosts_tofu)
{
	char *tmp = t_tmpdir(), *dir = xasprintf("%s/data/ssh", tmp);
	char *kh = xasprintf("%s/known_hosts", dir);
	unsigned char a[64], b[64];
	size_t alen = make_blob(a, "ssh-ed25519", 1, 32, 0x11);
	size_t blen = make_blob(b, "ssh-ed25519", 1, 32, 0x22);
	char *fa = sshkey_fingerprint(a, alen), *fb = sshkey_fingerprint(b, blen);
	char *ba = b64(a, alen), *bb = b64(b, blen);
	char *err = NULL;
	CHECK_INT(sshkey_known_hosts_verify(dir, "127.0.0.1", 2222, a, alen, &err),
		  KNOWN_HOSTS_NEW);
	CHECK(err == NULL);
	CHECK_INT(t_mode_of(dir), 0700);
	CHECK_INT(t_mode_of(kh), 0600);
	char *want = xasprintf("[127.0.0.1]:2222 ssh-ed25519 %s\n", ba);
	char *got = t_read_file(kh, 1 << 20, NULL);
	CHECK_STR(got, want);
	free(got);
	CHECK_INT(sshkey_known_hosts_verify(dir, "127.0.0.1", 2222, a, alen, &err),
		  KNOWN_HOSTS_MATCH);
	CHECK_INT(sshkey_known_hosts_verify(dir, "127.0.0.1", 2222, b, blen, &err),
		  KNOWN_HOSTS_MISMATCH);
	CHECK(t_contains(err, "host key for [127.0.0.1]:2222 has CHANGED"));
	CHECK(t_contains(err, fa) && t_contains(err, fb) && t_contains(err, kh));
	CHECK(t_contains(err, "man-in-the-middle"));
	free(err);
	err = NULL;
	got = t_read_file(kh, 1 << 20, NULL);
	CHECK_STR(got, want); /* never replaced */
	free(got);
	/* port 22 is the bare host: a different pin */
	CHECK_INT(sshkey_known_hosts_verify(dir, "127.0.0.1", 22, b, blen, &err), KNOWN_HOSTS_NEW);
	CHECK_INT(sshkey_known_hosts_verify(dir, "127.0.0.1", 22, b, blen, &err),
		  KNOWN_HOSTS_MATCH);
	CHECK_INT(sshkey_known_hosts_verify(dir, "127.0.0.1", 22, a, alen, &err),
		  KNOWN_HOSTS_MISMATCH);
	CHECK(t_contains(err, "host key for 127.0.0.1 has CHANGED"));
	free(err);
	err = NULL;
	CHECK_INT(sshkey_known_hosts_verify(dir, "127.0.0.1", 2223, b, blen, &err),
		  KNOWN_HOSTS_NEW);
	free(want);
	want = xasprintf("[127.0.0.1]:2222 ssh-ed25519 %s\n127.0.0.1 ssh-ed25519 %s\n"
			 "[127.0.0.1]:2223 ssh-ed25519 %s\n",
			 ba, bb, bb);
	got = t_read_file(kh, 1 << 20, NULL);
	CHECK_STR(got, want);
	free(got);
	free(want);
	free(fa);
	free(fb);
	free(ba);
	free(bb);
	t_rmtree(tmp);
	free(kh);
	free(dir);
	free(tmp);
}

TEST(known_hosts_rejects_bad_input)
{
	char *tmp = t_tmpdir(), *kh = xasprintf("%s/known_hosts", tmp);
	unsigned char good[64];
	size_t glen = make_blob(good, "ssh-ed25519", 1, 32, 0x11);
	static const struct {
		const char *what;
		const unsigned char *blob;
		size_t len;
	} cases[] = {
		{"empty", (const unsigned char *)"", 0},
		{"short length", (const unsigned char *)"\0\0\0", 3},
		{"type past the end", (const unsigned char *)"\0\0\0\x20ssh-ed25519", 15},
		{"empty type", (const unsigned char *)"\0\0\0\0\0\0\0\x01x", 9},
		{"type only", (const unsigned char *)"\0\0\0\x0bssh-ed25519", 15},
		{"key past the end",
		 (const unsigned char *)"\0\0\0\x03"
					"abc\0\0\0\x09xy",
		 13},
		{"trailing byte",
		 (const unsigned char *)"\0\0\0\x03"
					"abc\0\0\0\x01x!",
		 13},
		{"space in type", (const unsigned char *)"\0\0\0\x03a c\0\0\0\x01x", 12},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		char *err = NULL;
		if (sshkey_known_hosts_verify(tmp, "example.org", 22, cases[i].blob, cases[i].len,
					      &err) != KNOWN_HOSTS_ERROR ||
		    !err)
			T_FAIL_("blob \"%s\": not refused", cases[i].what);
		free(err);
	}
	CHECK_INT(t_mode_of(kh), -1); /* nothing pinned, file not even created */
	static const char *const hosts[] = {"", "a b", "a,b", "#x", "|1|x", "tab\there"};
	for (size_t i = 0; i < ARRAY_LEN(hosts); i++) {
		char *err = NULL;
		if (sshkey_known_hosts_verify(tmp, hosts[i], 22, good, glen, &err) !=
			    KNOWN_HOSTS_ERROR ||
		    !err)
			T_FAIL_("host \"%s\": not refused", hosts[i]);
		free(err);
	}
	char *err = NULL;
	CHECK_INT(sshkey_known_hosts_verify(tmp, "example.org", 0, good, glen, &err),
		  KNOWN_HOSTS_ERROR);
	free(err);
	err = NULL;
	CHECK_INT(sshkey_known_hosts_verify(tmp, "example.org", 65536, good, glen, &err),
		  KNOWN_HOSTS_ERROR);
	free(err);
	err = NULL;
	/* a known_hosts writable by others, or a symlink, is refused */
	t_write_mode(kh, "", 0, 0666);
	CHECK_INT(sshkey_known_hosts_verify(tmp, "example.org", 22, good, glen, &err),
		  KNOWN_HOSTS_ERROR);
	CHECK(t_contains(err, kh));
	free(err);
	err = NULL;
	unlink(kh);
	REQUIRE(symlink("/dev/null", kh) == 0);
	CHECK_INT(sshkey_known_hosts_verify(tmp, "example.org", 22, good, glen, &err),
		  KNOWN_HOSTS_ERROR);
	CHECK(t_contains(err, "symbolic link"));
	free(err);
	t_rmtree(tmp);
	free(kh);
	free(tmp);
}

TEST(known_hosts_reads_existing_file)
{
	struct khfix fx;
	kh_open(&fx);
	unsigned char c[64], rsa[300];
	size_t clen = make_blob(c, "ssh-ed25519", 1, 32, 0x33);
	size_t rlen = make_blob(rsa, "ssh-rsa", 2, 100, 0x44);
	char *bc = b64(c, clen), *br = b64(rsa, rlen);
	char *fr = sshkey_fingerprint(rsa, rlen);
	char *content =
		xasprintf("# Relay's pins\n"
			  "\n"
			  "   \t\n"
			  "|1|c2FsdA==|aGFzaA== ssh-ed25519 %s\n"	/* hashed: ignored */
			  "[127.0.0.1]:2222 ssh-ed25519 !!!notbase64\n" /* malformed: skipped */
			  "[127.0.0.1]:2222 ssh-rsa %s\n"	/* type disagrees: skipped */
			  "[127.0.0.1]:2222 ssh-ed25519 AAAA\n" /* bad blob: skipped */
			  "onlyhost\n"
			  "@cert-authority *.example.org ssh-ed25519 %s\n"
			  "gitlab.com,[127.0.0.1]:2222,example.org ssh-ed25519 %s comment here\r\n"
			  "multi.example ssh-rsa %s\n"
			  "multi.example ssh-ed25519 %s",
			  bc, fx.ba, bc, fx.ba, br, fx.bb);
	t_write_mode(fx.kh, content, strlen(content), 0600);
	char *err = NULL;
	CHECK_INT(sshkey_known_hosts_verify(fx.tmp, "127.0.0.1", 2222, fx.a, fx.alen, &err),
		  KNOWN_HOSTS_MATCH);
	CHECK_INT(sshkey_known_hosts_verify(fx.tmp, "example.org", 22, fx.a, fx.alen, &err),
		  KNOWN_HOSTS_MATCH);
	CHECK_INT(sshkey_known_hosts_verify(fx.tmp, "GitLab.com", 22, fx.a, fx.alen, &err),
		  KNOWN_HOSTS_MATCH);
	CHECK_INT(sshkey_known_hosts_verify(fx.tmp, "multi.example", 22, fx.b, fx.blen, &err),
		  KNOWN_HOSTS_MATCH);
	CHECK_INT(sshkey_known_hosts_verify(fx.tmp, "multi.example", 22, rsa, rlen, &err),
		  KNOWN_HOSTS_MATCH);
	CHECK(err == NULL);
	CHECK_INT(sshkey_known_hosts_verify(fx.tmp, "127.0.0.1", 2222, c, clen, &err),
		  KNOWN_HOSTS_MISMATCH);
	free(err);
	err = NULL;
	/* the first other pinned key is named, whatever its type */
	CHECK_INT(sshkey_known_hosts_verify(fx.tmp, "multi.example", 22, c, clen, &err),
		  KNOWN_HOSTS_MISMATCH);
	CHECK(t_contains(err, fr));
	free(err);
	err = NULL;
	/* a hashed entry for a host does not pin it; a new host is appended
	 * after a newline even though the last line had none */
	CHECK_INT(sshkey_known_hosts_verify(fx.tmp, "new.example", 2200, c, clen, &err),
		  KNOWN_HOSTS_NEW);
	char *want = xasprintf("%s\n[new.example]:2200 ssh-ed25519 %s\n", content, bc);
	char *got = t_read_file(fx.kh, 1 << 20, NULL);
	CHECK_STR(got, want);
	CHECK_INT(sshkey_known_hosts_verify(fx.tmp, "new.example", 2200, c, clen, &err),
		  KNOWN_HOSTS_MATCH);
	free(got);
	free(want);
	free(content);
	free(fr);
	free(bc);
	free(br);
	kh_close(&fx);
}

TEST(known_hosts_nul_byte_hides_no_pin)
{
	struct khfix fx;
	kh_open(&fx);
	struct buf f;
	buf_init(&f, 4096);
	buf_append(&f, "junk\0junk\n", 10);
	buf_appendf(&f, "h.example ssh-ed25519 %s\n", fx.ba);
	t_write_mode(fx.kh, f.data, f.len, 0600);
	char *err = NULL;
	CHECK_INT(sshkey_known_hosts_verify(fx.tmp, "h.example", 22, fx.b, fx.blen, &err),
		  KNOWN_HOSTS_MISMATCH);
	free(err);
	buf_free(&f);
	kh_close(&fx);
}

/* ---- known_hosts: hashed entries, markers, patterns, bounds ---- */

/* base64 of make_blob(.., "ssh-ed25519", 1, 32, 0x11) */
#define KEY_A "AAAAC3NzaC1lZDI1NTE5AAAAIBERERERERERERERERERERERERERERERERERERERERER"

/* sshkey_known_hosts_verify on tmp for host:port and blob; *err freed and the
 * message returned through msg (malloc'd, "" when none). */
static enum known_hosts_result verify_msg(const char *tmp, const char *host, int port,
					  const unsigned char *blob, size_t len, char **msg)
{
	char *err = NULL;
	enum known_hosts_result r = sshkey_known_hosts_verify(tmp, host, port, blob, len, &err);
	*msg = err ? err : xstrdup("");
	return r;
}

/* "|1|salt|hash" for name, computed here with OpenSSL's HMAC-SHA1. */
static char *hashed_host(const char *name, unsigned char salt_byte)
{
	unsigned char salt[20], md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;
	memset(salt, salt_byte, sizeof salt);
	HMAC(EVP_sha1(), salt, sizeof salt, (const unsigned char *)name, strlen(name), md, &n);
	char *bs = b64(salt, sizeof salt), *bh = b64(md, n);
	char *out = xasprintf("|1|%s|%s", bs, bh);
	free(bs);
	free(bh);
	return out;
}

/* A known_hosts hashed by the real ssh-keygen -H (what ssh-keyscan -H
 * writes) pins its hosts: the right key matches, another key is a changed
 * key, and names that are not in it (another host, the same host on
 * another port) are new. On the old code hashed lines were skipped, so the
 * pinned host was "new" and any key was trusted. */
TEST(known_hosts_hashed_by_ssh_keygen)
{
	if (system("command -v ssh-keygen >/dev/null 2>&1") != 0) {
		T_SKIP("ssh-keygen is not installed");
		return;
	}
	struct khfix fx;
	kh_open(&fx);
	char *plain = xasprintf("github.com ssh-ed25519 %s\n"
				"[git.example]:2222 ssh-ed25519 %s\n"
				"pinned.example ssh-ed25519 %s\n",
				fx.ba, fx.bb, fx.bb);
	t_write_mode(fx.kh, plain, strlen(plain), 0600);
	char *cmd = xasprintf("ssh-keygen -q -H -f '%s' >/dev/null 2>&1", fx.kh);
	REQUIRE(system(cmd) == 0);
	char *hashed = t_read_file(fx.kh, 1 << 20, NULL);
	REQUIRE(hashed != NULL);
	CHECK(!t_contains(hashed, "github.com") && !t_contains(hashed, "git.example"));
	CHECK(strncmp(hashed, "|1|", 3) == 0);
	chmod(fx.kh, 0600);
	char *m = NULL;
	static const struct {
		const char *host;
		int port;
		int key; /* 0: a, 1: b */
		enum known_hosts_result want;
	} cases[] = {
		{"github.com", 22, 0, KNOWN_HOSTS_MATCH},
		{"GitHub.COM", 22, 0, KNOWN_HOSTS_MATCH},
		{"github.com", 22, 1, KNOWN_HOSTS_MISMATCH},
		{"git.example", 2222, 1, KNOWN_HOSTS_MATCH},
		{"git.example", 2222, 0, KNOWN_HOSTS_MISMATCH},
		{"pinned.example", 22, 1, KNOWN_HOSTS_MATCH},
		{"pinned.example", 22, 0, KNOWN_HOSTS_MISMATCH},
		{"git.example", 22, 0, KNOWN_HOSTS_NEW},  /* port 22: another name */
		{"github.com", 2222, 0, KNOWN_HOSTS_NEW}, /* "[github.com]:2222" */
		{"gitlab.com", 22, 0, KNOWN_HOSTS_NEW},	  /* not in the file */
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		const unsigned char *k = cases[i].key ? fx.b : fx.a;
		size_t kl = cases[i].key ? fx.blen : fx.alen;
		enum known_hosts_result r =
			verify_msg(fx.tmp, cases[i].host, cases[i].port, k, kl, &m);
		if (r != cases[i].want)
			T_FAIL_("%s:%d key %d: got %d, want %d (%s)", cases[i].host, cases[i].port,
				cases[i].key, r, cases[i].want, m);
		if (r == KNOWN_HOSTS_MISMATCH && !t_contains(m, "has CHANGED"))
			T_FAIL_("%s:%d: message \"%s\"", cases[i].host, cases[i].port, m);
		free(m);
	}
	/* the three NEW cases were appended as plain lines after the hashed */
	char *after = t_read_file(fx.kh, 1 << 20, NULL);
	char *tail = xasprintf("%sgit.example ssh-ed25519 %s\n[github.com]:2222 ssh-ed25519 %s\n"
			       "gitlab.com ssh-ed25519 %s\n",
			       hashed, fx.ba, fx.ba, fx.ba);
	CHECK_STR(after, tail);
	free(tail);
	free(after);

	/* an entry hashed here (independently of ssh-keygen) for a bracketed
	 * name matches too, and no other name */
	char *h = hashed_host("[h.example]:2200", 0x5a);
	char *line = xasprintf("%s ssh-ed25519 %s\n", h, fx.bb);
	t_write_mode(fx.kh, line, strlen(line), 0600);
	CHECK_INT(verify_msg(fx.tmp, "h.example", 2200, fx.b, fx.blen, &m), KNOWN_HOSTS_MATCH);
	free(m);
	CHECK_INT(verify_msg(fx.tmp, "h.example", 2200, fx.a, fx.alen, &m), KNOWN_HOSTS_MISMATCH);
	free(m);
	CHECK_INT(verify_msg(fx.tmp, "h.example", 2201, fx.b, fx.blen, &m), KNOWN_HOSTS_NEW);
	free(m);
	free(line);
	free(h);
	free(hashed);
	free(cmd);
	free(plain);
	kh_close(&fx);
}

/* @revoked refuses its key for the hosts it names, whatever else pins it,
 * naming the file and the line; nothing is appended. On the old code
 * @-lines were skipped, so a revoked key was pinned on first use, or
 * matched a plain pin. */
TEST(known_hosts_revoked_key_refused)
{
	struct khfix fx;
	kh_open(&fx);
	unsigned char c[64];
	size_t clen = make_blob(c, "ssh-ed25519", 1, 32, 0x33);
	char *bc = b64(c, clen);
	char *fa = sshkey_fingerprint(fx.a, fx.alen), *fc = sshkey_fingerprint(c, clen);
	char *hc = hashed_host("hashed.example", 0x01);
	char *content = xasprintf("# pins\n"
				  "github.com ssh-ed25519 %s\n"
				  "@revoked * ssh-ed25519 %s\n"
				  "@revoked   %s ssh-ed25519 %s revoked 2026-01-01\n"
				  "other.example ssh-ed25519 %s\n",
				  fx.ba, fx.ba, hc, bc, bc);
	t_write_mode(fx.kh, content, strlen(content), 0600);
	char *m = NULL, *want = xasprintf("%s line 3", fx.kh);
	/* pinned and revoked: revocation wins */
	CHECK_INT(verify_msg(fx.tmp, "github.com", 22, fx.a, fx.alen, &m), KNOWN_HOSTS_MISMATCH);
	CHECK(t_contains(m, "@revoked") && t_contains(m, want) && t_contains(m, fa));
	CHECK(t_contains(m, "github.com"));
	free(m);
	/* "*": revoked for a host seen for the first time as well */
	CHECK_INT(verify_msg(fx.tmp, "new.example", 2222, fx.a, fx.alen, &m), KNOWN_HOSTS_MISMATCH);
	CHECK(t_contains(m, want) && t_contains(m, "[new.example]:2222"));
	free(m);
	/* a hashed @revoked entry: only for its host */
	free(want);
	want = xasprintf("%s line 4", fx.kh);
	CHECK_INT(verify_msg(fx.tmp, "hashed.example", 22, c, clen, &m), KNOWN_HOSTS_MISMATCH);
	CHECK(t_contains(m, "@revoked") && t_contains(m, want) && t_contains(m, fc));
	free(m);
	CHECK_INT(verify_msg(fx.tmp, "other.example", 22, c, clen, &m), KNOWN_HOSTS_MATCH);
	free(m);
	/* another key for an unpinned host is still trusted on first use */
	CHECK_INT(verify_msg(fx.tmp, "hashed.example", 22, fx.b, fx.blen, &m), KNOWN_HOSTS_NEW);
	free(m);
	char *got = t_read_file(fx.kh, 1 << 20, NULL);
	char *expect = xasprintf("%shashed.example ssh-ed25519 %s\n", content, fx.bb);
	CHECK_STR(got, expect); /* the refused keys were never appended */
	free(expect);
	free(got);
	free(want);
	free(content);
	free(hc);
	free(fa);
	free(fc);
	free(bc);
	kh_close(&fx);
}

/* @cert-authority cannot be honoured (no certificates are checked): a host
 * it names is refused rather than trusted on first use, unless the
 * presented key is pinned by a plain line, when the CA line is ignored
 * with a WARN naming it. On the old code the CA line was skipped and the
 * host's first key pinned. */
TEST(known_hosts_cert_authority)
{
	struct khfix fx;
	kh_open(&fx);
	unsigned char ca[64];
	size_t calen = make_blob(ca, "ssh-ed25519", 1, 32, 0x77);
	char *bca = b64(ca, calen);
	char *content = xasprintf("@cert-authority *.corp.example,!public.corp.example "
				  "ssh-ed25519 %s\n"
				  "pinned.corp.example ssh-ed25519 %s\n",
				  bca, fx.ba);
	t_write_mode(fx.kh, content, strlen(content), 0600);
	char *m = NULL, *want = xasprintf("%s line 1", fx.kh);
	t_capture_logs();
	CHECK_INT(verify_msg(fx.tmp, "git.corp.example", 22, fx.a, fx.alen, &m), KNOWN_HOSTS_ERROR);
	CHECK(t_contains(m, want) && t_contains(m, "@cert-authority") &&
	      t_contains(m, "git.corp.example"));
	free(m);
	CHECK_INT(verify_msg(fx.tmp, "pinned.corp.example", 22, fx.a, fx.alen, &m),
		  KNOWN_HOSTS_MATCH);
	free(m);
	CHECK_INT(verify_msg(fx.tmp, "pinned.corp.example", 22, fx.b, fx.blen, &m),
		  KNOWN_HOSTS_ERROR);
	CHECK(t_contains(m, "@cert-authority"));
	free(m);
	/* excluded from the CA by '!': an ordinary first contact */
	CHECK_INT(verify_msg(fx.tmp, "public.corp.example", 22, fx.b, fx.blen, &m),
		  KNOWN_HOSTS_NEW);
	free(m);
	char *logs = t_captured_logs();
	t_release_logs();
	CHECK(t_contains(logs, "level=WARN msg=\"known_hosts @cert-authority entry ignored"));
	CHECK(t_contains(logs, "host=pinned.corp.example") && t_contains(logs, "line=1"));
	free(logs);
	char *got = t_read_file(fx.kh, 1 << 20, NULL);
	char *expect = xasprintf("%spublic.corp.example ssh-ed25519 %s\n", content, fx.bb);
	CHECK_STR(got, expect);
	free(expect);
	free(got);
	free(want);
	free(content);
	free(bca);
	kh_close(&fx);
}

/* Malformed hashed entries and markers, and patterns: nothing crashes,
 * skipped lines pin nothing, and an unreadable key on a @revoked line for
 * the host refuses it (fail closed), naming the line. */
TEST(known_hosts_malformed_and_patterns)
{
	struct khfix fx;
	kh_open(&fx);
	char *good = hashed_host("h.example", 0x42); /* "|1|salt|hash" */
	char *salt = xstrndup(good + 3, (size_t)(strchr(good + 3, '|') - good - 3));
	char *short_salt = hashed_host("h.example", 0x42);
	short_salt[5] = '='; /* corrupt the base64 */
	char *long_hash = xasprintf("%sAAAA", good);
	char *x_lines[] = {
		xstrdup("|1|"),
		xstrdup("|1||"),
		xstrdup("|1|||"),
		xstrdup("|1|abc|def"),
		xasprintf("|1|%s|", salt),
		xasprintf("|1|%s", salt),
		xasprintf("|1|%s|!!!!", salt),
		xasprintf("|1|%s|%s", salt, salt + 4),
		short_salt,
		long_hash,
		xasprintf("|2|%s", good + 3),
		xasprintf("%s|", good),
		xasprintf("%s,h.example", good),
		xasprintf("|1|%s|%s|%s", salt, salt, salt),
		xstrdup("!h.example,*.example"),
		xstrdup("!*,h.example"),
		xstrdup("h.example?"),
		xstrdup("*.h.example"),
		xstrdup(",,"),
		xstrdup("[h.example]:22"),
	};
	char *m = NULL;
	for (size_t i = 0; i < ARRAY_LEN(x_lines); i++) {
		char *line = xasprintf("%s ssh-ed25519 %s\n", x_lines[i], fx.bb);
		t_write_mode(fx.kh, line, strlen(line), 0600);
		enum known_hosts_result r = verify_msg(fx.tmp, "h.example", 22, fx.a, fx.alen, &m);
		if (r != KNOWN_HOSTS_NEW)
			T_FAIL_("hosts field \"%s\": got %d (%s), want NEW", x_lines[i], r, m);
		free(m);
		free(line);
		free(x_lines[i]);
	}
	/* patterns that do name h.example pin it */
	static const char *const y_hosts[] = {
		"h.example",	"H.Example",  "*",	     "?.example",
		"*.example",	"h.*",	      "h*e",	     "x,h.example,y",
		"!x.example,*", "**.ex*mple", "*h.example*",
	};
	for (size_t i = 0; i < ARRAY_LEN(y_hosts); i++) {
		char *line = xasprintf("%s ssh-ed25519 %s\n", y_hosts[i], fx.bb);
		t_write_mode(fx.kh, line, strlen(line), 0600);
		enum known_hosts_result r = verify_msg(fx.tmp, "h.example", 22, fx.a, fx.alen, &m);
		if (r != KNOWN_HOSTS_MISMATCH)
			T_FAIL_("hosts field \"%s\": got %d (%s), want MISMATCH", y_hosts[i], r, m);
		free(m);
		free(line);
	}
	/* markers: unknown ones are skipped; a @revoked or @cert-authority line
	 * for the host without a readable key refuses it */
	static const struct {
		const char *text;
		enum known_hosts_result want;
	} z[] = {
		{"@revoked\n", KNOWN_HOSTS_NEW},
		{"@revoked h.example\n", KNOWN_HOSTS_ERROR},
		{"@revoked h.example ssh-ed25519\n", KNOWN_HOSTS_ERROR},
		{"@revoked h.example ssh-ed25519 !!!!\n", KNOWN_HOSTS_ERROR},
		{"@revoked h.example ssh-rsa " KEY_A "\n", KNOWN_HOSTS_ERROR},
		{"@cert-authority h.example ssh-ed25519 AAAA\n", KNOWN_HOSTS_ERROR},
		{"@revoked other.example ssh-ed25519 !!!!\n", KNOWN_HOSTS_NEW},
		{"@Revoked h.example ssh-ed25519 " KEY_A "\n", KNOWN_HOSTS_NEW},
		{"@bogus h.example ssh-ed25519 " KEY_A "\n", KNOWN_HOSTS_NEW},
		{"@ h.example\n", KNOWN_HOSTS_NEW},
		{"@revoked\th.example\tssh-ed25519\t" KEY_A "\r\n", KNOWN_HOSTS_MISMATCH},
	};
	for (size_t i = 0; i < ARRAY_LEN(z); i++) {
		char *text = xasprintf("# 1\n%s", z[i].text);
		t_write_mode(fx.kh, text, strlen(text), 0600);
		enum known_hosts_result r = verify_msg(fx.tmp, "h.example", 22, fx.a, fx.alen, &m);
		char *line2 = xasprintf("%s line 2", fx.kh);
		if (r != z[i].want || (r != KNOWN_HOSTS_NEW && !t_contains(m, line2)))
			T_FAIL_("\"%.50s\": got %d (%s), want %d", z[i].text, r, m, z[i].want);
		free(line2);
		free(m);
		free(text);
	}
	free(salt);
	free(good);
	kh_close(&fx);
}

/* Host patterns agree with fnmatch(3) (no escapes, no brackets) on random
 * patterns and names over a small alphabet, stars runs included: the
 * matcher runs a pattern over sets of name positions, a different route
 * from fnmatch's backtracking. */
TEST(known_hosts_patterns_agree_with_fnmatch)
{
	unsigned char a[64], b[64];
	size_t alen = make_blob(a, "ssh-ed25519", 1, 32, 0x11);
	size_t blen = make_blob(b, "ssh-ed25519", 1, 32, 0x22);
	char *bb = b64(b, blen);
	static const char pat_chars[] = "ab.*?A", name_chars[] = "ab.";
	uint32_t seed = 12345;
	int matched = 0;
	for (int i = 0; i < 3000; i++) {
		char pat[16], name[80];
		size_t pn = 0, nn = 0;
		seed = seed * 1103515245 + 12345;
		size_t plen = seed >> 16 & 7, nlen = 1 + (seed >> 20 & 7);
		if (i == 2999)
			nlen = 70; /* more than one 64-bit word of positions */
		for (; pn < plen; pn++) {
			seed = seed * 1103515245 + 12345;
			pat[pn] = pat_chars[(seed >> 16) % (sizeof pat_chars - 1)];
		}
		pat[pn] = '\0';
		for (; nn < nlen; nn++) {
			seed = seed * 1103515245 + 12345;
			name[nn] = name_chars[(seed >> 16) % (sizeof name_chars - 1)];
		}
		name[nn] = '\0';
		if (i == 2999)
			strlcpy_(pat, "*a*?*b", sizeof pat);
		char *text = xasprintf("%s ssh-ed25519 %s\n", pat, bb), *err = NULL;
		enum known_hosts_result r =
			sshkey_known_hosts_check(text, strlen(text), "kh", name, 22, a, alen, &err);
		bool want = fnmatch(pat, name, FNM_NOESCAPE | FNM_CASEFOLD) == 0;
		matched += want;
		if ((r == KNOWN_HOSTS_MISMATCH) != want)
			T_FAIL_("pattern \"%s\", name \"%s\": got %d, fnmatch says %s", pat, name,
				r, want ? "match" : "no match");
		free(err);
		free(text);
	}
	CHECK(matched > 100); /* both outcomes were exercised */
	free(bb);
}

/* The file is bounded in bytes, lines and line length; a breach refuses the
 * file naming it (and the line). On the old code only the byte bound
 * existed. Also: the worst pattern file under the bounds is checked (no
 * timing assertion: it only has to finish, which an exponential matcher
 * would not). */
TEST(known_hosts_bounds)
{
	struct khfix fx;
	kh_open(&fx);
	char *m = NULL;
	struct buf f;
	buf_init(&f, 2 << 20);
	for (int i = 0; i < 16384; i++)
		buf_append(&f, "#\n", 2);
	t_write_mode(fx.kh, f.data, f.len, 0600);
	CHECK_INT(verify_msg(fx.tmp, "h.example", 22, fx.a, fx.alen, &m), KNOWN_HOSTS_NEW);
	free(m);
	buf_reset(&f);
	for (int i = 0; i < 16385; i++)
		buf_append(&f, "\n", 1);
	t_write_mode(fx.kh, f.data, f.len, 0600);
	CHECK_INT(verify_msg(fx.tmp, "h.example", 22, fx.a, fx.alen, &m), KNOWN_HOSTS_ERROR);
	CHECK(t_contains(m, fx.kh) && t_contains(m, "more than 16384 lines"));
	free(m);
	/* a line of 32 KiB is fine, one byte more is not */
	buf_reset(&f);
	buf_append(&f, "# x\n", 4);
	for (int i = 0; i < 32 * 1024; i++)
		buf_append(&f, "#", 1);
	t_write_mode(fx.kh, f.data, f.len, 0600);
	CHECK_INT(verify_msg(fx.tmp, "h.example", 22, fx.a, fx.alen, &m), KNOWN_HOSTS_NEW);
	free(m);
	buf_reset(&f);
	buf_append(&f, "# x\n", 4);
	for (int i = 0; i <= 32 * 1024; i++)
		buf_append(&f, "#", 1);
	t_write_mode(fx.kh, f.data, f.len, 0600);
	CHECK_INT(verify_msg(fx.tmp, "h.example", 22, fx.a, fx.alen, &m), KNOWN_HOSTS_ERROR);
	char *want = xasprintf("%s line 2: longer than 32768 bytes", fx.kh);
	CHECK(t_contains(m, want));
	free(want);
	free(m);
	/* 1 MiB + 1 byte */
	buf_reset(&f);
	for (int i = 0; i < 1024; i++) {
		char line[1024];
		memset(line, '#', sizeof line);
		line[sizeof line - 1] = '\n';
		buf_append(&f, line, sizeof line);
	}
	buf_append(&f, "\n", 1);
	t_write_mode(fx.kh, f.data, f.len, 0600);
	CHECK_INT(verify_msg(fx.tmp, "h.example", 22, fx.a, fx.alen, &m), KNOWN_HOSTS_ERROR);
	CHECK(t_contains(m, "larger than 1048576 bytes"));
	free(m);
	/* worst patterns: many stars that almost match, just under 1 MiB */
	buf_reset(&f);
	while (f.len < (1 << 20) - 4096) {
		buf_appendf(&f, "@revoked ");
		for (int i = 0; i < 500; i++)
			buf_append(&f, i % 2 ? "*" : "a", 1);
		buf_appendf(&f, "b,");
		for (int i = 0; i < 1000; i++)
			buf_append(&f, "*?", 2);
		buf_appendf(&f, " ssh-ed25519 AAAA\n");
	}
	t_write_mode(fx.kh, f.data, f.len, 0600);
	char *host = xmalloc(256);
	memset(host, 'a', 255);
	host[255] = '\0';
	CHECK_INT(verify_msg(fx.tmp, host, 22, fx.a, fx.alen, &m), KNOWN_HOSTS_NEW);
	free(m);
	free(host);
	buf_free(&f);
	kh_close(&fx);
}

struct race {
	const char *dir;
	const unsigned char *blob;
	size_t len;
	enum known_hosts_result res;
};

static void *race_verify(void *arg)
{
	struct race *r = arg;
	char *err = NULL;
	r->res = sshkey_known_hosts_verify(r->dir, "race.example", 22, r->blob, r->len, &err);
	free(err);
	return NULL;
}

TEST(known_hosts_pins_once_under_concurrency)
{
	struct khfix fx;
	kh_open(&fx);
	pthread_t th[8];
	struct race r[8];
	for (int i = 0; i < 8; i++) {
		r[i] = (struct race){fx.tmp, fx.a, fx.alen, KNOWN_HOSTS_ERROR};
		pthread_create(&th[i], NULL, race_verify, &r[i]);
	}
	int news = 0, matches = 0;
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		news += r[i].res == KNOWN_HOSTS_NEW;
		matches += r[i].res == KNOWN_HOSTS_MATCH;
	}
	CHECK_INT(news, 1);
	CHECK_INT(matches, 7);
	char *got = t_read_file(fx.kh, 1 << 20, NULL);
	CHECK(got && strchr(got, '\n') == got + strlen(got) - 1); /* one line */
	free(got);
	kh_close(&fx);
}

TEST(fingerprint_matches_openssh)
{
	/* ssh-keygen -lf of "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBERERERERERERERERERERERERERERERERERERERERE" */
	unsigned char a[64];
	size_t alen = make_blob(a, "ssh-ed25519", 1, 32, 0x11);
	char *tmp = t_tmpdir(), *pub = xasprintf("%s/k.pub", tmp);
	char *ba = b64(a, alen), *line = xasprintf("ssh-ed25519 %s x\n", ba);
	t_write_mode(pub, line, strlen(line), 0600);
	char *cmd = xasprintf("ssh-keygen -lf '%s'", pub);
	char *out = run(cmd);
	char *fp = sshkey_fingerprint(a, alen);
	char *want = xasprintf("256 %s x (ED25519)", fp);
	CHECK_STR(out, want);
	free(want);
	free(fp);
	free(out);
	free(cmd);
	free(line);
	free(ba);
	t_rmtree(tmp);
	free(pub);
	free(tmp);
}

T_MAIN(T_CASE(generate_writes_key_files), T_CASE(ssh_keygen_reads_the_key),
       T_CASE(generate_refuses_overwrite_without_force), T_CASE(public_missing_or_refused),
       T_CASE(public_rejects_damaged_files), T_CASE(libgit2_accepts_the_key),
       T_CASE(known_hosts_tofu), T_CASE(known_hosts_rejects_bad_input),
       T_CASE(known_hosts_reads_existing_file), T_CASE(known_hosts_nul_byte_hides_no_pin),
       T_CASE(known_hosts_hashed_by_ssh_keygen), T_CASE(known_hosts_revoked_key_refused),
       T_CASE(known_hosts_cert_authority), T_CASE(known_hosts_malformed_and_patterns),
       T_CASE(known_hosts_patterns_agree_with_fnmatch), T_CASE(known_hosts_bounds),
       T_CASE(known_hosts_pins_once_under_concurrency), T_CASE(fingerprint_matches_openssh))
