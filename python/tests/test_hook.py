"""frugal.sparse_hook inside PyTorch DDP (gloo), over processes started by
`frugal run`: at density 1 it computes DDP's own all-reduce (over the flat
and the sharded exchange, the same bits); at 0.1 it sends a fraction of the
values; overlapped with backward or not, deflated or not, the same bits."""

import pytest
import torch.distributed as dist

from conftest import run_workers

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")


def test_hook_matches_ddp_allreduce_at_density_one_and_sends_a_fraction_below(tmp_path):
    proc, results = run_workers(2, "ddp_worker.py", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for r in results:
        assert r is not None, proc.stderr
        assert r["max_diff"] < 1e-6, r
        # The overlapped, deflated hook computes what the inline one without deflate does (deflate is
        # lossless). A message is deflated only where that saves bytes; these buckets are too small to.
        assert r["overlap_diff"] == 0.0, r
        assert 0 < r["sparse_bytes"] <= r["raw_bytes"], r
        assert r["sharded_diff"] == 0.0, r  # the sharded exchange's means are the flat one's, bit for bit
        assert r["dense_calls"] >= 3 and r["dense_sent"] == r["dense_total"]
        assert 0 < r["sparse_sent"] < 0.5 * r["sparse_total"], r
        # The merged update is the union of the ranks' selections.
        assert r["dense_merged"] == r["dense_total"], r
        assert r["sparse_sent"] <= r["sparse_merged"] <= r["sparse_total"], r
        assert r["sparse_grad_norm"] > 0


class _FailingEngine:
    def run(self, index, tensor):
        raise RuntimeError("peer 1 timed out after 60 s (bucket %d)" % index)


class _Bucket:
    def __init__(self, index, tensor):
        self._index, self._tensor = index, tensor

    def index(self):
        return self._index

    def buffer(self):
        return self._tensor


def test_an_exchange_error_reaches_the_waiting_backward_as_the_exception():
    import torch
    import frugal
    from frugal._hook import HookState

    for overlap in (True, False):
        state = HookState(_FailingEngine(), world=None, overlap=overlap)
        with pytest.raises(RuntimeError, match="peer 1 timed out"):
            frugal.sparse_hook(state, _Bucket(3, torch.zeros(4))).wait()
    # Overlapped, the buckets after a failure fail at once, naming the first error.
    state = HookState(_FailingEngine(), world=None, overlap=True)
    first = frugal.sparse_hook(state, _Bucket(0, torch.zeros(4)))
    second = frugal.sparse_hook(state, _Bucket(1, torch.zeros(4)))
    with pytest.raises(RuntimeError, match="bucket 0"):
        first.wait()
    with pytest.raises(RuntimeError, match=r"earlier bucket's exchange failed \(peer 1 timed out after 60 s \(bucket 0\)\)"):
        second.wait()
