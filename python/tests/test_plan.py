"""frugal.plan: the planner's prediction for a user's own module."""

import math
import re
import subprocess
import tomllib

import pytest
import torch

import frugal
from conftest import frugal_binary


def mlp():
    """The shapes of frugal train's mlp (784-2048-2048-10)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(784, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 2048),
                               torch.nn.ReLU(), torch.nn.Linear(2048, 10))


def test_the_profile_records_the_modules_products_and_leaves_it_untouched():
    net = mlp()
    before = [p.detach().clone() for p in net.parameters()]
    p = frugal.plan(net, torch.randn(32, 784), repeats=2, warmup=1)
    assert p.parameters == sum(q.numel() for q in net.parameters())
    # Forward 2 in out per sample and layer, backward 4 (2 for the first
    # layer, whose input needs no gradient): the profiler's GEMMs, exactly.
    sizes = [(784, 2048), (2048, 2048), (2048, 10)]
    expected = 6 * sum(i * o for i, o in sizes) - 2 * 784 * 2048
    assert p.flops_per_sample == pytest.approx(expected, rel=1e-9)
    # Saved for backward: each Linear's input and each ReLU's output.
    assert p.activation_bytes_per_sample >= 4 * (784 + 2048 + 2048)
    assert p.measured and p.hardware == "cpu-local"
    assert p.compute_s == pytest.approx(p.measured_step_s)
    for a, b in zip(net.parameters(), before):
        assert torch.equal(a, b)
    assert "link hidden" in str(p) and "host memory" in str(p)


def test_measured_plan_equals_the_cli_with_the_same_compute():
    """One planner: frugal plan frugal with the measured compute per sample
    predicts the iteration and the round that frugal.plan does."""
    p = frugal.plan(mlp(), torch.randn(32, 784), sites=[2, 2], link_mbps=10, repeats=2, warmup=1)
    out = subprocess.run([frugal_binary(), "plan", "frugal", "--model", "mlp", "--hardware", "cpu-local",
                          "--clusters", "2", "2", "--inter-mbps", "10", "--batch", "32",
                          "--compute-s-per-sample", repr(p.measured_step_s / 32)],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    iteration = float(re.search(r"iteration\s+([\d.]+) s", out).group(1))
    exchange = float(re.search(r"exchange ([\d.]+) s", out).group(1))
    hidden = int(re.search(r"from --local-steps (\d+)", out).group(1))
    assert p.iteration_s == pytest.approx(iteration, abs=1e-4)
    assert p.exchange_s == pytest.approx(exchange, abs=1e-4)
    assert p.hidden_local_steps == hidden


def test_a_slower_link_needs_more_local_steps_and_the_cost_model_prices_named_hardware():
    x = torch.randn(32, 784)
    fast = frugal.plan(mlp(), x, hardware="rtx3090", sites=[4, 4], link_mbps=1000, repeats=1, warmup=1)
    slow = frugal.plan(mlp(), x, hardware="rtx3090", sites=[4, 4], link_mbps=10, repeats=1, warmup=1)
    assert not fast.measured
    assert slow.exchange_s > 50 * fast.exchange_s
    assert slow.hidden_local_steps == 0 or slow.hidden_local_steps > fast.hidden_local_steps
    assert slow.iteration_s > fast.iteration_s
    assert 0 < fast.compute_s < fast.measured_step_s  # a GPU's cost model beats this CPU
    step = frugal.plan(mlp(), x, sync="step", repeats=1, warmup=1)
    assert step.hidden_local_steps is None and step.local_steps == 0


def test_the_job_prior_is_the_planners_rate_at_each_worker_count():
    """Plan.job_prior: the line of a cluster job file that gives the server
    the plan's samples/s at 1..max_workers workers on one node."""
    x = torch.randn(32, 784)
    p = frugal.plan(mlp(), x, hardware="rtx3090", sites=[2, 2], link_mbps=10, repeats=1, warmup=1)
    one = frugal.plan(mlp(), x, hardware="rtx3090", sites=[1], repeats=1, warmup=1)
    assert p.samples_per_s_at(1) == pytest.approx(one.samples_per_s, rel=1e-6)
    rates = [p.samples_per_s_at(w) for w in (1, 2, 4)]
    assert rates[0] < rates[1] < rates[2], rates  # one node: the 10 Gbit/s inside a site, not the 10 Mbit/s link
    line = p.job_prior(4)
    parsed = tomllib.loads(line)["planned_samples_per_s"]
    assert len(parsed) == 4 and parsed[1] == pytest.approx(rates[1], rel=1e-5) and parsed[3] == pytest.approx(
        rates[2], rel=1e-5)
    for bad in (0, 1025, 2.0, True):
        with pytest.raises(ValueError, match="max_workers"):
            p.job_prior(bad)
    with pytest.raises(ValueError, match="workers must be an integer >= 1"):
        p.samples_per_s_at(0)


def test_memory_flags_out_of_memory(tmp_path):
    small = tmp_path / "small.toml"
    small.write_text('base = "rtx3090"\n[device]\nmemory_gb = 1.5\n')
    p = frugal.plan(mlp(), torch.randn(8, 784), hardware=str(small), repeats=1, warmup=1)
    assert p.device_oom  # the framework's reserve alone is 2 GB
    assert "OUT OF MEMORY" in str(p)
    ok = frugal.plan(mlp(), torch.randn(8, 784), hardware="rtx3090", repeats=1, warmup=1)
    assert not ok.device_oom and not ok.host_oom
    host = dict(ok.host_memory)
    assert host["anchor"] == pytest.approx(4 * ok.parameters)
    # The optimizer's measured state sets the inner optimizer's share: AdamW
    # 8 bytes per parameter, plain SGD none (on the CPU, the host's).
    adamw = dict(frugal.plan(mlp(), torch.randn(8, 784), repeats=1, warmup=1).host_memory)
    sgd = dict(frugal.plan(mlp(), torch.randn(8, 784), optimizer=lambda m: torch.optim.SGD(m.parameters(), lr=0.1),
                           repeats=1, warmup=1).host_memory)
    assert adamw["inner_optimizer"] == pytest.approx(8 * ok.parameters)
    assert sgd["inner_optimizer"] == 0
    with pytest.raises(TypeError, match="must return a torch.optim.Optimizer"):
        frugal.plan(mlp(), torch.randn(8, 784), optimizer=lambda m: None)


def test_bad_input_raises_clear_errors():
    net = mlp()
    x = torch.randn(4, 784)
    with pytest.raises(ValueError, match="cannot run a training step on example_batch"):
        frugal.plan(net, torch.randn(4, 100))
    with pytest.raises(ValueError, match="unknown hardware"):
        frugal.plan(net, x, hardware="rtx9999")
    for rate in (float("nan"), 0, -5, float("inf")):
        with pytest.raises(ValueError, match="link_mbps must be a finite number > 0"):
            frugal.plan(net, x, link_mbps=rate)
    with pytest.raises(ValueError, match="intra_gbps"):
        frugal.plan(net, x, intra_gbps=math.nan)
    with pytest.raises(ValueError, match="sites"):
        frugal.plan(net, x, sites=[])
    with pytest.raises(ValueError, match="sites"):
        frugal.plan(net, x, sites=[2, 0])
    with pytest.raises(TypeError, match="torch.nn.Module"):
        frugal.plan(lambda t: t, x)
    with pytest.raises(TypeError, match="example_batch"):
        frugal.plan(net, [1, 2, 3])
    with pytest.raises(ValueError, match="optimizer"):
        frugal.plan(net, x, optimizer="lion")
    with pytest.raises(ValueError, match="sync must be local, site or step"):
        frugal.plan(net, x, sync="fast", repeats=1, warmup=1)
    with pytest.raises(ValueError, match="one-element tensor"):
        frugal.plan(net, x, loss_fn=lambda out: out)
