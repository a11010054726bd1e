#!/usr/bin/env python3
"""Helpers of bench/soak/soak.sh (standard library only).

  soak_tools.py sample PID PORT                  -> "rss_kb fds shadow_tokens capacity_tokens":
                                                    kvroute's RSS and fds, and its shadow index
                                                    fill (GET /admin/backends, summed)
  soak_tools.py idle --port P --pid PID --n N    -> holds N idle connections, RSS/fds before,
                                                    while held and after they closed (JSON)
  soak_tools.py flood --port P --pid PID --n N   -> N requests, each with its own X-Session-Id;
                                                    RSS at every quarter (JSON)
  soak_tools.py verdict CSV                      -> first/last/max of RSS and fds, and whether
                                                    both stayed flat (exit 0 flat, 1 not)
"""
import argparse
import csv
import http.client
import json
import os
import socket
import statistics
import sys
import threading
import time


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def shadow_fill(port):
    """Tokens the router's shadow index believes cached, and the fleet's KV capacity."""
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", "/admin/backends")
        backends = json.loads(c.getresponse().read())["backends"]
        return (sum(int(b.get("shadow_tokens", 0)) for b in backends),
                sum(int(b.get("capacity_tokens", 0)) for b in backends))
    except (OSError, ValueError, KeyError, http.client.HTTPException):
        return -1, -1


def cmd_sample(args):
    shadow, capacity = shadow_fill(args.port)
    print(rss_kb(args.pid), fds(args.pid), shadow, capacity)


def settle(pid, want_fds_at_least=None, want_fds_at_most=None, timeout=30):
    """Waits (bounded) until the process's fd count passes a bound: the server accepts and
    closes connections asynchronously."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        n = fds(pid)
        if want_fds_at_least is not None and n >= want_fds_at_least:
            return n
        if want_fds_at_most is not None and n <= want_fds_at_most:
            return n
        time.sleep(0.2)
    return fds(pid)


def cmd_idle(args):
    pid = args.pid
    before = {"rss_kb": rss_kb(pid), "fds": fds(pid)}
    socks = []
    t0 = time.time()
    for _ in range(args.n):
        s = socket.create_connection(("127.0.0.1", args.port))
        socks.append(s)
    opened = time.time() - t0
    settle(pid, want_fds_at_least=before["fds"] + args.n)
    held = {"rss_kb": rss_kb(pid), "fds": fds(pid)}
    # Still open on kvroute's side? A connection it refused (max_connections) or timed out
    # reads EOF; an open one would block.
    alive = 0
    for s in socks:
        s.setblocking(False)
        try:
            alive += 0 if s.recv(1) == b"" else 1
        except BlockingIOError:
            alive += 1
        except OSError:
            pass
    for s in socks:
        s.close()
    settle(pid, want_fds_at_most=before["fds"] + 8)
    after = {"rss_kb": rss_kb(pid), "fds": fds(pid)}
    print(json.dumps({"connections": args.n, "still_open_when_measured": alive,
                      "open_seconds": round(opened, 2), "before": before, "held": held,
                      "after": after,
                      "held_bytes_per_connection":
                          round((held["rss_kb"] - before["rss_kb"]) * 1024 / args.n)}))


def model_of(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/v1/models")
    return json.loads(c.getresponse().read())["data"][0]["id"]


def cmd_flood(args):
    pid = args.pid
    model = model_of(args.port)
    body = json.dumps({"model": model, "prompt": "soak: one short prompt for every session",
                       "max_tokens": 1}).encode()
    lock = threading.Lock()
    next_i = [0]
    done = [0]
    statuses = {}
    marks = {}
    quarter = max(1, args.n // 4)
    points = [{"sessions": 0, "rss_kb": rss_kb(pid)}]

    def worker():
        conn = http.client.HTTPConnection("127.0.0.1", args.port, timeout=60)
        while True:
            with lock:
                i = next_i[0]
                if i >= args.n:
                    break
                next_i[0] += 1
            status = 0
            for _ in range(2):  # one reconnect if the keep-alive connection was closed
                try:
                    conn.request("POST", "/v1/completions", body,
                                 {"Content-Type": "application/json",
                                  "X-Session-Id": f"flood-{args.seed}-{i}"})
                    r = conn.getresponse()
                    r.read()
                    status = r.status
                    break
                except (OSError, http.client.HTTPException):
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", args.port, timeout=60)
            with lock:
                statuses[status] = statuses.get(status, 0) + 1
                done[0] += 1
                if done[0] % quarter == 0 and done[0] not in marks:
                    marks[done[0]] = True
                    points.append({"sessions": done[0], "rss_kb": rss_kb(pid)})
        conn.close()

    t0 = time.time()
    threads = [threading.Thread(target=worker) for _ in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"sessions": args.n, "seconds": round(time.time() - t0, 1),
                      "statuses": {str(k): v for k, v in sorted(statuses.items())},
                      "rss": points}))


def slope_per_hour(ts, ys):
    if len(ts) < 2:
        return 0.0
    mt, my = statistics.fmean(ts), statistics.fmean(ys)
    den = sum((t - mt) ** 2 for t in ts)
    return 0.0 if den == 0 else sum((t - mt) * (y - my) for t, y in zip(ts, ys)) / den * 3600


def cmd_verdict(args):
    rows = [r for r in csv.DictReader(open(args.csv)) if r["phase"] == "load"]
    if len(rows) < 8:
        print("verdict: too few samples under load")
        return 1
    ts = [float(r["t_s"]) for r in rows]
    # Warm-up: kvroute's bounded structures fill first. The shadow index grows until new
    # prefixes are balanced by the evictions it mirrors from the instances (it levels off
    # near the fleet's KV capacity); the upstream pools and the session table fill too. The
    # steady part starts when the shadow index has reached 98% of its largest size in the
    # run (or after the first quarter of the samples without that column).
    start = len(rows) // 4
    shadows = [float(r.get("shadow_tokens") or -1) for r in rows]
    if max(shadows) > 0:
        start = max(3, next(i for i, v in enumerate(shadows) if v >= 0.98 * max(shadows)))
    else:
        print("note: no shadow index sizes; warm-up is the first quarter")
    steady = rows[start:]
    if len(steady) < 8:
        print(f"verdict: only {len(steady)} samples after warm-up; run longer")
        return 1
    st = ts[start:]
    half = len(steady) // 2
    ok = True
    # Flat, after warm-up: RSS: the least-squares trend, projected over one hour, adds less
    # than 20% (at ~8 requests/s that is a leak of ~100 bytes per request on ~15 MB), and the
    # mean of the last half is within 5% of the first half's. Descriptors
    # rise and fall with requests in flight (a client and an upstream connection each), so
    # their trend is noise: flat means the last half's mean is within 16 of the first half's
    # and, once the load stopped, no more are open than the steady mean (leaked descriptors
    # would stay).
    after = [r for r in csv.DictReader(open(args.csv)) if r["phase"] == "after_load"]
    for key, unit in (("rss_kb", "KiB"), ("fds", "fds")):
        ys = [float(r[key]) for r in rows]
        sy = ys[start:]
        trend = slope_per_hour(st, sy)
        h1, h2 = statistics.fmean(sy[:half]), statistics.fmean(sy[half:])
        if key == "rss_kb":
            flat = trend < 0.20 * h1 and h2 <= 1.05 * h1
            extra = ""
        else:
            rest = float(after[0][key]) if after else None
            flat = h2 - h1 <= 16 and (rest is None or rest <= statistics.fmean(sy) + 1)
            extra = f", after the load {rest:.0f}" if rest is not None else ""
        ok = ok and flat
        print(f"{key:7s} first {ys[0]:.0f} last {ys[-1]:.0f} max {max(ys):.0f} {unit}; "
              f"steady from t={st[0]:.0f}s: {sy[0]:.0f} -> {sy[-1]:.0f}, trend {trend:+.0f} "
              f"{unit}/h, mean {h1:.0f} then {h2:.0f}{extra} -> "
              f"{'flat' if flat else 'NOT flat'}")
    if "shadow_tokens" in rows[0]:
        print(f"shadow index: {float(rows[start]['shadow_tokens']):.0f} of "
              f"{float(rows[start]['capacity_tokens']):.0f} tokens at t={st[0]:.0f}s, "
              f"{float(rows[-1]['shadow_tokens']):.0f} at the end")
    print(f"verdict: {'RSS and fds stayed flat' if ok else 'growth detected'} "
          f"({len(rows)} samples over {ts[-1] - ts[0]:.0f} s)")
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sample")
    s.add_argument("pid", type=int)
    s.add_argument("port", type=int)
    s = sub.add_parser("idle")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--pid", type=int, required=True)
    s.add_argument("--n", type=int, default=10000)
    s = sub.add_parser("flood")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--pid", type=int, required=True)
    s.add_argument("--n", type=int, default=30000)
    s.add_argument("--concurrency", type=int, default=32)
    s.add_argument("--seed", type=int, default=1)
    s = sub.add_parser("verdict")
    s.add_argument("csv")
    args = p.parse_args()
    return {"sample": cmd_sample, "idle": cmd_idle, "flood": cmd_flood,
            "verdict": cmd_verdict}[args.cmd](args) or 0


if __name__ == "__main__":
    sys.exit(main())
