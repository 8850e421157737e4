/*
 * The glue between the consumer and the Docker runner: each consumer worker
 * thread lazily opens its own Docker connection (thread-local, closed when
 * the thread exits) and runs invocations with runner_invoke, resolving
 * secrets through the provider. A Docker daemon that cannot be reached
 * before the handler starts (no connection, no answer to create or attach:
 * runner.h not_run) is not the handler's fault: such an invocation is
 * reported as INVOKE_UNAVAILABLE (not charged); the consumer stops reading
 * and runs it again once executor_ready says the daemon answers. A daemon
 * lost while the handler runs is an attempt like any other failure.
 *
 * With a standby pool, each invocation first asks it for a parked container
 * of its function version and handler (standby_take) and runs there
 * (runner_dispatch), else on demand (runner_invoke); either way it counts
 * as demand (standby_begin/standby_end), which sizes the pool.
 *
 * A function whose template has warm: runs in the warm pool instead
 * (warm_invoke, warm.h): standby is not used for it. With no warm pool
 * (NULL) it runs as any other function.
 */
#ifndef RELAY_EXECUTOR_H
#define RELAY_EXECUTOR_H

#include <stdatomic.h>

#include "engine/consumer.h"
#include "model/secret.h"

struct standby;
struct warm;

struct executor {
	const struct secret_provider *provider;
	/* The standby pool (standby.h); NULL: every invocation on demand. */
	struct standby *standby;
	/* The warm pool (warm.h); NULL: warm: is ignored. */
	struct warm *warm;
	const atomic_int *cancel; /* set on a second signal: running containers are stopped */
};

/* consumer_invoke_fn: ctx is a struct executor. */
void executor_invoke(void *ctx, const struct invoke_request *req, struct invoke_result *res);

/* consumer_config.ready: the daemon answers a ping (this thread's
 * connection, opened if need be). */
bool executor_ready(void *ctx);

#endif
