"""Metrics and checkpoints of a user's script: DistributedModel(run_dir=...)
writes frugal train's metrics.jsonl through its RunReporter, and
frugal.save / frugal.load write and read its checkpoint files; a run killed
after a checkpoint resumes bit-exactly, or into another world size."""

import json
import os

import pytest
import torch

import frugal
from conftest import run_workers
from worker_common import TwoTower, blobs

pytestmark = pytest.mark.skipif(not frugal._C.HAVE_REPLICA, reason="built without the engine's Replica")

STEPS = 24
# The keys of a window record: the engine's field list (test_stats.py checks
# it against the schema frugal train has always written).
WINDOW_KEYS = {f["key"] for f in frugal._C.stat_fields()["window"]}


def records(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def run(tmp_path, name, sync, workers=2, die_at=0, resume=0, run_dir=None, save_every=8):
    out = tmp_path / name
    out.mkdir()
    run_dir = run_dir or str(tmp_path / (name + "-run"))
    proc, results = run_workers(workers, "ckpt_worker.py", sync, STEPS, save_every, die_at, resume, run_dir,
                                tmp_path=out)
    return proc, results, out, run_dir


def final_state(out, rank):
    return torch.load(os.path.join(out, f"state{rank}.pt"))


def assert_equal_state(a, b):
    for k, v in a["params"].items():
        assert torch.equal(v, b["params"][k]), k
    sa, sb = a["opt"]["state"], b["opt"]["state"]
    assert sa.keys() == sb.keys()
    for i in sa:
        for k, v in sa[i].items():
            assert torch.equal(torch.as_tensor(v), torch.as_tensor(sb[i][k])), (i, k)
    assert a["sched"] == b["sched"]


def test_packed_user_state_round_trips_and_reuses_its_buffer():
    """Note [Packed user state]: an optimizer's state_dict packed for an
    elastic snapshot reads back equal, dtypes, shapes and plain values
    included; a second pack of the same size writes into the same buffer;
    a damaged pack is refused; torch.save bytes still read."""
    from frugal import _state_pack
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, betas=(0.8, 0.9))
    net(torch.randn(3, 8)).sum().backward()
    opt.step()
    state = opt.state_dict()
    state["extra"] = {"bf16": torch.arange(6, dtype=torch.float32).to(torch.bfloat16).reshape(2, 3),
                      "flags": torch.tensor([True, False]), "empty": torch.empty(0, 5), "plain": [1, (2.5, "x")]}
    view, buffer = _state_pack.pack(state)
    again, same = _state_pack.pack(state, buffer)
    assert same is buffer and bytes(again) == bytes(view)
    back = _state_pack.unpack(bytes(view))
    assert back["param_groups"] == state["param_groups"]
    for k, per_param in state["state"].items():
        for name, value in per_param.items():
            assert torch.equal(back["state"][k][name], value) and back["state"][k][name].dtype == value.dtype
    for name in ("bf16", "flags", "empty"):
        got, want = back["extra"][name], state["extra"][name]
        assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)
    assert back["extra"]["plain"] == [1, (2.5, "x")]
    with pytest.raises(ValueError, match="damaged"):
        _state_pack.unpack(bytes(view) + b"\0")
    import io
    saved = io.BytesIO()
    torch.save({"a": torch.ones(2)}, saved)
    assert torch.equal(_state_pack.unpack(saved.getvalue())["a"], torch.ones(2))


def test_a_pack_unpacks_into_the_optimizers_own_tensors():
    """Note [Switching in place]: unpacked into the optimizer's current
    state_dict, each state tensor is copied into the optimizer's tensor of
    its place (no new memory); a tensor without a match is a copy; nothing
    shares the pack's memory, which the next snapshot overwrites."""
    from frugal import _state_pack
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    net(torch.randn(3, 8)).sum().backward()
    opt.step()
    saved = {k: {n: v.clone() if isinstance(v, torch.Tensor) else v for n, v in per.items()}
             for k, per in opt.state_dict()["state"].items()}
    state = opt.state_dict()
    state["extra"] = torch.arange(5.0)
    view, buffer = _state_pack.pack(state)
    net(torch.randn(3, 8)).sum().backward()
    opt.step()  # the live state moves on
    live = opt.state_dict()
    live_ids = {(k, n): id(v) for k, per in live["state"].items() for n, v in per.items()}
    back = _state_pack.unpack(memoryview(buffer)[:len(view)], into=live)
    for k, per in back["state"].items():
        for n, v in per.items():
            assert id(v) == live_ids[(k, n)], (k, n)  # the optimizer's own tensor...
            assert torch.equal(v, saved[k][n]), (k, n)  # ...now holding the packed values
    opt.load_state_dict(back)
    assert torch.equal(opt.state[net[0].weight]["exp_avg"], saved[0]["exp_avg"])
    extra = back["extra"]  # no tensor at its place in `into`: a copy
    buffer[:] = bytes(len(buffer))  # the next snapshot overwrites the pack
    assert torch.equal(extra, torch.arange(5.0))
    assert torch.equal(opt.state[net[0].weight]["exp_avg"], saved[0]["exp_avg"])


@pytest.mark.parametrize("sync", ["local", "step"])
def test_metrics_file_has_the_cli_schema(tmp_path, sync):
    proc, results, _, run_dir = run(tmp_path, "m", sync)
    assert proc.returncode == 0, proc.stderr
    recs = records(run_dir)
    windows = [r for r in recs if "loss" in r]
    assert [r["step"] for r in windows] == list(range(4, STEPS + 1, 4))
    for r in windows:
        assert r.keys() == WINDOW_KEYS, WINDOW_KEYS ^ r.keys()
        assert r["workers"] == 2 and r["samples_per_s"] > 0 and r["iter_s"] > 0 and r["loss"] > 0
    # Bytes crossed the link in every window of the step mode, in the
    # windows with a round of the local mode.
    assert sum(r["bytes_sent_intra"] + r["bytes_sent_inter"] for r in windows) > 0
    assert windows[-1]["loss"] < windows[0]["loss"]
    val = [r for r in recs if "val_loss" in r]
    assert [r["step"] for r in val] == [8, 16, 24] and all(r["val_loss"] > 0 for r in val)
    events = [r for r in recs if r.get("event") == "checkpoint"]
    assert [r["step"] for r in events] == [8, 16, 24] and all(r["complete"] for r in events)
    assert recs[-1].get("final") is True and recs[-1]["step"] == STEPS
    assert "step 4/24" in proc.stderr  # rank 0's progress line, on stderr
    assert os.path.exists(os.path.join(run_dir, "config.toml"))
    # The newest 3 complete steps are kept, each with every rank's file.
    ckpt = os.path.join(run_dir, "checkpoints")
    assert sorted(os.listdir(ckpt)) == ["step-16", "step-24", "step-8"]
    assert sorted(os.listdir(os.path.join(ckpt, "step-24"))) == ["COMPLETE", "rank-0.ckpt", "rank-1.ckpt"]


@pytest.mark.parametrize("sync", ["local", "step"])
def test_killed_run_resumes_bit_exactly_and_into_another_world(tmp_path, sync):
    proc, full, full_out, _ = run(tmp_path, "full", sync)
    assert proc.returncode == 0, proc.stderr
    proc, _, _, run_dir = run(tmp_path, "killed", sync, die_at=20)
    assert proc.returncode != 0  # killed at step 20, after the checkpoint of step 16
    assert sorted(os.listdir(os.path.join(run_dir, "checkpoints"))) == ["step-16", "step-8"]
    proc, resumed, resumed_out, _ = run(tmp_path, "resumed", sync, resume=1, run_dir=run_dir)
    assert proc.returncode == 0, proc.stderr
    for r in range(2):
        assert resumed[r]["start"] == 16 and resumed[r]["resumed_from"] == 16
        assert resumed[r]["iteration"] == STEPS
        assert_equal_state(final_state(full_out, r), final_state(resumed_out, r))
    assert resumed[0]["checksum"] == full[0]["checksum"]
    # The resumed run appended to the run's metrics: the killed run's windows
    # up to step 16 (step 20's, if rank 0 wrote it before frugal run stopped
    # it on rank 1's exit), then the resumed run's, 20 and 24.
    steps = [r["step"] for r in records(run_dir) if "loss" in r]
    assert steps[:4] == [4, 8, 12, 16] and steps[-2:] == [20, 24] and len(steps) in (6, 7), steps
    # Three workers from the two-worker checkpoint of step 24 (the resumed
    # run's): the new rank starts from rank 0's optimizer state; training
    # runs on and the replicas end identical.
    proc, grown, _, _ = run(tmp_path, "grown", sync, workers=3, resume=1, run_dir=run_dir, save_every=100)
    assert proc.returncode == 0, proc.stderr
    assert all(g["start"] == STEPS and g["world_size"] == 3 for g in grown)
    assert len({g["checksum"] for g in grown}) == 1
    # And one worker from it.
    proc, shrunk, _, _ = run(tmp_path, "shrunk", sync, workers=1, resume=1, run_dir=run_dir, save_every=100)
    assert proc.returncode == 0, proc.stderr
    assert shrunk[0]["start"] == STEPS


def test_auto_resumes_in_the_mode_it_was_saved_in(tmp_path):
    """sync='auto' takes the local mode with two workers and the step mode
    alone: a two-worker run resumed by one continues in the local mode its
    checkpoint holds (Note [Auto across a resume]), and a one-worker run
    resumed by two in the step mode."""
    proc, two, _, run_dir = run(tmp_path, "two", "auto")
    assert proc.returncode == 0, proc.stderr
    assert two[0]["sync"] == "local"
    proc, one, _, _ = run(tmp_path, "one", "auto", workers=1, resume=1, run_dir=run_dir, save_every=100)
    assert proc.returncode == 0, proc.stderr
    assert one[0]["sync"] == "local" and one[0]["start"] == STEPS
    proc, alone, _, alone_dir = run(tmp_path, "alone", "auto", workers=1)
    assert proc.returncode == 0, proc.stderr
    assert alone[0]["sync"] == "step"
    proc, grown, _, _ = run(tmp_path, "grown", "auto", workers=2, resume=1, run_dir=alone_dir, save_every=100)
    assert proc.returncode == 0, proc.stderr
    assert [g["sync"] for g in grown] == ["step", "step"] and grown[0]["checksum"] == grown[1]["checksum"]


def train(model, net, steps, x, y):
    for t in range(steps):
        loss = torch.nn.functional.cross_entropy(model(x[t * 8:t * 8 + 8]), y[t * 8:t * 8 + 8])
        loss.backward()
        model.step(loss=loss)


def test_corrupt_or_missing_checkpoints_are_refused_with_one_line(tmp_path, capfd):
    x, y = blobs(128, 0)
    d = tmp_path / "ckpt"
    model = frugal.DistributedModel(TwoTower(), sync="step", lr=0.05)
    with pytest.raises(FileNotFoundError) as e:
        frugal.load(frugal.DistributedModel(TwoTower(), sync="step", lr=0.05), d)
    assert "does not exist" in str(e.value) and "\n" not in str(e.value)
    train(model, None, 4, x, y)
    frugal.save(model, d)
    train(model, None, 4, x, y)
    frugal.save(model, d, extra={"note": "eight"})
    with pytest.raises(RuntimeError, match="between step"):
        model(x[:8])
        frugal.save(model, d)
    # A flipped byte in step 8's file: step 4 is taken, and step 8 named.
    victim = d / "step-8" / "rank-0.ckpt"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    fresh = frugal.DistributedModel(TwoTower(), sync="step", lr=0.05)
    assert frugal.load(fresh, d) is None  # step 4 was saved without extra
    assert fresh.iteration == 4
    assert "skipping checkpoint" in capfd.readouterr().err
    with pytest.raises(RuntimeError, match="once, before the first forward"):
        frugal.load(fresh, d)
    # Step 4 truncated too: nothing intact is left.
    (d / "step-4" / "rank-0.ckpt").write_bytes(b"FRUGAL")
    with pytest.raises(ValueError) as e:
        frugal.load(frugal.DistributedModel(TwoTower(), sync="step", lr=0.05), d)
    assert "no intact checkpoint" in str(e.value) and "\n" not in str(e.value)
    # A checkpoint of the other mode is named as such.
    other = tmp_path / "other"
    local = frugal.DistributedModel(TwoTower(), sync="local", lr=0.05, local_steps=4)
    train(local, None, 4, x, y)
    frugal.save(local, other)
    with pytest.raises(ValueError) as e:
        frugal.load(frugal.DistributedModel(TwoTower(), sync="step", lr=0.05), other)
    assert "'pipeline'" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(TypeError):
        frugal.save(TwoTower(), d)
    with pytest.raises(ValueError, match="run_dir"):
        frugal.save(local)


def test_a_directory_per_cluster_is_refused_with_the_reason(tmp_path):
    # frugal train/worker write and resume {cluster} directories; the Python
    # package takes one shared directory and says so, before writing anything.
    x, y = blobs(64, 0)
    model = frugal.DistributedModel(TwoTower(), sync="step", lr=0.05)
    train(model, None, 2, x, y)
    per_site = str(tmp_path / "ckpt" / "{cluster}")
    for call in (lambda: frugal.save(model, per_site), lambda: frugal.load(frugal.DistributedModel(TwoTower(), sync="step", lr=0.05), per_site)):
        with pytest.raises(ValueError) as e:
            call()
        assert "one per cluster" in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "ckpt").exists()


def test_log_needs_a_run_dir_and_takes_numbers(tmp_path):
    model = frugal.DistributedModel(TwoTower(), sync="step", lr=0.05)
    with pytest.raises(ValueError, match="run_dir"):
        model.log(val_loss=1.0)
    model = frugal.DistributedModel(TwoTower(), sync="step", lr=0.05, run_dir=str(tmp_path / "r"), quiet=True)
    with pytest.raises(TypeError, match="number"):
        model.log(val_loss=[1.0])
    model.log(val_loss=torch.tensor(0.5), note="warm-up")
    rec = records(str(tmp_path / "r"))[-1]
    assert rec["val_loss"] == 0.5 and rec["note"] == "warm-up" and rec["step"] == 0
    with pytest.raises(ValueError, match="log_every"):
        frugal.DistributedModel(TwoTower(), sync="step", lr=0.05, log_every=0)
