# Helpers of tests/it/delivery.sh and tests/it/reclaim.sh (sourced, not a
# scenario file): Redis reads for wait_for and a handler that runs a
# while. rcli, write_fn, redis_up and relay_env are lib.sh's.

pending_count() { rcli XPENDING "$REDIS_STREAM" "$REDIS_GROUP" | head -n1; }
# For wait_for, which re-runs a command: these re-read Redis on each try.
nothing_pending() { [ "$(pending_count)" -eq 0 ]; }
pending_is() { [ "$(pending_count)" = "$1" ]; }
xlen_at_most() { [ "$(rcli XLEN "$REDIS_STREAM")" -le "$1" ]; }
# One field of the group's XINFO GROUPS entry (lag, last-delivered-id, ...).
group_info() { rcli XINFO GROUPS "$REDIS_STREAM" | sed -n "/^$1\$/{n;p}"; }
group_exists() { rcli XINFO GROUPS "$REDIS_STREAM" 2>/dev/null | grep -qx "$REDIS_GROUP"; }
# Everything read and acknowledged: the group's last delivered id is
# LAST_ID (so the worker really read up to it), lag 0, and then nothing
# pending. In that order: XPENDING read before the delivery would see 0
# for a message about to be read and run.
all_acked_up_to() {
	[ "$(group_info last-delivered-id)" = "$1" ] && [ "$(group_info lag)" = 0 ] &&
		[ "$(pending_count)" = 0 ]
}
# count PATTERN FILE: lines matching the extended regex PATTERN.
count() { grep -cE -- "$1" "$2"; }
count_at_least() { [ "$(count "$2" "$3")" -ge "$1" ]; }
no_containers_of() { [ -z "$(docker ps -aq --filter "label=relay.function=$1")" ]; }
inv_key() { echo "relay:invocation:$REDIS_STREAM:$REDIS_GROUP:$1"; }
key_absent() { [ "$(rcli EXISTS "$1")" = 0 ]; }
# log_has_line LINE FILE: FILE has exactly LINE after its time= field.
log_has_line() { sed 's/^time=[^ ]* //' "$2" | grep -qxF -- "$1"; }

# A handler that runs a while: "start <id>" at once, "finished <id>" after
# $2 seconds.
long_fn() { # name, seconds
	write_fn "$1" long.py "import time
def handler(event):
    print(\"start\", event[\"event_id\"], flush=True)
    time.sleep($2)
    print(\"finished\", event[\"event_id\"], flush=True)
" 'runtime: python3.14
events:
  - handler: long.handler
    pattern: {kind: [long]}
    timeout: 60s
'
}

# line_of PATTERN FILE: the number of the first line with the fixed string.
line_of() { grep -nF -m1 -- "$1" "$2" | cut -d: -f1; }
