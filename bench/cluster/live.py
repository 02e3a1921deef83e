#!/usr/bin/env python3
"""A small live workload: the same jobs under several policies, each on a
fresh `frugal cluster serve` and its agents. Either one agent with --slots
CPU slots on loopback, or (--testbed N, root) N hosts of the namespace
testbed (testbed/testbed.sh), each an agent with --slots slots, its CPU
capped at --host-cpus cores (a cgroup), its link shaped at --rate Mbit/s,
and the server on a host of its own; jobs may span the hosts, with their
CurveZMQ job keys (docs/guide/cluster.md, "Jobs spanning hosts").

Reports per-job JCT (finish - submit, from the server's own records), the
average, the makespan, the number of resizes, and for every resize of a
running job how long it took: from the server's resize event to the first
step record the job reports at its new size (server receive times), and the
step regression (the newest step reported before the event minus the first
after it, when positive; work redone between two log records is not seen). Everything is real: the jobs are elastic Frugal
jobs (--controllers elastic: resized in place) or `frugal train` runs that
the agent restarts from checkpoints (--controllers restart).

Each run is then replayed in the simulator (replay.py): the jobs' submit
times and the throughput measured at each worker count become a workload and
a `--table` CSV for `frugal cluster simulate` with the same policy, and the
simulated average JCT is printed beside the live one.

Usage: bench/cluster/live.py --frugal build/frugal [--policies afs-p,fifo]
       [--controllers elastic,restart] [--slots 4] [--jobs 3] [--steps 60]
       [--gap-s 20] [--out results.json]
  A mix of jobs (docs/design/scheduler.md, "Live workload on two slots"):
       [--steps-list 600,1800,300] [--models cnn,mlp] [--global-batch 256]
       [--min-workers 1] [--repeats 2] [--tiresias-threshold S]
  Throughput priors (docs/guide/cluster.md, "Throughput estimates"):
       [--profile-per-job] [--prior-hardware cpu-local]
  Hosts (docs/design/scheduler.md, "Live workload on four namespace hosts"):
       [--testbed 4] [--host-cpus 0.45] [--rate 0]
  Own scripts: [--script-jobs] makes every second job a command job
       (bench/chaos/script.py, the mlp on Fashion-MNIST; needs --global-batch)
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import replay  # noqa: E402


def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return json.loads(r.read())


def resize_times(port, jobs, events):
    """Per resize of a running job: seconds until the job reports a step at
    its new size, and the steps redone."""
    out = []
    for e in events:
        m = re.match(r"(\d+) -> (\d+) workers", e["message"])
        if e["kind"] != "resize" or not m:
            continue
        samples = [s for s in get(port, f"/api/jobs/{e['job_id']}")["samples"] if s["samples_per_s"] > 0]
        before = [s["step"] for s in samples if s["time"] <= e["time"]]
        after = [s for s in samples if s["time"] > e["time"] and s["workers"] == int(m.group(2))]
        out.append({"job": e["job_id"], "from": int(m.group(1)), "to": int(m.group(2)),
                    "how": "in place" if "[in place]" in e["message"] else "restart",
                    "seconds": after[0]["time"] - e["time"] if after else None,
                    "step_regression": max(0, max(before) - after[0]["step"]) if before and after else None})
    return out


TESTBED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "testbed", "testbed.sh")
INSIDE = "FRUGAL_LIVE_INSIDE_TESTBED"


def host_address(i):
    return f"10.77.1.{i + 1}"  # testbed.sh's flat layout: host i.


def cpu_cgroup(i):
    """The cgroup (v1 cpu controller) capping testbed host i's CPU."""
    return f"/sys/fs/cgroup/cpu/fgtb-h{i}"


def start_agents(frugal, root, port, slots, testbed, token):
    """One agent on loopback, or one per testbed host 1..testbed (host 0 runs
    the server), each inside its host's namespace and CPU cgroup."""
    if not testbed:
        return [subprocess.Popen([frugal, "cluster", "agent", "--server", f"127.0.0.1:{port}", "--slots", str(slots),
                                  "--name", "host", "--work-dir", os.path.join(root, "agent"), "--heartbeat-s", "0.5",
                                  "--stop-grace-s", "60"],
                                 stdout=open(os.path.join(root, "agent.out"), "w"), stderr=subprocess.STDOUT)]
    agents = []
    for i in range(1, testbed + 1):
        argv = ["ip", "netns", "exec", f"fgtb-h{i}", frugal, "cluster", "agent", "--server",
                f"{host_address(0)}:{port}", "--token-file", token, "--slots", str(slots), "--name", f"h{i}",
                "--host", host_address(i), "--work-dir", os.path.join(root, "work"), "--heartbeat-s", "0.5",
                "--stop-grace-s", "60"]
        if os.path.isdir(cpu_cgroup(i)):
            argv = ["sh", "-c", f'echo $$ > {cpu_cgroup(i)}/tasks && exec "$@"', "sh"] + argv
        agents.append(subprocess.Popen(argv, stdout=open(os.path.join(root, f"agent{i}.out"), "w"),
                                       stderr=subprocess.STDOUT))
    return agents


def start_cluster(frugal, policy, controller, root, slots, checkpoint_every=10, tiresias_threshold=16 * 3600.0,
                  prior_hardware=None, testbed=0):
    """A fresh server (rounds every 2 s) and its agents (start_agents);
    returns (server, [agents], port). With a testbed the server listens on
    all of host 0's addresses with a token (<root>/token) and lets a job
    span every host."""
    out = os.path.join(root, "server.out")
    extra = ["--prior-hardware", prior_hardware] if prior_hardware else []
    listen = "127.0.0.1:0"
    token = os.path.join(root, "token")
    if testbed:
        with open(os.open(token, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(os.urandom(18).hex() + "\n")
        listen = "0.0.0.0:0"
        extra += ["--token-file", token, "--max-nodes-per-job", str(testbed)]
    server = subprocess.Popen([frugal, "cluster", "serve", "--listen", listen, "--state",
                               os.path.join(root, "cluster.db"), "--policy", policy, "--round-s", "2",
                               "--checkpoint-every", str(checkpoint_every), "--controller", controller,
                               "--tiresias-threshold", str(tiresias_threshold)] + extra,
                              stdout=open(out, "w"), stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    port = None
    while port is None and time.time() < deadline and server.poll() is None:
        m = re.search(r"serving on http://[^:/\s]+:(\d+)", open(out).read())
        port = int(m.group(1)) if m else None
        time.sleep(0.1)
    if port is None:
        stop_all(server)
        raise RuntimeError("server did not start: " + open(out).read())
    agents = start_agents(frugal, root, port, slots, testbed, token)
    deadline = time.time() + 120
    while len([n for n in get(port, "/api/nodes") if n["up"]]) < max(1, testbed):
        if time.time() > deadline:
            stop_all(*agents, server)
            raise RuntimeError("the agents did not register")
        time.sleep(0.2)
    return server, agents, port


def run_on_testbed(args):
    """Brings up the testbed (args.testbed agent hosts + the server's host),
    caps each agent host's CPU, runs this script again inside host 0, and
    takes everything down. Returns its exit code."""
    if os.geteuid() != 0:
        sys.exit("live.py --testbed needs root (network namespaces, cgroups)")
    hosts = args.testbed + 1
    subprocess.run(["bash", TESTBED, "up", "flat", "--hosts", str(hosts), "--rate", str(args.rate)], check=True)
    made = []
    try:
        for i in range(1, hosts):
            if not os.path.isdir("/sys/fs/cgroup/cpu"):
                print("no cgroup v1 cpu controller: the hosts share the machine's cores uncapped", flush=True)
                break
            os.makedirs(cpu_cgroup(i), exist_ok=True)
            made.append(cpu_cgroup(i))
            with open(os.path.join(cpu_cgroup(i), "cpu.cfs_period_us"), "w") as f:
                f.write("100000")
            with open(os.path.join(cpu_cgroup(i), "cpu.cfs_quota_us"), "w") as f:
                f.write(str(int(args.host_cpus * 100000)))
        return subprocess.run(["ip", "netns", "exec", "fgtb-h0", sys.executable] + sys.argv,
                              env=dict(os.environ, **{INSIDE: "1"})).returncode
    finally:
        subprocess.run(["bash", TESTBED, "down"], capture_output=True)
        for cg in made:
            try:
                os.rmdir(cg)
            except OSError as e:
                print(f"could not remove {cg}: {e}")


def stop_all(*procs):
    for p in procs:
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        if p is not None:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "chaos", "script.py")


def is_script_job(k, args):
    """--script-jobs: every second job (odd k) is an own script."""
    return args.script_jobs and k % 2 == 1


def job_model(k, args):
    """The job's group in the replay: its zoo model, or the script's."""
    return "script-mlp" if is_script_job(k, args) else args.models[k % len(args.models)]


def total_slots(args):
    return args.slots * max(1, args.testbed)


def job_header(k, args):
    """What every job file of the workload starts with: its name, profile
    and worker range. --profile-per-job: no job shares what another
    measured (the server's behaviour before profiles); otherwise the server
    derives the profile."""
    profile = f'profile = "job{k}"\n' if args.profile_per_job else ""
    return f'name = "job{k}"\n{profile}min_workers = {args.min_workers}\nmax_workers = {total_slots(args)}\n'


def script_job_toml(k, steps, args):
    """A command job (docs/guide/cluster.md, "Own scripts as jobs"):
    bench/chaos/script.py, the zoo's mlp on Fashion-MNIST through
    frugal.DistributedModel with a torch SGD and LambdaLR, the global batch
    split by the current world, its own checkpoints in FRUGAL_RUN_DIR."""
    command = ["/usr/bin/python3", os.path.abspath(SCRIPT), "--steps", str(steps), "--global-batch",
               str(args.global_batch), "--log-every", str(args.log_every), "--checkpoint-every",
               str(args.checkpoint_every)]
    return (job_header(k, args) + f"command = {json.dumps(command)}\n"
            f'env = {{ PYTHONPATH = "{os.path.abspath(args.python_path)}" }}\nmax_steps = {steps}\n')


def job_toml(k, steps, args):
    """One job of the workload: a `frugal train` configuration on --dataset
    plus its worker range. With --global-batch the step's samples are
    split over the workers, so a job finishes sooner on more of them (the
    CoDDL job model); without it every worker takes --batch-size."""
    if is_script_job(k, args):
        return script_job_toml(k, steps, args)
    batch = f"global_batch = {args.global_batch}\n" if args.global_batch else f"batch_size = {args.batch_size}\n"
    data = (f'dataset = "{args.dataset}"\n' if args.dataset != "synthetic" else
            'dataset = "synthetic"\nsynthetic_train_size = 8192\nsynthetic_test_size = 256\n')
    return (job_header(k, args) + f'model = "{job_model(k, args)}"\n{data}max_steps = {steps}\n'
            f"log_every = {args.log_every}\n{batch}timeout_s = 60\nelastic_every = 5\nepochs = 100000\n")


def run_policy(frugal, policy, controller, args, root):
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    load_start = os.getloadavg()[0]
    server, agents, port = start_cluster(frugal, policy, controller, root, args.slots, args.checkpoint_every,
                                         args.tiresias_threshold, args.prior_hardware, args.testbed)
    token = ["--token-file", os.path.join(root, "token")] if args.testbed else []
    try:
        t0 = time.time()
        for k, steps in enumerate(args.steps_list):
            while time.time() < t0 + k * args.gap_s:
                time.sleep(0.2)
            path = os.path.join(root, f"job{k}.toml")
            with open(path, "w") as f:
                f.write(job_toml(k, steps, args))
            subprocess.run([frugal, "cluster", "submit", path, "--server", f"127.0.0.1:{port}"] + token, check=True,
                           capture_output=True, timeout=300)
        deadline = time.time() + args.timeout_s
        while time.time() < deadline:
            jobs = get(port, "/api/jobs")
            if len(jobs) == len(args.steps_list) and all(j["state"] in ("finished", "failed") for j in jobs):
                break
            time.sleep(1)
        jobs = get(port, "/api/jobs")
        events = get(port, "/api/events?limit=1000")
        resize_cost = get(port, "/api/state").get("resize_cost")
        resizes = resize_times(port, jobs, events)
        details = {j["id"]: [s for s in get(port, f"/api/jobs/{j['id']}")["samples"] if s["samples_per_s"] > 0]
                   for j in jobs}
    finally:
        stop_all(*agents, server)
    rows = [{"job": j["name"], "state": j["state"], "jct_s": j["finish_time"] - j["submit_time"],
             "restarts": j["restarts"], "generations": j["generation"]} for j in jobs]
    changes = sum(1 for e in events if e["kind"] in ("resize", "preempt"))
    done = [r["jct_s"] for r in rows if r["state"] == "finished"]
    group_of = {j["id"]: job_model(int(j["name"][3:]), args) for j in jobs}
    workload = {k: getattr(args, k) for k in ("slots", "steps_list", "gap_s", "models", "batch_size", "global_batch",
                                              "min_workers", "log_every", "checkpoint_every", "tiresias_threshold",
                                              "profile_per_job", "prior_hardware", "testbed", "host_cpus",
                                              "rate", "dataset", "script_jobs")}
    return {"policy": policy, "controller": controller, "started_utc": started, "workload": workload,
            "server_jobs": [{k: j[k] for k in ("id", "name", "max_steps", "submit_time")} for j in jobs],
            "loadavg_1min_start_end": [load_start, os.getloadavg()[0]], "jobs": rows, "resizes": resizes,
            "avg_jct_s": sum(done) / len(done) if done else None,
            "all_finished": len(done) == len(rows), "resizes_and_preemptions": changes,
            "server_resize_cost": resize_cost,
            "resize_cost_events": [e["message"] for e in events if e["kind"] == "resize-cost"],
            "makespan_s": max(j["finish_time"] for j in jobs) - min(j["submit_time"] for j in jobs),
            "group_of": {str(k): g for k, g in group_of.items()},
            "samples": {str(k): [{f: s[f] for f in ("time", "step", "workers", "samples_per_s")} for s in v]
                        for k, v in details.items()},
            "events": [{f: e[f] for f in ("time", "kind", "job_id", "message")} for e in events],
            "replay": replay.replay(frugal, root, policy, args, jobs, details, events, group_of)
            if len(done) == len(rows) else None}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frugal", required=True)
    ap.add_argument("--policies", default="afs-p,fifo")
    ap.add_argument("--controllers", default="elastic")
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--steps-list", help="comma-separated max_steps, one job each (overrides --jobs/--steps)")
    ap.add_argument("--gap-s", type=float, default=20)
    ap.add_argument("--models", default="mlp", help="comma-separated, cycled over the jobs")
    ap.add_argument("--dataset", default="synthetic", help="synthetic (8,192 samples) or fashion-mnist")
    ap.add_argument("--batch-size", type=int, default=32, help="samples per step per worker")
    ap.add_argument("--global-batch", type=int, default=0, help="samples per step over all workers (0: --batch-size)")
    ap.add_argument("--min-workers", type=int, default=2)
    ap.add_argument("--log-every", type=int, default=5)
    ap.add_argument("--checkpoint-every", type=int, default=10)
    ap.add_argument("--tiresias-threshold", type=float, default=16 * 3600.0,
                    help="slot-seconds before tiresias demotes a job (server and simulator)")
    ap.add_argument("--repeats", type=int, default=1, help="run the whole policy/controller list this many times")
    ap.add_argument("--timeout-s", type=float, default=1800)
    ap.add_argument("--profile-per-job", action="store_true",
                    help="give every job its own profile: no job starts from the rates of earlier jobs of its model")
    ap.add_argument("--prior-hardware", help="frugal cluster serve --prior-hardware (the planner's prior)")
    ap.add_argument("--testbed", type=int, default=0,
                    help="run the agents on this many namespace hosts (root; 0: one agent on loopback)")
    ap.add_argument("--host-cpus", type=float, default=0.45, help="--testbed: CPU cores each host may use")
    ap.add_argument("--rate", type=int, default=0, help="--testbed: each host link's rate, Mbit/s (0: no limit)")
    ap.add_argument("--script-jobs", action="store_true",
                    help="every second job is an own script as a command job (bench/chaos/script.py: the mlp on "
                         "Fashion-MNIST); needs --global-batch")
    ap.add_argument("--python-path", default="build/python", help="--script-jobs: where the frugal package is")
    ap.add_argument("--out")
    ap.add_argument("--keep", action="store_true", help="keep the run directories (printed)")
    args = ap.parse_args()
    if args.script_jobs and not args.global_batch:
        ap.error("--script-jobs needs --global-batch (the script splits a global batch by the current world)")
    if args.testbed and not os.environ.get(INSIDE):
        return run_on_testbed(args)
    args.models = args.models.split(",")
    args.steps_list = [int(x) for x in args.steps_list.split(",")] if args.steps_list else [args.steps] * args.jobs
    results = []
    runs = [(p, c) for c in args.controllers.split(",") for p in args.policies.split(",")] * args.repeats
    for policy, controller in runs:
        root = tempfile.mkdtemp(prefix=f"frugal-live-{policy}-{controller}-")
        print(f"{policy} ({controller}): {root}", flush=True)
        r = run_policy(os.path.abspath(args.frugal), policy, controller, args, root)
        results.append(r)
        print_run(r)
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        if args.out:  # After every run: a set takes long, and a later failure keeps the earlier runs.
            with open(args.out, "w") as f:
                json.dump(results, f, indent=2)
    summarize(os.path.abspath(args.frugal), results, args)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
    return 0 if all(r["all_finished"] for r in results) else 1


def print_run(r):
    policy, controller = r["policy"], r["controller"]
    for z in r["resizes"]:
        print(f"  resize of job {z['job']} {z['from']} -> {z['to']} ({z['how']}): {z['seconds']} s to the first "
              f"step at the new size, step regression {z['step_regression']}")
    print(f"{policy} ({controller}): avg JCT {r['avg_jct_s']:.1f} s, makespan {r['makespan_s']:.1f} s, "
          f"{r['resizes_and_preemptions']} resizes/preemptions, all finished: {r['all_finished']}, "
          f"load average {r['loadavg_1min_start_end'][0]:.1f} -> {r['loadavg_1min_start_end'][1]:.1f}")
    if r.get("server_resize_cost"):
        print(f"  server's resize cost: {r['server_resize_cost']}; {r['resize_cost_events']}")
    rp = r["replay"]
    if rp:
        rates = "; ".join(f"{g} " + ", ".join(f"{w}: {v:.3f}" for w, v in rs.items())
                          for g, rs in rp["steps_per_s"].items())
        sim = rp["sim"]["avg_jct_s"]
        print(f"  measured steps/s by workers {{{rates}}}, start overhead {rp['realloc_cost_s']:.1f} s; "
              f"simulated avg JCT {sim:.1f} s (live {r['avg_jct_s']:.1f} s, "
              f"{100 * (sim - r['avg_jct_s']) / r['avg_jct_s']:+.1f}%); "
              f"without the overhead {rp['sim_no_realloc']['avg_jct_s']:.1f} s; on this table: "
              + ", ".join(f"{p} {v:.1f} s" for p, v in rp["sim_by_policy"].items()))
    for j in r["jobs"]:
        print(f"  {j['job']}: {j['state']}, JCT {j['jct_s']:.1f} s, generations {j['generations']}, "
              f"restarts {j['restarts']}", flush=True)


def summarize(frugal, results, args):
    """Per (policy, controller): the mean live average JCT over the repeats;
    and every policy simulated on one table pooled over all the runs."""
    by = {}
    for r in results:
        if r["avg_jct_s"] is not None and r["all_finished"]:
            by.setdefault((r["policy"], r["controller"]), []).append(r["avg_jct_s"])
    for (policy, controller), v in by.items():
        print(f"{policy} ({controller}): live avg JCT over {len(v)} run(s): {sum(v) / len(v):.1f} s "
              f"({', '.join(f'{x:.1f}' for x in v)})")
    if not results:
        return
    first = results[0]
    group_of = {int(k): g for k, g in first["group_of"].items()}
    root = tempfile.mkdtemp(prefix="frugal-live-common-")
    common = replay.common_table(frugal, root, results, first["server_jobs"], group_of, args)
    shutil.rmtree(root, ignore_errors=True)
    for r in results:
        r["common_table"] = common
    if common:
        rates = "; ".join(f"{g} " + ", ".join(f"{w}: {v:.3f}" for w, v in rs.items())
                          for g, rs in common["steps_per_s"].items())
        print(f"one table pooled over all runs (steps/s {{{rates}}}, start overhead "
              f"{common['realloc_cost_s']:.1f} s), simulated: "
              + ", ".join(f"{p} {v:.1f} s" for p, v in common["avg_jct_s"].items()))


if __name__ == "__main__":
    sys.exit(main())
