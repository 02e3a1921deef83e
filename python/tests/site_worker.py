"""One rank of test_training's site-replica test: DistributedModel(sync='site')
with the user's SGD under frugal run --local-clusters a,a,b,b; clipping after
sync_gradients() on odd steps, step() averaging on even ones.
argv: OUT_DIR STEPS LOCAL_STEPS"""

import sys

import torch

import frugal
from worker_common import TwoTower, blobs, write_result

steps, local_steps = int(sys.argv[2]), int(sys.argv[3])
world = frugal.init()
torch.manual_seed(world.rank)
net = TwoTower()
opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
model = frugal.DistributedModel(net, optimizer=opt, sync="site", local_steps=local_steps, local_overlap=False)
x, y = blobs(256, world.rank)
loss_fn = torch.nn.CrossEntropyLoss()
after_step = []
for t in range(steps):
    i = (t * 16) % 256
    loss = loss_fn(model(x[i:i + 16], use_unused=(t % 3 == 0)), y[i:i + 16])
    loss.backward()
    if t % 2:
        model.sync_gradients()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
    model.step()
    opt.zero_grad()
    after_step.append(torch.cat([p.detach().flatten() for p in net.parameters()]).tolist())
checksum = model.finish()
final = torch.cat([p.detach().flatten() for p in net.parameters()]).tolist()
write_result(world.rank, cluster=world.cluster, after_step=after_step, final=final, checksum=checksum,
             rounds=model.stats()["rounds"])
