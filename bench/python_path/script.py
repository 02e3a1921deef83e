"""An own script that trains the zoo's mlp (784-2048-2048-10, 5.8 M
parameters) through frugal.DistributedModel with `frugal train`'s settings,
for bench/python_path/run.py. The data are random tensors of Fashion-MNIST's
shape: an iteration's cost does not depend on their values.

    PYTHONPATH=build/python build/frugal run --workers 2 -- \\
        /usr/bin/python3 bench/python_path/mlp_script.py --steps 200 --run-dir build/bench/python_path/py
"""
import argparse

import torch

import frugal


def mlp():
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 2048), torch.nn.ReLU(),
                               torch.nn.Linear(2048, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--sync", default="local", choices=["local", "step"])
    p.add_argument("--optimizer", default="engine", choices=["engine", "torch"],
                   help="engine: the optimizer by name, as frugal train runs it; torch: a torch.optim.SGD")
    p.add_argument("--run-dir", required=True)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    world = frugal.init()
    torch.manual_seed(0)
    net = mlp()
    # frugal train's defaults: SGD lr 0.05, momentum 0.9, warm-up 100 then cosine.
    hyper = dict(lr=0.05, momentum=0.9)
    if args.optimizer == "torch":
        opt = torch.optim.SGD(net.parameters(), **hyper)
        model = frugal.DistributedModel(net, optimizer=opt, sync=args.sync, run_dir=args.run_dir,
                                        log_every=args.log_every, total_steps=args.steps)
    else:
        opt = None
        model = frugal.DistributedModel(net, optimizer="sgd", sync=args.sync, run_dir=args.run_dir,
                                        log_every=args.log_every, total_steps=args.steps, **hyper)
    g = torch.Generator().manual_seed(world.rank)
    x = torch.randn(16, args.batch_size, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (16, args.batch_size), generator=g)
    loss_fn = torch.nn.CrossEntropyLoss()
    for step in range(args.steps):
        loss = loss_fn(model(x[step % 16]), y[step % 16])
        loss.backward()
        model.step(loss=loss)
        if opt is not None:
            opt.zero_grad(set_to_none=True)
    model.finish()


if __name__ == "__main__":
    main()
