# Tracing across deliveries (docs/operations.md, "Tracing"): the retry of
# a message that came without a traceparent stays in the trace its first
# delivery started (kept in the invocation state); the DLQ entry carries
# that trace and relay dlq replay continues it; a scheduled occurrence is
# a trace of its own. Spans are checked at otlp_receiver.py.
#
# It waits on a cron minute, so it runs in the early lane (tests/run
# EARLY). Function names start with
# "trr-"; their images are removed at exit.

trr_rmi() { rm_fn_images trr-fail trr-tick; }

test_trace_retry_dlq_replay_and_schedule() {
	trap 'trr_rc=$?; trr_rmi; (exit "$trr_rc"); it_cleanup' EXIT
	redis_up
	relay_env
	mkdir -p "$TMP/rx"
	local port
	port=$(free_port)
	python3 "$ROOT/tests/it/otlp_receiver.py" "$TMP/rx" "$port" ok >"$TMP/rx.log" 2>&1 &
	track $!
	wait_for 10 test -e "$TMP/rx/ready" || fail "receiver did not start: $(cat "$TMP/rx.log")"
	write_fn trr-fail h.py 'import os, sys
def handler(event):
    print("tp", os.environ.get("TRACEPARENT", "-"))
    sys.exit(3)
' 'runtime: python3.14
events:
  - handler: h.handler
    pattern: {kind: [fail]}
    retries: 1
    retry: {backoff: [2s]}
'
	write_fn trr-tick h.py 'import os
def handler(event):
    print("tick", os.environ.get("TRACEPARENT", "-"))
' 'runtime: python3.14
schedules:
  - handler: h.handler
    cron: "* * * * *"
'
	export OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$port
	start_relay_as "$TMP/relay.log" trr-worker
	local id
	id=$(rcli XADD events '*' event '{"kind":"fail"}')
	# Attempt 1 fails; after the rule's 2 s backoff (the retrier starts it
	# within 1.5 s of its due time) attempt 2 fails and the message is
	# dead-lettered: two container runs; 120 s leaves the rest for a
	# loaded machine. The cron minute (at most 60 s) is waited for below.
	wait_for 120 eval '[ "$(rcli XLEN relay:events:dlq)" = 1 ]' || fail "not dead-lettered: $(tail -n 20 "$TMP/relay.log")"
	# The first cron minute: at most 60 s after the start, plus a container.
	wait_for 90 grep -q '^relay: function "trr-tick" handler "h.handler": tick 00-' "$TMP/relay.log" ||
		fail "no scheduled run: $(grep trr-tick "$TMP/relay.log")"

	# Both attempts' containers got the same trace-id.
	local t1 t2 dlq tp
	t1=$(grep -o '"h.handler": tp 00-[0-9a-f]*' "$TMP/relay.log" | sed -n '1s/.*00-//p')
	t2=$(grep -o '"h.handler": tp 00-[0-9a-f]*' "$TMP/relay.log" | sed -n '2s/.*00-//p')
	[ "${#t1}" = 32 ] && [ "$t1" = "$t2" ] || fail "attempts in traces '$t1' and '$t2'"
	# The DLQ entry carries it; the replay continues it with a new parent.
	dlq=$(rcli XRANGE relay:events:dlq - + | head -n1)
	tp=$(rcli --raw XRANGE relay:events:dlq - + | awk 'p == "traceparent" {print; exit} {p = $0}')
	[[ "$tp" == "00-$t1-"*"-01" ]] || fail "DLQ traceparent: $tp"
	run_expect 0 "$RELAY" dlq replay "$dlq"
	local replayed rtp
	replayed=$(rcli XREVRANGE events + - COUNT 1 | head -n1)
	rtp=$(rcli --raw XRANGE events "$replayed" "$replayed" | awk 'p == "traceparent" {print; exit} {p = $0}')
	[[ "$rtp" == "00-$t1-"????????????????"-01" ]] && [ "$rtp" != "$tp" ] || fail "replayed traceparent: $rtp (DLQ entry's: $tp)"
	wait_for 60 eval '[ "$(grep -c "\"h.handler\": tp 00-$t1-" "$TMP/relay.log")" -ge 3 ]' ||
		fail "the replayed message did not run in trace $t1: $(grep '"h.handler": tp' "$TMP/relay.log")"
	stop_relay_pid "$RELAY_PID"

	local spans
	spans=$(for f in "$TMP"/rx/req-*.json; do jq -c '.resourceSpans[].scopeSpans[].spans[]' "$f"; done | jq -s .)
	# Trace t1: first delivery's message span is the root; the retry's
	# message span is its child; each attempt a child of its delivery's
	# message span, with attempt 1 and 2 and status ERROR; the replay's
	# message span is the child of rtp's parent-id.
	jq -e --arg t "$t1" --arg rp "$(cut -d- -f3 <<<"$rtp")" '[.[] | select(.traceId == $t)] as $s |
		($s | map(select(.kind == 5))) as $m |
		($m | map(select(has("parentSpanId") | not))) as $root |
		($root | length) == 1 and
		($m | map(select(.parentSpanId == $root[0].spanId)) | length) == 1 and
		($m | map(select(.parentSpanId == $rp)) | length) == 1 and
		($s | map(select(.kind == 1)) | length) == 3 and
		($s | map(select(.kind == 1) | .status.code) | all(. == 2)) and
		([$s[] | select(.kind == 1) | .attributes[] | select(.key == "relay.attempt") | .value.intValue] | sort) == ["1", "1", "2"] and
		($s | map(select(.kind == 1)) | all(.parentSpanId as $p | any($m[]; .spanId == $p)))' <<<"$spans" >/dev/null ||
		fail "spans of trace $t1: $(jq -c --arg t "$t1" '[.[] | select(.traceId == $t) | {spanId, parentSpanId, kind, name, status}]' <<<"$spans")"
	# The scheduled occurrence: a trace of its own, its message span a root.
	local ts
	ts=$(grep -o '"trr-tick" handler "h.handler": tick 00-[0-9a-f]*' "$TMP/relay.log" | sed -n '1s/.*00-//p')
	[ "${#ts}" = 32 ] && [ "$ts" != "$t1" ] || fail "scheduled trace: $ts"
	jq -e --arg t "$ts" '[.[] | select(.traceId == $t)] | (map(select(.kind == 5 and (has("parentSpanId") | not))) | length) == 1 and
		(map(select(.kind == 1 and .name == "invoke trr-tick/h.handler")) | length) == 1' <<<"$spans" >/dev/null ||
		fail "spans of the scheduled trace: $(jq -c --arg t "$ts" '[.[] | select(.traceId == $t)]' <<<"$spans")"
}
