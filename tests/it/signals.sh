# relay start and signals an operator sends besides SIGTERM: a
# terminal hang-up (SIGHUP) is logged and ignored; the worker keeps
# consuming and handles events sent after it, and SIGTERM still stops it
# cleanly with exit 0.

hup_logged() { [ "$(grep -c 'SIGHUP ignored' "$TMP/relay.log")" -ge "$1" ]; }

test_sighup_is_ignored_and_the_worker_keeps_consuming() {
	redis_up
	export REDIS_URI=127.0.0.1:$REDIS_PORT REDIS_STREAM=events REDIS_GROUP=relay
	local f=hup-$$ id
	trap 'rc=$?; rm_fn_images '"$f"'; (exit $rc); it_cleanup' EXIT
	mkdir -p "$RELAY_FUNCTIONS_DIR/$f"
	printf 'def handler(event):\n    print("handled", event["n"])\n' >"$RELAY_FUNCTIONS_DIR/$f/h.py"
	printf 'runtime: python3.14\nevents:\n  - handler: h.handler\n    pattern: {kind: [hup]}\n' \
		>"$RELAY_FUNCTIONS_DIR/$f/template.yaml"
	relay_bg "$TMP/relay.log" "$RELAY" start
	wait_for 90 grep -q 'msg="worker started"' "$TMP/relay.log" || fail "relay did not start: $(tail -n 20 "$TMP/relay.log")"
	# Twice: the first is not a one-off that happens to be survived.
	kill -HUP "$RELAY_PID"
	wait_for 10 hup_logged 1 || {
		kill -0 "$RELAY_PID" 2>/dev/null || { wait "$RELAY_PID"; STATUS=$?; unset "RELAY_LOGS[$RELAY_PID]"; fail "relay exited with $STATUS on SIGHUP"; }
		fail "no log line for SIGHUP: $(tail -n 5 "$TMP/relay.log")"
	}
	kill -HUP "$RELAY_PID"
	wait_for 10 hup_logged 2 || fail "the second SIGHUP was not logged"
	kill -0 "$RELAY_PID" 2>/dev/null || fail "relay is gone after SIGHUP"
	id=$(redis-cli -p "$REDIS_PORT" XADD events '*' event '{"kind":"hup","n":7}')
	wait_for 90 grep -q '^relay: function "'"$f"'" handler "h.handler".*: handled 7$' "$TMP/relay.log" ||
		fail "the event sent after SIGHUP was not handled: $(tail -n 10 "$TMP/relay.log")"
	wait_for 10 acked_through "$REDIS_PORT" events relay "$id" || fail "the event sent after SIGHUP was not acknowledged"
	grep -q 'msg="Relay stopping' "$TMP/relay.log" && fail "SIGHUP started a stop"
	stop_relay_pid "$RELAY_PID"
	grep -q 'msg="Relay stopped"' "$TMP/relay.log" || fail "no graceful stop after SIGTERM"
}
