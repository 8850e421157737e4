#!/usr/bin/env bash
# The deployment figures of compose.dev.yaml, on this machine's daemon:
#
#   - the size of Relay's image;
#   - `up --build -d` until relay is healthy, from a cold build cache
#     (`build --no-cache` first: base images present, nothing else) and
#     from a warm one (the same again);
#   - Try-it latency: XADD of the README's event until the group has
#     acknowledged it (both handlers ran), N times, through the socket
#     proxy and with the socket mounted directly (an override), side by
#     side in one run; p50, p90 and the ratio of the medians.
#
# Usage: bench/compose.sh [N]   (default 20 events per variant)
# Needs root, docker-compose, redis-cli and the stand-ins
# (scripts/standin-images deploy). Leaves nothing behind (down -v). Do not
# run it while the test suite runs: it competes for the daemon and CPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-20}
tmp=$(mktemp -d)
project=relaybench$$
export RELAY_HOSTNAME=relay-bench-$$ RELAY_IMAGE=relay:bench-$$
export RELAY_METRICS_PORT=$((20000 + RANDOM % 20000))
redis_port=$((40000 + RANDOM % 20000))
event='{"event_id":"evt_123","event_name":"INSERT","table_name":"users","new_image":{"id":"user_123","name":"John Doe","email":"john@example.com"}}'

# Redis published on loopback so the host can time it without docker exec.
cat >"$tmp/redis-port.yaml" <<EOF
services:
  redis:
    ports:
      - "127.0.0.1:$redis_port:6379"
EOF
# Relay on the daemon's socket directly, no proxy.
cat >"$tmp/direct.yaml" <<'EOF'
services:
  relay:
    user: root
    environment:
      DOCKER_HOST: unix:///var/run/docker.sock
    volumes:
      - /var/run/docker.sock:/var/run/docker.sock
EOF

dc() { docker-compose --ansi never -p "$project" -f compose.dev.yaml -f "$tmp/redis-port.yaml" "$@"; }
cleanup() {
	dc down -v --remove-orphans >/dev/null 2>&1 || true
	docker image rm "$RELAY_IMAGE" >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT

scripts/standin-images deploy

now() { date +%s.%N; }
healthy() { [ "$(docker inspect -f '{{.State.Health.Status}}' "$(dc ps -q relay)" 2>/dev/null)" = healthy ]; }
wait_healthy() {
	local i
	for i in $(seq 1 1200); do
		healthy && return 0
		sleep 0.1
	done
	echo "relay not healthy within 120 s" >&2
	exit 1
}

# up_timed LABEL [compose args...]: seconds from `up --build -d` to healthy.
up_timed() {
	local label=$1 t0 t1
	shift
	t0=$(now)
	dc "$@" up --build -d >"$tmp/up.log" 2>&1 || {
		tail -n 30 "$tmp/up.log"
		exit 1
	}
	wait_healthy
	t1=$(now)
	up=$(echo "$t1 - $t0" | bc)
	printf '%-34s %6.1f s\n' "$label" "$up"
}

# latency LABEL: N Try-it events one at a time; prints p50/p90 in ms and
# leaves the median in $median.
latency() {
	local label=$1 i id t0 t1 ms=()
	for i in $(seq 1 "$n"); do
		t0=$(now)
		id=$(redis-cli -p "$redis_port" XADD events '*' event "$event")
		until [ "$(redis-cli -p "$redis_port" XINFO GROUPS events | awk 'p { print; exit } $0 == "last-delivered-id" { p = 1 }')" = "$id" ] &&
			[ "$(redis-cli -p "$redis_port" XPENDING events relay | head -n 1)" = 0 ]; do
			sleep 0.01
		done
		t1=$(now)
		ms+=("$(echo "($t1 - $t0) * 1000 / 1" | bc)")
	done
	sorted=($(printf '%s\n' "${ms[@]}" | sort -n))
	median=${sorted[$((n / 2))]}
	printf '%-34s p50 %5d ms  p90 %5d ms  (n=%d)\n' "$label" "$median" "${sorted[$((n * 9 / 10))]}" "$n"
}

echo "compose.dev.yaml figures ($(nproc) CPUs, $(docker version -f '{{.Server.Version}}') daemon)"
t0=$(now)
dc build --no-cache relay >"$tmp/build.log" 2>&1 || {
	tail -n 30 "$tmp/build.log"
	exit 1
}
t1=$(now)
cold=$(echo "$t1 - $t0" | bc)
printf '%-34s %6.1f s\n' "image build, cold cache" "$cold"
up_timed "up --build -d to healthy (warm)"
printf '%-34s %6.1f MB\n' "image size ($RELAY_IMAGE)" \
	"$(echo "$(docker image inspect -f '{{.Size}}' "$RELAY_IMAGE") / 1000000" | bc -l)"
printf '%-34s %6.1f s\n' "so up --build -d from cold, about" "$(echo "$cold + $up" | bc)"
latency "Try-it XADD to ack, proxy"
proxy=$median
dc down >/dev/null 2>&1
up_timed "up -d to healthy, direct socket" -f "$tmp/direct.yaml"
latency "Try-it XADD to ack, direct socket"
direct=$median
printf 'ratio proxy / direct (p50): %.2f\n' "$(echo "$proxy / $direct" | bc -l)"
