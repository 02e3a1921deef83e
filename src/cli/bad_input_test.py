#!/usr/bin/env python3
"""Table-driven bad-input test of the `frugal` binary.

Every case in the table runs `frugal ARGV` in a fresh temporary directory
(its working directory, holding the case's files) and must, within
--timeout seconds and without a signal, exit with 2 and print one error line
"frugal: error: ..." (optionally followed by CLI11's "Run with --help for
usage.") that contains every expected substring.

Table format (bad_input_cases.txt), blocks separated by blank lines:
  # comment
  %define NAME WORDS  {NAME} in a later ARGV stands for WORDS
  %shared NAME        a file written into every case's directory; its text
  ...                 follows, up to a line '%end'
  %end
  == case-name
  file NAME           a file of the case, text up to '%end'
  file! NAME          ... with Python escapes (\\xff, \\n) decoded to bytes
  dir NAME            a directory
  $ ARGV              the arguments (shell words); {tmp} is the directory
  ? SUBSTRING         expected in the error line (several allowed)
  exit N              expected exit code (default 2)
  xfail REASON        a known failure in code owned elsewhere (REASON says
                      whose): reported, not fatal; "XPASS" once it is fixed
Cases whose subcommand is not built (no LibTorch, no sim/sched) are skipped.

Usage: bad_input_test.py --frugal PATH [--cases FILE] [--jobs N]
                         [--timeout S] [--only SUBSTRING] [-v]
"""
import argparse
import codecs
import concurrent.futures
import os
import shlex
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_COMMANDS = {"train", "worker", "profile"}


class Case:
    def __init__(self, name, line):
        self.name = name
        self.line = line
        self.files = []  # (name, bytes or None for a directory)
        self.argv = None
        self.expect = []
        self.exit = 2
        self.xfail = None


def parse_table(path):
    shared, cases, macros = [], [], {}
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    i = 0
    case = None

    def block(start):
        body = []
        j = start
        while j < len(lines) and lines[j] != "%end":
            body.append(lines[j])
            j += 1
        if j == len(lines):
            raise SystemExit(f"{path}:{start}: file block without %end")
        return "\n".join(body) + ("\n" if body else ""), j + 1

    while i < len(lines):
        line = lines[i]
        where = f"{path}:{i + 1}"
        if not line.strip() or line.startswith("#"):
            i += 1
        elif line.startswith("%define "):
            _, key, value = line.split(None, 2)
            macros["{" + key + "}"] = value
            i += 1
        elif line.startswith("%shared "):
            text, i = block(i + 1)
            shared.append((line.split(None, 1)[1], text.encode()))
        elif line.startswith("== "):
            case = Case(line[3:].strip(), i + 1)
            cases.append(case)
            i += 1
        elif case is None:
            raise SystemExit(f"{where}: '{line}' outside a case")
        elif line.startswith("file ") or line.startswith("file! "):
            text, i = block(i + 1)
            data = text.encode()
            if line.startswith("file!"):
                data = codecs.escape_decode(text.rstrip("\n").encode())[0]
            case.files.append((line.split(None, 1)[1], data))
        elif line.startswith("dir "):
            case.files.append((line.split(None, 1)[1], None))
            i += 1
        elif line.startswith("$ "):
            case.argv = line[2:]
            for key, value in macros.items():
                case.argv = case.argv.replace(key, value)
            i += 1
        elif line.startswith("? "):
            case.expect.append(line[2:])
            i += 1
        elif line.startswith("xfail "):
            case.xfail = line[6:].strip()
            i += 1
        elif line.startswith("exit "):
            case.exit = int(line.split()[1])
            i += 1
        else:
            raise SystemExit(f"{where}: cannot read '{line}'")
    names = set()
    for c in cases:
        if c.argv is None or not c.expect:
            raise SystemExit(f"{path}:{c.line}: case '{c.name}' needs '$ ARGV' and '? SUBSTRING'")
        if c.name in names:
            raise SystemExit(f"{path}:{c.line}: case '{c.name}' repeated")
        names.add(c.name)
    return shared, cases


def available_commands(frugal):
    out = subprocess.run([frugal, "--help"], capture_output=True, text=True, timeout=60).stdout
    commands = set()
    in_list = False
    for line in out.split("\n"):
        if line.startswith("Subcommands:"):
            in_list = True
        elif in_list and line.startswith("  ") and line.strip():
            commands.add(line.split()[0])
    return commands


def check(case, proc, elapsed, timeout):
    """None when the case passed, else why not."""
    if proc is None:
        return f"no exit within {timeout} s (hang?)"
    if proc.returncode < 0:
        return f"killed by signal {-proc.returncode}"
    stderr = proc.stderr.decode(errors="replace")
    lines = [l for l in stderr.split("\n") if l.strip()]
    if lines and lines[-1].startswith("Run with --help"):
        lines = lines[:-1]
    if proc.returncode != case.exit:
        return f"exit {proc.returncode}, expected {case.exit}"
    if len(lines) != 1:
        return f"expected one error line on stderr, got {len(lines)}"
    if not lines[0].startswith("frugal: error: "):
        return "the error line does not start with 'frugal: error: '"
    missing = [e for e in case.expect if e not in lines[0]]
    if missing:
        return "the error line lacks " + ", ".join(repr(m) for m in missing)
    return None


def run_case(frugal, shared, case, timeout):
    with tempfile.TemporaryDirectory(prefix="frugal-bad-input-") as tmp:
        for name, data in shared + case.files:
            path = os.path.join(tmp, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if data is None:
                os.makedirs(path, exist_ok=True)
            else:
                with open(path, "wb") as f:
                    f.write(data.replace(b"{tmp}", tmp.encode()))
        argv = [frugal] + [a.replace("{tmp}", tmp) for a in shlex.split(case.argv)]
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        start = time.monotonic()
        try:
            proc = subprocess.run(argv, cwd=tmp, capture_output=True, timeout=timeout, env=env,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
        except subprocess.TimeoutExpired:
            proc = None
        elapsed = time.monotonic() - start
        return case, proc, elapsed, check(case, proc, elapsed, timeout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frugal", required=True, help="path to the frugal binary")
    ap.add_argument("--cases", default=os.path.join(HERE, "bad_input_cases.txt"))
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=20)
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every case's error line")
    args = ap.parse_args()
    frugal = os.path.abspath(args.frugal)
    shared, cases = parse_table(args.cases)
    commands = available_commands(frugal)
    version = subprocess.run([frugal, "version"], capture_output=True, text=True, timeout=60).stdout
    has_torch = "libtorch: yes" in version
    runnable, skipped = [], 0
    for c in cases:
        words = shlex.split(c.argv)
        first = words[0] if words else ""
        if args.only not in c.name:
            continue
        if (first in TORCH_COMMANDS and not has_torch) or (first and not first.startswith("-") and
                                                            first not in commands and first != "frobnicate"):
            skipped += 1
            continue
        runnable.append(c)
    failures, xfails, xpasses = [], [], []
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run_case, frugal, shared, c, args.timeout) for c in runnable]
        for fut in concurrent.futures.as_completed(futures):
            case, proc, elapsed, why = fut.result()
            err = proc.stderr.decode(errors="replace").strip() if proc else ""
            if args.verbose:
                print(f"{'FAIL' if why else 'ok  '} {case.name} ({elapsed:.1f} s): {err.splitlines()[0] if err else ''}")
            if case.xfail:
                (xfails if why else xpasses).append((case, proc, elapsed, why))
            elif why:
                failures.append((case, proc, elapsed, why))
    total = time.monotonic() - start
    for label, group in (("XFAIL", xfails), ("FAIL", failures)):
        for case, proc, elapsed, why in sorted(group, key=lambda f: f[0].line):
            print(f"{label} {case.name} (bad_input_cases.txt:{case.line}, {elapsed:.1f} s): {why}"
                  + (f" [known: {case.xfail}]" if case.xfail else ""))
            print(f"  $ frugal {case.argv}")
            if proc is not None:
                for stream, data in (("stdout", proc.stdout), ("stderr", proc.stderr)):
                    text = data.decode(errors="replace").strip()
                    if text:
                        tail = text.split("\n")[-4:]
                        print(f"  {stream}: " + "\n          ".join(t[:300] for t in tail))
    for case, _, _, _ in xpasses:
        print(f"XPASS {case.name}: passes now; remove its 'xfail' line")
    print(f"{len(runnable) - len(failures) - len(xfails)} of {len(runnable)} bad-input cases passed, "
          f"{len(xfails)} known failures ({skipped} skipped: subcommand not built) in {total:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
