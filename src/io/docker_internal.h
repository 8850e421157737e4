/*
 * The Docker client's internals, shared by its parts: only src/io/docker*.c
 * include it (everyone else includes docker.h, the interface).
 *
 *   docker.c       the handle: DOCKER_HOST and TLS set-up, version
 *                  negotiation, buffered and streaming requests, daemon
 *                  error bodies and refusals
 *   docker_conn.c  hijacked connections: the upgrade exchange and the raw
 *                  stream's reads, writes and half-close
 */
#ifndef RELAY_DOCKER_INTERNAL_H
#define RELAY_DOCKER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include <curl/curl.h>

#include "io/docker.h"

/* Connecting to a healthy daemon takes milliseconds; a longer wait means it
 * is not there. */
#define CONNECT_TIMEOUT_MS 5000L
/* Error documents are one short JSON object. */
#define ERROR_BODY_MAX (64u * 1024)
/* Longest API version string we keep ("1.41"). */
#define VERSION_MAX 16

struct docker {
	CURL *curl;
	struct docker_host host;
	char *endpoint; /* normalised DOCKER_HOST, for messages */
	char *base_url; /* scheme://authority, no trailing slash */
	bool tls;
	char *ca, *cert, *key;
	char version[VERSION_MAX];
	char *err;
	char curl_err[CURL_ERROR_SIZE];
	bool unsent; /* the last request failed before connecting */
	bool denied; /* the last request was answered 403 */
	bool silent; /* the last request got no HTTP answer at all */
};

/* Replaces d's error message with the formatted one. */
void docker_set_err(struct docker *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Whether path may go into a URL and a request line: it starts with '/'
 * and holds no space, control or non-ASCII byte. */
bool docker_path_ok(const char *path);
/* Options every curl handle of d needs (errbuf: its CURL_ERROR_SIZE error
 * buffer); called after each curl_easy_reset(). */
void docker_setup_common(const struct docker *d, CURL *h, char *errbuf);
/* d's error (and d->unsent) for a curl failure of method path on h. */
void docker_set_transport_err(struct docker *d, CURL *h, CURLcode code, const char *errbuf,
			      const char *method, const char *path);
/* The first non-blank line of body, trimmed and cut at 200 bytes, with its
 * length in *n. */
const char *docker_first_line(const char *body, size_t len, size_t *n);

#endif
