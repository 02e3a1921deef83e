#!/usr/bin/env python3
"""Hostile peers against a CURVE job on the shaped testbed
(docs/design/security.md "Hostile peers on the testbed"). Needs root; exits 77
(skip) when network namespaces are unavailable.

`testbed.sh up flat --hosts W+2 --rate R`: hosts 0..W-1 run `frugal
coordinator` (host 0) and W `frugal worker`s with one CURVE key each; host W
is a stranger with a key of its own that is not on the allow-list, host W+1
a stranger with no key. While the job forms and trains:

  1. both strangers run `frugal worker` against the coordinator (before the
     real workers start, so a stranger that got in would take a rank);
  2. the no-key host sends 100 KB of random bytes, an HTTP request and
     ZMTP 1.0-shaped bytes over raw TCP, and forged Frugal messages over a
     plaintext ZeroMQ DEALER, to the coordinator's and every worker's port;
  3. the wrong-key host sends the forged messages as a CURVE client with its
     own key and the target's real public key (public keys are not secret);
  4. an AF_PACKET capture inside rank 1's namespace records the real TCP
     streams other ranks open to rank 1; both strangers then replay the
     longest one (greeting, CURVE handshake, encrypted messages) byte for
     byte to rank 1's port.

Every attempt and what came back is a line of OUT/attempts.jsonl; OUT/summary.txt
lists them with the job-side log lines. Exit 0 when every real worker exits
0 (each --checksum-every comparison and the final one found equal replica
checksums), no stranger completed a handshake, neither stranger's join
succeeded, and each wrong-key attempt was logged by the job.

    sudo nice -n 19 bench/security/hostile_peer.py --build-dir build --out-dir /tmp/hostile
"""
import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # bench/, for harness
sys.path.insert(0, HERE)
from curve_cost import make_keys  # noqa: E402
from harness import ProcessGroup, Testbed, hold_testbed_lock  # noqa: E402
from zmq_client import read_key_file  # noqa: E402

SKIP = 77
PY = "/usr/bin/python3"


def listening_ports(tb, host, pid):
    """TCP ports process PID listens on inside HOST's namespace."""
    out = subprocess.run(tb.prefix(host) + ["ss", "-ltnpH"], capture_output=True, text=True).stdout
    return sorted({int(m.group(1)) for line in out.splitlines() if "pid=%d," % pid in line
                   for m in [re.search(r":(\d+)\s", line)] if m})


class Hostile:
    def __init__(self, args, tb, out):
        self.args, self.tb, self.out = args, tb, out
        self.frugal = os.path.abspath(os.path.join(args.build_dir, "frugal"))
        self.w = args.workers
        self.wrong, self.nokey = self.w, self.w + 1
        self.addr = [h.address for h in tb.hosts]
        self.coordinator = "tcp://%s:%d" % (self.addr[0], args.port)
        self.attempts = []
        self.lock = threading.Lock()
        self.ran_through = False
        self.keys, self.authorized = make_keys(self.frugal, self.w, out)
        self.stranger_key = os.path.join(out, "stranger.key")
        if not os.path.exists(self.stranger_key):
            subprocess.run([self.frugal, "keys", "generate", "--out", self.stranger_key], check=True,
                           stdout=subprocess.DEVNULL)
        # The stranger lists the real keys (public) and its own.
        self.stranger_authorized = os.path.join(out, "stranger_authorized_keys")
        with open(self.stranger_authorized, "w") as f:
            f.write(open(self.authorized).read() + open(self.stranger_key + ".pub").read())
        os.chmod(self.stranger_authorized, 0o600)

    def worker_args(self, rank, timeout_s):
        return ["--model", "mlp", "--dataset", "synthetic", "--synthetic-train-size", "4096", "--batch-size", "32",
                "--max-steps", str(self.args.steps), "--log-every", "5", "--eval-every", "0",
                "--checksum-every", "10", "--threads", "1", "--timeout-s", str(timeout_s), "--quiet",
                "--runs-dir", os.path.join(self.out, "runs"), "--run-name", "rank%d" % rank]

    def worker(self, host, rank, security, timeout_s=60):
        return self.tb.prefix(host) + [self.frugal, "worker", "--coordinator", self.coordinator,
                                       "--listen", "tcp://%s:*" % self.addr[host]] + \
            (["--rank", str(rank)] if rank >= 0 else []) + security + self.worker_args(rank, timeout_s)

    def attack(self, host, argv, timeout=30):
        """Runs attacks.py ARGV on HOST; records its JSON lines."""
        cmd = self.tb.prefix(host) + [PY, os.path.join(HERE, "attacks.py")] + argv
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        recs = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
        if not recs:
            recs = [{"attack": argv[0], "target": argv[1], "error": (r.stderr or "no output").strip()[-300:]}]
        for rec in recs:
            rec["from"] = "wrong-key host %s" % self.addr[host] if host == self.wrong else \
                "no-key host %s" % self.addr[host]
            self.log(rec)

    def log(self, rec):
        with self.lock:
            self._log(rec)

    def _log(self, rec):
        rec["t"] = round(time.time() - self.t0, 2)
        self.attempts.append(rec)
        with open(os.path.join(self.out, "attempts.jsonl"), "a") as f:
            f.write(json.dumps(rec) + "\n")
        print(json.dumps(rec), flush=True)

    def run(self):
        self.t0 = time.time()
        cap_dir = os.path.join(self.out, "capture")
        with ProcessGroup() as job, ProcessGroup() as strangers:
            cap = strangers.start(self.tb.prefix(1) + [PY, os.path.join(HERE, "capture.py"), "--iface",
                                                       self.tb.ifname(1), "--dst", self.addr[1], "--out", cap_dir,
                                                       "--seconds", str(self.args.budget_s)],
                                  os.path.join(self.out, "capture.log"), daemon=True)
            self.wait_for(lambda: os.path.exists(os.path.join(cap_dir, "ready")), 20, "capture to start")
            security = ["--key", self.keys[0], "--authorized-keys", self.authorized]
            coord = job.start(self.tb.prefix(0) + [self.frugal, "coordinator", "--listen", self.coordinator,
                                                   "--world", str(self.w)] + security,
                              os.path.join(self.out, "coordinator.log"), daemon=True)
            self.wait_for(lambda: self.args.port in listening_ports(self.tb, 0, coord.pid), 60,
                          "the coordinator to listen")
            joins = {
                "join:wrong_key": strangers.start(
                    self.worker(self.wrong, -1, ["--key", self.stranger_key, "--authorized-keys",
                                                 self.stranger_authorized], 15),
                    os.path.join(self.out, "stranger_wrong_key.log")),
                "join:no_key": strangers.start(self.worker(self.nokey, -1, ["--insecure"], 15),
                                               os.path.join(self.out, "stranger_no_key.log"))}
            # While the coordinator waits for registrations: a stranger that got
            # in now would take a rank.
            self.bombard([("coordinator", self.coordinator, 0)])
            workers = [job.start(self.worker(r, r, ["--key", self.keys[r], "--authorized-keys", self.authorized]),
                                 os.path.join(self.out, "rank%d.log" % r)) for r in range(self.w)]
            ports = {}

            def all_listening():
                for r, w in enumerate(workers):
                    got = [x for x in listening_ports(self.tb, r, w.pid) if x != self.args.port]
                    if got:
                        ports[r] = got[0]
                return len(ports) == self.w

            self.wait_for(all_listening, 60, "workers to listen")
            targets = [("rank%d" % r, "tcp://%s:%d" % (self.addr[r], ports[r]), r) for r in range(self.w)]
            self.log({"event": "targets", "targets": {n: e for n, e, _ in targets}})
            time.sleep(1)  # let the ranks connect to each other (the capture needs one such stream)
            self.bombard(targets)
            self.replay(cap, cap_dir, targets[1][1])
            running = [p.poll() is None for p in workers]
            self.log({"event": "after the last attempt", "workers_running": running})
            done = job.wait_all(time.time() + self.args.budget_s)
            self.finish_joins(joins)
            codes = [p.poll() for p in workers]
            self.log({"event": "job end", "all_exited": done.all_exited, "exit_codes": codes,
                      "seconds": round(time.time() - self.t0, 1)})
            self.ran_through = all(running)
        return codes

    def wait_for(self, cond, seconds, what):
        deadline = time.time() + seconds
        while not cond():
            if time.time() > deadline:
                raise SystemExit("hostile_peer: timed out waiting for %s" % what)
            time.sleep(0.2)

    def bombard(self, targets):
        """Every kind of attempt against every target, all at once."""
        pub = [read_key_file(k)[0] for k in self.keys]
        calls = []
        for name, endpoint, rank in targets:
            calls += [(self.nokey, ["raw", endpoint, "--seed", str(rank)]),
                      (self.nokey, ["zmq", endpoint, "--wait-s", "2"]),
                      (self.wrong, ["zmq", endpoint, "--key", self.stranger_key, "--server-key", pub[rank],
                                    "--wait-s", "2"])]
        with ThreadPoolExecutor(len(calls)) as pool:
            list(pool.map(lambda c: self.attack(*c), calls))

    def replay(self, cap, cap_dir, rank1):
        os.killpg(cap.pid, signal.SIGTERM)
        self.wait_for(lambda: os.path.exists(os.path.join(cap_dir, "streams.json")), 30, "capture to stop")
        port = int(rank1.rsplit(":", 1)[1])
        streams = [s for s in json.load(open(os.path.join(cap_dir, "streams.json")))
                   if s["dport"] == port and s["src"] in self.addr[:self.w]]
        if not streams:
            self.log({"attack": "replay", "target": rank1, "error": "no stream to rank 1 captured"})
            return
        best = max(streams, key=lambda s: s["bytes"])
        path = os.path.join(cap_dir, best["file"])
        self.log({"event": "captured", "stream": best, "streams_to_rank1": len(streams)})
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda host: self.attack(host, ["replay", rank1, "--stream", path]),
                          (self.nokey, self.wrong)))

    def finish_joins(self, joins):
        for name, p in joins.items():
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            log = "stranger_%s.log" % name.split(":")[1]
            tail = open(os.path.join(self.out, log), errors="replace").read().strip().splitlines()[-1:]
            self.log({"attack": name, "target": self.coordinator, "exit_code": p.returncode,
                      "from": "wrong-key host" if "wrong" in name else "no-key host",
                      "last_line": tail[0][:300] if tail else ""})


def job_log_lines(out):
    lines = []
    for path in sorted(glob.glob(os.path.join(out, "coordinator.log")) + glob.glob(os.path.join(out, "rank*.log"))):
        for line in open(path, errors="replace"):
            if re.search(r"refused|dropped|rejected", line):
                lines.append("%s: %s" % (os.path.basename(path), line.strip()))
    return lines


def verdict(h, codes, out):
    """(ok, lines of summary.txt)."""
    lines, failures = [], []
    if not h.ran_through:
        failures.append("the job ended before the last attempt: rerun with more --steps")
    if codes != [0] * h.w:
        failures.append("real workers exited with %s" % codes)
    for rec in h.attempts:
        if "attack" not in rec:
            continue
        desc = "%-22s %-28s from %-26s " % (rec["attack"], rec["target"], rec.get("from", ""))
        if rec.get("delivered"):
            failures.append("delivered: %s" % desc)
        if rec["attack"].startswith("join:") and rec.get("exit_code") == 0:
            failures.append("stranger joined: %s" % desc)
        unreached = rec.get("events") is not None and "connected" not in rec["events"]
        if "connect failed" in rec.get("end", "") or unreached:
            failures.append("did not reach the job: %s" % desc)
        if "error" in rec:
            failures.append("attempt failed to run: %s %s" % (desc, rec["error"]))
        detail = {k: v for k, v in rec.items() if k not in ("attack", "target", "from", "t")}
        lines.append(desc + json.dumps(detail))
    job_lines = job_log_lines(out)
    refused = [line for line in job_lines if "is not on the authorised keys list" in line]
    wrong_hosts = {h.addr[h.wrong]}
    if not any(a in line for line in refused for a in wrong_hosts):
        failures.append("no job log line names the wrong-key host")
    summary = ["result: %s" % ("PASS" if not failures else "FAIL: " + "; ".join(failures)),
               "real workers' exit codes: %s (0 = every checksum comparison agreed)" % codes, "", "attempts:"] + \
        lines + ["", "job-side log lines (%d):" % len(job_lines)] + job_lines
    return not failures, summary


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build-dir", default="build")
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--rate", type=float, default=100, help="Mbit/s per host link")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--port", type=int, default=29760)
    p.add_argument("--budget-s", type=int, default=300)
    p.add_argument("--out-dir", default=None)
    args = p.parse_args()
    ok, why = Testbed.available()
    if not ok:
        print("SKIP: network namespaces unavailable (%s)" % why)
        return SKIP
    if not os.path.exists(os.path.join(args.build_dir, "frugal")):
        print("hostile_peer: %s/frugal not built" % args.build_dir, file=sys.stderr)
        return 2
    out = args.out_dir or tempfile.mkdtemp(prefix="frugal-hostile-")
    if os.path.exists(os.path.join(out, "attempts.jsonl")):
        shutil.rmtree(out)
    os.makedirs(out, exist_ok=True)
    lock = hold_testbed_lock(wait=True, on_wait=lambda: print("waiting for another testbed run", flush=True))
    start = time.time()
    with Testbed().up("flat", str(args.workers + 2), rate=args.rate) as tb:
        h = Hostile(args, tb, out)
        codes = h.run()
    lock.close()
    ok, summary = verdict(h, codes, out)
    summary.append("testbed up to down: %.1f s" % (time.time() - start))
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write("\n".join(summary) + "\n")
    print("\n".join(summary))
    print("hostile_peer: logs in %s" % out)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
