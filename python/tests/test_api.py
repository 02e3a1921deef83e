"""The Python API in one process (a world of one): arguments are checked
with clear Python exceptions, state_dict round-trips."""

import io

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
    model.set_lr(1e-30)  # numerically frozen from the next step on
    before = {k: v.clone() for k, v in net.state_dict().items()}
    train(model, 3)
    model.finish()
    for k, v in net.state_dict().items():
        assert torch.allclose(v, before[k], atol=1e-20), k
    with pytest.raises(ValueError, match="lr must be > 0"):
        model.set_lr(0)


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
    monkeypatch.setenv("FRUGAL_RENDEZVOUS_TIMEOUT_S", "0.3")
    with pytest.raises(TimeoutError):  # nobody serves that coordinator
        frugal.init()


@needs_replica
def test_local_mode_bad_arguments():
    with pytest.raises(ValueError, match="sync must be 'step' or 'local'"):
        frugal.DistributedModel(TwoTower(), sync="sometimes")
    with pytest.raises(ValueError, match="local_steps apply to sync='local' only"):
        frugal.DistributedModel(TwoTower(), local_steps=8)
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
