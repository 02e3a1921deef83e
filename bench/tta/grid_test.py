#!/usr/bin/python3
"""Unit tests of the grid (grid.py): it covers the space it claims, each
part is a list of whole scenario runs, the seeds reach every system, and
the summary's goals are computed from synthetic tta.json records. No
processes, no timing."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grid  # noqa: E402
import scenarios  # noqa: E402


def record(name, final, tta, metric="test_accuracy", rate=50, lower=()):
    systems = grid.GRID_SYSTEMS
    return {"name": name, "metric": metric, "rate_mbit": rate,
            "final_acc": {s: final.get(s) for s in systems}, "tta_s": {s: tta.get(s) for s in systems},
            "lower_bound": {s: s in lower for s in systems}}


class GridTest(unittest.TestCase):
    def test_the_grid_covers_worker_counts_rates_topologies_and_models(self):
        workers = {p[2] for p in grid.GRID_POINTS}
        rates = {p[3] for p in grid.GRID_POINTS}
        self.assertTrue({2, 3, 4, 6, 8} <= workers)
        named = {10, 100, 500, 1000}
        self.assertTrue(any(10 < r < 100 for r in rates) and any(100 < r < 500 for r in rates))
        self.assertTrue(any(r > max(named) for r in rates))
        self.assertEqual({p[1] for p in grid.GRID_POINTS}, {"flat", "clusters"})
        self.assertEqual({p[0] for p in grid.GRID_POINTS}, {"mlp", "cnn", "gpt-tiny"})
        self.assertGreaterEqual(len(grid.GRID_SEEDS), 3)
        names = [grid.point_name(p) for p in grid.GRID_POINTS]
        self.assertEqual(len(names), len(set(names)))

    def test_parts_hold_every_run_once_and_scenarios_are_well_formed(self):
        seen = [run for p in grid.parts() for run in p]
        self.assertEqual(sorted(seen), sorted(grid.runs()))
        for k in range(1, len(grid.parts()) + 1):
            for sc in grid.part(k):
                self.assertEqual(sc.systems, grid.GRID_SYSTEMS)
                seed = sc.name.rsplit("-s", 1)[1]
                self.assertEqual(sc.train_args[-2:], ("--seed", seed))
                hosts = [int(h) for h in sc.hosts.split("+")]
                self.assertEqual(sum(hosts), sc.workers)
                self.assertEqual(len(hosts), 1 if sc.topology == "flat" else 2)
                self.assertIsNotNone(sc.target_vs_ddp)
        gpt = grid.scenario(("gpt-tiny", "clusters", 4, 25), 2)
        self.assertEqual(gpt.metric, "val_loss")
        self.assertEqual(gpt.hosts, "2+2")
        self.assertIn("--dataset", gpt.frugal_args)
        with self.assertRaises(ValueError):
            grid.part(0)
        with self.assertRaises(ValueError):
            grid.scenario(("mlp", "clusters", 3, 50), 1)
        # run.py --grid goes through select(), which keeps the part's scenarios.
        part = scenarios.select(False, False, "", None, "frugal", scens=grid.part(1))
        self.assertEqual([sc.systems for sc in part], [["frugal"]] * len(part))

    def test_summary_means_spreads_and_goals(self):
        point = "grid-mlp-flat-w4-r50"
        recs = [record(point + "-s1", {"frugal": 0.880, "ddp_unlimited": 0.882}, {"frugal": 40, "ddp_powersgd": 100,
                                                                                  "ddp_localsgd16": 80}),
                record(point + "-s2", {"frugal": 0.878, "ddp_unlimited": 0.880}, {"frugal": 50, "ddp_powersgd": 100,
                                                                                  "ddp_localsgd16": 200})]
        s = grid.summarise_point(point, {1: recs[0], 2: recs[1]})
        self.assertAlmostEqual(s["systems"]["frugal"]["final"]["mean"], 0.879)
        self.assertAlmostEqual(s["ratio_to_best_hook"]["mean"], (40 / 80 + 50 / 100) / 2)
        self.assertTrue(s["final_ok"])   # 0.2 points under DDP's mean at most
        self.assertTrue(s["tta_ok"])     # 0.5x against 0.7x at 50 Mbit/s
        worse = record(point + "-s1", {"frugal": 0.870, "ddp_unlimited": 0.882}, {"frugal": 90, "ddp_powersgd": 100},
                       rate=2000)
        s = grid.summarise_point(point, {1: worse})
        self.assertFalse(s["final_ok"])
        self.assertTrue(s["tta_ok"])     # above 100 Mbit/s the limit is 1.0x
        self.assertEqual(s["ratio_limit"], 1.0)
        # A time that is only a lower bound (the target not reached) is no time.
        missed = record(point + "-s1", {"frugal": 0.85}, {"frugal": 300, "ddp_powersgd": 100}, lower=("frugal",))
        s = grid.summarise_point(point, {1: missed})
        self.assertIsNone(s["ratio_to_best_hook"])
        self.assertEqual(s["frugal_reached"], 0)
        loss = record("grid-gpt-tiny-flat-w2-r25-s1", {"frugal": 2.03, "ddp_unlimited": 2.00}, {}, metric="val_loss")
        self.assertFalse(grid.summarise_point("g", {1: loss})["final_ok"])  # 1.5% above DDP's loss

    def test_the_command_reads_tta_json_files(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "tta.json")
            with open(path, "w") as f:
                json.dump({"scenarios": [record("grid-mlp-flat-w2-r25-s1", {"frugal": 0.88, "ddp_unlimited": 0.88},
                                                {"frugal": 10, "ddp_powersgd": 30}),
                                         {"name": "mlp-flat-100"}]}, f)
            self.assertEqual(grid.main([path, "--json", os.path.join(d, "s.json")]), 0)
            with open(os.path.join(d, "s.json")) as f:
                self.assertEqual(json.load(f)[0]["point"], "grid-mlp-flat-w2-r25")


if __name__ == "__main__":
    unittest.main()
