# Observability during real runs: /metrics counters after successes,
# failures, a retry and a DLQ entry (checked by promtool), the metrics port
# taken at startup, a scraper that never reads, and `relay stats` after a
# graceful shutdown.

# A host name of its own (start_relay_as's way): this file runs in the early
# lane beside the in-process programs, whose containers carry the machine's
# host name and no stream or group label, and a relay under that host name
# sweeps them at its start (seen: a warm container of it/warm_container
# removed mid-test, exit status 137).
ob_start() { # log
	relay_bg "$1" unshare --uts sh -c "hostname ob-host && exec '$RELAY' start"
	# 60 s: the start builds each function's image from the stand-in base
	# (about a second each), on 2 cores shared with the other tests.
	wait_for 60 grep -q 'msg="worker started"' "$1" || fail "relay did not start: $(tail -n 20 "$1")"
}

ob_stop() { stop_relay_pid "$RELAY_PID"; }

ob_env() {
	export REDIS_URI=127.0.0.1:$REDIS_PORT REDIS_STREAM=events REDIS_GROUP=relay
}

metric() { # exposition file, exact series name with labels → value
	awk -v k="$2" '$1 == k {print $2}' "$1"
}

scrape() { curl -s --max-time 5 "http://$METRICS_ADDR/metrics" >"$1"; }

dlq_has() { [ "$(redis-cli -p "$REDIS_PORT" XLEN relay:events:dlq)" -ge "$1" ]; }

test_metrics_and_stats_after_a_real_run() {
	redis_up
	ob_env
	export METRICS_ADDR=127.0.0.1:$(free_port)
	write_fn ob-ok h.py 'def handler(event):
    print("ok", event["n"])
' 'runtime: python3.14
events:
  - handler: h.handler
    pattern: {kind: [ok]}
'
	write_fn ob-fail h.py 'import sys
def handler(event):
    sys.exit(3)
' 'runtime: python3.14
events:
  - handler: h.handler
    pattern: {kind: [fail]}
    retries: 1
'
	ob_start "$TMP/relay.log"
	local i id
	for i in 1 2 3; do redis-cli -p "$REDIS_PORT" XADD events '*' event "{\"kind\":\"ok\",\"n\":$i}" >/dev/null; done
	redis-cli -p "$REDIS_PORT" XADD events '*' event '{"kind":"fail"}' >/dev/null
	id=$(redis-cli -p "$REDIS_PORT" XADD events '*' event '{"kind":"nothing"}')
	# attempt 1 fails; after the 1m backoff and reclaim, attempt 2 fails → DLQ.
	# The reclaim takes the message once it has been idle
	# CONSUMER_MIN_PENDING_IDLE_NS (60 s), at a tick every
	# CONSUMER_RECLAIM_INTERVAL_NS (60 s): up to 120 s, plus two container
	# runs; 200 s leaves the rest for a loaded machine.
	wait_for 200 dlq_has 1 || fail "no DLQ entry: $(tail -n 5 "$TMP/relay.log")"
	wait_for 10 acked_through "$REDIS_PORT" events relay "$id" || fail "not everything was acknowledged"
	# The counters settle once the last message is settled: poll, then
	# compare every series exactly.
	settled() { scrape "$TMP/m1" && [ "$(metric "$TMP/m1" events_processed_total)" = 5 ] &&
		[ "$(metric "$TMP/m1" in_flight_invocations)" = 0 ]; }
	wait_for 10 settled || fail "counters did not settle: $(grep -v '^#' "$TMP/m1" | head -n 20)"
	local want
	while read -r series want; do
		[ "$(metric "$TMP/m1" "$series")" = "$want" ] || fail "$series = '$(metric "$TMP/m1" "$series")', want $want"
	done <<'EXPECT'
events_received_total 5
events_processed_total 5
handler_success_total 3
handler_failure_total 2
retries_total 1
dlq_entries_total 1
handler_invocations_total{function="ob-ok",handler="h.handler",outcome="success"} 3
handler_invocations_total{function="ob-fail",handler="h.handler",outcome="failure"} 2
handler_duration_seconds_count{function="ob-ok",handler="h.handler"} 3
function_events_total{function="ob-ok"} 3
function_events_total{function="ob-fail"} 1
function_successes_total{function="ob-ok"} 3
function_failures_total{function="ob-fail"} 2
function_retries_total{function="ob-fail"} 1
function_dlq_entries_total{function="ob-fail"} 1
in_flight_invocations 0
EXPECT
	grep -q '^# TYPE handler_duration_seconds histogram' "$TMP/m1" || fail "no histogram TYPE line"
	grep -q 'handler_duration_seconds_bucket{function="ob-ok",handler="h.handler",le="+Inf"} 3' "$TMP/m1" ||
		fail "no +Inf bucket"
	promtool check metrics <"$TMP/m1" >"$TMP/promtool.out" 2>&1 || fail "promtool: $(cat "$TMP/promtool.out")"
	# Other paths and methods.
	[ "$(curl -s -o /dev/null -w '%{http_code}' "http://$METRICS_ADDR/nope")" = 404 ] || fail "no 404"
	[ "$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://$METRICS_ADDR/metrics")" = 405 ] || fail "no 405"

	ob_stop
	grep -q 'msg="Relay stopped"' "$TMP/relay.log" || fail "no Relay stopped line"
	run "$RELAY" stats
	assert_status 0
	assert_out_contains "Events processed:    5"
	assert_out_contains "Handler successes:   3"
	assert_out_contains "Handler failures:    2"
	assert_out_contains "Retries:             1"
	assert_out_contains "DLQ entries:         1"
	run "$RELAY" function inspect ob-fail
	assert_status 0
	assert_out_contains "Handler failures:    2"
	assert_out_contains "DLQ entries:         1"
	docker images --format '{{.Repository}}:{{.Tag}}' 'relay-fn-ob-*' | xargs -r docker rmi -f >/dev/null 2>&1
}

metrics_up() { curl -sf --max-time 2 "http://$METRICS_ADDR/metrics" >/dev/null; }

test_metrics_port_taken_at_startup_is_retried() {
	redis_up
	ob_env
	local port
	port=$(free_port)
	export METRICS_ADDR=127.0.0.1:$port
	socat "TCP-LISTEN:$port,bind=127.0.0.1,reuseaddr,fork" /dev/null &
	local blocker=$!
	track "$blocker"
	wait_for 10 bash -c "echo > /dev/tcp/127.0.0.1/$port" || fail "blocker did not listen"
	ob_start "$TMP/relay.log"
	grep -q 'level=WARN' "$TMP/relay.log" || fail "no WARN for the taken port"
	local id
	id=$(redis-cli -p "$REDIS_PORT" XADD events '*' event '{"kind":"nothing"}')
	wait_for 10 acked_through "$REDIS_PORT" events relay "$id" || fail "not consuming while the port is taken"
	kill "$blocker"
	wait "$blocker" 2>/dev/null
	# The bind is retried every HTTP_DEFAULT_RETRY_INTERVAL_MS (2 s): 20 s
	# is ten tries.
	wait_for 20 metrics_up || fail "never bound after the port freed"
	grep -q "Metrics http server listening on 127.0.0.1:$port" "$TMP/relay.log" || fail "no listening line"
	ob_stop
}

test_scraper_that_never_reads_does_not_stop_processing() {
	redis_up
	ob_env
	export METRICS_ADDR=127.0.0.1:$(free_port)
	ob_start "$TMP/relay.log"
	wait_for 10 metrics_up || fail "metrics not up"
	local port=${METRICS_ADDR##*:}
	# A client that sends half a request and never reads, and one that
	# sends nothing at all.
	exec 3<>"/dev/tcp/127.0.0.1/$port"
	printf 'GET /metrics HTTP/1.1\r\n' >&3
	exec 4<>"/dev/tcp/127.0.0.1/$port"
	local i id
	for i in $(seq 1 20); do id=$(redis-cli -p "$REDIS_PORT" XADD events '*' event "{\"n\":$i}"); done
	wait_for 15 acked_through "$REDIS_PORT" events relay "$id" || fail "processing stalled"
	metrics_up || fail "another scrape failed while a client hangs"
	exec 3>&- 4>&-
	ob_stop
}
