"""One rank of test_hook: the same DDP model five times, with DDP's own
all-reduce, with frugal.sparse_hook at density 1 (fp32 values) over the
flat and the sharded exchange, and at density 0.1 (int4), overlapped with
backward and deflated (the defaults) and inside the hook without deflate
(overlap=False, deflate=False); writes how the hooked gradients compare.
argv: OUT_DIR"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import frugal
from worker_common import TwoTower, blobs, write_result

dist.init_process_group("gloo")  # env:// from frugal run (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)
rank = dist.get_rank()
torch.manual_seed(0)
nets = [TwoTower() for _ in range(5)]
for net in nets[1:]:
    net.load_state_dict(nets[0].state_dict())
# Small buckets so the model spans several of them.
ref, dense, sparse, inline, sharded = (DDP(net, bucket_cap_mb=0.002) for net in nets)
dense_state = frugal.hook_state(density=1.0, value_encoding="fp32")
sparse_state = frugal.hook_state(density=0.1)
inline_state = frugal.hook_state(density=0.1, overlap=False, deflate=False)
sharded_state = frugal.hook_state(density=1.0, value_encoding="fp32", exchange="sharded")
dense.register_comm_hook(dense_state, frugal.sparse_hook)
sparse.register_comm_hook(sparse_state, frugal.sparse_hook)
inline.register_comm_hook(inline_state, frugal.sparse_hook)
sharded.register_comm_hook(sharded_state, frugal.sparse_hook)

x, y = blobs(64, rank)
loss_fn = torch.nn.CrossEntropyLoss()
max_diff = overlap_diff = sharded_diff = 0.0
for step in range(3):  # DDP rebuilds its buckets after the first iteration
    for m in (ref, dense, sparse, inline, sharded):
        m.zero_grad()
        loss_fn(m(x, use_unused=True), y).backward()
    for a, b in zip(nets[0].parameters(), nets[1].parameters()):
        max_diff = max(max_diff, (a.grad - b.grad).abs().max().item())
    for a, b in zip(nets[2].parameters(), nets[3].parameters()):
        overlap_diff = max(overlap_diff, (a.grad - b.grad).abs().max().item())
    for a, b in zip(nets[1].parameters(), nets[4].parameters()):
        sharded_diff = max(sharded_diff, (a.grad - b.grad).abs().max().item())
d, s, i = dense_state.stats(), sparse_state.stats(), inline_state.stats()
write_result(rank, max_diff=max_diff, overlap_diff=overlap_diff, sharded_diff=sharded_diff, dense_calls=d["calls"], dense_sent=d["sent_values"],
             dense_total=d["total_values"], dense_merged=d["merged_values"], sparse_sent=s["sent_values"],
             sparse_total=s["total_values"], sparse_merged=s["merged_values"], sparse_bytes=s["sent_bytes"],
             raw_bytes=i["sent_bytes"],
             sparse_grad_norm=float(sum(p.grad.norm() ** 2 for p in nets[2].parameters()) ** 0.5))
dist.destroy_process_group()
