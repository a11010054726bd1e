#!/usr/bin/env python3
"""What the turns that missed their TTFT SLO by waiting were waiting for
(standard library only).

  wait_misses.py REPORT_DIR [REPORT_DIR ...] [--min-prefill N]

REPORT_DIR: a directory holding a kvroute-bench report.json (a seed's, or a
repeat's run-K) with each configuration's request log beside it
(REPORT_DIR/<configuration>/requests.jsonl, or requests-<replica>.jsonl with several
replicas). A served turn misses "by wait"
when its compute floor (the report's compute_floor_s: its uncached tokens
prefilled on an idle instance) is within its class's TTFT SLO and its TTFT is
not: the report's missed "wait". For each configuration, in modelled seconds,
those turns split by the first of these that holds:
  held        the residency gate held it (residency_wait_s) for longer than
              its slack, its SLO less its floor: the hold alone made it miss;
  cold        while it waited (from its dispatch, routing plus the hold, to
              its first token), its instance was also prefilling a turn that
              computed most of its prompt (a session's first turn, or a turn
              moved off its context);
  warm        ... was prefilling other turns' new tokens (at least
              --min-prefill of them, default 512): turns sharing the instance's
              steps;
  alone       neither: its own reload from a KV tier, steps shared with decodes
              only, or a floor within a fraction of a second of the SLO;
and how many there were per instance. A router that keeps more sessions going
on an instance trades held turns for warm ones; a burst of sessions homed on
one instance shows as that instance's count.

Of each category, "over HBM" counts the turns whose instance, at some moment
while they waited, had more KV in flight than its GPU holds: the prompts and
answers of the turns dispatched there and not yet done, theirs included, against the
instance's GPU KV (the report's fleet_kv_tokens over its sampled instances, or
--gpu-tokens). Such a turn waits for blocks that running turns hold: vLLM
admits the head of its waiting queue only when its blocks are free, and admits
nothing behind it meanwhile. The engines' KV usage need not read full then: two
running turns of 100K tokens leave a third of an instance of 286K free, too
little for a third.
"""
import argparse
import collections
import json
import os

from run_requests import requests

CATEGORIES = ("held", "cold", "warm", "alone")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report_dirs", nargs="+")
    parser.add_argument("--min-prefill", type=int, default=512,
                        help="new tokens that make another turn a prefill (default 512)")
    parser.add_argument("--gpu-tokens", type=int, default=0,
                        help="one instance's GPU KV in tokens (default: from the report)")
    args = parser.parse_args()
    if args.min_prefill < 1:
        parser.error("--min-prefill must be positive")
    if args.gpu_tokens < 0:
        parser.error("--gpu-tokens must not be negative")
    for report_dir in args.report_dirs:
        path = os.path.join(report_dir, "report.json")
        try:
            with open(path) as f:
                report = json.load(f)
        except (OSError, ValueError) as e:
            parser.error(f"{path}: {e}")
        for run in report.get("runs", []):
            logged = {r["id"]: r for r in requests(os.path.join(report_dir, run["name"]))}
            if not logged:
                print(f"{report_dir} {run['name']}: no request log under it")
                continue
            gpu_tokens = args.gpu_tokens or instance_gpu_tokens(run)
            print(f"{report_dir} {run['name']}: " +
                  describe(run, logged, args.min_prefill, gpu_tokens))


def instance_gpu_tokens(run):
    """One instance's GPU KV from the report: the fleet's over its sampled instances; 0 if
    either is unknown."""
    fleet = (run.get("summary") or {}).get("fleet_kv_tokens") or 0
    instances = {s.get("instance") for s in run.get("samples", []) if s.get("instance")}
    return fleet // len(instances) if fleet > 0 and instances else 0


def describe(run, logged, min_prefill, gpu_tokens):
    scale = run.get("time_scale") or 1.0
    slo = run["summary"].get("slo") or {}
    slos = {"WARM": slo.get("ttft_warm_s", 2.0), "MEDIUM": slo.get("ttft_medium_s", 10.0),
            "HEAVY": slo.get("ttft_heavy_s", 30.0)}
    served = [r for r in logged.values()
              if r.get("outcome") == "ok" and r.get("t_first_token") and r.get("t_routed")
              and r.get("prompt_tokens")]
    by_instance = collections.defaultdict(list)
    for r in served:
        by_instance[r.get("decode_backend")].append(r)

    counts = collections.Counter()
    over_hbm = collections.Counter()
    per_instance = collections.Counter()
    for rec in run.get("requests", []):
        target = slos.get(rec.get("class"))
        r = logged.get(rec.get("id"))
        if (target is None or r is None or rec.get("outcome") != "ok" or rec["ttft"] < 0
                or rec["compute_floor_s"] < 0):
            continue
        floor = rec["compute_floor_s"] / scale
        if floor > target or rec["ttft"] / scale <= target:
            continue
        held = (r.get("residency_wait_s") or 0) / scale
        category = "held" if held > target - floor else classify(
            r, by_instance[r.get("decode_backend")], min_prefill)
        counts[category] += 1
        if gpu_tokens > 0 and in_flight(r, by_instance[r.get("decode_backend")]) > gpu_tokens:
            over_hbm[category] += 1
        per_instance[r.get("decode_backend")] += 1
    total = sum(counts.values())
    if total == 0:
        return "no turn missed its TTFT SLO by waiting"
    parts = ", ".join(f"{c} {counts[c]}" for c in CATEGORIES)
    instances = ", ".join(f"{b} {n}" for b, n in sorted(per_instance.items(), key=str))
    out = (f"{total} turns missed by waiting of {len(run.get('requests', []))} sent: {parts}\n"
           f"  by instance: {instances}")
    if gpu_tokens > 0:
        out += (f"\n  over HBM ({gpu_tokens} tokens an instance): " +
                ", ".join(f"{c} {over_hbm[c]}" for c in CATEGORIES))
    return out


def dispatched(r):
    return r["t_routed"] + (r.get("residency_wait_s") or 0)


def in_flight(r, neighbours):
    """The most KV, in tokens, in flight on `r`'s instance while it waited (from its dispatch
    to its first token): each turn's prompt and answer, `r`'s own included."""
    start, end = dispatched(r), r["t_first_token"]
    others = [o for o in neighbours if o is not r]
    moments = [start] + [dispatched(o) for o in others if start < dispatched(o) < end]
    return max(r["prompt_tokens"] + (r.get("completion_tokens") or 0) +
               sum(o["prompt_tokens"] + (o.get("completion_tokens") or 0) for o in others
                   if dispatched(o) <= t < (o.get("t_done") or o["t_first_token"]))
               for t in moments)


def classify(r, neighbours, min_prefill):
    """cold, warm or alone: what else `r`'s instance prefilled while `r` waited."""
    start, end = dispatched(r), r["t_first_token"]
    prefilling = [o for o in neighbours
                  if o is not r and dispatched(o) < end and o["t_first_token"] > start
                  and o["prompt_tokens"] - (o.get("cached_tokens") or 0) >= min_prefill]
    if any(2 * (o.get("cached_tokens") or 0) < o["prompt_tokens"] for o in prefilling):
        return "cold"
    return "warm" if prefilling else "alone"


if __name__ == "__main__":
    main()
