"""One rank of test_training's local-mode test: trains TwoTower with
frugal.DistributedModel(sync="local").
argv: OUT_DIR STEPS LOCAL_STEPS [LOCAL_INNER]"""

import sys

import torch

import frugal
from worker_common import TwoTower, blobs, write_result

steps, local_steps = int(sys.argv[2]), int(sys.argv[3])
inner = sys.argv[4] if len(sys.argv) > 4 else "auto"
world = frugal.init()
torch.manual_seed(world.rank)  # different initial weights: the broadcast must make them equal
net = TwoTower()
model = frugal.DistributedModel(net, sync="local", optimizer="sgd", lr=0.1, momentum=0.9, local_steps=local_steps,
                                local_inner=inner, check_every=8, total_steps=steps)
x, y = blobs(256, world.rank)
xt, yt = blobs(512, rank=99)
loss_fn = torch.nn.CrossEntropyLoss()


def accuracy():
    with torch.no_grad():
        return (net(xt).argmax(1) == yt).float().mean().item()


for t in range(steps):
    i = (t * 32) % 256
    loss = loss_fn(model(x[i:i + 32], use_unused=(t % 3 == 0)), y[i:i + 32])
    loss.backward()
    assert net.left.weight.grad is not None  # the local mode's gradients land in .grad
    model.step()
    assert net.left.weight.grad is None  # step() consumed them
own = torch.cat([p.detach().flatten() for p in net.parameters()])
synced = model.with_synced_parameters(lambda: torch.cat([p.detach().flatten() for p in net.parameters()]))
assert torch.equal(own, torch.cat([p.detach().flatten() for p in net.parameters()]))  # this rank's are back
stats = model.stats()
checksum = model.finish()
flat = torch.cat([p.detach().flatten() for p in net.parameters()])
write_result(world.rank, world_size=world.world_size, accuracy=accuracy(), checksum=checksum, rounds=stats["rounds"],
             param_sum=float(flat.double().sum()), param_head=flat[:8].tolist(), iteration=model.iteration,
             synced_head=synced[:8].tolist(), own_head=own[:8].tolist())
