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
	# Relays this test started and has not yet reaped: pid -> log file.
	declare -gA RELAY_LOGS=()
	SKIPPED_PARTS=0
	# The test's own output, for fail: wait_for sends a polled command's
	# output to /dev/null, and an assertion failing inside it must still say
	# why.
	exec {IT_OUT}>&1
	trap it_cleanup EXIT
	# Tests decide their own environment: nothing leaks in from the caller.
	unset REDIS_URI REDIS_SENTINEL_USERNAME REDIS_SENTINEL_PASSWORD REDIS_STREAM REDIS_GROUP REDIS_STREAM_RETENTION METRICS_ADDR GIT_WEBHOOK_ADDR \
		LOG_LEVEL MAX_CONCURRENCY MAX_BUFFERED_EVENTS STANDBY_MAX STANDBY_IDLE RELAY_OCI_RUNTIME RELAY_FUNCTIONS_DIR RELAY_DATA_DIR \
		DOCKER_HOST DOCKER_TLS_VERIFY DOCKER_CERT_PATH DOCKER_API_VERSION SSL_CERT_FILE SSL_CERT_DIR REDIS_SENTINEL_TLS \
		OTEL_SDK_DISABLED OTEL_EXPORTER_OTLP_ENDPOINT OTEL_EXPORTER_OTLP_TRACES_ENDPOINT OTEL_EXPORTER_OTLP_PROTOCOL \
		OTEL_EXPORTER_OTLP_TRACES_PROTOCOL OTEL_EXPORTER_OTLP_HEADERS OTEL_EXPORTER_OTLP_TIMEOUT OTEL_RESOURCE_ATTRIBUTES \
		OTEL_SERVICE_NAME OTEL_TRACES_SAMPLER OTEL_TRACES_SAMPLER_ARG OTEL_EXPORTER_OTLP_CERTIFICATE \
		OTEL_BSP_MAX_QUEUE_SIZE OTEL_BSP_MAX_EXPORT_BATCH_SIZE OTEL_BSP_SCHEDULE_DELAY
	export RELAY_DATA_DIR=$TMP/data
	export RELAY_FUNCTIONS_DIR=$TMP/functions
	mkdir -p "$RELAY_FUNCTIONS_DIR"
}

it_cleanup() {
	local rc=$? pid
	# A relay the test left running must still stop cleanly: SIGTERM, exit 0,
	# no sanitizer report. A test that passed fails here otherwise.
	for pid in "${!RELAY_LOGS[@]}"; do
		term_relay "$pid" || {
			echo "(relay $pid was left running by the test)"
			rc=1
		}
	done
	# Every log and captured output of the test, read once more: a report
	# that did not change an exit status is still a failure.
	if ! sanitizer_clean "$TMP"/*.log "$TMP/out" "$TMP/err"; then
		rc=1
	fi
	for pid in "${PIDS[@]}"; do
		kill "$pid" 2>/dev/null
	done
	for pid in "${PIDS[@]}"; do
		wait "$pid" 2>/dev/null
	done
	rm -rf "$TMP"
	# A test that passed but could not try everything is skipped, not passed.
	[ "$rc" -eq 0 ] && [ "$SKIPPED_PARTS" -gt 0 ] && rc=77
	exit "$rc"
}

track() { PIDS+=("$1"); }

# skip REASON: this test cannot run here; tests/run counts it as skipped
# (exit status 77 with a "SKIP: " line), never as passed. Under CI=true
# nothing may be skipped (the test command installs and starts everything a
# test needs): a skip there is a failure.
skip() {
	no_skip_in_ci "$*"
	echo "SKIP: $*"
	exit 77
}

# skip_part REASON: a part of this test cannot run here; the rest goes on,
# and the test is counted as skipped unless it fails (a failure under
# CI=true, as skip).
skip_part() {
	no_skip_in_ci "$*"
	echo "SKIP: $*"
	SKIPPED_PARTS=$((SKIPPED_PARTS + 1))
}

no_skip_in_ci() {
	[ "${CI:-}" != true ] || fail "would skip under CI=true, where nothing may be skipped: $1"
}

# What AddressSanitizer, LeakSanitizer and UndefinedBehaviorSanitizer print
# when they find something (tests/run sets them to abort on the first one).
SAN_REPORT='ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:|Sanitizer:DEADLYSIGNAL|SUMMARY: (Address|Leak|UndefinedBehavior)Sanitizer'

# sanitizer_clean FILE...: prints any sanitizer report found in the files
# (missing files are ignored); status 1 when there is one.
sanitizer_clean() {
	local f found=0
	for f in "$@"; do
		[ -f "$f" ] || continue
		if grep -qE -- "$SAN_REPORT" "$f"; then
			echo "sanitizer report in $(basename "$f"):"
			grep -E -B2 -A30 -- "$SAN_REPORT" "$f" | head -n 60 | sed 's/^/  /'
			found=1
		fi
	done
	[ "$found" -eq 0 ]
}

fail() {
	{
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
	} >&"${IT_OUT:-1}"
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
# rcli ARGS...: redis-cli against the test's Redis (start_redis).
rcli() { redis-cli -p "$REDIS_PORT" "$@"; }

# write_fn NAME FILE BODY TEMPLATE: the function NAME in the functions
# directory, its handler module FILE holding BODY and its template.yaml
# TEMPLATE (both written as given, no newline added).
write_fn() {
	mkdir -p "$RELAY_FUNCTIONS_DIR/$1"
	printf '%s' "$3" >"$RELAY_FUNCTIONS_DIR/$1/$2"
	printf '%s' "$4" >"$RELAY_FUNCTIONS_DIR/$1/template.yaml"
}

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

# redis_up [ARGS...]: start_redis ARGS, then wait until it answers.
redis_up() {
	start_redis "$@"
	wait_redis_plain
}

# relay_env: the usual relay settings for the test's Redis (stream
# "events", group "relay").
relay_env() { export REDIS_URI=127.0.0.1:$REDIS_PORT REDIS_STREAM=events REDIS_GROUP=relay; }

# group_field PORT STREAM GROUP FIELD: one field (lag, last-delivered-id,
# pending, entries-read) of the group's entry in XINFO GROUPS.
group_field() {
	redis-cli -p "$1" XINFO GROUPS "$2" |
		awk -v g="$3" -v f="$4" 'NR % 2 { k = $0; next } k == "name" { cur = $0 } cur == g && k == f { print }'
}

# acked_through PORT STREAM GROUP ID: the group has read everything up to
# and including ID (last-delivered-id is ID, lag 0) and nothing is pending.
# Pending 0 alone also holds when the worker never read the message.
acked_through() {
	[ "$(group_field "$1" "$2" "$3" last-delivered-id)" = "$4" ] &&
		[ "$(group_field "$1" "$2" "$3" lag)" = 0 ] &&
		[ "$(redis-cli -p "$1" XPENDING "$2" "$3" | head -n1)" = 0 ]
}

# The one way a test runs a command whose status or output it checks (a
# relay CLI command above all):
#
#   run_expect STATUS cmd...          stdin /dev/null
#   run_expect_from FILE STATUS cmd...  stdin from FILE
#
# stdout and stderr are captured in $TMP/out and $TMP/err (the previous
# command's are replaced, after they were read for reports); the test fails
# at once unless the exit status is exactly STATUS and neither output has a
# sanitizer report. A report that did not change the status fails it too,
# and so does exit status 134: tests/run makes every sanitizer abort
# (abort_on_error), so 134 is a sanitizer's finding even when the report
# went elsewhere. STATUS (the variable) is the exit status.
run_expect() {
	local want=$1
	shift
	run_from /dev/null "$@"
	[ "$STATUS" -eq "$want" ] || fail "exit status $STATUS, want $want: $*"
}

run_expect_from() {
	local in=$1 want=$2
	shift 2
	run_from "$in" "$@"
	[ "$STATUS" -eq "$want" ] || fail "exit status $STATUS, want $want: $*"
}

# run cmd... / run_from FILE cmd...: the same checks but for the status,
# which the test then checks with assert_status (or reads from STATUS in a
# loop that waits for a given one).
run() { run_from /dev/null "$@"; }

run_from() {
	local in=$1
	shift
	"$@" >"$TMP/out" 2>"$TMP/err" <"$in"
	STATUS=$?
	sanitizer_clean "$TMP/out" "$TMP/err" || fail "sanitizer report from: $*"
	[ "$STATUS" -ne 134 ] || fail "exit status 134 (SIGABRT: a sanitizer's abort_on_error) from: $*"
}

# relay_secret_set NAME VALUE: relay secret set NAME, VALUE (printf %s: those
# bytes) on stdin, through run_expect_from: exit 0 and clean output.
relay_secret_set() {
	printf '%s' "$2" >"$TMP/secret-value"
	run_expect_from "$TMP/secret-value" 0 "$RELAY" secret set "$1"
	rm -f "$TMP/secret-value"
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

# relay_bg LOG CMD...: starts a long-running relay (CMD is the relay binary,
# or a wrapper such as valgrind, with its arguments) in the background, output
# in LOG; RELAY_PID is its pid. Every relay started so is reaped by
# stop_relay_pid or kill9_relay_pid, or else at cleanup; either way its exit
# status and its whole log are checked.
relay_bg() {
	local log=$1
	shift
	"$@" >"$log" 2>&1 </dev/null &
	RELAY_PID=$!
	track "$RELAY_PID"
	RELAY_LOGS[$RELAY_PID]=$log
}

# start_relay_as LOG HOSTNAME [READY]: relay start in its own UTS namespace
# (the consumer name is the hostname), output in LOG; returns once LOG has
# READY (default: the worker started). RELAY_PID is the relay process.
start_relay_as() {
	local log=$1 host=$2 ready=${3:-msg=\"worker started\"}
	relay_bg "$log" unshare --uts sh -c "hostname $host && exec '$RELAY' start"
	wait_for 90 grep -qF -- "$ready" "$log" || fail "relay did not start: $(tail -n 20 "$log")"
}

# reap_relay PID WANT: waits for the relay (already signalled) and checks
# that it exited with WANT and that its log has no sanitizer report; prints
# what is wrong and returns 1 otherwise.
reap_relay() {
	local pid=$1 want=$2 log=${RELAY_LOGS[$1]:-} rc=0 bad=0
	wait "$pid" 2>/dev/null || rc=$?
	unset "RELAY_LOGS[$pid]"
	if [ -n "$log" ] && ! sanitizer_clean "$log"; then
		echo "relay $pid: sanitizer report in its log"
		bad=1
	fi
	if [ "$rc" -ne "$want" ]; then
		echo "relay $pid exited with $rc, want $want"
		[ -z "$log" ] || tail -n 30 "$log" | sed 's/^/  /'
		bad=1
	fi
	[ "$bad" -eq 0 ]
}

# term_relay PID: SIGTERM, at most 30 s to exit, then reap_relay PID 0.
term_relay() {
	kill -TERM "$1" 2>/dev/null
	local i
	for i in $(seq 1 300); do
		kill -0 "$1" 2>/dev/null || {
			# An explicit status: a bare return in the EXIT trap would
			# give the status from before the trap.
			reap_relay "$1" 0
			return $?
		}
		sleep 0.1
	done
	kill -KILL "$1" 2>/dev/null
	wait "$1" 2>/dev/null
	unset "RELAY_LOGS[$1]"
	echo "relay $1 did not stop within 30 s of SIGTERM"
	return 1
}

# stop_relay_pid PID: SIGTERM; the relay must exit 0 within 30 s with a
# clean log.
stop_relay_pid() { term_relay "$1" || fail "relay $1 did not stop cleanly"; }

# kill9_relay_pid PID: SIGKILL (a crash the test causes); exit status 137
# and no sanitizer report up to that point.
kill9_relay_pid() {
	kill -KILL "$1"
	reap_relay "$1" 137 || fail "relay $1 after SIGKILL"
}

# start_tls_redis DIR: a redis-server speaking TLS only, on a new REDIS_PORT,
# with DIR's server.pem/server.key and ca.pem; returns once it answers.
start_tls_redis() { # cert dir
	local d=$1
	REDIS_PORT=$(free_port)
	mkdir -p "$TMP/redis-$REDIS_PORT"
	redis-server --bind 127.0.0.1 --port 0 --tls-port "$REDIS_PORT" --tls-cert-file "$d/server.pem" \
		--tls-key-file "$d/server.key" --tls-ca-cert-file "$d/ca.pem" --tls-auth-clients no \
		--save '' --appendonly no --dir "$TMP/redis-$REDIS_PORT" >"$TMP/redis-$REDIS_PORT.log" 2>&1 &
	track $!
	wait_for 10 redis-cli --tls --cacert "$d/ca.pem" -p "$REDIS_PORT" ping ||
		fail "TLS redis did not start: $(cat "$TMP/redis-$REDIS_PORT.log")"
}

# rm_fn_images NAME...: removes every image of these functions (relay-fn-NAME:*).
rm_fn_images() {
	local name
	for name in "$@"; do
		docker images --format '{{.Repository}}:{{.Tag}}' "relay-fn-$name" | xargs -r docker rmi -f >/dev/null 2>&1
	done
}
