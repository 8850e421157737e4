# A standby container takes exactly one event (docs/execution.md "Standby
# containers"; standby.h): through relay start with standby on, a private
# redis-server and the real Docker daemon, every event runs in a container
# of its own, whether one parked ahead of it or one made on demand, and
# none serves a second event. Told by the handler (it prints the event's
# number and its container's hostname, the container id's first 12
# characters) and by the daemon's event stream of this relay's containers
# (docker events, recorded live from before relay starts: a query of past
# events reads the daemon's ring of its last 256 events, which other tests
# overrun).
#
# Function names start with "so-"; the test removes the images it made.

so_cleanup_images() { rm_fn_images 'so-*'; }

# so_xadd N [JSON-TAIL]: XADDs event number N; prints the message id.
so_xadd() { redis-cli -p "$REDIS_PORT" XADD events '*' event "{\"fn\":\"so-once\",\"n\":$1${2:-}}"; }

so_done() { grep -qF "executed for event \"$2\"" "$1"; }

# so_parked_n N: N standby containers of this relay are running.
so_parked_n() {
	[ "$(docker ps -q --filter label=relay.standby=true --filter "label=relay.hostname=$SO_HOST" | wc -l)" -eq "$1" ]
}
so_parked_ge() {
	[ "$(docker ps -q --filter label=relay.standby=true --filter "label=relay.hostname=$SO_HOST" | wc -l)" -ge "$1" ]
}

so_metric() {
	curl -s --max-time 5 "http://$METRICS_ADDR/metrics" | awk -v n="$1" '$1 == n { print $2 }'
}

# so_served LOG: "N HOST" for every SO-SERVED line the handler printed.
so_served() {
	sed -n 's/^relay: function "so-once" handler "h.handler": SO-SERVED \([0-9]*\) \([0-9a-f]*\)$/\1 \2/p' "$1"
}

# so_destroyed ID12: the event stream has the destroy of the container.
so_destroyed() { grep -q "^destroy $1" "$TMP/events"; }

test_each_event_runs_in_a_container_of_its_own_and_none_serves_two() {
	trap 'so_rc=$?; so_cleanup_images; (exit $so_rc); it_cleanup' EXIT
	SO_HOST=so-once-host
	mkdir -p "$RELAY_FUNCTIONS_DIR/so-once"
	printf '%s\n' 'import socket, sys, time
def handler(event):
    print("SO-SERVED %d %s" % (event["n"], socket.gethostname()))
    sys.stdout.flush()
    time.sleep(float(event.get("hold", 0)))' >"$RELAY_FUNCTIONS_DIR/so-once/h.py"
	printf 'runtime: python3.14\nconcurrency: 4\nevents:\n  - handler: h.handler\n    pattern: {fn: [so-once]}\n    retries: 0\n' \
		>"$RELAY_FUNCTIONS_DIR/so-once/template.yaml"
	redis_up
	export REDIS_URI=127.0.0.1:$REDIS_PORT REDIS_STREAM=events REDIS_GROUP=relay LOG_LEVEL=DEBUG
	export METRICS_ADDR=127.0.0.1:$(free_port) MAX_CONCURRENCY=4 STANDBY_MAX=4
	# Every create, start and destroy of this relay's containers, live.
	docker events --filter type=container --filter "label=relay.hostname=$SO_HOST" \
		--filter event=create --filter event=start --filter event=destroy \
		--format '{{.Action}} {{.Actor.ID}} {{index .Actor.Attributes "relay.standby"}}' \
		>"$TMP/events" 2>"$TMP/events.err" &
	track $!
	start_relay_as "$TMP/relay.log" "$SO_HOST"

	local ids=() n=0 id unready=""
	# One event on demand makes the demand; then four one at a time, each
	# sent once a standby container is ready (so each is served by one;
	# checked after the one-container-per-event checks, which come first).
	id=$(so_xadd "$n")
	ids+=("$id")
	wait_for 60 so_done "$TMP/relay.log" "$id" || fail "event $n not done: $(tail -n 20 "$TMP/relay.log")"
	for n in 1 2 3 4; do
		# A start takes about a second; 60 s is the bound on the
		# container start (RUNNER_SETUP_TIMEOUT_MS, 30 s) twice.
		wait_for 60 so_parked_ge 1 || unready="$unready $n"
		id=$(so_xadd "$n")
		ids+=("$id")
		wait_for 60 so_done "$TMP/relay.log" "$id" || fail "event $n not done"
	done
	# Then four at once, each held 2 s so that they overlap: some in
	# standby containers, the rest on demand while the pool refills.
	for n in 5 6 7 8; do
		ids+=("$(so_xadd "$n" ',"hold":2')")
	done
	for id in "${ids[@]}"; do
		# 2 s of hold, four at once, plus a container start each: 60 s is
		# the same per-event bound as above, with room for a loaded machine.
		wait_for 60 so_done "$TMP/relay.log" "$id" || fail "event $id not done"
	done
	local dispatched
	dispatched=$(so_metric standby_dispatches_total)
	stop_relay_pid "$RELAY_PID"

	so_served "$TMP/relay.log" >"$TMP/served"
	# Each event served exactly once ...
	[ "$(cut -d' ' -f1 "$TMP/served" | sort -n | paste -sd' ')" = "0 1 2 3 4 5 6 7 8" ] ||
		fail "events served: $(cut -d' ' -f1 "$TMP/served" | sort -n | paste -sd' '), want 0 to 8 once each"
	# ... each in a container of its own: nine distinct hosts.
	[ "$(cut -d' ' -f2 "$TMP/served" | sort -u | wc -l)" -eq 9 ] ||
		fail "nine events ran in $(cut -d' ' -f2 "$TMP/served" | sort -u | wc -l) containers: $(cat "$TMP/served")"
	# Every container that served was created and started once and is
	# gone (the daemon's stream: removed after its event, or at SIGTERM
	# for the ones still parked, within the teardown bound).
	local h
	for h in $(cut -d' ' -f2 "$TMP/served"); do
		wait_for 30 so_destroyed "$h" || fail "no destroy of $h: $(cat "$TMP/events")"
		[ "$(grep -c "^create $h" "$TMP/events")" -eq 1 ] || fail "creates of $h: $(grep "$h" "$TMP/events")"
		[ "$(grep -c "^start $h" "$TMP/events")" -eq 1 ] || fail "starts of $h: $(grep "$h" "$TMP/events")"
	done
	# The premise: standby containers were there, and served at least the
	# four events sent one at a time.
	[ -z "$unready" ] || fail "no standby container was ready before event(s)$unready"
	[ -n "$dispatched" ] && [ "${dispatched%.*}" -ge 4 ] || fail "standby_dispatches_total is '$dispatched', want >= 4"
	# And every standby container this relay made served at most one
	# event: the served ones among them are distinct (above), the others
	# never printed a line; none is left.
	local made
	made=$(grep -c '^create [0-9a-f]* true$' "$TMP/events")
	[ "$made" -ge 4 ] || fail "only $made standby containers created: $(cat "$TMP/events")"
	so_parked_n 0 || fail "standby containers left after SIGTERM"
}
