/*
 * The Lua scripts with which the consumer reads what a plain XREADGROUP
 * cannot (consumer.c; the cost model is consumer.h's): each looks at every
 * entry inside Redis, measuring it, before anything is transferred.
 *
 *   recover  the batch of a read the reply guard refused, or one entry the
 *            guard let through that still costs more than CONSUMER_ENTRY_MAX
 *   reclaim  the idle pending messages of any consumer (what XAUTOCLAIM
 *            does, measured first)
 *   retry    the due members of the retry index (invocation.h), claimed
 *
 * The calling conventions are above each script in consumer_scripts.c.
 * Each accessor initialises the scripts once (any thread) and returns an
 * immutable script for redis_script_run.
 */
#ifndef RELAY_CONSUMER_SCRIPTS_H
#define RELAY_CONSUMER_SCRIPTS_H

#include "io/redis.h"

const struct redis_script *consumer_scripts_recover(void);
const struct redis_script *consumer_scripts_reclaim(void);
const struct redis_script *consumer_scripts_retry(void);

#endif
