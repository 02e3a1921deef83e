#!/usr/bin/env python3
"""Command jobs on the live cluster service (ctest cluster_command_live).

Real processes on loopback: `frugal cluster serve`, one `frugal cluster
agent` with 2 slots (GPU ids 0 and 1: --gpus), and jobs that are a small
script of the test's own (a torch MLP through frugal.DistributedModel,
metrics and checkpoints in $FRUGAL_RUN_DIR). It checks that

  1. bad job files and bad API bodies are refused with a one-line reason
     (non-zero exit / HTTP 400), and the server keeps serving;
  2. job a (1-2 workers) starts at 2 workers, and the server learns its
     speed from the records the agent forwards;
  3. job b (1 worker) makes the policy shrink a. With --controller elastic
     (the server's default; Note [Elastic command jobs]) a's scripts run
     under `frugal run --elastic`, one member each: one of them leaves on
     SIGTERM and the other trains on, never restarted. With --controller
     restart a runs under `frugal run --workers 2`, is restarted at 1
     worker (a new generation) and its script resumes from its checkpoint
     with frugal.load (a later start at a step > 0, another world size);
  4. b and a finish by their exits, a having made all its steps, and the
     API shows their commands;
  5. b's planned rate (planned_samples_per_s) is the server's estimate of
     its speed before b has measured one;
  6. the agent's slots are GPUs (--gpus 0,1, ids only): every task runs
     with CUDA_VISIBLE_DEVICES naming GPUs of its own.

Usage: command_job_live_test.py --frugal build/frugal [--controller elastic|restart] [--keep DIR]
Stdlib only (the script the jobs run imports torch). Every wait has a deadline.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

from cluster_test_util import get_json, parse_args, stop_processes, wait_for, wait_for_server

SCRIPT = r'''
import os, sys, time
import torch
import frugal

steps, pause = int(sys.argv[1]), float(sys.argv[2])
run_dir = os.environ["FRUGAL_RUN_DIR"]
elastic = os.environ.get("FRUGAL_ELASTIC") == "1"  # set by frugal run --elastic
world = frugal.init()
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
opt = torch.optim.SGD(net.parameters(), lr=0.05)
# One mode at every size, so that the learned speeds are of one mode: the
# local mode is the elastic one, the step mode runs a world of one.
model = frugal.DistributedModel(net, optimizer=opt, sync="local" if elastic else "step", total_steps=steps,
                                run_dir=run_dir, log_every=5, quiet=True)
start = 0
try:
    frugal.load(model)
    start = model.iteration
except FileNotFoundError:
    pass  # a first start
if world.rank == 0:
    with open(os.path.join(run_dir, "starts.txt"), "a") as f:
        f.write(f"{world.world_size} {start}\n")
with open(os.path.join(run_dir, "devices.txt"), "a") as f:  # The agent's --gpus (Note [Device slots]).
    f.write(os.environ.get("CUDA_VISIBLE_DEVICES", "-") + "\n")
g = torch.Generator().manual_seed(world.rank)
x = torch.randn(256, 8, generator=g)
y = (x[:, 0] > 0).long()
loss_fn = torch.nn.CrossEntropyLoss()
# Driven by model.iteration: an elastic world that changes rolls back to
# its restore point, and a worker that leaves (model.left) stops.
while model.iteration < steps and not model.left:
    t = model.iteration
    i = (t * 16) % 256
    loss = loss_fn(model(x[i:i + 16]), y[i:i + 16])
    loss.backward()
    model.step(loss=loss)
    opt.zero_grad()
    if (t + 1) % 10 == 0:
        frugal.save(model, extra={"step": t + 1})
    time.sleep(pause)
model.finish()
'''


def run(args, timeout=60):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def main():
    frugal, root, keep, controller = parse_args("frugal-command-live-", controller="elastic")
    python_dir = os.path.join(os.path.dirname(frugal), "python")
    with open(os.path.join(root, "script.py"), "w") as f:
        f.write(SCRIPT)
    procs = []
    ok = False
    try:
        out = os.path.join(root, "server.out")
        server = subprocess.Popen([frugal, "cluster", "serve", "--listen", "127.0.0.1:0", "--state",
                                   os.path.join(root, "cluster.db"), "--round-s", "1", "--realloc-cost", "0",
                                   "--controller", controller],
                                  stdout=open(out, "a"), stderr=subprocess.STDOUT)
        procs.append(server)
        port = wait_for_server(server, out)
        addr = f"127.0.0.1:{port}"
        # Its slots are two GPUs (ids only: the script runs on the CPU).
        agent = subprocess.Popen([frugal, "cluster", "agent", "--server", addr, "--gpus", "0,1", "--name", "host-a",
                                  "--work-dir", os.path.join(root, "agent"), "--heartbeat-s", "0.5",
                                  "--stop-grace-s", "20"],
                                 stdout=open(os.path.join(root, "agent.out"), "a"), stderr=subprocess.STDOUT)
        procs.append(agent)

        def job_file(name, lo, hi, steps, pause, extra=""):
            path = os.path.join(root, name + ".toml")
            with open(path, "w") as f:
                f.write(f'name = "{name}"\ncommand = ["{sys.executable}", "script.py", "{steps}", "{pause}"]\n'
                        f'env = {{ PYTHONPATH = "{python_dir}" }}\nmin_workers = {lo}\nmax_workers = {hi}\n'
                        f"max_steps = {steps}\n{extra}")
            return path

        def submit(path):
            r = run([frugal, "cluster", "submit", path, "--server", addr])
            assert r.returncode == 0, r.stderr
            return int(re.search(r"submitted job (\d+)", r.stdout).group(1))

        def job(job_id):
            return next((j for j in get_json(port, "/api/jobs") or [] if j["id"] == job_id), None)

        # 1. Bad input.
        for text, why in [('command = []\nmin_workers = 1\nmax_workers = 1\n', "'command' is empty"),
                          ('command = ["python3"]\nmodel = "mlp"\nmin_workers = 1\nmax_workers = 1\n', "not both"),
                          ('command = "python3 x.py"\nmin_workers = 1\nmax_workers = 1\n', "array of strings"),
                          ('command = ["python3"]\nenv = { RANK = "0" }\nmin_workers = 1\nmax_workers = 1\n',
                           "set by the cluster"),
                          ('command = ["python3"]\nmin_workers = 1\nmax_workers = 2\nplanned_samples_per_s = [9]\n',
                           "one per worker count")]:
            path = os.path.join(root, "bad.toml")
            with open(path, "w") as f:
                f.write(text)
            r = run([frugal, "cluster", "submit", path, "--server", addr])
            assert r.returncode != 0 and why in r.stderr and len(r.stderr.strip().splitlines()) == 1, (text, r.stderr)
        for body, why in [({"command": [], "min_workers": 1, "max_workers": 1}, "'command' is empty"),
                          ({"command": ["x"], "config_toml": "model = 'mlp'", "min_workers": 1, "max_workers": 1},
                           "not both"),
                          ({"command": ["x"], "workdir": "rel", "min_workers": 1, "max_workers": 1}, "absolute"),
                          ({"command": "x", "min_workers": 1, "max_workers": 1}, "array of strings"),
                          ({"command": ["x"], "env": {"A": 1}, "min_workers": 1, "max_workers": 1}, "env.A")]:
            code, reply = post(port, "/api/jobs", body)
            assert code == 400 and why in reply["error"] and "\n" not in reply["error"], (body, code, reply)
        assert get_json(port, "/api/health") is not None, "the server keeps serving"
        assert (get_json(port, "/api/jobs") or []) == [], "nothing was submitted"

        # 2. Job a at 2 workers; the server learns its speed.
        a = submit(job_file("a", 1, 2, 240, 0.05))
        wait_for(lambda: (job(a) or {}).get("workers") == 2, "job a at 2 workers", 60)
        run_dir = os.path.join(root, "agent", "runs", f"job-{a}")
        wait_for(lambda: (job(a) or {}).get("step", 0) >= 20, "job a's steps through the agent", 120)
        full = get_json(port, f"/api/jobs/{a}")
        assert full["command"][1:] == ["script.py", "240", "0.05"], full["command"]
        assert full["env_names"] == ["PYTHONPATH"], full
        assert full["profile"].startswith("command-"), full["profile"]
        state = get_json(port, "/api/state")
        rates = next(j for j in state["jobs"] if j["id"] == a)["samples_per_s_by_workers"]
        assert "2" in rates and rates["2"] > 0, rates

        # 3. Job b shrinks a: in place (elastic), or a restart at 1 worker
        # that resumes from the checkpoint (restart).
        # b gives its planned rate (frugal.plan's Plan.job_prior): the
        # server's estimate until b has measured its own.
        b = submit(job_file("b", 1, 1, 20, 0.0, "planned_samples_per_s = [12345.5]\n"))
        planned = next(j for j in get_json(port, "/api/state")["jobs"] if j["id"] == b)
        assert planned["estimated_samples_per_s_by_workers"] == {"1": 12345.5}, planned
        assert planned["planned_samples_per_s"] == [12345.5], planned
        wait_for(lambda: (job(b) or {}).get("state") in ("running", "finished"), "job b to start", 60)
        wait_for(lambda: (job(a) or {}).get("generation", 0) >= 2, "job a's resize", 60)
        wait_for(lambda: (job(b) or {}).get("state") == "finished", "job b to finish", 120)
        wait_for(lambda: (job(a) or {}).get("state") == "finished", "job a to finish", 240)
        starts = [tuple(int(v) for v in line.split()) for line in open(os.path.join(run_dir, "starts.txt"))]
        assert starts[0] == (2, 0), starts
        events = get_json(port, "/api/events") or []
        shrink = [e for e in events if e["kind"] == "resize" and e["job_id"] == a and "2 -> 1" in e["message"]]
        assert shrink, events
        if controller == "elastic":
            assert starts == [(2, 0)], f"a's scripts were never restarted: {starts}"
            assert "[in place]" in shrink[0]["message"], shrink
            assert (job(a) or {})["restarts"] == 0, job(a)
            logs = os.path.join(root, "agent")
            leaver = [n for n in os.listdir(logs) if n.startswith(f"job-{a}-") and n.endswith(".log") and
                      "generation 2" in open(os.path.join(logs, n)).read()]
            assert leaver, "a generation without the leaver formed"
        else:
            assert any(w == 1 and s > 0 for w, s in starts[1:]), f"a resumed at 1 worker from a checkpoint: {starts}"
        assert (job(a) or {})["step"] >= 240, job(a)
        # Each task had GPUs of its own: a's two elastic members one each, its
        # restart task both (frugal run's workers index them by LOCAL_RANK),
        # b the one a gave up.
        devices = [line.strip() for line in open(os.path.join(run_dir, "devices.txt"))]
        b_devices = [line.strip() for line in open(os.path.join(root, "agent", "runs", f"job-{b}", "devices.txt"))]
        if controller == "elastic":
            assert sorted(devices[:2]) == ["0", "1"], devices
        else:
            assert devices[:2] == ["0,1", "0,1"], devices
        assert b_devices[0] in ("0", "1"), b_devices
        # Samples trained, from the records' samples_per_s x iter_s (16 per rank and step).
        assert (job(a) or {})["progress_samples"] >= 240 * 16, job(a)
        ok = True
        print(f"command jobs ({controller} controller): ok (a's starts as (workers, step): {starts}; rates {rates})")
    finally:
        stop_processes(procs)
        if not ok:
            for name in ("server.out", "agent.out"):
                path = os.path.join(root, name)
                if os.path.exists(path):
                    print(f"==== {name}\n" + open(path).read()[-6000:])
            logs = os.path.join(root, "agent")
            for name in sorted(os.listdir(logs)) if os.path.isdir(logs) else []:
                if name.endswith(".log"):
                    print(f"==== {name}\n" + open(os.path.join(logs, name)).read()[-3000:])
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
