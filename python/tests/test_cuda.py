"""On a CUDA device (skipped elsewhere): DistributedModel trains a custom
module over real processes, and the overlapped gradient/parameter copies
(Note [Gradients off the GPU], src/engine/device_copier.h) give exactly the
parameters of the synchronous copies."""

import pytest
import torch

import frugal
from conftest import run_workers

pytestmark = [
    pytest.mark.skipif(not frugal._C.HAVE_REPLICA, reason="built without the engine's Replica"),
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]


def _train(tmp_path, workers, staleness, overlap):
    tmp_path.mkdir(parents=True, exist_ok=True)  # the workers write their results into it
    proc, results = run_workers(workers, "train_worker.py", 60, 0.1, staleness, "cuda", int(overlap),
                                tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert all(r is not None for r in results), proc.stderr
    return results


@pytest.mark.parametrize("workers,staleness", [(2, 0), (4, 1)])
def test_overlapped_copies_match_synchronous_ones(tmp_path, workers, staleness):
    overlapped = _train(tmp_path / "overlap", workers, staleness, True)
    synchronous = _train(tmp_path / "sync", workers, staleness, False)
    for r in overlapped:
        assert r["accuracy"] > 0.9, overlapped
    assert len({r["checksum"] for r in overlapped}) == 1
    # The copies move the same bits; only when they happen differs.
    assert overlapped[0]["param_head"] == synchronous[0]["param_head"]
    assert overlapped[0]["param_sum"] == synchronous[0]["param_sum"]
