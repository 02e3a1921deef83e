"""frugal.save / frugal.load: a DistributedModel's run state in frugal
train's checkpoint files (docs/guide/python.md, "Checkpoints").

The files, their checksums, the atomic rename, rank 0's COMPLETE marker and
the pruning to the newest ``keep`` steps are the engine's
(engine/checkpoint.h, CheckpointWriter); the sections of each mode's state
are engine::SaveStepState / SaveLocalState's, as a CLI worker writes them.
This module adds the user's torch objects as three more sections of each
rank's file: ``torch_optimizer``, ``torch_scheduler`` and ``user_extra``
(``torch.save`` bytes of their state_dicts and of ``extra``)."""

import io
import os
import sys

import torch

from . import _C
from ._model import DistributedModel
from ._world import default_timeout_s


def _to_bytes(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _from_bytes(data, what):
    try:
        return torch.load(io.BytesIO(data), map_location="cpu")
    except Exception as e:  # a damaged pickle inside an intact file: another writer's bytes
        raise ValueError(f"{what}: cannot read it back ({type(e).__name__}: {e})") from None


def _directory(model, directory):
    if directory is not None:
        return os.fspath(directory)
    if model.run_dir is None:
        raise ValueError("frugal.save/load need a directory, or a DistributedModel with run_dir (then "
                         "<run_dir>/checkpoints)")
    return os.path.join(model.run_dir, "checkpoints")


def _check_model(model, scheduler):
    if not isinstance(model, DistributedModel):
        raise TypeError(f"frugal.save/load take a frugal.DistributedModel, got {type(model).__name__}")
    if scheduler is not None and not (hasattr(scheduler, "state_dict") and hasattr(scheduler, "load_state_dict")):
        raise TypeError(f"scheduler must have state_dict() and load_state_dict(), got {type(scheduler).__name__}")


def save(model, directory=None, *, scheduler=None, extra=None, keep=3):
    """Writes every rank's state at ``model.iteration`` to
    ``<directory>/step-<t>/rank-<r>.ckpt``, as frugal train --checkpoint-every
    does; call it on every rank, between ``step()`` and the next forward.

    Each rank writes its own file (temporary file, fsync, rename); rank 0
    then waits for every rank's file (up to max(timeout_s, 60) seconds),
    reads each back, writes ``COMPLETE`` and keeps the newest ``keep``
    complete steps. A file holds the engine's state of the mode (rank 0: the
    shared part too), the module's buffers (rank 0), the optimizer's
    ``state_dict()`` when it is the user's torch optimizer, and
    ``scheduler.state_dict()`` and ``extra`` (anything ``torch.save`` takes)
    when given. ``directory`` defaults to ``<run_dir>/checkpoints``. Returns
    the step directory. Rank 0 warns when the step was left incomplete (a
    rank's file did not come), as frugal train logs it. In an elastic job a
    worker that left (``model.left``), and every worker right after a
    step() that changed the world, write nothing and return None."""
    _check_model(model, scheduler)
    if not (isinstance(keep, int) and keep >= 1):
        raise ValueError(f"keep must be an integer >= 1, got {keep!r}")
    if model.left or model._just_switched:  # Note [Checkpoints of elastic scripts]
        return None
    root = _directory(model, directory)
    sections = model._checkpoint_sections()
    if model._user_opt is not None:
        sections["torch_optimizer"] = _to_bytes(model._user_opt.state_dict())
    if scheduler is not None:
        sections["torch_scheduler"] = _to_bytes(scheduler.state_dict())
    if extra is not None:
        sections["user_extra"] = _to_bytes(extra)
    outcome = _C.write_checkpoint(model.world, root, model.iteration, keep, sections,
                                  max(model._options["timeout_s"], 60.0))
    if model.world.rank == 0:
        model._record(event="checkpoint", bytes=outcome["bytes"], write_s=outcome["write_s"],
                      complete_s=outcome["complete_s"], complete=outcome["complete"])
        if not outcome["complete"]:
            print(f"frugal: checkpoint of step {model.iteration} abandoned: {outcome['abandoned']}", file=sys.stderr)
    return outcome["step_dir"]


def _agree(model, step):
    """Every rank must resume from the same step: a rank whose listing
    differed (a file damaged between two ranks' reads) fails them all."""
    s = float(step)
    total = model.world.all_reduce_sum([s, s * s], model._options["timeout_s"])
    n = model.world.world_size
    if total[0] != n * s or total[1] != n * s * s:
        raise RuntimeError(f"the ranks found different newest checkpoints (this rank: step {step}); "
                           "check that every rank sees the same checkpoint directory")


# Note [Checkpoints of elastic scripts]
# Under frugal run --elastic, save and load are collective over the current
# generation's world, as in a fixed world; a membership change is taken at
# the check gates inside step(), so every rank of a generation calls save
# at the same steps. Three cases are not collective: a worker that left the
# job at the step() before (model.left) saves nothing; after a step() that
# entered a new world (a joiner never ran that iteration, and the state is
# the restore point just restored) no rank saves until the next forward;
# and a joiner, which received the job's state from rank 0 when its model
# was built, keeps it: load returns None at once, so a script's "load, or
# start afresh" opening runs unchanged on the first world and on joiners.
def load(model, directory=None, *, scheduler=None):
    """Restores the newest complete step under ``directory`` whose every
    rank file reads back intact (a damaged one is named on stderr and
    skipped, as ``frugal train --resume`` does); call it on every rank,
    after constructing the model with the same module and options and
    before its first forward. Returns this rank's ``extra`` (None if none
    was saved).

    With the same world size each rank takes its own file and training
    continues bit-exactly. With another world size, rank r < the old world
    takes its own file's residuals and optimizer state; a new rank starts
    with empty residuals (sync='local': at the synced parameters with fresh
    inner state) and takes rank 0's optimizer, scheduler and extra.
    FileNotFoundError when the directory or a complete step is missing,
    ValueError when no step is intact. A joiner of a running elastic job
    keeps the state it received and returns None without reading."""
    _check_model(model, scheduler)
    if model._joined:  # Note [Checkpoints of elastic scripts]
        return None
    root = _directory(model, directory)
    step_dir, old_world, skipped = _C.newest_checkpoint(root)
    for why in skipped:
        print(f"frugal: skipping checkpoint {why}", file=sys.stderr)
    rank = model.world.rank
    path0 = _C.checkpoint_rank_file(step_dir, 0)
    shared = _C.read_checkpoint(path0)
    step = _C.parse_meta(shared, path0)["step"]
    _agree(model, step)
    own = rank < old_world
    mine, what = None, "checkpoint " + path0
    if own and rank != 0:
        mine_path = _C.checkpoint_rank_file(step_dir, rank)
        mine, what = _C.read_checkpoint(mine_path), "checkpoint " + mine_path
    model._restore_checkpoint(shared, mine, residuals=own and rank == 0, what=what)
    user = mine if mine is not None else shared
    if model._user_opt is not None:
        if "torch_optimizer" not in user:
            raise ValueError(f"{what} has no 'torch_optimizer' section (saved by a model without a torch optimizer)")
        model._user_opt.load_state_dict(_from_bytes(user["torch_optimizer"], what + " torch_optimizer"))
    if scheduler is not None:
        if "torch_scheduler" not in user:
            raise ValueError(f"{what} has no 'torch_scheduler' section (saved without scheduler=)")
        scheduler.load_state_dict(_from_bytes(user["torch_scheduler"], what + " torch_scheduler"))
    # The steps after the one resumed from are of an abandoned future: a new
    # write of the same step must not be mixed with their files. Every rank
    # has chosen its step (_agree) before rank 0 removes any.
    if rank == 0:
        _C.clear_checkpoints_after(root, step)
    return _from_bytes(user["user_extra"], what + " user_extra") if "user_extra" in user else None
