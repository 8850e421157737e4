# A hostile template.yaml against `relay function
# validate` and `relay start`, a private redis-server and the real Docker
# daemon: one 600 KB block scalar under an anchor, aliased 1,000 times in a
# pattern. The file is within the 1 MiB and node bounds, but stands for
# 600 MB of text; Relay refuses it by the bound on text with aliases
# expanded, names that bound, stays small, and keeps serving the function
# next to it. And handler names holding control characters (item 9),
# refused by validation.
#
# Function names start with "ht-"; each test removes the images it made.


ht_fail() {
	echo "assertion failed: $*"
	echo "--- relay log (last 30 lines, long lines cut):"
	tail -n 30 "$TMP/relay.log" 2>/dev/null | cut -c1-300
	exit 1
}

# The error the bomb gets, as template.c writes it.
HT_LIMIT='template.yaml: more than 4194304 bytes of text with aliases expanded (at line '

# ht_bomb NAME ALIASES: a python3.14 function whose only rule's pattern
# lists one 600,000-byte anchored scalar ALIASES times.
ht_bomb() {
	local d=$RELAY_FUNCTIONS_DIR/$1 i
	mkdir -p "$d"
	printf 'def main(event):\n    print("bomb ran", flush=True)\n' >"$d/handler.py"
	{
		printf 'runtime: python3.14\nx-big: &big |\n'
		for i in $(seq 10); do
			printf '  %s\n' "$(head -c 60000 /dev/zero | tr '\0' x)"
		done
		printf 'events:\n- handler: handler.main\n  pattern:\n    a:\n'
		for i in $(seq "$2"); do printf '    - *big\n'; done
	} >"$d/template.yaml"
}

# ht_good NAME: a python3.14 function run by events named "hello".
ht_good() {
	local d=$RELAY_FUNCTIONS_DIR/$1
	mkdir -p "$d"
	printf 'def main(event):\n    print("good ran", event["n"], flush=True)\n' >"$d/handler.py"
	printf 'runtime: python3.14\nevents:\n- handler: handler.main\n  pattern: {event_name: [hello]}\n' \
		>"$d/template.yaml"
}

# ht_peak_kib CMD...: runs CMD (stdout, stderr, STATUS as `run` does) and
# sets PEAK_KIB to its peak resident set size (VmHWM) in KiB.
ht_peak_kib() {
	run /usr/bin/time -f '%M' -o "$TMP/rss" "$@"
	PEAK_KIB=$(tail -n 1 "$TMP/rss")
}

test_validate_refuses_alias_bomb_naming_the_bound_within_256_mib() {
	[ -x /usr/bin/time ] || skip "/usr/bin/time (GNU time) is not installed"
	[ -x "$RELAY_PLAIN" ] || fail "$RELAY_PLAIN not built (make all)"
	ht_bomb ht-bomb 1000
	ht_good ht-good
	[ "$(wc -c <"$RELAY_FUNCTIONS_DIR/ht-bomb/template.yaml")" -lt 1048576 ] || fail "bomb over 1 MiB"

	# The sanitized build: the verdict, the exact lines.
	# Line 22 holds the 6th alias: 7 x 600,010 bytes are past 4 MiB.
	run "$RELAY" function validate "$RELAY_FUNCTIONS_DIR"
	assert_status 1
	assert_out_eq "ht-bomb: ${HT_LIMIT}22, column 8); the limit covers the whole file
ht-good: ok"
	assert_err_empty

	# The plain build: what it costs (the sanitizers' own memory aside).
	ht_peak_kib "$RELAY_PLAIN" function validate "$RELAY_FUNCTIONS_DIR"
	assert_status 1
	assert_out_contains "ht-bomb: $HT_LIMIT"
	[ "$PEAK_KIB" -lt $((256 * 1024)) ] || fail "peak RSS ${PEAK_KIB} KiB, want < 256 MiB"
	echo "validate on the alias bomb: peak RSS $((PEAK_KIB / 1024)) MiB"
}

# VmHWM of a running process, in KiB.
ht_hwm() { awk '/^VmHWM:/ { print $2 }' "/proc/$1/status"; }

test_start_skips_alias_bomb_and_serves_the_good_function() {
	trap 'ht_rc=$?; rm_fn_images ht-bomb ht-good; (exit "$ht_rc"); it_cleanup' EXIT
	ht_bomb ht-bomb 1000
	ht_good ht-good
	redis_up
	export REDIS_URI=127.0.0.1:$REDIS_PORT REDIS_STREAM=events REDIS_GROUP=relay
	rcli XGROUP CREATE events relay '$' MKSTREAM >/dev/null
	start_relay_as "$TMP/relay.log" ht-worker
	wait_for 180 grep -qF 'msg="function prepared" function=ht-good' "$TMP/relay.log" ||
		ht_fail "ht-good not prepared"
	grep -qF "msg=\"invalid function skipped\" function=ht-bomb errors=\"$HT_LIMIT" "$TMP/relay.log" ||
		ht_fail "the bomb's error is not logged"

	local id
	id=$(rcli XADD events '*' event '{"event_name":"hello","n":7}')
	wait_for 60 grep -qF "relay: function \"ht-good\" handler \"handler.main\" executed for event \"$id\"" \
		"$TMP/relay.log" || ht_fail "the good function did not handle $id"
	grep -qE '^relay: function "ht-good" handler "handler.main"( message "[^"]*")?( event "[^"]*")?: good ran 7$' \
		"$TMP/relay.log" || ht_fail "the good handler's output is missing"
	! grep -qF 'bomb ran' "$TMP/relay.log" || ht_fail "the bomb's handler ran"
	wait_for 30 acked_through "$REDIS_PORT" events relay "$id" || ht_fail "$id not acknowledged"

	# Still running, and small: the bomb's text was never built.
	kill -0 "$RELAY_PID" || ht_fail "relay is gone"
	local hwm
	hwm=$(ht_hwm "$RELAY_PID")
	[ "$hwm" -lt $((256 * 1024)) ] ||
		ht_fail "relay start peak RSS ${hwm} KiB, want < 256 MiB"
	echo "relay start with the alias bomb: peak RSS $((hwm / 1024)) MiB ($(basename "$(dirname "$RELAY")"))"
	stop_relay_pid "$RELAY_PID"
}

# Handler names: a control or formatting character is
# refused by validation, so it never reaches a log line or a container's
# RELAY_HANDLER; every other function still validates.
test_validate_refuses_control_characters_in_handler_names() {
	ht_good ht-good
	mkdir -p "$RELAY_FUNCTIONS_DIR/ht-esc"
	printf 'runtime: node24\nevents:\n- handler: "evil\\e[2J.main"\n  pattern: {}\n- handler: "a.b-c"\n  pattern: {}\nschedules:\n- handler: "x\\u202e.y"\n  cron: "@daily"\n' \
		>"$RELAY_FUNCTIONS_DIR/ht-esc/template.yaml"
	run "$RELAY" function validate "$RELAY_FUNCTIONS_DIR"
	assert_status 1
	assert_out_contains 'ht-esc: events[0].handler: "evil?[2J.main" is not of the form module.function (no control or formatting character)'
	assert_out_contains 'ht-esc: events[1].handler: "a.b-c" is not of the form module.function (the function is an identifier: a letter, _ or $, then letters, digits, _ or $)'
	assert_out_contains 'ht-esc: schedules[0].handler: "'
	assert_out_contains '" is not of the form module.function (no control or formatting character)'
	grep -qxF "ht-good: ok" "$TMP/out" || fail "ht-good not ok"
	[ "$(grep -c '^ht-esc: ' "$TMP/out")" -eq 3 ] || fail "want 3 lines for ht-esc"
	! grep -q $'\e' "$TMP/out" || fail "an ESC byte reached the output"
}
