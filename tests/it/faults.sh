# Faults survived by `relay start` against real parts: the functions
# directory missing at startup or moved away at run time, Redis stalled
# (SIGSTOP) for 15 s, and the Docker daemon restarted under running
# handlers or frozen (SIGSTOP) until Relay holds its reading. Each asserts that nothing is lost:
# every event handled (or dead-lettered with its reason), nothing pending,
# the invocation state gone, and no container left behind.
#
# The daemon scenarios stop and freeze a dockerd of their own (fd_start:
# own socket, data root, exec root and bridge, no iptables), never the
# machine's, which other tests use. Its data root is kept between runs
# (FD_ROOT) so the stand-in base image is loaded into it only once.

xadd() { rcli XADD events '*' event "{\"kind\":\"$1\",\"event_id\":\"$2\"}"; }
pending_count() { rcli XPENDING events relay | head -n1; }
group_info() { rcli XINFO GROUPS events | sed -n "/^$1\$/{n;p}"; }
# Everything read and acknowledged up to LAST_ID (see delivery.sh).
all_acked_up_to() {
	[ "$(group_info last-delivered-id)" = "$1" ] && [ "$(group_info lag)" = 0 ] &&
		[ "$(pending_count)" = 0 ]
}
count() { grep -cE -- "$1" "$2"; }
no_invocation_keys() { [ -z "$(rcli --scan --pattern 'relay:invocation:*')" ]; }
# lag_stays_for SECONDS: the group's lag stays above 0 (an entry waits
# unread) for that long.
lag_stays_for() {
	local i
	for i in $(seq 1 "$1"); do
		[ "$(group_info lag)" -ge 1 ] || return 1
		sleep 1
	done
}

# A handler printing "start <event_id>", sleeping, then "handled
# <event_id>"; the attempt is read from the DEBUG record of its run.
echo_fn() { # name, kind, seconds of sleep
	write_fn "$1" h.py "import time
def handler(event):
    print(\"start\", event[\"event_id\"], flush=True)
    time.sleep($3)
    print(\"handled\", event[\"event_id\"], flush=True)
" "runtime: python3.14
events:
  - handler: h.handler
    pattern: {kind: [$2]}
    timeout: 60s
    retries: 0
"
}

# handled_once ID LOG: exactly one success of ID, at attempt 1.
handled_once() {
	[ "$(count ": handled $1\$" "$2")" -eq 1 ] || fail "$1 handled $(count ": handled $1\$" "$2") times, want 1"
	[ "$(count "msg=\"handler executed\" .* event_id=$1 .*attempt=1 " "$2")" -eq 1 ] ||
		fail "$1 did not succeed at attempt 1: $(grep -F "event_id=$1 " "$2" | tail -n 3)"
}

# A read already blocked in Redis when a hold starts is abandoned at its
# next look, at most 200 ms later (consumer.c READ_STOP_SLICE_MS): an entry
# added in that window may still be read. Tests add theirs after it.
hold_settles() { sleep 0.5; }

HOLD_FNS='level=WARN msg="the functions directory cannot be read; not reading new events until it can"'
LIFT_FNS='level=INFO msg="the functions directory can be read again; reading resumes"'
HOLD_DOCKER='level=WARN msg="cannot reach the Docker daemon; not reading new events until it answers"'
LIFT_DOCKER='level=INFO msg="the Docker daemon answers again; reading resumes"'

# ---- the functions directory ---------------------------------------------

# Missing at startup (a volume not mounted yet): Relay starts, reads nothing,
# and serves the functions once the directory appears. Before, it served
# zero functions and acknowledged every event as matching nothing.
test_functions_dir_missing_at_startup_holds_reading_until_it_appears() {
	export LOG_LEVEL=DEBUG
	redis_up
	relay_env
	local real=$RELAY_FUNCTIONS_DIR
	export RELAY_FUNCTIONS_DIR=$TMP/not-yet-mounted
	start_relay_as "$TMP/relay.log" ft-missing
	grep -qF 'msg="cannot read the functions directory; waiting for it"' "$TMP/relay.log" ||
		fail "no WARN about the unreadable directory: $(tail -n 5 "$TMP/relay.log")"
	grep -qF -- "$HOLD_FNS" "$TMP/relay.log" || fail "no WARN about the hold"
	local id1
	id1=$(xadd ft 'm1')
	lag_stays_for 4 || fail "an event was read while the functions directory was missing"
	[ "$(pending_count)" = 0 ] || fail "an event was delivered while the directory was missing"
	# The directory appears whole (a mount): built aside, renamed into place.
	RELAY_FUNCTIONS_DIR=$real echo_fn ft-missing ft 0
	mv "$real" "$TMP/not-yet-mounted"
	wait_for 90 grep -qF -- "$LIFT_FNS" "$TMP/relay.log" || fail "reading did not resume: $(tail -n 5 "$TMP/relay.log")"
	wait_for 60 all_acked_up_to "$id1" || fail "m1 not acknowledged"
	handled_once m1 "$TMP/relay.log"
	grep -qF 'function "ft-missing" rule "h.handler" matched event' "$TMP/relay.log" || fail "m1 did not match"
	[ "$(grep -cF -- "$HOLD_FNS" "$TMP/relay.log")" -eq 1 ] || fail "the hold was logged more than once"
	stop_relay_pid "$RELAY_PID"
	rm_fn_images ft-missing
}

# Moved away at run time (a network filesystem gone): the functions keep
# what they have, but nothing new is read until the directory is back.
test_functions_dir_moved_away_at_run_time_holds_reading() {
	export LOG_LEVEL=DEBUG
	redis_up
	relay_env
	echo_fn ft-moved ftm 0
	start_relay_as "$TMP/relay.log" ft-moved
	local id1 id2
	id1=$(xadd ftm 'n1')
	wait_for 60 all_acked_up_to "$id1" || fail "n1 not acknowledged"
	mv "$RELAY_FUNCTIONS_DIR" "$TMP/away"
	wait_for 30 grep -qF -- "$HOLD_FNS" "$TMP/relay.log" || fail "no hold after the directory went away"
	hold_settles
	id2=$(xadd ftm 'n2')
	lag_stays_for 4 || fail "an event was read while the directory was away"
	mv "$TMP/away" "$RELAY_FUNCTIONS_DIR"
	wait_for 30 grep -qF -- "$LIFT_FNS" "$TMP/relay.log" || fail "reading did not resume"
	wait_for 60 all_acked_up_to "$id2" || fail "n2 not acknowledged"
	handled_once n1 "$TMP/relay.log"
	handled_once n2 "$TMP/relay.log"
	no_invocation_keys || fail "invocation state left behind"
	stop_relay_pid "$RELAY_PID"
	rm_fn_images ft-moved
}

# ---- Redis stalled ---------------------------------------------------------

# SIGSTOP of redis-server for 15 s with events in flight, then SIGCONT:
# every event handled exactly once, nothing pending, no state left.
test_redis_stalled_15s_loses_nothing() {
	export LOG_LEVEL=DEBUG
	redis_up
	relay_env
	echo_fn ft-stall fts 2
	start_relay_as "$TMP/relay.log" ft-stall
	local i last
	for i in 1 2 3 4; do xadd fts "s$i" >/dev/null; done
	wait_for 30 grep -qF ': start s1' "$TMP/relay.log" || fail "s1 did not start"
	kill -STOP "$REDIS_PID"
	sleep 15
	kill -CONT "$REDIS_PID"
	for i in 5 6 7 8; do last=$(xadd fts "s$i"); done
	wait_for 240 all_acked_up_to "$last" || fail "not everything acknowledged: $(pending_count) pending; $(tail -n 5 "$TMP/relay.log")"
	for i in 1 2 3 4 5 6 7 8; do
		[ "$(count ": handled s$i\$" "$TMP/relay.log")" -eq 1 ] || fail "s$i handled $(count ": handled s$i\$" "$TMP/relay.log") times"
	done
	[ "$(rcli XLEN relay:events:dlq)" = 0 ] || fail "something was dead-lettered"
	wait_for 10 no_invocation_keys || fail "invocation state left behind"
	# The daemon's label filter has no "!=": list the standby label of every
	# container of the function and require each to be a parked one.
	local left
	left=$(docker ps -a --filter label=relay.function=ft-stall --format '{{.Label "relay.standby"}}' | grep -vcx true || true)
	[ "$left" -eq 0 ] || fail "$left execution containers left behind"
	stop_relay_pid "$RELAY_PID"
	[ -z "$(docker ps -aq --filter label=relay.function=ft-stall)" ] || fail "containers left after the stop"
	rm_fn_images ft-stall
}

# ---- the Docker daemon -----------------------------------------------------

FD_ROOT=/var/lib/relay-it-dockerd
FD_EXEC=/run/relay-it-dockerd
FD_SOCK=/run/relay-it-dockerd.sock
fd() { docker -H "unix://$FD_SOCK" "$@"; }

# The private daemon's own bridge. Not --bridge=none: a dockerd started so
# deletes the interface docker0 at startup, which is the machine's daemon's
# bridge (its containers then fail with "could not find bridge docker0").
FD_BRIDGE=relayit0
fd_bridge() {
	ip link show "$FD_BRIDGE" >/dev/null 2>&1 ||
		{ ip link add "$FD_BRIDGE" type bridge && ip addr add 10.231.77.1/24 dev "$FD_BRIDGE"; } ||
		fail "cannot create the private daemon's bridge $FD_BRIDGE"
	ip link set "$FD_BRIDGE" up
}

# fd_start: the private daemon, answering; FD_PID is its pid.
fd_start() {
	mkdir -p "$FD_ROOT"
	fd_bridge
	dockerd --data-root "$FD_ROOT" --exec-root "$FD_EXEC" --pidfile "$FD_EXEC.pid" \
		-H "unix://$FD_SOCK" --bridge="$FD_BRIDGE" --iptables=false --ip6tables=false --ip-masq=false \
		>>"$TMP/dockerd.log" 2>&1 </dev/null &
	FD_PID=$!
	track "$FD_PID"
	wait_for 60 fd version >/dev/null 2>&1 || fail "private dockerd did not start: $(tail -n 5 "$TMP/dockerd.log")"
}

# fd_stop: SIGTERM, as `systemctl stop docker` does; waits for it to exit.
fd_stop() {
	kill -TERM "$FD_PID"
	wait "$FD_PID" 2>/dev/null || true
}

# fd_setup: the private daemon with the stand-in Python base image.
fd_setup() {
	fd_start
	if ! fd image inspect python:3.14-slim >/dev/null 2>&1; then
		docker save python:3.14-slim | fd load >/dev/null || fail "cannot load the base image into the private daemon"
	fi
	export DOCKER_HOST=unix://$FD_SOCK
}

no_private_containers() { [ -z "$(fd ps -aq --filter label=relay.function)" ]; }

# health_is STATUS: relay health against the private daemon exits STATUS
# (polled: another status is a miss, but a sanitizer report or abort fails
# the test at once).
health_is() {
	run "$RELAY" health
	[ "$STATUS" -eq "$1" ]
}

# The daemon stopped (SIGTERM) while two handlers run, and started again
# 10 s later. The running ones end as failures (retries: 0: dead-lettered
# with the reason); an event read as the daemon goes is not charged and
# runs as attempt 1 once the daemon is back; one added during the outage is
# not read until then; relay health reports the outage and the recovery;
# no container from before the restart survives.
test_dockerd_restarted_mid_invocation() {
	export LOG_LEVEL=DEBUG MAX_CONCURRENCY=4
	redis_up
	relay_env
	fd_setup
	echo_fn ft-restart ftr 30
	echo_fn ft-later ftl 0
	start_relay_as "$TMP/relay.log" ft-restart
	health_is 0 || fail "relay health failed before the outage: $(cat "$TMP/out" "$TMP/err")"
	local r1 r2 r3 r4
	r1=$(xadd ftr r1)
	r2=$(xadd ftr r2)
	wait_for 30 grep -qF ': start r1' "$TMP/relay.log" || fail "r1 did not start"
	wait_for 30 grep -qF ': start r2' "$TMP/relay.log" || fail "r2 did not start"
	local before
	before=$(fd ps -aq --no-trunc --filter label=relay.function)
	[ -n "$before" ] || fail "no container before the outage"
	# r3 comes in as the daemon goes: read before any hold, its run finds
	# the daemon gone (not an attempt) and waits for it.
	kill -TERM "$FD_PID"
	r3=$(xadd ftl r3)
	wait "$FD_PID" 2>/dev/null || true
	health_is 1 || fail "relay health succeeded while the daemon was down"
	cat "$TMP/out" "$TMP/err" | grep -qF docker || fail "relay health did not name the daemon: $(cat "$TMP/out" "$TMP/err")"
	wait_for 30 grep -qF -- "$HOLD_DOCKER" "$TMP/relay.log" || fail "no hold while the daemon was down"
	hold_settles
	r4=$(xadd ftl r4)
	lag_stays_for 4 || fail "an event was read while the daemon was down"
	sleep 6
	fd_start
	wait_for 30 grep -qF -- "$LIFT_DOCKER" "$TMP/relay.log" || fail "reading did not resume"
	health_is 0 || fail "relay health failed after the recovery: $(cat "$TMP/out" "$TMP/err")"
	wait_for 60 all_acked_up_to "$r4" || fail "not everything settled: $(pending_count) pending; $(tail -n 5 "$TMP/relay.log")"
	grep -qE 'msg="invocation not run: the Docker daemon is unreachable; it runs once the daemon answers" function=ft-later .*event_id=r3 ' "$TMP/relay.log" ||
		fail "r3 did not meet the outage: $(grep -F 'event_id=r3 ' "$TMP/relay.log")"
	handled_once r3 "$TMP/relay.log"
	handled_once r4 "$TMP/relay.log"
	local r
	for r in r1 r2; do
		[ "$(count ": handled $r\$" "$TMP/relay.log")" -eq 0 ] || fail "$r finished although its container was killed"
		rcli --raw XRANGE relay:events:dlq - + | grep -qF "\"event_id\":\"$r\"" || fail "$r is not in the DLQ"
	done
	[ "$(rcli XLEN relay:events:dlq)" = 2 ] || fail "want r1 and r2 dead-lettered, DLQ has $(rcli XLEN relay:events:dlq)"
	rcli --raw XRANGE relay:events:dlq - + | grep -qF 'ft-restart/h.handler exhausted after 1 attempt(s)' ||
		fail "DLQ reason: $(rcli --raw XRANGE relay:events:dlq - + | grep exhausted)"
	wait_for 10 no_invocation_keys || fail "invocation state left behind"
	local id
	for id in $before; do
		! fd inspect "$id" >/dev/null 2>&1 || fail "container $id from before the restart survived: $(fd ps -a)"
	done
	[ "$(grep -cF -- "$HOLD_DOCKER" "$TMP/relay.log")" -eq 1 ] || fail "the outage was logged more than once"
	stop_relay_pid "$RELAY_PID"
	wait_for 30 no_private_containers || fail "standby containers left: $(fd ps -a)"
	fd images --format '{{.Repository}}:{{.Tag}}' | grep '^relay-fn-ft-' | xargs -r docker -H "unix://$FD_SOCK" rmi -f >/dev/null 2>&1
	fd_stop
}

# The daemon frozen (SIGSTOP) until Relay has noticed (its calls to the
# daemon are bounded: one frozen call cannot stall it) and held its reading
# for 3 s with an event waiting; after SIGCONT reading resumes, and the
# event in flight and the one that waited both succeed at attempt 1.
test_dockerd_frozen_holds_reading_until_it_answers() {
	export LOG_LEVEL=DEBUG MAX_CONCURRENCY=4
	redis_up
	relay_env
	fd_setup
	echo_fn ft-hung fth 1
	start_relay_as "$TMP/relay.log" ft-hung
	local h1 h2 h3
	h1=$(xadd fth h1)
	wait_for 60 all_acked_up_to "$h1" || fail "h1 not acknowledged"
	h2=$(xadd fth h2)
	wait_for 30 grep -qF ': start h2' "$TMP/relay.log" || fail "h2 did not start"
	kill -STOP "$FD_PID"
	wait_for 30 grep -qF -- "$HOLD_DOCKER" "$TMP/relay.log" || { kill -CONT "$FD_PID"; fail "no hold while the daemon was frozen"; }
	hold_settles
	h3=$(xadd fth h3)
	lag_stays_for 3 || { kill -CONT "$FD_PID"; fail "an event was read while the daemon was frozen"; }
	kill -CONT "$FD_PID"
	wait_for 30 grep -qF -- "$LIFT_DOCKER" "$TMP/relay.log" || fail "reading did not resume"
	wait_for 60 all_acked_up_to "$h3" || fail "not everything settled: $(pending_count) pending; $(tail -n 5 "$TMP/relay.log")"
	handled_once h1 "$TMP/relay.log"
	handled_once h2 "$TMP/relay.log"
	handled_once h3 "$TMP/relay.log"
	[ "$(rcli XLEN relay:events:dlq)" = 0 ] || fail "something was dead-lettered"
	wait_for 10 no_invocation_keys || fail "invocation state left behind"
	stop_relay_pid "$RELAY_PID"
	wait_for 30 no_private_containers || fail "containers left: $(fd ps -a)"
	fd images --format '{{.Repository}}:{{.Tag}}' | grep '^relay-fn-ft-' | xargs -r docker -H "unix://$FD_SOCK" rmi -f >/dev/null 2>&1
	fd_stop
}
