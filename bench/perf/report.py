#!/usr/bin/env python3
"""Turns bench/perf's results.jsonl into results.json and results.md.

  report.py results.jsonl environment.txt results.json results.md

Every ratio is against nginx measured in the same run. "added" is a
latency percentile minus the same percentile measured direct to the upstream
at the same concurrency.

With several rounds (run.sh ROUNDS=N: every target measured once per round,
in turn), each figure is the median over the rounds, and each ratio to nginx
is the median of the rounds' ratios (nginx measured in the same round), so
one disturbed round does not decide a result.
"""
import json
import re
import statistics
import sys

TARGET_ORDER = ["direct", "nginx", "haproxy", "kvroute-rr", "kvroute-v2-base", "kvroute-v2",
                "kvroute-v2-pgo"]
SCEN_ORDER = ["small", "32k", "128k", "sse1", "sse256"]
SCEN_LABEL = {"small": "1k tokens (4 KiB)", "32k": "32k tokens (128 KiB)",
              "128k": "128k tokens (512 KiB)", "sse1": "stream, 1 event",
              "sse256": "stream, 256 events"}
SSE_EVENTS = {"sse1": 1, "sse256": 256}


def load(path):
    """{round: {(target, scenario, conns): row}}"""
    rounds = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                rounds.setdefault(r.get("round", 1), {})[(r["target"], r["scenario"],
                                                          r["conns"])] = r
    return rounds


def median_of(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def combine(per_round):
    """The median of every numeric field over a key's rounds."""
    out = {}
    for k in per_round[0]:
        vals = [m.get(k) for m in per_round]
        out[k] = median_of(vals) if all(isinstance(v, (int, float)) or v is None
                                        for v in vals) else vals[0]
    return out


def metrics(r, direct):
    w = r["wrk"]
    req = w["requests"]
    m = {
        "requests": req,
        "rps": req / w["duration_us"] * 1e6 if w["duration_us"] else 0.0,
        "p50_us": w["lat_p50_us"], "p90_us": w["lat_p90_us"], "p99_us": w["lat_p99_us"],
        "mean_us": w["lat_mean_us"],
        "errors": w["errors_status"] + w["errors_read"] + w["errors_write"] +
                  w["errors_connect"] + w["errors_timeout"],
        "cpu_s": r["cpu_s"],
        "cpu_s_per_1k": (r["cpu_s"] / req * 1000) if (r["cpu_s"] is not None and req) else None,
    }
    # How busy the proxy's core and the client's (wrk + upstream) were.
    for k in ("proxy_core_busy", "client_core_busy"):
        if r.get(k) is not None:
            m[k] = r[k]
    # User-space and kernel CPU per request (µs), from utime and stime.
    user = r.get("cpu_user_s")
    if user is not None and r["cpu_s"] is not None and req:
        m["cpu_user_us"] = user / req * 1e6
        m["cpu_sys_us"] = (r["cpu_s"] - user) / req * 1e6
    if direct is not None:
        dw = direct["wrk"]
        m["added_p50_us"] = w["lat_p50_us"] - dw["lat_p50_us"]
        m["added_p99_us"] = w["lat_p99_us"] - dw["lat_p99_us"]
    return m


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def fmt(v, digits=0):
    if v is None:
        return "–"
    return f"{v:,.{digits}f}"


def fmt_ratio(v):
    return "" if v is None else f" ({v:.2f}×)"


def main():
    rounds = load(sys.argv[1])
    env = open(sys.argv[2]).read()
    keys = {k for rows in rounds.values() for k in rows}
    targets = [t for t in TARGET_ORDER if any(k[0] == t for k in keys)]
    scens = [s for s in SCEN_ORDER if any(k[1] == s for k in keys)]
    conns = sorted({k[2] for k in keys})
    out = {"environment": env, "rounds": len(rounds), "runs": []}
    # Per round: metrics, and ratios to that round's nginx.
    per_round = {}  # (t, s, c) -> [metrics of each round]
    for rows in rounds.values():
        for (t, s, c), r in rows.items():
            direct = rows.get(("direct", s, c))
            m = metrics(r, direct if t != "direct" else None)
            ng_row = rows.get(("nginx", s, c))
            if ng_row is not None:
                ng = metrics(ng_row, direct)
                m["vs_nginx"] = {
                    "rps": ratio(m["rps"], ng["rps"]),
                    "p50": ratio(m["p50_us"], ng["p50_us"]),
                    "p99": ratio(m["p99_us"], ng["p99_us"]),
                    "added_p50": ratio(m.get("added_p50_us"), ng.get("added_p50_us")),
                    "cpu_per_1k": ratio(m["cpu_s_per_1k"], ng["cpu_s_per_1k"]),
                }
            per_round.setdefault((t, s, c), []).append(m)
    table = {}
    for key, ms in per_round.items():
        m = combine(ms)
        if "vs_nginx" in ms[0]:
            m["vs_nginx"] = combine([x["vs_nginx"] for x in ms])
            m["rps_ratio_rounds"] = [x["vs_nginx"]["rps"] for x in ms]
        table[key] = m
    for (t, s, c), m in table.items():
        out["runs"].append({"target": t, "scenario": s, "conns": c, **m})

    # Streaming: time added to the first event (the 1-event stream's added
    # p50) and per event (slope between the 1- and 256-event streams).
    streaming = {}
    for t in targets:
        if t == "direct":
            continue
        for c in conns:
            a, b = table.get((t, "sse1", c)), table.get((t, "sse256", c))
            if a is None or b is None or "added_p50_us" not in a:
                continue
            per_event = (b["added_p50_us"] - a["added_p50_us"]) / (256 - 1)
            streaming.setdefault(t, {})[c] = {"added_first_event_us": a["added_p50_us"],
                                              "added_per_event_us": per_event}
    out["streaming"] = streaming

    # The targets, checked on kvroute v2 (and its PGO build, if run).
    # With PROXY_CPU == CLIENT_CPU (and pinning on) everything shares one
    # core: no request crosses vCPUs, so a c=1 latency is the proxies' own
    # work and context switches without the VM's cross-vCPU wake-ups.
    pin = re.search(r"PIN=(\d+) PROXY_CPU=(\d+) CLIENT_CPU=(\d+)", env)
    one_core = bool(pin) and pin.group(1) == "1" and pin.group(2) == pin.group(3)
    layout = ", one core" if one_core else ""
    out["one_core"] = one_core
    checks = []
    cmax, cmin = max(conns), min(conns)
    for v2name in ("kvroute-v2", "kvroute-v2-pgo"):
        who = "v2" if v2name == "kvroute-v2" else "v2 (PGO)"
        v2s, ngs = table.get((v2name, "small", cmax)), table.get(("nginx", "small", cmax))
        if v2s and ngs:
            rr = v2s["rps_ratio_rounds"]
            shown = f"{v2s['vs_nginx']['rps']:.2f}× nginx"
            if len(rr) > 1:
                shown += " (median; rounds: " + ", ".join(f"{x:.2f}" for x in rr) + ")"
            if not one_core and "client_core_busy" in v2s and "proxy_core_busy" in v2s:
                shown += (f"; cores busy: kvroute's {v2s['proxy_core_busy'] * 100:.0f}%, "
                          f"client's {v2s['client_core_busy'] * 100:.0f}%")
            checks.append((f"{who} throughput ≥ nginx, 1k tokens, c={cmax}{layout}", shown,
                           v2s["vs_nginx"]["rps"] >= 1.0))
        v2 = table.get((v2name, "small", cmin))
        if v2 and "added_p50_us" in v2:
            checks.append((f"{who} added p50 ≤ 100 µs, 1k tokens, c={cmin}{layout}",
                           f"{fmt(v2['added_p50_us'])} µs", v2["added_p50_us"] <= 100))
        v2 = table.get((v2name, "128k", cmin))
        if v2 and "added_p50_us" in v2:
            checks.append((f"{who} added p50 ≤ 1 ms, 128k tokens, c={cmin}{layout}",
                           f"{fmt(v2['added_p50_us'])} µs", v2["added_p50_us"] <= 1000))
        st = streaming.get(v2name, {}).get(cmin)
        if st:
            checks.append((f"{who} streaming adds ≤ 10 µs per event, c={cmin}{layout}",
                           f"{st['added_per_event_us']:.1f} µs", st["added_per_event_us"] <= 10))
    out["targets"] = [{"check": n, "measured": v, "met": ok} for n, v, ok in checks]
    with open(sys.argv[3], "w") as f:
        json.dump(out, f, indent=1)

    md = []
    proxies = [t for t in targets if t not in ("direct", "nginx")]

    def per_proxy_table(md, title, column, cell):
        """A row per body and concurrency, a column per target (nginx first)."""
        md.append(title + "\n")
        md.append("| body | conns | " + " | ".join(f"{t} {column}" for t in ["nginx"] + proxies)
                  + " |")
        md.append("|---|---:|" + "---:|" * (len(proxies) + 1))
        for s in scens:
            for c in conns:
                m_of = [table.get((t, s, c)) for t in ["nginx"] + proxies]
                cells = ["–" if m is None else cell(m) for m in m_of]
                md.append(f"| {SCEN_LABEL[s]} | {c} | " + " | ".join(cells) + " |")
        md.append("")

    if "nginx" in targets and proxies:
        md.append("Summary: each cell is req/s · p50 · p99 as a ratio to nginx in the same run "
                  "(req/s above 1 is better, latency below 1 is better).\n")
        md.append("| body | conns | nginx req/s, p50, p99 | " +
                  " | ".join(proxies) + " |")
        md.append("|---|---:|---:|" + "---:|" * len(proxies))
        for s in scens:
            for c in conns:
                ng = table.get(("nginx", s, c))
                if ng is None:
                    continue
                cells = []
                for t in proxies:
                    m = table.get((t, s, c))
                    cells.append("–" if m is None else
                                 f"{m['vs_nginx']['rps']:.2f} · "
                                 f"{m['vs_nginx']['p50']:.2f} · "
                                 f"{m['vs_nginx']['p99']:.2f}")
                md.append(f"| {SCEN_LABEL[s]} | {c} | {fmt(ng['rps'])}, {fmt(ng['p50_us'])} µs, "
                          f"{fmt(ng['p99_us'])} µs | " + " | ".join(cells) + " |")
        md.append("")
        per_proxy_table(md, "Latency added over direct (p50, µs) and proxy CPU per request (ms):",
                        "added p50, CPU",
                        lambda m: f"{fmt(m.get('added_p50_us'))} µs, {fmt(m['cpu_s_per_1k'], 3)} ms")
    if any("cpu_user_us" in m for m in table.values()):
        per_proxy_table(md, "Proxy CPU per request split into user space and kernel (µs, from the "
                        "process's utime and stime; clock ticks of 10 ms, so rows of few requests "
                        "are coarse):", "user / kernel",
                        lambda m: ("–" if "cpu_user_us" not in m else
                                   f"{fmt(m['cpu_user_us'], 1)} / {fmt(m['cpu_sys_us'], 1)}"))
    # On one core the proxy's and the client's core are the same: no table.
    if not one_core and any("client_core_busy" in m for m in table.values()):
        # Under PROXY_CPU_QUOTA the proxy's ceiling is its quota, not a core.
        q = re.search(r'PROXY_CPU_QUOTA="(\d+)"', env)
        quota = int(q.group(1)) / 100 if q else 1.0

        def busy(m):
            if "client_core_busy" not in m or "proxy_core_busy" not in m:
                return "–"
            cell = f"{m['proxy_core_busy'] * 100:.0f}% / {m['client_core_busy'] * 100:.0f}%"
            # A saturated client core (wrk + upstream) and a proxy core with
            # room left: the load generator, not the proxy, set req/s.
            proxy_full = m["proxy_core_busy"] >= 0.95 * quota
            if m["client_core_busy"] >= 0.95 and not proxy_full:
                cell += " (client-bound)"
            elif proxy_full:
                cell += " (proxy-bound)"
            return cell
        per_proxy_table(md, "Which core limits throughput: busy share of the proxy's core / the "
                        "client's core (wrk and the upstream) during the measured run, from "
                        "/proc/stat. Where the client's core is saturated and the proxy's is not, "
                        "req/s measures the load generator, and ratios near 1 are parity within "
                        "noise; CPU per request then compares the proxies:", "proxy / client core",
                        busy)
    md.append("Throughput, latency (wrk, one thread) and proxy CPU; (×) = ratio to nginx in "
              "the same run; added = percentile minus direct's at the same concurrency.\n")
    md.append("| body | conns | target | req/s | p50 µs | p99 µs | added p50 µs | added p99 µs "
              "| CPU s / 1k req |")
    md.append("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for s in scens:
        for c in conns:
            ng = table.get(("nginx", s, c))
            for t in targets:
                m = table.get((t, s, c))
                if m is None:
                    continue
                vs = {"rps": "rps", "p50_us": "p50", "p99_us": "p99", "added_p50_us": "added_p50",
                      "cpu_s_per_1k": "cpu_per_1k"}
                r = (lambda k: m["vs_nginx"].get(vs[k]) if ng and t != "nginx" and "vs_nginx" in m
                     else None)
                md.append(
                    f"| {SCEN_LABEL[s]} | {c} | {t} | {fmt(m['rps'])}{fmt_ratio(r('rps'))} "
                    f"| {fmt(m['p50_us'])}{fmt_ratio(r('p50_us'))} "
                    f"| {fmt(m['p99_us'])}{fmt_ratio(r('p99_us'))} "
                    f"| {fmt(m.get('added_p50_us'))}{fmt_ratio(r('added_p50_us'))} "
                    f"| {fmt(m.get('added_p99_us'))} "
                    f"| {fmt(m['cpu_s_per_1k'], 3)}{fmt_ratio(r('cpu_s_per_1k'))} |"
                    + (" errors: %d" % m["errors"] if m["errors"] else ""))
    if streaming:
        md.append("")
        md.append("Streaming (p50, added over direct): to the first event = the 1-event "
                  "stream's added p50; per event = (256-event − 1-event) / 255.\n")
        md.append("| target | conns | added to first event µs | added per event µs |")
        md.append("|---|---:|---:|---:|")
        for t in targets:
            for c in conns:
                st = streaming.get(t, {}).get(c)
                if st:
                    md.append(f"| {t} | {c} | {st['added_first_event_us']} "
                              f"| {st['added_per_event_us']:.2f} |")
    if checks:
        md.append("")
        md.append("| issue target | measured | met |")
        md.append("|---|---:|---|")
        for n, v, ok in checks:
            md.append(f"| {n} | {v} | {'yes' if ok else '**no**'} |")
    with open(sys.argv[4], "w") as f:
        f.write("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
