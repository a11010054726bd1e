#!/usr/bin/env python3
"""The cache estimate against the engines' cached tokens, by how long each turn
waited for its first token (standard library only).

  estimate_by_wait.py RUN_DIR [RUN_DIR ...] [--time-scale S]

RUN_DIR: a configuration's directory of a kvroute-bench run (the one holding
requests.jsonl, or requests-<replica>.jsonl with several replicas), or any
directory above it. Over the served WARM turns, bucketed by their time from
routing to first token in modelled seconds (wall / S), prints the estimated
and the engines' cached tokens, each summed over the bucket and divided by
its prompt tokens. A router whose estimate sees the engine at the turn's
admission agrees in every bucket; one that sees it only at routing turns
optimistic in the long waits, where the engine evicted what the turns
queued ahead of it needed.
"""
import argparse

from run_requests import check_time_scale, requests, run_arguments

BUCKETS = ((0, 1), (1, 5), (5, 15), (15, 30), (30, float("inf")))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    run_arguments(parser)
    args = parser.parse_args()
    check_time_scale(parser, args)
    for run_dir in args.run_dirs:
        turns = [r for r in requests(run_dir)
                 if r.get("outcome") == "ok" and r.get("class") == "WARM"
                 and r.get("prompt_tokens") and r.get("t_first_token") and r.get("t_routed")]
        if not turns:
            print(f"{run_dir}: no served WARM turns with a first token")
            continue
        cells = []
        for lo, hi in BUCKETS:
            bucket = [r for r in turns
                      if lo <= (r["t_first_token"] - r["t_routed"]) / args.time_scale < hi]
            if not bucket:
                continue
            prompt = sum(r["prompt_tokens"] for r in bucket)
            estimated = sum(r.get("cached_tokens_est") or 0 for r in bucket) / prompt
            cached = sum(r.get("cached_tokens") or 0 for r in bucket) / prompt
            label = f">= {lo:g} s" if hi == float("inf") else f"{lo:g}-{hi:g} s"
            cells.append(f"{label}: n {len(bucket)}, estimated {estimated:.3f}, cached {cached:.3f}")
        print(f"{run_dir}\n  " + "\n  ".join(cells))


if __name__ == "__main__":
    main()
