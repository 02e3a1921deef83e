"""The statistics come from the engine's field lists (frugal._C.stat_fields()):
a model's stats(), the DDP hook engine's stats() and the metrics.jsonl window
records have exactly their keys, and the metrics table of
docs/guide/python.md is generated from them (FRUGAL_UPDATE_DOCS=1 rewrites it)."""

import json
import os

import pytest
import torch

import frugal
from conftest import check_generated_block
from worker_common import TwoTower, blobs

needs_replica = pytest.mark.skipif(not frugal._C.HAVE_REPLICA, reason="built without the engine's Replica")

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "guide", "python.md")
BEGIN, END = "<!-- metrics: generated from frugal._C.stat_fields() -->", "<!-- end of metrics -->"

# The window record's keys as frugal train has always written them (the
# CLI's workers add batch_sizes, and bandwidth_mbit with --adapt): a rename
# in the field list breaks every reader of metrics.jsonl, so it fails here.
WINDOW_KEYS = {"wall_time_s", "train_time_s", "step", "epoch", "loss", "lr", "samples_per_s", "wait_s", "sparsify_s",
               "exchange_s", "optimizer_s", "bytes_sent_intra", "bytes_sent_inter", "bytes_received_intra",
               "bytes_received_inter", "density", "merged_density", "deferral_steps", "sent_share_l2", "iter_s",
               "compute_s", "staleness", "workers"}


def keys(kind):
    return [f["key"] for f in frugal._C.stat_fields()[kind]]


def test_each_list_names_each_key_once_with_an_aggregate_and_help():
    for kind, fields in frugal._C.stat_fields().items():
        names = [f["key"] for f in fields]
        assert len(names) == len(set(names)), kind
        for f in fields:
            assert f["aggregate"] in ("sum", "last", "mean", "max"), (kind, f)
            assert f["help"], (kind, f)


def test_the_window_list_is_the_metrics_schema():
    assert set(keys("window")) == WINDOW_KEYS


def train(model, steps):
    x, y = blobs(64, 0)
    loss_fn = torch.nn.CrossEntropyLoss()
    for _ in range(steps):
        loss = loss_fn(model(x), y)
        loss.backward()
        model.step(loss=loss)


@pytest.mark.parametrize("options", [dict(density=0.25), dict(sync="local", local_steps=2)], ids=["step", "local"])
@needs_replica
def test_stats_and_window_records_have_the_lists_keys(tmp_path, options):
    torch.manual_seed(0)
    model = frugal.DistributedModel(TwoTower(), run_dir=tmp_path, log_every=2, total_steps=4, quiet=True, **options)
    train(model, 4)
    model.finish()
    stats = model.stats()
    local = "sync" in options
    assert list(stats) == keys("pipeline") + (["rounds"] if local else [])
    assert stats["rounds" if local else "tasks"] > 0
    with open(tmp_path / "metrics.jsonl") as f:
        windows = [r for r in map(json.loads, f) if "loss" in r]
    assert [r["step"] for r in windows] == [2, 4]
    for r in windows:
        assert set(r) == set(keys("window"))
        assert isinstance(r["staleness"], int) and isinstance(r["workers"], int) and r["workers"] == 1


def test_hook_engine_stats_have_the_lists_keys():
    engine = frugal._C.CompressedAllReduce(frugal.init(), density=1.0, value_encoding="fp32")
    engine.run(0, torch.randn(64))
    stats = engine.stats()
    assert list(stats) == keys("allreduce")
    assert stats["calls"] == 1 and stats["total_values"] == 64


def metrics_table():
    rows = ["| key | unit | over a window | meaning |", "|---|---|---|---|"]
    for f in frugal._C.stat_fields()["window"]:
        rows.append(f"| `{f['key']}` | {f['unit']} | {f['aggregate']} | {f['help']} |")
    return "\n".join(rows)


def test_the_guides_metrics_table_is_the_field_list():
    check_generated_block(DOC, BEGIN, END, metrics_table(), "test_stats.py")
