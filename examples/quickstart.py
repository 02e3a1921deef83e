import math, torch, frugal
world = frugal.init()  # the world `frugal run --workers N` formed (a world of one without it)
net = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
decay = [p for n, p in net.named_parameters() if n.endswith("weight")]
rest = [p for n, p in net.named_parameters() if not n.endswith("weight")]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}], lr=1e-2)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: min(1, (t + 1) / 10) * 0.5 * (1 + math.cos(math.pi * t / 200)))
model = frugal.DistributedModel(net, optimizer=opt)  # 2+ workers: local steps, compressed rounds
g = torch.Generator().manual_seed(world.rank); x = torch.randn(2048, 20, generator=g); y = (x[:, 0] * x[:, 1] > 0).long()
for step in range(200):
    i = step % 64 * 32
    loss = torch.nn.functional.cross_entropy(model(x[i:i + 32]), y[i:i + 32])
    loss.backward(); torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
    model.step(); opt.zero_grad(); sched.step()
    if world.rank == 0 and step % 50 == 49: print(f"step {step + 1}: loss {loss.item():.3f}", flush=True)
model.finish()  # the last round: every rank ends on the same parameters
