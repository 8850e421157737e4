# Warm containers through relay start, a private
# redis-server and the real Docker daemon: a function with warm: serves many
# events in one container; an exception fails only its event; an exit, a
# timeout or OOM fails its event and the container is replaced; output is
# attributed to its own invocation under concurrency; a secret rotation and
# an edit retire the old containers; max_uses, idle, SIGTERM, kill -9 and the
# next start's sweep; a function without warm: still gets a container per
# event; invalid warm: values fail relay function validate.
#
# Function names start with "wm-"; each test removes the images it made.

# wm_env HOST: redis (once), the stream, DEBUG logs, a metrics port, no
# standby (so every container of a test is a warm one or an on-demand one).
wm_env() {
	WM_HOST=$1
	if [ -z "${REDIS_PORT:-}" ]; then
		redis_up
	fi
	export REDIS_URI=127.0.0.1:$REDIS_PORT REDIS_STREAM=events REDIS_GROUP=relay LOG_LEVEL=DEBUG
	export METRICS_ADDR=127.0.0.1:$(free_port) STANDBY_MAX=0
}

# wm_start LOG: relay start as $WM_HOST; the first call of a test also
# records, live, every container the daemon creates for that host (a query
# of past events afterwards would read the daemon's ring of its latest 256
# events, which the suite's other lanes overwrite).
wm_start() {
	if [ -z "${WM_REC:-}" ]; then
		WM_REC=$TMP/creates
		docker events --filter type=container --filter event=create \
			--filter "label=relay.hostname=$WM_HOST" \
			--format '{{index .Actor.Attributes "relay.function"}} {{.Actor.ID}}' \
			>"$WM_REC" 2>"$WM_REC.err" &
		track $!
	fi
	start_relay_as "$1" "$WM_HOST"
}

# wm_fn NAME PY [TOP-TAIL] [RULE-TAIL]: a python function, module h.py, rule
# h.handler matching {"fn": [NAME]}, retries 0; TOP-TAIL (e.g. a warm: block)
# goes before events.
wm_fn() {
	mkdir -p "$RELAY_FUNCTIONS_DIR/$1"
	printf '%s\n' "$2" >"$RELAY_FUNCTIONS_DIR/$1/h.py"
	printf 'runtime: python3.14\n%sevents:\n  - handler: h.handler\n    pattern: {fn: [%s]}\n    retries: 0\n%s' \
		"${3:-}" "$1" "${4:-}" >"$RELAY_FUNCTIONS_DIR/$1/template.yaml"
}

# wm_node_fn NAME JS [TOP-TAIL]: the same for node24 (module h.mjs).
wm_node_fn() {
	mkdir -p "$RELAY_FUNCTIONS_DIR/$1"
	printf '%s\n' "$2" >"$RELAY_FUNCTIONS_DIR/$1/h.mjs"
	printf 'runtime: node24\n%sevents:\n  - handler: h.handler\n    pattern: {fn: [%s]}\n    retries: 0\n' \
		"${3:-}" "$1" >"$RELAY_FUNCTIONS_DIR/$1/template.yaml"
}

WM_PY='import os, socket, sys, time
def handler(event):
    print("WM-HOST " + socket.gethostname() + " " + event.get("tag", ""))
    sys.stdout.flush()
    if event.get("boom"):
        raise ValueError("boom " + event["boom"])
    if event.get("exit"):
        sys.exit(int(event["exit"]))
    if event.get("sleep"):
        time.sleep(float(event["sleep"]))
    if event.get("oom"):
        blocks = []
        for _ in range(64):
            blocks.append(bytearray(16 * 1024 * 1024))
    print("WM-END " + event.get("tag", ""))'

wm_cleanup_images() { rm_fn_images 'wm-*'; }

wm_xadd() { redis-cli -p "$REDIS_PORT" XADD events '*' event "{\"fn\":\"$1\"${2:-}}"; }

wm_done() { grep -qF "executed for event \"$2\"" "$1"; }
wm_failed() { grep -qF "execution failed for event \"$2\"" "$1"; }
wm_wait_done() { # LOG ID
	wait_for 90 wm_done "$1" "$2" || fail "no success for $2: $(grep -v 'docker request' "$1" | tail -n 20)"
}
wm_wait_failed() { # LOG ID
	wait_for 90 wm_failed "$1" "$2" || fail "no failure for $2: $(grep -v 'docker request' "$1" | tail -n 20)"
}
# wm_failure LOG ID: the failure line of message ID.
wm_failure() { grep -F "execution failed for event \"$2\"" "$1"; }

# wm_host LOG TAG: the container id printed by the handler for the event
# tagged TAG.
wm_host() { sed -n "s/.*: WM-HOST \([0-9a-f]*\) $2\$/\1/p" "$1" | head -n 1; }

# wm_warm [FN]: ids of running warm containers of this relay (of FN).
wm_warm() {
	local f=(--filter label=relay.warm=true --filter "label=relay.hostname=$WM_HOST")
	[ -z "${1:-}" ] || f+=(--filter "label=relay.function=$1")
	docker ps -q --no-trunc "${f[@]}"
}
wm_warm_n() { [ "$(wm_warm "${2:-}" | wc -l)" -eq "$1" ]; }
wm_alive() { docker ps -aq --filter "label=relay.hostname=$WM_HOST" | wc -l; }

# wm_creates FN: containers the daemon created for FN since the test's
# first wm_start (the live record).
wm_creates() { awk -v f="$1" '$1 == f' "$WM_REC" | wc -l; }

# wm_started FN: distinct containers of FN the DEBUG log says were started.
wm_started() {
	grep "msg=\"warm container started\" function=$1 " "$TMP/relay.log" |
		sed 's/.* container=\([0-9a-f]*\).*/\1/' | sort -u | wc -l
}

wm_metric() {
	curl -s --max-time 5 "http://$METRICS_ADDR/metrics" | awk -v n="$1" '$1 == n { print $2 }'
}
wm_metric_ge() { local v; v=$(wm_metric "$1"); [ -n "$v" ] && [ "${v%.*}" -ge "$2" ]; }

wm_trap() { trap 'wm_rc=$?; wm_cleanup_images; (exit $wm_rc); it_cleanup' EXIT; }

# wm_reuse NAME: 5 events one after the other run in one container, made
# once.
wm_reuse() {
	local fn=$1 id i first h
	for i in 1 2 3 4 5; do
		id=$(wm_xadd "$fn" ",\"tag\":\"r$i\"")
		wm_wait_done "$TMP/relay.log" "$id"
	done
	first=$(wm_host "$TMP/relay.log" r1)
	[ -n "$first" ] || fail "no WM-HOST line: $(grep WM- "$TMP/relay.log")"
	for i in 2 3 4 5; do
		h=$(wm_host "$TMP/relay.log" "r$i")
		[ "$h" = "$first" ] || fail "event r$i ran in $h, not in $first"
	done
	[ "$(wm_creates "$fn")" -eq 1 ] || fail "$(wm_creates "$fn") containers created, want 1"
	[ "$(wm_started "$fn")" -eq 1 ] ||
		fail "started lines: $(grep 'warm container started' "$TMP/relay.log")"
	wm_warm_n 1 "$fn" || fail "not one running warm container: $(wm_warm "$fn")"
	[ "$(wm_warm "$fn" | cut -c1-12)" = "$first" ] || fail "the running warm container is not $first"
	wm_metric_ge warm_invocations_total 5 || fail "warm_invocations_total $(wm_metric warm_invocations_total)"
	[ "$(wm_metric "warm_containers{function=\"$fn\"}")" = 1 ] ||
		fail "warm_containers $(wm_metric "warm_containers{function=\"$fn\"}")"
}

test_python_events_reuse_one_container() {
	wm_trap
	wm_fn wm-py "$WM_PY" 'warm: {}
'
	wm_env wm-py-host
	wm_start "$TMP/relay.log"
	wm_reuse wm-py
	# Each event's own output: r3's lines follow its matched line.
	grep -q 'WM-END r3$' "$TMP/relay.log" || fail "no WM-END r3"
	stop_relay_pid "$RELAY_PID"
	[ "$(wm_alive)" -eq 0 ] || fail "containers left after SIGTERM"
}

test_node_events_reuse_one_container() {
	wm_trap
	wm_node_fn wm-node 'import os from "node:os";
export function handler(event) {
  console.log("WM-HOST " + os.hostname() + " " + (event.tag || ""));
}' 'warm: {}
'
	wm_env wm-node-host
	wm_start "$TMP/relay.log"
	wm_reuse wm-node
	stop_relay_pid "$RELAY_PID"
	[ "$(wm_alive)" -eq 0 ] || fail "containers left after SIGTERM"
}

test_exception_fails_only_its_event_and_the_container_stays() {
	wm_trap
	wm_fn wm-exc "$WM_PY" 'warm: {}
'
	wm_env wm-exc-host
	wm_start "$TMP/relay.log"
	local a b c
	a=$(wm_xadd wm-exc ',"tag":"e1"')
	wm_wait_done "$TMP/relay.log" "$a"
	b=$(wm_xadd wm-exc ',"tag":"e2","boom":"x1"')
	wm_wait_failed "$TMP/relay.log" "$b"
	wm_failure "$TMP/relay.log" "$b" | grep -qF 'ValueError: boom x1' || fail "failure line: $(wm_failure "$TMP/relay.log" "$b")"
	c=$(wm_xadd wm-exc ',"tag":"e3"')
	wm_wait_done "$TMP/relay.log" "$c"
	[ "$(wm_host "$TMP/relay.log" e1)" = "$(wm_host "$TMP/relay.log" e3)" ] &&
		[ "$(wm_host "$TMP/relay.log" e2)" = "$(wm_host "$TMP/relay.log" e3)" ] ||
		fail "not one container: $(grep WM-HOST "$TMP/relay.log")"
	# The exception's event went to the dead-letter stream (retries: 0).
	wait_for 10 sh -c "redis-cli -p $REDIS_PORT XLEN relay:events:dlq | grep -qx 1" || fail "DLQ: $(redis-cli -p "$REDIS_PORT" XLEN relay:events:dlq)"
}

test_exit_fails_its_event_and_the_container_is_replaced() {
	wm_trap
	wm_fn wm-exit "$WM_PY" 'warm: {}
'
	wm_node_fn wm-nexit 'import os from "node:os";
export function handler(event) {
  console.log("WM-HOST " + os.hostname() + " " + (event.tag || ""));
  if (event.exit) process.exit(Number(event.exit));
}' 'warm: {}
'
	wm_env wm-exit-host
	wm_start "$TMP/relay.log"
	local fn a b c
	for fn in wm-exit wm-nexit; do
		a=$(wm_xadd $fn ",\"tag\":\"$fn-1\"")
		wm_wait_done "$TMP/relay.log" "$a"
		b=$(wm_xadd $fn ",\"tag\":\"$fn-2\",\"exit\":\"3\"")
		wm_wait_failed "$TMP/relay.log" "$b"
		wm_failure "$TMP/relay.log" "$b" | grep -qF 'exit status 3' || fail "failure line: $(wm_failure "$TMP/relay.log" "$b")"
		c=$(wm_xadd $fn ",\"tag\":\"$fn-3\"")
		wm_wait_done "$TMP/relay.log" "$c"
		[ "$(wm_host "$TMP/relay.log" $fn-1)" = "$(wm_host "$TMP/relay.log" $fn-2)" ] || fail "$fn: 2 did not run in 1's container"
		[ "$(wm_host "$TMP/relay.log" $fn-2)" != "$(wm_host "$TMP/relay.log" $fn-3)" ] || fail "$fn: the exited container served again"
	done
	wm_metric_ge 'warm_retired_total{reason="exited"}' 2 || fail "exited: $(wm_metric 'warm_retired_total{reason="exited"}')"
}

test_timeout_fails_its_event_and_the_container_is_replaced() {
	wm_trap
	wm_fn wm-to "$WM_PY" 'warm: {}
' '    timeout: 2s
'
	wm_env wm-to-host
	wm_start "$TMP/relay.log"
	local a b c
	a=$(wm_xadd wm-to ',"tag":"t1"')
	wm_wait_done "$TMP/relay.log" "$a"
	b=$(wm_xadd wm-to ',"tag":"t2","sleep":"30"')
	wm_wait_failed "$TMP/relay.log" "$b"
	wm_failure "$TMP/relay.log" "$b" | grep -qi 'timed out\|timeout' || fail "failure line: $(wm_failure "$TMP/relay.log" "$b")"
	c=$(wm_xadd wm-to ',"tag":"t3"')
	wm_wait_done "$TMP/relay.log" "$c"
	[ "$(wm_host "$TMP/relay.log" t1)" = "$(wm_host "$TMP/relay.log" t2)" ] || fail "t2 did not run in t1's container"
	[ "$(wm_host "$TMP/relay.log" t2)" != "$(wm_host "$TMP/relay.log" t3)" ] || fail "the timed-out container served again"
	wm_metric_ge 'warm_retired_total{reason="timeout"}' 1 || fail "timeout: $(wm_metric 'warm_retired_total{reason="timeout"}')"
}

test_oom_fails_its_event_and_the_container_is_replaced() {
	wm_trap
	wm_fn wm-oom "$WM_PY" 'warm: {}
' '    timeout: 30s
'
	wm_env wm-oom-host
	wm_start "$TMP/relay.log"
	local a b c
	a=$(wm_xadd wm-oom ',"tag":"o1"')
	wm_wait_done "$TMP/relay.log" "$a"
	b=$(wm_xadd wm-oom ',"tag":"o2","oom":1')
	wm_wait_failed "$TMP/relay.log" "$b"
	wm_failure "$TMP/relay.log" "$b" | grep -qF 'out of memory' || fail "failure line: $(wm_failure "$TMP/relay.log" "$b")"
	c=$(wm_xadd wm-oom ',"tag":"o3"')
	wm_wait_done "$TMP/relay.log" "$c"
	[ "$(wm_host "$TMP/relay.log" o2)" != "$(wm_host "$TMP/relay.log" o3)" ] || fail "the OOM-killed container served again"
}

test_output_is_attributed_to_its_own_invocation_under_concurrency() {
	wm_trap
	wm_fn wm-out 'import sys, time
def handler(event):
    for i in range(5):
        print("WM-LINE " + event["tag"] + " " + str(i))
        sys.stdout.flush()
        print("WM-ERR " + event["tag"] + " " + str(i), file=sys.stderr)
        sys.stderr.flush()
        time.sleep(0.2)' 'warm: {}
concurrency: 2
'
	wm_env wm-out-host
	wm_start "$TMP/relay.log"
	local w a b tag id
	w=$(wm_xadd wm-out ',"tag":"w0"')
	wm_wait_done "$TMP/relay.log" "$w"
	a=$(wm_xadd wm-out ',"tag":"A"')
	b=$(wm_xadd wm-out ',"tag":"B"')
	wm_wait_done "$TMP/relay.log" "$a"
	wm_wait_done "$TMP/relay.log" "$b"
	# Every line of each invocation comes after its matched line and before
	# its executed line, none lost, none twice.
	for tag in A B; do
		[ $tag = A ] && id=$a || id=$b
		awk -v m="matched event \"$id\"" -v e="executed for event \"$id\"" -v t="$tag" '
			index($0, m) { on = 1 }
			index($0, e) { done = 1 }
			$0 ~ ": WM-(LINE|ERR) " t " [0-4]$" { if (!on || done) bad++; else n++ }
			END { exit !(n == 10 && !bad) }' "$TMP/relay.log" ||
			fail "$tag's lines are not inside its invocation: $(grep -E "WM-|$id" "$TMP/relay.log")"
	done
	# The two ran at once (each in a warm container of its own).
	[ "$(wm_started wm-out)" -le 2 ] ||
		fail "more than 2 warm containers for concurrency 2"
}

test_secret_rotation_retires_the_container() {
	wm_trap
	relay_secret_set wm-token first
	wm_fn wm-sec 'import os, socket
def handler(event):
    print("WM-HOST " + socket.gethostname() + " " + event["tag"])
    print("token=" + os.environ["TOKEN"])' 'warm: {}
secrets:
  TOKEN: wm-token
'
	wm_env wm-sec-host
	wm_start "$TMP/relay.log"
	local a b old
	a=$(wm_xadd wm-sec ',"tag":"s1"')
	wm_wait_done "$TMP/relay.log" "$a"
	old=$(wm_warm wm-sec)
	[ -n "$old" ] || fail "no warm container"
	relay_secret_set wm-token second
	b=$(wm_xadd wm-sec ',"tag":"s2"')
	wm_wait_done "$TMP/relay.log" "$b"
	awk -v m="matched event \"$b\"" 'index($0, m) { on = 1 } on && /: token=/ { print; exit }' "$TMP/relay.log" |
		grep -q ': token=second$' || fail "after the rotation: $(grep token= "$TMP/relay.log")"
	[ "$(wm_host "$TMP/relay.log" s2)" != "${old:0:12}" ] || fail "ran in the old container"
	gone() { ! docker ps -q --no-trunc | grep -qx "$old"; }
	wait_for 10 gone || fail "the old container $old is still running"
	wm_metric_ge 'warm_retired_total{reason="secret"}' 1 || fail "no secret retirement"
}

test_template_change_retires_the_container() {
	wm_trap
	wm_fn wm-ver 'import socket
def handler(event):
    print("WM-HOST " + socket.gethostname() + " " + event["tag"])
    print("code=V1")' 'warm: {}
'
	wm_env wm-ver-host
	wm_start "$TMP/relay.log"
	local a b old
	a=$(wm_xadd wm-ver ',"tag":"v1"')
	wm_wait_done "$TMP/relay.log" "$a"
	old=$(wm_warm wm-ver)
	[ -n "$old" ] || fail "no warm container"
	sed -i 's/^warm: {}$/warm: {idle: 120s}/' "$RELAY_FUNCTIONS_DIR/wm-ver/template.yaml"
	sed -i 's/V1/V2/' "$RELAY_FUNCTIONS_DIR/wm-ver/h.py"
	wait_for 120 grep -q 'msg="function updated" function=wm-ver' "$TMP/relay.log" ||
		fail "the edit was not picked up: $(tail -n 20 "$TMP/relay.log")"
	# None stays behind after the reload, even with no event.
	gone() { ! docker ps -q --no-trunc | grep -qx "$old"; }
	wait_for 15 gone || fail "the old version's container $old is still running"
	wm_metric_ge 'warm_retired_total{reason="version"}' 1 || fail "no version retirement"
	b=$(wm_xadd wm-ver ',"tag":"v2"')
	wm_wait_done "$TMP/relay.log" "$b"
	awk -v m="matched event \"$b\"" 'index($0, m) { on = 1 } on && /: code=/ { print; exit }' "$TMP/relay.log" |
		grep -q ': code=V2$' || fail "after the edit: $(grep code= "$TMP/relay.log")"
}

test_max_uses_retires_after_that_many_invocations() {
	wm_trap
	wm_fn wm-max "$WM_PY" 'warm:
  max_uses: 2
'
	wm_env wm-max-host
	wm_start "$TMP/relay.log"
	local i id hosts
	for i in 1 2 3 4 5; do
		id=$(wm_xadd wm-max ",\"tag\":\"m$i\"")
		wm_wait_done "$TMP/relay.log" "$id"
	done
	hosts=$(for i in 1 2 3 4 5; do wm_host "$TMP/relay.log" "m$i"; done)
	[ "$(echo "$hosts" | sort -u | wc -l)" -eq 3 ] || fail "containers: $hosts"
	[ "$(echo "$hosts" | sed -n 1p)" = "$(echo "$hosts" | sed -n 2p)" ] &&
		[ "$(echo "$hosts" | sed -n 3p)" = "$(echo "$hosts" | sed -n 4p)" ] || fail "not 2 uses each: $hosts"
	[ "$(wm_creates wm-max)" -eq 3 ] || fail "$(wm_creates wm-max) created, want 3"
	wm_metric_ge 'warm_retired_total{reason="max_uses"}' 2 || fail "max_uses: $(wm_metric 'warm_retired_total{reason="max_uses"}')"
}

test_idle_retires_the_container() {
	wm_trap
	wm_fn wm-idle "$WM_PY" 'warm:
  idle: 1s
'
	wm_env wm-idle-host
	wm_start "$TMP/relay.log"
	local id
	id=$(wm_xadd wm-idle ',"tag":"i1"')
	wm_wait_done "$TMP/relay.log" "$id"
	wait_for 15 wm_warm_n 0 wm-idle || fail "still running after idle: $(wm_warm wm-idle)"
	grep -q 'msg="warm container retired" function=wm-idle .*reason=idle' "$TMP/relay.log" ||
		fail "no idle retirement line: $(grep 'warm container' "$TMP/relay.log")"
	wm_metric_ge 'warm_retired_total{reason="idle"}' 1 || fail "no idle retirement"
	[ "$(wm_metric 'warm_containers{function="wm-idle"}')" = 0 ] || fail "gauge not 0"
}

test_an_idle_container_is_held_to_the_parked_cpu_bound() {
	wm_trap
	wm_fn wm-cpu "$WM_PY" 'warm: {}
'
	wm_env wm-cpu-host
	wm_start "$TMP/relay.log"
	local id c
	id=$(wm_xadd wm-cpu ',"tag":"c1"')
	wm_wait_done "$TMP/relay.log" "$id"
	c=$(wm_warm wm-cpu)
	bounded() { [ "$(docker inspect -f '{{.HostConfig.NanoCpus}}' "$c")" = 50000000 ]; }
	wait_for 15 bounded || fail "idle at NanoCpus $(docker inspect -f '{{.HostConfig.NanoCpus}}' "$c")"
	# The next invocation still runs in it (the invoke lifts the bound).
	id=$(wm_xadd wm-cpu ',"tag":"c2"')
	wm_wait_done "$TMP/relay.log" "$id"
	[ "$(wm_host "$TMP/relay.log" c2)" = "${c:0:12}" ] || fail "c2 did not run in the bounded container"
}

test_shutdown_removes_every_warm_container() {
	wm_trap
	wm_fn wm-stop "$WM_PY" 'warm: {}
concurrency: 2
'
	wm_env wm-stop-host
	wm_start "$TMP/relay.log"
	local a b
	a=$(wm_xadd wm-stop ',"tag":"x1","sleep":"2"')
	b=$(wm_xadd wm-stop ',"tag":"x2","sleep":"2"')
	wm_wait_done "$TMP/relay.log" "$a"
	wm_wait_done "$TMP/relay.log" "$b"
	wm_warm_n 2 wm-stop || fail "want 2 warm containers: $(wm_warm wm-stop)"
	stop_relay_pid "$RELAY_PID"
	[ "$(wm_alive)" -eq 0 ] || fail "containers left after SIGTERM: $(docker ps -a --filter "label=relay.hostname=$WM_HOST")"
	[ "$(grep -c 'msg="warm container retired" function=wm-stop .*reason=shutdown' "$TMP/relay.log")" -eq 2 ] ||
		fail "shutdown lines: $(grep 'warm container retired' "$TMP/relay.log")"
}

test_kill9_then_the_next_start_sweeps_them() {
	wm_trap
	wm_fn wm-k9 "$WM_PY" 'warm: {}
'
	wm_env wm-k9-host
	wm_start "$TMP/a.log"
	local id c
	id=$(wm_xadd wm-k9 ',"tag":"k1"')
	wm_wait_done "$TMP/a.log" "$id"
	c=$(wm_warm wm-k9)
	[ -n "$c" ] || fail "no warm container"
	# One that cannot notice its lost attach (paused) outlives the relay ...
	docker pause "$c" >/dev/null || fail "docker pause"
	kill9_relay_pid "$RELAY_PID"
	sleep 2
	docker ps -aq --no-trunc | grep -qx "$c" || fail "the paused container is gone (test is void)"
	# ... until the next start's orphan sweep.
	wm_start "$TMP/b.log"
	grep -q "msg=\"removed orphaned execution container\" container=$c" "$TMP/b.log" ||
		fail "the sweep did not remove $c: $(grep -i orphan "$TMP/b.log")"
	gone() { ! docker ps -aq --no-trunc | grep -qx "$c"; }
	wait_for 10 gone || fail "$c still there"
	stop_relay_pid "$RELAY_PID"
}

test_a_function_without_warm_gets_one_container_per_event() {
	wm_trap
	wm_fn wm-cold "$WM_PY"
	wm_env wm-cold-host
	wm_start "$TMP/relay.log"
	local i id
	for i in 1 2 3; do
		id=$(wm_xadd wm-cold ",\"tag\":\"f$i\"")
		wm_wait_done "$TMP/relay.log" "$id"
	done
	[ "$(for i in 1 2 3; do wm_host "$TMP/relay.log" "f$i"; done | sort -u | wc -l)" -eq 3 ] ||
		fail "not 3 containers: $(grep WM-HOST "$TMP/relay.log")"
	[ "$(wm_creates wm-cold)" -eq 3 ] || fail "$(wm_creates wm-cold) created, want 3"
	! grep -q 'warm container' "$TMP/relay.log" || fail "a warm container: $(grep 'warm container' "$TMP/relay.log")"
	[ "$(wm_metric warm_invocations_total)" = 0 ] || fail "warm_invocations_total $(wm_metric warm_invocations_total)"
}

test_invalid_warm_values_fail_validate() {
	local d=$TMP/v
	mkdir -p "$d/wm-bad"
	printf 'def handler(event):\n    pass\n' >"$d/wm-bad/h.py"
	printf 'runtime: python3.14\nwarm:\n  idle: 500ms\n  max_uses: 0\n  idel: 5s\nevents:\n  - handler: h.handler\n    pattern: {}\n' \
		>"$d/wm-bad/template.yaml"
	run "$RELAY" function validate "$d"
	assert_status 1
	assert_out_contains 'warm: unknown key "idel" (warm takes idle and max_uses)'
	assert_out_contains 'warm.idle: "500ms" is below the minimum of 1s'
	assert_out_contains 'warm.max_uses: 0 is not positive; must be an integer from 1 to 100000'
	printf 'runtime: python3.14\nwarm: true\nevents:\n  - handler: h.handler\n    pattern: {}\n' >"$d/wm-bad/template.yaml"
	run "$RELAY" function validate "$d"
	assert_status 1
	assert_out_contains 'warm: must be a map of idle and max_uses (warm: {} for the defaults), not a boolean'
	printf 'runtime: python3.14\nwarm: {idle: 1h, max_uses: 100000}\nevents:\n  - handler: h.handler\n    pattern: {}\n' >"$d/wm-bad/template.yaml"
	run "$RELAY" function validate "$d"
	assert_status 0
	assert_out_eq "wm-bad: ok"
}

test_function_inspect_shows_warm_containers() {
	wm_trap
	wm_fn wm-insp "$WM_PY" 'warm: {}
concurrency: 2
'
	wm_env wm-insp-host
	wm_start "$TMP/relay.log"
	local a b
	a=$(wm_xadd wm-insp ',"tag":"n1","sleep":"2"')
	b=$(wm_xadd wm-insp ',"tag":"n2","sleep":"2"')
	wm_wait_done "$TMP/relay.log" "$a"
	wm_wait_done "$TMP/relay.log" "$b"
	wm_warm_n 2 wm-insp || fail "want 2 warm containers: $(wm_warm wm-insp)"
	run "$RELAY" function inspect wm-insp
	assert_status 0
	grep -qxF 'Warm:' "$TMP/out" && grep -qxF '  h.handler   2' "$TMP/out" || fail "inspect: $(cat "$TMP/out")"
	run "$RELAY" function inspect wm-insp --json
	assert_status 0
	jq -e '.warm == [{"handler": "h.handler", "containers": 2}]' "$TMP/out" >/dev/null || fail "--json: $(cat "$TMP/out")"
	stop_relay_pid "$RELAY_PID"
	# None left: no Warm section, the output is as without warm.
	run "$RELAY" function inspect wm-insp
	assert_status 0
	assert_out_lacks 'Warm:'
	run "$RELAY" function inspect wm-insp --json
	jq -e 'has("warm") | not' "$TMP/out" >/dev/null || fail "--json after stop: $(cat "$TMP/out")"
}
