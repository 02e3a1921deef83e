#!/usr/bin/python3
"""Checks the docs against the tree and the build:

- every relative link in README.md, docs/**/*.md, data/README.md and
  bench/*/README.md names a file or folder that exists (anchors are not
  checked);
- every `frugal <subcommand>` in a code block of README.md or docs/guide/ is
  a subcommand the CLI defines (read from the add_subcommand calls in src/cli/);
- the product text (README.md, docs/architecture.md, docs/guide/,
  docs/design/) carries no history in its prose, outside code blocks and
  code spans: no dates (2026-11-27), no issue or session numbers (issue 17,
  session 29), no pointers into git history (af9e6e6:docs/benchmarks.md).
  Dates of measurements belong in docs/results.md and CHANGELOG.md, which
  this does not check;
- with --build, every `--flag` given to a `frugal` subcommand in a code block
  of README.md or docs/guide/ is one that subcommand's --help lists, and every
  code block marked runnable runs and exits 0.

A runnable block is a fenced shell block whose info string carries the word
`run` after the language:

    ```sh run
    frugal plan hardware
    ```

(Renderers take the first word as the language, so the block reads as any
`sh` block.) Mark only commands that take seconds, need no root, no testbed,
no network beyond loopback and nothing outside the repository. Each block
runs as one `bash -e -o pipefail` script, in a fresh temporary folder that
holds a symlink to every top-level entry of the repository (so
`examples/quickstart.py` and `data/...` resolve, and files the commands write
land in the temporary folder) and `build` -> the build folder, with a time
limit (--timeout). On PATH first: `frugal` -> BUILD/frugal and, with
--python, `python3` and `python` -> that Python; PYTHONPATH is BUILD/python.
A block whose `frugal` subcommands the built binary lacks (a build without
LibTorch has no train, run or profile), or that needs the Python package
when the build has none, is skipped and counted as skipped.

  scripts/check_docs.py [--root DIR] [--build DIR [--python PY] [--timeout S]]
  exit 0: clean, 1: problems listed
"""
import argparse
import concurrent.futures
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_LINK = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(\S+)(?:\s+\"[^\"]*\")?\s*$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*(.*)$")
SHELLS = ("sh", "bash", "shell")
CODE_SPAN = re.compile(r"`[^`\n]*`")
TOP = re.compile(r"\bapp\.add_subcommand\(\s*\"([a-z][\w-]*)\"")
NESTED = re.compile(r"\b(\w+)->add_subcommand\(\s*\"([a-z][\w-]*)\"")
ENV = re.compile(r"^[A-Za-z_]\w*=\S*$")
HISTORY = [
    (re.compile(r"\b(19|20)\d\d-[01]\d-[0-3]\d\b"), "a date"),
    (re.compile(r"\b([Ii]ssues?|PR|[Pp]ull requests?) #?\d+\b"), "an issue number"),
    (re.compile(r"\b[Ss]essions? \d+\b"), "a session number"),
    (re.compile(r"\b[0-9a-f]{7,40}:[\w.-]+/[\w./-]+"), "a pointer into git history"),
]


class Block(list):
    """A fenced code block: a list of (line number, line), plus the info
    string's words and the line number of its opening fence."""

    def __init__(self, info, start):
        super().__init__()
        self.info = info.split()
        self.start = start

    def runnable(self):
        return "run" in self.info[1:]


def split_blocks(text):
    """(prose lines, code blocks as Blocks). A fence closes only on a fence of
    the same character at least as long, with no info string."""
    prose, blocks, current, opener = [], [], None, None
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if m and current is None:
            current, opener = Block(m.group(3), n), m.group(2)
            prose.append("")
            continue
        if m and m.group(2)[0] == opener[0] and len(m.group(2)) >= len(opener) and not m.group(3):
            blocks.append(current)
            current = None
            prose.append("")
            continue
        if current is None:
            prose.append(line)
        else:
            current.append((n, line))
            prose.append("")
    return prose, blocks


def cli_commands(root):
    """{top-level subcommand: set of its subcommands}."""
    tops, nested = {}, []
    for path in glob.glob(os.path.join(root, "src", "cli", "*.cc")):
        text = open(path, encoding="utf-8").read()
        for m in TOP.finditer(text):
            tops.setdefault(m.group(1), set())
        nested += NESTED.findall(text)
    for parent, child in nested:
        if parent in tops:
            tops[parent].add(child)
    return tops


def check_links(root, path, prose, errors):
    text = "\n".join(prose)
    text_no_spans = CODE_SPAN.sub("", text)
    lines = text_no_spans.splitlines()
    for n, line in enumerate(lines, 1):
        targets = [m.group(1) for m in LINK.finditer(line)] + [m.group(1) for m in REF_LINK.finditer(line)]
        for t in targets:
            if re.match(r"^[a-zA-Z][\w+.-]*:", t) or t.startswith("#"):
                continue
            target = t.split("#", 1)[0]
            if not target:
                continue
            base = root if target.startswith("/") else os.path.dirname(path)
            full = os.path.normpath(os.path.join(base, target.lstrip("/")))
            if not os.path.exists(full):
                errors.append(f"{os.path.relpath(path, root)}:{n}: link to missing {t}")


def frugal_calls(block):
    """(line number, words after `frugal`) for each call of frugal in a block."""
    for n, line in block:
        line = line.split(" #", 1)[0]
        for segment in re.split(r"&&|\|\||[;|&]", line):
            words = segment.split()
            while words and (ENV.match(words[0]) or words[0] in ("$", "sudo", "exec", "time")):
                words.pop(0)
            if len(words) >= 2 and words[0] == "nice" and words[1] == "-n":
                words = words[3:]
            if words and os.path.basename(words[0]) == "frugal":
                yield n, words[1:]


def check_commands(root, path, blocks, commands, errors):
    for block in blocks:
        for n, args in frugal_calls(block):
            if not args or args[0].startswith("-") or not re.match(r"^[a-z][\w-]*$", args[0]):
                continue
            sub = args[0]
            where = f"{os.path.relpath(path, root)}:{n}"
            if sub not in commands:
                errors.append(f"{where}: 'frugal {sub}' is not a subcommand (src/cli/)")
                continue
            children = commands[sub]
            if children and len(args) >= 2 and re.match(r"^[a-z][\w-]*$", args[1]) and args[1] not in children:
                errors.append(f"{where}: 'frugal {sub} {args[1]}' is not a subcommand of '{sub}' "
                              f"(it has: {', '.join(sorted(children))})")


def is_product_text(rel):
    return rel in ("README.md", os.path.join("docs", "architecture.md")) or \
        rel.startswith(os.path.join("docs", "guide") + os.sep) or rel.startswith(os.path.join("docs", "design") + os.sep)


def check_history(rel, prose, errors):
    for n, line in enumerate(prose, 1):
        text = CODE_SPAN.sub("", line)
        for pattern, what in HISTORY:
            m = pattern.search(text)
            if m:
                errors.append(f"{rel}:{n}: {what} in product text ('{m.group(0)}'): history goes in "
                              "CHANGELOG.md, dated measurements in docs/results.md")


class Runner:
    """Runs the runnable blocks against one build (see the module docstring)."""

    def __init__(self, root, build, python, timeout):
        self.root, self.build, self.timeout = root, build, timeout
        self.binary = os.path.join(build, "frugal")
        self.has_package = os.path.isdir(os.path.join(build, "python", "frugal"))
        self.bin_dir = tempfile.mkdtemp(prefix="check_docs_bin_")
        os.symlink(self.binary, os.path.join(self.bin_dir, "frugal"))
        if python:
            for name in ("python3", "python"):
                os.symlink(python, os.path.join(self.bin_dir, name))
        self.helps = {}
        self.built = self._built_subcommands()
        self.ran = self.skipped = 0

    def _built_subcommands(self):
        """The subcommands this binary has, from its --help."""
        out = subprocess.run([self.binary, "--help"], capture_output=True, text=True, timeout=self.timeout).stdout
        listing = out.split("Subcommands:", 1)[-1] if "Subcommands:" in out else ""
        return set(re.findall(r"^\s{2}([a-z][\w-]*)\s", listing, re.M))

    def _help(self, path):
        """The --help text of `frugal PATH...`, or None when PATH is not a command of this binary."""
        if path not in self.helps:
            done = subprocess.run([self.binary, *path, "--help"], capture_output=True, text=True,
                                  timeout=self.timeout)
            self.helps[path] = done.stdout if done.returncode == 0 and "Usage:" in done.stdout else None
        return self.helps[path]

    def check_flags(self, path, blocks, errors):
        """Every --flag of a frugal call in BLOCKS is in its subcommand's --help."""
        calls = []
        for block in blocks:
            joined = []  # shell continuation lines joined
            for n, line in block:
                if joined and joined[-1][1].rstrip().endswith("\\"):
                    joined[-1] = (joined[-1][0], joined[-1][1].rstrip()[:-1] + " " + line)
                else:
                    joined.append((n, line))
            calls += frugal_calls(joined)
        names = lambda args: tuple(a for a in args[:2] if re.match(r"^[a-z][\w-]*$", a))
        paths = {names(args)[:k] for _, args in calls for k in (1, 2)}
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            list(pool.map(self._help, paths - set(self.helps)))
        for n, args in calls:
            if "--" in args:
                args = args[:args.index("--")]  # frugal run's program and its own flags
            command = names(args)
            while command and self._help(command) is None:
                command = command[:-1]
            if not command or command[0] not in self.built:
                continue
            text = self._help(command)
            for arg in args:
                flag = arg.lstrip("[").split("=", 1)[0].rstrip("]")
                if re.match(r"^--[a-z][\w-]*$", flag) and not re.search(re.escape(flag) + r"(?![\w-])", text):
                    errors.append(f"{os.path.relpath(path, self.root)}:{n}: 'frugal {' '.join(command)}' "
                                  f"has no option {flag} (not in its --help)")

    def _missing(self, block):
        """Why this build cannot run the block, or None."""
        lacking = sorted({args[0] for _, args in frugal_calls(block)
                          if args and re.match(r"^[a-z][\w-]*$", args[0]) and args[0] not in self.built})
        if lacking:
            return "the binary has no " + ", ".join(lacking)
        text = "\n".join(line for _, line in block)
        if not self.has_package and re.search(r"\bpython3?\b", text):
            return "the build has no Python package"
        return None

    def run(self, path, block, errors):
        where = f"{os.path.relpath(path, self.root)}:{block.start}"
        if block.info[0] not in SHELLS:
            errors.append(f"{where}: 'run' marks a block of language '{block.info[0]}'; only {', '.join(SHELLS)} run")
            return
        why = self._missing(block)
        if why:
            print(f"check_docs: {where}: skipped, {why}")
            self.skipped += 1
            return
        work = tempfile.mkdtemp(prefix="check_docs_run_")
        try:
            for entry in os.listdir(self.root):
                if not entry.startswith(".") and entry != "build":
                    os.symlink(os.path.join(self.root, entry), os.path.join(work, entry))
            os.symlink(self.build, os.path.join(work, "build"))
            env = dict(os.environ, PATH=self.bin_dir + os.pathsep + os.environ.get("PATH", ""),
                       PYTHONPATH=os.path.join(self.build, "python"))
            script = "set -e -o pipefail\n" + "\n".join(line for _, line in block) + "\n"
            began = time.monotonic()
            # Its own process group, so that a timeout ends the workers a
            # command started too, not only bash.
            proc = subprocess.Popen(["bash", "-c", script], cwd=work, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    start_new_session=True)
            try:
                output, _ = proc.communicate(timeout=self.timeout)
                failure = None if proc.returncode == 0 else f"exit {proc.returncode}"
            except subprocess.TimeoutExpired:
                failure = f"still running after {self.timeout:g} s"
            finally:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if failure and failure.startswith("still"):
                output, _ = proc.communicate()
            self.ran += 1
            print(f"check_docs: {where}: {failure or 'ok'} ({time.monotonic() - began:.1f} s)")
            if failure:
                tail = "\n".join("    " + line for line in output.strip().splitlines()[-15:])
                errors.append(f"{where}: runnable block failed: {failure}\n{tail}")
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def close(self):
        shutil.rmtree(self.bin_dir, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--build", help="build folder holding frugal (and python/frugal): run the runnable blocks")
    ap.add_argument("--python", help="the Python the docs' python3 means (the build's FRUGAL_PYTHON)")
    ap.add_argument("--timeout", type=float, default=60, help="seconds one runnable block may take")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    commands = cli_commands(root)
    if not commands:
        print(f"check_docs: no subcommands found under {root}/src/cli", file=sys.stderr)
        return 1
    runner = None
    if args.build:
        build = os.path.abspath(args.build)
        if not os.access(os.path.join(build, "frugal"), os.X_OK):
            print(f"check_docs: no frugal binary in {build}", file=sys.stderr)
            return 1
        runner = Runner(root, build, args.python, args.timeout)
    docs = [os.path.join(root, "README.md"), os.path.join(root, "data", "README.md")]
    docs += glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True)
    docs += glob.glob(os.path.join(root, "bench", "*", "README.md"))
    errors = []
    checked = 0
    try:
        for path in sorted(set(docs)):
            if not os.path.exists(path):
                continue
            checked += 1
            prose, blocks = split_blocks(open(path, encoding="utf-8").read())
            check_links(root, path, prose, errors)
            rel = os.path.relpath(path, root)
            if rel == "README.md" or rel.startswith("docs" + os.sep + "guide" + os.sep):
                check_commands(root, path, blocks, commands, errors)
                if runner:
                    runner.check_flags(path, blocks, errors)
            if is_product_text(rel):
                check_history(rel, prose, errors)
            for block in blocks:
                if block.runnable() and runner:
                    runner.run(path, block, errors)
    finally:
        if runner:
            runner.close()
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(f"check_docs: {len(errors)} problem(s) in {checked} files", file=sys.stderr)
        return 1
    ran = f", {runner.ran} runnable blocks ran ({runner.skipped} skipped)" if runner else ", runnable blocks not run (no --build)"
    flags = ", their flags exist" if runner else ""
    print(f"check_docs: {checked} files, links resolve, named subcommands exist{flags}, no history in product text{ran}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
