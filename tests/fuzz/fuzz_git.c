/*
 * Fuzzes what git sync and the GitHub webhook read from outside: repository
 * URLs and --path values (operator input persisted in source.json), the
 * identity a webhook payload's URLs are compared by, webhook payloads in
 * both encodings, and X-Hub-Signature-256 headers.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gitsync.h"
#include "util.h"
#include "webhook.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = xstrndup((const char *)data, size);
	char *err = NULL, *user = NULL, *host = NULL, *path = NULL;
	int port = 0;
	if (git_url_parse(s, &user, &host, &port, &path, &err) == 0) {
		/* Every accepted SSH URL has an identity and a sane port. */
		char *id = git_repo_identity(s);
		if (!id || port < 1 || port > 65535 || !*host || !*path)
			abort();
		free(id);
		free(user);
		free(host);
		free(path);
	} else {
		free(err);
	}
	free(git_repo_identity(s));
	err = NULL;
	if (git_path_check(s, &err) < 0)
		free(err);

	const char *why = NULL;
	static const char *const types[] = {"application/json",
					    "application/x-www-form-urlencoded", NULL};
	for (size_t i = 0; i < 3; i++) {
		enum webhook_verdict v = webhook_decide("push", types[i], (const char *)data, size,
							"git@github.com:acme/repo.git", "main", &why);
		if (v != WEBHOOK_SYNC && v != WEBHOOK_IGNORE && v != WEBHOOK_BAD)
			abort();
	}
	(void)webhook_signature_ok(s, data, size, "key", 3);
	free(s);
	return 0;
}
