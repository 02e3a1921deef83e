"""One rank of test_training: trains TwoTower with frugal.DistributedModel.
argv: OUT_DIR STEPS DENSITY STALENESS [DEVICE [OVERLAP_DEVICE_COPIES]]"""

import sys

import torch

import frugal
from worker_common import TwoTower, blobs, write_result

steps, density, staleness = int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
device = sys.argv[5] if len(sys.argv) > 5 else "cpu"
overlap = sys.argv[6] != "0" if len(sys.argv) > 6 else True
world = frugal.init()
torch.manual_seed(world.rank)  # different initial weights: the broadcast must make them equal
net = TwoTower().to(device)
model = frugal.DistributedModel(net, sync="step", optimizer="sgd", lr=0.1, momentum=0.9, density=density,
                                staleness=staleness, check_every=20, overlap_device_copies=overlap)
x, y = (t.to(device) for t in blobs(256, world.rank))
loss_fn = torch.nn.CrossEntropyLoss()
for t in range(steps):
    i = (t * 32) % 256
    loss = loss_fn(model(x[i:i + 32], use_unused=(t % 3 == 0)), y[i:i + 32])
    loss.backward()
    model.step()
checksum = model.finish()
xt, yt = (t.to(device) for t in blobs(512, rank=99))
with torch.no_grad():
    acc = (net(xt).argmax(1) == yt).float().mean().item()
flat = torch.cat([p.detach().flatten() for p in net.parameters()]).cpu()
write_result(world.rank, world_size=world.world_size, accuracy=acc, checksum=checksum, loss=loss.item(),
             param_sum=float(flat.double().sum()), param_head=flat[:8].tolist(), iteration=model.iteration)
