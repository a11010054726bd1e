#!/usr/bin/env python3
"""What the slowest served turns of a run have in common (standard library only).

  slowest_turns.py RUN_DIR [RUN_DIR ...] [--share F] [--time-scale S]

RUN_DIR: a configuration's directory of a kvroute-bench run (the one holding
requests.jsonl, or requests-<replica>.jsonl with several replicas), or any
directory above it. Over the served turns with a first token, takes the
slowest share F (default 0.01: those at or past the TTFT p99) and prints, in
modelled seconds (wall / S): their TTFT, the part of it the residency gate
held them (residency_wait_s), and how they are split by class and by
cluster admission (resident, admitted, waited, forced, unavailable; none with
one kvroute), and how many were moved: sent to another instance than their
session's previous served turn, with how much of that turn's prompt the
engine no longer had cached for them; and of those that stayed at home (the
same instance as that turn), how many found at least 1,000 tokens of that
prompt evicted (--lost N sets the bound), and how many tokens in all. A TTFT
made of residency wait is a turn the gate held for room; the rest is the
engine's queue and prefill; a moved turn's prefill is the context its new
instance lacks, and an evicted one's the context its own instance dropped
while the session was away (with --share 1: every served turn, which shows
whether one configuration keeps its sessions' KV resident less than another).
"""
import argparse
import collections

from run_requests import check_time_scale, previous_turns, requests, run_arguments


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    run_arguments(parser)
    parser.add_argument("--share", type=float, default=0.01,
                        help="the slowest share of the served turns (default 0.01)")
    parser.add_argument("--lost", type=int, default=1000,
                        help="tokens of its previous prompt a turn at home must find "
                             "uncached to count as evicted (default 1000)")
    args = parser.parse_args()
    check_time_scale(parser, args)
    if not 0 < args.share <= 1:
        parser.error("--share must be in (0, 1]")
    if args.lost < 1:
        parser.error("--lost must be at least 1")
    for run_dir in args.run_dirs:
        turns = [r for r in requests(run_dir)
                 if r.get("outcome") == "ok" and r.get("t_first_token") and r.get("t_arrival")]
        if not turns:
            print(f"{run_dir}: no served turns with a first token")
            continue
        previous = previous_turns(turns)
        turns.sort(key=lambda r: r["t_arrival"] - r["t_first_token"])
        slow = turns[:max(1, round(len(turns) * args.share))]
        n = len(slow)
        ttft = sum(r["t_first_token"] - r["t_arrival"] for r in slow) / n / args.time_scale
        held = sum(r.get("residency_wait_s") or 0 for r in slow) / n / args.time_scale
        split = collections.Counter(
            f"{r.get('class')}/{r.get('cluster_admission') or '-'}" for r in slow)
        moved = [r for r in slow if id(r) in previous
                 and previous[id(r)].get("decode_backend") != r.get("decode_backend")]
        lost = [uncached(previous[id(r)], r) for r in moved
                if previous[id(r)].get("prompt_tokens")]
        home = [uncached(previous[id(r)], r) for r in slow if id(r) in previous
                and previous[id(r)].get("decode_backend") == r.get("decode_backend")]
        evicted = [t for t in home if t >= args.lost]
        print(f"{run_dir}: the slowest {n} of {len(turns)} served turns\n"
              f"  TTFT {ttft:.1f} s on average, {held:.1f} s of it held by the residency gate\n"
              f"  " + ", ".join(f"{k} {v}" for k, v in sorted(split.items())) + "\n"
              f"  moved off their session's previous instance: {len(moved)}"
              + (f", its previous prompt uncached by {sum(lost) / len(lost):,.0f} tokens"
                 f" on average" if lost else "") + "\n"
              f"  at home: {len(home)}, {len(evicted)} of them with {args.lost:,} or more"
              f" tokens of their previous prompt evicted, {sum(evicted):,} tokens in all")


def uncached(before, turn):
    """Tokens of the session's previous prompt (`before`) the engine had no longer cached
    for `turn`."""
    return max(0, (before.get("prompt_tokens") or 0) - (turn.get("cached_tokens") or 0))


if __name__ == "__main__":
    main()
