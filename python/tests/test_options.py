"""DistributedModel's engine keywords come from the run configuration's
field list: frugal.options() is their schema, the model takes exactly
those, checks each one's type and range, and defaults to frugal train's."""

import os
import re
import subprocess
import tomllib

import pytest
import torch

import frugal
from conftest import check_generated_block, frugal_binary

needs_replica = pytest.mark.skipif(not frugal._C.HAVE_REPLICA, reason="built without the engine's Replica")

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "guide", "python.md")
BEGIN, END = "<!-- keywords: generated from frugal.options() -->", "<!-- end of keywords -->"

# Where DistributedModel's defaults are not frugal train's (kPythonDefaults
# in python/src/options.cc says why).
PYTHON_DEFAULTS = {"lr": 0.01, "momentum": 0.0}


def schema():
    return {o["key"]: o for o in frugal.options()}


def cli_plan(tmp_path, *flags):
    out = subprocess.run([frugal_binary(), "train", "--print-plan", "--workers", "1", "--device", "cpu",
                          "--runs-dir", str(tmp_path), *flags], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return tomllib.loads(out.stdout)


def small():
    return torch.nn.Linear(4, 2)


@needs_replica
def test_the_schema_is_the_field_lists_and_the_model_takes_exactly_it(tmp_path):
    keys = schema()
    cli = cli_plan(tmp_path)
    assert set(keys) <= set(cli)  # every keyword is a frugal train option of the same name
    for required in ("optimizer", "lr", "density", "sync", "local_steps", "deflate", "timeout_s", "seed"):
        assert required in keys
    for not_python in ("workers", "model", "epochs", "device", "runs_dir", "adapt", "checksum_every"):
        assert not_python not in keys
    for o in keys.values():
        assert o["type"] in ("bool", "int", "float", "str") and o["help"]
        assert isinstance(o["default"], {"bool": bool, "int": int, "float": float, "str": str}[o["type"]])
        if o["choices"] is not None:
            assert o["type"] == "str" and o["default"] in o["choices"]
    # The model takes every keyword at its default, and holds what it was given.
    model = frugal.DistributedModel(small(), **{k: o["default"] for k, o in keys.items() if k != "sync"})
    assert all(model._options[k] == o["default"] for k, o in keys.items() if k != "sync")
    model.finish()
    with pytest.raises(TypeError, match="unexpected keyword argument\\(s\\) checksum_every"):
        frugal.DistributedModel(small(), checksum_every=10)


@needs_replica
def test_defaults_are_the_clis_but_the_named_ones(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    keys = schema()
    cli = cli_plan(tmp_path)
    options = frugal._C.RunOptions()
    options.workers = 1
    plan = tomllib.loads(options.plan_toml())  # "auto" resolved as frugal train resolves it
    differ = {k for k in keys if plan[k] != cli[k]}
    assert differ == set(PYTHON_DEFAULTS)
    assert all(keys[k]["default"] == v for k, v in PYTHON_DEFAULTS.items())
    assert all(options[k] == keys[k]["default"] for k in keys)


def _wrong_type(o):
    return {"bool": "yes", "int": 1.5, "float": "fast", "str": 3}[o["type"]]


# optimizer also takes a torch optimizer, and says so for anything else.
TYPED = sorted(o["key"] for o in frugal.options() if o["key"] != "optimizer") if frugal._C.HAVE_REPLICA else []


@needs_replica
@pytest.mark.parametrize("key", TYPED)
def test_a_wrong_type_raises_type_error_naming_the_keyword(key):
    o = schema()[key]
    with pytest.raises(TypeError, match=f"^{key}=.* has the wrong type \\(expected {o['type']}\\)"):
        frugal.DistributedModel(small(), **{key: _wrong_type(o)})
    with pytest.raises(TypeError, match="^optimizer must be 'sgd', 'adam', 'adamw' or a torch.optim.Optimizer"):
        frugal.DistributedModel(small(), optimizer=3)


def _out_of_range(text):
    """A value outside a range as DescribeRange writes it."""
    m = re.fullmatch(r"in [\[(](\S+), (\S+)[\])]", text)
    if m:
        return float(m.group(2)) + 1
    m = re.fullmatch(r"(>=|>|<=|<) (\S+)", text)
    assert m, text
    bound = float(m.group(2))
    return bound - 1 if m.group(1).startswith(">") else bound + 1


RANGED = sorted(o["key"] for o in frugal.options() if o["range"]) if frugal._C.HAVE_REPLICA else []


@needs_replica
@pytest.mark.parametrize("key", RANGED)
def test_a_value_out_of_range_raises_value_error_naming_the_keyword(key):
    o = schema()[key]
    value = _out_of_range(o["range"])
    if o["type"] == "int":
        value = int(value)
    with pytest.raises(ValueError, match=f"^{key} must be {re.escape(o['range'])}, got"):
        frugal.DistributedModel(small(), **{key: value})


@needs_replica
def test_a_value_a_choice_does_not_name_raises_value_error():
    with pytest.raises(ValueError, match="^sparsifier: unknown value 'fastest' \\(known: .*block"):
        frugal.DistributedModel(small(), sparsifier="fastest")
    with pytest.raises(ValueError, match="^seed: '-1' is not a non-negative integer"):
        frugal.DistributedModel(small(), seed=-1)
    assert RANGED and all(schema()[k]["type"] in ("int", "float") for k in RANGED)


@needs_replica
def test_numbers_of_other_number_types_convert():
    np = pytest.importorskip("numpy")
    model = frugal.DistributedModel(small(), lr=np.float32(0.5), local_steps=np.int64(8), bucket_mb=2, seed=None)
    o = model._options
    assert (o["lr"], o["local_steps"], o["bucket_mb"], o["seed"]) == (0.5, 8, 2.0, 1)  # None: the default
    model.finish()


def keyword_table():
    """The docs' keyword table of frugal.options()."""
    def cell(text):
        return str(text).replace("|", "\\|")

    rows = ["| keyword | type | default | values | meaning (the `frugal train` flag's help) |",
            "|---|---|---|---|---|"]
    for o in frugal.options():
        values = ", ".join(o["choices"]) if o["choices"] else (o["range"] or "")
        rows.append(f"| `{o['key']}` | {o['type']} | `{o['default']!r}` | {cell(values)} | {cell(o['help'])} |")
    return "\n".join(rows)


@needs_replica
def test_leader_residual_is_a_keyword_of_the_step_mode():
    model = frugal.DistributedModel(small(), sync="step", leader_residual=True)
    assert model._options["leader_residual"] is True
    model.finish()
    with pytest.raises(ValueError, match="^leader_residual applies to sync step only"):
        frugal.DistributedModel(small(), sync="local", leader_residual=True, local_steps=2, local_fragments=1)


@needs_replica
def test_the_guides_keyword_table_is_the_schemas():
    """FRUGAL_UPDATE_DOCS=1 rewrites the table in docs/guide/python.md."""
    check_generated_block(DOC, BEGIN, END, keyword_table(), "test_options.py")


@needs_replica
@pytest.mark.parametrize("sync", ["step", "local", "site"])
def test_one_factory_builds_the_strategy_of_each_mode(sync):
    from frugal import _sync
    torch.manual_seed(0)
    model = frugal.DistributedModel(torch.nn.Linear(4, 2), sync=sync, lr=0.1,
                                    **({} if sync == "step" else dict(local_steps=2, local_fragments=1)))
    assert type(model._sync) is _sync.strategy_class(sync) and model._sync.name == sync
    assert f"sync={sync}" in repr(model)
    before = model.module.weight.detach().clone()
    for _ in range(4):
        model(torch.ones(3, 4)).pow(2).sum().backward()
        model.step()
    assert model.iteration == 4 and not torch.equal(model.module.weight, before)
    assert model._sync.rounds == (-1 if sync == "step" else 2)
    assert isinstance(model.finish(), int)


@needs_replica
def test_elastic_gates_fall_on_the_local_modes_sync_points():
    """Note [Elastic gates]: the engine's resolver chooses the gate period of
    an elastic script, as frugal train's."""
    options = frugal._C.RunOptions({"sync": "local", "local_steps": 16})
    options.workers = 2
    assert options.resolved_elastic_every(0) == 8  # 4 fragments: a sync point every 4 steps
    assert options.resolved_elastic_every(5) == 5  # a given period is kept
    options.set({"local_fragments": 1})
    assert options.resolved_elastic_every(0) == 16  # one round: a gate per round
    step = frugal._C.RunOptions({"sync": "step"})
    step.workers = 2
    assert step.resolved_elastic_every(0) == 10
