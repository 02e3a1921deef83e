"""Processes a benchmark starts: each in its own session, so that killing one
kills its whole group (`ip netns exec`, `env`, the program) and nothing else."""
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass


def free_port():
    """A TCP port free on loopback now."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@dataclass
class WaitResult:
    """How ProcessGroup.wait_all ended. all_exited: every non-daemon process
    exited; stalled: the progress file stopped changing while one still ran."""
    all_exited: bool
    stalled: bool = False


class ProcessGroup:
    """Processes started by this harness; stopped by pid (whole process group).
    Daemons (a coordinator) are not waited for, only killed. As a context
    manager it kills whatever still runs on exit."""

    def __init__(self):
        self.procs = []  # (Popen, log file or None)
        self.daemons = set()

    def start(self, cmd, log_path=None, env=None, daemon=False):
        """Starts CMD with stdout and stderr to LOG_PATH (None: discarded)."""
        f = open(log_path, "w") if log_path else None
        out = f if f else subprocess.DEVNULL
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.procs.append((p, f))
        if daemon:
            self.daemons.add(p.pid)
        return p

    def workers(self):
        return [p for p, _ in self.procs if p.pid not in self.daemons]

    def failed(self):
        """Indices (in start order, daemons left out) of the processes that did not exit with 0."""
        return [i for i, p in enumerate(self.workers()) if p.poll() != 0]

    def wait_all(self, deadline, progress_file=None, stall_s=None, on_poll=None, poll_s=0.5):
        """Waits until every non-daemon process exits or the deadline (time.time()) passes.
        Gives up early when one exits non-zero (the others would hang until their
        timeout) and, with PROGRESS_FILE, when it has not changed for STALL_S
        seconds. ON_POLL() runs on every poll, every POLL_S seconds."""
        workers = self.workers()
        started = time.time()
        while time.time() < deadline:
            if progress_file and stall_s and self._stalled(workers, progress_file, started, stall_s):
                return WaitResult(False, stalled=True)
            if all(p.poll() is not None for p in workers):
                return WaitResult(True)
            if any(p.poll() not in (None, 0) for p in workers):
                time.sleep(3)
                return WaitResult(all(p.poll() is not None for p in workers))
            if on_poll:
                on_poll()
            time.sleep(poll_s)
        return WaitResult(False)

    @staticmethod
    def _stalled(workers, progress_file, started, stall_s):
        try:
            last = max(started, os.path.getmtime(progress_file))
        except OSError:
            last = started
        return time.time() - last > stall_s and any(p.poll() is None for p in workers)

    def signal_all(self, sig):
        for p, _ in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass

    def kill_all(self):
        """SIGTERM to every group still running, SIGKILL a second later; reaps them all."""
        if any(p.poll() is None for p, _ in self.procs):
            self.signal_all(signal.SIGTERM)
            time.sleep(1)
            self.signal_all(signal.SIGKILL)
        for p, f in self.procs:
            p.wait()
            if f:
                f.close()
        self.procs = []
        self.daemons = set()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill_all()
        return False
