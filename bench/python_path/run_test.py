"""Tests of bench/python_path: the per-step seconds read from metrics.jsonl,
the summary's ratios, and that script.py's models are the zoo's (same
parameter counts as `frugal train` reports).

    python3 bench/python_path/run_test.py [--frugal build/frugal]
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run  # noqa: E402

FRUGAL = None


def write_metrics(path, windows):
    with open(path, "w") as f:
        f.write(json.dumps({"event": "start"}) + "\n")
        for step, t in windows:
            f.write(json.dumps({"step": step, "train_time_s": t, "loss": 1.0}) + "\n")


class IterationSecondsTest(unittest.TestCase):
    def test_median_of_the_windows_after_the_first_two(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.jsonl")
            # Steps 0-10 (5 s) and 10-20 (0.9 s per step) are left out: 0.3, 0.2, 0.25 s per step.
            write_metrics(path, [(10, 5.0), (20, 14.0), (30, 17.0), (40, 19.0), (50, 21.5)])
            self.assertAlmostEqual(run.iteration_seconds(path), 0.25)

    def test_too_few_windows_is_an_error(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.jsonl")
            write_metrics(path, [(10, 1.0), (20, 2.0)])
            with self.assertRaisesRegex(ValueError, "need at least 3"):
                run.iteration_seconds(path)


class SummarizeTest(unittest.TestCase):
    def test_ratios_per_repeat_and_their_median(self):
        s = run.summarize({"frugal_train": [1.0, 2.0, 4.0], "script": [1.1, 1.8, 4.4]})
        self.assertEqual(s["frugal_train"]["median_ratio"], 1.0)
        self.assertEqual([round(x, 3) for x in s["script"]["ratios"]], [1.1, 0.9, 1.1])
        self.assertAlmostEqual(s["script"]["median_ratio"], 1.1)
        self.assertAlmostEqual(s["script"]["median_s"], 1.8)


class ScriptModelsTest(unittest.TestCase):
    def test_parameter_counts_equal_the_zoo(self):
        if FRUGAL is None:
            self.skipTest("--frugal not given")
        try:
            import script
        except ImportError as e:  # torch or frugal missing
            self.skipTest(str(e))
        with tempfile.TemporaryDirectory() as d:
            for model, net, data in (("mlp", script.mlp(), "synthetic"), ("gpt-tiny", script.GptTiny(), "text")):
                out = subprocess.run([FRUGAL, "train", "--model", model, "--dataset", data, "--workers", "1",
                                      "--max-steps", "1", "--eval-every", "0", "--runs-dir", d, "--run-name", model],
                                     capture_output=True, text=True, timeout=300)
                if data == "text" and out.returncode != 0 and "does not exist" in out.stderr:
                    continue  # no text corpus on this machine
                self.assertEqual(out.returncode, 0, out.stderr)
                zoo = int(re.search(r"model \S+ \((\d+) parameters\)", out.stdout).group(1))
                self.assertEqual(sum(p.numel() for p in net.parameters()), zoo, model)


if __name__ == "__main__":
    if "--frugal" in sys.argv:
        i = sys.argv.index("--frugal")
        FRUGAL = sys.argv[i + 1]
        del sys.argv[i:i + 2]
    unittest.main()
