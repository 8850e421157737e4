# `relay function inspect` shows each handler's standby count through relay start, a private redis-server and the real Docker
# daemon: while Relay runs, the stats flush writes one row per handler and
# inspect shows them in a Standby section after Schedules; after a graceful
# stop (the pool is gone) and with STANDBY_MAX=0 the section is absent, so
# the output is the spec's.
#
# Function names start with "sbi-"; each test removes the images it made.

# sbi_env HOST: redis (once), the stream; SBI_HOST is relay's hostname.
sbi_env() {
	SBI_HOST=$1
	if [ -z "${REDIS_PORT:-}" ]; then
		redis_up
	fi
	export REDIS_URI=127.0.0.1:$REDIS_PORT REDIS_STREAM=events REDIS_GROUP=relay
}

# sbi_fn NAME: handlers h.handler (matches {"fn": [NAME]}), h.other (never
# matches) and the schedule h.nightly.
sbi_fn() {
	mkdir -p "$RELAY_FUNCTIONS_DIR/$1"
	printf 'def handler(event):\n    print("sbi", event["n"])\n\ndef other(event):\n    pass\n\ndef nightly(event):\n    pass\n' \
		>"$RELAY_FUNCTIONS_DIR/$1/h.py"
	printf 'runtime: python3.14\nevents:\n  - handler: h.handler\n    pattern: {fn: [%s]}\n  - handler: h.other\n    pattern: {fn: [never]}\nschedules:\n  - handler: h.nightly\n    cron: "0 3 * * *"\n' \
		"$1" >"$RELAY_FUNCTIONS_DIR/$1/template.yaml"
}

# For the EXIT trap: keeps the test's exit status for it_cleanup (which
# reads $?) while removing the images.
sbi_cleanup_images() {
	local rc=$?
	rm_fn_images 'sbi-*'
	return "$rc"
}

# sbi_event FN N: XADDs one event and waits for its handler's success.
sbi_event() {
	local id
	id=$(redis-cli -p "$REDIS_PORT" XADD events '*' event "{\"fn\":\"$1\",\"n\":\"$2\"}")
	wait_for 60 grep -qF "executed for event \"$id\"" "$TMP/relay.log" ||
		fail "no success for $id: $(grep -v 'docker request' "$TMP/relay.log" | tail -n 20)"
}

# sbi_parked_n N FN: N running standby containers of FN on this relay.
sbi_parked_n() {
	[ "$(docker ps -q --filter label=relay.standby=true --filter "label=relay.hostname=$SBI_HOST" \
		--filter "label=relay.function=$2" | wc -l)" -eq "$1" ]
}

# sbi_inspect FN: relay function inspect FN, which must exit 0 without a
# sanitizer report; the output is in $TMP/out.
sbi_inspect() { run_expect 0 "$RELAY" function inspect "$1"; }

# sbi_section: the Standby section of the last inspect (empty when absent).
sbi_section() { awk '/^Standby:$/ { on = 1 } on && /^$/ { exit } on' "$TMP/out"; }
sbi_section_is() { # FN WANT
	sbi_inspect "$1"
	[ "$(sbi_section)" = "$2" ]
}
# sbi_processed FN N: inspect FN shows N events processed.
sbi_processed() {
	sbi_inspect "$1"
	grep -qx "  Events processed:    $2" "$TMP/out"
}

test_inspect_shows_the_standby_count_while_running() {
	trap 'sbi_cleanup_images; it_cleanup' EXIT
	sbi_fn sbi-warm
	sbi_env sbi-warm-host
	start_relay_as "$TMP/relay.log" "$SBI_HOST"
	sbi_event sbi-warm 1 # demand: one standby container for h.handler
	wait_for 60 sbi_parked_n 1 sbi-warm || fail "no standby container: $(tail -n 20 "$TMP/relay.log")"
	local want='Standby:
  h.handler   1
  h.other     0
  h.nightly   0'
	wait_for 20 sbi_section_is sbi-warm "$want" ||
		fail "inspect's Standby section: $(sbi_section)"
	# After Schedules, before Stats; the Events lines are unchanged.
	cp "$TMP/out" "$TMP/inspect"
	awk '/^(Events|Schedules|Standby|Stats):$/ { printf "%s ", $0 }' "$TMP/inspect" >"$TMP/order"
	[ "$(cat "$TMP/order")" = "Events: Schedules: Standby: Stats: " ] ||
		fail "sections in this order: $(cat "$TMP/order")"
	grep -qx '  h.handler   timeout=6s' "$TMP/inspect" || fail "Events lines changed: $(cat "$TMP/inspect")"

	term_relay "$RELAY_PID" || fail "relay did not stop cleanly"
	sbi_inspect sbi-warm
	! grep -q '^Standby:' "$TMP/out" || fail "Standby section after a graceful stop: $(cat "$TMP/out")"
	grep -qx '  Events processed:    1' "$TMP/out" || fail "final flush missing: $(cat "$TMP/out")"
}

test_no_standby_section_with_standby_max_zero() {
	trap 'sbi_cleanup_images; it_cleanup' EXIT
	sbi_fn sbi-off
	sbi_env sbi-off-host
	export STANDBY_MAX=0
	start_relay_as "$TMP/relay.log" "$SBI_HOST"
	sbi_event sbi-off 1
	# Once a flush has the event, it would have the standby rows too.
	wait_for 20 sbi_processed sbi-off 1 || fail "no flush with the event: $(cat "$TMP/out")"
	! grep -q '^Standby:' "$TMP/out" || fail "Standby section with STANDBY_MAX=0: $(cat "$TMP/out")"
	term_relay "$RELAY_PID" || fail "relay did not stop cleanly"
}
