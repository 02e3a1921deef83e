#!/usr/bin/python3
"""Unit tests of the time-to-target summary (summary.py, scenarios.py): accuracy
targets are met from below, validation-loss targets from above, and targets
relative to DDP's own final result are resolved from ddp_unlimited's run.
Synthetic metrics records; no processes, no timing."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scenarios import SCENARIOS, Scenario  # noqa: E402
from summary import best_powersgd, project_ddp, resolve_targets, summarise  # noqa: E402


def records(metric, values, final=True, step_every=10, seconds_per_step=0.5):
    """Evaluation records of METRIC at VALUES (one per STEP_EVERY steps), and a final record."""
    recs = []
    for i, v in enumerate(values):
        step = (i + 1) * step_every
        recs.append({"step": step, "wall_time_s": step * seconds_per_step + 3,
                     "train_time_s": step * seconds_per_step, metric: v})
        recs.append({"step": step, "wall_time_s": step * seconds_per_step + 3, "train_time_s": step * seconds_per_step,
                     "iter_s": seconds_per_step, "bytes_sent_iface": 1000})
    if final:
        last = dict(recs[-2], final=True)
        recs.append(last)
    return recs


ACC = Scenario("acc", "mlp", "flat", 10, 0.85, ["frugal"], second_target=0.80)
LOSS = Scenario("loss", "gpt-tiny", "flat", 10, 2.2, ["frugal"], second_target=2.5, metric="val_loss",
                target_vs_ddp=(0.01, 0.05))


class SummaryTest(unittest.TestCase):
    def test_accuracy_target_is_met_from_below(self):
        s = summarise("frugal", records("test_accuracy", [0.70, 0.82, 0.86, 0.84]), 100, False, ACC)
        self.assertEqual(s.tta.step, 30)
        self.assertEqual(s.tta2.step, 20)
        self.assertFalse(s.tta.lower_bound)
        self.assertAlmostEqual(s.best_acc, 0.86)
        self.assertAlmostEqual(s.final_acc, 0.84)

    def test_loss_target_is_met_from_above(self):
        s = summarise("frugal", records("val_loss", [3.0, 2.4, 2.1, 2.15]), 100, False, LOSS)
        self.assertEqual(s.tta.step, 30)   # 2.1 <= 2.2
        self.assertEqual(s.tta2.step, 20)  # 2.4 <= 2.5
        self.assertAlmostEqual(s.best_acc, 2.1)  # the lowest loss
        self.assertAlmostEqual(s.final_acc, 2.15)

    def test_a_loss_never_reached_is_a_lower_bound(self):
        s = summarise("frugal", records("val_loss", [3.0, 2.9]), 100, True, LOSS)
        self.assertTrue(s.tta.lower_bound)
        self.assertIsNone(s.final_acc)  # stopped by the harness: not completed
        self.assertEqual(s.tta.time, 10.0)  # the training time it had

    def test_records_without_the_metric_give_no_curve(self):
        s = summarise("frugal", records("test_accuracy", [0.9]), 100, False, LOSS)
        self.assertEqual(s.curve, [])
        self.assertTrue(s.tta.lower_bound)

    def test_targets_relative_to_ddp_come_from_ddp_unlimited(self):
        ddp = summarise("ddp_unlimited", records("val_loss", [3.0, 2.2, 2.0]), 100, False, LOSS)
        fr = summarise("frugal", records("val_loss", [2.5, 2.1, 2.02, 2.01]), 100, False, LOSS)
        sc = resolve_targets(LOSS, [fr, ddp])
        self.assertAlmostEqual(sc.target_acc, 2.0 * 1.01)
        self.assertAlmostEqual(sc.second_target, 2.0 * 1.05)
        self.assertEqual(fr.tta.step, 30)   # 2.02 <= 2.02
        self.assertEqual(fr.tta2.step, 20)  # 2.1 <= 2.1
        self.assertEqual(ddp.tta.step, 30)

    def test_accuracy_targets_relative_to_ddp_are_points_below_it(self):
        acc = ACC.with_(target_vs_ddp=(0.003, 0.03))
        ddp = summarise("ddp_unlimited", records("test_accuracy", [0.80, 0.88, 0.884]), 100, False, acc)
        fr = summarise("frugal", records("test_accuracy", [0.85, 0.8805, 0.8815]), 100, False, acc)
        sc = resolve_targets(acc, [fr, ddp])
        self.assertAlmostEqual(sc.target_acc, 0.881)
        self.assertAlmostEqual(sc.second_target, 0.854)
        self.assertEqual(fr.tta.step, 30)   # 0.8815 >= 0.881; 0.8805 is not
        self.assertEqual(fr.tta2.step, 20)
        self.assertEqual(SCENARIOS["mlp-flat-10"].target_vs_ddp, (0.003, 0.03))

    def test_relative_targets_stand_without_a_completed_ddp_run(self):
        ddp = summarise("ddp_unlimited", records("val_loss", [3.0, 2.0], final=False), 100, True, LOSS)
        self.assertIs(resolve_targets(LOSS, [ddp]), LOSS)
        self.assertIs(resolve_targets(ACC, [ddp]), ACC)

    def test_projection_uses_the_reference_steps_to_a_loss(self):
        ref = summarise("ddp_unlimited", records("val_loss", [3.0, 2.1]), 100, False, LOSS)
        slow = summarise("ddp", records("val_loss", [3.0], seconds_per_step=4.0), 40, True, LOSS)
        project_ddp([ref, slow], LOSS)
        self.assertEqual(ref.tta.step, 20)
        self.assertAlmostEqual(slow.tta.projected, 20 * slow.elapsed_s / slow.steps)

    def test_a_completed_run_short_of_the_target_is_not_projected(self):
        ref = summarise("ddp_unlimited", records("val_loss", [3.0, 2.1]), 100, False, LOSS)
        short = summarise("ddp_powersgd", records("val_loss", [3.0, 2.5]), 100, False, LOSS)
        project_ddp([ref, short], LOSS)
        self.assertTrue(short.completed)
        self.assertTrue(short.tta.lower_bound)
        self.assertIsNone(short.tta.projected)

    def test_best_powersgd_on_a_loss_picks_the_lowest(self):
        a = summarise("ddp_powersgd1", records("val_loss", [3.0, 2.6]), 100, True, LOSS)
        b = summarise("ddp_powersgd", records("val_loss", [3.0, 2.4]), 100, True, LOSS)
        self.assertIs(best_powersgd([a, b], LOSS), b)

    def test_low_rate_scenarios_exist(self):
        for name in ["mlp-flat-10", "cnn-flat-10", "mlp-clusters-10", "gpt-flat-100", "gpt-flat-10"]:
            self.assertIn(name, SCENARIOS)
        gpt = SCENARIOS["gpt-flat-10"]
        self.assertEqual(gpt.metric, "val_loss")
        self.assertIn("frugal_local", gpt.systems)
        self.assertEqual(SCENARIOS["mlp-clusters-10"].hosts, "2+2")


if __name__ == "__main__":
    unittest.main()
