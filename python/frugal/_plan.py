"""frugal.plan: the planner's answer for a user's own module (will it fit,
how fast would it train across these sites, how many local steps hide the
link), from a profile of the module on this machine."""

import copy
import math
import os
import statistics
import time

import torch

from . import _C

# The GEMMs torch's profiler lists, with where their operands sit in the
# recorded input shapes: (index of A [.., M, K], index of B [.., K, N]).
_GEMMS = {"aten::mm": (0, 1), "aten::addmm": (1, 2), "aten::bmm": (0, 1), "aten::baddbmm": (1, 2)}
_CONVS = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)
_OPTIMIZERS = {"adamw": lambda m: torch.optim.AdamW(m.parameters(), lr=1e-4),
               "adam": lambda m: torch.optim.Adam(m.parameters(), lr=1e-4),
               "sgd": lambda m: torch.optim.SGD(m.parameters(), lr=1e-4, momentum=0.9)}
# Built-in hardware of the GPUs torch names, for a profile on this machine.
_GPU_NAMES = (("3090", "rtx3090"), ("4090", "rtx4090"), ("H100", "h100"), ("V100", "v100"))


class Plan:
    """What frugal.plan predicts for one worker of the run (seconds, bytes).

    iteration_s, compute_s (forward + backward + inner step), samples_per_s
    (all workers), bottleneck ('gpu': the compute; else the link or the
    host's round work); the local modes' round: exchange_s, encode_s,
    decode_s per round and sync_s per step; hidden_local_steps (the fewest
    local steps, a power of two, at which the round hides behind the
    compute; 0: none up to 1024); memory: device_memory and host_memory
    [(buffer, bytes)], device_bytes, host_bytes, device_oom, host_oom. The
    profile: parameters, flops_per_sample, activation_bytes_per_sample,
    measured_step_s (this machine, the example batch), measured (whether
    the compute is the measured one or the cost model's for `hardware`)."""

    def __init__(self, prediction, profile, measured, predict=None):
        self._predict = predict
        self.measured = measured
        self.hardware = prediction["hardware"]
        self.iteration_s = prediction["iteration_s"]
        self.compute_s = prediction["compute_s"]
        self.samples_per_s = prediction["samples_per_s"]
        self.bottleneck = prediction["bottleneck"]
        self.exchange_s = prediction["exchange_s"]
        self.encode_s = prediction["sparsify_s"]
        self.decode_s = prediction["combine_s"]
        self.sync_s = prediction["sync_s"]
        self.optimizer_s = prediction["optimizer_s"]
        self.local_steps = prediction["local_steps"]
        self.local_fragments = prediction["local_fragments"]
        self.density = prediction["density"]
        self.hidden_local_steps = prediction["hidden_local_steps"]
        self.device_memory = prediction["device_memory"]
        self.host_memory = prediction["host_memory"]
        self.device_bytes = prediction["device_bytes"]
        self.device_capacity_bytes = prediction["device_capacity_bytes"]
        self.host_bytes = prediction["host_bytes"]
        self.host_capacity_bytes = prediction["host_capacity_bytes"]
        self.device_oom = prediction["device_oom"]
        self.host_oom = prediction["host_oom"]
        self.parameters = profile["parameters"]
        self.flops_per_sample = profile["flops_per_sample"]
        self.activation_bytes_per_sample = profile["activation_bytes_per_sample"]
        self.measured_step_s = profile["step_s"]
        self.batch_per_worker = profile["batch_per_worker"]

    def samples_per_s_at(self, workers):
        """The samples/s over all workers the planner predicts for this
        module on ``workers`` workers of one node (one site; each worker its
        own device, as in the profile), in the plan's mode, on its
        hardware."""
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
        if self._predict is None:
            raise ValueError("this Plan was not made by frugal.plan, so it cannot predict other worker counts")
        return float(self._predict([workers], workers)["samples_per_s"])

    def job_prior(self, max_workers):
        """The line of a cluster job file (``frugal cluster submit``) that
        gives the server this plan's speed for the job before it has
        measured any: ``planned_samples_per_s = [...]``, the rate at 1 to
        ``max_workers`` workers (samples_per_s_at). Without it a command
        job's speed is learned from its metrics as it runs."""
        if isinstance(max_workers, bool) or not isinstance(max_workers, int) or not 1 <= max_workers <= 1024:
            raise ValueError(f"max_workers must be an integer from 1 to 1024, got {max_workers!r}")
        rates = ", ".join(f"{self.samples_per_s_at(w):.6g}" for w in range(1, max_workers + 1))
        return f"planned_samples_per_s = [{rates}]"

    def __repr__(self):
        return (f"Plan(iteration_s={self.iteration_s:.4g}, bottleneck={self.bottleneck!r}, "
                f"device_bytes={self.device_bytes:.3g}, host_bytes={self.host_bytes:.3g}, "
                f"hidden_local_steps={self.hidden_local_steps})")

    def __str__(self):
        gib = 1024.0 ** 3

        def parts(items):
            return ", ".join(f"{name} {b / gib:.2f}" for name, b in items if b > 0)
        source = "measured here" if self.measured else f"the cost model's for {self.hardware}"
        lines = [f"model          {self.parameters / 1e6:.1f} M parameters, {self.flops_per_sample / 1e9:.3g} GFLOP "
                 f"and {self.activation_bytes_per_sample / 2**20:.3g} MiB of activations per sample",
                 f"iteration      {self.iteration_s:.4f} s ({self.samples_per_s:.1f} samples/s), "
                 f"bottleneck: {self.bottleneck}",
                 f"compute        {self.compute_s:.4f} s per step of {self.batch_per_worker} ({source})"]
        if self.local_steps:
            lines.append(f"per round      {self.local_steps} steps in {self.local_fragments} fragments: exchange "
                         f"{self.exchange_s:.4f} s, encode {self.encode_s:.4f} s, decode {self.decode_s:.4f} s")
            hidden = (f"from local_steps={self.hidden_local_steps}" if self.hidden_local_steps
                      else "at no local_steps up to 1024")
            lines.append(f"link hidden    {hidden}")
        lines.append(f"device memory  {self.device_bytes / gib:.2f} GiB of {self.device_capacity_bytes / gib:.2f} "
                     f"({parts(self.device_memory)}){'  OUT OF MEMORY' if self.device_oom else ''}")
        lines.append(f"host memory    {self.host_bytes / gib:.2f} GiB per worker ({parts(self.host_memory)})"
                     f"{'  OUT OF MEMORY' if self.host_oom else ''}")
        return "\n".join(lines)


def _inputs(example_batch):
    if isinstance(example_batch, torch.Tensor):
        return (example_batch,)
    if isinstance(example_batch, (tuple, list)) and example_batch and all(
            isinstance(x, torch.Tensor) for x in example_batch):
        return tuple(example_batch)
    raise TypeError("example_batch must be a tensor or a tuple of tensors (the module's forward arguments), got "
                    f"{type(example_batch).__name__}")


def _loss(out, loss_fn):
    if loss_fn is not None:
        loss = loss_fn(out)
    else:
        first = out
        while isinstance(first, (tuple, list)) and first:
            first = first[0]
        if isinstance(first, dict) and first:
            first = next(iter(first.values()))
        if not isinstance(first, torch.Tensor):
            raise TypeError(f"the module returned {type(out).__name__}: give loss_fn=, a function of the output "
                            f"that returns the loss")
        loss = first.float().mean()
    if not (isinstance(loss, torch.Tensor) and loss.numel() == 1 and loss.requires_grad):
        raise ValueError("the loss must be a one-element tensor that requires grad (check loss_fn and that the "
                         "module has trainable parameters)")
    return loss


def _gemm(event):
    a_at, b_at = _GEMMS[event.name]
    shapes = event.input_shapes
    if len(shapes) <= max(a_at, b_at) or len(shapes[a_at]) < 2 or len(shapes[b_at]) < 2:
        return None
    a, b = shapes[a_at], shapes[b_at]
    rows = math.prod(a[:-1])
    k, n = a[-1], b[-1]
    return (event.name, "matmul", int(rows), int(n), int(k), 2.0 * rows * n * k, 4.0 * (rows * k + k * n + rows * n))


def _profile(module, inputs, loss_fn, make_optimizer, repeats, warmup, threads):
    """One step's time (median of `repeats` after `warmup`), its GEMMs and
    convolutions, saved activation bytes and the optimizer's state bytes,
    on a copy of the module (the user's is not touched)."""
    net = copy.deepcopy(module)
    net.train()
    params = [p for p in net.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the module has no parameters that require grad")
    device = params[0].device
    opt = make_optimizer(net)
    if not isinstance(opt, torch.optim.Optimizer):
        raise TypeError(f"optimizer= must return a torch.optim.Optimizer, got {type(opt).__name__}")
    param_ptrs = {p.data_ptr() for p in net.parameters()}
    cuda = device.type == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    def step():
        opt.zero_grad()
        _loss(net(*inputs), loss_fn).backward()
        opt.step()

    saved = {}

    def pack(t):
        if t.data_ptr() not in param_ptrs:
            saved[(t.data_ptr(), t.numel(), t.dtype)] = t.numel() * t.element_size()
        return t
    old_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        try:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                step()  # also a check that the module runs on the batch
        except (RuntimeError, TypeError, IndexError, ValueError) as e:
            raise ValueError(f"the module cannot run a training step on example_batch: "
                             f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from e
        for _ in range(max(0, warmup - 1)):
            step()
        times = []
        for _ in range(repeats):
            sync()
            start = time.perf_counter()
            step()
            sync()
            times.append(time.perf_counter() - start)
        activities = [torch.profiler.ProfilerActivity.CPU]
        with torch.profiler.profile(activities=activities, record_shapes=True) as prof:
            conv_shapes = []
            hooks = [m.register_forward_hook(lambda m, i, o: conv_shapes.append((m, o.shape)))
                     for m in net.modules() if isinstance(m, _CONVS)]
            try:
                step()
            finally:
                for h in hooks:
                    h.remove()
    finally:
        torch.set_num_threads(old_threads)
    ops = [op for op in (_gemm(e) for e in prof.events() if e.name in _GEMMS) if op is not None]
    for m, out_shape in conv_shapes:
        rows = out_shape[0] * math.prod(out_shape[2:])
        k = m.in_channels // m.groups * math.prod(m.kernel_size)
        flops = 2.0 * rows * m.out_channels * k
        for part in ("forward", "input gradient", "weight gradient"):
            ops.append((f"conv {part}", "conv", int(rows), int(m.out_channels), int(k), flops,
                        4.0 * (rows * k + k * m.out_channels + rows * m.out_channels)))
    activations = float(sum(saved.values()))
    # The rest of the work (elementwise, normalisation, the loss) as passes
    # over the saved activations: written and read in forward, read and
    # written again by their gradients in backward.
    ops.append(("elementwise", "memory", 0, 0, 0, 0.0, 4.0 * activations))
    state = 0
    for s in opt.state.values():
        state += sum(v.numel() * v.element_size() for v in s.values() if isinstance(v, torch.Tensor) and v.dim() > 0)
    n_params = sum(p.numel() for p in params)
    flops = sum(op[5] for op in ops)
    return dict(ops=ops, parameters=float(n_params), activation_bytes=activations, step_s=statistics.median(times),
                optimizer_state_bytes=state / n_params, flops=flops)


def _check_positive(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def plan(module, example_batch, *, loss_fn=None, optimizer="adamw", hardware=None, sites=(2,), link_mbps=100.0,
         intra_gbps=10.0, sync="local", local_steps=16, local_fragments=0, density=None, batch_per_worker=None,
         workers_per_host=1, repeats=5, warmup=2):
    """Predicts Frugal's run of ``module`` before it is bought: iteration
    time, the round's time on the link, memory on the device and the host
    (with out-of-memory flags), and the local steps that keep the link
    hidden. Returns a :class:`Plan` (``print(plan)`` for a summary).

    It trains a copy of the module for a few steps on ``example_batch`` (a
    tensor or a tuple of the forward's tensors, on the module's device)
    with ``optimizer`` ('adamw', 'adam', 'sgd' or a function of the
    module's copy that returns a torch optimizer over it, e.g. ``lambda m:
    torch.optim.AdamW(groups_of(m), lr=3e-4)``), timing the steps and
    recording with torch's profiler the matrix products and convolutions
    and the activations saved for backward (Note [Recorded workloads] in
    src/sim/workload.cc). ``loss_fn(output)`` gives the loss (default: the
    mean of the first output tensor).

    hardware: None (default) predicts for this machine with the measured
      step time (the CPU: 'cpu-local'; a GPU torch names: its built-in);
      a built-in name ('rtx3090', 'a100-80g', 'h100', ...) or a hardware
      TOML file prices the recorded operators with the cost model instead.
    sites: workers per site, e.g. [4, 4]; link_mbps: the link between the
      sites (and the uplink of a single site); intra_gbps: inside a site.
    sync, local_steps, local_fragments, density: the run's mode, as
      ``frugal train``'s flags (defaults: the local mode, 16 steps per
      round, the fragments frugal train takes, whole rounds).
    batch_per_worker: samples per worker per step (default: the example
      batch's); workers_per_host: workers sharing one host (on a CPU the
      profile then runs with its share of the cores' threads).

    Raises TypeError or ValueError for a module that cannot run on the
    batch, an unknown hardware name, or a rate that is NaN, zero or
    negative."""
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"plan takes a torch.nn.Module, got {type(module).__name__}")
    inputs = _inputs(example_batch)
    _check_positive(link_mbps, "link_mbps")
    _check_positive(intra_gbps, "intra_gbps")
    if isinstance(sites, int):
        sites = [sites]
    sites = list(sites)
    if not sites or any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in sites):
        raise ValueError(f"sites must list each site's worker count (integers >= 1), got {sites!r}")
    for name, value in (("repeats", repeats), ("workers_per_host", workers_per_host)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 1:
        raise ValueError(f"warmup must be an integer >= 1, got {warmup!r}")
    if density is not None:
        _check_positive(density, "density")
    if isinstance(optimizer, str):
        if optimizer not in _OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {', '.join(_OPTIMIZERS)} or a function of the module, "
                             f"got {optimizer!r}")
        make_optimizer = _OPTIMIZERS[optimizer]
    elif callable(optimizer):
        make_optimizer = optimizer
    else:
        raise TypeError(f"optimizer must be a name or a function of the module, got {type(optimizer).__name__}")
    batch = int(inputs[0].shape[0]) if inputs[0].dim() > 0 else 1
    if batch_per_worker is None:
        batch_per_worker = batch
    if isinstance(batch_per_worker, bool) or not isinstance(batch_per_worker, int) or batch_per_worker < 1:
        raise ValueError(f"batch_per_worker must be an integer >= 1, got {batch_per_worker!r}")
    device = next((p.device for p in module.parameters()), torch.device("cpu"))
    measured = hardware is None
    if measured:
        hardware = _this_machine(device)
    elif not isinstance(hardware, (str, os.PathLike)):
        raise TypeError(f"hardware must be a built-in name or a TOML file, got {type(hardware).__name__}")
    threads = max(1, (os.cpu_count() or 1) // workers_per_host) if device.type == "cpu" and workers_per_host > 1 \
        else 0
    prof = _profile(module, inputs, loss_fn, make_optimizer, repeats, warmup, threads)

    def predict(clusters, per_host):
        return _C.predict_frugal(
            prof["ops"], prof["parameters"], prof["activation_bytes"], batch, os.fspath(hardware), clusters,
            float(intra_gbps), float(link_mbps), batch_per_worker, prof["step_s"] / batch if measured else 0.0, sync,
            local_steps, local_fragments, float(density or 0.0), per_host, prof["optimizer_state_bytes"], True)
    prediction = predict(sites, workers_per_host)
    profile = dict(parameters=prof["parameters"], flops_per_sample=prof["flops"] / batch,
                   activation_bytes_per_sample=prof["activation_bytes"] / batch, step_s=prof["step_s"],
                   batch_per_worker=batch_per_worker)
    return Plan(prediction, profile, measured, predict)


def _this_machine(device):
    if device.type == "cpu":
        return "cpu-local"
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else str(device)
    for part, builtin in _GPU_NAMES:
        if part in name:
            return builtin
    if "A100" in name:
        return "a100-80g" if torch.cuda.get_device_properties(device).total_memory > 50 * 2**30 else "a100-40g"
    raise ValueError(f"no built-in hardware for {name!r}: give hardware= (a built-in name or a hardware TOML "
                     f"file with this GPU's memory and the host's cores; docs/guide/planner.md)")
