#!/usr/bin/env python3
"""bench/kvroute_bench/tools/slowest_turns.py on a hand-made request log: the slowest share
is taken by TTFT, the residency gate's hold averaged over it, and each turn after its
session's first counted as moved or at home, an at-home turn as evicted when the engine no
longer had --lost tokens of its previous prompt cached."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench",
                    "kvroute_bench", "tools", "slowest_turns.py")
SCALE = 0.1  # wall seconds per modelled second


def turn(session, backend, arrival, ttft, prompt, cached, held=0, admission=None):
    """One request-log line; times in modelled seconds."""
    line = {"session": session, "class": "WARM", "outcome": "ok", "decode_backend": backend,
            "t_arrival": 1000 + arrival * SCALE, "t_first_token": 1000 + (arrival + ttft) * SCALE,
            "residency_wait_s": held * SCALE, "prompt_tokens": prompt, "cached_tokens": cached}
    if admission:
        line["cluster_admission"] = admission
    return line


TURNS = [
    # Session a stays on gpu0: its second turn finds 5,000 of its first prompt's 50,000
    # tokens evicted, its third only 500 of the second's 60,000 (under the bound).
    turn("a", "gpu0", 0, 10, 50000, 0),
    turn("a", "gpu0", 20, 4, 60000, 45000, held=1),
    turn("a", "gpu0", 40, 1, 70000, 59500),
    # Session b moves from gpu1 to gpu2, which has none of its 40,000 tokens.
    turn("b", "gpu1", 0, 8, 40000, 0),
    turn("b", "gpu2", 30, 9, 45000, 0, held=3),
    # Turns of no session are neither moved nor at home.
    turn(None, "gpu3", 5, 0.5, 1000, 0),
]


class SlowestTurnsTest(unittest.TestCase):
    def run_tool(self, turns, *extra, name="requests.jsonl"):
        with tempfile.TemporaryDirectory() as d:
            os.mkdir(os.path.join(d, "baseline"))
            with open(os.path.join(d, "baseline", name), "w") as f:
                for line in turns:
                    f.write(json.dumps(line) + "\n")
            return subprocess.run([sys.executable, TOOL, d, *extra], capture_output=True,
                                  text=True)

    def test_every_turn_moved_or_at_home(self):
        out = self.run_tool(TURNS, "--share", "1")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("the slowest 6 of 6 served turns", out.stdout)
        self.assertIn("TTFT 5.4 s on average, 0.7 s of it held by the residency gate",
                      out.stdout)
        self.assertIn("moved off their session's previous instance: 1, its previous prompt "
                      "uncached by 40,000 tokens on average", out.stdout)
        self.assertIn("at home: 2, 1 of them with 1,000 or more tokens of their previous "
                      "prompt evicted, 5,000 tokens in all", out.stdout)

    def test_the_eviction_bound(self):
        out = self.run_tool(TURNS, "--share", "1", "--lost", "100")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("at home: 2, 2 of them with 100 or more tokens of their previous "
                      "prompt evicted, 5,500 tokens in all", out.stdout)
        out = self.run_tool(TURNS, "--lost", "0")
        self.assertEqual(out.returncode, 2)
        self.assertIn("--lost", out.stderr)

    def test_the_slowest_share(self):
        # The slowest half: a's first turn (10 s), b's two (9 and 8 s).
        out = self.run_tool(TURNS, "--share", "0.5")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("the slowest 3 of 6 served turns", out.stdout)
        self.assertIn("TTFT 9.0 s on average, 1.0 s of it held by the residency gate",
                      out.stdout)
        self.assertIn("at home: 0, 0 of them", out.stdout)

    def test_replicas_logs_and_their_admissions(self):
        lines = [dict(t, cluster_admission="resident") for t in TURNS]
        out = self.run_tool(lines, "--share", "1", name="requests-1.jsonl")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("WARM/resident 6", out.stdout)


if __name__ == "__main__":
    unittest.main()
