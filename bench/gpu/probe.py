"""The smallest use of the Python package that reaches every GIL release:
join a world, wrap a module in DistributedModel on DEVICE, take 3 steps,
finish. Run under `frugal run --workers 2` by bench/gpu/device_run.sh
(group `probe`); on a crash the script runs it again under cuda-gdb for
native stacks.   argv: [DEVICE]"""
import faulthandler
import sys

import torch

import frugal

faulthandler.enable()
device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
print("torch", torch.__version__, "frugal", frugal.__file__, flush=True)
world = frugal.init()
print("joined", world, flush=True)
net = torch.nn.Linear(8, 4).to(device)
model = frugal.DistributedModel(net, lr=0.1)
print("replica made", flush=True)
for _ in range(3):
    loss = model(torch.randn(16, 8, device=device)).square().sum()
    loss.backward()
    model.step()
print("rank", world.rank, "checksum", model.finish(), flush=True)
