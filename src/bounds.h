/*
 * Every input Relay takes from outside, and what bounds it: one index.
 *
 * Relay sits between producers it does not control (anyone who can XADD to
 * the stream, push to the synced repository or reach its HTTP ports) and a
 * Docker daemon with root-equivalent power. So every byte it reads from
 * outside is bounded in size, in the nodes it can make, in time and in
 * memory, for the worst input and not only the average one: keyed hashes
 * or sorted arrays instead of unseeded hash tables, alias expansion counted
 * before it is done, no quadratic rescans, deadlines on every peer. The
 * detailed cost model of each input is in the header named below, next to
 * the code that enforces it; this file is the map, and RELAY_LIMITS below
 * is the list docs/limits.md's table is checked against
 * (tests/unit/test_bounds.c): change a bound there and the test names the
 * row to update.
 *
 *   input                 cost model                enforced in
 *   stream entry          consumer.h, event.h       consumer.c (read path,
 *                                                   reply guard), event.c
 *   Redis reply           redis.h (REDIS_REPLY_MAX) redis.c (fill_reader)
 *   schedule occurrence   schedule.h                schedule.c
 *                         (schedule_verify)
 *   template.yaml         template.h, yaml.h,       yaml.c, template.c,
 *                         pattern.h                 pattern.c
 *   function tree         fingerprint.h,            fingerprint.c,
 *                         function.h, image.h       function.c, image.c
 *   HTTP connection       http.h (connections,      http.c (reaper,
 *                         per address, headers'     MHD options)
 *                         deadline)
 *   webhook request       webhook.h, http.h         http.c, webhook.c
 *   metrics request       http.h (64 KiB body,      metrics.c's http
 *                         10 s idle)                config, http.c
 *   git remote, checkout  gitsync.h                 gitsync_fetch.c,
 *                                                   gitsync_checkout.c
 *   known_hosts           sshkey.h                  sshkey.c
 *   TZif file             tz.h (also: at most 16    tz.c
 *                         transitions in 52 h)
 *   secret value          secret.h                  secret.c
 *   Docker replies and    docker.h, runner.h        docker.c, docker_conn.c,
 *   container output                                runner.c, runner_parked.c
 *   cron expression       cron.h                    cron.c
 *   invocation time       runner.h (time bounds     runner.c, invocation.c
 *                         table, running marker)
 *   standby container     runner.h (parking CPU     runner_parked.c, standby.c
 *   (parked, its module   bound), standby.h
 *   imported)             (removal at shutdown)
 *   DLQ entry, its id     cmd/dlq_view.h            cmd/dlq.c (scan_lua,
 *                                                   replay_lua), dlq_view.c
 *
 * What a breach does is part of each bound: a configuration error exits at
 * once; a template or function over a bound is logged and skipped (the
 * others load); a stream entry goes to the dead-letter stream with a reason
 * and is acknowledged; an HTTP client gets an error status or its
 * connection closed; a git sync fails and leaves the functions directory as
 * it was. Nothing read from outside can make a worker stop consuming.
 */
#ifndef RELAY_BOUNDS_H
#define RELAY_BOUNDS_H

#include "cmd/dlq_view.h"
#include "engine/consumer.h"
#include "model/cron.h"
#include "io/docker.h"
#include "io/event.h"
#include "model/fingerprint.h"
#include "git/gitsync.h"
#include "engine/image.h"
#include "model/otel.h"
#include "model/pattern.h"
#include "model/pattern_internal.h"
#include "io/redis.h"
#include "engine/runner.h"
#include "model/secret.h"
#include "git/sshkey.h"
#include "engine/standby.h"
#include "engine/trace.h"
#include "io/otlp.h"
#include "io/traceparent.h"
#include "model/template.h"
#include "base/tz.h"
#include "git/webhook.h"

/*
 * X(input, bound, constant, value, as docs/limits.md writes the value). The rows
 * of docs/limits.md's table, in order: "| input | bound | value |".
 */
#define KIB 1024LL
#define MIB (1024LL * 1024)
#define GIB (1024LL * 1024 * 1024)
#define RELAY_LIMITS(X)                                                                            \
	X("stream entry", "`event` field", EVENT_MAX_BYTES, MIB, "1 MiB")                          \
	X("stream entry", "JSON nesting", EVENT_MAX_DEPTH, 128, "128 levels")                      \
	X("stream entry", "fields Relay reads", CONSUMER_ENTRY_MAX, MIB + KIB, "1 MiB + 1 KiB")    \
	X("stream entry", "`tracestate` field", TRACEPARENT_STATE_MAX, 512, "512 bytes")            \
	X("stream entry", "`tracestate` members", TRACEPARENT_STATE_MEMBERS, 32, "32")              \
	X("span export", "spans queued (`OTEL_BSP_MAX_QUEUE_SIZE`)", OTEL_BSP_QUEUE_LIMIT, 65536,   \
	  "65,536")                                                                                \
	X("span export", "shutdown flush", TRACE_FLUSH_NS, 5LL * 1000000000, "5 s")                \
	X("OTEL_* list", "entries (headers, resource attributes)", OTLP_KV_MAX, 64, "64")          \
	X("OTEL_* list", "bytes", OTLP_KV_TEXT_MAX, 8 * KIB, "8 KiB")                              \
	X("Redis reply", "bytes", REDIS_REPLY_MAX, 64 * MIB, "64 MiB")                             \
	X("template.yaml", "bytes", TEMPLATE_MAX_BYTES, MIB, "1 MiB")                              \
	X("template.yaml", "YAML nodes, aliases expanded", TEMPLATE_MAX_NODES, 100000, "100,000")  \
	X("template.yaml", "scalar text, aliases expanded", TEMPLATE_MAX_EXPANDED_BYTES, 4 * MIB,  \
	  "4 MiB")                                                                                 \
	X("template.yaml", "nesting", TEMPLATE_MAX_DEPTH, 64, "64 levels")                         \
	X("template.yaml", "line", TEMPLATE_MAX_LINE, 64 * KIB, "64 KiB")                          \
	X("template.yaml", "rules, schedules, env, secrets (each)", TEMPLATE_MAX_ITEMS, 1000,      \
	  "1,000")                                                                                 \
	X("template.yaml", "pattern nesting", PATTERN_MAX_DEPTH, 32, "32 levels")                  \
	X("template.yaml", "branches of one `$or`", PATTERN_MAX_OR_BRANCHES, 64, "64")             \
	X("template.yaml", "stars in one `wildcard` operand", PATTERN_MAX_WILDCARD_STARS, 32,      \
	  "32")                                                                                    \
	X("template.yaml", "error and warning lines (each)", TEMPLATE_MAX_MESSAGES, 100, "100")    \
	X("template.yaml", "handler timeout", TEMPLATE_MAX_TIMEOUT_NS, 5LL * 60 * 1000000000,      \
	  "5 min")                                                                                 \
	X("template.yaml", "handler name (`module.function`)", TEMPLATE_MAX_HANDLER, 255,          \
	  "255 bytes")                                                                             \
	X("function tree", "files", FN_TREE_MAX_FILES, 10000, "10,000")                            \
	X("function tree", "bytes", FN_TREE_MAX_BYTES, 256 * MIB, "256 MiB")                       \
	X("function tree", "directory depth", FN_TREE_MAX_DEPTH, 32, "32 levels")                  \
	X("image build", "time", IMAGE_BUILD_TIMEOUT_MS, 15LL * 60 * 1000, "15 min")               \
	X("HTTP connection", "connections at once (each listener)", HTTP_DEFAULT_CONNECTION_LIMIT, \
	  128, "128")                                                                              \
	X("HTTP connection", "connections from one address", HTTP_DEFAULT_PER_IP_LIMIT, 16, "16")  \
	X("HTTP connection", "request line and headers, from the accept",                          \
	  HTTP_DEFAULT_HEADER_TIMEOUT_SECONDS, 5, "5 s")                                           \
	X("webhook request", "body", WEBHOOK_MAX_BODY, 5 * MIB, "5 MiB")                           \
	X("webhook request", "bodies of all connections", WEBHOOK_BODY_BUDGET, 16 * MIB, "16 MiB") \
	X("webhook request", "time for the body", WEBHOOK_BODY_SECONDS, 5, "5 s")                  \
	X("webhook request", "idle connection", WEBHOOK_IDLE_SECONDS, 5, "5 s")                    \
	X("webhook request", "replay window", WEBHOOK_REPLAY_SECONDS, 3600, "1 h")                 \
	X("webhook request", "deliveries remembered", WEBHOOK_REPLAY_MAX, 4096, "4,096")           \
	X("git fetch", "connect", GITSYNC_CONNECT_TIMEOUT_MS, 30000, "30 s")                       \
	X("git fetch", "no byte received", GITSYNC_STALL_TIMEOUT_MS, 60000, "60 s")                \
	X("git fetch", "whole fetch", GITSYNC_FETCH_TIMEOUT_MS, 30LL * 60 * 1000, "30 min")        \
	X("git fetch", "pack", GITSYNC_PACK_MAX_BYTES, GIB, "1 GiB")                               \
	X("git checkout", "files", GITSYNC_COPY_MAX_FILES, 20000, "20,000")                        \
	X("git checkout", "bytes", GITSYNC_COPY_MAX_BYTES, 512 * MIB, "512 MiB")                   \
	X("git checkout", "directory depth", GITSYNC_COPY_MAX_DEPTH, 64, "64 levels")              \
	X("known_hosts", "bytes", KNOWN_HOSTS_MAX, MIB, "1 MiB")                                   \
	X("known_hosts", "lines", KNOWN_HOSTS_MAX_LINES, 16384, "16,384")                          \
	X("known_hosts", "line", KNOWN_HOSTS_LINE_MAX, 32 * KIB, "32 KiB")                         \
	X("TZif file", "bytes", TZ_FILE_MAX, MIB, "1 MiB")                                         \
	X("secret", "value", SECRET_VALUE_MAX, MIB, "1 MiB")                                       \
	X("cron expression", "bytes", CRON_EXPR_MAX, 1024, "1 KiB")                                \
	X("Docker reply", "JSON body", DOCKER_BODY_MAX, 8 * MIB, "8 MiB")                          \
	X("container output", "line (longer ones are cut)", RUNNER_LINE_MAX, 16 * KIB, "16 KiB")   \
	X("standby container", "CPU while parked, from 1 s after its start",                       \
	  RUNNER_PARKED_NANO_CPUS, 50000000, "0.05 CPU")                                           \
	X("standby container", "removing all at shutdown", STANDBY_STOP_TIMEOUT_MS, 10000, "10 s") \
	X("DLQ entry id", "digits of each part of MS-SEQ", DLQ_ID_DIGITS_MAX, 20, "20")            \
	X("DLQ entry", "bytes of a field `dlq ls` shows", DLQ_FIELD_MAX, 16 * KIB, "16 KiB")       \
	X("dlq replay/rm --all", "entries per run", DLQ_ALL_MAX, 100000, "100,000")                \
	X("dlq replay", "replayed ids waiting to be counted", DLQ_REPLAYS_MAX, 1000000, "1,000,000")

#endif
