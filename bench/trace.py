#!/usr/bin/env python3
"""bench/trace: tracing's cost end to end, through `relay start` and real
warm containers, in one run.

    bench/trace.py [--relay build/relay] [--events 1000] [--rounds 3]

Starts a private redis-server and an OTLP/HTTP sink (a thread of this
program answering 200 to every POST and counting the spans it was sent),
then, round after round, `relay start` (MAX_CONCURRENCY=8, STANDBY_MAX=0,
its own UTS namespace) over one warm Python function (`warm: {}`,
`concurrency: 8`) printing one line per event, once in each mode, the
order turning every round:

  disabled   OTEL_SDK_DISABLED=true: no trace context at all (the baseline)
  off        no endpoint: trace context propagated (TRACEPARENT in the
             container, trace_id in logs), nothing exported
  on         OTEL_EXPORTER_OTLP_ENDPOINT = the sink: every span exported

Each relay gets 16 unmeasured warm-up events (so its warm containers
exist), then --events events XADDed in one pipeline, timed until every
handler line is read and the group has nothing pending: events/s and
relay's CPU per event. Prints the rounds, the medians and the medians of
the rounds' ratios on/disabled (goal >= 0.97) and off/disabled (goal:
1.00 within the noise), and the spans the sink received in the `on` runs (two per event:
message and invocation, plus the warm-up's). Exit status 0 when the goal
holds, 1 when missed, 2 on error.
"""
import argparse
import http.server
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

spec = importlib.util.spec_from_file_location(
    "warm", os.path.join(os.path.dirname(os.path.abspath(__file__)), "warm.py"))
warm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(warm)

PID = os.getpid()
HOST = f"tbench-{PID}"
FN = f"tb-py-{PID}"
LINE = re.compile(r'^relay: function "([^"]+)" handler "ok\.handler": e2e (\S+)$')
SPANS = [0]


class Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n)
        SPANS[0] += body.count(b'"spanId"')
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


def run_relay(args, base_env, extra, r, tag):
    """One relay in one mode: events/s and CPU ms per event of the burst."""
    env = dict(base_env)
    env.update(extra)
    seen, cond, started = set(), threading.Condition(), [False]
    relay = subprocess.Popen(
        ["unshare", "-u", "sh", "-c",
         f"hostname {HOST} && exec '{os.path.abspath(args.relay)}' start"],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True)

    def reader(pipe):
        for raw in pipe:
            line = raw.decode(errors="replace").rstrip("\n")
            m = LINE.match(line)
            with cond:
                if m:
                    seen.add(m.group(2))
                if 'msg="worker started"' in line:
                    started[0] = True
                cond.notify_all()

    threads = [threading.Thread(target=reader, args=(s,), daemon=True)
               for s in (relay.stdout, relay.stderr)]
    for t in threads:
        t.start()

    def wait(pred, timeout, what):
        deadline = time.monotonic() + timeout
        with cond:
            while not pred():
                left = deadline - time.monotonic()
                if left <= 0 or relay.poll() is not None:
                    raise RuntimeError(f"{what} did not happen ({tag})")
                cond.wait(min(left, 0.2))

    def wait_ack():
        deadline = time.monotonic() + 120
        while r.cmd("XPENDING", "events", "relay")[0] != 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"events left pending ({tag})")
            time.sleep(0.02)

    def burst(n, pfx):
        cmds = b"".join(warm.Redis.encode("XADD", "events", "*", "event",
                                          f'{{"fn":"{FN}","n":"{pfx}{i}"}}') for i in range(n))
        c0, t0 = warm.cpu_s(relay.pid), time.monotonic()
        r.sock.sendall(cmds)
        for _ in range(n):
            r.read()
        wait(lambda: all(f"{pfx}{i}" in seen for i in range(n)), 900, f"{n} events")
        dt = time.monotonic() - t0
        wait_ack()
        return n / dt, (warm.cpu_s(relay.pid) - c0) / n * 1000

    try:
        wait(lambda: started[0], 120, "worker started")
        burst(16, f"{tag}w")
        return burst(args.events, f"{tag}b")
    finally:
        relay.terminate()
        try:
            relay.wait(30)
        except subprocess.TimeoutExpired:
            relay.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--relay", default="build/relay")
    ap.add_argument("--events", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="relay-bench-trace-")
    redis_proc = None
    sink = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    try:
        port = warm.free_port()
        redis_proc = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
             "--appendonly", "no", "--dir", tmp], stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, start_new_session=True)
        for _ in range(200):
            try:
                r = warm.Redis(port)
                r.cmd("PING")
                break
            except OSError:
                time.sleep(0.05)
        d = os.path.join(tmp, "functions", FN)
        os.makedirs(d)
        with open(os.path.join(d, "template.yaml"), "w") as f:
            f.write(f"runtime: python3.14\nconcurrency: 8\nwarm: {{}}\nevents:\n"
                    f"  - handler: ok.handler\n    pattern: {{fn: [{FN}]}}\n")
        with open(os.path.join(d, "ok.py"), "w") as f:
            f.write("def handler(event):\n    print('e2e', event['n'])\n")
        env = dict(os.environ)
        for k in list(env):
            if k.startswith("OTEL_") or k in ("STANDBY_IDLE", "LOG_LEVEL", "METRICS_ADDR"):
                env.pop(k)
        env.update({"REDIS_URI": f"127.0.0.1:{port}", "REDIS_STREAM": "events",
                    "REDIS_GROUP": "relay", "RELAY_FUNCTIONS_DIR": os.path.join(tmp, "functions"),
                    "RELAY_DATA_DIR": os.path.join(tmp, "data"), "MAX_CONCURRENCY": "8",
                    "STANDBY_MAX": "0"})
        modes = {
            "disabled": {"OTEL_SDK_DISABLED": "true"},
            "off": {},
            "on": {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink.server_port}"},
        }
        names = list(modes)
        res = {m: [] for m in names}
        spans_on = 0
        for rnd in range(args.rounds):
            order = names[rnd % 3:] + names[:rnd % 3]
            line = []
            for m in order:
                s0 = SPANS[0]
                eps, cpu = run_relay(args, env, modes[m], r, f"r{rnd}{m}")
                if m == "on":
                    spans_on += SPANS[0] - s0
                res[m].append((eps, cpu))
                line.append(f"{m} {eps:.0f}/s {cpu:.3f} ms")
            print(f"round {rnd + 1}: " + ", ".join(line), flush=True)
        med = {m: sorted(res[m])[len(res[m]) // 2] for m in names}
        print(f"\nbench/trace: {args.events} events a run to one warm Python function "
              f"(concurrency 8, MAX_CONCURRENCY 8), {args.rounds} rounds, load "
              f"{os.getloadavg()[0]:.2f}")
        for m in names:
            eps = sorted(x[0] for x in res[m])[len(res[m]) // 2]
            cpu = sorted(x[1] for x in res[m])[len(res[m]) // 2]
            print(f"  {m:9s} median {eps:8.1f} events/s, relay CPU {cpu:.3f} ms/event")
        # Each round's modes ran side by side: the median of the per-round
        # ratios leaves out the machine's drift between rounds.
        def ratio(m, base="disabled"):
            v = sorted(res[m][k][0] / res[base][k][0] for k in range(args.rounds))
            return v[len(v) // 2]
        on, off = ratio("on"), ratio("off")
        print(f"  export on / disabled   {on:.3f}  median of the rounds' ratios "
              f"(goal >= 0.97)")
        print(f"  export on / propagation only {ratio('on', 'off'):.3f}  (the export's own cost)")
        print(f"  propagation only / disabled {off:.3f}")
        print(f"  spans received in the 'on' runs: {spans_on} "
              f"(2 per event: {2 * (args.events + 16) * args.rounds})")
        return 0 if on >= 0.97 else 1
    except Exception as e:
        print(f"bench/trace: {e}", file=sys.stderr)
        return 2
    finally:
        ids = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=relay.hostname={HOST}"],
                             capture_output=True, text=True).stdout.split()
        if ids:
            subprocess.run(["docker", "rm", "-f", *ids], capture_output=True)
        if redis_proc:
            redis_proc.terminate()
        imgs = subprocess.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}"],
                              capture_output=True, text=True).stdout.split()
        mine = [i for i in imgs if i.startswith(f"relay-fn-{FN}:")]
        if mine:
            subprocess.run(["docker", "rmi", "-f", *mine], capture_output=True)
        sink.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
