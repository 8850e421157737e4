# A full disk under the data directory: RELAY_DATA_DIR
# is a small tmpfs, filled with a file while `relay start` runs against a
# private redis-server and the real Docker daemon. The state database write
# fails with one WARN per kind of failure, not one per flush; consumption
# goes on (events handled and acknowledged); once space returns the next
# flush writes again and `relay function ls` / `relay stats` show current
# data. `relay secret set` on the full disk fails with one line naming the
# problem, without the value, and leaves the previous value in place.
#
# Function names start with "df-"; the test removes the images it made.


df_fail() {
	echo "--- relay log (last 30 lines):"
	tail -n 30 "$TMP/relay.log" 2>/dev/null | cut -c1-300
	fail "$@"
}

# At exit: relays still running are stopped first (they hold the mount).
df_cleanup() {
	local pid
	for pid in "${!RELAY_LOGS[@]}"; do
		term_relay "$pid" || df_rc=1
	done
	if mountpoint -q "$RELAY_DATA_DIR"; then
		umount "$RELAY_DATA_DIR" || umount -l "$RELAY_DATA_DIR"
	fi
	rm_fn_images df-a df-b
}

# fill: the tmpfs has no byte left (dd stops at ENOSPC).
df_fill() { dd if=/dev/zero of="$RELAY_DATA_DIR/fill" bs=4k 2>/dev/null || true; }
df_full() { [ "$(stat -f -c %a "$RELAY_DATA_DIR")" = 0 ]; }
df_nothing_pending() { [ "$(rcli XPENDING events relay | head -n1)" = 0 ]; }
df_handled() { [ "$(grep -c "relay: function \"df-a\" handler \"h.handler\" executed for event" "$TMP/relay.log")" -ge "$1" ]; }
# df_secret_set NAME VALUE: relay secret set, the value on stdin; output in
# $TMP/out and $TMP/err, exit status in STATUS (run's conventions).
df_secret_set() {
	printf '%s' "$2" >"$TMP/value"
	run_from "$TMP/value" "$RELAY" secret set "$1"
	rm -f "$TMP/value"
}
df_count() { grep -cF -- "$1" "$TMP/relay.log"; }

test_full_data_dir_warns_once_keeps_consuming_and_recovers() {
	[ "$(id -u)" = 0 ] || skip "mounting a tmpfs needs root"
	trap 'df_rc=$?; df_cleanup; (exit "$df_rc"); it_cleanup' EXIT
	mkdir -p "$RELAY_DATA_DIR"
	mount -t tmpfs -o size=4m,mode=0700 relay-df "$RELAY_DATA_DIR" || skip "cannot mount a tmpfs here"
	redis_up
	export REDIS_URI=127.0.0.1:$REDIS_PORT REDIS_STREAM=events REDIS_GROUP=relay
	mkdir -p "$RELAY_FUNCTIONS_DIR/df-a"
	printf 'def handler(event):\n    print("handled", event["n"])\n' >"$RELAY_FUNCTIONS_DIR/df-a/h.py"
	printf 'runtime: python3.14\nevents:\n  - handler: h.handler\n    pattern: {kind: [df]}\n' \
		>"$RELAY_FUNCTIONS_DIR/df-a/template.yaml"
	df_secret_set df-key old-value-1
	[ "$STATUS" -eq 0 ] || df_fail "secret set on an empty disk: exit status $STATUS"

	start_relay_as "$TMP/relay.log" df-worker
	wait_for 60 grep -qF 'msg="function prepared" function=df-a' "$TMP/relay.log" || df_fail "df-a not prepared"
	rcli XADD events '*' event '{"kind":"df","n":1}' >/dev/null
	wait_for 60 df_handled 1 || df_fail "event 1 not handled"

	df_fill
	df_full || df_fail "the tmpfs is not full: $(df "$RELAY_DATA_DIR")"
	local i
	for i in 2 3 4 5 6; do rcli XADD events '*' event "{\"kind\":\"df\",\"n\":$i}" >/dev/null; done
	wait_for 60 df_handled 6 || df_fail "events not handled on a full disk"
	wait_for 30 df_nothing_pending || df_fail "events left pending on a full disk"
	# A new function while the disk is full: prepared and served; its
	# pending/ready rows cannot be written.
	mkdir -p "$RELAY_FUNCTIONS_DIR/df-b"
	printf 'def handler(event):\n    print("b ran")\n' >"$RELAY_FUNCTIONS_DIR/df-b/h.py"
	printf 'runtime: python3.14\nevents:\n  - handler: h.handler\n    pattern: {kind: [dfb]}\n' \
		>"$RELAY_FUNCTIONS_DIR/df-b/template.yaml"
	wait_for 60 grep -qF 'msg="function discovered" function=df-b' "$TMP/relay.log" || df_fail "df-b not prepared"
	rcli XADD events '*' event '{"kind":"dfb"}' >/dev/null
	wait_for 60 grep -qF 'relay: function "df-b" handler "h.handler" executed for event' "$TMP/relay.log" ||
		df_fail "df-b's event not handled on a full disk"
	# Three flush intervals (5 s each) on the full disk: one WARN for the
	# stats, not one per flush.
	wait_for 30 grep -qF 'cannot write the stats snapshot' "$TMP/relay.log" || df_fail "no WARN for the stats write"
	sleep 11
	local warns
	warns=$(grep 'level=WARN' "$TMP/relay.log" | grep -ic 'state database')
	grep 'level=WARN' "$TMP/relay.log" | grep -i 'state database' | cut -c1-250
	[ "$(df_count 'cannot write the stats snapshot')" = 1 ] || df_fail "the stats WARN repeats"
	[ "$warns" -le 3 ] || df_fail "$warns state database WARN lines"

	# relay secret set on the full disk: exit 1, one line, no value; the
	# previous value stays.
	df_secret_set df-key new-value-2
	assert_status 1
	assert_err_lines 1
	assert_err_lacks 'new-value-2'
	assert_err_contains 'No space left on device'
	echo "secret set on a full disk: $(cat "$TMP/err")"
	[ "$(cat "$RELAY_DATA_DIR/secrets/df-key")" = old-value-1 ] || df_fail "the previous secret value changed"
	[ -z "$(find "$RELAY_DATA_DIR/secrets" -name '.*tmp*')" ] || df_fail "a temporary secret file was left"

	# Space returns: the next flush writes, the CLI reads current data.
	rm -f "$RELAY_DATA_DIR/fill"
	wait_for 30 grep -qF 'stats snapshot written again' "$TMP/relay.log" || df_fail "the stats were not written again"
	run "$RELAY" stats
	assert_status 0
	assert_out_contains 'Handler successes:   7'
	run "$RELAY" function ls
	assert_status 0
	grep -qE '^df-a +python3.14 +ready ' "$TMP/out" || df_fail "df-a not listed ready: $(cat "$TMP/out")"
	grep -qE '^df-b +python3.14 +ready ' "$TMP/out" || df_fail "df-b not listed ready after recovery: $(cat "$TMP/out")"
	df_secret_set df-key new-value-3
	assert_status 0
	[ "$(cat "$RELAY_DATA_DIR/secrets/df-key")" = new-value-3 ] || df_fail "secret not set once space returned"
	[ "$(rcli XLEN relay:events:dlq)" = 0 ] || df_fail "dead letters"
	wait_for 30 df_nothing_pending || df_fail "events left pending"
	stop_relay_pid "$RELAY_PID"
	[ -z "$(docker ps -aq --filter label=relay.function=df-a)$(docker ps -aq --filter label=relay.function=df-b)" ] ||
		df_fail "containers left"
}
