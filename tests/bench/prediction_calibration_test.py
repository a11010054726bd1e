#!/usr/bin/env python3
"""bench/kvroute_bench/tools/prediction_calibration.py on a hand-made request
log: each turn lands under where it went (first, home, moved) and its class,
the residency gate's hold is taken out of the realised time, turns without a
prediction are placed but not counted, and the second table keeps the long
predictions alone."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench",
                    "kvroute_bench", "tools", "prediction_calibration.py")
SCALE = 0.1  # wall seconds per modelled second


def turn(session, backend, routed, predicted, first, held=0.0, klass="WARM"):
    """A served turn, times in modelled seconds: routed at `routed`, held `held`, its first
    token `first` after routing, `predicted` at routing (None: no prediction)."""
    return {"session": session, "class": klass, "outcome": "ok", "decode_backend": backend,
            "t_arrival": 1000 + routed * SCALE, "t_routed": 1000 + routed * SCALE,
            "residency_wait_s": held * SCALE,
            "t_first_token": 1000 + (routed + first) * SCALE,
            "predicted_ttft_s": None if predicted is None else predicted * SCALE}


TURNS = [
    turn("a", "gpu0", 0, 20, 10, klass="HEAVY"),   # first: 0.5
    turn("a", "gpu0", 30, 10, 5),                  # home, long: 0.5
    turn("a", "gpu0", 60, 2, 8, held=6),           # home, held 6 of its 8 s: 1.0
    turn("a", "gpu1", 90, 8, 16),                  # moved, long: 2.0
    turn("b", "gpu1", 1, None, 30, klass="HEAVY"),  # first, no prediction: not counted
    turn("b", "gpu1", 40, 1, 3),                   # home (placed by the turn above): 3.0
]


class PredictionCalibrationTest(unittest.TestCase):
    def run_tool(self, turns, *extra):
        with tempfile.TemporaryDirectory() as d:
            os.mkdir(os.path.join(d, "baseline"))
            with open(os.path.join(d, "baseline", "requests.jsonl"), "w") as f:
                for t in turns:
                    f.write(json.dumps(t) + "\n")
                f.write(json.dumps({"session": "c", "outcome": "shed", "class": "WARM"}) + "\n")
            out = subprocess.run([sys.executable, TOOL, d, "--time-scale", str(SCALE), *extra],
                                 capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        every, _, long_ = out.stdout.partition("predicted >=")
        return every, long_

    def test_each_turn_by_where_it_went(self):
        every, _ = self.run_tool(TURNS)
        self.assertIn("first HEAVY  n     1  median 0.50", every)
        self.assertIn("home  WARM   n     3  median 1.00  p10 0.50  p90 3.00", every)
        self.assertIn("moved WARM   n     1  median 2.00", every)

    def test_the_long_predictions_alone(self):
        _, long_ = self.run_tool(TURNS)
        self.assertIn("first HEAVY  n     1  median 0.50", long_)
        self.assertIn("home  WARM   n     1  median 0.50", long_)
        self.assertIn("moved WARM   n     1  median 2.00", long_)
        _, longer = self.run_tool(TURNS, "--min-predicted", "15")
        self.assertIn("first HEAVY  n     1", longer)
        self.assertNotIn("home", longer)

    def test_a_bad_time_scale_is_refused(self):
        out = subprocess.run([sys.executable, TOOL, ".", "--time-scale", "0"],
                             capture_output=True, text=True)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("--time-scale must be positive", out.stderr)


if __name__ == "__main__":
    unittest.main()
