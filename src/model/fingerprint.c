/* A function's fingerprint; the byte string hashed is in fingerprint.h. */
#include "model/fingerprint.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "model/runtime.h"
#include "base/util.h"

/* ---- hashing ---------------------------------------------------------- */

static void put_u64(EVP_MD_CTX *c, uint64_t v)
{
	unsigned char b[8];
	for (int i = 7; i >= 0; i--) {
		b[i] = (unsigned char)(v & 0xff);
		v >>= 8;
	}
	EVP_DigestUpdate(c, b, sizeof b);
}

static void put_bytes(EVP_MD_CTX *c, const void *p, size_t n)
{
	put_u64(c, n);
	if (n)
		EVP_DigestUpdate(c, p, n);
}

static void put_str(EVP_MD_CTX *c, const char *s)
{
	put_bytes(c, s ? s : "", s ? strlen(s) : 0);
}

static void put_strv(EVP_MD_CTX *c, const char *const *v)
{
	size_t n = 0;
	while (v && v[n])
		n++;
	put_u64(c, n);
	for (size_t i = 0; i < n; i++)
		put_str(c, v[i]);
}

static EVP_MD_CTX *digest_new(void)
{
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	if (!c || EVP_DigestInit_ex(c, EVP_sha256(), NULL) != 1) {
		/* Only out-of-memory makes SHA-256 unavailable: like xmalloc. */
		fputs("relay: out of memory (SHA-256 context)\n", stderr);
		abort();
	}
	return c;
}

static unsigned char recipe_digest[32];
static pthread_once_t recipe_once = PTHREAD_ONCE_INIT;

static void recipe_init(void)
{
	EVP_MD_CTX *c = digest_new();
	put_str(c, "relay-recipe");
	put_str(c, FINGERPRINT_RECIPE_VERSION);
	put_str(c, RUNTIME_APP_DIR);
	put_str(c, RUNTIME_BOOTSTRAP_DIR);
	put_u64(c, runtime_count());
	for (size_t i = 0; i < runtime_count(); i++) {
		const struct runtime *r = runtime_at(i);
		put_str(c, r->name);
		put_str(c, r->base_image);
		put_str(c, r->bootstrap_name);
		put_str(c, r->bootstrap);
		put_strv(c, r->command);
		put_strv(c, r->image_env);
		put_u64(c, r->ndeps);
		for (size_t j = 0; j < r->ndeps; j++) {
			put_str(c, r->deps[j].manifest);
			put_strv(c, r->deps[j].files);
			put_str(c, r->deps[j].command);
		}
		put_u64(c, r->nfiles);
		for (size_t j = 0; j < r->nfiles; j++) {
			put_str(c, r->files[j].path);
			put_str(c, r->files[j].content);
			put_u64(c, r->files[j].only_if_missing);
		}
	}
	unsigned int n = 0;
	EVP_DigestFinal_ex(c, recipe_digest, &n);
	EVP_MD_CTX_free(c);
}

void fingerprint_recipe(unsigned char out[32])
{
	pthread_once(&recipe_once, recipe_init);
	memcpy(out, recipe_digest, 32);
}

void fingerprint_tree_with_recipe(const struct fn_tree *t, const unsigned char recipe[32],
				  char out[FINGERPRINT_HEX_LEN + 1])
{
	EVP_MD_CTX *c = digest_new();
	static const char magic[] = "relay-fingerprint-v1";
	EVP_DigestUpdate(c, magic, sizeof magic); /* with its NUL */
	EVP_DigestUpdate(c, recipe, 32);
	put_u64(c, t->n);
	for (size_t i = 0; i < t->n; i++) {
		unsigned char kind = (unsigned char)t->v[i].kind;
		EVP_DigestUpdate(c, &kind, 1);
		put_str(c, t->v[i].path);
		put_bytes(c, t->v[i].data, t->v[i].len);
	}
	unsigned char md[32];
	unsigned int n = 0;
	EVP_DigestFinal_ex(c, md, &n);
	EVP_MD_CTX_free(c);
	hex_encode(md, sizeof md, out);
}

void fingerprint_tree(const struct fn_tree *t, char out[FINGERPRINT_HEX_LEN + 1])
{
	unsigned char recipe[32];
	fingerprint_recipe(recipe);
	fingerprint_tree_with_recipe(t, recipe, out);
}

int fingerprint_dir(const char *dir, char out[FINGERPRINT_HEX_LEN + 1], char **err)
{
	struct fn_tree t;
	if (fn_tree_load(dir, &t, err) < 0)
		return -1;
	fingerprint_tree(&t, out);
	fn_tree_free(&t);
	return 0;
}
