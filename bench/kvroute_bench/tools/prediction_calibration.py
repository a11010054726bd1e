#!/usr/bin/env python3
"""kvroute's predicted time to first token against the realised one, by where
each turn went and its class (standard library only).

  prediction_calibration.py RUN_DIR [RUN_DIR ...] [--min-predicted S] [--time-scale S]

RUN_DIR: a configuration's directory of a kvroute-bench run (the one holding
requests.jsonl, or requests-<replica>.jsonl with several replicas), or any
directory above it. Over the served turns with a first token and a
prediction (predicted_ttft_s, made at routing), prints per (where, class) the
number of turns and the median, 10th and 90th percentile of realised over
predicted TTFT, the realised TTFT counted from routing to the first token
less the time the residency gate held the turn (residency_wait_s: the
prediction is of the engine's time). Where: "first", a session's first
served turn (or a request without a session); "home", the instance of the
session's previous served turn; "moved", another. A second table keeps the
turns predicted at or past --min-predicted modelled seconds (default 5;
wall / --time-scale), where the prediction is mostly the queue and the KV
the turn waits for rather than its own prefill. A median near 1 is a time
model that prices the waits as the engines serve them.
"""
import argparse
import collections
import statistics

from run_requests import check_time_scale, previous_turns, requests, run_arguments


def table(label, groups):
    print(f"  {label}")
    if not groups:
        print("    no turns")
        return
    for (where, klass), ratios in sorted(groups.items()):
        ratios.sort()
        n = len(ratios)
        print(f"    {where:5s} {klass:6s} n {n:5d}  median {statistics.median(ratios):.2f}"
              f"  p10 {ratios[n // 10]:.2f}  p90 {ratios[min(n - 1, 9 * n // 10)]:.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    run_arguments(parser)
    parser.add_argument("--min-predicted", type=float, default=5.0,
                        help="modelled seconds of prediction for the second table (default 5)")
    args = parser.parse_args()
    check_time_scale(parser, args)
    for run_dir in args.run_dirs:
        served = [r for r in requests(run_dir)
                  if r.get("outcome") == "ok" and r.get("t_first_token")
                  and r.get("t_arrival") and r.get("t_routed") and r.get("decode_backend")]
        previous = previous_turns(served)
        every = collections.defaultdict(list)
        long_ = collections.defaultdict(list)
        for r in served:
            before = previous.get(id(r))
            if before is None:
                where = "first"
            else:
                where = "home" if before["decode_backend"] == r["decode_backend"] else "moved"
            predicted = r.get("predicted_ttft_s")
            if predicted is None or predicted <= 0:
                continue
            realised = max(0.0, r["t_first_token"] - r["t_routed"]
                           - (r.get("residency_wait_s") or 0))
            key = (where, r.get("class") or "-")
            every[key].append(realised / predicted)
            if predicted / args.time_scale >= args.min_predicted:
                long_[key].append(realised / predicted)
        print(run_dir)
        table("every predicted turn: realised / predicted TTFT", every)
        table(f"predicted >= {args.min_predicted:g} modelled s", long_)


if __name__ == "__main__":
    main()
