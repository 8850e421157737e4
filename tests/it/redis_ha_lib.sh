# Shared helpers of the highly available Redis scenarios:
# tests/it/redis_ha_cluster.sh and tests/it/redis_ha_sentinel.sh source this
# file after tests/it/lib.sh. It declares no test_* function (tests/run
# sources it as a scenario file and finds nothing to run).
#
# The servers come from tests/it/redis-ha (under $TMP/ha); a test's EXIT
# trap stops its relays first (they must still exit 0 on SIGTERM), then its
# producers, then the servers, and keeps the test's exit status.

HA=$ROOT/tests/it/redis-ha
HA_STREAM='{events}'
HA_GROUP=relay
HA_PRODUCERS=()

ha_cleanup() { # status
	local rc=$1 pid
	for pid in "${HA_PRODUCERS[@]}"; do kill "$pid" 2>/dev/null; done
	for pid in "${HA_PRODUCERS[@]}"; do wait "$pid" 2>/dev/null; done
	for pid in "${!RELAY_LOGS[@]}"; do
		term_relay "$pid" || {
			echo "(relay $pid was left running by the test)"
			rc=1
		}
	done
	[ -z "${HA_DIR:-}" ] || "$HA" stop "$HA_DIR" >/dev/null 2>&1
	return "$rc"
}

# ha_up cluster|sentinel: the setup under $TMP/ha; HA_URI is its URI,
# HA_NODES the data nodes' ports (HA_SENTINELS the sentinels').
ha_up() {
	HA_DIR=$TMP/ha
	trap 'ha_cleanup $?; it_cleanup' EXIT
	HA_URI=$("$HA" "$1" "$HA_DIR" 2>"$TMP/ha-up.err") || fail "redis-ha $1 did not come up: $(cat "$TMP/ha-up.err")"
	mapfile -t HA_NODES <"$HA_DIR/nodes"
	HA_SENTINELS=()
	[ ! -f "$HA_DIR/sentinels" ] || mapfile -t HA_SENTINELS <"$HA_DIR/sentinels"
	HA_KIND=$1
}

ha_env() {
	export REDIS_URI=$HA_URI REDIS_STREAM=$HA_STREAM REDIS_GROUP=$HA_GROUP LOG_LEVEL=DEBUG
}

# ha_master: the port of the master serving the stream now (cluster: the
# owner of its slot; sentinel: what the first sentinel that answers says).
ha_master() {
	local s a
	if [ "$HA_KIND" = cluster ]; then
		"$HA" master-of "$HA_DIR" "$HA_STREAM" 2>/dev/null
		return
	fi
	for s in "${HA_SENTINELS[@]}"; do
		a=$(timeout 5 redis-cli -p "$s" SENTINEL GET-MASTER-ADDR-BY-NAME relaymaster 2>/dev/null | tail -n1)
		[ -n "$a" ] && echo "$a" && return 0
	done
	return 1
}

# hcli ARGS...: redis-cli against the stream's master, as it is now.
hcli() {
	local m
	m=$(ha_master) || return 1
	timeout 10 redis-cli -p "$m" "$@"
}

ha_group_field() { hcli XINFO GROUPS "$HA_STREAM" | awk -v g="$HA_GROUP" -v f="$1" 'NR % 2 { k = $0; next } k == "name" { cur = $0 } cur == g && k == f { print }'; }
ha_pending() { hcli XPENDING "$HA_STREAM" "$HA_GROUP" | head -n1; }
ha_last_id() { hcli XREVRANGE "$HA_STREAM" + - COUNT 1 | head -n1; }
# Everything in the stream read and acknowledged: the group's last delivered
# id is the stream's last entry, then nothing pending (in that order).
ha_all_acked() {
	local last
	last=$(ha_last_id) && [ -n "$last" ] && [ "$(ha_group_field last-delivered-id)" = "$last" ] &&
		[ "$(ha_pending)" = 0 ]
}

# ha_producer FILE PREFIX [KIND]: in the background (HA_PRODUCER is its
# pid) adds events {"kind":KIND,"event_id":"PREFIX<n>"} in batches of 20 to
# the stream's master as it is at each batch, each batch followed by WAIT 1
# 1000 on the same connection, until $TMP/stop-PREFIX exists. A batch
# answered ASK (its slot being migrated, the stream gone to the target) is
# sent again to the target, each XADD after an ASKING. A batch whose 20
# XADDs were all answered with an id and whose WAIT counted a replica is
# confirmed: "event_id message_id" lines appended to FILE; any other batch
# (a redirect, a refused connection, no replica) goes to FILE.unconfirmed
# with the raw replies. ~5 batches a second.
ha_producer() {
	local file=$1 prefix=$2 kind=${3:-ha-none}
	: >"$file"
	: >"$file.unconfirmed"
	(
		n=0
		# send PORT ASKING: the batch (XADDs of $first+1.. $first+20, WAIT)
		send() {
			local i
			for i in $(seq $((first + 1)) $((first + 20))); do
				[ "$2" = 1 ] && echo ASKING
				echo "XADD $HA_STREAM * event '{\"kind\":\"$kind\",\"event_id\":\"$prefix$i\"}'"
			done | {
				cat
				echo "WAIT 1 1000"
			} | timeout 10 redis-cli -p "$1" 2>&1 | { if [ "$2" = 1 ]; then grep -vx OK; else cat; fi; }
		}
		while [ ! -e "$TMP/stop-$prefix" ]; do
			m=$(ha_master) || {
				sleep 0.2
				continue
			}
			first=$n
			n=$((first + 20))
			reply=$(send "$m" 0)
			if [[ "$reply" == "ASK "* ]]; then
				target=$(head -n1 <<<"$reply" | awk '{print $3}')
				reply=$(send "${target##*:}" 1)
				m="${target##*:} (ASK)"
			fi
			if [ "$(printf '%s\n' "$reply" | head -n 20 | grep -cE '^[0-9]+-[0-9]+$')" = 20 ] &&
				[ "$(printf '%s\n' "$reply" | sed -n 21p)" -ge 1 ] 2>/dev/null &&
				[ "$(printf '%s\n' "$reply" | wc -l)" = 21 ]; then
				printf '%s\n' "$reply" | head -n 20 | awk -v p="$prefix" -v f="$first" '{ print p (f + NR), $0 }' >>"$file"
			else
				{
					echo "batch $prefix$((first + 1))..$prefix$n on $m:"
					printf '%s\n' "$reply"
				} >>"$file.unconfirmed"
			fi
			sleep 0.2
		done
	) &
	HA_PRODUCER=$!
	HA_PRODUCERS+=("$HA_PRODUCER")
}

# ha_stop_producer PREFIX: ends that producer after its current batch.
ha_stop_producer() {
	touch "$TMP/stop-$1"
	local pid
	for pid in "${HA_PRODUCERS[@]}"; do wait "$pid" 2>/dev/null; done
	HA_PRODUCERS=()
}

lines_at_least() { [ -f "$2" ] && [ "$(wc -l <"$2")" -ge "$1" ]; }

# ha_processed LOG...: the message ids the relays processed: acknowledged
# without a match, their handler run, or dead-lettered (DEBUG lines).
ha_processed() {
	cat "$@" | grep -E 'msg="(no rule matched; acknowledging|handler executed|handler failed; attempts exhausted[^"]*)"' |
		grep -oE 'message_id=[0-9]+-[0-9]+' | sed 's/message_id=//' | sort -u
}

# ha_processings LOG...: one "TIME MESSAGE_ID" line per processing the
# relays logged (the DEBUG lines ha_processed reads; TIME is the line's
# time=, UTC to the second), in time order; unlike ha_processed, a message
# processed twice is there twice.
ha_processings() {
	cat "$@" | grep -E 'msg="(no rule matched; acknowledging|handler executed|handler failed; attempts exhausted[^"]*)"' |
		sed -nE 's/^time=([^ ]+) .*message_id=([0-9]+-[0-9]+).*/\1 \2/p' | sort
}

# ha_check_duplicates FROM TO LOG...: what at-least-once allows, and no
# more. A fault may undo a processing's acknowledgement or the delivery
# itself (writes the old master took and never passed on), so the message
# is processed again; it can only be one processed while the fault was
# going on. So: each message processed at most twice, and every message
# processed twice first processed between FROM and TO (epoch seconds; a
# second of slack each side for the log's resolution). FROM=TO=none: no
# fault, no message processed twice.
ha_check_duplicates() {
	local from=$1 to=$2 n lo hi bad
	shift 2
	ha_processings "$@" >"$TMP/processings"
	awk '{print $2}' "$TMP/processings" | sort | uniq -c | awk '$1 > 1 {print $2}' >"$TMP/dups"
	n=$(wc -l <"$TMP/dups")
	echo "processed more than once: $n"
	if [ "$from" = none ]; then
		[ "$n" -eq 0 ] || fail "$n message(s) processed more than once without a fault: $(head -n 5 "$TMP/dups" | paste -sd' ')"
		return
	fi
	bad=$(awk '{print $2}' "$TMP/processings" | sort | uniq -c | awk '$1 > 2' | wc -l)
	[ "$bad" -eq 0 ] || fail "$bad message(s) processed more than twice across one fault"
	lo=$(date -u -d "@$((${from%.*} - 1))" +%Y-%m-%dT%H:%M:%SZ)
	hi=$(date -u -d "@$((${to%.*} + 1))" +%Y-%m-%dT%H:%M:%SZ)
	# the first processing of each duplicated message, outside [lo, hi]
	bad=$(awk 'NR == FNR { d[$1] = 1; next } ($2 in d) && !seen[$2]++ { print }' "$TMP/dups" "$TMP/processings" |
		awk -v lo="$lo" -v hi="$hi" '$1 < lo || $1 > hi' | head -n 5)
	[ -z "$bad" ] || fail "processed twice, though first processed outside the fault ($lo .. $hi): $(paste -sd' ' <<<"$bad")"
}

# ha_check_confirmed FILE LOG...: every confirmed XADD of FILE is in the
# stream on the master now (Redis kept it) and was processed by a relay;
# prints the figures, fails with the first missing ids.
ha_check_confirmed() {
	local file=$1
	shift
	hcli XRANGE "$HA_STREAM" - + | grep -E '^[0-9]+-[0-9]+$' | sort -u >"$TMP/in-stream"
	awk '{print $2}' "$file" | sort -u >"$TMP/confirmed"
	ha_processed "$@" >"$TMP/processed"
	local confirmed gone unprocessed unconfirmed
	confirmed=$(wc -l <"$TMP/confirmed")
	gone=$(comm -23 "$TMP/confirmed" "$TMP/in-stream" | wc -l)
	unprocessed=$(comm -23 "$TMP/confirmed" "$TMP/processed" | wc -l)
	unconfirmed=$(grep -c '^batch ' "$file.unconfirmed")
	echo "confirmed XADDs $confirmed (unconfirmed batches $unconfirmed); in the stream now $(wc -l <"$TMP/in-stream"); confirmed but gone from the stream $gone; confirmed but never processed $unprocessed"
	[ "$confirmed" -ge 1 ] || fail "no XADD was confirmed"
	[ "$gone" -eq 0 ] || fail "$gone confirmed XADD(s) missing from the stream (Redis lost them): $(comm -23 "$TMP/confirmed" "$TMP/in-stream" | head -n 5 | paste -sd' ')"
	[ "$unprocessed" -eq 0 ] || fail "$unprocessed confirmed event(s) never processed: $(comm -23 "$TMP/confirmed" "$TMP/processed" | head -n 5 | paste -sd' ')"
}

# ha_start_workers N PREFIX: N relays (hosts PREFIX-1..N), logs
# $TMP/PREFIX-<i>.log; WORKERS holds their pids.
ha_start_workers() {
	local i
	WORKERS=()
	for i in $(seq 1 "$1"); do
		start_relay_as "$TMP/$2-$i.log" "$2-$i"
		WORKERS+=("$RELAY_PID")
	done
}

# ha_redirects LOG...: how many redirects the relays logged (redis_cluster.c:
# one WARN per redirect episode).
ha_redirects() { cat "$@" | grep -c 'level=WARN msg="redis command redirected; resending it"'; }

# ha_keys_in_slot: every key on every master is in the stream's slot, on
# the stream's master (Relay writes nothing elsewhere: a multi-key script
# would be refused, CROSSSLOT).
ha_keys_in_slot() {
	local m slot p k bad=0
	m=$(ha_master)
	slot=$(redis-cli -p "$m" CLUSTER KEYSLOT "$HA_STREAM")
	for p in "${HA_NODES[@]}"; do
		[ "$(redis-cli -p "$p" ROLE 2>/dev/null | head -n1)" = master ] || continue
		redis-cli -p "$p" --scan >"$TMP/keys-$p"
		while read -r k; do
			if [ "$p" != "$m" ] || [ "$(redis-cli -p "$p" CLUSTER KEYSLOT "$k")" != "$slot" ]; then
				echo "key $k on $p (slot $(redis-cli -p "$p" CLUSTER KEYSLOT "$k")); the stream is in slot $slot on $m"
				bad=1
			fi
		done <"$TMP/keys-$p"
	done
	[ "$bad" = 0 ] || fail "keys outside the stream's slot"
}

# ha_not_reading PREFIX: why the workers PREFIX-* may not be reading, for a
# failure message: the master's XREADGROUP clients and the group's
# consumers, then the last lines of each worker's log that are not DEBUG.
ha_not_reading() {
	local f
	echo "readers: $(hcli CLIENT LIST | grep ' cmd=xreadgroup ' | paste -sd';')"
	echo "consumers: $(hcli XINFO CONSUMERS "$HA_STREAM" "$HA_GROUP" | paste -sd' ')"
	for f in "$TMP/$1"-*.log; do
		echo "--- $(basename "$f"), its last lines above DEBUG:"
		grep -v 'level=DEBUG' "$f" | tail -n 12
	done
}

# ha_readers_at_least N: the master now has N client connections whose
# last command is XREADGROUP: each worker's reader (one connection per
# relay, blocking 2 s at a time) follows it. Not XINFO CONSUMERS' idle:
# Redis 7.0 refreshes it only when a read returns entries, so on a quiet
# stream it grows whether or not the consumer is reading.
ha_readers_at_least() {
	[ "$(hcli CLIENT LIST | grep -c ' cmd=xreadgroup ')" -ge "$1" ]
}
