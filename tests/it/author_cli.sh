# The function author's loop: relay function new, relay event send (and
# the two together under a real relay start). Redis is a private
# redis-server (start_redis); Docker only for the end-to-end run.

SAMPLE='{"event_name":"hello","name":"world"}'

# new_expected DIR NAME HANDLER MANIFEST: the exact stdout of
# `relay function new` writing into the functions directory DIR.
new_expected() {
	printf 'created %s/%s/template.yaml\ncreated %s/%s/%s\ncreated %s/%s/%s\nnext: relay function invoke %s --event '\''%s'\''' \
		"$1" "$2" "$1" "$2" "$3" "$1" "$2" "$4" "$2" "$SAMPLE"
}

test_new_each_runtime_then_validate() {
	run "$RELAY" function new hello-py --runtime python3.14
	assert_status 0
	assert_err_empty
	assert_out_eq "$(new_expected "$RELAY_FUNCTIONS_DIR" hello-py handler.py requirements.txt)"
	run "$RELAY" function new hello-js --runtime node24 --dir "$RELAY_FUNCTIONS_DIR"
	assert_status 0
	assert_err_empty
	assert_out_eq "$(new_expected "$RELAY_FUNCTIONS_DIR" hello-js handler.js package.json)"
	[ "$(cd "$RELAY_FUNCTIONS_DIR" && find . | LC_ALL=C sort | tr '\n' ' ')" = ". ./hello-js ./hello-js/handler.js ./hello-js/package.json ./hello-js/template.yaml ./hello-py ./hello-py/handler.py ./hello-py/requirements.txt ./hello-py/template.yaml " ] ||
		fail "unexpected files: $(cd "$RELAY_FUNCTIONS_DIR" && find . | LC_ALL=C sort)"
	run "$RELAY" function validate
	assert_status 0
	assert_out_eq "hello-js: ok
hello-py: ok"
	assert_err_empty
	# The sample event of the printed next step matches each one rule.
	run "$RELAY" function match "$SAMPLE"
	assert_status 0
	assert_out_eq "$(printf 'hello-js\thandler.handler\nhello-py\thandler.handler')"
	# The empty manifests are the same bytes for every function (one
	# dependency image per runtime, shared): no name in them.
	run "$RELAY" function new other-py --runtime python3.14
	assert_status 0
	cmp -s "$RELAY_FUNCTIONS_DIR/hello-py/requirements.txt" "$RELAY_FUNCTIONS_DIR/other-py/requirements.txt" ||
		fail "requirements.txt differs between functions"
	python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d == {"private": True, "type": "module", "dependencies": {}}, d' \
		"$RELAY_FUNCTIONS_DIR/hello-js/package.json" || fail "package.json is not the stub"
}

test_new_into_another_dir_names_it_in_the_next_step() {
	local d="$TMP/my fns"
	run "$RELAY" function new x1 --runtime node24 --dir "$d"
	assert_status 0
	assert_out_eq "created $d/x1/template.yaml
created $d/x1/handler.js
created $d/x1/package.json
next: RELAY_FUNCTIONS_DIR='$d' relay function invoke x1 --event '$SAMPLE'"
	run "$RELAY" function validate "$d"
	assert_status 0
	assert_out_eq "x1: ok"
}

test_new_refuses_invalid_name_existing_dir_unknown_runtime() {
	run "$RELAY" function new Hello --runtime python3.14
	assert_status 1
	assert_out_empty
	[ "$(cat "$TMP/err")" = 'relay: function new: invalid function name "Hello": must start with a lowercase letter or a digit (the name must match [a-z0-9][a-z0-9._-]*, at most 63 characters, no trailing dot)' ] ||
		fail "invalid name: $(cat "$TMP/err")"
	run "$RELAY" function new "a/b" --runtime python3.14
	assert_status 1
	[ "$(cat "$TMP/err")" = "relay: function new: invalid function name \"a/b\": only lowercase letters, digits, '.', '_' and '-' are allowed (the name must match [a-z0-9][a-z0-9._-]*, at most 63 characters, no trailing dot)" ] ||
		fail "invalid name: $(cat "$TMP/err")"
	# The same rule and wording as discovery: validate says the same of a
	# directory so named.
	mkdir -p "$TMP/d/Hello" && printf 'runtime: node24\n' >"$TMP/d/Hello/template.yaml"
	run "$RELAY" function validate "$TMP/d"
	assert_out_contains "Hello: invalid function name: must start with a lowercase letter or a digit (the name must match [a-z0-9][a-z0-9._-]*, at most 63 characters, no trailing dot)"

	mkdir -p "$RELAY_FUNCTIONS_DIR/taken"
	echo keep >"$RELAY_FUNCTIONS_DIR/taken/mine"
	run "$RELAY" function new taken --runtime node24
	assert_status 1
	assert_out_empty
	[ "$(cat "$TMP/err")" = "relay: function new: $RELAY_FUNCTIONS_DIR/taken already exists" ] ||
		fail "existing dir: $(cat "$TMP/err")"
	[ "$(ls -A "$RELAY_FUNCTIONS_DIR/taken")" = mine ] || fail "the existing directory was changed"

	run "$RELAY" function new fresh --runtime python3
	assert_status 2
	assert_out_empty
	[ "$(cat "$TMP/err")" = 'relay function new: unsupported runtime "python3" (supported: python3.14, node24)' ] ||
		fail "unknown runtime: $(cat "$TMP/err")"
	run "$RELAY" function new fresh
	assert_status 2
	[ "$(cat "$TMP/err")" = 'relay function new: --runtime is required (one of python3.14, node24)' ] ||
		fail "no runtime: $(cat "$TMP/err")"
	run "$RELAY" function new fresh --runtime node24 --dir ''
	assert_status 2
	[ "$(cat "$TMP/err")" = 'relay function new: --dir must not be empty' ] ||
		fail "empty --dir: $(cat "$TMP/err")"
	run "$RELAY" function new --runtime node24
	assert_status 2
	assert_err_contains "relay function new: missing argument"
	# Nothing was written by any refusal: no directory, no staging left.
	[ "$(ls -A "$RELAY_FUNCTIONS_DIR")" = taken ] || fail "left behind: $(ls -A "$RELAY_FUNCTIONS_DIR")"
}

test_new_failure_leaves_nothing() {
	# A functions directory that cannot be written: no function, no staging
	# directory, one line.
	[ "$(id -u)" -ne 0 ] || command -v setpriv >/dev/null || skip "needs setpriv to drop root"
	local d=$TMP/ro
	mkdir -p "$d" && chmod 0555 "$d" && chmod 0711 "$TMP"
	if [ "$(id -u)" -eq 0 ]; then
		run setpriv --reuid=65534 --regid=65534 --clear-groups "$RELAY" function new nope --runtime node24 --dir "$d"
	else
		run "$RELAY" function new nope --runtime node24 --dir "$d"
	fi
	assert_status 1
	assert_out_empty
	assert_err_lines 1
	assert_err_contains "relay: function new: cannot create a temporary directory in $d: Permission denied"
	[ -z "$(ls -A "$d")" ] || fail "left behind: $(ls -A "$d")"
}

test_new_write_failure_leaves_nothing() {
	# The functions directory fills up after the staging directory is made
	# (a tmpfs of three inodes): the files written so far and the staging
	# directory are removed, no DIR/NAME appears, one line says why.
	local d=$TMP/full
	mkdir -p "$d"
	unshare -m sh -c "mount -t tmpfs -o nr_inodes=3 none '$d' && touch '$d/.ok'" 2>/dev/null ||
		skip "cannot mount a tmpfs in a private mount namespace"
	unshare -m sh -c "mount -t tmpfs -o nr_inodes=3 none '$d' && '$RELAY' function new abc --runtime node24 --dir '$d' >'$TMP/out' 2>'$TMP/err'; echo \$? >'$TMP/status'; ls -A '$d' >'$TMP/left'"
	STATUS=$(cat "$TMP/status")
	sanitizer_clean "$TMP/out" "$TMP/err" || fail "sanitizer report"
	assert_status 1
	assert_out_empty
	assert_err_lines 1
	grep -qE "^relay: function new: cannot create a file in $d/\.relay-sync-new-abc\.tmp-[A-Za-z0-9]{6}: No space left on device\$" "$TMP/err" ||
		fail "stderr: $(cat "$TMP/err")"
	[ ! -s "$TMP/left" ] || fail "left behind: $(cat "$TMP/left")"
}

test_help_lists_the_author_commands() {
	run "$RELAY" --help
	assert_status 0
	assert_out_contains "  function new <name> --runtime RUNTIME [--dir DIR]"
	run "$RELAY" function new --help
	assert_status 0
	assert_out_contains "usage: relay function new <name> --runtime RUNTIME [--dir DIR]"
	assert_out_contains "Creates one directory in the functions directory (or DIR); touches no"
	assert_err_empty
	run "$RELAY" --help
	assert_out_contains "  event send EVENT [--dry-run]"
	run "$RELAY" event send --help
	assert_status 0
	assert_out_contains "usage: relay event send EVENT [--dry-run]"
	assert_err_empty
}

# ---- relay event send ----------------------------------------------------

xlen() { rcli XLEN events; }

# send_setup: a private Redis, the stream settings, and two scaffolded
# functions that the sample event matches (a-js runs before b-py).
send_setup() {
	redis_up
	export REDIS_URI=127.0.0.1:$REDIS_PORT REDIS_STREAM=events REDIS_GROUP=relay
	run_expect 0 "$RELAY" function new a-js --runtime node24
	run_expect 0 "$RELAY" function new b-py --runtime python3.14
}

MATCHES='match: a-js/handler.handler
match: b-py/handler.handler'

test_send_valid_event_xadds_exactly_it() {
	send_setup
	run "$RELAY" event send "$SAMPLE"
	assert_status 0
	assert_err_empty
	local id
	id=$(sed -n 's/^sent: //p' "$TMP/out")
	assert_out_eq "$MATCHES
sent: $id"
	[ "$(xlen)" = 1 ] || fail "XLEN $(xlen), want 1"
	# The one entry is that id, with the field event holding the bytes
	# given and a traceparent starting a new, sampled trace
	# (docs/operations.md, "Tracing").
	[[ "$(rcli XRANGE events - + | tr '\n' '|')" =~ ^"$id|event|$SAMPLE|traceparent|"00-[0-9a-f]{32}-[0-9a-f]{16}-01"|"$ ]] ||
		fail "stream holds: $(rcli XRANGE events - +)"
	# --traceparent continues the caller's trace; an invalid one sends nothing.
	local tp=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
	run_expect 0 "$RELAY" event send --traceparent "$tp" "$SAMPLE"
	id=$(sed -n 's/^sent: //p' "$TMP/out")
	[ "$(rcli XRANGE events "$id" "$id" | sed -n 5p)" = "$tp" ] || fail "--traceparent: $(rcli XRANGE events "$id" "$id")"
	run_expect 1 "$RELAY" event send --traceparent "${tp^^}" "$SAMPLE"
	assert_err_contains "relay: event send: --traceparent '${tp^^}' is not a W3C traceparent"
	assert_out_empty
	[ "$(xlen)" = 2 ] || fail "XLEN $(xlen) after an invalid --traceparent, want 2"

	# @file and - send the bytes read, whitespace included.
	printf '%s\n' '{"event_name":"hello","name":"file"}' >"$TMP/ev.json"
	run "$RELAY" event send "@$TMP/ev.json"
	assert_status 0
	id=$(sed -n 's/^sent: //p' "$TMP/out")
	assert_out_eq "$MATCHES
sent: $id"
	[ "$(rcli XRANGE events "$id" "$id" | sed -n 3p)" = '{"event_name":"hello","name":"file"}' ] ||
		fail "@file entry: $(rcli XRANGE events "$id" "$id")"
	[ "$(rcli XRANGE events "$id" "$id" | sed -n 3p | wc -c)" = "$(($(wc -c <"$TMP/ev.json")))" ] || fail "@file: not the file's bytes"
	printf '%s' '{"event_name":"hello","name":"stdin"}' >"$TMP/stdin.json"
	run_expect_from "$TMP/stdin.json" 0 "$RELAY" event send -
	assert_err_empty
	id=$(sed -n 's/^sent: //p' "$TMP/out")
	assert_out_eq "$MATCHES
sent: $id"
	[ "$(rcli XRANGE events "$id" "$id" | head -n 3 | tr '\n' '|')" = "$id|event|{\"event_name\":\"hello\",\"name\":\"stdin\"}|" ] ||
		fail "- entry: $(rcli XRANGE events "$id" "$id")"
	[ "$(xlen)" = 4 ] || fail "XLEN $(xlen), want 4"

	# An event nothing matches is still sent; stderr says so.
	run "$RELAY" event send '{"event_name":"other"}'
	assert_status 0
	id=$(sed -n 's/^sent: //p' "$TMP/out")
	assert_out_eq "sent: $id"
	[ "$(cat "$TMP/err")" = "relay: event send: no handler in $RELAY_FUNCTIONS_DIR matches the event" ] ||
		fail "no match: $(cat "$TMP/err")"
	[ "$(xlen)" = 5 ] || fail "XLEN $(xlen), want 5"
}

# refused EVENT-ARG MESSAGE: exit 1, that one line, nothing on stdout,
# nothing XADDed.
refused() {
	local before
	before=$(xlen)
	run "$RELAY" event send "$1"
	assert_status 1
	assert_out_empty
	[ "$(cat "$TMP/err")" = "$2" ] || fail "stderr: $(cat "$TMP/err"); want: $2"
	[ "$(xlen)" = "$before" ] || fail "XLEN $(xlen), was $before: something was XADDed"
}

test_send_refuses_what_the_consumer_would_dead_letter() {
	send_setup
	rcli XADD events '*' event '{"seed":1}' >/dev/null
	refused '{"event_name":"hello"' 'relay: event send: malformed event (invalid_json): event is not valid JSON: expected '\'','\'' or '\''}'\'' at end of input'
	refused '["hello"]' 'relay: event send: malformed event (not_object): event is an array, not a JSON object'
	printf '{"a":"\xff"}' >"$TMP/bin.json"
	refused "@$TMP/bin.json" 'relay: event send: malformed event (not_text): event is not UTF-8 text (invalid byte at offset 6)'
	python3 -c 'import sys; sys.stdout.write("[" * 129 + "]" * 129)' >"$TMP/deep.json"
	refused "@$TMP/deep.json" 'relay: event send: malformed event (too_deep): event is nested deeper than 128 levels'
	# One byte over 1 MiB: the consumer's limit and words.
	python3 -c 'import sys; sys.stdout.write("{\"a\":\"" + "x" * (1048576 - 8) + "\"} ")' >"$TMP/big.json"
	[ "$(wc -c <"$TMP/big.json")" = 1048577 ] || fail "fixture size"
	refused "@$TMP/big.json" 'relay: event send: malformed event (too_large): event is 1048577 bytes, more than the maximum of 1048576'
	# Exactly 1 MiB is sent.
	head -c 1048576 "$TMP/big.json" >"$TMP/max.json"
	run "$RELAY" event send "@$TMP/max.json"
	assert_status 0
	[ "$(xlen)" = 2 ] || fail "the 1 MiB event was not sent"
	# Larger still, from a file and from stdin (whose size is not known:
	# no more than the maximum is read).
	head -c 17000000 /dev/zero | tr '\0' ' ' >"$TMP/huge.json"
	refused "@$TMP/huge.json" 'relay: event send: malformed event (too_large): event is 17000000 bytes, more than the maximum of 1048576'
	run_expect_from "$TMP/big.json" 1 "$RELAY" event send -
	assert_out_empty
	[ "$(cat "$TMP/err")" = 'relay: event send: malformed event (too_large): event is more than the maximum of 1048576 bytes' ] ||
		fail "stdin too large: $(cat "$TMP/err")"
	refused '{"source":"relay.schedule","function":"b-py","handler":"handler.handler","occurrence_id":"x"}' \
		'relay: event send: the event claims to be a scheduled occurrence (source "relay.schedule" with function, handler and occurrence_id): relay would dead-letter it as forged'
	refused "@$TMP/missing.json" "relay: event send: cannot open $TMP/missing.json: No such file or directory"
	# A usage error: exit 2.
	run "$RELAY" event send
	assert_status 2
	assert_err_contains "relay event send: missing argument"
	[ "$(xlen)" = 2 ] || fail "XLEN $(xlen), want 2"
}

# Only regular files are read: a FIFO nobody writes to, one held
# open by a writer that never writes, a directory and a device are refused
# at once with one clear line, by event send and by function match (the
# same reader), and nothing is sent. Each run is bounded by timeout: an
# open or read that waits forever shows as exit 124.
test_send_and_match_refuse_what_is_not_a_regular_file() {
	send_setup
	mkfifo "$TMP/fifo" "$TMP/held"
	exec 3<>"$TMP/held" # a writer (and reader) that never writes
	local f
	for f in "$TMP/fifo" "$TMP/held" "$TMP" /dev/zero; do
		run timeout 10 "$RELAY" event send "@$f"
		assert_status 1
		assert_out_empty
		[ "$(cat "$TMP/err")" = "relay: event send: cannot read $f: not a regular file" ] ||
			fail "event send @$f: $(cat "$TMP/err")"
		run timeout 10 "$RELAY" function match "@$f"
		assert_status 2
		assert_out_empty
		[ "$(cat "$TMP/err")" = "relay function match: cannot read $f: not a regular file" ] ||
			fail "function match @$f: $(cat "$TMP/err")"
	done
	exec 3>&-
	[ "$(xlen)" = 0 ] || fail "XLEN $(xlen): something was sent"
	# A symlink to a regular file is still read.
	printf '%s' "$SAMPLE" >"$TMP/ev.json"
	ln -s "$TMP/ev.json" "$TMP/link.json"
	run timeout 10 "$RELAY" event send "@$TMP/link.json"
	assert_status 0
	[ "$(xlen)" = 1 ] || fail "the event behind a symlink was not sent"
}

test_send_dry_run_writes_nothing_and_needs_no_redis() {
	send_setup
	run "$RELAY" event send --dry-run "$SAMPLE"
	assert_status 0
	assert_err_empty
	assert_out_eq "$MATCHES
not sent (--dry-run)"
	[ "$(xlen)" = 0 ] || fail "XLEN $(xlen) after --dry-run"
	[ "$(rcli EXISTS events)" = 0 ] || fail "--dry-run created the stream"
	# Redis down, then no Redis settings at all: the same answer.
	kill "$REDIS_PID" && wait "$REDIS_PID" 2>/dev/null
	run "$RELAY" event send --dry-run "$SAMPLE"
	assert_status 0
	assert_out_eq "$MATCHES
not sent (--dry-run)"
	unset REDIS_URI REDIS_STREAM REDIS_GROUP
	run "$RELAY" event send "$SAMPLE" --dry-run
	assert_status 0
	assert_err_empty
	assert_out_eq "$MATCHES
not sent (--dry-run)"
	# A malformed event is refused the same way without Redis.
	run "$RELAY" event send --dry-run '{'
	assert_status 1
	[ "$(cat "$TMP/err")" = 'relay: event send: malformed event (invalid_json): event is not valid JSON: expected object key at end of input' ] ||
		fail "stderr: $(cat "$TMP/err")"
}

test_send_redis_unreachable_exits_1() {
	send_setup
	kill "$REDIS_PID" && wait "$REDIS_PID" 2>/dev/null
	run "$RELAY" event send "$SAMPLE"
	assert_status 1
	[ "$(cat "$TMP/err")" = "relay: event send: cannot reach Redis: redis redis://127.0.0.1:$REDIS_PORT: connect: Connection refused" ] ||
		fail "stderr: $(cat "$TMP/err")"
	assert_out_lacks "sent:"
	# Without REDIS_URI the settings are refused as for relay start.
	unset REDIS_URI
	run "$RELAY" event send "$SAMPLE"
	assert_status 1
	assert_err_contains 'msg="invalid configuration: REDIS_URI is required'
	assert_out_empty
}

# ---- the loop end to end -------------------------------------------------

test_new_function_runs_under_relay_start_via_event_send() {
	docker info >/dev/null 2>&1 || fail "no Docker daemon (the test command starts one: scripts/ensure-docker)"
	redis_up
	export REDIS_URI=127.0.0.1:$REDIS_PORT REDIS_STREAM=events REDIS_GROUP=relay
	# Names no other test or session uses: images are named after them.
	local py=author-e2e-py-$$-$RANDOM js=author-e2e-js-$$-$RANDOM f
	trap 'rc=$?; rm_fn_images '"$py $js"'; (exit $rc); it_cleanup' EXIT
	run "$RELAY" function new "$py" --runtime python3.14
	assert_status 0
	run "$RELAY" function new "$js" --runtime node24
	assert_status 0
	start_relay_as "$TMP/relay.log" author-e2e-worker
	run "$RELAY" event send '{"event_name":"hello","name":"relay"}'
	assert_status 0
	local id
	id=$(sed -n 's/^sent: //p' "$TMP/out")
	assert_out_eq "match: $js/handler.handler
match: $py/handler.handler
sent: $id"
	# Each scaffold's handler prints its line into relay's log, for the id
	# event send printed, and exits 0.
	for f in "$js" "$py"; do
		wait_for 120 grep -qF "relay: function \"$f\" handler \"handler.handler\" executed for event \"$id\"" "$TMP/relay.log" ||
			fail "$f: the handler did not run: $(grep -F "$f" "$TMP/relay.log" | tail -n 20)"
		grep -qxF "relay: function \"$f\" handler \"handler.handler\": hello, relay" "$TMP/relay.log" ||
			fail "$f: no handler output line: $(grep -F "$f" "$TMP/relay.log")"
	done
	stop_relay_pid "$RELAY_PID"
}

# A template.yaml that is a FIFO: validate reports the tree error and
# refuses the read too, exiting 1 at once (never waiting on the open).
test_validate_does_not_wait_on_a_fifo_template() {
	mkdir -p "$RELAY_FUNCTIONS_DIR/f"
	mkfifo "$RELAY_FUNCTIONS_DIR/f/template.yaml"
	run timeout 10 "$RELAY" function validate
	assert_status 1
	assert_out_eq "f: template.yaml: not a regular file or directory
f: template.yaml: not a regular file"
}
