"""Where things are: the repository root, the testbed script, the Python to run."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTBED = os.path.join(ROOT, "testbed", "testbed.sh")
PY = "/usr/bin/python3"
