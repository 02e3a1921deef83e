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
