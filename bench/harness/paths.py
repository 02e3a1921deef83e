"""Where things are: the repository root, the testbed script, the Python to run."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTBED = os.path.join(ROOT, "testbed", "testbed.sh")
# The Python of ddp.py and the py_* systems: Debian's (whose torch matches the
# build's LibTorch), or FRUGAL_BENCH_PYTHON (a GPU machine's PyTorch wheel).
PY = os.environ.get("FRUGAL_BENCH_PYTHON", "/usr/bin/python3")
