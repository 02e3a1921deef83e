#!/usr/bin/python3
"""Checks the docs against the tree: every relative link in README.md,
docs/**/*.md, data/README.md and bench/*/README.md names a file or folder
that exists (anchors are not checked), and every `frugal <subcommand>` in a
code block of README.md or docs/guide/ is a subcommand the CLI defines
(read from the add_subcommand calls in src/cli/). Runs nothing else.

  scripts/check_docs.py [--root DIR]      exit 0: clean, 1: problems listed
"""
import argparse
import glob
import os
import re
import sys

LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_LINK = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(\S+)(?:\s+\"[^\"]*\")?\s*$")
FENCE = re.compile(r"^(\s*)(```|~~~)")
CODE_SPAN = re.compile(r"`[^`\n]*`")
TOP = re.compile(r"\bapp\.add_subcommand\(\s*\"([a-z][\w-]*)\"")
NESTED = re.compile(r"\b(\w+)->add_subcommand\(\s*\"([a-z][\w-]*)\"")
ENV = re.compile(r"^[A-Za-z_]\w*=\S*$")


def split_blocks(text):
    """(prose lines, code blocks as lists of (line number, line))."""
    prose, blocks, current = [], [], None
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            if current is None:
                current = []
            else:
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


def check_commands(root, path, blocks, commands, errors):
    for block in blocks:
        for n, line in block:
            line = line.split(" #", 1)[0]
            for segment in re.split(r"&&|\|\||[;|&]", line):
                words = segment.split()
                while words and (ENV.match(words[0]) or words[0] in ("$", "sudo", "exec", "time")):
                    words.pop(0)
                if len(words) >= 2 and words[0] == "nice" and words[1] == "-n":
                    words = words[3:]
                if not words or os.path.basename(words[0]) != "frugal" or len(words) < 2:
                    continue
                sub = words[1]
                if sub.startswith("-") or not re.match(r"^[a-z][\w-]*$", sub):
                    continue
                where = f"{os.path.relpath(path, root)}:{n}"
                if sub not in commands:
                    errors.append(f"{where}: 'frugal {sub}' is not a subcommand (src/cli/)")
                    continue
                children = commands[sub]
                if children and len(words) >= 3 and re.match(r"^[a-z][\w-]*$", words[2]) and words[2] not in children:
                    errors.append(f"{where}: 'frugal {sub} {words[2]}' is not a subcommand of '{sub}' "
                                  f"(it has: {', '.join(sorted(children))})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    commands = cli_commands(root)
    if not commands:
        print(f"check_docs: no subcommands found under {root}/src/cli", file=sys.stderr)
        return 1
    docs = [os.path.join(root, "README.md"), os.path.join(root, "data", "README.md")]
    docs += glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True)
    docs += glob.glob(os.path.join(root, "bench", "*", "README.md"))
    errors = []
    checked = 0
    for path in sorted(set(docs)):
        if not os.path.exists(path):
            continue
        checked += 1
        prose, blocks = split_blocks(open(path, encoding="utf-8").read())
        check_links(root, path, prose, errors)
        rel = os.path.relpath(path, root)
        if rel == "README.md" or rel.startswith("docs" + os.sep + "guide" + os.sep):
            check_commands(root, path, blocks, commands, errors)
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(f"check_docs: {len(errors)} problem(s) in {checked} files", file=sys.stderr)
        return 1
    print(f"check_docs: {checked} files, links resolve and named subcommands exist")
    return 0


if __name__ == "__main__":
    sys.exit(main())
