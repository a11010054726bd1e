#!/usr/bin/env python3
"""Helpers of bench/soak/soak.sh (standard library only).

  soak_tools.py sample PID                       -> "rss_kb fds" of a process
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


def cmd_sample(args):
    print(rss_kb(args.pid), fds(args.pid))


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
    if len(rows) < 4:
        print("verdict: too few samples under load")
        return 1
    ts = [float(r["t_s"]) for r in rows]
    ok = True
    # The first quarter is warm-up: prefix caches, the shadow index and connection pools fill.
    # Flat means, after it: (1) the least-squares trend over the remaining samples, projected
    # over an hour, adds less than 10% (RSS) or 16 descriptors (fds), and (2) the mean of the
    # last quarter is within 5% (RSS) or 16 descriptors (fds) of the mean of the second one.
    q = len(rows) // 4
    for key, unit, rel, abs_fds in (("rss_kb", "KiB", 0.10, None), ("fds", "fds", None, 16)):
        ys = [float(r[key]) for r in rows]
        steady_t, steady_y = ts[q:], ys[q:]
        trend = slope_per_hour(steady_t, steady_y)
        q2 = statistics.fmean(ys[q:2 * q] or ys[q:q + 1])
        q4 = statistics.fmean(ys[-q:] if q else ys[-1:])
        if rel is not None:
            flat = trend < rel * q2 and q4 <= 1.05 * q2
        else:
            flat = trend < abs_fds and q4 - q2 <= abs_fds
        ok = ok and flat
        print(f"{key:7s} first {ys[0]:.0f} last {ys[-1]:.0f} max {max(ys):.0f} {unit}; "
              f"max/first {max(ys) / ys[0]:.3f}; after warm-up: trend {trend:+.0f} {unit}/h, "
              f"last-quarter mean {q4:.0f} vs second-quarter mean {q2:.0f} -> "
              f"{'flat' if flat else 'NOT flat'}")
    print(f"verdict: {'RSS and fds stayed flat' if ok else 'growth detected'} "
          f"({len(rows)} samples over {ts[-1] - ts[0]:.0f} s)")
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sample")
    s.add_argument("pid", type=int)
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
