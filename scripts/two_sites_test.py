#!/usr/bin/python3
"""Runs the site blocks of docs/guide/two-sites.md on two network
namespaces (ctest two_sites_doc).

Two "hosts": namespaces fgts-a (10.0.0.1, site A) and fgts-b (10.0.1.2,
site B), joined by a veth pair; the names start with "fgts-" so that they
never meet the testbed's (testbed/testbed.sh, "fgtb-"). A code block whose
info string names a site (```sh site-a, ```sh site-b, or both) runs as
written, as one `bash -e -o pipefail` script inside that site's namespace,
in that site's own working folder (a symlink to every top-level entry of
the repository, `build` -> the build folder; `frugal` and `python3` first on
PATH, PYTHONPATH the build's package), as scripts/check_docs.py runs its
blocks. Blocks follow the page's order; consecutive blocks of different
sites run at the same time (the page's "on site A ... on site B"), and
each group ends before the next starts. Between groups the test does what
the page's prose asks to do by hand: each site's `*.pub` files are copied
to the other site's folder.

It checks that every block exits 0, that every rank of the page's run
printed its line (ranks 0-3, clusters siteA and siteB), and that the
workers listened on the page's port range. Then, on the same namespaces,
frugal.init()'s torchrun path (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
set as torchrun sets them): both ranks join and all-reduce across the
namespaces, so each advertised an address the other reaches (not what the
host name resolves to, 127.0.1.1 on Debian), site A
takes FRUGAL_CLUSTER, and site B, without one, warns of a flat exchange.

Exit 77 (ctest: skipped) with the reason where namespaces cannot be made
(not root, no iproute2, no veth). Every wait has a deadline; on failure the
blocks' output is printed.

Usage: two_sites_test.py --build BUILD [--python PY] [--timeout S] [--keep]
"""

import argparse
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from check_docs import split_blocks  # noqa: E402  (the page's blocks, as check_docs reads them)

SKIP = 77
DOC = os.path.join(ROOT, "docs", "guide", "two-sites.md")
SITES = {"site-a": ("fgts-a", "10.0.0.1"), "site-b": ("fgts-b", "10.0.1.2")}


def sh(*args, check=True):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=30, check=check)


def namespaces_down():
    for ns, _ in SITES.values():
        sh("ip", "netns", "del", ns, check=False)


def namespaces_up():
    """The two hosts; returns None, or why they cannot be made."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if shutil.which("ip") is None:
        return "'ip' not found (apt-get install iproute2)"
    namespaces_down()
    try:
        for ns, _ in SITES.values():
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        (a, addr_a), (b, addr_b) = SITES["site-a"], SITES["site-b"]
        sh("ip", "link", "add", "fgts-va", "netns", a, "type", "veth", "peer", "name", "fgts-vb", "netns", b)
        for ns, dev, addr in ((a, "fgts-va", addr_a), (b, "fgts-vb", addr_b)):
            sh("ip", "-n", ns, "addr", "add", addr + "/16", "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
    except subprocess.CalledProcessError as e:
        namespaces_down()
        return f"cannot make network namespaces: {' '.join(e.cmd)}: {e.stderr.strip()}"
    return None


def site_blocks():
    """[(sites, line, script)] of the page, in order."""
    _, blocks = split_blocks(open(DOC).read())
    out = []
    for block in blocks:
        sites = [w for w in block.info[1:] if w in SITES]
        if sites:
            out.append((sites, block.start, "\n".join(line for _, line in block)))
    return out


def groups(blocks):
    """Consecutive blocks of different sites run together."""
    out = []
    for sites, line, script in blocks:
        for site in sites:
            if not out or site in {s for s, _, _ in out[-1]}:
                out.append([])
            out[-1].append((site, line, script))
    return out


def make_folder(root, site, build):
    work = os.path.join(root, site)
    os.makedirs(work)
    for entry in os.listdir(ROOT):
        if not entry.startswith(".") and entry != "build":
            os.symlink(os.path.join(ROOT, entry), os.path.join(work, entry))
    os.symlink(build, os.path.join(work, "build"))
    return work


def copy_public_keys(folders):
    for site, work in folders.items():
        for pub in glob.glob(os.path.join(work, "*.pub")):
            for other, there in folders.items():
                if other != site and not os.path.exists(os.path.join(there, os.path.basename(pub))):
                    shutil.copy(pub, there)


def run_group(group, folders, env, timeout, outputs):
    procs = []
    for site, line, script in group:
        ns = SITES[site][0]
        log = open(os.path.join(folders[site], f"block-{line}.out"), "w")
        procs.append((site, line, log, subprocess.Popen(
            ["ip", "netns", "exec", ns, "bash", "-c", "set -e -o pipefail\n" + script + "\n"],
            cwd=folders[site], env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)))
    deadline = time.monotonic() + timeout
    failures = []
    for site, line, log, proc in procs:
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            if proc.returncode != 0:
                failures.append(f"{site} block at line {line}: exit {proc.returncode}")
        except subprocess.TimeoutExpired:
            failures.append(f"{site} block at line {line}: still running after {timeout:g} s")
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            log.close()
        outputs.append((site, line, open(log.name).read()))
    return failures


def check_run(outputs):
    """The page's own script printed a line per rank, with both clusters."""
    text = "".join(out for _, _, out in outputs)
    # Anywhere, not only at a line's start: ranks of one host share the
    # output, and two ranks' lines may end up on one line.
    ranks = dict(re.findall(r"rank (\d) of 4 \(cluster (site[AB])\): ", text))
    problems = []
    if sorted(ranks) != ["0", "1", "2", "3"]:
        problems.append(f"ranks that printed their line: {sorted(ranks)} (expected 0-3)")
    if sorted(set(ranks.values())) != ["siteA", "siteB"]:
        problems.append(f"clusters: {sorted(set(ranks.values()))}")
    # Rank 0 holds the store: its launcher names it, on a port of the range.
    store = re.findall(r"torch.distributed's store at (10\.0\.(?:0\.1|1\.2)):(\d+)", text)
    if len(store) != 2 or len(set(store)) != 1 or not 29600 <= int(store[0][1]) <= 29602:
        problems.append(f"the launchers' store lines: {store}")
    return problems


TORCHRUN_RANK = """
import warnings, frugal
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    world = frugal.init()
total = frugal.all_reduce(float(world.rank + 1), op="sum")
print(f"rank {world.rank} cluster {world.cluster} total {total} warned {any('flat' in str(w.message) for w in caught)}")
"""


def check_torchrun_path(env, timeout):
    """frugal.init() under torchrun's variables across the two namespaces."""
    procs = []
    for rank, site in enumerate(("site-a", "site-b")):
        e = {k: v for k, v in env.items() if not k.startswith("FRUGAL_")}
        e.update(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR=SITES["site-a"][1], MASTER_PORT="29700",
                 LOCAL_RANK="0", FRUGAL_INSECURE="1", FRUGAL_TIMEOUT_S="20")
        if site == "site-a":
            e["FRUGAL_CLUSTER"] = "siteA"
        procs.append(subprocess.Popen(["ip", "netns", "exec", SITES[site][0], "python3", "-c", TORCHRUN_RANK],
                                      env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      start_new_session=True))
    outs = []
    for proc in procs:
        try:
            outs.append(proc.communicate(timeout=timeout)[0])
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            outs.append(proc.communicate()[0] + "\n(still running: killed)")
    expected = ["rank 0 cluster siteA total 3.0 warned False", "rank 1 cluster local total 3.0 warned True"]
    problems = []
    for out, line in zip(outs, expected):
        if line not in out:
            problems.append(f"torchrun path: expected {line!r}, got:\n{out[-2000:]}")
        else:
            print(f"two_sites_doc: torchrun path: {line}")
    return problems


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", required=True)
    p.add_argument("--python", default="/usr/bin/python3")
    p.add_argument("--timeout", type=float, default=240)
    p.add_argument("--keep", action="store_true")
    args = p.parse_args()
    build = os.path.abspath(args.build)
    if not os.path.isdir(os.path.join(build, "python", "frugal")):
        print("two_sites_doc: skipped: the build has no Python package")
        return SKIP
    blocks = site_blocks()
    if not blocks:
        print(f"two_sites_doc: {DOC} has no site blocks")
        return 1
    why = namespaces_up()
    if why:
        print(f"two_sites_doc: skipped: {why}")
        return SKIP
    root = tempfile.mkdtemp(prefix="two_sites_doc_")
    bin_dir = os.path.join(root, "bin")
    os.makedirs(bin_dir)
    os.symlink(os.path.join(build, "frugal"), os.path.join(bin_dir, "frugal"))
    for name in ("python3", "python"):
        os.symlink(args.python, os.path.join(bin_dir, name))
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""),
               PYTHONPATH=os.path.join(build, "python"), OMP_NUM_THREADS="1")
    folders = {site: make_folder(root, site, build) for site in SITES}
    outputs, failures = [], []
    began = time.monotonic()
    try:
        for group in groups(blocks):
            failures += run_group(group, folders, env, args.timeout, outputs)
            if failures:
                break
            copy_public_keys(folders)
        if not failures:
            failures += check_run(outputs)
        if not failures:
            failures += check_torchrun_path(env, args.timeout)
    finally:
        namespaces_down()
        if failures or args.keep:
            print(f"two_sites_doc: folders kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    if failures:
        for site, line, out in outputs:
            print(f"---- {site}, block at line {line}\n{out[-3000:]}")
        for f in failures:
            print(f"two_sites_doc: FAILED: {f}")
        return 1
    print(f"two_sites_doc: ok, {len(outputs)} blocks on 2 namespaces in {time.monotonic() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
