#include "model/runtime.h"

#include <string.h>

#include "model/bootstrap.h"
#include "base/util.h"

static const char *const python_command[] = {"python3", RUNTIME_BOOTSTRAP_DIR "/bootstrap.py",
					     NULL};
/* The root filesystem is read-only: no .pyc writes. Unbuffered so output is
 * forwarded as it is printed, not when the handler exits. */
static const char *const python_env[] = {"PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1", NULL};
static const char *const python_req_files[] = {"requirements.txt", NULL};
static const struct runtime_dep_rule python_deps[] = {
	{"requirements.txt", python_req_files, "pip install --no-cache-dir -r requirements.txt"},
};

static const char *const node_command[] = {"node", RUNTIME_BOOTSTRAP_DIR "/bootstrap.mjs", NULL};
static const char *const node_env[] = {NULL};
static const char *const node_lock_files[] = {"package.json", "package-lock.json", NULL};
static const char *const node_pkg_files[] = {"package.json", NULL};
static const struct runtime_dep_rule node_deps[] = {
	{"package-lock.json", node_lock_files, "npm ci --omit=dev"},
	{"package.json", node_pkg_files, "npm install --omit=dev"},
};
/* Without a package.json, .js handlers are ES modules; a user package.json
 * keeps its own "type" (CommonJS when absent). */
static const struct runtime_file node_files[] = {
	{"package.json", "{\"type\":\"module\"}\n", true},
};

static const struct runtime runtimes[] = {
	{
		.name = "python3.14",
		.base_image = "python:3.14-slim",
		.bootstrap_name = "bootstrap.py",
		.bootstrap = bootstrap_python,
		.command = python_command,
		.image_env = python_env,
		.deps = python_deps,
		.ndeps = ARRAY_LEN(python_deps),
	},
	{
		.name = "node24",
		.base_image = "node:24-alpine",
		.bootstrap_name = "bootstrap.mjs",
		.bootstrap = bootstrap_node,
		.command = node_command,
		.image_env = node_env,
		.deps = node_deps,
		.ndeps = ARRAY_LEN(node_deps),
		.files = node_files,
		.nfiles = ARRAY_LEN(node_files),
	},
};

const struct runtime *runtime_find(const char *name)
{
	for (size_t i = 0; i < ARRAY_LEN(runtimes); i++)
		if (strcmp(runtimes[i].name, name) == 0)
			return &runtimes[i];
	return NULL;
}

const char *runtime_names(void)
{
	return "python3.14, node24";
}

const struct runtime *runtime_at(size_t i)
{
	return i < ARRAY_LEN(runtimes) ? &runtimes[i] : NULL;
}

size_t runtime_count(void)
{
	return ARRAY_LEN(runtimes);
}
