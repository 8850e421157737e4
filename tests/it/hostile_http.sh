# Slow HTTP clients against relay start's two listeners: 64
# clients per listener, from 8 loopback addresses (127.0.0.2-9, so that
# the per-address cap of 16 turns none of them away), each sending a
# request one byte a second and never ending its headers. While they are
# attached a scrape of /metrics and a request to the webhook from
# 127.0.0.1 are answered within 3 s, and the server cuts every slow client
# at the headers' 5 s deadline, however it trickles; the worker keeps
# consuming throughout.

# slowloris PORT PATH OUT: runs in the background; writes "attached" to
# OUT.attached once all 64 clients are connected and trickling, then, when
# every one is closed by the server or 12 s have passed, "longest=S open=N"
# to OUT (S: the longest any stayed connected).
slowloris() {
	python3 - "$1" "$2" "$3" <<'PY' &
import socket, sys, time
port, path, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
req = ("GET %s HTTP/1.1\r\nHost: relay\r\nX-Slow: " % path).encode()
clients = []
for i in range(64):
    s = socket.socket()
    s.bind(("127.0.0.%d" % (2 + i % 8), 0))
    s.connect(("127.0.0.1", port))
    s.setblocking(False)
    clients.append({"s": s, "sent": 0, "t0": time.monotonic(), "closed": None})
def tick():
    for c in clients:
        if c["closed"] is not None:
            continue
        try:
            if c["s"].recv(256) == b"":
                c["closed"] = time.monotonic()
                continue
        except BlockingIOError:
            pass
        except OSError:
            c["closed"] = time.monotonic()
            continue
        b = req[c["sent"]:c["sent"] + 1] or b"a"
        try:
            c["s"].send(b)
            c["sent"] += 1
        except OSError:
            c["closed"] = time.monotonic()
tick()
time.sleep(1)
tick()
open(out + ".attached", "w").write("attached\n")
end = clients[0]["t0"] + 12
while time.monotonic() < end and any(c["closed"] is None for c in clients):
    time.sleep(1)
    tick()
still = sum(1 for c in clients if c["closed"] is None)
longest = max((c["closed"] - c["t0"]) for c in clients if c["closed"] is not None) if still < 64 else -1
open(out, "w").write("longest=%.2f open=%d\n" % (longest, still))
PY
	track $!
}

test_slow_clients_keep_neither_listener_from_answering() {
	redis_up
	export REDIS_URI=127.0.0.1:$REDIS_PORT REDIS_STREAM=events REDIS_GROUP=relay
	local mport hport id res
	mport=$(free_port)
	hport=$(free_port)
	export METRICS_ADDR=127.0.0.1:$mport GIT_WEBHOOK_ADDR=127.0.0.1:$hport
	# A git source, so that the webhook listens (nothing is fetched: no
	# delivery is ever accepted here).
	run "$RELAY" git set ssh://git@127.0.0.1:9/x/y.git
	assert_status 0
	relay_bg "$TMP/relay.log" "$RELAY" start
	wait_for 90 grep -q 'msg="worker started"' "$TMP/relay.log" || fail "relay did not start: $(tail -n 20 "$TMP/relay.log")"
	wait_for 10 grep -q "Webhook http server listening on $GIT_WEBHOOK_ADDR" "$TMP/relay.log" || fail "webhook not listening"
	wait_for 10 curl -sf --max-time 2 "http://$METRICS_ADDR/metrics" || fail "metrics not up"

	slowloris "$mport" /metrics "$TMP/m"
	slowloris "$hport" /github "$TMP/h"
	wait_for 15 test -f "$TMP/m.attached" -a -f "$TMP/h.attached" || fail "the slow clients did not attach"
	local t0 t1
	t0=$(date +%s%N)
	curl -s -o "$TMP/scrape" -w '%{http_code}' --max-time 3 "http://$METRICS_ADDR/metrics" >"$TMP/code" || true
	t1=$(date +%s%N)
	[ "$(cat "$TMP/code")" = 200 ] || fail "scrape with 64 slow clients attached: status '$(cat "$TMP/code")' after $(((t1 - t0) / 1000000)) ms"
	grep -q '^events_received_total ' "$TMP/scrape" || fail "scrape body: $(head -c 300 "$TMP/scrape")"
	[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 "http://$GIT_WEBHOOK_ADDR/github")" = 405 ] ||
		fail "webhook with 64 slow clients attached did not answer within 3 s"
	echo "scrape answered in $(((t1 - t0) / 1000000)) ms with 2 x 64 slow clients attached"
	# The worker consumes meanwhile (nothing matches: acknowledged).
	id=$(redis-cli -p "$REDIS_PORT" XADD events '*' event '{"kind":"none"}')
	wait_for 10 acked_through "$REDIS_PORT" events relay "$id" || fail "not consuming"

	wait_for 15 test -s "$TMP/m" -a -s "$TMP/h" || fail "the slow clients did not finish"
	for res in "$TMP/m" "$TMP/h"; do
		echo "$(basename "$res"): $(cat "$res")"
		grep -q ' open=0$' "$res" || fail "slow clients still connected after 12 s: $(cat "$res")"
		awk -F'[= ]' '{exit !($2 >= 4.5 && $2 <= 6.5)}' "$res" || fail "not cut at the 5 s deadline: $(cat "$res")"
	done
	[ "$(grep -c 'request headers not received within 5s; connection closed' "$TMP/relay.log")" -eq 128 ] ||
		fail "want 128 cut connections logged, got $(grep -c 'request headers not received within 5s' "$TMP/relay.log")"
	grep -q 'peer=127.0.0.9' "$TMP/relay.log" || fail "the log does not name the peer"
	stop_relay_pid "$RELAY_PID"
}
