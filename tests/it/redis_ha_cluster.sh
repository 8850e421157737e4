# Relay on a Redis Cluster: a 3-master, 3-replica cluster on
# loopback (tests/it/redis-ha), the stream {events}. Two workers account for
# 2,000 events (handled, dead-lettered or acknowledged unmatched; the
# matching ones under key_concurrency, whose keys share the stream's slot); a stream
# without a hash tag is refused at startup; a manual failover, a crash of
# the stream's master and a live migration of the stream's slot under load
# lose nothing Redis confirmed (WAIT 1); an every-second schedule runs once
# per occurrence with three workers.
#
# The failover scenarios need no function: an event that matches nothing is
# processed by its acknowledgement ("no rule matched; acknowledging" at
# DEBUG), so every confirmed XADD must show up in a relay's log and the
# group must end with its last delivered id at the stream's end and nothing
# pending. Entries whose acknowledgement the crash lost come back through
# the reclaim (every 1m, idle 1m): that test waits up to 3 minutes.

# shellcheck source=tests/it/redis_ha_lib.sh
source "$ROOT/tests/it/redis_ha_lib.sh"

# node_pid PORT: the pid of the redis-ha server on PORT.
node_pid() { awk -v p="$1" '$3 == p { print $1 }' "$HA_DIR/pids"; }
node_id() { redis-cli -p "$1" CLUSTER MYID; }
master_is() { [ "$(ha_master)" = "$1" ]; }

test_cluster_two_workers_account_for_2000_events() {
	ha_up cluster
	ha_env
	export MAX_BUFFERED_EVENTS=64
	# One event in 40 matches (50, each a container run); a third of those
	# fail with retries 0 and are dead-lettered; the rest match nothing and
	# are acknowledged. The 30 s timeout: on a loaded 2-core machine a
	# container printing one line took up to 5 s, against the default 6 s,
	# and a timeout is dead-lettered like a failure.
	write_fn ha-pick pick.py 'def handler(event):
    n = int(event["event_id"][1:])
    if n % 3 == 0:
        raise RuntimeError("fail " + event["event_id"])
    print("picked", event["event_id"])
' 'runtime: python3.14
concurrency: 4
key_concurrency: {key: tenant}
events:
  - handler: pick.handler
    pattern: {kind: [pick]}
    retries: 0
    timeout: 30s
'
	hcli XGROUP CREATE "$HA_STREAM" "$HA_GROUP" 0 MKSTREAM >/dev/null || fail "XGROUP CREATE"
	ha_start_workers 2 ha-acc
	local i
	for i in $(seq 1 2000); do
		if [ $((i % 40)) -eq 0 ]; then
			echo "XADD $HA_STREAM * event '{\"kind\":\"pick\",\"event_id\":\"p$i\",\"tenant\":\"t$((i / 40 % 5))\"}'"
		else
			echo "XADD $HA_STREAM * event '{\"kind\":\"none\",\"event_id\":\"n$i\"}'"
		fi
	done | hcli >"$TMP/added"
	[ "$(grep -cE '^[0-9]+-[0-9]+$' "$TMP/added")" -eq 2000 ] || fail "XADD: $(grep -vE '^[0-9]+-[0-9]+$' "$TMP/added" | head -n 3)"
	sort "$TMP/added" >"$TMP/ids"
	# message ids of the matching events, and of those that fail
	hcli XRANGE "$HA_STREAM" - + | awk '/^[0-9]+-[0-9]+$/ { id = $0 }
		match($0, /"event_id":"p[0-9]+"/) { n = substr($0, RSTART + 13, RLENGTH - 14); print id, n }' >"$TMP/picks"
	[ "$(wc -l <"$TMP/picks")" -eq 50 ] || fail "$(wc -l <"$TMP/picks") matching events in the stream"
	awk '$2 % 3 == 0 { print $1 }' "$TMP/picks" | sort >"$TMP/want-dlq"
	awk '$2 % 3 != 0 { print $1 }' "$TMP/picks" | sort >"$TMP/want-ok"
	wait_for 240 ha_all_acked || fail "not everything acknowledged in 240 s: last delivered $(ha_group_field last-delivered-id), pending $(ha_pending)"
	# Every key Relay wrote lives in the stream's slot, on its master: the
	# per-key queues too (key_concurrency on five tenants: their scripts
	# would fail with CROSSSLOT otherwise), gone once every event is done.
	ha_keys_in_slot
	[ -n "$(redis-cli -p "$(ha_master)" --scan --pattern 'relay:keymark:*')" ] || fail "no per-key registration mark"
	[ -z "$(redis-cli -p "$(ha_master)" --scan --pattern 'relay:keyq:*')" ] || fail "per-key queues left"
	! grep -hE "cannot register a read for per-key order|key places|key's queue" "$TMP"/ha-acc-*.log ||
		fail "a per-key script failed on the cluster"
	echo "keys on the stream's master: $(redis-cli -p "$(ha_master)" --scan | sort | paste -sd' ')"
	[ "$(ha_redirects "$TMP"/ha-acc-*.log)" = 0 ] || fail "redirects on a cluster that did not change: $(grep -h 'redirected' "$TMP"/ha-acc-*.log | head -n 3)"
	stop_relay_pid "${WORKERS[0]}"
	stop_relay_pid "${WORKERS[1]}"
	local logs=("$TMP/ha-acc-1.log" "$TMP/ha-acc-2.log")
	cat "${logs[@]}" | grep -E 'msg="no rule matched; acknowledging"' | grep -oE 'message_id=[0-9-]+' | sed 's/.*=//' | sort -u >"$TMP/unmatched"
	cat "${logs[@]}" | grep -E 'msg="handler executed" function=ha-pick ' | grep -oE 'message_id=[0-9-]+' | sed 's/.*=//' | sort -u >"$TMP/ok"
	hcli XRANGE "relay:$HA_STREAM:dlq" - + | awk 'k == "original_id" { print } { k = $0 }' | sort >"$TMP/dlq"
	local lost
	lost=$(sort -u "$TMP/unmatched" "$TMP/ok" "$TMP/dlq" | comm -23 "$TMP/ids" - | wc -l)
	echo "2000 events: unmatched $(wc -l <"$TMP/unmatched"), handled $(wc -l <"$TMP/ok"), dead-lettered $(wc -l <"$TMP/dlq"); unaccounted $lost; pending $(ha_pending)"
	[ "$lost" -eq 0 ] || fail "$lost event(s) neither acknowledged, handled nor dead-lettered"
	# No fault: no message processed twice (sort -u above would hide it).
	ha_check_duplicates none none "${logs[@]}"
	cmp -s "$TMP/ok" "$TMP/want-ok" || fail "handled: $(wc -l <"$TMP/ok"), want the $(wc -l <"$TMP/want-ok") matching events that do not fail"
	cmp -s "$TMP/dlq" "$TMP/want-dlq" || fail "DLQ relay:$HA_STREAM:dlq holds $(wc -l <"$TMP/dlq") entries, want exactly the $(wc -l <"$TMP/want-dlq") failing events once each"
	[ "$(ha_pending)" = 0 ] || fail "XPENDING $(ha_pending)"
	grep -q 'message_id=' "$TMP/ha-acc-1.log" || fail "worker 1 processed nothing"
	grep -q 'message_id=' "$TMP/ha-acc-2.log" || fail "worker 2 processed nothing"
	rm_fn_images ha-pick
}

# In cluster mode REDIS_STREAM must carry a hash tag: relay start and the
# CLI exit 1 saying so; outside cluster mode nothing changes.
test_cluster_stream_without_hash_tag_is_refused() {
	ha_up cluster
	ha_env
	export REDIS_STREAM=events
	run timeout 60 "$RELAY" start
	assert_status 1
	grep -qF 'hash tag' "$TMP/out" "$TMP/err" || fail "no message naming the hash tag"
	echo "relay start: $(cat "$TMP/out" "$TMP/err" | grep -F 'hash tag' | head -n 2)"
	run timeout 60 "$RELAY" dlq ls
	assert_status 1
	grep -qF 'hash tag' "$TMP/out" "$TMP/err" || fail "relay dlq ls: no message naming the hash tag"
	# nothing was written anywhere in the cluster
	local p
	for p in "${HA_NODES[@]}"; do
		[ "$(redis-cli -p "$p" DBSIZE)" = 0 ] || fail "node $p holds keys: $(redis-cli -p "$p" --scan | head -n 5)"
	done
}

# failover_under_load KIND PREFIX: two workers, a producer; KIND manual
# (CLUSTER FAILOVER on the replica) or crash (kill -9 of the master).
failover_under_load() {
	local kind=$1 prefix=$2 old new before i redis_pid
	ha_up cluster
	ha_env
	hcli XGROUP CREATE "$HA_STREAM" "$HA_GROUP" 0 MKSTREAM >/dev/null || fail "XGROUP CREATE"
	ha_start_workers 2 "$prefix"
	ha_producer "$TMP/confirmed.txt" "$prefix"
	wait_for 30 lines_at_least 200 "$TMP/confirmed.txt" || fail "the producer confirmed $(wc -l <"$TMP/confirmed.txt") XADDs in 30 s: $(tail -n 5 "$TMP/confirmed.txt.unconfirmed")"
	old=$(ha_master)
	new=$("$HA" replica-of "$HA_DIR" "$old") || fail "no replica of $old"
	# the slot is known: no command needed a redirect so far
	[ "$(ha_redirects "$TMP/$prefix"-*.log)" = 0 ] ||
		fail "redirects before the failover: $(grep -h 'redirected' "$TMP/$prefix"-*.log | head -n 3)"
	before=$(wc -l <"$TMP/confirmed.txt")
	local t0 slot
	slot=$(redis-cli -p "$old" CLUSTER KEYSLOT "$HA_STREAM")
	if [ "$kind" = manual ]; then
		# relay health names the mode, the slot and its master
		run "$RELAY" health
		assert_status 0
		[ "$(head -n1 "$TMP/out")" = "redis: ok (cluster, slot $slot on 127.0.0.1:$old)" ] ||
			fail "relay health: $(head -n1 "$TMP/out")"
		# without a stream there is no slot of its own: it says so
		run env -u REDIS_STREAM "$RELAY" health
		assert_status 0
		head -n1 "$TMP/out" | grep -qxE 'redis: ok \(cluster, slot 0 on 127\.0\.0\.1:[0-9]+ \(REDIS_STREAM unset\)\)' ||
			fail "relay health without REDIS_STREAM: $(head -n1 "$TMP/out")"
	fi
	t0=$(date +%s.%N)
	if [ "$kind" = manual ]; then
		redis-cli -p "$new" CLUSTER FAILOVER | grep -qx OK || fail "CLUSTER FAILOVER refused"
	else
		# a redis-server, not a relay (kill9_relay_pid is for relays)
		redis_pid=$(node_pid "$old")
		kill -KILL "$redis_pid" || fail "cannot kill $old ($redis_pid)"
	fi
	wait_for 30 master_is "$new" || fail "$new did not become the master within 30 s"
	local t1
	t1=$(date +%s.%N)
	echo "$kind failover: master $old -> $new after $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
	if [ "$kind" = crash ]; then
		# the new master has no replica left: WAIT 1 confirms nothing from
		# now on; what is added is still checked by the group's position
		sleep 5
	else
		wait_for 30 lines_at_least $((before + 200)) "$TMP/confirmed.txt" ||
			fail "nothing confirmed after the failover: $(tail -n 5 "$TMP/confirmed.txt.unconfirmed")"
	fi
	ha_stop_producer "$prefix"
	if [ "$kind" = manual ]; then
		run "$RELAY" health
		assert_status 0
		[ "$(head -n1 "$TMP/out")" = "redis: ok (cluster, slot $slot on 127.0.0.1:$new)" ] ||
			fail "relay health after the failover: $(head -n1 "$TMP/out")"
		echo "relay health: $(head -n1 "$TMP/out")"
	fi
	local secs=60
	[ "$kind" = crash ] && secs=180
	wait_for "$secs" ha_all_acked || fail "not everything acknowledged $secs s after the failover: last entry $(ha_last_id), last delivered $(ha_group_field last-delivered-id), pending $(ha_pending)"
	ha_check_confirmed "$TMP/confirmed.txt" "$TMP/$prefix"-*.log
	# Processed twice only what the failover undid: first processed from the
	# failover's start (a crash loses the writes the replica had not yet
	# received, milliseconds' worth before the kill) to the promotion.
	ha_check_duplicates "$t0" "$t1" "$TMP/$prefix"-*.log
	# both workers follow the new master: each one's reader is connected
	# there, in XREADGROUP, and (after a manual failover) processed events
	# added after it
	wait_for 10 ha_readers_at_least 2 ||
		fail "a worker does not read from the new master: $(ha_not_reading "$prefix")"
	local w after n
	awk -v b="$before" 'NR > b { print $2 }' "$TMP/confirmed.txt" | sort >"$TMP/after"
	for w in 1 2; do
		after=$(ha_processed "$TMP/$prefix-$w.log" | comm -12 "$TMP/after" - | wc -l)
		echo "worker $w processed $after of the events confirmed after the failover"
		[ "$kind" = crash ] || [ "$after" -ge 1 ] || fail "worker $w processed nothing after the failover"
		# one WARN per episode, a bounded number of reconnect attempts
		# while the cluster promotes the replica (no busy loop)
		n=$(grep -c 'level=WARN' "$TMP/$prefix-$w.log")
		echo "worker $w: $n WARN lines, $(ha_redirects "$TMP/$prefix-$w.log") redirect(s): $(grep 'level=WARN' "$TMP/$prefix-$w.log" | sed 's/^time=[^ ]* //; s/[0-9][0-9-]*/N/g' | sort | uniq -c | sort -rn | head -n 3 | paste -sd';')"
		[ "$n" -le 60 ] || fail "worker $w logged $n WARN lines across one failover"
	done
	ha_keys_in_slot
	for i in 1 2; do stop_relay_pid "${WORKERS[$((i - 1))]}"; done
}

test_cluster_manual_failover_under_load_loses_nothing() {
	failover_under_load manual ha-mf
}

test_cluster_crash_failover_loses_nothing_confirmed() {
	failover_under_load crash ha-cr
}

# The stream's slot moves to another master while two workers consume: the
# slot MIGRATING/IMPORTING, every other key migrated, a pause, the stream
# itself migrated (ASK from then on), a pause, then the slot assigned to the
# target everywhere (MOVED).
test_cluster_live_resharding_of_the_stream_slot_loses_nothing() {
	ha_up cluster
	ha_env
	hcli XGROUP CREATE "$HA_STREAM" "$HA_GROUP" 0 MKSTREAM >/dev/null || fail "XGROUP CREATE"
	ha_start_workers 2 ha-rs
	ha_producer "$TMP/confirmed.txt" ha-rs
	wait_for 30 lines_at_least 200 "$TMP/confirmed.txt" || fail "the producer confirmed $(wc -l <"$TMP/confirmed.txt") XADDs in 30 s"
	local src dst slot sid did p k before t0 t1
	src=$(ha_master)
	for p in "${HA_NODES[@]}"; do
		[ "$p" != "$src" ] && [ "$(redis-cli -p "$p" ROLE | head -n1)" = master ] && dst=$p && break
	done
	[ -n "${dst:-}" ] || fail "no other master"
	slot=$(redis-cli -p "$src" CLUSTER KEYSLOT "$HA_STREAM")
	sid=$(node_id "$src")
	did=$(node_id "$dst")
	before=$(wc -l <"$TMP/confirmed.txt")
	t0=$(date +%s.%N)
	redis-cli -p "$dst" CLUSTER SETSLOT "$slot" IMPORTING "$sid" | grep -qx OK || fail "IMPORTING"
	redis-cli -p "$src" CLUSTER SETSLOT "$slot" MIGRATING "$did" | grep -qx OK || fail "MIGRATING"
	redis-cli -p "$src" CLUSTER GETKEYSINSLOT "$slot" 1000 >"$TMP/slot-keys"
	echo "slot $slot: $src -> $dst; keys: $(paste -sd' ' "$TMP/slot-keys")"
	while read -r k; do
		[ "$k" = "$HA_STREAM" ] && continue
		redis-cli -p "$src" MIGRATE 127.0.0.1 "$dst" "$k" 0 5000 >/dev/null
	done <"$TMP/slot-keys"
	sleep 2
	redis-cli -p "$src" MIGRATE 127.0.0.1 "$dst" "$HA_STREAM" 0 10000 | grep -qE 'OK|NOKEY' || fail "MIGRATE of the stream failed"
	# the stream is on the target, the slot still the source's: ASK, for
	# longer than a read blocks (consumer.h CONSUMER_BLOCK_MS 2 s)
	sleep 5
	# keys created meanwhile on the source (before ASK sent them on)
	local left
	for _ in 1 2 3; do
		redis-cli -p "$src" CLUSTER GETKEYSINSLOT "$slot" 1000 >"$TMP/left"
		while read -r k; do redis-cli -p "$src" MIGRATE 127.0.0.1 "$dst" "$k" 0 5000 >/dev/null; done <"$TMP/left"
		sleep 1
	done
	left=$(redis-cli -p "$src" CLUSTER COUNTKEYSINSLOT "$slot")
	[ "$left" = 0 ] || fail "$left key(s) still in slot $slot on $src"
	for p in "${HA_NODES[@]}"; do
		[ "$(redis-cli -p "$p" ROLE | head -n1)" = master ] && redis-cli -p "$p" CLUSTER SETSLOT "$slot" NODE "$did" >/dev/null
	done
	wait_for 20 master_is "$dst" || fail "the slot did not move to $dst"
	t1=$(date +%s.%N)
	wait_for 30 lines_at_least $((before + 200)) "$TMP/confirmed.txt" || fail "nothing confirmed after the move"
	ha_stop_producer ha-rs
	wait_for 60 ha_all_acked || fail "not everything acknowledged 60 s after the move: last entry $(ha_last_id), last delivered $(ha_group_field last-delivered-id), pending $(ha_pending)"
	ha_check_confirmed "$TMP/confirmed.txt" "$TMP"/ha-rs-*.log
	# Processed twice only what the move could undo: first processed while
	# the slot was moving.
	ha_check_duplicates "$t0" "$t1" "$TMP"/ha-rs-*.log
	wait_for 10 ha_readers_at_least 2 ||
		fail "a worker does not read from the new owner: $(ha_not_reading ha-rs)"
	[ "$(redis-cli -p "$src" CLUSTER COUNTKEYSINSLOT "$slot")" = 0 ] || fail "keys of slot $slot written on the old owner"
	echo "redirects: $(cat "$TMP"/ha-rs-*.log | grep -o 'reason="[A-Z]*' | sort | uniq -c | paste -sd' ')"
	grep -qF 'reason="ASK ' "$TMP"/ha-rs-*.log || fail "no worker was sent ASK while the stream was on the target"
	ha_keys_in_slot
	stop_relay_pid "${WORKERS[0]}"
	stop_relay_pid "${WORKERS[1]}"
}

# Three workers, `* * * * * *` for ~12 s: one occurrence per second, each
# run once; the dedup key carries the stream's tag.
test_cluster_schedule_runs_each_occurrence_once() {
	ha_up cluster
	ha_env
	write_fn ha-tick tick.py 'def handler(event):
    print("ran", event["scheduled_at"], event["source"], flush=True)
' 'runtime: python3.14
concurrency: 4
schedules:
  - handler: tick.handler
    cron: "* * * * * *"
'
	local i pids=()
	for i in 1 2 3; do
		start_relay_as "$TMP/ha-sc-$i.log" "ha-sc-$i" 'msg="Cron scheduler started with '
		pids+=("$RELAY_PID")
	done
	sleep 12
	ha_keys_in_slot
	for i in 0 1 2; do stop_relay_pid "${pids[$i]}"; done
	hcli XRANGE "$HA_STREAM" - + | awk '/^[0-9]+-[0-9]+$/ { id = $0 }
		match($0, /"occurrence_id":"[^"]*"/) { print id, substr($0, RSTART + 17, RLENGTH - 18) }' >"$TMP/occ"
	local count dups gaps
	count=$(wc -l <"$TMP/occ")
	dups=$(awk '{print $2}' "$TMP/occ" | sort | uniq -d | wc -l)
	awk '{ print substr($2, length($2) - 19) }' "$TMP/occ" | date -u -f - +%s >"$TMP/secs"
	gaps=$(awk 'NR > 1 && $1 != prev + 1 { n++ } { prev = $1 } END { print n + 0 }' "$TMP/secs")
	cat "$TMP"/ha-sc-*.log | grep -o 'ran [0-9TZ:-]* relay.schedule' | awk '{print $2}' >"$TMP/ran"
	echo "occurrences $count (duplicates $dups, gaps $gaps); handler runs $(wc -l <"$TMP/ran"), distinct $(sort -u "$TMP/ran" | wc -l); pending $(ha_pending)"
	[ "$count" -ge 9 ] || fail "only $count occurrences in ~12 s"
	[ "$dups" -eq 0 ] || fail "$dups occurrence(s) published more than once"
	[ "$gaps" -eq 0 ] || fail "gaps in the series: $(paste -sd' ' "$TMP/secs")"
	[ "$(wc -l <"$TMP/ran")" -eq "$(sort -u "$TMP/ran" | wc -l)" ] || fail "an occurrence ran more than once"
	# every occurrence ran, or is still pending (read while a worker stopped)
	local pend
	pend=$(ha_pending)
	[ $(($(sort -u "$TMP/ran" | wc -l) + pend)) -ge "$count" ] || fail "occurrences neither run nor pending"
	local o1
	o1=$(head -n1 "$TMP/occ" | awk '{print $2}')
	[ "$(hcli GET "relay:schedule:$HA_STREAM:$o1")" = "$o1" ] || fail "no dedup key relay:schedule:$HA_STREAM:$o1"
	rm_fn_images ha-tick
}
