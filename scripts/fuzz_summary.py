#!/usr/bin/env python3
"""One line per fuzz target from ctest's LastTest.log of `ctest -L fuzz`:
executions, executions per second, coverage (edges), features, corpus size,
and whether it crashed. Usage: fuzz_summary.py LastTest.log
"""
import re
import sys


def main():
    text = open(sys.argv[1], errors="replace").read()
    # ctest writes "N/M Test: NAME", the command, "Output:" and the output per test.
    parts = re.split(r"^\d+/\d+ Test: (fuzz_\w+)\s*$", text, flags=re.M)
    for name, block in zip(parts[1::2], parts[2::2]):
        stats = dict(re.findall(r"stat::(\w+):\s+(\d+)", block))
        last = re.findall(r"#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)", block)
        cov = last[-1] if last else ("?", "?", "?", "?")
        crashed = "CRASH" if re.search(r"==\d+== ?ERROR|deadly signal|Test leak|-crash-|-timeout-|-oom-", block) \
            else "ok"
        print(f"{name:18s} execs {stats.get('number_of_executed_units', '?'):>10s}  "
              f"exec/s {stats.get('average_exec_per_sec', '?'):>6s}  cov {cov[1]:>5s}  ft {cov[2]:>6s}  "
              f"corpus {cov[3]:>5s}  {crashed}")


if __name__ == "__main__":
    main()
