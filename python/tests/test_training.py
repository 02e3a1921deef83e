"""A custom nn.Module trains with frugal.DistributedModel over real
processes started by `frugal run`, and the replicas end identical."""

import pytest

import frugal
from conftest import run_workers

pytestmark = pytest.mark.skipif(not frugal._C.HAVE_REPLICA, reason="built without the engine's Replica")


@pytest.mark.parametrize("workers,staleness", [(2, 0), (4, 1)])
def test_custom_module_trains_and_replicas_agree(tmp_path, workers, staleness):
    proc, results = run_workers(workers, "train_worker.py", 60, 0.1, staleness, tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert all(r is not None for r in results), proc.stderr
    for r in results:
        assert r["world_size"] == workers
        assert r["accuracy"] > 0.9, results
    # Identical replicas: equal checksums (finish() compares them too) and parameters.
    assert len({r["checksum"] for r in results}) == 1
    assert len({r["param_sum"] for r in results}) == 1
    assert all(r["param_head"] == results[0]["param_head"] for r in results)


@pytest.mark.parametrize("workers,inner", [(2, "auto"), (3, "device")])
def test_local_mode_trains_and_replicas_agree(tmp_path, workers, inner):
    """DistributedModel(sync="local"): inner steps alone, a fragment synced
    every local_steps / 4 steps; the run ends on identical replicas that
    learned the task, and between syncs the ranks' own parameters differ
    from the synced ones that with_synced_parameters shows."""
    proc, results = run_workers(workers, "local_worker.py", 64, 8, inner, tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert all(r is not None for r in results), proc.stderr
    for r in results:
        assert r["world_size"] == workers
        assert r["accuracy"] > 0.9, results
        assert r["iteration"] == 64
        assert r["rounds"] >= 64 // 8 * 2  # fragments of every round: more than one sync per round
    assert len({r["checksum"] for r in results}) == 1
    assert len({r["param_sum"] for r in results}) == 1
    assert all(r["param_head"] == results[0]["param_head"] for r in results)
    assert all(r["synced_head"] == results[0]["synced_head"] for r in results)  # the anchor is common
    assert any(r["own_head"] != r["synced_head"] for r in results)


def test_own_recipe_trains_in_the_default_mode_and_replicas_agree(tmp_path):
    """The user's AdamW (two groups), LambdaLR warm-up + cosine, clipping and
    accumulation of 2, wrapped with no sync keyword: two workers take the
    local mode, the user's optimizer takes every inner step, the loss
    falls, and the run ends on bit-identical replicas."""
    steps = 48
    proc, results = run_workers(2, "recipe_worker.py", steps, 8, tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert all(r is not None for r in results), proc.stderr
    for r in results:
        assert r["sync"] == "local"
        assert r["iteration"] == steps
        assert r["opt_steps"] == steps
        assert r["rounds"] >= steps // 8
        assert r["last_loss"] < 0.5 * r["first_loss"], results
        assert r["accuracy"] > 0.9, results
        assert r["last_lr"] < 1e-3 * 0.02
    assert len({r["checksum"] for r in results}) == 1
    assert len({r["param_sum"] for r in results}) == 1
    assert all(r["param_head"] == results[0]["param_head"] for r in results)


def test_quickstart_runs_as_written_on_two_workers():
    """examples/quickstart.py (the docs' quick start) under frugal run:
    rank 0 alone prints, and the loss falls."""
    import os
    import subprocess
    from conftest import HERE, PYTHON, frugal_binary
    script = os.path.join(HERE, "..", "..", "examples", "quickstart.py")
    proc = subprocess.run([frugal_binary(), "run", "--workers", "2", "--timeout-s", "20", "--", PYTHON, script],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("step ")]
    assert [line.split(":")[0] for line in lines] == ["step 50", "step 100", "step 150", "step 200"], proc.stdout
    losses = [float(line.rsplit(" ", 1)[1]) for line in lines]
    assert losses[-1] < 0.5 * losses[0], proc.stdout
