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


def test_site_replicas_keep_a_clusters_members_identical_every_step(tmp_path):
    """sync='site' under frugal run --local-clusters a,a,b,b (Note [Site
    replicas]): the members of a cluster hold the same parameters after
    every step (with and without sync_gradients() before a clip), the two
    clusters are two replicas inside a round, and the run ends on one model."""
    steps, local_steps = 10, 4
    proc, results = run_workers(4, "site_worker.py", steps, local_steps, tmp_path=tmp_path,
                                extra=("--local-clusters", "a,a,b,b"))
    assert proc.returncode == 0, proc.stderr
    assert all(r is not None for r in results), proc.stderr
    assert [r["cluster"] for r in results] == ["a", "a", "b", "b"]
    for t in range(steps):
        assert results[0]["after_step"][t] == results[1]["after_step"][t], t
        assert results[2]["after_step"][t] == results[3]["after_step"][t], t
    assert results[0]["after_step"][1] != results[2]["after_step"][1]
    assert all(r["final"] == results[0]["final"] for r in results)
    assert len({r["checksum"] for r in results}) == 1
    assert results[0]["rounds"] >= steps // local_steps
