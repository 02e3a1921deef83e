"""A distributed Frugal run on a Testbed: `frugal coordinator` on host 0 and
one `frugal worker` per host, each started in its host's namespace.

    with Testbed().up("flat", "4", rate=100) as tb, ProcessGroup() as procs:
        job = FrugalJob(frugal, tb, port=29600)
        job.start(procs, lambda rank: ["--model", "mlp", "--max-steps", "40"], log_dir=out)
        procs.wait_all(time.time() + 900)
"""
import os
import time
from dataclasses import dataclass

from harness.procs import ProcessGroup
from harness.testbed import Testbed


@dataclass
class FrugalJob:
    """What every worker of one run shares. with_cluster passes each host's
    testbed cluster as --cluster; quiet_all gives rank 0 --quiet as well (the
    others always get it)."""
    frugal: str
    testbed: Testbed
    port: int
    with_cluster: bool = False
    quiet_all: bool = False

    @property
    def world(self):
        return len(self.testbed.hosts)

    @property
    def coordinator(self):
        return "tcp://%s:%d" % (self.testbed.hosts[0].address, self.port)

    def coordinator_command(self):
        # The testbed's hosts are namespaces of this machine: plain TCP is
        # fine there, and frugal asks for --insecure off loopback.
        return self.testbed.prefix(0) + [self.frugal, "coordinator", "--listen", self.coordinator,
                                         "--world", str(self.world), "--insecure"]

    def worker_command(self, rank, args):
        """`frugal worker` for RANK on its host, with ARGS after the flags every worker gets."""
        host = self.testbed.hosts[rank]
        cmd = self.testbed.prefix(rank) + [self.frugal, "worker", "--coordinator", self.coordinator,
                                           "--rank", str(rank), "--insecure"]
        if self.with_cluster:
            cmd += ["--cluster", host.cluster]
        cmd += ["--listen", "tcp://%s:*" % host.address, "--threads", "1"] + list(args)
        if rank > 0 or self.quiet_all:
            cmd.append("--quiet")
        return cmd

    def start(self, procs, worker_args, log_dir=None, coordinator_log=None):
        """Starts the coordinator (a daemon of PROCS) and the workers, rank r with
        worker_args(r); worker logs go to LOG_DIR/rank<r>.log (None: discarded).
        Returns the workers' Popen objects; `ip netns exec` execs the worker, so
        each one's pid is the worker's."""
        procs.start(self.coordinator_command(), coordinator_log, daemon=True)
        time.sleep(0.3)
        return [procs.start(self.worker_command(r, worker_args(r)),
                            os.path.join(log_dir, "rank%d.log" % r) if log_dir else None)
                for r in range(self.world)]


def run_job(frugal, hosts, rate, worker_args, log_dir, port=29700, timeout_s=900):
    """One Frugal job on a fresh testbed, every worker given WORKER_ARGS (rank
    0 quiet too). HOSTS: a count like "4" (the flat topology, every link at
    RATE Mbit/s) or "3+1" (two clusters joined by a WAN of RATE Mbit/s, each
    worker given its cluster). Worker logs go to LOG_DIR. Raises
    RuntimeError naming LOG_DIR when a process failed."""
    clusters = "+" in str(hosts)
    with Testbed().up("clusters" if clusters else "flat", hosts, rate=rate) as tb, ProcessGroup() as procs:
        os.makedirs(log_dir, exist_ok=True)
        FrugalJob(frugal, tb, port=port, quiet_all=True, with_cluster=clusters).start(
            procs, lambda rank: worker_args, log_dir=log_dir)
        procs.wait_all(time.time() + timeout_s, poll_s=0.2)
        if procs.failed():
            raise RuntimeError("the run failed (logs in %s)" % log_dir)
