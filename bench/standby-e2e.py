#!/usr/bin/env python3
"""bench/standby-e2e: standby containers end to end, through `relay start`.

    bench/standby-e2e.py [--relay $BUILD/relay] [--events 50] [--burst 300]
                         [--gap 1] [--no-node] [--no-off] [--concurrency N]
                         [--log-level DEBUG] [--keep-logs DIR]

Starts a private redis-server on a free port and, one after the other, two
relays on it (each in its own UTS namespace, so its consumer name and its
containers' relay.hostname label are its own): first with STANDBY_MAX unset
(standby on, default MAX_CONCURRENCY), then with STANDBY_MAX=0 (off; not
with --no-off, which runs the standby relay alone, to set two builds side
by side). Each
gets its own stream and data directory and the same functions directory: a
trivial Python handler (and a trivial Node one) that prints one line.

For each relay, after two unmeasured warm-up events per handler:

  (a) latency: --events events to the Python handler --gap s apart (and as
      many to the Node handler, each half a gap after a Python one; a gap
      over 2 s finds every standby container under its parked CPU bound,
      which dispatch lifts first); for each, the time
      from just before its XADD is written to the moment the forwarded line
      `relay: function "F" handler "ok.handler": e2e N` is read from relay's
      output (stdout and stderr are both pipes read by their own threads,
      each line stamped with time.monotonic() as it arrives);
  (b) throughput: --burst events to the Python handler, XADDed in one
      pipeline, timed until the group has acknowledged them all (XPENDING
      0, lag 0, last-delivered-id the last XADD; polled every 20 ms), every
      handler line checked.

Prints p50/p95/max latencies and how many took over 100 ms, events/s, the
ratios standby/off (goals: latency p50 <= 0.25x, throughput >=
0.95x), the standby hits and misses of each phase (standby_dispatches_total
and standby_misses_total read from METRICS_ADDR before and after it), the
standby_* metrics each relay exposed at the end, the load average before and after, and what was left
behind. Exit status 0 when both goals hold, 1 when one is missed, 2 on error.
The rules get a 60 s timeout (not the default 6 s): an event that times out
on a loaded machine has no line to time. With --keep-logs, the logs are
kept on an error too.

Clean-up, also on Ctrl-C, SIGTERM or an error: each relay gets SIGTERM (30 s,
then SIGKILL), then every container labelled with one of this run's
relay.hostname values is force-removed, redis is stopped, this run's
relay-fn-sbe2e-*-<pid> images and the temporary directory are removed.
Children run in their own sessions, so a Ctrl-C reaches only this program,
which then stops them in that order.
"""
import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

GOAL_LATENCY = 0.25
GOAL_THROUGHPUT = 0.95
PID = os.getpid()
PY_FN = f"sbe2e-py-{PID}"
NODE_FN = f"sbe2e-node-{PID}"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(values, p):
    v = sorted(values)
    return v[int(p * (len(v) - 1) + 0.5)]


class Redis:
    """The smallest RESP2 client: enough for XADD, XINFO, XPENDING."""

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
            if n < 0:
                return None
            data = self.f.read(n + 2)[:-2]
            return data.decode()
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError(f"redis: unexpected reply {line!r}")

    def cmd(self, *args):
        self.sock.sendall(self.encode(*args))
        return self.read()

    def close(self):
        self.sock.close()


class Run:
    """Everything this run starts, so that clean_up can stop it all."""

    def __init__(self, relay):
        self.relay_bin = os.path.abspath(relay)
        self.tmp = tempfile.mkdtemp(prefix="relay-bench-sbe2e-")
        self.redis = None
        self.relays = []
        self.hostnames = []
        self.cleaned = False

    def clean_up(self):
        if self.cleaned:
            return
        self.cleaned = True
        for r in self.relays:
            r.stop()
        left = self.sweep()
        if self.redis and self.redis.poll() is None:
            self.redis.terminate()
            try:
                self.redis.wait(10)
            except subprocess.TimeoutExpired:
                self.redis.kill()
                self.redis.wait()
        imgs = subprocess.run(
            ["docker", "images", "--format", "{{.Repository}}:{{.Tag}}"],
            capture_output=True, text=True).stdout.split()
        mine = [i for i in imgs if re.match(rf"relay-fn-sbe2e-(py|node)-{PID}:", i)]
        if mine:
            subprocess.run(["docker", "rmi", "-f", *mine], capture_output=True)
        subprocess.run(["rm", "-rf", self.tmp])
        return left

    def sweep(self):
        """Force-removes this run's containers; returns how many there were."""
        n = 0
        for h in self.hostnames:
            ids = subprocess.run(
                ["docker", "ps", "-aq", "--filter", f"label=relay.hostname={h}"],
                capture_output=True, text=True).stdout.split()
            if ids:
                n += len(ids)
                subprocess.run(["docker", "rm", "-f", *ids], capture_output=True)
        return n

    def start_redis(self):
        self.redis_port = free_port()
        d = os.path.join(self.tmp, "redis")
        os.mkdir(d)
        self.redis = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.redis_port),
             "--save", "", "--appendonly", "no", "--dir", d],
            stdout=open(os.path.join(self.tmp, "redis.log"), "w"),
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 10
        while True:
            try:
                r = Redis(self.redis_port)
                r.cmd("PING")
                return r
            except OSError:
                if time.monotonic() > deadline or self.redis.poll() is not None:
                    raise RuntimeError("redis-server did not start")
                time.sleep(0.05)

    def write_functions(self, node, concurrency=None):
        fdir = os.path.join(self.tmp, "functions")
        fns = [(PY_FN, "python3.14", "ok.py",
                "def handler(event):\n    print('e2e', event['n'])\n")]
        if node:
            fns.append((NODE_FN, "node24", "ok.js",
                        "export function handler(event) {\n"
                        "  console.log('e2e', event.n);\n}\n"))
        for name, rt, fname, code in fns:
            d = os.path.join(fdir, name)
            os.makedirs(d)
            with open(os.path.join(d, "template.yaml"), "w") as f:
                # timeout: 60s, not the default 6s: on demand the timeout
                # counts from just before the container's start, which a
                # loaded daemon was seen to take 5 s for; a timed-out
                # event has no line to time.
                conc = f"concurrency: {concurrency}\n" if concurrency else ""
                f.write(f"runtime: {rt}\n{conc}events:\n  - handler: ok.handler\n"
                        f"    pattern: {{fn: [{name}]}}\n    timeout: 60s\n")
            with open(os.path.join(d, fname), "w") as f:
                f.write(code)
        return fdir


LINE = re.compile(r'^relay: function "([^"]+)" handler "ok\.handler": e2e (\S+)$')


class Relay:
    def __init__(self, run, mode, fdir, stream, env_extra):
        self.run, self.mode, self.stream = run, mode, stream
        self.hostname = f"sbe2e-{PID}-{mode}"
        run.hostnames.append(self.hostname)
        self.metrics_port = free_port()
        env = dict(os.environ)
        for k in ("STANDBY_MAX", "STANDBY_IDLE", "MAX_CONCURRENCY", "LOG_LEVEL"):
            env.pop(k, None)
        env.update({
            "REDIS_URI": f"127.0.0.1:{run.redis_port}",
            "REDIS_STREAM": stream,
            "REDIS_GROUP": "relay",
            "RELAY_FUNCTIONS_DIR": fdir,
            "RELAY_DATA_DIR": os.path.join(run.tmp, f"data-{mode}"),
            "METRICS_ADDR": f"127.0.0.1:{self.metrics_port}",
        })
        env.update(env_extra)
        self.log = open(os.path.join(run.tmp, f"relay-{mode}.log"), "w")
        self.lock = threading.Lock()
        self.seen = {}  # (function, marker) -> monotonic time of its line
        self.cond = threading.Condition(self.lock)
        self.started = False
        self.proc = subprocess.Popen(
            ["unshare", "-u", "sh", "-c",
             f"hostname {self.hostname} && exec '{run.relay_bin}' start"],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True)
        run.relays.append(self)
        self.threads = [threading.Thread(target=self.reader, args=(s,), daemon=True)
                        for s in (self.proc.stdout, self.proc.stderr)]
        for t in self.threads:
            t.start()

    def reader(self, pipe):
        for raw in pipe:
            t = time.monotonic()
            line = raw.decode(errors="replace").rstrip("\n")
            m = LINE.match(line)
            with self.cond:
                self.log.write(f"{t:.6f} {line}\n")
                if m:
                    self.seen[(m.group(1), m.group(2))] = t
                if 'msg="worker started"' in line:
                    self.started = True
                self.cond.notify_all()

    def wait(self, pred, timeout, what):
        deadline = time.monotonic() + timeout
        with self.cond:
            while not pred():
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    self.log.flush()
                    raise RuntimeError(f"relay ({self.mode}): {what} did not happen; "
                                       f"log in {self.log.name}")
                self.cond.wait(min(left, 0.2))

    def line_time(self, fn, marker, timeout=60):
        self.wait(lambda: (fn, marker) in self.seen, timeout, f"line {fn} e2e {marker}")
        with self.lock:
            return self.seen[(fn, marker)]

    def counters(self):
        """standby_dispatches_total and standby_misses_total now (None: no
        metrics)."""
        try:
            with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
                text = r.read().decode()
        except OSError:
            return None
        out = {"hits": 0, "misses": 0}
        for line in text.splitlines():
            name, _, value = line.rpartition(" ")
            if name == "standby_dispatches_total":
                out["hits"] = int(float(value))
            elif name == "standby_misses_total":
                out["misses"] = int(float(value))
        return out

    def metrics(self):
        try:
            with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
                text = r.read().decode()
        except OSError as e:
            return f"(metrics unavailable: {e})"
        keep = []
        for line in text.splitlines():
            if line.startswith("#") or "standby_" not in line:
                continue
            name, _, value = line.rpartition(" ")
            if float(value) != 0 or "containers{" in name:
                keep.append(f"{name} {value}")
        return ", ".join(keep) if keep else "(no standby_* sample above 0)"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for t in self.threads:
            t.join(5)
        self.log.flush()
        return self.proc.returncode


def xadd(redis, stream, fn, marker):
    return redis.cmd("XADD", stream, "*", "event",
                     f'{{"event_id":"{fn}-{marker}","fn":"{fn}","n":"{marker}"}}')


def acked_all(redis, stream, last_id):
    if redis.cmd("XPENDING", stream, "relay")[0] != 0:
        return False
    for g in redis.cmd("XINFO", "GROUPS", stream):
        d = dict(zip(g[0::2], g[1::2]))
        if d["name"] == "relay":
            return d["lag"] == 0 and d["last-delivered-id"] == last_id
    return False


def bench_relay(run, redis, fdir, mode, env_extra, args):
    stream = f"events-{mode}"
    relay = Relay(run, mode, fdir, stream, env_extra)
    relay.wait(lambda: relay.started, 120, "worker started")
    fns = [PY_FN] + ([NODE_FN] if args.node else [])
    # Warm-up: the first invocations (and, with standby on, the demand that
    # makes the pool park a container for each handler).
    for i in range(2):
        for fn in fns:
            xadd(redis, stream, fn, f"w{i}")
        for fn in fns:
            relay.line_time(fn, f"w{i}")
        time.sleep(1)

    # (a) latency, events --gap s apart.
    c0 = relay.counters()
    lat = {fn: [] for fn in fns}
    t0 = time.monotonic() + 1
    sent = []
    for i in range(args.events):
        for j, fn in enumerate(fns):
            at = t0 + (i + 0.5 * j) * args.gap
            while True:
                d = at - time.monotonic()
                if d <= 0:
                    break
                time.sleep(d)
            ts = time.monotonic()
            xadd(redis, stream, fn, f"a{i}")
            sent.append((fn, f"a{i}", ts))
    for fn, marker, ts in sent:
        lat[fn].append(relay.line_time(fn, marker) - ts)

    c1 = relay.counters()
    # (b) throughput: the whole burst in one pipeline.
    time.sleep(1)
    cmds = b"".join(Redis.encode(
        "XADD", stream, "*", "event",
        f'{{"event_id":"{PY_FN}-b{i}","fn":"{PY_FN}","n":"b{i}"}}')
        for i in range(args.burst))
    tb = time.monotonic()
    redis.sock.sendall(cmds)
    ids = [redis.read() for _ in range(args.burst)]
    while not acked_all(redis, stream, ids[-1]):
        if relay.proc.poll() is not None:
            raise RuntimeError(f"relay ({mode}) exited; log in {relay.log.name}")
        if time.monotonic() - tb > 600:
            raise RuntimeError(f"relay ({mode}): burst not acknowledged within 600 s")
        time.sleep(0.02)
    burst_s = time.monotonic() - tb
    with relay.lock:
        missing = [i for i in range(args.burst) if (PY_FN, f"b{i}") not in relay.seen]
    if missing:
        raise RuntimeError(f"relay ({mode}): {len(missing)} burst event(s) acknowledged "
                           f"without their handler line, e.g. b{missing[0]}")
    c2 = relay.counters()
    metrics = relay.metrics()
    rc = relay.stop()
    # What the relay left after its graceful shutdown (swept by clean_up).
    left = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=relay.hostname={relay.hostname}"],
        capture_output=True, text=True).stdout.split()
    phases = None
    if c0 and c1 and c2:
        phases = [(c1["hits"] - c0["hits"], c1["misses"] - c0["misses"]),
                  (c2["hits"] - c1["hits"], c2["misses"] - c1["misses"])]
    return {"lat": lat, "burst_s": burst_s, "metrics": metrics, "rc": rc,
            "left": len(left), "phases": phases}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    build = os.environ.get("BUILD", "build")
    ap.add_argument("--relay", default=os.path.join(build, "relay"))
    ap.add_argument("--events", type=int, default=50)
    ap.add_argument("--burst", type=int, default=300)
    ap.add_argument("--gap", type=float, default=1.0,
                    help="seconds between two events of one handler in (a)")
    ap.add_argument("--no-node", dest="node", action="store_false")
    ap.add_argument("--concurrency", type=int,
                    help="the functions' template concurrency (default: unset, the template default of 2)")
    ap.add_argument("--no-off", dest="off", action="store_false",
                    help="only the standby relay (no STANDBY_MAX=0 run, no ratios): "
                         "to compare two builds' standby figures")
    ap.add_argument("--log-level", help="LOG_LEVEL for both relays (default: unset)")
    ap.add_argument("--keep-logs", metavar="DIR",
                    help="copy both relays' logs (each line stamped) into DIR")
    args = ap.parse_args()
    if not os.access(args.relay, os.X_OK):
        print(f"standby-e2e: no relay binary at {args.relay}", file=sys.stderr)
        return 2

    def on_signal(sig, _frame):
        raise KeyboardInterrupt(f"signal {sig}")

    # SIGINT too: a shell starting this in the background ignores it.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)

    run = Run(args.relay)
    res = {}
    load0 = os.getloadavg()
    others0 = len(subprocess.run(["docker", "ps", "-q"], capture_output=True,
                                 text=True).stdout.split())
    t_start = time.monotonic()
    try:
        redis = run.start_redis()
        fdir = run.write_functions(args.node, args.concurrency)
        lv = {"LOG_LEVEL": args.log_level} if args.log_level else {}
        res["standby"] = bench_relay(run, redis, fdir, "standby", lv, args)
        if args.off:
            res["off"] = bench_relay(run, redis, fdir, "off", {"STANDBY_MAX": "0", **lv}, args)
        redis.close()
    except KeyboardInterrupt:
        print("standby-e2e: interrupted, cleaning up", file=sys.stderr)
        left = run.clean_up()
        print(f"standby-e2e: removed {left} container(s) of this run", file=sys.stderr)
        return 130
    except Exception as e:
        print(f"standby-e2e: {e}", file=sys.stderr)
        for r in run.relays:
            r.log.flush()
            subprocess.run(["tail", "-n", "20", r.log.name], stderr=subprocess.DEVNULL)
            if args.keep_logs:
                os.makedirs(args.keep_logs, exist_ok=True)
                subprocess.run(["cp", r.log.name, args.keep_logs])
        run.clean_up()
        return 2
    wall = time.monotonic() - t_start
    load1 = os.getloadavg()
    if args.keep_logs:
        os.makedirs(args.keep_logs, exist_ok=True)
        for r in run.relays:
            r.log.flush()
            subprocess.run(["cp", r.log.name, args.keep_logs])
    swept = run.clean_up()

    fns = [(PY_FN, "Python")] + ([(NODE_FN, "Node")] if args.node else [])
    print(f"bench/standby-e2e: relay start ({args.relay}), one run of {wall:.0f} s; "
          f"standby = STANDBY_MAX unset (default), off = STANDBY_MAX=0")
    print(f"  (a) XADD -> forwarded handler line, {args.events} events per handler "
          f"{args.gap:g} s apart, ms")
    hdr = "".join(f"   {label + ' p50':>11} {'p95':>7} {'max':>7} {'>100ms':>6}"
                  for _, label in fns)
    print(f"  {'':8}{hdr}")
    modes = ("standby", "off") if args.off else ("standby",)
    p50 = {}
    for mode in modes:
        cells = ""
        for fn, _ in fns:
            v = res[mode]["lat"][fn]
            p50[(mode, fn)] = pct(v, 0.5)
            cells += (f"   {pct(v, 0.5) * 1e3:11.1f} {pct(v, 0.95) * 1e3:7.1f} "
                      f"{max(v) * 1e3:7.1f} {sum(x > 0.1 for x in v):6d}")
        ph = res[mode]["phases"]
        extra = (f"   standby hits/misses: (a) {ph[0][0]}/{ph[0][1]}, (b) {ph[1][0]}/{ph[1][1]}"
                 if ph else "")
        print(f"  {mode:8}{cells}{extra}")
    ok = True
    for fn, label in fns if args.off else ():
        r = p50[("standby", fn)] / p50[("off", fn)]
        met = r <= GOAL_LATENCY
        ok = ok and met
        print(f"  {label} p50 ratio standby/off {r:.3f} "
              f"(goal <= {GOAL_LATENCY}: {'met' if met else 'MISSED'})")
    print(f"  (b) {args.burst} back-to-back events (Python), MAX_CONCURRENCY default: "
          f"time until all acknowledged")
    for mode in modes:
        s = res[mode]["burst_s"]
        print(f"  {mode:8}   {s:6.2f} s   {args.burst / s:6.1f} events/s")
    if args.off:
        r = res["off"]["burst_s"] / res["standby"]["burst_s"]
        met = r >= GOAL_THROUGHPUT
        ok = ok and met
        print(f"  throughput ratio standby/off {r:.3f} "
              f"(goal >= {GOAL_THROUGHPUT}: {'met' if met else 'MISSED'})")
    for mode in modes:
        print(f"  {mode} relay: exit status {res[mode]['rc']} after SIGTERM, "
              f"{res[mode]['left']} container(s) left after it; metrics at the end: "
              f"{res[mode]['metrics']}")
    print(f"  load average (1/5/15 min) before {load0[0]:.2f}/{load0[1]:.2f}/{load0[2]:.2f}, "
          f"after {load1[0]:.2f}/{load1[1]:.2f}/{load1[2]:.2f}; "
          f"{others0} other container(s) running at the start; swept {swept} at the end")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
