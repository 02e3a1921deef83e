"""The shared bench harness: the shaped testbed, processes started in its
network namespaces, CPU cgroups for uneven workers, and launching Frugal jobs.

Scripts under bench/ put bench/ on sys.path and import from here:

    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from harness import Testbed, ProcessGroup, FrugalJob

Every script runs with /usr/bin/python3 and the standard library only.
"""
from harness.cgroups import CpuGroups, worker_pids
from harness.frugal import FrugalJob, run_job
from harness.paths import PY, ROOT, TESTBED
from harness.procs import ProcessGroup, WaitResult, free_port
from harness.testbed import Host, Testbed, hold_testbed_lock
from jsonl_records import read_jsonl

__all__ = ["CpuGroups", "FrugalJob", "Host", "PY", "ProcessGroup", "ROOT", "TESTBED", "Testbed", "WaitResult",
           "free_port", "hold_testbed_lock", "read_jsonl", "run_job", "worker_pids"]
