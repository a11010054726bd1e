"""The request logs of a kvroute-bench run, for the tools beside this one
(standard library only).

  from run_requests import previous_turns, requests, run_arguments
  parser = run_arguments(argparse.ArgumentParser(...))   # run_dirs, --time-scale
  for r in requests(run_dir): ...                        # one dict per logged request
  previous = previous_turns(served)                      # id(turn) -> its session's last

RUN_DIR: a configuration's directory of a kvroute-bench run (the one holding
requests.jsonl, or requests-<replica>.jsonl with several replicas), or any
directory above it.
"""
import glob
import json
import os


def requests(run_dir):
    """Every request-log line under `run_dir`, parsed."""
    for path in sorted(glob.glob(os.path.join(run_dir, "**", "requests*.jsonl"), recursive=True)):
        with open(path) as f:
            for line in f:
                if line.strip():
                    yield json.loads(line)


def run_arguments(parser):
    """Adds the run directories and the run's --time-scale to `parser`."""
    parser.add_argument("run_dirs", nargs="+")
    parser.add_argument("--time-scale", type=float, default=0.1,
                        help="the run's --time-scale (default 0.1)")
    return parser


def check_time_scale(parser, args):
    if not args.time_scale > 0:
        parser.error("--time-scale must be positive")


def previous_turns(turns):
    """For each served turn of a session (by id()), its session's previous served turn, in
    arrival order."""
    last = {}
    previous = {}
    for r in sorted(turns, key=lambda r: r["t_arrival"]):
        session = r.get("session")
        if not session:
            continue
        if session in last:
            previous[id(r)] = last[session]
        last[session] = r
    return previous
