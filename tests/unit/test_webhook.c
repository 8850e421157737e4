#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "git/gitsync.h"
#include "base/log.h"
#include "model/secret.h"
#include "t.h"
#include "tfiles.h"
#include "thttp.h"
#include "git/webhook.h"

#define REPO "git@github.com:acme/functions.git"
#define HEX40 "0123456789abcdef0123456789abcdef01234567"

/* ---- helpers ---------------------------------------------------------- */

/* "sha256=<hex>" of body under key, as GitHub sends it. */
static char *sign(const char *key, const char *body)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;
	HMAC(EVP_sha256(), key, (int)strlen(key), (const unsigned char *)body, strlen(body), md,
	     &n);
	struct buf b;
	buf_init(&b, 128);
	buf_appendf(&b, "sha256=");
	for (unsigned i = 0; i < n; i++)
		buf_appendf(&b, "%02x", md[i]);
	return buf_steal(&b);
}

/* A push payload; NULL fields are left out. */
static char *push_json(const char *ref, const char *ssh_url, const char *clone_url,
		       const char *full_name)
{
	struct buf b;
	buf_init(&b, 4096);
	buf_appendf(&b, "{\"ref\":\"%s\",\"after\":\"0123\",\"repository\":{", ref);
	const char *sep = "";
	if (ssh_url)
		buf_appendf(&b, "%s\"ssh_url\":\"%s\"", sep, ssh_url), sep = ",";
	if (clone_url)
		buf_appendf(&b, "%s\"clone_url\":\"%s\"", sep, clone_url), sep = ",";
	if (full_name)
		buf_appendf(&b, "%s\"full_name\":\"%s\"", sep, full_name);
	buf_appendf(&b, "}}");
	return buf_steal(&b);
}

static char *form_encode(const char *json)
{
	struct buf b;
	buf_init(&b, 1 << 16);
	buf_appendf(&b, "zen=x+y&payload=");
	for (const unsigned char *p = (const unsigned char *)json; *p; p++) {
		if (*p == ' ')
			buf_appendf(&b, "+");
		else if ((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-')
			buf_appendf(&b, "%c", *p);
		else
			buf_appendf(&b, "%%%02X", *p);
	}
	buf_appendf(&b, "&hook_id=1");
	return buf_steal(&b);
}

/* ---- gitsync_repo_identity (semantics the webhook relies on) -------------- */

TEST(repo_identity_forms)
{
	static const struct {
		const char *in, *want;
	} cases[] = {
		{"git@github.com:acme/functions.git", "github.com/acme/functions"},
		{"github.com:acme/functions", "github.com/acme/functions"},
		{"ssh://git@GitHub.com:22/acme/functions.git", "github.com/acme/functions"},
		{"ssh://github.com/acme/functions/", "github.com/acme/functions"},
		{"https://github.com/acme/functions.git", "github.com/acme/functions"},
		{"https://GITHUB.com/acme/functions", "github.com/acme/functions"},
		{"http://user@git.example:8080/a/b.git", "git.example/a/b"},
		{"git://github.com/acme/functions.git", "github.com/acme/functions"},
		{"https://github.com/Acme/Functions.git", "github.com/Acme/Functions"},
		{"file:///srv/repo.git", NULL},
		{"/srv/repo.git", NULL},
		{"https://github.com", NULL},
		{"", NULL},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		char *got = gitsync_repo_identity(cases[i].in);
		if (cases[i].want ? !got || strcmp(got, cases[i].want) != 0 : got != NULL)
			T_FAIL_("\"%s\": got %s, want %s", cases[i].in, got ? got : "NULL",
				cases[i].want ? cases[i].want : "NULL");
		free(got);
	}
}

/* ---- signature -------------------------------------------------------- */

TEST(signature)
{
	/* GitHub's documented example ("Validating webhook deliveries"). */
	const char *key = "It's a Secret to Everybody", *body = "Hello, World!";
	const char *good =
		"sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
	const char *upper =
		"sha256=757107EA0EB2509FC211221CCE984B8A37570B6D7586C22C46F4379C8B043E17";
	size_t len = strlen(body), kl = strlen(key);
	CHECK(webhook_signature_ok(good, body, len, key, kl));
	CHECK(webhook_signature_ok(upper, body, len, key, kl));
	CHECK(!webhook_signature_ok(NULL, body, len, key, kl));
	CHECK(!webhook_signature_ok(good, body, len, "other", 5));
	CHECK(!webhook_signature_ok(good, "Hello, World?", len, key, kl));
	static const char *const bad[] = {
		"sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e18",
		"sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e1",
		"sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e170",
		"sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e1g",
		"sha1=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
		"SHA256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
		" sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
		"757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
		"sha256=",
		"",
	};
	for (size_t i = 0; i < ARRAY_LEN(bad); i++)
		if (webhook_signature_ok(bad[i], body, len, key, kl))
			T_FAIL_("accepted \"%s\"", bad[i]);
	/* binary bodies and an empty body */
	char *sig = sign("k", "");
	CHECK(webhook_signature_ok(sig, "", 0, "k", 1));
	free(sig);
}

/* ---- decide ----------------------------------------------------------- */

TEST(decide)
{
	char *main_ssh = push_json("refs/heads/main", REPO, NULL, NULL);
	char *dev = push_json("refs/heads/dev", REPO, NULL, NULL);
	char *main_sub = push_json("refs/heads/feature/main", REPO, NULL, NULL);
	char *tag = push_json("refs/tags/v1.2", REPO, NULL, NULL);
	char *other = push_json("refs/heads/main", "git@github.com:acme/other.git",
				"https://github.com/acme/other.git", "acme/other");
	char *clone =
		push_json("refs/heads/main", NULL, "https://github.com/acme/functions.git", NULL);
	char *full = push_json("refs/heads/main", NULL, NULL, "ACME/Functions");
	char *no_repo = xstrdup("{\"ref\":\"refs/heads/main\"}");
	char *url = xstrdup("{\"ref\":\"refs/heads/main\",\"repository\":{\"url\":"
			    "\"https://GitHub.com/acme/functions\"}}");
	char *deleted = xstrdup("{\"ref\":\"refs/heads/main\",\"deleted\":true,"
				"\"repository\":{\"ssh_url\":\"" REPO "\"}}");
	char *not_deleted = xstrdup("{\"ref\":\"refs/heads/main\",\"deleted\":false,"
				    "\"repository\":{\"ssh_url\":\"" REPO "\"}}");
	char *form = form_encode(main_ssh);
	char *form_other = form_encode(dev);
	char *tag_main = push_json("refs/tags/main", REPO, NULL, NULL);
	char *hex_branch = push_json("refs/heads/" HEX40, REPO, NULL, NULL);
	const char *json = "application/json";
	const char *formct = "application/x-www-form-urlencoded";

	static const char gitlab[] = "git@gitlab.com:acme/functions.git";
	const struct {
		const char *event, *ctype, *body, *repo, *ref;
		enum webhook_verdict want;
		const char *why;
	} cases[] = {
		{"push", json, main_ssh, REPO, "main", WEBHOOK_SYNC, "push"},
		{"push", json, main_ssh, REPO, NULL, WEBHOOK_SYNC, "push"}, /* default ref */
		{"push", json, main_ssh, REPO, "", WEBHOOK_SYNC, "push"},
		{"push", "application/json; charset=utf-8", main_ssh, REPO, "main", WEBHOOK_SYNC,
		 "push"},
		{"push", NULL, main_ssh, REPO, "main", WEBHOOK_SYNC, "push"},
		{"push", "text/plain", main_ssh, REPO, "main", WEBHOOK_SYNC, "push"},
		{"push", json, dev, REPO, "main", WEBHOOK_IGNORE, "other ref"},
		{"push", json, dev, REPO, "dev", WEBHOOK_SYNC, "push"},
		{"push", json, main_sub, REPO, "main", WEBHOOK_IGNORE, "other ref"},
		{"push", json, tag, REPO, "v1.2", WEBHOOK_SYNC, "push"},
		{"push", json, tag, REPO, "main", WEBHOOK_IGNORE, "other ref"},
		{"push", json, deleted, REPO, "main", WEBHOOK_IGNORE, "deleted ref"},
		{"push", json, not_deleted, REPO, "main", WEBHOOK_SYNC, "push"},
		{"ping", json, "{\"zen\":\"Design for failure.\"}", REPO, "main", WEBHOOK_IGNORE,
		 "ping"},
		{"issues", json, main_ssh, REPO, "main", WEBHOOK_IGNORE, "not a push event"},
		{NULL, json, main_ssh, REPO, "main", WEBHOOK_IGNORE, "not a push event"},
		{"Push", json, main_ssh, REPO, "main", WEBHOOK_IGNORE, "not a push event"},
		{"push", json, other, REPO, "main", WEBHOOK_IGNORE, "other repository"},
		{"push", json, no_repo, REPO, "main", WEBHOOK_IGNORE, "other repository"},
		{"push", json, clone, REPO, "main", WEBHOOK_SYNC, "push"},
		{"push", json, clone, "ssh://git@github.com:22/acme/functions", "main",
		 WEBHOOK_SYNC, "push"},
		{"push", json, url, REPO, "main", WEBHOOK_SYNC, "push"},
		{"push", json, full, REPO, "main", WEBHOOK_SYNC, "push"},
		{"push", json, full, gitlab, "main", WEBHOOK_IGNORE, "other repository"},
		{"push", json, main_ssh, "not a url", "main", WEBHOOK_IGNORE, "other repository"},
		{"push", formct, form, REPO, "main", WEBHOOK_SYNC, "push"},
		{"push", "Application/X-WWW-Form-Urlencoded", form, REPO, "main", WEBHOOK_SYNC,
		 "push"},
		{"push", formct, form_other, REPO, "main", WEBHOOK_IGNORE, "other ref"},
		{"push", formct, "zen=1", REPO, "main", WEBHOOK_BAD, "bad form payload"},
		{"push", formct, "payload=%7B%zz", REPO, "main", WEBHOOK_BAD, "bad form payload"},
		{"push", formct, "payload=%7", REPO, "main", WEBHOOK_BAD, "bad form payload"},
		{"push", formct, "payload=%7B", REPO, "main", WEBHOOK_BAD, "unparseable payload"},
		{"push", json, "{\"ref\": \"refs/heads/ma", REPO, "main", WEBHOOK_BAD,
		 "unparseable payload"},
		{"push", json, "", REPO, "main", WEBHOOK_BAD, "unparseable payload"},
		{"push", json, "[1,2]", REPO, "main", WEBHOOK_BAD, "push payload without ref"},
		{"push", json, "{\"ref\":7}", REPO, "main", WEBHOOK_BAD,
		 "push payload without ref"},
		{"ping", json, "garbage", REPO, "main", WEBHOOK_IGNORE, "ping"},
		/* exactly the configured ref: explicit refs only
		 * themselves, a commit id never (a branch named like it is not
		 * it), a bare name as a branch or a tag */
		{"push", json, main_ssh, REPO, "refs/heads/main", WEBHOOK_SYNC, "push"},
		{"push", json, tag_main, REPO, "refs/heads/main", WEBHOOK_IGNORE, "other ref"},
		{"push", json, main_ssh, REPO, "refs/tags/main", WEBHOOK_IGNORE, "other ref"},
		{"push", json, tag_main, REPO, "refs/tags/main", WEBHOOK_SYNC, "push"},
		{"push", json, tag, REPO, "refs/tags/v1.2", WEBHOOK_SYNC, "push"},
		{"push", json, tag_main, REPO, "main", WEBHOOK_SYNC, "push"},
		{"push", json, hex_branch, REPO, HEX40, WEBHOOK_IGNORE, "other ref"},
		{"push", json, main_ssh, REPO, "refs/heads/ma", WEBHOOK_IGNORE, "other ref"},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		const char *why = NULL;
		enum webhook_verdict v =
			webhook_decide(cases[i].event, cases[i].ctype, cases[i].body,
				       strlen(cases[i].body), cases[i].repo, cases[i].ref, &why);
		if (v != cases[i].want || !why || strcmp(why, cases[i].why) != 0)
			T_FAIL_("case %zu (%s, %.60s): verdict %d (%s), want %d (%s)", i,
				cases[i].event ? cases[i].event : "NULL", cases[i].body, v,
				why ? why : "NULL", cases[i].want, cases[i].why);
	}
	/* the body is taken by length, not up to a NUL */
	const char *why = NULL;
	size_t n = strlen(main_ssh);
	char *padded = xasprintf("%sXYZ", main_ssh);
	CHECK_INT(webhook_decide("push", json, padded, n, REPO, "main", &why), WEBHOOK_SYNC);
	free(padded);

	free(main_ssh), free(dev), free(main_sub), free(tag), free(other), free(clone);
	free(full), free(no_repo), free(url), free(deleted), free(not_deleted), free(form);
	free(form_other);
	free(tag_main);
	free(hex_branch);
}

/* ---- coalescer -------------------------------------------------------- */

struct runs {
	pthread_mutex_t mu;
	int started, finished, active, max_active;
	int sleep_ms;
};

static void slow_run(void *arg)
{
	struct runs *r = arg;
	pthread_mutex_lock(&r->mu);
	r->started++;
	r->active++;
	if (r->active > r->max_active)
		r->max_active = r->active;
	pthread_mutex_unlock(&r->mu);
	usleep((useconds_t)r->sleep_ms * 1000);
	pthread_mutex_lock(&r->mu);
	r->active--;
	r->finished++;
	pthread_mutex_unlock(&r->mu);
}

static int get(struct runs *r, const int *field)
{
	pthread_mutex_lock(&r->mu);
	int v = *field;
	pthread_mutex_unlock(&r->mu);
	return v;
}

/* Waits up to ms for *field to reach want; returns its value. */
static int wait_for(struct runs *r, const int *field, int want, int ms)
{
	int64_t until = now_mono_ns() + (int64_t)ms * 1000000;
	while (get(r, field) < want && now_mono_ns() < until)
		usleep(5 * 1000);
	return get(r, field);
}

TEST(coalescer_collapses_a_burst)
{
	struct runs r = {.mu = PTHREAD_MUTEX_INITIALIZER, .sleep_ms = 200};
	struct webhook_coalescer *c = webhook_coalescer_new(slow_run, &r);
	REQUIRE(c != NULL);
	webhook_coalescer_trigger(c);
	CHECK_INT(wait_for(&r, &r.started, 1, 2000), 1);
	for (int i = 0; i < 10; i++) /* all while the first run sleeps */
		webhook_coalescer_trigger(c);
	CHECK_INT(wait_for(&r, &r.finished, 2, 2000), 2);
	usleep(400 * 1000); /* nothing else follows */
	CHECK_INT(get(&r, &r.started), 2);
	CHECK_INT(get(&r, &r.finished), 2);
	CHECK_INT(r.max_active, 1);

	/* idle again: a trigger runs again */
	webhook_coalescer_trigger(c);
	CHECK_INT(wait_for(&r, &r.finished, 3, 2000), 3);
	usleep(300 * 1000);
	CHECK_INT(get(&r, &r.started), 3);
	webhook_coalescer_free(c);
	CHECK_INT(r.max_active, 1);
	webhook_coalescer_free(NULL);
}

TEST(coalescer_free_waits_for_a_run)
{
	struct runs r = {.mu = PTHREAD_MUTEX_INITIALIZER, .sleep_ms = 200};
	struct webhook_coalescer *c = webhook_coalescer_new(slow_run, &r);
	REQUIRE(c != NULL);
	webhook_coalescer_trigger(c);
	CHECK_INT(wait_for(&r, &r.started, 1, 2000), 1);
	webhook_coalescer_trigger(c); /* queued: dropped by free */
	int64_t t0 = now_mono_ns();
	webhook_coalescer_free(c);
	CHECK(now_mono_ns() - t0 >= 100 * 1000000LL); /* it waited for the run */
	CHECK_INT(r.finished, 1);
	CHECK_INT(r.started, 1);

	/* freeing an idle coalescer returns at once and runs nothing */
	c = webhook_coalescer_new(slow_run, &r);
	REQUIRE(c != NULL);
	webhook_coalescer_free(c);
	CHECK_INT(r.started, 1);
}

/* ---- the server ------------------------------------------------------- */

/* One request; headers is NULL-terminated (may be NULL); body NULL = GET.
 * Returns the status (0 when the request failed); r->body must be freed. */
static long request(int port, const char *path, const char *body, const char *const *headers,
		    struct reply *r)
{
	char *url = url_for(port, path);
	CURLcode rc = fetch_with(body ? "POST" : "GET", url, body, headers, r);
	free(url);
	return rc == CURLE_OK ? r->status : 0;
}

#define FIRST_ID "72d3162e-cc78-11e3-81ab-4c9367dc0958"

/* POSTs body to /github as event with X-GitHub-Delivery id, signed with key
 * (NULL: unsigned). */
static long deliver_as(int port, const char *event, const char *body, const char *key,
		       const char *id, struct reply *r)
{
	char *sig = key ? sign(key, body) : NULL;
	char *sig_h = sig ? xasprintf("X-Hub-Signature-256: %s", sig) : NULL;
	char *ev_h = xasprintf("X-GitHub-Event: %s", event);
	char *id_h = xasprintf("X-GitHub-Delivery: %s", id);
	const char *headers[] = {ev_h, "Content-Type: application/json", id_h, sig_h, NULL};
	long status = request(port, "/github", body, headers, r);
	free(sig);
	free(sig_h);
	free(ev_h);
	free(id_h);
	return status;
}

/* deliver_as with a delivery id never used before. */
static long deliver(int port, const char *event, const char *body, const char *key, struct reply *r)
{
	static int next;
	char id[64];
	snprintf_(id, sizeof id, "00000000-0000-4000-8000-%012d",
		  __atomic_add_fetch(&next, 1, __ATOMIC_SEQ_CST));
	return deliver_as(port, event, body, key, id, r);
}

struct temp_store {
	char dir[64];
	struct secret_provider *p;
};

static int store_new(struct temp_store *s)
{
	strlcpy_(s->dir, "/tmp/relay-webhook-XXXXXX", sizeof s->dir);
	if (!mkdtemp(s->dir))
		return -1;
	s->p = secret_file_provider_new(s->dir);
	return 0;
}

static void store_free(struct temp_store *s)
{
	char **names = NULL, *err = NULL;
	size_t n = 0;
	if (secret_list(s->p, &names, &n, &err) == 0) {
		for (size_t i = 0; i < n; i++)
			secret_remove(s->p, names[i], &err);
		secret_names_free(names, n);
	}
	free(err);
	secret_provider_free(s->p);
	char *sub = xasprintf("%s/secrets", s->dir);
	rmdir(sub);
	free(sub);
	rmdir(s->dir);
}

/* Captures the log (until t_release_logs), then starts a server with cfg
 * listening on *port; NULL, the test failed, when it cannot start. */
static struct webhook *start_logged(const struct webhook_config *cfg, int *port)
{
	struct webhook *w = NULL;
	char *err = NULL;
	t_capture_logs();
	if (webhook_start(cfg, &w, &err) < 0) {
		T_FAIL_("webhook_start: %s", err);
		free(err);
		return NULL;
	}
	*port = webhook_port(w);
	return w;
}

TEST(server_with_secret)
{
	struct temp_store st;
	REQUIRE(store_new(&st) == 0);
	char *err = NULL;
	REQUIRE(secret_set(st.p, "gh-hook", "canary-v1", 9, &err) == 0);
	struct runs r = {.mu = PTHREAD_MUTEX_INITIALIZER};
	struct webhook_config cfg = {
		.listen_addr = "127.0.0.1:0",
		.repository = REPO,
		.ref = "main",
		.secret_name = "gh-hook",
		.secrets = st.p,
		.sync = slow_run,
		.sync_arg = &r,
	};
	int port = 0;
	struct webhook *w = start_logged(&cfg, &port);
	REQUIRE(w != NULL);
	CHECK(port > 0);
	char *push = push_json("refs/heads/main", REPO, NULL, NULL);
	struct reply rep;

	CHECK_INT(deliver_as(port, "push", push, "canary-v1", FIRST_ID, &rep), 202);
	CHECK_STR(rep.body.data, "sync scheduled\n");
	buf_free(&rep.body);
	CHECK_INT(wait_for(&r, &r.finished, 1, 2000), 1);

	CHECK_INT(deliver(port, "push", push, "wrong", &rep), 401);
	CHECK_STR(rep.body.data, "invalid signature\n");
	buf_free(&rep.body);
	CHECK_INT(deliver(port, "push", push, NULL, &rep), 401);
	buf_free(&rep.body);

	CHECK_INT(deliver_as(port, "ping", "{\"zen\":\"x\"}", "canary-v1", FIRST_ID, &rep), 200);
	CHECK_STR(rep.body.data, "ignored: ping\n");
	buf_free(&rep.body);
	CHECK_INT(deliver(port, "ping", "{\"zen\":\"x\"}", NULL, &rep), 401); /* auth first */
	buf_free(&rep.body);
	char *dev = push_json("refs/heads/dev", REPO, NULL, NULL);
	CHECK_INT(deliver(port, "push", dev, "canary-v1", &rep), 200);
	CHECK_STR(rep.body.data, "ignored: other ref\n");
	buf_free(&rep.body);
	free(dev);
	CHECK_INT(deliver(port, "push", "{not json", "canary-v1", &rep), 400);
	buf_free(&rep.body);

	CHECK_INT(request(port, "/github", NULL, NULL, &rep), 405);
	CHECK_STR(rep.allow, "POST");
	buf_free(&rep.body);
	CHECK_INT(request(port, "/other", push, NULL, &rep), 404);
	buf_free(&rep.body);
	CHECK_INT(request(port, "/github/", push, NULL, &rep), 404);
	buf_free(&rep.body);

	/* rotation: the new value applies to the next delivery (a later push:
	 * another body, or it would be a replay of the first) */
	REQUIRE(secret_set(st.p, "gh-hook", "canary-v2", 9, &err) == 0);
	char *later = xasprintf("%s ", push);
	CHECK_INT(deliver(port, "push", later, "canary-v1", &rep), 401);
	buf_free(&rep.body);
	CHECK_INT(deliver(port, "push", later, "canary-v2", &rep), 202);
	buf_free(&rep.body);
	CHECK_INT(wait_for(&r, &r.finished, 2, 2000), 2);

	/* an unreadable secret is a server error, never an open door */
	REQUIRE(secret_remove(st.p, "gh-hook", &err) == 0);
	CHECK_INT(deliver(port, "push", push, "canary-v2", &rep), 500);
	CHECK_STR(rep.body.data, "webhook secret unavailable\n");
	buf_free(&rep.body);
	CHECK_INT(deliver(port, "push", push, NULL, &rep), 500);
	buf_free(&rep.body);

	usleep(100 * 1000);
	CHECK_INT(get(&r, &r.started), 2); /* only the two valid pushes synced */
	webhook_stop(w);
	webhook_stop(NULL);

	char *logs = t_captured_logs();
	CHECK(strstr(logs, "level=INFO msg=\"Webhook http server listening on 127.0.0.1:0\"") !=
	      NULL);
	CHECK(strstr(logs, "level=INFO msg=\"webhook delivery\" event=push "
			   "delivery=" FIRST_ID " verdict=sync") != NULL);
	CHECK(strstr(logs, "event=ping delivery=" FIRST_ID " verdict=ignored reason=ping") != NULL);
	CHECK(strstr(logs, "verdict=rejected reason=\"invalid signature\"") != NULL);
	CHECK(strstr(logs, "level=ERROR msg=\"webhook secret unavailable\" secret=gh-hook") !=
	      NULL);
	CHECK(strstr(logs, "canary") == NULL); /* the value is never logged */
	if (t_failed_)
		printf("%s", logs);
	free(logs);
	t_release_logs();
	free(later);
	free(push);
	store_free(&st);
}

TEST(server_without_secret)
{
	struct runs r = {.mu = PTHREAD_MUTEX_INITIALIZER};
	struct webhook_config cfg = {
		.listen_addr = "127.0.0.1:0",
		.repository = REPO,
		.sync = slow_run,
		.sync_arg = &r,
	};
	int port = 0;
	struct webhook *w = start_logged(&cfg, &port);
	REQUIRE(w != NULL);
	char *err = NULL;
	char *push = push_json("refs/heads/main", NULL, "https://github.com/acme/functions.git",
			       "acme/functions");
	struct reply rep;
	CHECK_INT(deliver(port, "push", push, NULL, &rep), 202);
	buf_free(&rep.body);
	char *later = xasprintf("%s ", push);
	CHECK_INT(deliver(port, "push", later, "anything", &rep), 202); /* signature ignored */
	buf_free(&rep.body);
	free(later);
	/* No replay set without a secret: the same body again is a push. */
	CHECK_INT(deliver(port, "push", push, NULL, &rep), 202);
	buf_free(&rep.body);
	struct webhook_stats ws;
	webhook_stats(w, &ws);
	CHECK_INT(ws.remembered, 0);
	CHECK_INT(ws.replays, 0);
	CHECK(wait_for(&r, &r.finished, 1, 2000) >= 1); /* one or two runs */

	/* form-encoded deliveries */
	char *form = form_encode(push);
	const char *headers[] = {"X-GitHub-Event: push",
				 "Content-Type: application/x-www-form-urlencoded", NULL};
	CHECK_INT(request(port, "/github", form, headers, &rep), 202);
	buf_free(&rep.body);
	free(form);

	/* a taken port is an error */
	char addr[32];
	snprintf_(addr, sizeof addr, "127.0.0.1:%d", port);
	cfg.listen_addr = addr;
	struct webhook *w2 = (struct webhook *)1;
	CHECK_INT(webhook_start(&cfg, &w2, &err), -1);
	CHECK(w2 == NULL);
	char *want = xasprintf("listen tcp %s: Address already in use", addr);
	CHECK_STR(err, want);
	free(want);
	free(err);
	cfg.listen_addr = "nonsense";
	CHECK_INT(webhook_start(&cfg, &w2, &err), -1);
	CHECK_STR(err, "invalid listen address nonsense");
	free(err);

	webhook_stop(w);
	CHECK(get(&r, &r.started) >= 1 && get(&r, &r.started) <= 4); /* four deliveries */
	free(push);
	t_release_logs();
}

/* With the data directory, a bare configured ref matches only what the last
 * sync resolved it to (here a tag named like the default branch): a push to
 * the branch of that name schedules nothing. */
TEST(server_ref_as_last_resolved)
{
	char *data = t_tmpdir(), *err = NULL;
	struct gitsync_source src = {
		.repository = (char *)REPO,
		.ref = (char *)"main",
		.last_ref = (char *)"refs/tags/main",
	};
	if (gitsync_source_save(data, &src, &err) < 0) {
		T_FAIL_("gitsync_source_save: %s", err);
		free(err);
		t_rmtree(data);
		free(data);
		return;
	}
	struct runs r = {.mu = PTHREAD_MUTEX_INITIALIZER};
	struct webhook_config cfg = {
		.listen_addr = "127.0.0.1:0",
		.repository = REPO,
		.ref = "main",
		.data_dir = data,
		.sync = slow_run,
		.sync_arg = &r,
	};
	int port = 0;
	struct webhook *w = start_logged(&cfg, &port);
	REQUIRE(w != NULL);
	char *branch = push_json("refs/heads/main", REPO, NULL, NULL);
	char *tagged = push_json("refs/tags/main", REPO, NULL, NULL);
	struct reply rep;
	CHECK_INT(deliver(port, "push", branch, NULL, &rep), 200);
	CHECK_STR(rep.body.data, "ignored: other ref\n");
	buf_free(&rep.body);
	CHECK_INT(deliver(port, "push", tagged, NULL, &rep), 202);
	buf_free(&rep.body);
	CHECK_INT(wait_for(&r, &r.finished, 1, 2000), 1);
	webhook_stop(w);
	CHECK_INT(r.started, 1);
	t_release_logs();
	free(branch);
	free(tagged);
	t_rmtree(data);
	free(data);
}

/* ---- replay protection ------------------------------------------------ */

/* start_logged with the secret "gh-hook" = value in a new store st. */
static struct webhook *start_signed(struct temp_store *st, struct runs *r, const char *value,
				    int *port)
{
	char *err = NULL;
	if (store_new(st) < 0 || secret_set(st->p, "gh-hook", value, strlen(value), &err) < 0) {
		T_FAIL_("cannot set up the secret store");
		exit(1);
	}
	struct webhook_config cfg = {
		.listen_addr = "127.0.0.1:0",
		.repository = REPO,
		.ref = "main",
		.secret_name = "gh-hook",
		.secrets = st->p,
		.sync = slow_run,
		.sync_arg = r,
	};
	return start_logged(&cfg, port);
}

/* A delivery accepted once is not accepted again within the hour: not under
 * its id (GitHub's redelivery, or a replay), nor its body under a fresh id
 * (the id header is not signed). Such a repeat is acknowledged with 200 and
 * ignored, and schedules no sync. On the old code every repeat got 202 and
 * a sync. */
TEST(replayed_delivery_ignored)
{
	struct temp_store st;
	struct runs r = {.mu = PTHREAD_MUTEX_INITIALIZER};
	int port = 0;
	struct webhook *w = start_signed(&st, &r, "s3cret", &port);
	REQUIRE(w != NULL);
	char *p1 = push_json("refs/heads/main", REPO, NULL, NULL);
	char *p2 = xasprintf("%s\n", p1); /* another push: other bytes */
	static const struct {
		int body; /* 1: p1, 2: p2 */
		const char *id;
		long status;
		const char *reply;
	} steps[] = {
		{1, "id-1", 202, "sync scheduled\n"},
		{1, "id-1", 200, "ignored: duplicate delivery\n"}, /* replay */
		{2, "id-1", 200, "ignored: duplicate delivery\n"}, /* same id, other body */
		{1, "id-2", 200, "ignored: duplicate delivery\n"}, /* same body, fresh id */
		{1, "", 200, "ignored: duplicate delivery\n"},	   /* same body, no id */
		{2, "id-3", 202, "sync scheduled\n"},		   /* a new delivery */
		{2, "id-3", 200, "ignored: duplicate delivery\n"},
	};
	for (size_t i = 0; i < ARRAY_LEN(steps); i++) {
		struct reply rep;
		long got = deliver_as(port, "push", steps[i].body == 1 ? p1 : p2, "s3cret",
				      steps[i].id, &rep);
		if (got != steps[i].status || !rep.body.data ||
		    strcmp(rep.body.data, steps[i].reply) != 0)
			T_FAIL_("step %zu (id \"%s\"): %ld %s, want %ld %s", i, steps[i].id, got,
				rep.body.data ? rep.body.data : "", steps[i].status,
				steps[i].reply);
		buf_free(&rep.body);
	}
	/* ignored deliveries are not remembered: a ping under a used id is a ping */
	struct reply rep;
	CHECK_INT(deliver_as(port, "ping", "{}", "s3cret", "id-1", &rep), 200);
	CHECK_STR(rep.body.data, "ignored: ping\n");
	buf_free(&rep.body);
	CHECK_INT(wait_for(&r, &r.finished, 2, 2000), 2);
	usleep(200 * 1000);
	CHECK_INT(get(&r, &r.started), 2); /* one sync per accepted delivery */
	struct webhook_stats ws;
	webhook_stats(w, &ws);
	CHECK_INT(ws.remembered, 2);
	CHECK_INT(ws.replays, 5);
	webhook_stop(w);
	char *logs = t_captured_logs();
	CHECK(strstr(logs, "level=WARN msg=\"webhook delivery\" event=push delivery=id-1 "
			   "verdict=ignored reason=\"duplicate delivery\"") != NULL);
	free(logs);
	t_release_logs();
	free(p1);
	free(p2);
	store_free(&st);
}

/* The signature is checked before the delivery is remembered: requests
 * without a valid signature, under the id and with the body of a genuine
 * delivery still to come, do not make that delivery a "replay". */
TEST(unsigned_request_does_not_poison_replay_set)
{
	struct temp_store st;
	struct runs r = {.mu = PTHREAD_MUTEX_INITIALIZER};
	int port = 0;
	struct webhook *w = start_signed(&st, &r, "s3cret", &port);
	REQUIRE(w != NULL);
	char *push = push_json("refs/heads/main", REPO, NULL, NULL);
	struct reply rep;
	CHECK_INT(deliver_as(port, "push", push, NULL, "id-x", &rep), 401);
	buf_free(&rep.body);
	CHECK_INT(deliver_as(port, "push", push, "guess", "id-x", &rep), 401);
	buf_free(&rep.body);
	struct webhook_stats ws;
	webhook_stats(w, &ws);
	CHECK_INT(ws.remembered, 0);
	CHECK_INT(deliver_as(port, "push", push, "s3cret", "id-x", &rep), 202);
	buf_free(&rep.body);
	CHECK_INT(wait_for(&r, &r.finished, 1, 2000), 1);
	webhook_stats(w, &ws);
	CHECK_INT(ws.remembered, 1);
	CHECK_INT(ws.replays, 0);
	webhook_stop(w);
	t_release_logs();
	free(push);
	store_free(&st);
}

/* The set itself: the window, ids and bodies each enough to match, no id,
 * and the bound (the oldest is forgotten). Times are given, not waited. */
TEST(replay_set_window_and_bound)
{
	struct webhook_replay *rs = webhook_replay_new(3, 100);
	CHECK(webhook_replay_add(rs, "a", "b1", 2, 0));
	CHECK(!webhook_replay_add(rs, "a", "b2", 2, 50));  /* same id */
	CHECK(!webhook_replay_add(rs, "c", "b1", 2, 50));  /* same body */
	CHECK(!webhook_replay_add(rs, NULL, "b1", 2, 50)); /* no id, same body */
	CHECK(webhook_replay_add(rs, "", "b3", 2, 60));	   /* no id, new body */
	CHECK(webhook_replay_add(rs, NULL, "b4", 2, 70));  /* no ids never collide */
	CHECK_INT(webhook_replay_size(rs), 3);
	CHECK(webhook_replay_add(rs, "a", "b5", 2, 100));   /* "a" expired at 0 + 100 */
	CHECK_INT(webhook_replay_size(rs), 3);		    /* b3, b4, a/b5 */
	CHECK(!webhook_replay_add(rs, NULL, "b3", 2, 159)); /* b3 kept till 160 */
	CHECK(webhook_replay_add(rs, "d", "b6", 2, 161));   /* b3 expired: b4, a/b5, d/b6 */
	CHECK_INT(webhook_replay_size(rs), 3);
	CHECK(webhook_replay_add(rs, "e", "b7", 2, 162)); /* full: b4 dropped before its time */
	CHECK_INT(webhook_replay_size(rs), 3);
	CHECK(webhook_replay_add(rs, NULL, "b4", 2, 163)); /* forgotten (drops a/b5) */
	CHECK(!webhook_replay_add(rs, "d", "zz", 2, 163)); /* d/b6 is still there */
	CHECK(webhook_replay_add(rs, "x", "", 0, 164));	   /* empty body */
	CHECK(!webhook_replay_add(rs, "f", NULL, 0, 164));
	webhook_replay_free(rs);
	webhook_replay_free(NULL);
}

/* ---- request bodies: memory budget and deadline ----------------------- */

/* connect_to, or the test program ends. */
static int connect_or_exit(int port)
{
	int fd = connect_to(port);
	if (fd < 0) {
		perror("connect");
		exit(1);
	}
	return fd;
}

/* Sends what it can; false once the peer has closed the connection. */
static bool send_some(int fd, const void *p, size_t n)
{
	while (n) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return false;
		p = (const char *)p + k;
		n -= (size_t)k;
	}
	return true;
}

/* Whether the server has closed fd (without waiting). */
static bool closed_by_server(int fd)
{
	char c[256];
	ssize_t k = recv(fd, c, sizeof c, MSG_DONTWAIT);
	return k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* The status of the response read from fd (0 when none within 5 s). */
static int read_status(int fd)
{
	struct timeval tv = {.tv_sec = 5};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	char b[512];
	ssize_t k = recv(fd, b, sizeof b - 1, 0);
	if (k < 12)
		return 0;
	b[k] = '\0';
	int status = 0;
	return sscanf(b, "HTTP/1.%*d %d", &status) == 1 ? status : 0;
}

static char *post_head(size_t content_length)
{
	return xasprintf("POST /github HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: push\r\n"
			 "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
			 content_length);
}

/* Many unauthenticated clients each send part of a large body and hold
 * their connection: what the server buffers for them all stays within the
 * budget (counted by the server, bytes of buffer allocated), the excess is
 * refused or cut, a request whose Content-Length no longer fits gets 503
 * before sending its body, and once they are gone a genuine delivery goes
 * through. On the old code every connection buffered its body: 16 * 60 KB
 * against a 256 KiB budget. */
TEST(bodies_within_memory_budget)
{
	enum { CONNS = 16, LEN = 60000, BUDGET = 256 * 1024 };
	struct runs r = {.mu = PTHREAD_MUTEX_INITIALIZER};
	struct webhook_config cfg = {
		.listen_addr = "127.0.0.1:0",
		.repository = REPO,
		.sync = slow_run,
		.sync_arg = &r,
		.max_body = 64 * 1024,
		.body_budget = BUDGET,
		.body_seconds = 60, /* not what this test is about */
	};
	int port = 0;
	struct webhook *w = start_logged(&cfg, &port);
	REQUIRE(w != NULL);
	char *head = post_head(LEN), *chunk = xmalloc(20000);
	memset(chunk, 'x', 20000);
	int fds[CONNS];
	for (int i = 0; i < CONNS; i++) {
		fds[i] = connect_or_exit(port);
		send_some(fds[i], head, strlen(head));
		send_some(fds[i], chunk, 20000);
	}
	for (int i = 0; i < CONNS; i++)
		send_some(fds[i], chunk, 20000);
	/* wait until the server has seen every connection's data: each one is
	 * either holding its buffer or was refused */
	struct webhook_stats ws;
	int64_t until = now_mono_ns() + 10 * 1000000000LL;
	do {
		usleep(20 * 1000);
		webhook_stats(w, &ws);
	} while (ws.http.body_bytes / (LEN + 1) + ws.http.over_budget < CONNS &&
		 now_mono_ns() < until);
	CHECK(ws.http.body_bytes <= BUDGET);
	CHECK(ws.http.body_bytes_peak <= BUDGET);
	CHECK_INT(ws.http.body_bytes / (LEN + 1), BUDGET / (LEN + 1)); /* 4 hold a body */
	CHECK_INT(ws.http.over_budget, CONNS - BUDGET / (LEN + 1));
	/* what is left cannot take another body of that size: 503 at once */
	int late = connect_or_exit(port);
	send_some(late, head, strlen(head));
	CHECK_INT(read_status(late), 503);
	close(late);
	for (int i = 0; i < CONNS; i++)
		close(fds[i]);
	until = now_mono_ns() + 10 * 1000000000LL;
	do {
		usleep(20 * 1000);
		webhook_stats(w, &ws);
	} while (ws.http.body_bytes && now_mono_ns() < until);
	CHECK_INT(ws.http.body_bytes, 0);
	CHECK(ws.http.body_bytes_peak <= BUDGET);
	char *push = push_json("refs/heads/main", REPO, NULL, NULL);
	struct reply rep;
	CHECK_INT(deliver(port, "push", push, NULL, &rep), 202);
	buf_free(&rep.body);
	webhook_stop(w);
	char *logs = t_captured_logs();
	CHECK(strstr(logs, "request bodies over their memory budget") != NULL);
	free(logs);
	t_release_logs();
	free(push);
	free(chunk);
	free(head);
}

/* A body that trickles in (one byte every 100 ms: never idle long enough
 * for the idle timeout) is cut at the body deadline, its connection
 * closed, and nothing is scheduled. On the old code only the 10 s idle
 * timeout existed, which such a client resets forever. The loop gives up
 * after 8 s of trickling (80 of the 1000 bytes). */
TEST(trickling_body_cut_off)
{
	struct runs r = {.mu = PTHREAD_MUTEX_INITIALIZER};
	struct webhook_config cfg = {
		.listen_addr = "127.0.0.1:0",
		.repository = REPO,
		.sync = slow_run,
		.sync_arg = &r,
		.body_seconds = 1,
	};
	int port = 0;
	struct webhook *w = start_logged(&cfg, &port);
	REQUIRE(w != NULL);
	char *head = post_head(1000);
	int fd = connect_or_exit(port);
	CHECK(send_some(fd, head, strlen(head)));
	int sent = 0;
	bool closed = false;
	while (sent < 80 && !closed) {
		closed = !send_some(fd, "x", 1) || closed_by_server(fd);
		sent += !closed;
		usleep(100 * 1000);
	}
	CHECK(closed);
	CHECK(sent < 1000);
	close(fd);
	struct webhook_stats ws;
	webhook_stats(w, &ws);
	CHECK_INT(ws.http.too_slow, 1);
	CHECK_INT(ws.http.body_bytes, 0);
	webhook_stop(w);
	CHECK_INT(r.started, 0);
	char *logs = t_captured_logs();
	CHECK(strstr(logs, "request body not received within 1s") != NULL);
	free(logs);
	t_release_logs();
	free(head);
}

/* Slowloris on the webhook listener: 64 clients from 8
 * addresses trickling their headers; a request from 127.0.0.1 is answered
 * within 3 s while they are attached (405: GET), and each is cut at the
 * headers' deadline. Before: the 64 held every slot as long as they kept
 * sending a byte within the 5 s idle timeout. */
TEST(slow_clients_do_not_fill_the_slots)
{
	struct runs r = {.mu = PTHREAD_MUTEX_INITIALIZER};
	struct webhook_config cfg = {
		.listen_addr = "127.0.0.1:0",
		.repository = REPO,
		.sync = slow_run,
		.sync_arg = &r,
	};
	int port = 0;
	struct webhook *w = start_logged(&cfg, &port);
	REQUIRE(w != NULL);
	struct slowloris_result sr = slowloris(port, "/github", 5);
	CHECK_INT(sr.connected, 64);
	CHECK_INT(sr.status, 405);
	CHECK(sr.took < 3);
	CHECK(sr.longest > 0 && sr.longest <= 5 + 1.5);
	printf("# webhook, 64 slow clients: answer in %.2fs, each cut after at most %.2fs\n",
	       sr.took, sr.longest);
	webhook_stop(w);
	CHECK_INT(r.started, 0);
	t_release_logs();
}

T_MAIN(T_CASE(repo_identity_forms), T_CASE(signature), T_CASE(decide),
       T_CASE(coalescer_collapses_a_burst), T_CASE(coalescer_free_waits_for_a_run),
       T_CASE(server_with_secret), T_CASE(server_without_secret),
       T_CASE(server_ref_as_last_resolved), T_CASE(replayed_delivery_ignored),
       T_CASE(unsigned_request_does_not_poison_replay_set), T_CASE(replay_set_window_and_bound),
       T_CASE(bodies_within_memory_budget), T_CASE(trickling_body_cut_off),
       T_CASE(slow_clients_do_not_fill_the_slots))
