"""Reading the metrics.jsonl files that frugal and bench/baselines/ddp.py write."""
import json
import os


def read_jsonl(path):
    """The records of a JSON-lines file; [] if it does not exist. A line cut
    short by a killed process is skipped."""
    recs = []
    if not os.path.exists(path):
        return recs
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    recs.append(json.loads(line))
                except ValueError:
                    pass
    return recs
