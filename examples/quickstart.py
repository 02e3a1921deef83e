import torch, frugal
net = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
model = frugal.DistributedModel(net, optimizer="sgd", lr=0.1, momentum=0.9, density=0.1)
x = torch.randn(512, 20); y = (x[:, 0] > 0).long()  # each worker: its own data
for step in range(100):
    i = step % 16 * 32
    loss = torch.nn.functional.cross_entropy(model(x[i:i + 32]), y[i:i + 32])
    loss.backward(); model.step()
model.finish()
print(f"rank {model.world.rank} of {model.world.world_size}: loss {loss.item():.3f}")
