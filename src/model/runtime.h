/*
 * The runtime registry: one table entry per supported runtime, holding
 * everything the image builder needs (base image, bootstrap, how to run it,
 * image environment, dependency rules, generated files). Adding a runtime
 * (python3.15, node26) is one new entry in runtime.c; the engine (image.c,
 * runner.c) is reused unchanged.
 *
 * Entries are static and immutable: safe to share between threads.
 */
#ifndef RELAY_RUNTIME_H
#define RELAY_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>

/* One way of installing dependencies: the first rule (in table order)
 * whose manifest exists at the root of the function directory applies. */
struct runtime_dep_rule {
	const char *manifest;	  /* "package-lock.json": the trigger */
	const char *const *files; /* NULL-terminated: every file copied into the
					    dependency image (manifest included) that exists */
	const char *command;	  /* "npm ci --omit=dev", run in /app */
};

/* A file Relay adds to the function's source in the image. */
struct runtime_file {
	const char *path; /* relative to /app */
	const char *content;
	bool only_if_missing; /* skipped when the function has its own */
};

struct runtime {
	const char *name;	/* "python3.14" */
	const char *base_image; /* "python:3.14-slim" */
	/* The embedded bootstrap: copied to /opt/relay/<bootstrap_name>. */
	const char *bootstrap_name;
	const char *bootstrap;
	/* NULL-terminated argv of the image's ENTRYPOINT. */
	const char *const *command;
	/* NULL-terminated "NAME=value" lines baked into the image (never
	 * user values: those are injected at run time). */
	const char *const *image_env;
	const struct runtime_dep_rule *deps;
	size_t ndeps;
	const struct runtime_file *files;
	size_t nfiles;
};

/* Where function sources and bootstraps live inside every image. */
#define RUNTIME_APP_DIR "/app"
#define RUNTIME_BOOTSTRAP_DIR "/opt/relay"

/* The entry for name, or NULL. */
const struct runtime *runtime_find(const char *name);
/* "python3.14, node24": for error messages. */
const char *runtime_names(void);
/* The whole table, for iteration (runtime_count() entries). */
const struct runtime *runtime_at(size_t i);
size_t runtime_count(void);

#endif
