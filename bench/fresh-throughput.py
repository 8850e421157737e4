#!/usr/bin/env python3
"""bench/fresh-throughput: fresh-mode events/s against `docker run -P8`, runc and crun.

    bench/fresh-throughput.py [--relay $BUILD/relay] [--events 40] [--rounds 1]
                              [--runtimes runc,crun]

The bar: fresh-mode throughput (one container per invocation,
STANDBY_MAX=0) stays >= 0.9x the `docker run -P8` figure of the same run.
In one run, interleaved, for each runtime (each round):

  (1) relay: `relay start` with MAX_CONCURRENCY=8, `concurrency: 8`, STANDBY_MAX=0 and
      RELAY_OCI_RUNTIME=<runtime> (runc: unset, the daemon's default) on a
      private redis-server; after one unmeasured warm-up event, --events
      trivial Python events XADDed in one pipeline, timed from just before
      the first XADD until the group has acknowledged them all (every
      handler line checked). The relay is stopped before (2).
  (2) docker: the same number of `docker run --rm -i --runtime <runtime>`
      of the same function image, hardened as Relay's containers are
      (--memory 128m --memory-swap 128m --cpus 1 --pids-limit 128
      --cap-drop ALL --read-only --tmpfs /tmp:rw,noexec,nosuid,size=64m
      --security-opt no-new-privileges --user 10001:10001,
      RELAY_HANDLER set), the event on stdin, 8 at a time (xargs -P8), timed
      from the start until the last exits; every exit status must be 0 (the
      CLI's attach sometimes misses the line of a container that exits at
      once: the lost lines are counted and printed).

Prints events/s for each, relay/docker per runtime (goal >= 0.9) and
crun/runc for each side. Reuses bench/standby-e2e.py's redis, relay and
clean-up code (the same clean-up on Ctrl-C or an error). Exit status 0 when
every relay/docker ratio holds, 1 when one is missed, 2 on error.
"""
import argparse
import importlib.util
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("sbe2e", os.path.join(HERE, "standby-e2e.py"))
sbe2e = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sbe2e)

GOAL = 0.9
HARDENING = ["--memory", "128m", "--memory-swap", "128m", "--cpus", "1", "--pids-limit", "128",
             "--cap-drop", "ALL", "--read-only", "--tmpfs", "/tmp:rw,noexec,nosuid,size=64m",
             "--security-opt", "no-new-privileges", "--user", "10001:10001"]


def relay_phase(run, redis, fdir, rt, tag, n):
    stream = f"events-{tag}"
    env = {"MAX_CONCURRENCY": "8", "STANDBY_MAX": "0"}
    if rt != "runc":
        env["RELAY_OCI_RUNTIME"] = rt
    relay = sbe2e.Relay(run, tag, fdir, stream, env)
    relay.wait(lambda: relay.started, 120, "worker started")
    sbe2e.xadd(redis, stream, sbe2e.PY_FN, "w0")
    relay.line_time(sbe2e.PY_FN, "w0")
    time.sleep(1)
    cmds = b"".join(sbe2e.Redis.encode(
        "XADD", stream, "*", "event",
        f'{{"event_id":"{sbe2e.PY_FN}-b{i}","fn":"{sbe2e.PY_FN}","n":"b{i}"}}')
        for i in range(n))
    t0 = time.monotonic()
    redis.sock.sendall(cmds)
    ids = [redis.read() for _ in range(n)]
    while not sbe2e.acked_all(redis, stream, ids[-1]):
        if relay.proc.poll() is not None:
            raise RuntimeError(f"relay ({tag}) exited; log in {relay.log.name}")
        if time.monotonic() - t0 > 600:
            raise RuntimeError(f"relay ({tag}): not acknowledged within 600 s")
        time.sleep(0.02)
    secs = time.monotonic() - t0
    with relay.lock:
        missing = [i for i in range(n) if (sbe2e.PY_FN, f"b{i}") not in relay.seen]
    if missing:
        raise RuntimeError(f"relay ({tag}): {len(missing)} event(s) without their line")
    relay.stop()
    run.sweep()
    return secs


def image_of_function():
    imgs = subprocess.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}"],
                          capture_output=True, text=True).stdout.split()
    mine = [i for i in imgs if i.startswith(f"relay-fn-{sbe2e.PY_FN}:")]
    if not mine:
        raise RuntimeError("the relay phase built no function image")
    return mine[0]


def docker_phase(image, rt, n, tmp):
    label = f"relay.hostname=fresh-tp-{sbe2e.PID}"
    script = (
        'printf \'{"event_id":"d%s","fn":"x","n":"d%s"}\' "$1" "$1" | '
        f'docker run --rm -i --runtime {rt} --label {label} '
        + " ".join(HARDENING) + f' -e RELAY_HANDLER=ok.handler {image}')
    out = os.path.join(tmp, f"docker-{rt}.out")
    t0 = time.monotonic()
    with open(out, "w") as f:
        p = subprocess.run(
            ["xargs", "-P8", "-I{}", "sh", "-c", script, "sh", "{}"],
            input="".join(f"{i}\n" for i in range(n)), text=True, stdout=f,
            stderr=subprocess.STDOUT)
    secs = time.monotonic() - t0
    text = open(out).read()
    got = sum(1 for i in range(n) if f"e2e d{i}\n" in text)
    if p.returncode != 0:
        raise RuntimeError(f"docker run ({rt}): exit {p.returncode}, {got}/{n} lines; see {out}")
    # Every container exited 0 (xargs says so); the CLI's attach can miss
    # the output of a container that exits at once, which is reported.
    if got != n:
        print(f"  (docker run {rt}: {n - got} of {n} output lines lost by the CLI, exits all 0)")
    return secs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--relay", default=os.path.join(os.environ.get("BUILD", "build"), "relay"))
    ap.add_argument("--events", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--runtimes", default="runc,crun")
    args = ap.parse_args()
    if not os.access(args.relay, os.X_OK):
        print(f"fresh-throughput: no relay binary at {args.relay}", file=sys.stderr)
        return 2
    rts = args.runtimes.split(",")
    run = sbe2e.Run(args.relay)
    run.hostnames.append(f"fresh-tp-{sbe2e.PID}")

    def on_signal(sig, _frame):
        run.clean_up()
        sys.exit(2)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    res = {}
    try:
        load0 = os.getloadavg()
        redis = run.start_redis()
        fdir = run.write_functions(False)
        # Like for like: 8 at a time on both sides (the template's default
        # concurrency of 2 would hold relay to 2 containers against -P8).
        with open(os.path.join(fdir, sbe2e.PY_FN, "template.yaml"), "a") as f:
            f.write("concurrency: 8\n")
        for r in range(args.rounds):
            for rt in rts:
                rs = relay_phase(run, redis, fdir, rt, f"{rt}-{r}", args.events)
                ds = docker_phase(image_of_function(), rt, args.events, run.tmp)
                res.setdefault(rt, []).append((args.events / rs, args.events / ds))
                print(f"round {r} {rt}: relay {args.events / rs:.2f} events/s "
                      f"({rs:.1f} s), docker run -P8 {args.events / ds:.2f} events/s "
                      f"({ds:.1f} s)", flush=True)
        load1 = os.getloadavg()
    except RuntimeError as e:
        print(f"fresh-throughput: {e}", file=sys.stderr)
        run.clean_up()
        return 2
    run.clean_up()
    ok = True
    print(f"\n{args.events} events each, {args.rounds} round(s), MAX_CONCURRENCY=8 vs -P8; "
          f"load average {load0[0]:.2f} -> {load1[0]:.2f}")
    mean = {}
    for rt in rts:
        rel = sum(x[0] for x in res[rt]) / len(res[rt])
        dock = sum(x[1] for x in res[rt]) / len(res[rt])
        mean[rt] = (rel, dock)
        ratio = rel / dock
        ok = ok and ratio >= GOAL
        print(f"{rt:5}: relay {rel:.2f} events/s, docker run -P8 {dock:.2f} events/s, "
              f"relay/docker {ratio:.2f} (goal >= {GOAL}) {'ok' if ratio >= GOAL else 'MISSED'}")
    if "runc" in mean and "crun" in mean:
        print(f"crun/runc: relay {mean['crun'][0] / mean['runc'][0]:.2f}, "
              f"docker run {mean['crun'][1] / mean['runc'][1]:.2f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
