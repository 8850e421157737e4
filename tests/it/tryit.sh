# The spec's "Try it", through relay start with the repository's example
# functions, a private redis-server and the real Docker daemon: Relay's
# output holds the spec's six lines for the example event, exactly and in
# order, at the default level and at LOG_LEVEL=ERROR (plain lines and
# forwarded handler output are written whatever the level; the slog
# records about each invocation are DEBUG).

TRY_IT_EVENT='{"event_id":"evt_123","event_name":"INSERT","table_name":"users","new_image":{"id":"user_123","name":"John Doe","email":"john@example.com"}}'

ti_start() { # LOG HOSTNAME
	redis_up
	export REDIS_URI=127.0.0.1:$REDIS_PORT REDIS_STREAM=events REDIS_GROUP=relay
	cp -r "$ROOT/examples/functions/." "$RELAY_FUNCTIONS_DIR/"
	# At ERROR the start line is not logged: wait for the group instead.
	relay_bg "$1" unshare --uts sh -c "hostname $2 && exec '$RELAY' start"
	ti_group() { redis-cli -p "$REDIS_PORT" XINFO GROUPS events 2>/dev/null | grep -qx relay; }
	wait_for 120 ti_group || fail "relay did not create its group: $(tail -n 20 "$1")"
	# ...and for both images (prepared before the group is created).
	ti_images() { [ "$(docker images -q 'relay-fn-user-events-python' | wc -l)" -ge 1 ] &&
		[ "$(docker images -q 'relay-fn-welcome-email-node' | wc -l)" -ge 1 ]; }
	wait_for 120 ti_images || fail "no images: $(tail -n 20 "$1")"
}

# ti_lines LOG ID: the plain relay: lines from the first one about ID on,
# at most six.
ti_lines() {
	grep '^relay: ' "$1" |
		awk -v first="relay: function \"user-events-python\" rule \"events.created.handler\" matched event \"$2\"" \
			'$0 == first { on = 1 } on' | head -n 6
}

ti_want() { # ID
	cat <<EOF
relay: function "user-events-python" rule "events.created.handler" matched event "$1"
relay: function "user-events-python" handler "events.created.handler": User created: user_123
relay: function "user-events-python" handler "events.created.handler" executed for event "$1"
relay: function "welcome-email-node" rule "handler.handler" matched event "$1"
relay: function "welcome-email-node" handler "handler.handler": Sending welcome email to john@example.com
relay: function "welcome-email-node" handler "handler.handler" executed for event "$1"
EOF
}

# ti_try LOG: XADDs the event; its six lines, exactly; nothing pending.
ti_try() {
	local id
	id=$(redis-cli -p "$REDIS_PORT" XADD events '*' event "$TRY_IT_EVENT")
	[[ "$id" =~ ^[0-9]+-[0-9]+$ ]] || fail "XADD answered: $id"
	six() { [ "$(ti_lines "$1" "$id" | wc -l)" -eq 6 ]; }
	wait_for 60 six "$1" || fail "not six lines for $id: $(ti_lines "$1" "$id"; tail -n 20 "$1")"
	[ "$(ti_lines "$1" "$id")" = "$(ti_want "$id")" ] ||
		fail "the Try-it lines differ: $(diff <(ti_want "$id") <(ti_lines "$1" "$id"))"
	wait_for 20 acked_through "$REDIS_PORT" events relay "$id" || fail "$id not acknowledged"
	TI_ID=$id
}

test_try_it_prints_the_six_lines_exactly() {
	ti_start "$TMP/relay.log" tryit-worker
	ti_try "$TMP/relay.log"
	# Nothing said twice at INFO: the per-invocation records are DEBUG.
	! grep -qE 'msg="(rule matched|handler executed)"' "$TMP/relay.log" ||
		fail "per-invocation slog records at INFO: $(grep -E 'msg="(rule matched|handler executed)"' "$TMP/relay.log")"
	cat "$TMP/relay.log" | grep '^relay: '
}

test_output_forwarded_at_log_level_error() {
	export LOG_LEVEL=ERROR
	ti_start "$TMP/relay.log" tryit-quiet
	ti_try "$TMP/relay.log"
	# At ERROR: the six lines (and nothing else of Relay's at INFO or WARN).
	! grep -qE 'level=(DEBUG|INFO|WARN)' "$TMP/relay.log" ||
		fail "records below ERROR: $(grep -E 'level=(DEBUG|INFO|WARN)' "$TMP/relay.log" | head -n 5)"
	# And a failing handler's lines too: a handler that raises prints its
	# traceback (forwarded) and the failure line names the message.
	mkdir -p "$RELAY_FUNCTIONS_DIR/ti-fail"
	printf 'def handler(event):\n    raise ValueError("boom " + event["event_id"])\n' >"$RELAY_FUNCTIONS_DIR/ti-fail/main.py"
	printf 'runtime: python3.14\nevents:\n  - handler: main.handler\n    pattern: {event_name: [FAIL]}\n    retries: 0\n' \
		>"$RELAY_FUNCTIONS_DIR/ti-fail/template.yaml"
	# Serving once the state database says ready: the reconciler publishes
	# the new version to the workers before it records it ready. One event,
	# sent once: it must match.
	ti_ready() {
		run "$RELAY" function inspect ti-fail
		[ "$STATUS" -eq 0 ] && grep -qE '^Status: +ready$' "$TMP/out"
	}
	wait_for 120 ti_ready || fail "ti-fail not ready: $(cat "$TMP/out" "$TMP/err")"
	local id
	id=$(redis-cli -p "$REDIS_PORT" XADD events '*' event '{"event_id":"evt_f","event_name":"FAIL"}')
	failed() { grep -qF "relay: function \"ti-fail\" handler \"main.handler\" execution failed for event \"$id\": " "$TMP/relay.log"; }
	wait_for 60 failed || fail "no failure line: $(tail -n 20 "$TMP/relay.log")"
	grep -qF "relay: function \"ti-fail\" rule \"main.handler\" matched event \"$id\"" "$TMP/relay.log" ||
		fail "no matched line for $id"
	grep -qE '^relay: function "ti-fail" handler "main.handler": .*ValueError: boom evt_f' "$TMP/relay.log" ||
		fail "the traceback was not forwarded: $(grep -F 'ti-fail' "$TMP/relay.log")"
	grep -qE "level=ERROR msg=\"message sent to the dead-letter stream\" message_id=$id " "$TMP/relay.log" ||
		fail "no ERROR record for the dead-lettered message"
	docker images --format '{{.Repository}}:{{.Tag}}' relay-fn-ti-fail | xargs -r docker rmi -f >/dev/null 2>&1
	true
}
