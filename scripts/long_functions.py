#!/usr/bin/env python3
"""Lists C++ functions over N lines (default 80) and files over M lines
(default 500) under the given directories (default: src/).

Heuristic, stdlib only: comments, string/char literals and preprocessor
lines are blanked out, then braces are matched. A `{` opens a function body
when it is at namespace or class scope and the text before it (since the
last `;`, `{` or `}`) looks like a signature: it has a parameter list and is
not a namespace, class, enum or an initializer (`= {`). Lambdas and local
classes count towards the function that contains them.

A function is "explained" when one of the 3 lines above its signature holds
a comment with `long-function:` ("unless a comment says why"); it
is listed apart and does not fail --check.

Usage: scripts/long_functions.py [--max-lines 80] [--max-file-lines 500]
                                 [--check] [DIR_OR_FILE ...]
Exit 0, or 1 with --check when something unexplained is over a limit.
"""
import argparse
import os
import re
import sys

SOURCE_SUFFIXES = (".cc", ".cpp", ".h", ".hpp")
KEYWORD_HEADS = re.compile(r"^\s*(if|for|while|switch|catch|do|else|try|return)\b")
TYPE_HEADS = re.compile(r"(^|\s)(class|struct|union)\s+[A-Za-z_][\w:]*[^()]*$")
ENUM_HEAD = re.compile(r"(^|\s)enum\b")
NAMESPACE_HEAD = re.compile(r"(^|\s)(namespace\b|extern\s+\"C\")")
ACCESS = re.compile(r"^\s*(public|private|protected)\s*:(?!:)")
EXPLAINED = re.compile(r"long-function:", re.IGNORECASE)


def blank_out(text):
    """Comments, literals and preprocessor lines become spaces; newlines stay."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == "#" :
            j = i
            while j < n and text[j] != "\n":
                if text[j] == "\\" and j + 1 < n and text[j + 1] == "\n":
                    out.append(" \n")
                    j += 2
                    continue
                out.append(" ")
                j += 1
            i = j
            continue
        if c == "\n":
            out.append(c)
            line_start = True
            i += 1
            continue
        if c in " \t":
            out.append(c)
            i += 1
            continue
        line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == 'R' and text.startswith('R"', i):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:j]))
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and (text[i - 1].isalnum()):  # digit separator 1'000
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * max(0, j - i - 2) + c)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def function_name(head):
    """Name before the parameter list at bracket depth 0, or None."""
    depth = 0
    for k, ch in enumerate(head):
        if ch in "<[":
            depth += 1
        elif ch in ">]" and depth > 0:
            depth -= 1
        elif ch == "(" and depth == 0:
            m = re.search(r"((?:[A-Za-z_]\w*::)*~?[A-Za-z_]\w*|operator\s*\S+)\s*$", head[:k])
            return m.group(1) if m else None
    return None


def classify(head):
    """'ns', 'class', 'func' or 'other' for the brace that follows `head`."""
    h = ACCESS.sub("", head).strip()
    if not h:
        return "other"
    if NAMESPACE_HEAD.search(h) and "(" not in h:
        return "ns"
    if ENUM_HEAD.search(h) and "(" not in h:
        return "other"
    if TYPE_HEADS.search(h):
        return "class"
    if KEYWORD_HEADS.match(h) or "(" not in h or ")" not in h:
        return "other"
    # An initializer such as `x = {` or `auto f = [](int) {` (outside parens).
    depth = 0
    for k, ch in enumerate(h):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "=" and depth == 0:
            prev = h[k - 1] if k else ""
            nxt = h[k + 1] if k + 1 < len(h) else ""
            if prev not in "=!<>" and nxt != "=" and not h[:k].rstrip().endswith("operator"):
                return "other"
    return "func" if function_name(h) else "other"


def functions(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        raw = f.read()
    text = blank_out(raw)
    raw_lines = raw.split("\n")
    found = []
    stack = []  # (kind, name, start_line)
    head_start = 0
    line = 1
    for i, ch in enumerate(text):
        if ch == "\n":
            line += 1
        elif ch in ";":
            head_start = i + 1
        elif ch == "{":
            inside_function = any(kind in ("func", "other") for kind, _, _ in stack)
            kind, name, start = "other", None, line
            if not inside_function:
                head = text[head_start:i]
                kind = classify(head)
                if kind == "func":
                    name = function_name(ACCESS.sub("", head).strip())
                    lead = len(head) - len(head.lstrip())
                    start = text.count("\n", 0, head_start + lead) + 1
                    if ACCESS.match(head):
                        start = text.count("\n", 0, head_start + ACCESS.match(head).end()) + 1
                        stripped = head[ACCESS.match(head).end():]
                        start += stripped[: len(stripped) - len(stripped.lstrip())].count("\n")
            stack.append((kind, name, start))
            head_start = i + 1
        elif ch == "}":
            if stack:
                kind, name, start = stack.pop()
                if kind == "func":
                    above = raw_lines[max(0, start - 4): start - 1]
                    explained = any(EXPLAINED.search(l) for l in above)
                    found.append((name, start, line - start + 1, explained))
            head_start = i + 1
    return found, len(raw_lines) - (1 if raw.endswith("\n") else 0)


def walk(paths):
    for p in paths:
        if os.path.isfile(p):
            yield p
            continue
        for root, dirs, files in os.walk(p):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(files):
                if name.endswith(SOURCE_SUFFIXES):
                    yield os.path.join(root, name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", default=["src"])
    ap.add_argument("--max-lines", type=int, default=80)
    ap.add_argument("--max-file-lines", type=int, default=500)
    ap.add_argument("--check", action="store_true", help="exit 1 when anything unexplained is over a limit")
    args = ap.parse_args()
    long_funcs, explained, long_files = [], [], []
    for path in walk(args.paths):
        funcs, nlines = functions(path)
        if nlines > args.max_file_lines:
            long_files.append((path, nlines))
        for name, start, length, why in funcs:
            if length > args.max_lines:
                (explained if why else long_funcs).append((path, start, name, length))
    print(f"files over {args.max_file_lines} lines: {len(long_files)}")
    for path, nlines in sorted(long_files, key=lambda x: -x[1]):
        print(f"  {path}: {nlines} lines")
    print(f"functions over {args.max_lines} lines: {len(long_funcs)}")
    for path, start, name, length in sorted(long_funcs, key=lambda x: -x[3]):
        print(f"  {path}:{start}: {name} ({length} lines)")
    if explained:
        print(f"over {args.max_lines} lines with a long-function: comment: {len(explained)}")
        for path, start, name, length in sorted(explained, key=lambda x: -x[3]):
            print(f"  {path}:{start}: {name} ({length} lines)")
    return 1 if args.check and (long_funcs or long_files) else 0


if __name__ == "__main__":
    sys.exit(main())
