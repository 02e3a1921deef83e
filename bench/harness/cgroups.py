"""CPU cgroups that give each worker a fixed speed.

Emulating a slower device by sleeping (`--compute-slowdown`) frees CPU for
the other workers when several share the cores, so the "slow" one is barely
slower. Instead every worker runs in its own cgroup (cgroup v1 `cpu`
controller, CFS quota) with a quota in cores; the quotas together stay below
the machine's cores, so each worker computes at its own fixed speed, as on
separate devices. Needs root.

    with CpuGroups([0.45, 0.225, 0.45, 0.45]) as groups:
        groups.place(rank, pid)
"""
import os
import time

CGROUP = "/sys/fs/cgroup/cpu/frugal-hetero"
PERIOD_US = 100000


def worker_pids(parent):
    """rank -> pid of the `frugal worker` children of PARENT (a `frugal train --workers N`)."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != parent:
                continue
            with open("/proc/%s/cmdline" % name, "rb") as f:
                argv = f.read().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if b"worker" in argv and b"--rank" in argv:
            found[int(argv[argv.index(b"--rank") + 1])] = int(name)
    return found


class CpuGroups:
    """One cgroup per rank under CGROUP, rank r limited to QUOTAS[r] cores."""

    def __init__(self, quotas):
        self.quotas = list(quotas)

    @staticmethod
    def available():
        """None when the cgroup v1 cpu controller is there, else why not."""
        parent = os.path.dirname(CGROUP)
        return None if os.path.isdir(parent) else "no cgroup v1 cpu controller at %s" % parent

    def make(self):
        os.makedirs(CGROUP, exist_ok=True)
        for r, cores in enumerate(self.quotas):
            g = self._group(r)
            os.makedirs(g, exist_ok=True)
            with open(os.path.join(g, "cpu.cfs_period_us"), "w") as f:
                f.write(str(PERIOD_US))
            with open(os.path.join(g, "cpu.cfs_quota_us"), "w") as f:
                f.write(str(int(cores * PERIOD_US)))
        return self

    def place(self, rank, pid):
        """Moves process PID into rank RANK's group."""
        with open(os.path.join(self._group(rank), "cgroup.procs"), "w") as f:
            f.write(str(pid))

    def remove(self):
        """Removes the groups, waiting a little for exiting tasks to leave them."""
        for r in range(len(self.quotas)):
            g = self._group(r)
            for _ in range(50):
                try:
                    if os.path.isdir(g):
                        os.rmdir(g)
                    break
                except OSError:  # still has (exiting) tasks
                    time.sleep(0.1)
        try:
            os.rmdir(CGROUP)
        except OSError:
            pass

    @staticmethod
    def _group(rank):
        return os.path.join(CGROUP, "r%d" % rank)

    def __enter__(self):
        return self.make()

    def __exit__(self, *exc):
        self.remove()
        return False
