"""Write tests/file_seconds.json, each test file's seconds, from the log of a suite run with
``--durations=0`` (read on stdin): the suite starts its longest files first (tests/conftest.py).

    python -m pytest -n logical --maxprocesses 4 --durations=0 | python tests/file_seconds.py
"""

from __future__ import annotations

import collections
import json
import re
import sys
from pathlib import Path

LINE = re.compile(r"([\d.]+)s (?:call|setup|teardown)\s+([^:\s]+)::")


def main() -> None:
    seconds: collections.Counter[str] = collections.Counter()
    for line in sys.stdin:
        if m := LINE.match(line):
            seconds[m.group(2)] += float(m.group(1))
    if not seconds:
        raise SystemExit("file_seconds: no durations on stdin (run pytest with --durations=0)")
    out = Path(__file__).with_name("file_seconds.json")
    out.write_text(json.dumps({f: round(s, 1) for f, s in sorted(seconds.items())}, indent=0) + "\n")
    print(f"{out}: {len(seconds)} files, {sum(seconds.values()):.0f} s")


if __name__ == "__main__":
    main()
