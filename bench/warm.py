#!/usr/bin/env python3
"""bench/warm: warm containers (template.yaml `warm:`) against fresh
containers, end to end through `relay start`, in the same run.

    bench/warm.py [--relay build/relay] [--events 1000] [--fresh 40]
                  [--latency 100] [--gap 0.05] [--no-node] [--keep-logs DIR]
                  [--keyed]

Starts a private redis-server and one relay (MAX_CONCURRENCY=8,
STANDBY_MAX=0, in its own UTS namespace) over three functions that print
one line per event: a Python and a Node one with `warm: {}` and
`concurrency: 8`, and a Python one without warm: (a fresh container per
event, `concurrency: 8`). After 16 unmeasured warm-up events per warm
function (so that their containers exist), it measures:

  latency     --latency events --gap s apart to each warm function: from just
              before the XADD to the moment relay's forwarded line
              `relay: function "F" handler "ok.handler": e2e N` is read
              (p50/p95/max); the warm containers created meanwhile are
              counted (0: every event was served by a reused container);
  throughput  --events events to each warm function and --fresh to the fresh
              one, each batch XADDed in one pipeline and timed until the group
              has acknowledged them all; events/s and relay's CPU per event
              (utime+stime of /proc/<relay>/stat over the batch);
  idle cost   `docker stats --no-stream` of the warm containers 5 s after the
              last event (memory and CPU%, under the 0.05 CPU idle bound).

With --keyed, a fourth function, the warm Python one again with
`key_concurrency: {key: k}`, takes --events events over 1,000 key values
(k = t0 ... t999), in bursts alternating with the unkeyed Python
function's, three each: the median events/s of each and their ratio
(key_concurrency's cost with real containers; goal >= 0.9).

Prints every figure and the ratio warm/fresh events/s (goal:
>= 50x; XADD->output p50 <= 10 ms). Exit status 0 when the goals hold, 1
when one is missed, 2 on error. Cleans up (relay SIGTERM, containers of its
relay.hostname, redis, its images, the temporary directory) also on error.
"""
import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

PID = os.getpid()
HOST = f"wbench-{PID}"
PY, NODE, FRESH = f"wb-py-{PID}", f"wb-node-{PID}", f"wb-fresh-{PID}"
PYK = f"wb-pyk-{PID}"
LINE = re.compile(r'^relay: function "([^"]+)" handler "ok\.handler": e2e (\S+)$')
CLK = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(values, p):
    v = sorted(values)
    return v[int(p * (len(v) - 1) + 0.5)]


class Redis:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.f = self.sock.makefile("rb")

    @staticmethod
    def encode(*args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        return b"".join(out)

    def read(self):
        line = self.f.readline()
        if not line:
            raise RuntimeError("redis closed the connection")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError("redis: " + rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.f.read(n + 2)[:-2].decode()
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError(f"redis: unexpected reply {line!r}")

    def cmd(self, *args):
        self.sock.sendall(self.encode(*args))
        return self.read()


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def metric(port, name):
    import urllib.request
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                n, _, v = line.rpartition(" ")
                if n == name:
                    return float(v)
    except OSError:
        return None
    return 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--relay", default="build/relay")
    ap.add_argument("--events", type=int, default=1000)
    ap.add_argument("--fresh", type=int, default=40)
    ap.add_argument("--latency", type=int, default=100)
    ap.add_argument("--gap", type=float, default=0.05)
    ap.add_argument("--no-node", dest="node", action="store_false")
    ap.add_argument("--keep-logs")
    ap.add_argument("--keyed", action="store_true")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="relay-bench-warm-")
    redis_proc = relay = log = None
    try:
        port = free_port()
        redis_proc = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
             "--appendonly", "no", "--dir", tmp], stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, start_new_session=True)
        for _ in range(200):
            try:
                r = Redis(port)
                r.cmd("PING")
                break
            except OSError:
                time.sleep(0.05)
        fdir = os.path.join(tmp, "functions")
        fns = [(PY, "python3.14", "ok.py", "warm: {}\n",
                "def handler(event):\n    print('e2e', event['n'])\n"),
               (FRESH, "python3.14", "ok.py", "",
                "def handler(event):\n    print('e2e', event['n'])\n")]
        if args.keyed:
            fns.append((PYK, "python3.14", "ok.py", "warm: {}\nkey_concurrency: {key: k}\n",
                        "def handler(event):\n    print('e2e', event['n'])\n"))
        if args.node:
            fns.append((NODE, "node24", "ok.mjs", "warm: {}\n",
                        "export function handler(event) {\n  console.log('e2e', event.n);\n}\n"))
        for name, rt, fname, warm, code in fns:
            d = os.path.join(fdir, name)
            os.makedirs(d)
            with open(os.path.join(d, "template.yaml"), "w") as f:
                f.write(f"runtime: {rt}\nconcurrency: 8\n{warm}events:\n"
                        f"  - handler: ok.handler\n    pattern: {{fn: [{name}]}}\n")
            with open(os.path.join(d, fname), "w") as f:
                f.write(code)
        mport = free_port()
        env = dict(os.environ)
        for k in ("STANDBY_IDLE", "LOG_LEVEL"):
            env.pop(k, None)
        env.update({"REDIS_URI": f"127.0.0.1:{port}", "REDIS_STREAM": "events",
                    "REDIS_GROUP": "relay", "RELAY_FUNCTIONS_DIR": fdir,
                    "RELAY_DATA_DIR": os.path.join(tmp, "data"), "MAX_CONCURRENCY": "8",
                    "STANDBY_MAX": "0", "METRICS_ADDR": f"127.0.0.1:{mport}"})
        log = open(os.path.join(tmp, "relay.log"), "w")
        seen, cond = {}, threading.Condition()
        started = [False]
        relay = subprocess.Popen(
            ["unshare", "-u", "sh", "-c",
             f"hostname {HOST} && exec '{os.path.abspath(args.relay)}' start"],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True)

        def reader(pipe):
            for raw in pipe:
                t = time.monotonic()
                line = raw.decode(errors="replace").rstrip("\n")
                m = LINE.match(line)
                with cond:
                    log.write(f"{t:.6f} {line}\n")
                    if m:
                        seen[(m.group(1), m.group(2))] = t
                    if 'msg="worker started"' in line:
                        started[0] = True
                    cond.notify_all()

        for s in (relay.stdout, relay.stderr):
            threading.Thread(target=reader, args=(s,), daemon=True).start()

        def wait(pred, timeout, what):
            deadline = time.monotonic() + timeout
            with cond:
                while not pred():
                    left = deadline - time.monotonic()
                    if left <= 0 or relay.poll() is not None:
                        raise RuntimeError(f"{what} did not happen; log {log.name}")
                    cond.wait(min(left, 0.2))

        wait(lambda: started[0], 120, "worker started")

        def xadd(fn, n):
            return r.cmd("XADD", "events", "*", "event", f'{{"fn":"{fn}","n":"{n}"}}')

        def burst(fn, n, tag):
            cmds = b"".join(Redis.encode("XADD", "events", "*", "event",
                                         f'{{"fn":"{fn}","n":"{tag}{i}","k":"t{i % 1000}"}}')
                            for i in range(n))
            c0, t0 = cpu_s(relay.pid), time.monotonic()
            r.sock.sendall(cmds)
            for _ in range(n):
                r.read()
            wait(lambda: all((fn, f"{tag}{i}") in seen for i in range(n)), 900,
                 f"{n} events to {fn}")
            dt = time.monotonic() - t0
            # Acknowledged too (the group has nothing pending).
            wait_ack(time.monotonic() + 120, f"after {n} events to {fn}")
            return n / dt, (cpu_s(relay.pid) - c0) / n, dt

        def wait_ack(deadline, what):
            while True:
                p = r.cmd("XPENDING", "events", "relay")
                if p[0] == 0:
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{what}: {p[0]} events left pending "
                                       f"({p[1]}..{p[2]}); log {log.name}")
                time.sleep(0.02)

        warm_fns = [PY] + ([NODE] if args.node else [])
        for fn in warm_fns:  # warm-up: the containers exist afterwards
            for i in range(16):
                xadd(fn, f"w{i}")
            wait(lambda: all((fn, f"w{i}") in seen for i in range(16)), 300, f"warm-up {fn}")
        wait_ack(time.monotonic() + 120, "after the warm-up")
        xadd(FRESH, "w0")
        wait(lambda: (FRESH, "w0") in seen, 120, "fresh warm-up")
        wait_ack(time.monotonic() + 120, "after the fresh warm-up")

        res = {}
        for fn in warm_fns:
            retired0 = sum(metric(mport, f'warm_retired_total{{reason="{x}"}}') or 0
                           for x in ("exited", "timeout", "error", "max_uses", "idle", "excess"))
            gauge0 = metric(mport, f'warm_containers{{function="{fn}"}}')
            sent = []
            t0 = time.monotonic() + 0.5
            for i in range(args.latency):
                while time.monotonic() < t0 + i * args.gap:
                    time.sleep(0.001)
                ts = time.monotonic()
                xadd(fn, f"a{i}")
                sent.append((f"a{i}", ts))
            wait(lambda: all((fn, m) in seen for m, _ in sent), 300, f"latency {fn}")
            lat = [(seen[(fn, m)] - ts) * 1000 for m, ts in sent]
            retired1 = sum(metric(mport, f'warm_retired_total{{reason="{x}"}}') or 0
                           for x in ("exited", "timeout", "error", "max_uses", "idle", "excess"))
            wait_ack(time.monotonic() + 120, f"after the latency events to {fn}")
            eps, cpu, dt = burst(fn, args.events, "b")
            res[fn] = (lat, eps, cpu, dt, gauge0, retired1 - retired0)
        feps, fcpu, fdt = burst(FRESH, args.fresh, "f")
        keyed = None
        if args.keyed:
            for i in range(16):
                xadd(PYK, f"w{i}")
            wait(lambda: all((PYK, f"w{i}") in seen for i in range(16)), 300, "warm-up keyed")
            wait_ack(time.monotonic() + 120, "after the keyed warm-up")
            plain, kd = [], []
            for rnd in range(3):
                for fn, out in ((PYK, kd), (PY, plain)) if rnd % 2 == 0 else ((PY, plain), (PYK, kd)):
                    out.append(burst(fn, args.events, f"k{rnd}-")[0])
            keyed = (sorted(plain)[1], sorted(kd)[1], plain, kd)

        time.sleep(5)
        ids = subprocess.run(["docker", "ps", "-q", "--filter", "label=relay.warm=true",
                              "--filter", f"label=relay.hostname={HOST}"],
                             capture_output=True, text=True).stdout.split()
        stats = subprocess.run(["docker", "stats", "--no-stream", "--format",
                                "{{.Name}} {{.MemUsage}} {{.CPUPerc}}", *ids],
                               capture_output=True, text=True).stdout.strip() if ids else ""

        ok = True
        print(f"bench/warm: MAX_CONCURRENCY=8, concurrency 8, STANDBY_MAX=0, "
              f"load {os.getloadavg()[0]:.2f}")
        print(f"fresh  {FRESH}: {args.fresh} events in {fdt:.2f} s = {feps:.2f} events/s, "
              f"relay CPU {fcpu * 1000:.2f} ms/event")
        for fn in warm_fns:
            lat, eps, cpu, dt, gauge, retired = res[fn]
            print(f"warm   {fn}: {args.events} events in {dt:.2f} s = {eps:.1f} events/s "
                  f"({eps / feps:.1f}x fresh), relay CPU {cpu * 1000:.3f} ms/event")
            print(f"       XADD->output over {len(lat)} events {args.gap}s apart: "
                  f"p50 {pct(lat, .5):.2f} ms, p95 {pct(lat, .95):.2f} ms, max {max(lat):.2f} ms "
                  f"({int(gauge or 0)} warm containers, {int(retired)} retired meanwhile)")
            ok = ok and eps >= 50 * feps and pct(lat, .5) <= 10
        if keyed:
            p50, k50, plain, kd = keyed
            print(f"keyed  {PYK} (key_concurrency, 1,000 keys) vs {PY}, {args.events} events "
                  f"a burst, 3 bursts each alternating: {k50:.1f} vs {p50:.1f} events/s = "
                  f"{k50 / p50:.2f} (goal >= 0.9); bursts {[round(x) for x in kd]} vs "
                  f"{[round(x) for x in plain]}")
            ok = ok and k50 >= 0.9 * p50
        print("idle warm containers (docker stats, 5 s after the last event):")
        for line in stats.splitlines():
            print("       " + line)
        print("goals (>= 50x fresh events/s, p50 <= 10 ms%s):" %
              (", keyed >= 0.9x" if keyed else ""), "met" if ok else "MISSED")
        return 0 if ok else 1
    except Exception as e:
        print(f"bench/warm: {e}", file=sys.stderr)
        return 2
    finally:
        if relay and relay.poll() is None:
            relay.terminate()
            try:
                relay.wait(30)
            except subprocess.TimeoutExpired:
                relay.kill()
        ids = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=relay.hostname={HOST}"],
                             capture_output=True, text=True).stdout.split()
        if ids:
            subprocess.run(["docker", "rm", "-f", *ids], capture_output=True)
        if redis_proc:
            redis_proc.terminate()
        imgs = subprocess.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}"],
                              capture_output=True, text=True).stdout.split()
        mine = [i for i in imgs if re.match(rf"relay-fn-wb-(py|pyk|node|fresh)-{PID}:", i)]
        if mine:
            subprocess.run(["docker", "rmi", "-f", *mine], capture_output=True)
        if log:
            log.flush()
        if args.keep_logs:
            os.makedirs(args.keep_logs, exist_ok=True)
            shutil.copy(os.path.join(tmp, "relay.log"), args.keep_logs)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
