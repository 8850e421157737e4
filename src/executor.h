/*
 * The glue between the consumer and the Docker runner: each consumer worker
 * thread lazily opens its own Docker connection (thread-local, closed when
 * the thread exits) and runs invocations with runner_invoke, resolving
 * secrets through the provider. A Docker daemon that cannot be reached is
 * not the handler's fault: such an invocation is reported as cancelled (not
 * charged) and the message stays pending for a later delivery.
 */
#ifndef RELAY_EXECUTOR_H
#define RELAY_EXECUTOR_H

#include <stdatomic.h>

#include "consumer.h"
#include "secret.h"

struct executor {
	const struct secret_provider *provider;
	const atomic_int *cancel; /* set on a second signal: running containers are stopped */
};

/* consumer_invoke_fn: ctx is a struct executor. */
void executor_invoke(void *ctx, const struct invoke_request *req, struct invoke_result *res);

#endif
