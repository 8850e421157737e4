# relay event status MESSAGE-ID [--json] against messages that the real
# relay start (a private redis-server, the real Docker daemon) left in each
# state: acknowledged (a succeeding handler), pending in the middle of its
# 1-minute backoff (a failing handler with retries left; the handler after
# it not started), dead-lettered (a handler with retries: 0, and a
# malformed event), deleted while pending, deleted after acknowledgement
# (not found), not delivered yet (relay stopped); then Redis down.
#
# Function names start with "es-"; their images are removed at exit.

es_rmi() {
	local name
	for name in es-ok es-fail es-die; do
		docker images --format '{{.Repository}}:{{.Tag}}' "relay-fn-$name" | xargs -r docker rmi -f >/dev/null 2>&1
	done
	return 0
}

es_fn() { # name, kinds it matches, template extra, handler body
	local d=$RELAY_FUNCTIONS_DIR/$1
	mkdir -p "$d"
	printf 'runtime: python3.14\nevents:\n  - handler: main.handler\n    pattern: {kind: [%s]}\n%s' "$2" "$3" >"$d/template.yaml"
	printf '%s' "$4" >"$d/main.py"
}

xadd() { rcli XADD es '*' event "$1"; }
pending_has() { [ "$(rcli XPENDING es es-group "$1" "$1" 1 | head -n1)" = "$1" ]; }
not_pending() { [ -z "$(rcli XPENDING es es-group "$1" "$1" 1)" ] && [ "$(rcli XINFO GROUPS es | awk 'p == "lag" {print; exit} {p = $0}')" = 0 ]; }
dlq_of() { # original id -> DLQ entry id
	rcli EVAL "for _, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do
		local m = {}
		for i = 1, #e[2], 2 do m[e[2][i]] = e[2][i + 1] end
		if m.original_id == ARGV[1] then return e[1] end
	end" 1 relay:es:dlq "$1"
}
dlq_field() { # DLQ id, field
	rcli --raw XRANGE relay:es:dlq "$1" "$1" | awk -v f="$2" 'p == f {print; exit} {p = $0}'
}
# The trace id in a traceparent (docs/operations.md, "Tracing").
trace_of() { sed -n 's/^00-\([0-9a-f]\{32\}\)-[0-9a-f]\{16\}-[0-9a-f]\{2\}$/\1/p' <<<"$1"; }
# The marker's deadline (Unix ns) as the RFC 3339 UTC text event status shows.
marker_time() { date -u -d "@$(($1 / 1000000000))" +%Y-%m-%dT%H:%M:%SZ; }

# es_status ID: runs relay event status ID.
es_status() { run "$RELAY" event status "$@"; }

test_event_status_each_state() {
	trap 'es_rc=$?; es_rmi; (exit "$es_rc"); it_cleanup' EXIT
	redis_up
	export REDIS_URI=127.0.0.1:$REDIS_PORT REDIS_STREAM=es REDIS_GROUP=es-group
	es_fn es-ok 'ok, both' '' 'def handler(event):
    print("ok", event["kind"])
'
	es_fn es-fail both '    retries: 2
' 'def handler(event):
    raise RuntimeError("fail")
'
	es_fn es-die die '    retries: 0
' 'def handler(event):
    raise RuntimeError("die")
'
	start_relay_as "$TMP/relay.log" es-worker
	local ok both die bad marker t dlq reason idle out
	ok=$(xadd '{"kind":"ok"}')
	both=$(xadd '{"kind":"both"}')
	die=$(xadd '{"kind":"die"}')
	bad=$(xadd 'not json')
	wait_for 60 not_pending "$ok" || fail "ok event not acknowledged: $(tail -n 20 "$TMP/relay.log")"
	wait_for 60 eval '[ -n "$(dlq_of "$die")" ] && [ -n "$(dlq_of "$bad")" ]' ||
		fail "not dead-lettered: $(tail -n 20 "$TMP/relay.log")"
	wait_for 60 eval 'rcli HGET "relay:invocation:es:es-group:$both" es-fail/main.handler | grep -q "^next_attempt_at:"' ||
		fail "the failing handler has no backoff marker: $(tail -n 20 "$TMP/relay.log")"
	pending_has "$both" || fail "$both not pending"

	# Acknowledged.
	es_status "$ok"
	assert_status 0
	assert_err_empty
	assert_out_eq "Message:           $ok
Stream:            es
Group:             es-group
State:             acknowledged

Matches now:
  es-ok/main.handler"

	# Pending, in the middle of its backoff: the next handler not started.
	marker=$(rcli HGET "relay:invocation:es:es-group:$both" es-fail/main.handler)
	t=$(marker_time "$(sed 's/^next_attempt_at:\([0-9]*\)#1$/\1/' <<<"$marker")")
	# The trace its first delivery started, kept for its retries.
	local tr
	tr=$(trace_of "$(rcli HGET "relay:invocation:es:es-group:$both" trace)")
	[ -n "$tr" ] || fail "no trace context in the invocation state"
	local both_tr=$tr
	es_status "$both"
	assert_status 0
	idle=$(sed -n 's/^Idle:  *\([0-9]*\)s$/\1/p' "$TMP/out")
	[ -n "$idle" ] && [ "$idle" -lt 70 ] || fail "idle: $(cat "$TMP/out")"
	assert_out_eq "Message:           $both
Stream:            es
Group:             es-group
State:             pending
Trace:             $tr
Consumer:          es-worker
Idle:              ${idle}s
Deliveries:        1

Invocations:
  es-fail/main.handler   waiting until $t after attempt 1
  es-ok/main.handler     not started"
	es_status --json "$both"
	assert_status 0
	jq -e --arg id "$both" --arg t "$t" --arg tr "$tr" '
		.trace_id == $tr and .message_id == $id and .stream == "es" and .group == "es-group" and
		.state == "pending" and .in_stream and .event == "ok" and .dead_letter == null and
		.pending.consumer == "es-worker" and .pending.deliveries == 1 and (.pending.idle_seconds | type) == "number" and
		.invocations == [
			{function: "es-fail", handler: "main.handler", marker: "waiting", until: $t, attempts: 1, matches_now: true},
			{function: "es-ok", handler: "main.handler", marker: "not_started", until: null, attempts: 0, matches_now: true}] and
		.matches_now == [{function: "es-fail", handler: "main.handler"}, {function: "es-ok", handler: "main.handler"}] and
		.matches_error == null' "$TMP/out" >/dev/null || fail "event status --json (pending): $(cat "$TMP/out")"

	# Dead-lettered: exhausted.
	dlq=$(dlq_of "$die")
	reason=$(dlq_field "$dlq" reason)
	tr=$(trace_of "$(dlq_field "$dlq" traceparent)")
	[ -n "$tr" ] || fail "no traceparent in the DLQ entry"
	es_status "$die"
	assert_status 0
	assert_out_eq "Message:           $die
Stream:            es
Group:             es-group
State:             dead-lettered
Trace:             $tr
DLQ entry:         $dlq
Reason:            $reason
Attempts:          1
Dead-lettered at:  $(dlq_field "$dlq" timestamp)

Matches now:
  es-die/main.handler"
	[[ "$reason" == "es-die/main.handler exhausted after 1 attempt(s): "*"RuntimeError: die"* ]] || fail "reason: $reason"
	es_status --json "$die"
	jq -e --arg d "$dlq" --arg r "$(dlq_field "$dlq" reason)" '.state == "dead_lettered" and .pending == null and
		.dead_letter.id == $d and .dead_letter.attempts == 1 and .dead_letter.reason == $r and
		(.dead_letter.timestamp | test("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$")) and
		.invocations == [] and .matches_now == [{function: "es-die", handler: "main.handler"}]' "$TMP/out" >/dev/null ||
		fail "event status --json (dead-lettered): $(cat "$TMP/out")"

	# Dead-lettered: malformed.
	dlq=$(dlq_of "$bad")
	tr=$(trace_of "$(dlq_field "$dlq" traceparent)")
	[ -n "$tr" ] || fail "no traceparent in the malformed event's DLQ entry"
	es_status "$bad"
	assert_status 0
	assert_out_eq "Message:           $bad
Stream:            es
Group:             es-group
State:             dead-lettered
Trace:             $tr
DLQ entry:         $dlq
Reason:            $(dlq_field "$dlq" reason)
Attempts:          0
Dead-lettered at:  $(dlq_field "$dlq" timestamp)
Event:             malformed (invalid_json)"
	es_status --json "$bad"
	jq -e '.state == "dead_lettered" and .event == "invalid_json" and .matches_now == null and .dead_letter.function == null' \
		"$TMP/out" >/dev/null || fail "event status --json (malformed): $(cat "$TMP/out")"

	# Deleted after acknowledgement: not found, exit 1.
	rcli XDEL es "$ok" >/dev/null
	es_status "$ok"
	assert_status 1
	assert_err_empty
	assert_out_eq "Message:           $ok
Stream:            es
Group:             es-group
State:             not found (not in the stream, not pending, not in the DLQ)"
	es_status --json "$ok"
	assert_status 1
	jq -e '.state == "not_found" and .in_stream == false and .event == null' "$TMP/out" >/dev/null ||
		fail "event status --json (not found): $(cat "$TMP/out")"

	# Deleted while pending: still pending, its markers shown.
	rcli XDEL es "$both" >/dev/null
	es_status "$both"
	assert_status 0
	idle=$(sed -n 's/^Idle:  *\([0-9]*\)s$/\1/p' "$TMP/out")
	assert_out_eq "Message:           $both
Stream:            es
Group:             es-group
State:             pending
Trace:             $both_tr
Consumer:          es-worker
Idle:              ${idle}s
Deliveries:        1
Event:             not in the stream (deleted or trimmed)

Invocations:
  es-fail/main.handler   waiting until $t after attempt 1"

	# Not delivered yet: relay stopped.
	stop_relay_pid "$RELAY_PID"
	out=$(xadd '{"kind":"ok"}')
	es_status "$out"
	assert_status 0
	assert_out_eq "Message:           $out
Stream:            es
Group:             es-group
State:             not delivered yet (the group has not read it)

Matches now:
  es-ok/main.handler"
	es_status --json "$out"
	jq -e '.state == "not_delivered" and .in_stream and .event == "ok"' "$TMP/out" >/dev/null ||
		fail "event status --json (not delivered): $(cat "$TMP/out")"

	# Redis down: one line, exit 1.
	kill "$REDIS_PID"
	wait "$REDIS_PID" 2>/dev/null
	es_status "$out"
	assert_status 1
	assert_out_empty
	assert_err_lines 1
	assert_err_contains "relay: event status: cannot reach Redis: "
	es_status --json "$out"
	assert_status 1
	assert_out_empty
	assert_err_lines 1
}

test_event_status_arguments_and_settings() {
	export REDIS_URI=127.0.0.1:1 REDIS_STREAM=es REDIS_GROUP=es-group
	run "$RELAY" event status 12-x
	assert_status 2
	assert_err_contains "relay event status: '12-x' is not a stream message id"
	run "$RELAY" event status
	assert_status 2
	assert_err_contains "usage: relay event status MESSAGE-ID [--json]"
	# The stream settings are required and validated as by relay start.
	unset REDIS_STREAM
	run "$RELAY" event status 1-0
	assert_status 1
	assert_err_contains "REDIS_STREAM"
	assert_out_empty
	# Never creates the state database or the data directory.
	[ ! -e "$RELAY_DATA_DIR" ] || fail "the data directory was created"
	run "$RELAY" event status --help
	assert_status 0
	assert_out_contains "Connects to Redis (REDIS_URI, REDIS_STREAM and REDIS_GROUP, validated like relay"
}

# es_raw_controls FILE: whether FILE holds a raw ESC, C0 (but newline),
# DEL, C1 (U+0080..U+009F) or bidi control (U+202A..U+202E, U+2066..U+2069).
es_raw_controls() {
	LC_ALL=C grep -qaP '[\x00-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\xaa-\xae]|\xe2\x81[\xa6-\xa9]' "$1"
}

# Names and reasons from Redis reach the terminal escaped: a consumer name,
# an invocation hash field and a DLQ reason with ESC, C1 (CSI U+009B) and
# bidi controls; --json keeps them, \u-escaped, in valid JSON.
test_event_status_escapes_names_and_reasons() {
	redis_up
	export REDIS_URI=127.0.0.1:$REDIS_PORT REDIS_STREAM=es REDIS_GROUP=es-group
	local consumer=$'w\e[31m\xc2\x9b2J\xe2\x80\xaeevil' reason=$'boom \e]0;pwn\a \xc2\x9b2J \xe2\x81\xa6x' p d
	rcli XGROUP CREATE es es-group 0 MKSTREAM >/dev/null
	p=$(xadd '{"kind":"x"}')
	d=$(xadd '{"kind":"y"}')
	rcli XREADGROUP GROUP es-group "$consumer" COUNT 2 STREAMS es '>' >/dev/null
	rcli XACK es es-group "$d" >/dev/null
	rcli HSET "relay:invocation:es:es-group:$p" $'fn\e[2J/h\xc2\x85' ok >/dev/null
	rcli XADD relay:es:dlq '*' original_stream es original_id "$d" event '{"kind":"y"}' reason "$reason" \
		attempts 1 timestamp 2026-01-01T00:00:00Z function fn handler h >/dev/null
	es_status "$p"
	assert_status 0
	es_raw_controls "$TMP/out" && fail "raw control characters: $(od -c "$TMP/out" | head -n 20)"
	assert_out_contains 'Consumer:          w\x1b[31m\u009b2J\u202eevil'
	assert_out_contains '  fn\x1b[2J/h\u0085'
	es_status --json "$p"
	assert_status 0
	es_raw_controls "$TMP/out" && fail "--json: raw control characters: $(od -c "$TMP/out" | head -n 20)"
	[ "$(jq -r .pending.consumer "$TMP/out")" = "$consumer" ] || fail "--json consumer: $(cat "$TMP/out")"
	es_status "$d"
	assert_status 0
	es_raw_controls "$TMP/out" && fail "dead-lettered: raw control characters: $(od -c "$TMP/out" | head -n 20)"
	assert_out_contains 'Reason:            boom \x1b]0;pwn\x07 \u009b2J \u2066x'
	es_status --json "$d"
	es_raw_controls "$TMP/out" && fail "--json: raw control characters: $(od -c "$TMP/out" | head -n 20)"
	[ "$(jq -r .dead_letter.reason "$TMP/out")" = "$reason" ] || fail "--json reason: $(cat "$TMP/out")"
}
