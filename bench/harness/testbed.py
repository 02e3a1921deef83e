"""The shaped-network testbed (testbed/testbed.sh) seen from Python.

A Testbed is either a set of network namespaces made by testbed.sh (one per
host, links shaped by tc) or, with use_netns=False, plain loopback hosts for
machines where namespaces are unavailable. Commands run on host i through
`prefix(i) + argv`. Use it as a context manager to be sure it comes down:

    with Testbed().up("flat", "4", rate=100) as tb:
        ...                      # tb.hosts[i].address, tb.prefix(i)
"""
import fcntl
import os
import subprocess
from dataclasses import dataclass
from typing import List, Optional

from harness.paths import TESTBED

LOCK_PATH = "/run/frugal-testbed.lock"
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Host:
    """One line of `testbed.sh info`; namespace None for a loopback host."""
    index: int
    namespace: Optional[str]
    address: str
    interface: str
    cluster: str
    switch_ns: str = ""
    switch_port: str = ""

    @staticmethod
    def parse(line):
        f = line.split()
        return Host(int(f[0]), f[1], f[2], f[3], f[4], *f[5:7])


def parse_info(text):
    """The hosts of `testbed.sh info` output (comment lines skipped)."""
    return [Host.parse(line) for line in text.splitlines() if line.strip() and not line.startswith("#")]


def hold_testbed_lock(wait, on_wait=None):
    """Takes the lock testbed.sh takes per command, for a whole benchmark (the
    namespace names are fixed, so one testbed at a time). Returns the open lock
    file (keep it alive), or None when another run holds it and wait is false;
    ON_WAIT() runs before waiting for another run to release it.
    Sets FRUGAL_TESTBED_LOCKED so that testbed.sh does not take it again."""
    lock = open(LOCK_PATH, "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        if not wait:
            lock.close()
            return None
        if on_wait:
            on_wait()
        fcntl.flock(lock, fcntl.LOCK_EX)
    os.environ["FRUGAL_TESTBED_LOCKED"] = "1"
    return lock


class Testbed:
    """Hosts from testbed/testbed.sh, or plain loopback when use_netns is false."""

    def __init__(self, use_netns=True, quiet=True):
        self.use_netns = use_netns
        self.quiet = quiet
        self.hosts: List[Host] = []

    @staticmethod
    def available():
        """(True, "") when testbed.sh can create namespaces here, else (False, why)."""
        if os.geteuid() != 0:
            return False, "not root"
        r = subprocess.run(["bash", TESTBED, "check"], capture_output=True, text=True)
        if r.returncode != 0:
            return False, (r.stderr or r.stdout).strip()
        return True, ""

    def up(self, topology, hosts, rate=None, expect=None):
        """Brings up TOPOLOGY with --hosts HOSTS (e.g. "4" or "2+2") and --rate
        RATE Mbit/s (None: no --rate, as for `fluctuating`), then reads its hosts.
        REQUIRES: use_netns. Raises when the testbed does not have EXPECT hosts."""
        args = ["bash", TESTBED, "up", topology, "--hosts", str(hosts)]
        if rate is not None:
            args += ["--rate", str(rate)]
        env = dict(os.environ, TESTBED_QUIET="1") if self.quiet else None
        subprocess.run(args, check=True, env=env)
        self.hosts = self.info()
        if expect is not None and len(self.hosts) != expect:
            raise RuntimeError("testbed has %d hosts, scenario needs %d" % (len(self.hosts), expect))
        return self

    def up_loopback(self, clusters):
        """Loopback hosts, one per entry of CLUSTERS (each host's cluster name)."""
        self.hosts = [Host(i, None, LOOPBACK, "lo", c) for i, c in enumerate(clusters)]
        return self

    @staticmethod
    def info():
        out = subprocess.run(["bash", TESTBED, "info"], check=True, capture_output=True, text=True).stdout
        return parse_info(out)

    @staticmethod
    def set_rate(mbit):
        subprocess.run(["bash", TESTBED, "set-rate", str(mbit)], check=True)

    def down(self):
        if self.use_netns:
            subprocess.run(["bash", TESTBED, "down"], capture_output=True)

    def prefix(self, i):
        """The argv prefix that runs a command on host I."""
        ns = self.hosts[i].namespace
        return ["ip", "netns", "exec", ns] if ns else []

    def ifname(self, i):
        return self.hosts[i].interface

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.down()
        return False
