# Helpers for the black-box scenarios. Each test_* function runs in its own
# bash process (tests/run) after it_setup; a failing assertion exits it.
# Everything a test starts is tracked and killed on exit, and its temporary
# directory removed.

RELAY=${RELAY:-$ROOT/$BUILD/relay}
RELAY_PLAIN=$ROOT/build/relay

it_setup() {
	set -u
	TMP=$(mktemp -d /tmp/relay-it.XXXXXX)
	PIDS=()
	trap it_cleanup EXIT
	# Tests decide their own environment: nothing leaks in from the caller.
	unset REDIS_URI REDIS_STREAM REDIS_GROUP REDIS_STREAM_RETENTION METRICS_ADDR GIT_WEBHOOK_ADDR \
		LOG_LEVEL MAX_CONCURRENCY MAX_BUFFERED_EVENTS RELAY_FUNCTIONS_DIR RELAY_DATA_DIR \
		DOCKER_HOST DOCKER_TLS_VERIFY DOCKER_CERT_PATH DOCKER_API_VERSION SSL_CERT_FILE
	export RELAY_DATA_DIR=$TMP/data
	export RELAY_FUNCTIONS_DIR=$TMP/functions
	mkdir -p "$RELAY_FUNCTIONS_DIR"
}

it_cleanup() {
	local rc=$? pid
	for pid in "${PIDS[@]}"; do
		kill "$pid" 2>/dev/null
	done
	for pid in "${PIDS[@]}"; do
		wait "$pid" 2>/dev/null
	done
	rm -rf "$TMP"
	exit "$rc"
}

track() { PIDS+=("$1"); }

fail() {
	echo "assertion failed: $*"
	# Keep the logs of the last failure for a closer look.
	rm -rf /tmp/relay-it-last-failure && mkdir -p /tmp/relay-it-last-failure &&
		find "$TMP" -maxdepth 1 -name '*.log' -exec cp {} /tmp/relay-it-last-failure/ \; 2>/dev/null
	for f in out err; do
		if [ -s "$TMP/$f" ]; then
			echo "--- std$f:"
			head -c 4000 "$TMP/$f"
		fi
	done
	exit 1
}

free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 40000))
		if [ -z "$(ss -Htan "( sport = :$p )" 2>/dev/null)" ]; then
			echo "$p"
			return
		fi
	done
}

wait_for() { # seconds command...
	local deadline=$(($(date +%s) + $1))
	shift
	until "$@" >/dev/null 2>&1; do
		[ "$(date +%s)" -lt "$deadline" ] || return 1
		sleep 0.1
	done
}

# start_redis [redis-server args...]: a private redis on a free port
# (REDIS_PORT), data in $TMP. Plain TCP unless the args say otherwise.
start_redis() {
	REDIS_PORT=$(free_port)
	mkdir -p "$TMP/redis-$REDIS_PORT"
	redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no \
		--dir "$TMP/redis-$REDIS_PORT" "$@" >"$TMP/redis-$REDIS_PORT.log" 2>&1 &
	REDIS_PID=$!
	track "$REDIS_PID"
}

wait_redis_plain() {
	wait_for 10 redis-cli -p "$REDIS_PORT" ping || fail "redis on $REDIS_PORT did not start: $(cat "$TMP/redis-$REDIS_PORT.log")"
}

# run cmd...: runs with stdout/stderr captured in $TMP/out, $TMP/err; STATUS.
run() {
	"$@" >"$TMP/out" 2>"$TMP/err" </dev/null
	STATUS=$?
}

assert_status() { [ "$STATUS" -eq "$1" ] || fail "exit status $STATUS, want $1"; }
assert_out_contains() { grep -qF -- "$1" "$TMP/out" || fail "stdout lacks: $1"; }
assert_err_contains() { grep -qF -- "$1" "$TMP/err" || fail "stderr lacks: $1"; }
assert_err_lacks() { ! grep -qF -- "$1" "$TMP/err" || fail "stderr contains: $1"; }
assert_out_lacks() { ! grep -qF -- "$1" "$TMP/out" || fail "stdout contains: $1"; }
assert_out_empty() { [ ! -s "$TMP/out" ] || fail "stdout not empty"; }
assert_err_empty() { [ ! -s "$TMP/err" ] || fail "stderr not empty"; }
assert_err_lines() { [ "$(wc -l <"$TMP/err")" -eq "$1" ] || fail "stderr has $(wc -l <"$TMP/err") lines, want $1"; }
assert_out_eq() { # expected text
	local want=$1
	[ "$(cat "$TMP/out")" = "$want" ] || fail "stdout differs; want:
$want"
}

# start_relay_as LOG HOSTNAME [READY]: relay start in its own UTS namespace
# (the consumer name is the hostname), output in LOG; returns once LOG has
# READY (default: the worker started). RELAY_PID is the relay process.
start_relay_as() {
	local log=$1 host=$2 ready=${3:-msg=\"worker started\"}
	unshare --uts sh -c "hostname $host && exec '$RELAY' start" >"$log" 2>&1 &
	RELAY_PID=$!
	track "$RELAY_PID"
	wait_for 90 grep -qF -- "$ready" "$log" || fail "relay did not start: $(tail -n 20 "$log")"
}

# stop_relay_pid PID: SIGTERM, then at most 30 s for it to exit.
stop_relay_pid() {
	kill -TERM "$1" 2>/dev/null
	local i
	for i in $(seq 1 300); do
		kill -0 "$1" 2>/dev/null || return 0
		sleep 0.1
	done
	fail "relay $1 did not stop within 30 s"
}
