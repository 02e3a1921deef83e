"""Shared fixtures of the frugal Python tests: the frugal binary, and a
helper that runs a script under `frugal run --workers N`."""

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = sys.executable


def frugal_binary():
    path = os.environ.get("FRUGAL_BINARY")
    if path and not os.path.exists(path):  # ctest names it: missing is a build failure, not a skip
        pytest.fail(f"FRUGAL_BINARY={path} does not exist")
    if not path:
        try:
            from frugal import _build_info
            path = _build_info.FRUGAL_BINARY
        except ImportError:
            path = ""
    if not path or not os.path.exists(path):
        pytest.skip("the frugal binary is not built (set FRUGAL_BINARY)")
    return path


def run_workers(n, script, *args, tmp_path, timeout_s=20, extra=(), wall_timeout=90):
    """Runs `frugal run --workers n -- python script args` and returns
    (CompletedProcess, [per-rank JSON result or None])."""
    out_dir = str(tmp_path)
    cmd = [frugal_binary(), "run", "--workers", str(n), "--timeout-s", str(timeout_s), *extra, "--",
           PYTHON, os.path.join(HERE, script), out_dir, *map(str, args)]
    env = dict(os.environ)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=wall_timeout, env=env)
    results = []
    for r in range(n):
        path = os.path.join(out_dir, f"rank{r}.json")
        results.append(json.load(open(path)) if os.path.exists(path) else None)
    return proc, results


def check_generated_block(doc, begin, end, content, test_file):
    """Asserts that DOC holds CONTENT between the markers BEGIN and END; with
    FRUGAL_UPDATE_DOCS=1 it writes CONTENT there instead (the generated
    tables of the guides)."""
    with open(doc) as f:
        text = f.read()
    start, stop = text.index(begin) + len(begin), text.index(end)
    expected = "\n" + content + "\n"
    if os.environ.get("FRUGAL_UPDATE_DOCS") == "1":
        with open(doc, "w") as f:
            f.write(text[:start] + expected + text[stop:])
        return
    assert text[start:stop] == expected, f"run FRUGAL_UPDATE_DOCS=1 pytest {test_file} to regenerate it"
