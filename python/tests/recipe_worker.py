"""One rank of test_training's own-recipe test: the user's AdamW with two
parameter groups (no decay on biases), a LambdaLR warm-up + cosine,
clip_grad_norm_ and accumulation of 2, in the default sync ('auto': the
local mode with two workers).
argv: OUT_DIR STEPS LOCAL_STEPS"""

import math
import sys

import torch

import frugal
from worker_common import TwoTower, blobs, write_result

steps, local_steps = int(sys.argv[2]), int(sys.argv[3])
world = frugal.init()
torch.manual_seed(world.rank)  # different initial weights: the broadcast must make them equal
net = TwoTower()
decay = [p for n, p in net.named_parameters() if n.endswith("weight")]
rest = [p for n, p in net.named_parameters() if not n.endswith("weight")]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": rest, "weight_decay": 0.0}], lr=0.02)
warmup = 4
sched = torch.optim.lr_scheduler.LambdaLR(
    opt, lambda t: (t + 1) / warmup if t < warmup else 0.5 * (1 + math.cos(math.pi * (t - warmup) / (steps - warmup))))
model = frugal.DistributedModel(net, optimizer=opt, local_steps=local_steps, check_every=8)
x, y = blobs(256, world.rank)
xt, yt = blobs(512, rank=99)
loss_fn = torch.nn.CrossEntropyLoss()


def eval_loss():
    with torch.no_grad():
        return loss_fn(net(xt), yt).item()


first = eval_loss()
for t in range(steps):
    i = (t * 32) % 256
    for half in (0, 16):  # accumulation of 2: two backwards, one step
        loss = loss_fn(model(x[i + half:i + half + 16], use_unused=(t % 3 == 0)), y[i + half:i + half + 16]) / 2
        loss.backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
    model.step()
    assert net.left.weight.grad is not None  # the user's zero_grad owns the gradients
    opt.zero_grad()
    sched.step()
stats = model.stats()
checksum = model.finish()
flat = torch.cat([p.detach().flatten() for p in net.parameters()])
with torch.no_grad():
    acc = (net(xt).argmax(1) == yt).float().mean().item()
write_result(world.rank, world_size=world.world_size, first_loss=first, last_loss=eval_loss(), accuracy=acc,
             checksum=checksum, rounds=stats["rounds"], sync="local" if "sync=local" in repr(model) else repr(model),
             param_sum=float(flat.double().sum()), param_head=flat[:8].tolist(), iteration=model.iteration,
             last_lr=sched.get_last_lr()[0], opt_steps=int(opt.state_dict()["state"][0]["step"]))
