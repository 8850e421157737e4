# Two Relay processes on one host against a private
# redis-server and the real Docker daemon. The consumer name is the hostname;
# each test gives its relays a hostname of its own (start_relay_as), so the
# sweeps here never meet another test's containers.
#
# - a second `relay start` under the same hostname while the first is alive
#   exits 1 with one ERROR line naming the holder, before any sweep: the
#   first one's running handler completes and is acknowledged;
# - after kill -9 of the first, the second waits for the record to expire
#   (it is no longer renewed), takes the name and sweeps the dead process's
#   still-running container;
# - a running relay whose record vanishes takes it again; one that finds its
#   record held by another instance stops (orderly) and exits 1;
# - relays of two groups may share a hostname: neither sweeps the other's
#   containers.
# Function names start with "tw-"; each test removes the images it made.

TW_TTL=15 # LIVENESS_TTL_MS / 1000 (src/engine/liveness.h)

tw_fn() { # name, handler body
	mkdir -p "$RELAY_FUNCTIONS_DIR/$1"
	printf '%s\n' "$2" >"$RELAY_FUNCTIONS_DIR/$1/h.py"
	printf 'runtime: python3.14\nevents:\n  - handler: h.handler\n    pattern: {fn: [%s]}\n    timeout: 2m\n' \
		"$1" >"$RELAY_FUNCTIONS_DIR/$1/template.yaml"
}
TW_SLOW='import time
def handler(event):
    print("start", event["n"], flush=True)
    time.sleep(event["sleep"])
    print("finished", event["n"], flush=True)'

# No standby pool: the only container is the invocation's (standby
# containers carry relay.instance too, tests/it/standby.sh).
tw_env() { export REDIS_URI=127.0.0.1:$REDIS_PORT REDIS_STREAM=events REDIS_GROUP=relay STANDBY_MAX=0; }
tw_key() { echo "relay:consumer:events:relay:$1"; }
# tw_xadd FN N SLEEP: the new entry's id.
tw_xadd() { rcli XADD events '*' event "{\"fn\":\"$1\",\"n\":\"$2\",\"sleep\":$3}"; }
# tw_field VALUE NAME: one field of a liveness record value.
tw_field() { tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p"; }
# tw_instance LOG: the instance id the relay logged when it took its name.
tw_instance() { sed -n 's/.*msg="liveness record of this consumer name taken" .*instance=\([0-9a-f]*\).*/\1/p' "$1"; }
tw_containers() { docker ps -aq --no-trunc --filter "label=relay.function=$1"; }
tw_running() { [ "$(docker inspect -f '{{.State.Running}}' "$1" 2>/dev/null)" = true ]; }
tw_gone() { ! docker ps -aq --no-trunc | grep -qx "$1"; }
# log_has_line LINE FILE: FILE has exactly LINE after its time= field.
log_has_line() { sed 's/^time=[^ ]* //' "$2" | grep -qxF -- "$1"; }
tw_value_is() { [ "$(rcli GET "$1")" = "$2" ]; }
tw_pending() { rcli XPENDING events relay | head -n1; }
tw_refusal() { # HOST PID VALUE: the exact refusal line, without time=
	printf '%s' "level=ERROR msg=\"another live Relay process consumes under this consumer name; to run several workers on one host give each its own hostname (its own container, or unshare --uts)\" consumer=$1 stream=events group=relay holder_pid=$2 holder_started=$(tw_field "$3" started) holder_machine=$(tw_field "$3" machine) key=$(tw_key "$1")"
}
tw_cleanup_images() { rm_fn_images tw-live tw-dead tw-lost tw-groups; }

test_a_second_relay_under_the_same_hostname_refuses_and_the_first_completes() {
	trap 'tw_rc=$?; tw_cleanup_images; (exit $tw_rc); it_cleanup' EXIT
	redis_up
	tw_env
	tw_fn tw-live "$TW_SLOW"
	start_relay_as "$TMP/a.log" tw-live-host
	local pid_a=$RELAY_PID inst_a value id cid t0 t1
	inst_a=$(tw_instance "$TMP/a.log")
	[ "${#inst_a}" -eq 32 ] || fail "no instance id in the start log: $(grep liveness "$TMP/a.log")"
	value=$(rcli GET "$(tw_key tw-live-host)")
	[ "$(tw_field "$value" instance)" = "$inst_a" ] && [ "$(tw_field "$value" pid)" = "$pid_a" ] ||
		fail "the record is not A's: $value"
	id=$(tw_xadd tw-live e1 6)
	wait_for 60 grep -q ': start e1$' "$TMP/a.log" || fail "A never started the handler: $(tail -n 20 "$TMP/a.log")"
	cid=$(tw_containers tw-live)
	[ -n "$cid" ] && tw_running "$cid" || fail "no running container for A's handler"
	[ "$(docker inspect -f '{{index .Config.Labels "relay.instance"}} {{index .Config.Labels "relay.stream"}} {{index .Config.Labels "relay.group"}}' "$cid")" = "$inst_a events relay" ] ||
		fail "the container does not carry A's instance: $(docker inspect -f '{{json .Config.Labels}}' "$cid")"

	# B, same hostname, while A runs the handler.
	t0=$(date +%s)
	# (bounded: a B that does not refuse would consume until stopped)
	run timeout -s TERM 30 unshare --uts sh -c "hostname tw-live-host && exec '$RELAY' start"
	t1=$(date +%s)
	assert_status 1
	log_has_line "$(tw_refusal tw-live-host "$pid_a" "$value")" "$TMP/err" ||
		fail "no exact refusal line; stderr: $(cat "$TMP/err")"
	[ "$(grep -c 'level=ERROR' "$TMP/err")" -eq 1 ] || fail "more than one ERROR line: $(grep ERROR "$TMP/err")"
	! grep -qE 'orphan|level=WARN|worker started' "$TMP/err" || fail "B went further than refusing: $(cat "$TMP/err")"
	# Less than a TTL: a B that waited for the record to expire even once
	# would take at least TW_TTL (A renews it meanwhile, so B would then
	# wait on until its timeout, status 124).
	[ $((t1 - t0)) -lt "$TW_TTL" ] || fail "B took $((t1 - t0)) s to refuse"
	tw_running "$cid" || fail "A's container is not running after B refused"

	# A's handler completes and is acknowledged; A still holds the name.
	wait_for 30 grep -q ': finished e1$' "$TMP/a.log" || fail "A's handler did not finish: $(tail -n 20 "$TMP/a.log")"
	wait_for 10 acked_through "$REDIS_PORT" events relay "$id" || fail "not acknowledged: pending $(tw_pending)"
	grep -qxF "relay: function \"tw-live\" handler \"h.handler\" executed for event \"$id\"" "$TMP/a.log" ||
		fail "no success line for $id"
	[ "$(rcli GET "$(tw_key tw-live-host)")" = "$value" ] || fail "the record changed"

	# A graceful stop deletes the record: the next start takes the name at once.
	stop_relay_pid "$pid_a"
	[ "$(rcli EXISTS "$(tw_key tw-live-host)")" = 0 ] || fail "the record outlived SIGTERM"
	t0=$(date +%s)
	start_relay_as "$TMP/c.log" tw-live-host
	# Less than a TTL: waiting for the record to expire would take TW_TTL.
	[ $(($(date +%s) - t0)) -lt "$TW_TTL" ] || fail "the restart waited"
	! grep -q 'waiting for the record to expire' "$TMP/c.log" || fail "the restart waited for a deleted record"
	stop_relay_pid "$RELAY_PID"
}

test_a_killed_relay_s_name_is_taken_over_and_its_running_container_swept() {
	trap 'tw_rc=$?; tw_cleanup_images; (exit $tw_rc); it_cleanup' EXIT
	redis_up
	tw_env
	tw_fn tw-dead "$TW_SLOW"
	start_relay_as "$TMP/a.log" tw-dead-host
	local pid_a=$RELAY_PID inst_a inst_b id cid t0 t1 value
	inst_a=$(tw_instance "$TMP/a.log")
	# Long enough to outlive the takeover: only the sweep can end it.
	id=$(tw_xadd tw-dead e2 100)
	wait_for 60 grep -q ': start e2$' "$TMP/a.log" || fail "A never started the handler: $(tail -n 20 "$TMP/a.log")"
	cid=$(tw_containers tw-dead)
	[ -n "$cid" ] || fail "no container for A's handler"
	kill9_relay_pid "$pid_a"
	t0=$(date +%s)
	tw_running "$cid" || fail "the container did not outlive kill -9 of A (test is void)"

	start_relay_as "$TMP/b.log" tw-dead-host
	t1=$(date +%s)
	inst_b=$(tw_instance "$TMP/b.log")
	[ -n "$inst_b" ] && [ "$inst_b" != "$inst_a" ] || fail "B's instance $inst_b (A's $inst_a)"
	# Within one TTL of the kill (plus B's own start-up).
	[ $((t1 - t0)) -le $((TW_TTL + 10)) ] || fail "B took $((t1 - t0)) s to take over"
	[ "$(grep -c 'waiting for the record to expire' "$TMP/b.log")" -eq 1 ] ||
		fail "not one 'waiting' line: $(grep liveness "$TMP/b.log")"
	grep -qE "level=WARN msg=\"the process holding this consumer name does not renew its liveness record; waiting for the record to expire\" consumer=tw-dead-host holder_pid=$pid_a " "$TMP/b.log" ||
		fail "the waiting line does not name A: $(grep -F 'waiting for' "$TMP/b.log")"
	grep -qF 'level=INFO msg="the previous holder of this consumer name is gone; liveness record taken" consumer=tw-dead-host' "$TMP/b.log" ||
		fail "no takeover line"
	value=$(rcli GET "$(tw_key tw-dead-host)")
	[ "$(tw_field "$value" instance)" = "$inst_b" ] && [ "$(tw_field "$value" pid)" = "$RELAY_PID" ] ||
		fail "the record is not B's: $value"
	# The sweep ran after the takeover and removed A's running container.
	log_has_line "level=INFO msg=\"removed orphaned execution container\" container=$cid function=tw-dead instance=$inst_a" "$TMP/b.log" ||
		fail "B did not sweep $cid: $(grep -i orphan "$TMP/b.log")"
	[ "$(grep -n -m1 'liveness record of this consumer name taken' "$TMP/b.log" | cut -d: -f1)" -lt \
		"$(grep -n -m1 'removed orphaned' "$TMP/b.log" | cut -d: -f1)" ] ||
		fail "the sweep ran before the record was taken"
	wait_for 10 tw_gone "$cid" || fail "$cid is still there"
	# The message stays pending under the consumer name, now B's; B's
	# reclaim (every 1m, idle over 1m) runs it again once A's running
	# marker has expired, as tests/it/delivery.sh shows for a restart.
	[ "$(tw_pending)" = 1 ] || fail "pending $(tw_pending), want 1"
	rcli XPENDING events relay - + 10 | grep -qx tw-dead-host || fail "not pending under tw-dead-host"
	! grep -q ': finished e2$' "$TMP/a.log" "$TMP/b.log" || fail "the handler finished: it was not stopped"
	stop_relay_pid "$RELAY_PID"
	[ "$(rcli EXISTS "$(tw_key tw-dead-host)")" = 0 ] || fail "B's record outlived SIGTERM"
}

test_a_running_relay_retakes_a_vanished_record_and_stops_when_another_holds_it() {
	trap 'tw_rc=$?; tw_cleanup_images; (exit $tw_rc); it_cleanup' EXIT
	redis_up
	tw_env
	tw_fn tw-lost "$TW_SLOW"
	start_relay_as "$TMP/a.log" tw-lost-host
	local pid_a=$RELAY_PID key value other
	key=$(tw_key tw-lost-host)
	value=$(rcli GET "$key")
	# Gone (a Redis restarted without persistence, a FLUSHALL): taken again.
	rcli DEL "$key" >/dev/null
	wait_for 10 tw_value_is "$key" "$value" || fail "the record was not taken again: $(rcli GET "$key")"
	grep -qF 'level=WARN msg="the liveness record of this consumer name was gone (Redis restarted or flushed, or unreachable for longer than its TTL); taken again" consumer=tw-lost-host' "$TMP/a.log" ||
		fail "no WARN for the vanished record"
	kill -0 "$pid_a" || fail "A stopped"
	# Held by another instance: A stops consuming and exits 1.
	other="instance=ffffffffffffffffffffffffffffffff pid=4242 started=2026-01-02T03:04:05Z machine=-"
	rcli SET "$key" "$other" PX 60000 >/dev/null
	wait_for 15 grep -q 'msg="Relay stopped"' "$TMP/a.log" || fail "A did not stop: $(tail -n 20 "$TMP/a.log")"
	reap_relay "$pid_a" 1 || fail "A's exit"
	log_has_line "level=ERROR msg=\"another Relay process took the liveness record of this consumer name; stopping consumption\" consumer=tw-lost-host stream=events group=relay holder_pid=4242 holder_started=2026-01-02T03:04:05Z holder_machine=- key=$key" "$TMP/a.log" ||
		fail "no exact ERROR line: $(grep ERROR "$TMP/a.log")"
	grep -qF 'msg="Relay stopping: finishing in-flight invocations" reason="consumer name taken by another process"' "$TMP/a.log" ||
		fail "no orderly stop line"
	[ "$(rcli GET "$key")" = "$other" ] || fail "A deleted or changed another's record: $(rcli GET "$key")"
}

test_relays_of_two_groups_share_a_hostname_without_sweeping_each_other() {
	trap 'tw_rc=$?; tw_cleanup_images; (exit $tw_rc); it_cleanup' EXIT
	redis_up
	tw_env
	tw_fn tw-groups "$TW_SLOW"
	export REDIS_GROUP=g1
	start_relay_as "$TMP/a.log" tw-groups-host
	local pid_a=$RELAY_PID cid
	tw_xadd tw-groups e4 6 >/dev/null
	wait_for 60 grep -q ': start e4$' "$TMP/a.log" || fail "A never started the handler"
	cid=$(tw_containers tw-groups)
	[ "$(docker inspect -f '{{index .Config.Labels "relay.stream"}} {{index .Config.Labels "relay.group"}}' "$cid")" = "events g1" ] ||
		fail "stream/group labels: $(docker inspect -f '{{json .Config.Labels}}' "$cid")"
	# B: the same hostname, another group of the same stream.
	export REDIS_GROUP=g2
	start_relay_as "$TMP/b.log" tw-groups-host
	! grep -q 'orphan' "$TMP/b.log" || fail "B swept: $(grep orphan "$TMP/b.log")"
	tw_running "$cid" || fail "A's container did not survive B's start"
	[ "$(rcli EXISTS relay:consumer:events:g1:tw-groups-host relay:consumer:events:g2:tw-groups-host)" = 2 ] ||
		fail "not one record per group"
	wait_for 30 grep -q ': finished e4$' "$TMP/a.log" || fail "A's handler did not finish"
	wait_for 30 grep -q ': finished e4$' "$TMP/b.log" || fail "B's handler did not finish"
	stop_relay_pid "$pid_a"
	stop_relay_pid "$RELAY_PID"
}
