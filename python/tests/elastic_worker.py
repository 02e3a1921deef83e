"""One worker of test_elastic: an own training loop under frugal run
--elastic, unchanged by elasticity but for two things a script needs: it
runs until model.iteration reaches STEPS (a rolled-back world trains those
steps again) or model.left, and shards its data by model.rank and
model.world_size.
argv: OUT_DIR STEPS SLEEP_S [mlp] [site|step] [die-in-finish|die-in-all-reduce]:
an mlp-sized model; sync='site', with a checksum of the parameters after
every step, or sync='step'; the first world's rank 1 SIGKILLs itself as the
others enter finish(), or as they enter an all_reduce of their losses at
step STEPS/2 (which they then miss: frugal.WorldChanged)."""

import json
import os
import signal
import sys
import time

import torch

import frugal
from worker_common import TwoTower, blobs

out_dir, steps, sleep_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
big = "mlp" in sys.argv[4:]
site = "site" in sys.argv[4:]
sync = "site" if site else "step" if "step" in sys.argv[4:] else None
pid = os.getpid()
world = frugal.init()
victim = world.rank == 1 and world.generation == 1
die_in = next((a[len("die-in-"):] for a in sys.argv[4:] if a.startswith("die-in-")), None)
torch.manual_seed(pid)  # different initial weights: the broadcast (or a joiner's state) makes them equal
if big:  # an mlp-sized residual MLP (about 5.8 M parameters)
    net = torch.nn.Sequential(torch.nn.Linear(16, 1024), torch.nn.ReLU(),
                              *[m for _ in range(5) for m in (torch.nn.Linear(1024, 1024), torch.nn.ReLU())],
                              torch.nn.Linear(1024, 4))
else:
    net = TwoTower()
opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1000, gamma=0.5)
changes = []
first_param = next(net.parameters())
momentum = [None]  # the optimizer's momentum buffer of first_param after the last step


def on_world_change(model):
    # kept_optimizer_state: the survivor kept its own optimizer (the same
    # buffer object) instead of loading the restore point's copy of it
    changes.append({"generation": model.generation, "world_size": model.world_size, "rank": model.rank,
                    "iteration": model.iteration, "time": time.time(),
                    "kept_optimizer_state": opt.state[first_param].get("momentum_buffer") is momentum[0]})


mode = {"sync": "step"} if sync == "step" else {"local_steps": 8, **({"sync": sync} if sync else {})}
model = frugal.DistributedModel(net, optimizer=opt, scheduler=sched, check_every=0, on_world_change=on_world_change,
                                **mode)
# a joiner in the local mode starts its optimizer fresh, with the job's
# hyperparameters (Note [A joiner's own optimizer])
start_optimizer = {"entries": len(opt.state), "lr": opt.param_groups[0]["lr"], "iteration": model.iteration}
x_all, y_all = blobs(4096, rank=0)
loss_fn = torch.nn.CrossEntropyLoss()
losses, times, sums = {}, {}, {}
reduced = []  # [generation, the all_reduce's mean or "missing"] per call
with open(os.path.join(out_dir, f"pid-{pid}"), "w") as f:
    f.write(world.cluster)
while model.iteration < steps and not model.left:
    t = model.iteration
    # this step's global batch of 96, split by the current world
    idx = torch.arange(96 * t, 96 * (t + 1)) % 4096
    shard = idx[model.rank::model.world_size]
    opt.zero_grad()
    loss = loss_fn(model(x_all[shard]), y_all[shard])
    loss.backward()
    model.step()
    sched.step()
    momentum[0] = opt.state[first_param].get("momentum_buffer")
    losses[t] = loss.item()
    times[t] = time.time()
    if site:  # the last pass over step t wins: a rolled-back step is trained again
        sums[t] = sum(float(p.detach().double().sum()) for p in net.parameters())
    if t % 5 == 0:
        with open(os.path.join(out_dir, f"progress-{pid}"), "w") as f:
            f.write(str(t))
    if die_in == "all-reduce" and t == steps // 2:  # again when step t is trained again
        if victim:
            os.kill(pid, signal.SIGKILL)
        try:
            reduced.append([model.generation, frugal.all_reduce(losses[t])])
        except frugal.WorldChanged:
            reduced.append([model.generation, "missing"])
    time.sleep(sleep_s)
if die_in == "finish" and victim:
    os.kill(pid, signal.SIGKILL)
checksum = model.finish()
result = {"pid": pid, "left": model.left, "checksum": checksum, "iteration": model.iteration,
          "generation": model.generation, "world_size": model.world_size, "rank": model.rank,
          "changes": changes, "losses": losses, "times": times, "sched_epoch": sched.last_epoch,
          "cluster": world.cluster, "sums": sums, "reduced": reduced, "start_optimizer": start_optimizer}
with open(os.path.join(out_dir, f"result-{pid}.json"), "w") as f:
    json.dump(result, f)
