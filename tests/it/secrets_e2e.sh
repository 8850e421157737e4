# Secrets and env through `relay start`: injection, rotation without a
# rebuild, a missing reference, and a canary secret value that must appear
# nowhere: Relay's DEBUG log, /metrics, the state database, the image
# (inspect and layers) and container labels.

CANARY='CANARY-7f3e9b1c-do-not-leak'

se_start() {
	relay_bg "$TMP/relay.log" "$RELAY" start
	wait_for 60 grep -q 'msg="worker started"' "$TMP/relay.log" || fail "relay did not start: $(tail -n 20 "$TMP/relay.log")"
}

se_stop() { stop_relay_pid "$RELAY_PID"; }

log_has() { grep -qF -- "$1" "$TMP/relay.log"; }
log_re() { grep -q -- "$1" "$TMP/relay.log"; }

test_secrets_injected_rotated_and_never_leaked() {
	redis_up
	export REDIS_URI=127.0.0.1:$REDIS_PORT REDIS_STREAM=events REDIS_GROUP=relay
	export LOG_LEVEL=DEBUG METRICS_ADDR=127.0.0.1:$(free_port)
	relay_secret_set api-token "$CANARY"
	relay_secret_set db-password first-value
	mkdir -p "$RELAY_FUNCTIONS_DIR/se-fn"
	# The handler proves it sees the secrets by printing their SHA-256 and
	# length, never the values.
	cat >"$RELAY_FUNCTIONS_DIR/se-fn/h.py" <<'PY'
import hashlib, os
def handler(event):
    tok = os.environ.get("API_TOKEN", "")
    db = os.environ.get("DB_PASSWORD")
    print("env", os.environ["API_URL"], "flag=[%s]" % os.environ["FLAG"], "handler", os.environ["RELAY_HANDLER"])
    print("token", hashlib.sha256(tok.encode()).hexdigest(), len(tok))
    print("db", hashlib.sha256(db.encode()).hexdigest() if db is not None else "missing")
PY
	cat >"$RELAY_FUNCTIONS_DIR/se-fn/template.yaml" <<'YAML'
runtime: python3.14
env:
  API_URL: https://api.example.com
  FLAG: ""
secrets:
  API_TOKEN: api-token
  DB_PASSWORD: db-password
events:
  - handler: h.handler
    pattern: {kind: [go]}
    retries: 0
YAML
	se_start
	local tok_sha first_sha second_sha
	tok_sha=$(printf '%s' "$CANARY" | sha256sum | cut -d' ' -f1)
	first_sha=$(printf 'first-value' | sha256sum | cut -d' ' -f1)
	second_sha=$(printf 'second-value' | sha256sum | cut -d' ' -f1)
	redis-cli -p "$REDIS_PORT" XADD events '*' event '{"kind":"go","n":1}' >/dev/null
	wait_for 30 log_has "db $first_sha" || fail "first invocation did not see the secret: $(tail -n 5 "$TMP/relay.log")"
	log_has "env https://api.example.com flag=[] handler h.handler" || fail "env not injected"
	log_has "token $tok_sha ${#CANARY}" || fail "canary secret not injected"

	# Rotation: the next invocation sees the new value, with no rebuild.
	local builds
	builds=$(grep -c 'msg="function prepared"\|reconcile succeeded' "$TMP/relay.log")
	relay_secret_set db-password second-value
	redis-cli -p "$REDIS_PORT" XADD events '*' event '{"kind":"go","n":2}' >/dev/null
	wait_for 30 log_has "db $second_sha" || fail "rotation not seen"
	[ "$(grep -c 'msg="function prepared"\|reconcile succeeded' "$TMP/relay.log")" -eq "$builds" ] ||
		fail "rotating a secret rebuilt or reloaded the function"

	# A missing secret fails the invocation, naming the reference only.
	run_expect 0 "$RELAY" secret rm db-password
	redis-cli -p "$REDIS_PORT" XADD events '*' event '{"kind":"go","n":3}' >/dev/null
	wait_for 30 log_has 'db-password' || fail "no error naming the missing reference"
	wait_for 10 bash -c "[ \$(redis-cli -p $REDIS_PORT XLEN relay:events:dlq) -ge 1 ]" || fail "missing secret did not fail the invocation"
	redis-cli -p "$REDIS_PORT" XRANGE relay:events:dlq - + | grep -q 'db-password' || fail "DLQ reason does not name the reference"

	# While a container runs, its labels must not carry the value.
	relay_secret_set db-password third-value
	local updates
	updates=$(grep -c 'msg="function updated"' "$TMP/relay.log")
	cat >"$RELAY_FUNCTIONS_DIR/se-fn/h.py" <<'PY'
import time
def handler(event):
    time.sleep(3)
PY
	updated() { [ "$(grep -c 'msg="function updated"' "$TMP/relay.log")" -gt "$updates" ]; }
	# "function updated" is logged after the swap: the next event runs it.
	wait_for 30 updated || fail "edit not picked up: $(grep -c 'function updated' "$TMP/relay.log")"
	redis-cli -p "$REDIS_PORT" XADD events '*' event '{"kind":"go","n":4}' >/dev/null
	# Any se-fn container will do, the one running the event or a standby
	# one; one can go between the listing and the inspection (a parked
	# container made before the rotation is discarded as stale), so list
	# and inspect again until one is read.
	local cid="" read=0
	for _ in $(seq 1 100); do
		cid=$(docker ps -q --filter label=relay.function=se-fn | head -n1)
		if [ -n "$cid" ] &&
			docker inspect --format '{{json .Config.Labels}}' "$cid" >"$TMP/labels.json" 2>/dev/null; then
			read=1
			break
		fi
		sleep 0.1
	done
	[ "$read" = 1 ] || fail "no running container to inspect"
	grep -q 'relay.function' "$TMP/labels.json" || fail "labels not read"
	! grep -q "$CANARY" "$TMP/labels.json" || fail "canary in container labels"
	# Scraped while exactly one handler runs (it sleeps 3 s): the container
	# read above may be a parked one, listed before the event's dispatch.
	one_in_flight() {
		curl -s "http://$METRICS_ADDR/metrics" >"$TMP/metrics.txt" &&
			grep -qx 'in_flight_invocations 1' "$TMP/metrics.txt"
	}
	wait_for 10 one_in_flight ||
		fail "in_flight_invocations while one handler runs: $(grep '^in_flight' "$TMP/metrics.txt")"
	grep -q 'handler_invocations_total' "$TMP/metrics.txt" || fail "no metrics scraped"
	se_stop

	log_re 'level=DEBUG' || fail "the log is not at DEBUG"
	! grep -q "$CANARY" "$TMP/relay.log" || fail "canary in Relay's DEBUG log"
	! grep -q "first-value\|second-value\|third-value" "$TMP/relay.log" || fail "secret value in Relay's log"
	! grep -q "$CANARY" "$TMP/metrics.txt" || fail "canary in /metrics"
	local t tables=0
	for t in $(sqlite3 "$RELAY_DATA_DIR/db.sqlite3" "SELECT name FROM sqlite_master WHERE type='table'"); do
		tables=$((tables + 1))
		! sqlite3 "$RELAY_DATA_DIR/db.sqlite3" "SELECT * FROM $t" | grep -q "$CANARY" || fail "canary in table $t"
	done
	[ "$tables" -ge 1 ] || fail "the state database has no table to search"
	sqlite3 "$RELAY_DATA_DIR/db.sqlite3" "SELECT secrets FROM functions WHERE name='se-fn'" | grep -q 'api-token' ||
		fail "the state database does not show the secret reference"
	local img
	local inspected=0
	for img in $(docker images --format '{{.Repository}}:{{.Tag}}' 'relay-fn-se-fn'); do
		inspected=$((inspected + 1))
		docker image inspect "$img" >"$TMP/inspect.json"
		! grep -q "$CANARY" "$TMP/inspect.json" || fail "canary in image inspect"
		docker save "$img" -o "$TMP/image.tar"
		mkdir -p "$TMP/layers" && tar -C "$TMP/layers" -xf "$TMP/image.tar"
		local layer seen=0
		for layer in "$TMP"/layers/*/layer.tar; do
			! tar -xOf "$layer" 2>/dev/null | grep -a -q "$CANARY" || fail "canary in an image layer"
			tar -xOf "$layer" 2>/dev/null | grep -a -q "def handler" && seen=1
		done
		[ "$seen" = 1 ] || fail "the layers were not read (handler source not found in them)"
		! grep -r -a -q "$CANARY" "$TMP/layers" || fail "canary in the image config"
		rm -rf "$TMP/layers" "$TMP/image.tar"
	done
	# An empty image list would make the loop above prove nothing.
	[ "$inspected" -ge 1 ] || fail "no relay-fn-se-fn image to inspect"
	docker images --format '{{.Repository}}:{{.Tag}}' 'relay-fn-se-fn' | xargs -r docker rmi -f >/dev/null 2>&1
}
