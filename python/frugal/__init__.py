"""Frugal for PyTorch: data-parallel training over slow networks.

Two ways in (docs/guide/python.md):

* ``frugal.DistributedModel(module, optimizer="sgd", lr=..., density=...)``:
  the full Frugal pipeline. Gradients leave through autograd hooks, are
  error-fed, block-sparsified, exchanged and applied by Frugal's CPU sparse
  optimizer to a master copy; ``loss.backward(); model.step()``.
* ``ddp.register_comm_hook(frugal.hook_state(), frugal.sparse_hook)``:
  a DDP communication hook that exchanges block-sparse, error-fed gradients
  over Frugal's transport instead of DDP's dense all-reduce.

``DistributedModel(..., run_dir="runs/NAME")`` writes frugal train's
metrics.jsonl and progress line; ``frugal.save(model)`` /
``frugal.load(model)`` write and read its checkpoint files.
``frugal.plan(module, example_batch, sites=[4, 4], link_mbps=100)``
predicts a run's iteration time, memory and the local steps that hide
the link, from a profile of the module.

Start the processes with ``frugal run --workers N -- python3 script.py``
(or torchrun); ``frugal.init()`` joins the world they form.
"""

import torch  # noqa: F401  (loads LibTorch before the extension)

from . import _C
from ._build_info import VERSION as __version__
from ._world import init, get_world, is_initialized, all_reduce, barrier, device, WorldChanged
from ._hook import HookState, hook_state, sparse_hook
from ._model import DistributedModel, options
from ._checkpoint import save, load
from ._plan import Plan, plan

__all__ = [
    "__version__",
    "init",
    "get_world",
    "is_initialized",
    "all_reduce",
    "barrier",
    "device",
    "WorldChanged",
    "DistributedModel",
    "options",
    "save",
    "load",
    "plan",
    "Plan",
    "HookState",
    "hook_state",
    "sparse_hook",
]
