"""The Python API in one process (a world of one): arguments are checked
with clear Python exceptions, state_dict round-trips."""

import io
import math

import pytest
import torch

import frugal
from worker_common import TwoTower, blobs

needs_replica = pytest.mark.skipif(not frugal._C.HAVE_REPLICA, reason="built without the engine's Replica")


def test_init_without_launcher_is_a_world_of_one():
    world = frugal.init()
    assert (world.rank, world.world_size) == (0, 1)
    assert frugal.init() is world
    assert frugal.is_initialized()


@pytest.mark.parametrize("kwargs,message", [
    (dict(density=-0.5), "density must be in [0, 1], got -0.5"),  # 0: the mode's default (3%)
    (dict(density=1.5), "density must be in [0, 1]"),
    (dict(optimizer="rmsprop"), "optimizer: unknown value 'rmsprop' (known: sgd, adam, adamw)"),
    (dict(sparsifier="magic"), "magic"),
    (dict(value_encoding="int2"), "value_encoding: unknown value 'int2'"),
    (dict(staleness=2), "staleness must be in [0, 1], got 2"),
    (dict(lr=-1.0), "lr must be > 0, got -1"),
    (dict(momentum=float("nan")), "momentum must be in [0, 1), got nan"),
    (dict(bucket_mb=0), "bucket_mb must be in (0, 4096], got 0"),
    (dict(exchange="ring"), "exchange: unknown value 'ring'"),
    (dict(timeout_s=0), "timeout_s must be in (0, 86400], got 0"),
])
@needs_replica
def test_bad_arguments_raise_value_error(kwargs, message):
    with pytest.raises(ValueError) as e:
        frugal.DistributedModel(TwoTower(), **kwargs)
    assert message in str(e.value)


@needs_replica
def test_wrong_types_raise():
    with pytest.raises(TypeError, match="torch.nn.Module"):
        frugal.DistributedModel("not a model")
    with pytest.raises(TypeError, match="density"):
        frugal.DistributedModel(TwoTower(), density="high")


@needs_replica
def test_parameter_on_another_device_is_a_value_error():
    net = TwoTower()
    net.elsewhere = torch.nn.Parameter(torch.zeros(3, device="meta"))
    with pytest.raises(ValueError, match="is on meta but .* is on cpu; move the whole model to one device"):
        frugal.DistributedModel(net)


@needs_replica
def test_non_float32_parameter_is_a_value_error():
    with pytest.raises(ValueError, match="Frugal trains float32 parameters"):
        frugal.DistributedModel(TwoTower().double())


@needs_replica
def test_a_module_is_wrapped_once():
    net = TwoTower()
    frugal.DistributedModel(net, density=1.0)
    with pytest.raises(ValueError, match="already wrapped"):
        frugal.DistributedModel(net)


def train(model, steps, rank=0):
    x, y = blobs(128, rank)
    loss_fn = torch.nn.CrossEntropyLoss()
    for t in range(steps):
        i = (t * 32) % 128
        loss_fn(model(x[i:i + 32]), y[i:i + 32]).backward()
        model.step()


@needs_replica
def test_training_in_one_process_reduces_the_loss():
    torch.manual_seed(0)
    net = TwoTower()
    model = frugal.DistributedModel(net, lr=0.1, momentum=0.9, density=1.0, value_encoding="fp32")
    x, y = blobs(128, 0)
    loss_fn = torch.nn.CrossEntropyLoss()
    before = loss_fn(net(x), y).item()
    train(model, 30)
    model.finish()
    assert loss_fn(net(x), y).item() < 0.5 * before
    assert all(p.grad is None for p in net.parameters())  # gradients went to the pipeline
    with pytest.raises(RuntimeError, match="finished"):
        model.step()


def train_from(model, steps):
    """Batches chosen by the model's iteration, so a resumed run sees the
    same data as an uninterrupted one."""
    x, y = blobs(128, 0)
    loss_fn = torch.nn.CrossEntropyLoss()
    for _ in range(steps):
        i = (model.iteration * 32) % 128
        loss_fn(model(x[i:i + 32]), y[i:i + 32]).backward()
        model.step()


OPTIONS = dict(lr=0.05, momentum=0.9, density=0.25, staleness=1)
LOCAL = dict(sync="local", lr=0.05, momentum=0.9, local_steps=4, total_steps=9)


# sync='local': the mode's whole state (anchor, outer momentum, inner
# parameters and optimizer state, residuals, round counters) round-trips
# too, from the middle of a round (a fragment's exchange may be in flight).
@pytest.mark.parametrize("options", [OPTIONS, LOCAL], ids=["step", "local"])
@needs_replica
def test_state_dict_round_trip_continues_bit_exactly(options):
    torch.manual_seed(1)
    net = TwoTower()
    model = frugal.DistributedModel(net, **options)
    train_from(model, 5)
    state = model.state_dict()
    state = {k: v.clone() for k, v in state.items()}
    assert {k for k in state if not k.startswith("_frugal.")} == set(net.state_dict())
    buf = io.BytesIO()
    torch.save(state, buf)
    train_from(model, 4)
    model.finish()
    assert model.stats()["rounds" if "sync" in options else "tasks"] > 0
    expected = {k: v.clone() for k, v in net.state_dict().items()}

    torch.manual_seed(2)  # other initial values: the checkpoint must override them
    restored = TwoTower()
    model2 = frugal.DistributedModel(restored, **options)
    buf.seek(0)
    model2.load_state_dict(torch.load(buf))
    assert model2.iteration == 5
    train_from(model2, 4)
    model2.finish()
    for k, v in restored.state_dict().items():
        assert torch.equal(v, expected[k]), k
    # The plain part loads into a plain module.
    plain = TwoTower()
    plain.load_state_dict(model2.module.state_dict())
    plain.load_state_dict(state, strict=False)


@needs_replica
def test_load_state_dict_errors():
    model = frugal.DistributedModel(TwoTower(), **OPTIONS)
    with pytest.raises(ValueError, match="no Frugal state"):
        model.load_state_dict(TwoTower().state_dict())
    good = frugal.DistributedModel(TwoTower(), **OPTIONS)
    train_from(good, 1)
    state = good.state_dict()
    bad = dict(state)
    bad["_frugal.pipeline"] = state["_frugal.pipeline"][:20]
    with pytest.raises(ValueError):
        model.load_state_dict(bad)
    other = frugal.DistributedModel(TwoTower(), **OPTIONS)
    train_from(other, 1)
    with pytest.raises(RuntimeError, match="before the first forward"):
        other.load_state_dict(state)
    x, _ = blobs(4, 0)
    other(x)
    with pytest.raises(RuntimeError, match="between step"):
        other.state_dict()


@needs_replica
def test_set_lr_applies_from_the_current_iteration():
    net = TwoTower()
    model = frugal.DistributedModel(net, lr=0.1, density=1.0, value_encoding="fp32")
    train(model, 2)
    model.set_lr(0.0)  # where a cosine schedule ends: frozen from the next step on
    before = {k: v.clone() for k, v in net.state_dict().items()}
    train(model, 3)
    model.finish()
    for k, v in net.state_dict().items():
        assert torch.equal(v, before[k]), k
    for bad in (float("nan"), -1.0, float("inf")):
        with pytest.raises(ValueError, match="lr must be a finite number >= 0"):
            model.set_lr(bad)


@needs_replica
def test_set_lr_zero_in_the_local_mode_freezes_the_inner_steps():
    net = TwoTower()
    model = frugal.DistributedModel(net, **dict(LOCAL, local_steps=2, local_overlap=False, value_encoding="fp32"))
    train(model, 2)
    model.set_lr(0.0)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    train(model, 4)
    model.finish()
    for k, v in net.state_dict().items():
        assert torch.allclose(v, before[k], atol=1e-7), k


def test_hook_engine_in_a_world_of_one_is_the_identity():
    engine = frugal._C.CompressedAllReduce(frugal.init(), density=1.0, value_encoding="fp32")
    t = torch.randn(100)
    expected = t.clone()
    engine.run(0, t)
    assert torch.equal(t, expected)
    # A non-contiguous fp64 bucket goes through a float32 copy.
    d = torch.randn(10, 4, dtype=torch.float64).t()
    expected = d.clone()
    engine.run(1, d)
    assert torch.allclose(d, expected)
    assert engine.stats()["calls"] == 2


@pytest.mark.parametrize("kwargs,exc,message", [
    (dict(density=0.0), ValueError, "density must be in (0, 1]"),
    (dict(sparsifier="bogus"), ValueError, "bogus"),
    (dict(value_encoding="fp8"), ValueError, "value_encoding must be"),
    (dict(exchange="ring"), ValueError, "exchange must be"),
    (dict(deflate="auto"), TypeError, "deflate must be True or False"),
])
def test_hook_state_bad_arguments(kwargs, exc, message):
    with pytest.raises(exc) as e:
        frugal.hook_state(**kwargs)
    assert message in str(e.value)


def test_hook_rejects_a_bad_state_and_bucket():
    with pytest.raises(TypeError, match="frugal.hook_state"):
        frugal.sparse_hook(object(), None)
    engine = frugal._C.CompressedAllReduce(frugal.init(), density=1.0)
    with pytest.raises(ValueError, match="not floating point"):
        engine.run(0, torch.zeros(4, dtype=torch.int64))
    with pytest.raises(ValueError, match="non-finite|NaN|finite"):
        engine.run(0, torch.tensor([1.0, float("nan")]))


def test_status_codes_become_python_exceptions():
    for code, exc in [("invalid_argument", ValueError), ("not_found", FileNotFoundError),
                      ("timeout", TimeoutError), ("unavailable", ConnectionError), ("internal", RuntimeError)]:
        with pytest.raises(exc, match="boom"):
            frugal._C._raise_status(code, "boom")


def test_init_rejects_bad_environment(monkeypatch):
    from frugal import _world
    monkeypatch.setattr(_world, "_default_world", None)
    monkeypatch.setenv("FRUGAL_COORDINATOR", "tcp://127.0.0.1:1")
    monkeypatch.setenv("FRUGAL_RANK", "one")
    with pytest.raises(ValueError, match="FRUGAL_RANK='one' is not an integer"):
        frugal.init()
    monkeypatch.setenv("FRUGAL_RANK", "0")
    monkeypatch.setenv("FRUGAL_LINK_GRACE_S", "soon")
    with pytest.raises(ValueError, match="FRUGAL_LINK_GRACE_S must be seconds in \\[0, 86400\\], got 'soon'"):
        frugal.init()
    monkeypatch.setenv("FRUGAL_LINK_GRACE_S", "12.5")
    monkeypatch.setenv("FRUGAL_RENDEZVOUS_TIMEOUT_S", "0.3")
    with pytest.raises(TimeoutError):  # nobody serves that coordinator
        frugal.init()


@needs_replica
def test_local_mode_bad_arguments():
    with pytest.raises(ValueError, match="sync: unknown value 'sometimes' \\(known: auto, step, local, site\\)"):
        frugal.DistributedModel(TwoTower(), sync="sometimes")
    with pytest.raises(ValueError, match="local_steps apply to sync='local' or 'site' only"):
        frugal.DistributedModel(TwoTower(), sync="step", local_steps=8)
    # sync='auto' alone is the step mode and keeps them for a resume in the
    # local mode (Note [Auto across a resume]): the two-worker script runs alone.
    assert "sync=step" in repr(frugal.DistributedModel(TwoTower(), local_steps=8))
    with pytest.raises(TypeError, match="unexpected keyword argument.*local_stepz"):
        frugal.DistributedModel(TwoTower(), sync="local", local_stepz=8)
    with pytest.raises(ValueError, match="staleness"):
        frugal.DistributedModel(TwoTower(), sync="local", staleness=1)
    with pytest.raises(ValueError, match="local_inner: unknown value 'gpu'"):
        frugal.DistributedModel(TwoTower(), sync="local", local_inner="gpu")
    with pytest.raises(ValueError, match="local_fragments 3 must divide local_steps 16"):
        frugal.DistributedModel(TwoTower(), sync="local", local_fragments=3)
    with pytest.raises(ValueError, match="total_steps"):
        frugal.DistributedModel(TwoTower(), sync="local", total_steps=0)
    model = frugal.DistributedModel(TwoTower(), **LOCAL)
    with pytest.raises(ValueError, match="set_density applies to sync='step'"):
        model.set_density(0.5)
    step_mode = frugal.DistributedModel(TwoTower(), **OPTIONS)
    train_from(step_mode, 1)
    with pytest.raises(ValueError, match="no sync='local' state"):
        model.load_state_dict(step_mode.state_dict())
    assert "sync=local" in repr(model)


# --- the user's own torch.optim optimizer ------------------------------------

def two_groups(net, lr=0.01):
    """AdamW with no weight decay on biases and the gate, as LM recipes do."""
    decay = [p for n, p in net.named_parameters() if n.endswith("weight")]
    rest = [p for n, p in net.named_parameters() if not n.endswith("weight")]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}], lr=lr)


@needs_replica
def test_bad_optimizer_raises_one_line_errors():
    net = TwoTower()
    with pytest.raises(TypeError, match="torch.optim.Optimizer over the module's parameters, got int"):
        frugal.DistributedModel(net, optimizer=42)
    with pytest.raises(ValueError, match="not one of the module's"):
        frugal.DistributedModel(net, optimizer=torch.optim.SGD(TwoTower().parameters(), lr=0.1))
    nan = torch.optim.SGD(net.parameters(), lr=0.1)
    nan.param_groups[0]["lr"] = float("nan")  # torch checks at construction only
    with pytest.raises(ValueError, match="group 0 has lr=nan"):
        frugal.DistributedModel(net, optimizer=nan, sync="local")
    betas = torch.optim.Adam(net.parameters())
    betas.param_groups[0]["betas"] = (float("nan"), 0.999)
    with pytest.raises(ValueError, match="betas"):
        frugal.DistributedModel(net, optimizer=betas)
    with pytest.raises(TypeError, match="lr belong to the optimizer's param_groups"):
        frugal.DistributedModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1), lr=0.5)
    # The step mode reads SGD/Adam/AdamW group by group; the rest names sync='local'.
    with pytest.raises(TypeError, match="not RMSprop: use sync='local'"):
        frugal.DistributedModel(net, optimizer=torch.optim.RMSprop(net.parameters()), sync="step")
    with pytest.raises(TypeError, match="amsgrad=True \\(group 0\\): use sync='local'"):
        frugal.DistributedModel(net, optimizer=torch.optim.Adam(net.parameters(), amsgrad=True), sync="step")
    part = torch.optim.SGD(net.head.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="every trainable parameter"):
        frugal.DistributedModel(net, optimizer=part, sync="step")
    assert not _replicas_of(net)  # nothing was wrapped by the failed calls


def _replicas_of(net):
    from frugal._model import _replicas_of_module
    return _replicas_of_module.get(net)


@needs_replica
def test_torch_optimizer_errors_during_the_run():
    net = TwoTower()
    opt = two_groups(net)
    model = frugal.DistributedModel(net, optimizer=opt, sync="local", local_steps=2)
    with pytest.raises(ValueError, match="param_groups"):
        model.set_lr(0.1)
    train(model, 1)
    opt.param_groups[0]["lr"] = float("nan")
    x, y = blobs(8, 0)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    with pytest.raises(ValueError, match="group 0 has lr=nan"):
        model.step()
    sgd_net = TwoTower()
    sgd = torch.optim.SGD(sgd_net.parameters(), lr=0.1, momentum=0.9)
    step_mode = frugal.DistributedModel(sgd_net, optimizer=sgd, sync="step", density=1.0)
    train(step_mode, 1)
    sgd.param_groups[0]["momentum"] = 0.5
    with pytest.raises(ValueError, match="only the optimizer's lr may change"):
        step_mode(x)


@needs_replica
def test_auto_with_one_worker_takes_the_step_mode_unless_the_optimizer_needs_local():
    net = TwoTower()
    assert "sync=step" in repr(frugal.DistributedModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1)))
    net = TwoTower()
    assert "sync=step" in repr(frugal.DistributedModel(net, optimizer=two_groups(net)))
    net = TwoTower()
    assert "sync=local" in repr(frugal.DistributedModel(net, optimizer=torch.optim.RMSprop(net.parameters())))


def _recipe_loop(net, opt, sched, step, steps, x, y):
    """The user's loop: accumulation of 2 half-batches, clipping, step, zero_grad, schedule."""
    losses = []
    for t in range(steps):
        i = (t * 32) % 128
        for half in (0, 16):
            loss = torch.nn.functional.cross_entropy(net(x[i + half:i + half + 16]), y[i + half:i + half + 16]) / 2
            loss.backward()
        losses.append(loss.item() * 2)
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        step()
        opt.zero_grad()
        sched.step()
    return losses


def _warmup_cosine(opt, steps, warmup=3):
    def factor(t):
        return (t + 1) / warmup if t < warmup else 0.5 * (1 + math.cos(math.pi * (t - warmup) / (steps - warmup)))
    return torch.optim.lr_scheduler.LambdaLR(opt, factor)


@pytest.mark.parametrize("kind", ["adamw_groups", "sgd_nesterov"])
@needs_replica
def test_one_worker_local_round_of_one_step_matches_plain_torch(kind):
    """local_steps 1, density 1, fp32 values, outer lr 1, momentum 0: every
    round takes the optimizer's step as it is, so the run is plain torch
    training with the same optimizer and schedule, up to float rounding."""
    def make():
        torch.manual_seed(3)
        net = TwoTower()
        if kind == "adamw_groups":
            opt = two_groups(net, lr=0.02)
        else:
            opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3)
        return net, opt, _warmup_cosine(opt, 12)
    x, y = blobs(128, 0)
    plain, plain_opt, plain_sched = make()
    _recipe_loop(plain, plain_opt, plain_sched, plain_opt.step, 12, x, y)

    net, opt, sched = make()
    model = frugal.DistributedModel(net, optimizer=opt, sync="local", local_steps=1, density=1.0,
                                    value_encoding="fp32", outer_lr=1.0, outer_momentum=0.0, local_overlap=False,
                                    local_fragments=1)
    assert model.stats()["rounds"] == 0
    losses = _recipe_loop(model, opt, sched, model.step, 12, x, y)
    assert model.stats()["rounds"] >= 11
    model.finish()
    for (name, a), b in zip(net.named_parameters(), plain.parameters()):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), name
    assert losses[-1] < losses[0]
    assert opt.state_dict()["state"]  # the user's optimizer holds its own state
    assert sched.get_last_lr()[0] < 1e-3 * 0.02 + 1e-12


class SkippingScaler:
    """What torch.cuda.amp.GradScaler.step does on a non-finite gradient,
    without CUDA: skips the optimizer's step."""

    def __init__(self):
        self.skipped = 0

    def step(self, opt):
        grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
        if all(torch.isfinite(g).all() for g in grads):
            opt.step()
        else:
            self.skipped += 1


@needs_replica
def test_a_skipped_non_finite_step_does_not_break_the_rounds():
    net = TwoTower()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    model = frugal.DistributedModel(net, optimizer=opt, sync="local", local_steps=2, local_overlap=False)
    scaler = SkippingScaler()
    x, y = blobs(32, 0)
    for t in range(6):
        torch.nn.functional.cross_entropy(model(x), y).backward()
        if t == 3:
            net.head.weight.grad[0, 0] = float("inf")
        model.step(scaler)
        opt.zero_grad()
    model.finish()
    assert scaler.skipped == 1
    assert all(torch.isfinite(p).all() for p in net.parameters())
    # Without the skip, the round names the cause.
    net = TwoTower()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    model = frugal.DistributedModel(net, optimizer=opt, sync="local", local_steps=1, local_overlap=False)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    net.head.weight.grad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN or Inf after the optimizer's steps.*GradScaler"):
        model.step()  # the round after the step reads the parameters


@needs_replica
def test_step_mode_reads_the_torch_optimizer_and_its_schedule():
    """sync='step' with a one-group SGD: the sparse optimizer takes its
    hyperparameters and follows its scheduler's lr (here a drop to 0 that
    freezes the parameters)."""
    net = TwoTower()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: 1.0 if t < 3 else 0.0)
    model = frugal.DistributedModel(net, optimizer=opt, sync="step", density=1.0, value_encoding="fp32")
    assert "optimizer=SGD" in repr(model)
    x, y = blobs(32, 0)
    snapshots = []
    for t in range(6):
        torch.nn.functional.cross_entropy(model(x), y).backward()
        model.step()
        opt.zero_grad()
        sched.step()
        snapshots.append(net.head.weight.detach().clone())
    model.finish()
    assert not torch.equal(snapshots[0], snapshots[2])  # lr 0.1: it moves
    assert torch.equal(snapshots[3], snapshots[5])  # lr 0 from iteration 3 on


@pytest.mark.parametrize("kind", ["adamw", "sgd"])
@needs_replica
def test_step_mode_steps_each_parameter_group_by_its_own_settings(kind):
    """sync='step' at density 1 with fp32 values on one worker is plain
    torch training: two groups with their own lr and weight decay (and
    momentum for SGD) under one warm-up + cosine schedule give the
    parameters torch's optimizer gives, group by group."""
    def make():
        torch.manual_seed(5)
        net = TwoTower()
        decay = [p for n, p in net.named_parameters() if n.endswith("weight")]
        rest = [p for n, p in net.named_parameters() if not n.endswith("weight")]
        if kind == "adamw":
            opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                     {"params": rest, "weight_decay": 0.0, "lr": 0.005, "betas": (0.8, 0.99)}],
                                    lr=0.02)
        else:
            opt = torch.optim.SGD([{"params": decay, "weight_decay": 1e-3, "momentum": 0.9},
                                   {"params": rest, "lr": 0.2}], lr=0.05)
        return net, opt, _warmup_cosine(opt, 10)
    x, y = blobs(128, 0)

    def loop(net, opt, sched, step):
        for t in range(10):
            i = (t * 32) % 128
            torch.nn.functional.cross_entropy(net(x[i:i + 32]), y[i:i + 32]).backward()
            step()
            opt.zero_grad()
            sched.step()
    plain, plain_opt, plain_sched = make()
    loop(plain, plain_opt, plain_sched, plain_opt.step)
    net, opt, sched = make()
    model = frugal.DistributedModel(net, optimizer=opt, sync="step", density=1.0, value_encoding="fp32")
    loop(model, opt, sched, model.step)
    model.finish()
    torch.manual_seed(5)
    start = TwoTower()
    for (name, a), b, s in zip(net.named_parameters(), plain.parameters(), start.parameters()):
        if name.startswith("unused"):
            continue  # no gradient: torch skips it, Frugal steps it with zeros (weight decay, moments)
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), name
        assert not torch.equal(a, s), name  # every group moved
    # One setting for all would differ: the groups' lrs and decays matter.
    one, one_opt, one_sched = make()
    for g in one_opt.param_groups:
        g.update({k: v for k, v in one_opt.param_groups[0].items() if k != "params"})
    loop(one, one_opt, one_sched, one_opt.step)
    assert not all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(net.parameters(), one.parameters()))


@needs_replica
def test_step_mode_groups_round_trip_through_state_dict():
    """The segmented optimizer's state (per group: Adam moments, step
    counts) is in the pipeline section and continues bit for bit."""
    def make(seed):
        torch.manual_seed(seed)
        net = TwoTower()
        opt = two_groups(net, lr=0.02)
        return net, frugal.DistributedModel(net, optimizer=opt, sync="step", density=0.5, staleness=1)
    net, model = make(1)
    train_from(model, 5)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    train_from(model, 4)
    model.finish()
    expected = {k: v.clone() for k, v in net.state_dict().items()}
    restored, model2 = make(2)
    model2.load_state_dict(state)
    train_from(model2, 4)
    model2.finish()
    for k, v in restored.state_dict().items():
        assert torch.equal(v, expected[k]), k
    # A step-mode state of one group does not load into two.
    one_net = TwoTower()
    one = frugal.DistributedModel(one_net, optimizer=torch.optim.AdamW(one_net.parameters()), sync="step")
    train_from(one, 1)
    _, model3 = make(3)
    with pytest.raises(ValueError, match="parameter groups|optimizer state"):
        model3.load_state_dict(one.state_dict())


@needs_replica
def test_step_mode_refuses_per_group_schedules():
    net = TwoTower()
    opt = two_groups(net)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, [lambda t: 1.0, lambda t: 0.5 ** t])
    model = frugal.DistributedModel(net, optimizer=opt, sync="step")
    x, y = blobs(32, 0)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    model.step()
    opt.zero_grad()
    sched.step()
    with pytest.raises(ValueError, match="different schedules.*use sync='local'"):
        model(x)


@needs_replica
def test_local_mode_with_a_torch_optimizer_resumes_bit_exactly():
    """model.state_dict() (the rounds' state) beside the user's own
    opt.state_dict() and scheduler.state_dict(), saved mid-round, resume to
    the parameters of the uninterrupted run."""
    def make(seed):
        torch.manual_seed(seed)
        net = TwoTower()
        opt = two_groups(net, lr=0.02)
        sched = _warmup_cosine(opt, 9)
        model = frugal.DistributedModel(net, optimizer=opt, sync="local", local_steps=4, total_steps=9)
        return net, opt, sched, model

    def run(model, opt, sched, steps):
        x, y = blobs(128, 0)
        for _ in range(steps):
            i = (model.iteration * 32) % 128
            torch.nn.functional.cross_entropy(model(x[i:i + 32]), y[i:i + 32]).backward()
            model.step()
            opt.zero_grad()
            sched.step()

    net, opt, sched, model = make(1)
    run(model, opt, sched, 5)
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict()}, buf)
    run(model, opt, sched, 4)
    model.finish()
    expected = {k: v.clone() for k, v in net.state_dict().items()}

    net2, opt2, sched2, model2 = make(2)
    buf.seek(0)
    saved = torch.load(buf)
    model2.load_state_dict(saved["model"])
    opt2.load_state_dict(saved["opt"])
    sched2.load_state_dict(saved["sched"])
    run(model2, opt2, sched2, 4)
    model2.finish()
    for k, v in net2.state_dict().items():
        assert torch.equal(v, expected[k]), k


@needs_replica
def test_step_mode_refuses_gradient_accumulation_by_name():
    """Two backwards before one step(): the step mode's buckets left with the
    first, so it raises naming the local mode (which accumulates)."""
    model = frugal.DistributedModel(TwoTower(), sync="step", density=1.0)
    x, y = blobs(16, 0)
    for _ in range(2):
        torch.nn.functional.cross_entropy(model(x), y).backward()
    with pytest.raises(ValueError, match="second gradient in iteration 0.*gradient accumulation: sync='local'"):
        model.step()


@needs_replica
def test_local_mode_trains_under_bf16_autocast():
    """bf16 autocast changes the forward only: the parameters and .grad stay
    float32, which the rounds read."""
    torch.manual_seed(4)
    net = TwoTower()
    opt = two_groups(net, lr=0.02)
    model = frugal.DistributedModel(net, optimizer=opt, sync="local", local_steps=2)
    x, y = blobs(128, 0)
    losses = []
    for t in range(24):
        i = (t * 32) % 128
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(x[i:i + 32])
        assert out.dtype == torch.bfloat16
        loss = torch.nn.functional.cross_entropy(out.float(), y[i:i + 32])
        loss.backward()
        model.step()
        opt.zero_grad()
        losses.append(loss.item())
    model.finish()
    assert all(p.dtype == torch.float32 for p in net.parameters())
    assert sum(losses[-4:]) < 0.5 * sum(losses[:4])


# Note [One resolver]: the same options resolve to the same plan through the
# Python package and through `frugal train` (its --print-plan), for the
# options that have an auto. Not adapt: the package runs no bandwidth
# controller, so its auto is off where frugal train's step mode runs one.
PLAN_KEYS = ("sync", "cpu_threads", "density", "local_fragments", "local_delay")


def _plan(text):
    out = {}
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith(("#", "[")):
            key, value = (s.strip() for s in line.split("=", 1))
            out[key] = value.strip('"')
    return {k: out[k] for k in PLAN_KEYS}


@pytest.mark.parametrize("workers,options", [
    (2, {}),
    (4, {}),
    (1, {}),
    (2, {"sync": "step"}),
    (2, {"sync": "local", "local_steps": 12}),
    (4, {"local_overlap": True, "local_steps": 8}),
    (2, {"staleness": 1}),
    (3, {"density": 0.05}),
    (2, {"cpu_threads": 3}),
])
def test_python_and_the_cli_resolve_the_same_plan(workers, options, monkeypatch, tmp_path):
    import subprocess
    from conftest import frugal_binary
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(workers))
    p = frugal._C.RunOptions(options)
    p.workers = workers
    flags = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        flags += [flag] if value is True else [flag, str(value)]
    cli = subprocess.run([frugal_binary(), "train", "--print-plan", "--workers", str(workers), "--device", "cpu",
                          "--runs-dir", str(tmp_path), *flags], capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    assert _plan(p.plan_toml()) == _plan(cli.stdout)


def test_all_reduce_in_a_world_of_one_and_its_bad_input():
    assert frugal.all_reduce(2.5) == 2.5
    assert frugal.all_reduce([1.0, 2.0], op="sum") == [1.0, 2.0]
    assert torch.equal(frugal.all_reduce(torch.ones(3)), torch.ones(3, dtype=torch.float64))
    frugal.barrier()
    with pytest.raises(ValueError, match="op must be 'sum' or 'mean'"):
        frugal.all_reduce(1.0, op="max")
    with pytest.raises(TypeError, match="a float, a sequence of floats or a tensor"):
        frugal.all_reduce("loss")
    with pytest.raises(ValueError, match="timeout_s must be > 0"):
        frugal.all_reduce(1.0, timeout_s=0)



def test_cluster_name_resolution_warns_for_a_flat_multi_host_world():
    import warnings
    from frugal import _world
    assert _world._cluster({}, "siteA", True) == "siteA"
    assert _world._cluster({"FRUGAL_CLUSTER": "siteB"}, None, True) == "siteB"
    assert _world._cluster({"FRUGAL_CLUSTER": "siteB"}, "siteA", True) == "siteA"  # the keyword wins
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _world._cluster({}, None, False) == "local"  # one host: flat is what it is
    with pytest.warns(RuntimeWarning, match="FRUGAL_CLUSTER"):
        assert _world._cluster({}, None, True) == "local"
    for bad in ("", 3):
        with pytest.raises(ValueError, match="cluster must be a non-empty string"):
            _world._cluster({}, bad, False)


def test_device_is_the_local_ranks_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert frugal.device() == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert frugal.device() == torch.device("cuda", 1)  # rank 3 of a host with 2 GPUs shares the second
    assert frugal.device(0) == torch.device("cuda", 0)
    monkeypatch.delenv("LOCAL_RANK")
    assert frugal.device() == torch.device("cuda", 0)
    monkeypatch.setenv("LOCAL_RANK", "x")
    with pytest.raises(ValueError, match="LOCAL_RANK"):
        frugal.device()
    with pytest.raises(ValueError, match="local_rank"):
        frugal.device(-1)


def test_device_keyword_moves_the_module_before_wrapping(monkeypatch):
    net = torch.nn.Linear(4, 2)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    model = frugal.DistributedModel(net, optimizer=opt, sync="local", device="auto")
    assert all(p.device == torch.device("cpu") for p in model.parameters())
    assert opt.param_groups[0]["params"][0] is net.weight  # the optimizer still holds the module's parameters
    model.finish()
    for bad in ("no-such-device", 3.5):
        with pytest.raises(ValueError, match="device must be None, 'auto' or a torch device"):
            frugal.DistributedModel(torch.nn.Linear(4, 2), device=bad)


def test_host_memory_names_the_engines_buffers():
    net = torch.nn.Linear(64, 32)
    n = sum(p.numel() for p in net.parameters())
    step = frugal.DistributedModel(net, optimizer="adam", lr=1e-3, sync="step")
    held = step.host_memory()
    assert held["masters"] == 4 * n and held["residuals"] == 4 * n
    assert 8 * n <= held["optimizer"] < 8 * n + 64  # Adam's two moments (and their byte form's header)
    step.finish()
    # The local mode with the user's optimizer: no host gradients or inner
    # optimizer state (the model's tensors take the steps), and no idle pipeline.
    net = torch.nn.Linear(64, 32)
    local = frugal.DistributedModel(net, optimizer=torch.optim.AdamW(net.parameters(), lr=1e-3), sync="local",
                                    local_steps=4, local_fragments=2)
    held = local.host_memory()
    assert held["anchor"] == 4 * n and held["master"] == 4 * n
    assert held["gradients"] == 0 and held["inner_optimizer"] == 0
    assert held["base"] == 0 and held["sending"] == 0  # no round open before the first sync
    with pytest.raises(ValueError, match="no gradient pipeline"):
        local._sync.replica.stats()
    local.finish()
