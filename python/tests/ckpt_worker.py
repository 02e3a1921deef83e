"""One rank of test_checkpoint's runs: the user's optimizer and scheduler
(sync='local' and 'auto': AdamW with two groups and a LambdaLR; sync='step':
SGD with momentum and a StepLR), metrics in a run directory, frugal.save every
SAVE_EVERY steps; DIE_AT > 0 ends the process there without finish() (a
killed run); RESUME=1 starts with frugal.load.
argv: OUT_DIR SYNC STEPS SAVE_EVERY DIE_AT RESUME RUN_DIR"""

import math
import os
import sys

import torch

import frugal
from worker_common import TwoTower, blobs, write_result

out_dir, sync = sys.argv[1], sys.argv[2]
steps, save_every, die_at, resume = (int(v) for v in sys.argv[3:7])
run_dir = sys.argv[7]
world = frugal.init()
torch.manual_seed(world.rank)  # different initial weights: the broadcast or the checkpoint must override them
net = TwoTower()
if sync in ("local", "auto"):
    decay = [p for n, p in net.named_parameters() if n.endswith("weight")]
    rest = [p for n, p in net.named_parameters() if not n.endswith("weight")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": rest, "weight_decay": 0.0}],
                            lr=0.02)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: 0.5 * (1 + math.cos(math.pi * t / steps)))
    model = frugal.DistributedModel(net, optimizer=opt, sync=sync, local_steps=4, check_every=4,
                                    total_steps=steps, run_dir=run_dir, log_every=4)
else:
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=6, gamma=0.5)
    model = frugal.DistributedModel(net, optimizer=opt, sync="step", density=0.1, check_every=4,
                                    total_steps=steps, run_dir=run_dir, log_every=4)
start = 0
resumed_from = None
if resume:
    extra = frugal.load(model, scheduler=sched)
    start = model.iteration
    resumed_from = extra["step"]
x, y = blobs(256, world.rank)
xt, yt = blobs(512, rank=99)
loss_fn = torch.nn.CrossEntropyLoss()
for t in range(start, steps):
    i = (t * 16) % 256
    loss = loss_fn(model(x[i:i + 16]), y[i:i + 16])
    loss.backward()
    if sync in ("local", "auto"):
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
    model.step(loss=loss)
    opt.zero_grad()
    sched.step()
    if (t + 1) % save_every == 0:
        if (t + 1) % 8 == 0:
            with torch.no_grad():
                model.log(val_loss=model.with_synced_parameters(lambda: loss_fn(net(xt), yt).item()))
        frugal.save(model, scheduler=sched, extra={"step": t + 1})
    if t + 1 == die_at:
        sys.stdout.flush()
        os._exit(3)  # killed: no finish(), nothing flushed or closed
checksum = model.finish()
torch.save({"params": net.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict()},
           os.path.join(out_dir, f"state{world.rank}.pt"))
with torch.no_grad():
    acc = (net(xt).argmax(1) == yt).float().mean().item()
write_result(world.rank, world_size=world.world_size, checksum=checksum, iteration=model.iteration, start=start,
             resumed_from=resumed_from, accuracy=acc, last_lr=sched.get_last_lr()[0], sync=model._sync.name)
