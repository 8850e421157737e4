# Relay behind Redis Sentinel: a master, one replica and three
# sentinels on loopback (tests/it/redis-ha), REDIS_URI
# redis-sentinel://.../relaymaster. SENTINEL FAILOVER under load: both
# workers follow the new master within the sentinel's failover time and
# every XADD confirmed by WAIT 1 is processed (no function: an event that
# matches nothing is processed by its acknowledgement, logged at DEBUG).

# shellcheck source=tests/it/redis_ha_lib.sh
source "$ROOT/tests/it/redis_ha_lib.sh"

master_is() { [ "$(ha_master)" = "$1" ]; }
role_of() { redis-cli -p "$1" ROLE 2>/dev/null | head -n1; }

test_sentinel_failover_under_load_loses_nothing_confirmed() {
	ha_up sentinel
	ha_env
	hcli XGROUP CREATE "$HA_STREAM" "$HA_GROUP" 0 MKSTREAM >/dev/null || fail "XGROUP CREATE"
	ha_start_workers 2 ha-sn
	local old=${HA_NODES[0]} new=${HA_NODES[1]} before t0 t1
	master_is "$old" || fail "the sentinels do not name $old"
	run "$RELAY" health
	assert_status 0
	[ "$(head -n1 "$TMP/out")" = "redis: ok (sentinel master relaymaster at 127.0.0.1:$old)" ] ||
		fail "relay health: $(head -n1 "$TMP/out")"
	ha_producer "$TMP/confirmed.txt" ha-sn
	wait_for 30 lines_at_least 200 "$TMP/confirmed.txt" || fail "the producer confirmed $(wc -l <"$TMP/confirmed.txt") XADDs in 30 s: $(tail -n 5 "$TMP/confirmed.txt.unconfirmed")"
	before=$(wc -l <"$TMP/confirmed.txt")
	t0=$(date +%s.%N)
	redis-cli -p "${HA_SENTINELS[0]}" SENTINEL FAILOVER relaymaster | grep -qx OK || fail "SENTINEL FAILOVER refused"
	wait_for 20 master_is "$new" || fail "the sentinels did not promote $new within 20 s"
	echo "SENTINEL FAILOVER: master $old -> $new after $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
	# Relay follows as the sentinels switch: an event added on the new
	# master is processed while the old master still is one. The sentinels
	# demote the old master only ~10 s after +switch-master; a client that
	# re-resolved only on READONLY or a lost connection would read from
	# the old one until then, and could process the probe only after the
	# demotion. Relay subscribes to +switch-master (redis_sentinel.c
	# "Sentinel mode") and moves at once. The order is what is checked,
	# not a time: the probe is looked for first, the old master's role
	# after, so a probe seen processed while the old master still answers
	# "master" was processed before the demotion.
	local probe order
	probe=$(redis-cli -p "$new" XADD "$HA_STREAM" '*' event '{"kind":"ha-none","event_id":"probe"}')
	probe_processed() { ha_processed "$TMP"/ha-sn-*.log | grep -qx "$probe"; }
	probe_or_demoted() {
		if probe_processed; then
			[ "$(role_of "$old")" = master ] && echo before >"$TMP/order" || echo "processed, but by then $old was a replica" >"$TMP/order"
		elif [ "$(role_of "$old")" = slave ]; then
			echo "$old demoted first" >"$TMP/order"
		else
			return 1
		fi
	}
	# 60 s: the demotion comes ~10 s after the switch, so one of the two
	# happens well within it even on a loaded machine.
	wait_for 60 probe_or_demoted || fail "neither the probe was processed nor $old demoted within 60 s of the failover"
	order=$(cat "$TMP/order")
	[ "$order" = before ] || fail "the probe on the new master was not processed before the old master $old was demoted ($order)"
	t1=$(date +%s.%N)
	grep -q 'msg="the sentinels switched the master; following it"' "$TMP"/ha-sn-*.log ||
		fail "no worker logged that it follows the new master"
	echo "an event added on the new master processed $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s after SENTINEL FAILOVER"
	# the old master becomes the new one's replica: WAIT 1 confirms again
	wait_for 45 lines_at_least $((before + 200)) "$TMP/confirmed.txt" ||
		fail "nothing confirmed after the failover: $(tail -n 5 "$TMP/confirmed.txt.unconfirmed")"
	ha_stop_producer ha-sn
	run "$RELAY" health
	assert_status 0
	[ "$(head -n1 "$TMP/out")" = "redis: ok (sentinel master relaymaster at 127.0.0.1:$new)" ] ||
		fail "relay health after the failover: $(head -n1 "$TMP/out")"
	echo "relay health: $(head -n1 "$TMP/out")"
	# An XACK sent to the old master in the moment between the promotion
	# and +switch-master is lost with the old master's writes (at-least-
	# once: the message stays pending, nothing is lost). The reclaim takes
	# it once it has been idle CONSUMER_MIN_PENDING_IDLE_NS (60 s), at a
	# tick every CONSUMER_RECLAIM_INTERVAL_NS (60 s): up to 120 s, + 10 s.
	wait_for 130 ha_all_acked || fail "not everything acknowledged on $new 130 s after the failover: last entry $(ha_last_id), last delivered $(ha_group_field last-delivered-id), pending $(ha_pending)"
	ha_check_confirmed "$TMP/confirmed.txt" "$TMP"/ha-sn-*.log
	# Processed twice only what the failover undid (an acknowledgement or a
	# delivery the old master took after the promotion, before the workers
	# followed): first processed between SENTINEL FAILOVER and the moment an
	# event added on the new master was processed (by then the workers had
	# followed the switch).
	ha_check_duplicates "$t0" "$t1" "$TMP"/ha-sn-*.log
	wait_for 10 ha_readers_at_least 2 ||
		fail "a worker does not read from the new master: $(ha_not_reading ha-sn)"
	local w n
	awk -v b="$before" 'NR > b { print $2 }' "$TMP/confirmed.txt" | sort >"$TMP/after"
	for w in 1 2; do
		n=$(ha_processed "$TMP/ha-sn-$w.log" | comm -12 "$TMP/after" - | wc -l)
		echo "worker $w processed $n of the events confirmed after the failover"
		[ "$n" -ge 1 ] || fail "worker $w processed nothing after the failover"
	done
	[ "$(role_of "$old")" = slave ] || fail "the old master $old is $(role_of "$old")"
	stop_relay_pid "${WORKERS[0]}"
	stop_relay_pid "${WORKERS[1]}"
}
