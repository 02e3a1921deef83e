"""An own script that trains a zoo model through frugal.DistributedModel with
`frugal train`'s settings, for bench/python_path/run.py:

- mlp: 784-2048-2048-10, 5.8 M parameters, on random tensors of
  Fashion-MNIST's shape;
- gpt-tiny: the zoo's byte-level decoder (4 pre-norm blocks of width 256,
  4 heads, MLP 1024, context 128; 3.3 M parameters), written here in PyTorch
  with the same operations as src/models/gpt_tiny.cc, on random bytes.

An iteration's cost does not depend on the data's values.

    PYTHONPATH=build/python build/frugal run --workers 2 -- \\
        /usr/bin/python3 bench/python_path/script.py --model mlp --steps 200 --run-dir build/bench/python_path/py
"""
import argparse
import math

import torch

import frugal

CONTEXT, WIDTH, LAYERS, HEADS, HIDDEN, VOCAB = 128, 256, 4, 4, 1024, 256


def mlp():
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 2048), torch.nn.ReLU(),
                               torch.nn.Linear(2048, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10))


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = torch.nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (y.view(b, t, HEADS, d // HEADS).transpose(1, 2) for y in self.qkv(x).chunk(3, -1))
        att = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d // HEADS)
        future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        att = torch.softmax(att.masked_fill(future, float("-inf")), -1)
        return self.proj(torch.matmul(att, v).transpose(1, 2).contiguous().view(b, t, d))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.attn = torch.nn.LayerNorm(WIDTH), Attention()
        self.ln2, self.fc1, self.fc2 = torch.nn.LayerNorm(WIDTH), torch.nn.Linear(WIDTH, HIDDEN), torch.nn.Linear(
            HIDDEN, WIDTH)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))


class GptTiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_emb, self.pos_emb = torch.nn.Embedding(VOCAB, WIDTH), torch.nn.Embedding(CONTEXT, WIDTH)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f, self.head = torch.nn.LayerNorm(WIDTH), torch.nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, tokens):  # [N, T] -> logits [N, vocab, T]
        x = self.tok_emb(tokens) + self.pos_emb(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x)).transpose(1, 2)


def batches(model, batch_size, rank):
    """16 random batches of the model's input and target shapes."""
    g = torch.Generator().manual_seed(rank)
    if model == "mlp":
        return torch.randn(16, batch_size, 1, 28, 28, generator=g), torch.randint(0, 10, (16, batch_size), generator=g)
    text = torch.randint(0, VOCAB, (16, batch_size, CONTEXT + 1), generator=g)
    return text[:, :, :-1], text[:, :, 1:]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="mlp", choices=["mlp", "gpt-tiny"])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--sync", default="local", choices=["local", "step"])
    p.add_argument("--optimizer", default="engine", choices=["engine", "torch"],
                   help="engine: the optimizer by name, as frugal train runs it; torch: a torch.optim.SGD")
    p.add_argument("--run-dir", required=True)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--density", type=float, help="sync=step: the density (default: the model's)")
    p.add_argument("--local-steps", type=int, help="sync=local: steps per round (default: the model's)")
    args = p.parse_args(argv)
    world = frugal.init()
    torch.set_num_threads(args.threads)  # after init, which applies frugal run's per-host share
    torch.manual_seed(0)
    net = mlp() if args.model == "mlp" else GptTiny()
    # frugal train's defaults: SGD lr 0.05, momentum 0.9, warm-up 100 then cosine.
    hyper = dict(lr=0.05, momentum=0.9)
    common = dict(sync=args.sync, run_dir=args.run_dir, log_every=args.log_every, total_steps=args.steps)
    if args.density is not None:
        common["density"] = args.density
    if args.local_steps is not None:
        common["local_steps"] = args.local_steps
    if args.optimizer == "torch":
        opt = torch.optim.SGD(net.parameters(), **hyper)
        model = frugal.DistributedModel(net, optimizer=opt, **common)
    else:
        opt = None
        model = frugal.DistributedModel(net, optimizer="sgd", **common, **hyper)
    x, y = batches(args.model, args.batch_size, world.rank)
    loss_fn = torch.nn.CrossEntropyLoss()
    while model.iteration < args.steps and not model.left:  # also an elastic job (frugal run --elastic)
        step = model.iteration
        loss = loss_fn(model(x[step % 16]), y[step % 16])
        loss.backward()
        model.step(loss=loss)
        if opt is not None:
            opt.zero_grad(set_to_none=True)
    model.finish()


if __name__ == "__main__":
    main()
