#!/usr/bin/env python3
"""bench/kvroute_bench/tools/wait_misses.py on a hand-made run: each turn that
missed by waiting lands in the category its own log says, and turns that met
their SLO or missed by their compute floor are not counted."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench",
                    "kvroute_bench", "tools", "wait_misses.py")
SCALE = 0.1  # wall seconds per modelled second


def turn(id_, backend, routed, held, first, prompt, cached, klass="WARM", floor=0.5,
         answer=200, decode=5):
    """(report record, request-log line), times in modelled seconds: dispatched at routed +
    held, first token at held + first, done `decode` seconds later with `answer` tokens."""
    record = {"id": id_, "class": klass, "outcome": "ok", "ttft": (held + first - routed) * SCALE,
              "compute_floor_s": floor * SCALE}
    logged = {"id": id_, "class": klass, "outcome": "ok", "decode_backend": backend,
              "t_routed": 1000 + routed * SCALE, "residency_wait_s": held * SCALE,
              "t_first_token": 1000 + (held + first) * SCALE,
              "t_done": 1000 + (held + first + decode) * SCALE, "prompt_tokens": prompt,
              "cached_tokens": cached, "completion_tokens": answer}
    return record, logged


TURNS = [
    # Held 4.5 s with a slack of 2 - 1 = 1 s: the hold alone made it miss.
    turn("held", "gpu0", 0, 4.5, 0.5, 90000, 89000, floor=1.0),
    # Waits 0-3 s on gpu1 while a session's first turn prefills there.
    turn("behind-cold", "gpu1", 0, 0, 3, 90000, 89500),
    turn("first-turn", "gpu1", 0, 0, 20, 50000, 0, klass="HEAVY", floor=20),
    # Waits 0-3 s on gpu2 beside another turn's 5,000 new tokens (which met its SLO).
    turn("behind-warm", "gpu2", 0, 0, 3, 90000, 89500),
    turn("warm-neighbour", "gpu2", 0.5, 0, 1.9, 95000, 90000),
    # Alone on gpu3: a decode-only neighbour (10 new tokens) does not count.
    turn("alone", "gpu3", 0, 0, 2.5, 90000, 89500),
    turn("decoding", "gpu3", 0, 0, 0.2, 1010, 1000),
    # Not misses by waiting: its floor is past the SLO; it met the SLO.
    turn("floor", "gpu4", 0, 0, 4, 90000, 80000, floor=3),
    turn("met", "gpu0", 10, 0, 1, 90000, 89500),
]


class WaitMissesTest(unittest.TestCase):
    def run_tool(self, turns, *extra, fleet_kv_tokens=0):
        with tempfile.TemporaryDirectory() as d:
            os.mkdir(os.path.join(d, "baseline"))
            summary = {"slo": {"ttft_warm_s": 2, "ttft_medium_s": 10, "ttft_heavy_s": 30}}
            if fleet_kv_tokens:
                summary["fleet_kv_tokens"] = fleet_kv_tokens
            report = {"runs": [{"name": "baseline", "time_scale": SCALE, "summary": summary,
                                "samples": [{"t": 0, "instance": f"gpu{i}"} for i in range(5)],
                                "requests": [t[0] for t in turns]}]}
            with open(os.path.join(d, "report.json"), "w") as f:
                json.dump(report, f)
            with open(os.path.join(d, "baseline", "requests.jsonl"), "w") as f:
                for _, logged in turns:
                    f.write(json.dumps(logged) + "\n")
            out = subprocess.run([sys.executable, TOOL, d, *extra], capture_output=True,
                                 text=True)
        return out

    def test_each_miss_in_its_category(self):
        out = self.run_tool(TURNS)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("4 turns missed by waiting of 9 sent: held 1, cold 1, warm 1, alone 1",
                      out.stdout)
        self.assertIn("by instance: gpu0 1, gpu1 1, gpu2 1, gpu3 1", out.stdout)

    def test_without_the_gpus_size_there_is_no_over_hbm_line(self):
        out = self.run_tool(TURNS)
        self.assertNotIn("over HBM", out.stdout)

    def test_turns_that_waited_while_more_kv_was_in_flight_than_the_gpu_holds(self):
        # 150K tokens an instance: behind-warm (90,200 tokens) waited on gpu2 while
        # warm-neighbour (95,200) joined it, 185,400 in flight; behind-cold's neighbour is
        # 50,200 (140,400 in all), the others wait alone.
        out = self.run_tool(TURNS, "--gpu-tokens", "150000")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("over HBM (150000 tokens an instance): held 0, cold 0, warm 1, alone 0",
                      out.stdout)
        # From the report: its fleet's KV over its five sampled instances.
        out = self.run_tool(TURNS, fleet_kv_tokens=5 * 140000)
        self.assertIn("over HBM (140000 tokens an instance): held 0, cold 1, warm 1, alone 0",
                      out.stdout)
        # A neighbour done before the turn was dispatched is not in flight.
        done_early = [turn("alone", "gpu3", 10, 0, 12.5, 90000, 89500),
                      turn("earlier", "gpu3", 0, 0, 1, 90000, 89500, decode=5)]
        out = self.run_tool(done_early, "--gpu-tokens", "150000")
        self.assertIn("held 0, cold 0, warm 0, alone 1", out.stdout)
        self.assertIn("over HBM (150000 tokens an instance): held 0, cold 0, warm 0, alone 0",
                      out.stdout)

    def test_a_larger_prefill_threshold_turns_warm_into_alone(self):
        out = self.run_tool(TURNS, "--min-prefill", "6000")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("held 1, cold 1, warm 0, alone 2", out.stdout)

    def test_a_run_without_misses_says_so(self):
        out = self.run_tool([TURNS[-1]])
        self.assertIn("no turn missed its TTFT SLO by waiting", out.stdout)

    def test_a_missing_report_is_an_error(self):
        with tempfile.TemporaryDirectory() as d:
            out = subprocess.run([sys.executable, TOOL, d], capture_output=True, text=True)
        self.assertEqual(out.returncode, 2)
        self.assertIn("report.json", out.stderr)


if __name__ == "__main__":
    unittest.main()
