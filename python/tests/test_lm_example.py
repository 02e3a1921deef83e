"""examples/lm: prepare.py on a small corpus, a few steps of each model size
through train.py, alone and on 2 ranks of `frugal run`."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import PYTHON, frugal_binary

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LM = os.path.join(REPO, "examples", "lm")
LICENSES = "/usr/share/common-licenses"


def _run(args, timeout=240, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kw)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A tokenizer and token arrays from the licence texts Debian ships (base-files):
    every licence cut into pieces of 4 kB, so that the split has files on both sides."""
    pytest.importorskip("sentencepiece", reason="python3-sentencepiece missing (scripts/setup installs it)")
    if not os.path.isdir(LICENSES):
        pytest.skip(f"{LICENSES} missing")
    root = tmp_path_factory.mktemp("lm")
    text_dir = root / "text"
    text_dir.mkdir()
    for name in sorted(os.listdir(LICENSES)):
        path = os.path.join(LICENSES, name)
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        text = open(path, encoding="utf-8", errors="replace").read()
        for i in range(0, len(text), 4096):
            (text_dir / f"{name}.{i // 4096}.txt").write_text(text[i:i + 4096])
    out = root / "data"
    p = _run([PYTHON, os.path.join(LM, "prepare.py"), "--sources=", "--input", str(text_dir), "--out", str(out),
              "--vocab-size", "512", "--val-every", "5", "--threads", "1"])
    assert p.returncode == 0, p.stderr
    return out


def _train(data, *args, summary, workers=0, timeout=240):
    cmd = [PYTHON, os.path.join(LM, "train.py"), "--data", str(data), "--summary", str(summary), *map(str, args)]
    if workers:
        cmd = [frugal_binary(), "run", "--workers", str(workers), "--timeout-s", "60", "--"] + cmd
    p = _run(cmd, timeout=timeout)
    assert p.returncode == 0, p.stdout + p.stderr
    return p


def test_prepare_writes_both_splits_with_the_tokenizer_vocabulary(corpus):
    meta = json.load(open(corpus / "meta.json"))
    assert meta["vocab_size"] == 512 and meta["dtype"] == "uint16"
    for split in ("train", "val"):
        tokens = np.fromfile(corpus / f"{split}.bin", dtype=np.uint16)
        assert tokens.size == meta[f"{split}_tokens"] > 1000
        assert tokens.max() < meta["vocab_size"]
        assert (tokens == meta["eos_id"]).sum() >= 2  # one after each file
    assert os.path.exists(corpus / "tokenizer.model")


def test_25m_loss_falls_alone(corpus, tmp_path):
    summary = tmp_path / "s{rank}.json"
    _train(corpus, "--size", "25m", "--steps", 8, "--batch-size", 4, "--seq-len", 32, "--lr", "2e-3",
           "--eval-every", 4, "--eval-batches", 2, summary=summary)
    s = json.load(open(tmp_path / "s0.json"))
    assert s["world_size"] == 1 and s["sync"] == "local"
    assert 25.2e6 < s["parameters"] < 26e6  # 8 x 512 blocks, a 512-piece embedding
    losses = s["train_loss"]
    assert len(losses) == 8 and all(np.isfinite(losses))
    assert np.mean(losses[-2:]) < losses[0] - 0.3, losses
    (_, first), (_, last) = s["val_loss"]
    assert np.isfinite(last) and last < first


def test_gpt2_small_takes_steps(corpus, tmp_path):
    summary = tmp_path / "s{rank}.json"
    _train(corpus, "--size", "gpt2", "--steps", 2, "--batch-size", 1, "--seq-len", 32, "--eval-batches", 1,
           summary=summary)
    s = json.load(open(tmp_path / "s0.json"))
    assert s["parameters"] == 124_439_808  # GPT-2 small with its 50,257-token vocabulary
    assert all(np.isfinite(s["train_loss"])) and np.isfinite(s["val_loss"][-1][1])


def test_two_ranks_in_step_mode_keep_identical_parameters(corpus, tmp_path):
    summary = tmp_path / "s{rank}.json"
    p = _train(corpus, "--size", "25m", "--sync", "step", "--steps", 4, "--batch-size", 2, "--seq-len", 32,
               "--eval-every", 2, "--eval-batches", 2, summary=summary, workers=2)
    a, b = (json.load(open(tmp_path / f"s{r}.json")) for r in range(2))
    assert (a["world_size"], b["world_size"], a["sync"]) == (2, 2, "step")
    assert a["parameter_sha256"] == b["parameter_sha256"]
    assert a["train_loss"] != b["train_loss"]  # each rank trained on its own windows
    assert a["val_loss"] == b["val_loss"]  # one loss, summed over the ranks
    assert "no clipping (step mode)" in p.stdout


def test_25m_resumed_from_its_checkpoint_ends_bit_exactly(corpus, tmp_path):
    """--run-dir with --checkpoint-every: the metrics in the CLI's schema, and
    a run resumed from the checkpoint of step 3 ends on the parameters of the
    uninterrupted run."""
    common = ("--size", "25m", "--steps", 6, "--batch-size", 2, "--seq-len", 32, "--eval-every", 0,
              "--eval-batches", 1, "--log-every", 3)
    run_dir = tmp_path / "run"
    _train(corpus, *common, "--run-dir", run_dir, "--checkpoint-every", 3, summary=tmp_path / "a{rank}.json")
    records = [json.loads(line) for line in open(run_dir / "metrics.jsonl")]
    assert [r["step"] for r in records if "loss" in r] == [3, 6]
    assert {"loss", "lr", "samples_per_s", "iter_s", "bytes_sent_inter"} <= records[0].keys()
    assert [r["step"] for r in records if "val_loss" in r] == [6]
    assert sorted(os.listdir(run_dir / "checkpoints")) == ["step-3"]
    _train(corpus, *common, "--run-dir", run_dir, "--resume", summary=tmp_path / "b{rank}.json")
    a, b = (json.load(open(tmp_path / f"{n}0.json")) for n in "ab")
    assert b["parameter_sha256"] == a["parameter_sha256"]
    assert b["train_loss"] == a["train_loss"] and len(b["train_loss"]) == 6


def test_missing_inputs_and_bad_flags_fail_with_what_to_do(tmp_path):
    p = _run([PYTHON, os.path.join(LM, "train.py"), "--data", str(tmp_path / "none"), "--steps", "1"])
    assert p.returncode == 1 and "examples/lm/prepare.py" in p.stderr, p.stderr
    p = _run([PYTHON, os.path.join(LM, "train.py"), "--steps", "0"])
    assert p.returncode == 2 and "--steps must be >= 1" in p.stderr
    p = _run([PYTHON, os.path.join(LM, "train.py"), "--resume"])
    assert p.returncode == 2 and "need --run-dir" in p.stderr
    p = _run([PYTHON, os.path.join(LM, "prepare.py"), "--sources=", "--input", str(tmp_path / "none"),
              "--out", str(tmp_path / "out")])
    assert p.returncode == 1 and "does not exist" in p.stderr
    p = _run([PYTHON, os.path.join(LM, "prepare.py"), "--sources", "wikipedia"])
    assert p.returncode == 2 and "unknown source(s) wikipedia" in p.stderr
