# Shared helpers of the highly available Redis scenarios (issue 20):
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
# 1000 on the same connection, until $TMP/stop-PREFIX exists. A batch whose
# 20 XADDs were all answered with an id and whose WAIT counted a replica is
# confirmed: "event_id message_id" lines appended to FILE; any other batch
# (a redirect, a refused connection, no replica) goes to FILE.unconfirmed
# as the raw replies. ~5 batches a second.
ha_producer() {
	local file=$1 prefix=$2 kind=${3:-ha-none}
	: >"$file"
	: >"$file.unconfirmed"
	(
		n=0
		while [ ! -e "$TMP/stop-$prefix" ]; do
			m=$(ha_master) || {
				sleep 0.2
				continue
			}
			first=$n
			out=$(for _ in $(seq 1 20); do
				n=$((n + 1))
				echo "XADD $HA_STREAM * event '{\"kind\":\"$kind\",\"event_id\":\"$prefix$n\"}'"
			done
				echo "WAIT 1 1000" ) 
			n=$((first + 20))
			reply=$(printf '%s\n' "$out" | timeout 10 redis-cli -p "$m" 2>&1)
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

# ha_consumers_recent MAX_IDLE_MS NAME...: on the master now, each named
# consumer of the group interacted within MAX_IDLE_MS.
ha_consumers_recent() {
	local max=$1 name idle
	shift
	for name in "$@"; do
		idle=$(hcli XINFO CONSUMERS "$HA_STREAM" "$HA_GROUP" | awk -v c="$name" 'NR % 2 { k = $0; next } k == "name" { cur = $0 } cur == c && k == "idle" { print }')
		[ -n "$idle" ] && [ "$idle" -le "$max" ] || return 1
	done
}
