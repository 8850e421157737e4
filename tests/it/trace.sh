# Tracing (docs/operations.md, "Tracing"): W3C trace context from the
# producer's stream entry through Relay's spans into a Node handler that
# uses the real OpenTelemetry SDK from npm, checked at a small OTLP/HTTP
# receiver (otlp_receiver.py) that keeps every request's body and headers;
# an invalid, an absent and an unsampled traceparent; a collector that is
# down or hangs costs the event path nothing.
#
# Function names start with "tr-"; their images are removed at exit. The
# OpenTelemetry packages are installed with the host's npm once into
# /var/cache/relay-it/otel-node (the handler containers' npm does not trust
# this network's TLS proxy, the host's does) and copied into the function
# directory, whose node_modules the image takes as it is.

TR_NPM_CACHE=/var/cache/relay-it/otel-node
TR_PKGS="@opentelemetry/api@1.9.1 @opentelemetry/core@2.12.1 @opentelemetry/sdk-trace-base@2.12.1 @opentelemetry/exporter-trace-otlp-http@0.223.1 @opentelemetry/resources@2.12.1"

tr_rmi() { rm_fn_images tr-node tr-py tr-warm; }

# tr_receiver DIR MODE [PORT]: starts otlp_receiver.py; RX_PORT, RX_PID.
tr_receiver() {
	mkdir -p "$1"
	RX_PORT=${3:-$(free_port)}
	python3 "$ROOT/tests/it/otlp_receiver.py" "$1" "$RX_PORT" "$2" >"$1.log" 2>&1 &
	RX_PID=$!
	track "$RX_PID"
	wait_for 10 test -e "$1/ready" || fail "receiver did not start: $(cat "$1.log")"
}

tr_node_modules() {
	if [ ! -e "$TR_NPM_CACHE/.done" ]; then
		rm -rf "$TR_NPM_CACHE" && mkdir -p "$TR_NPM_CACHE" &&
			(cd "$TR_NPM_CACHE" && echo '{}' >package.json &&
				timeout 120 npm install --no-audit --no-fund --save-exact $TR_PKGS >npm.log 2>&1) &&
			touch "$TR_NPM_CACHE/.done" || fail "npm install of the OpenTelemetry SDK failed: $(tail -n 5 "$TR_NPM_CACHE/npm.log")"
	fi
	cp -r "$TR_NPM_CACHE/node_modules" "$RELAY_FUNCTIONS_DIR/tr-node/"
}

# The Docker bridge's gateway: where a handler container reaches the host.
tr_gateway() {
	local g
	g=$(docker network inspect bridge -f '{{range .IPAM.Config}}{{.Gateway}}{{end}}')
	[ -n "$g" ] || g=$(ip -4 -o addr show docker0 | awk '{print $4}' | cut -d/ -f1)
	[ -n "$g" ] || fail "cannot find the Docker bridge's gateway"
	echo "$g"
}

tr_functions() { # the URL the Node handler exports its own span to
	mkdir -p "$RELAY_FUNCTIONS_DIR/tr-node"
	cat >"$RELAY_FUNCTIONS_DIR/tr-node/handler.js" <<'JS'
import { context, propagation } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { BasicTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';

const provider = new BasicTracerProvider({
  resource: resourceFromAttributes({ 'service.name': 'tr-node-handler' }),
  spanProcessors: [new SimpleSpanProcessor(new OTLPTraceExporter({ url: process.env.HANDLER_OTLP_URL }))],
});
propagation.setGlobalPropagator(new W3CTraceContextPropagator());

export async function handler(event) {
  // TRACEPARENT / TRACESTATE come from Relay: the invocation span is the parent.
  const parent = propagation.extract(context.active(),
    { traceparent: process.env.TRACEPARENT, tracestate: process.env.TRACESTATE });
  const span = provider.getTracer('tr-node').startSpan('handle ' + event.kind, {}, parent);
  span.end();
  await provider.forceFlush();
  console.log('handled ' + event.kind);
}
JS
	printf 'runtime: node24\nenv:\n  HANDLER_OTLP_URL: %s\nevents:\n  - handler: handler.handler\n    pattern: {kind: [node]}\n' \
		"$1" >"$RELAY_FUNCTIONS_DIR/tr-node/template.yaml"
	tr_node_modules
	write_fn tr-py h.py 'import os
def handler(event):
    print("tp", event["n"], os.environ.get("TRACEPARENT", "-"), os.environ.get("TRACESTATE", "-"))
' 'runtime: python3.14
events:
  - handler: h.handler
    pattern: {kind: [py]}
'
	# A warm container's environment was fixed before the event: the
	# bootstrap sets TRACEPARENT from the line before the event.
	write_fn tr-warm h.py 'import os
def handler(event):
    print("warm", os.environ.get("TRACEPARENT", "-"), os.environ.get("TRACESTATE", "-"))
' 'runtime: python3.14
warm: {}
events:
  - handler: h.handler
    pattern: {kind: [warm]}
'
}

# tr_spans DIR: every span the receiver got, one JSON array, each span with
# its resource's service.name as "svc" (and the request's number as "req").
tr_spans() {
	local f
	for f in "$1"/req-*.json; do
		[ -e "$f" ] || continue
		jq -c --arg req "${f##*/}" '.resourceSpans[] | (.resource.attributes | map(select(.key == "service.name"))[0].value.stringValue) as $svc |
			.scopeSpans[].spans[] | . + {svc: $svc, req: $req}' "$f"
	done | jq -s .
}

attr() { # span JSON (stdin), key → value
	jq -r --arg k "$1" '.attributes[] | select(.key == $k) | .value | (.stringValue // .intValue)'
}

test_trace_spans_connect_producer_relay_and_node_sdk() {
	trap 'tr_rc=$?; tr_rmi; (exit "$tr_rc"); it_cleanup' EXIT
	redis_up
	relay_env
	tr_receiver "$TMP/rx" ok
	tr_functions "http://$(tr_gateway):$RX_PORT/v1/traces"
	export OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$RX_PORT
	export OTEL_EXPORTER_OTLP_HEADERS='x-api-key=s3cr%65t-value,x-tenant=it'
	export OTEL_RESOURCE_ATTRIBUTES=deployment.environment=it
	export LOG_LEVEL=DEBUG
	start_relay_as "$TMP/relay.log" tr-worker
	grep -qF "msg=\"span export on (OTLP/HTTP JSON)\" endpoint=http://127.0.0.1:$RX_PORT/v1/traces" "$TMP/relay.log" ||
		fail "no span export line: $(grep export "$TMP/relay.log")"

	local T=4bf92f3577b34da6a3ce929d0e0e4736 P=00f067aa0ba902b7 U=0af7651916cd43dd8448eb211c80319c
	local node bad none off
	node=$(rcli XADD events '*' event '{"kind":"node"}' traceparent "00-$T-$P-01" tracestate 'vendor=x')
	bad=$(rcli XADD events '*' event '{"kind":"py","n":"bad"}' traceparent "00-${T^^}-$P-01")
	none=$(rcli XADD events '*' event '{"kind":"py","n":"none"}')
	off=$(rcli XADD events '*' event '{"kind":"py","n":"off"}' traceparent "00-$U-$P-00")
	local W=5e0c63257de34c926f9efcd03927272e warm1 warm2
	warm1=$(rcli XADD events '*' event '{"kind":"warm"}' traceparent "00-$W-$P-01" tracestate 'w=1')
	wait_for 60 acked_through "$REDIS_PORT" events relay "$warm1" || fail "warm 1 not acknowledged: $(tail -n 20 "$TMP/relay.log")"
	warm2=$(rcli XADD events '*' event '{"kind":"warm"}')
	wait_for 90 acked_through "$REDIS_PORT" events relay "$warm2" || fail "not all acknowledged: $(grep -v "level=DEBUG" "$TMP/relay.log" | tail -n 30)"
	# Every message's spans are queued by now; the exporter sends every
	# OTEL_BSP_SCHEDULE_DELAY (2 s by default) and at stop: stop, then read.
	stop_relay_pid "$RELAY_PID"

	# The plain lines are as they always were (the Try-it contract).
	grep -qx "relay: function \"tr-node\" rule \"handler.handler\" matched event \"$node\"" "$TMP/relay.log" || fail "matched line changed"
	grep -qx "relay: function \"tr-node\" handler \"handler.handler\": handled node" "$TMP/relay.log" || fail "no handler line"

	tr_spans "$TMP/rx" >"$TMP/spans.json"
	local msg inv hspan msg_id inv_id
	# One connected trace: producer (P) -> message -> invocation -> handler.
	msg=$(jq -c --arg t "$T" --arg id "$node" '[.[] | select(.traceId == $t and .kind == 5)] | .[0] // empty' "$TMP/spans.json")
	[ -n "$msg" ] || fail "no message span in trace $T: $(jq -c "map({traceId, spanId, parentSpanId, kind, name})" "$TMP/spans.json")"
	[ "$(jq -r .parentSpanId <<<"$msg")" = "$P" ] || fail "message span's parent: $msg"
	[ "$(jq -r '.name + " " + .svc + " " + .traceState' <<<"$msg")" = "process events relay vendor=x" ] || fail "message span: $msg"
	[ "$(attr messaging.system <<<"$msg")" = redis ] || fail "messaging.system: $msg"
	[ "$(attr messaging.operation.type <<<"$msg")" = process ] || fail "operation: $msg"
	[ "$(attr messaging.destination.name <<<"$msg")" = events ] || fail "destination: $msg"
	[ "$(attr messaging.consumer.group.name <<<"$msg")" = relay ] || fail "group: $msg"
	[ "$(attr messaging.message.id <<<"$msg")" = "$node" ] || fail "message id: $msg"
	[ "$(jq -r '.status.code // 0' <<<"$msg")" = 0 ] || fail "message span status: $msg"
	msg_id=$(jq -r .spanId <<<"$msg")
	inv=$(jq -c --arg t "$T" --arg p "$msg_id" '[.[] | select(.traceId == $t and .parentSpanId == $p)] | .[0] // empty' "$TMP/spans.json")
	[ -n "$inv" ] || fail "no invocation span under $msg_id: $(jq -c "map({traceId, spanId, parentSpanId, kind, name})" "$TMP/spans.json")"
	[ "$(jq -r '.name + " " + (.kind | tostring)' <<<"$inv")" = "invoke tr-node/handler.handler 1" ] || fail "invocation span: $inv"
	[ "$(attr relay.attempt <<<"$inv") $(attr relay.exit_code <<<"$inv") $(attr relay.outcome <<<"$inv") $(attr relay.start_mode <<<"$inv")" = \
		"1 0 success on_demand" ] || fail "invocation attributes: $inv"
	inv_id=$(jq -r .spanId <<<"$inv")
	hspan=$(jq -c --arg t "$T" --arg p "$inv_id" '[.[] | select(.traceId == $t and .parentSpanId == $p)] | .[0] // empty' "$TMP/spans.json")
	[ "$(jq -r '.svc + " " + .name' <<<"$hspan")" = "tr-node-handler handle node" ] || fail "no handler span under the invocation span: $(jq -c "map({traceId, spanId, parentSpanId, kind, name})" "$TMP/spans.json")"
	# The resource and the headers of Relay's requests; the header value
	# (a secret, percent-decoded) reaches the collector and never the log.
	grep -lq "^x-api-key: s3cret-value$" "$TMP"/rx/req-*.hdr || fail "no x-api-key header: $(cat "$TMP"/rx/req-*.hdr)"
	grep -lq "^x-tenant: it$" "$TMP"/rx/req-*.hdr || fail "no x-tenant header"
	jq -e 'any(.[]; .req as $r | .svc == "relay")' "$TMP/spans.json" >/dev/null || fail "no relay resource"
	jq -se 'map(.resourceSpans[].resource.attributes | select(.[0].value.stringValue == "relay")) | all(. == [
		{key: "service.name", value: {stringValue: "relay"}},
		{key: "deployment.environment", value: {stringValue: "it"}}])' "$TMP"/rx/req-*.json >/dev/null ||
		fail "relay's resource: $(jq -c '.resourceSpans[].resource' "$TMP"/rx/req-*.json)"
	! grep -q "s3cret" "$TMP/relay.log" || fail "the header value reached the log"
	# Relay's structured records about the message carry its trace id.
	grep -q "msg=\"handler executed\" function=tr-node .* message_id=$node .*trace_id=$T" "$TMP/relay.log" ||
		fail "no trace_id in the handler record: $(grep 'handler executed' "$TMP/relay.log")"

	# Invalid (upper case) and absent traceparents: each a new trace, its
	# message span a root; the container got the invocation span as parent.
	local n line tid sid
	for n in bad none; do
		line=$(grep -o "handler \"h.handler\": tp $n 00-[0-9a-f]*-[0-9a-f]*-01 -$" "$TMP/relay.log") || fail "$n: no TRACEPARENT line"
		tid=$(sed 's/.* 00-\([0-9a-f]*\)-.*/\1/' <<<"$line")
		sid=$(sed 's/.* 00-[0-9a-f]*-\([0-9a-f]*\)-01 -$/\1/' <<<"$line")
		[ "${#tid}" = 32 ] && [ "$tid" != "$T" ] && [ "$tid" != "${T^^}" ] || fail "$n: trace $tid"
		jq -e --arg t "$tid" --arg s "$sid" '[.[] | select(.traceId == $t)] |
			(map(select(.kind == 5 and (has("parentSpanId") | not))) | length) == 1 and
			(map(select(.kind == 1 and .spanId == $s)) | length) == 1' "$TMP/spans.json" >/dev/null ||
			fail "$n: spans of trace $tid: $(jq -c --arg t "$tid" '[.[] | select(.traceId == $t)]' "$TMP/spans.json")"
	done
	# Not sampled (flags 00): context propagated, nothing exported.
	grep -qE "handler \"h.handler\": tp off 00-$U-[0-9a-f]{16}-00 -$" "$TMP/relay.log" || fail "off: TRACEPARENT not propagated unsampled"
	jq -e --arg t "$U" 'all(.[]; .traceId != $t)' "$TMP/spans.json" >/dev/null || fail "an unsampled span was exported"
	# Warm: the same container served both; the first got the producer's
	# trace and tracestate, the second a new trace and no TRACESTATE.
	local w1 w2
	w1=$(grep -o '"h.handler": warm 00-[0-9a-f-]* .*' "$TMP/relay.log" | sed -n 1p)
	w2=$(grep -o '"h.handler": warm 00-[0-9a-f-]* .*' "$TMP/relay.log" | sed -n 2p)
	[[ "$w1" =~ ^'"h.handler": warm 00-'$W-[0-9a-f]{16}-01' w=1'$ ]] || fail "warm 1: $w1"
	[[ "$w2" =~ ^'"h.handler": warm 00-'[0-9a-f]{32}-[0-9a-f]{16}-01' -'$ ]] && [[ "$w2" != *"$W"* ]] || fail "warm 2: $w2"
	jq -e --arg t "$W" '[.[] | select(.traceId == $t and .kind == 1)] | length == 1 and
		(.[0].attributes[] | select(.key == "relay.start_mode") | .value.stringValue) == "warm"' "$TMP/spans.json" >/dev/null ||
		fail "warm invocation span: $(jq -c --arg t "$W" '[.[] | select(.traceId == $t)]' "$TMP/spans.json")"
	# Each trace's spans exactly: 3 in the producer's (message,
	# invocation, handler), 2 in each other one; no duplicate.
	[ "$(jq length "$TMP/spans.json")" = 11 ] || fail "spans: $(jq -c 'map({traceId, name})' "$TMP/spans.json")"
}

# tr_batch N KIND: XADDs N events, waits until all are acknowledged and
# prints how long that took, in milliseconds.
tr_batch() {
	local i last t0
	t0=$(date +%s%N)
	for i in $(seq 1 "$1"); do last=$(rcli XADD events '*' event "{\"kind\":\"py\",\"n\":\"$2$i\"}"); done
	wait_for 120 acked_through "$REDIS_PORT" events relay "$last" || fail "$2: not all acknowledged: $(tail -n 20 "$TMP/relay.log")"
	echo $((($(date +%s%N) - t0) / 1000000))
}

metric_value() { curl -s --max-time 5 "http://$METRICS_ADDR/metrics" | awk -v k="$1" '$1 == k {print $2}'; }

test_trace_collector_down_or_hanging_costs_processing_nothing() {
	trap 'tr_rc=$?; tr_rmi; (exit "$tr_rc"); it_cleanup' EXIT
	redis_up
	relay_env
	tr_functions "http://127.0.0.1:1/unused"
	rm -rf "$RELAY_FUNCTIONS_DIR/tr-node"
	tr_receiver "$TMP/up" ok
	local port=$RX_PORT up_pid=$RX_PID
	export OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$port
	# A hanging collector holds each request this long: far past the
	# batches' processing time, so a wait on it would show.
	export OTEL_EXPORTER_OTLP_TIMEOUT=20000
	export METRICS_ADDR=127.0.0.1:$(free_port)
	start_relay_as "$TMP/relay.log" tr-worker-2
	local up down hang
	tr_batch 1 warm >/dev/null # the first run of the image: not measured
	up=$(tr_batch 8 up)
	wait_for 10 eval 'ls "$TMP"/up/req-*.json >/dev/null 2>&1' || fail "collector up: nothing exported"
	# What arrived is what is counted as exported.
	tr_received() { jq -s 'map([.resourceSpans[].scopeSpans[].spans[]] | length) | add' "$TMP"/up/req-*.json; }
	wait_for 10 eval '[ "$(tr_received)" -ge 2 ] && [ "$(metric_value otel_spans_exported_total)" = "$(tr_received)" ]' ||
		fail "exported $(metric_value otel_spans_exported_total), received $(tr_received)"
	kill "$up_pid"
	wait "$up_pid" 2>/dev/null
	down=$(tr_batch 8 down)
	# Spans of the down batch are dropped and counted once the exporter
	# tried (every OTEL_BSP_SCHEDULE_DELAY, 2 s by default).
	wait_for 10 eval '[ "$(metric_value otel_export_failures_total)" -ge 1 ] && [ "$(metric_value otel_spans_dropped_total)" -ge 1 ]' ||
		fail "no export failure or drop counted: $(curl -s "http://$METRICS_ADDR/metrics" | grep otel_)"
	tr_receiver "$TMP/hang" hang "$port"
	hang=$(tr_batch 8 hang)
	# Premise: the exporter is stuck on the hanging collector now.
	wait_for 10 test -s "$TMP/hang/accepted" || fail "the exporter never reached the hanging collector"
	# The event path never waits on the exporter (a queue slot under a
	# mutex): 2x the collector-up time leaves container start-up variance
	# on a loaded 2-core machine (measured 1.8 to 2.0 s for each batch of 8 here).
	echo "8 events: collector up ${up} ms, down ${down} ms, hanging ${hang} ms"
	[ "$down" -le $((2 * up)) ] || fail "collector down: ${down} ms for 8 events, collector up ${up} ms"
	[ "$hang" -le $((2 * up)) ] || fail "collector hanging: ${hang} ms for 8 events, collector up ${up} ms"
	# Stopping with a request hanging: the flush is bounded by
	# TRACE_FLUSH_NS (5 s) plus curl's progress check (about 1 s); 12 s
	# leaves the containers' removal and a loaded machine the rest.
	local t0=$SECONDS
	stop_relay_pid "$RELAY_PID"
	[ $((SECONDS - t0)) -le 12 ] || fail "stop took $((SECONDS - t0)) s with a hanging collector"
}

# The plain build under valgrind through the export path: spans encoded
# into the queue's batches (small ones: OTEL_BSP_*), a batch sent while
# events still come, a failed attempt's ERROR status, the flush at stop: no
# memory errors, no leaks, and every span reached the collector.
test_trace_valgrind_export_path() {
	[ -x "$RELAY_PLAIN" ] || fail "$RELAY_PLAIN not built (make all)"
	trap 'tr_rc=$?; rm_fn_images tr-vg; (exit "$tr_rc"); it_cleanup' EXIT
	redis_up
	relay_env
	write_fn tr-vg h.py 'def handler(event):
    if event["n"] == "fail":
        raise ValueError("fails")
    print("vg", event["n"])
' 'runtime: python3.14
events:
  - handler: h.handler
    retries: 0
    pattern: {kind: [vg]}
'
	tr_receiver "$TMP/rx" ok
	export OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$RX_PORT
	# Batches of 4 spans, a partial one held for 10 minutes: only full
	# batches go out while Relay runs, the rest at the stop.
	export OTEL_BSP_MAX_EXPORT_BATCH_SIZE=4 OTEL_BSP_SCHEDULE_DELAY=600000
	relay_bg "$TMP/relay.log" unshare --uts sh -c "hostname tr-vg && exec valgrind --leak-check=full --errors-for-leak-kinds=definite,possible --error-exitcode=99 '$RELAY_PLAIN' start"
	wait_for 120 grep -qF 'msg="worker started"' "$TMP/relay.log" || fail "relay did not start: $(tail -n 20 "$TMP/relay.log")"
	local n last
	for n in 1 2 3; do last=$(rcli XADD events '*' event "{\"kind\":\"vg\",\"n\":\"$n\"}"); done
	wait_for 120 acked_through "$REDIS_PORT" events relay "$last" || fail "not acknowledged: $(tail -n 20 "$TMP/relay.log")"
	# Six spans so far: a full batch of 4 went out at once.
	wait_for 30 eval 'ls "$TMP"/rx/req-*.json >/dev/null 2>&1' || fail "no full batch sent while running"
	rcli XADD events '*' event '{"kind":"vg","n":"fail"}' >/dev/null
	for n in 4 5; do last=$(rcli XADD events '*' event "{\"kind\":\"vg\",\"n\":\"$n\"}"); done
	wait_for 120 acked_through "$REDIS_PORT" events relay "$last" || fail "not acknowledged: $(tail -n 20 "$TMP/relay.log")"
	wait_for 60 eval '[ "$(rcli XLEN relay:events:dlq)" = 1 ]' || fail "the failing event was not dead-lettered"
	stop_relay_pid "$RELAY_PID"
	grep -q "ERROR SUMMARY: 0 errors" "$TMP/relay.log" || fail "valgrind: $(grep -A5 'definitely lost\|Invalid' "$TMP/relay.log" | head -n 20)"
	tr_spans "$TMP/rx" >"$TMP/spans.json"
	# Six events, two spans each; the failed one's spans say ERROR.
	[ "$(jq length "$TMP/spans.json")" = 12 ] || fail "spans: $(jq -c 'map({traceId, name})' "$TMP/spans.json")"
	[ "$(jq '[.[] | select(.status.code == 2)] | length' "$TMP/spans.json")" = 2 ] ||
		fail "ERROR spans: $(jq -c 'map(select(.status.code == 2))' "$TMP/spans.json")"
	# OTEL_BSP_MAX_EXPORT_BATCH_SIZE: three requests of 4 spans.
	[ "$(jq -s -c 'map([.resourceSpans[].scopeSpans[].spans[]] | length)' "$TMP"/rx/req-*.json)" = "[4,4,4]" ] ||
		fail "spans per request: $(jq -s -c 'map([.resourceSpans[].scopeSpans[].spans[]] | length)' "$TMP"/rx/req-*.json)"
}
