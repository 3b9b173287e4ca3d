"""Write tests/durations.json, the seconds each slow test took in a run (``pytest --junitxml FILE``): the tests'
conftest starts the longest first, so that the two workers of ``scripts/test.sh`` finish together instead of one
running the last long test alone (about a minute and a half of the full run's 31).

    python -m pytest -q -n 2 --all --junitxml /tmp/run.xml && python scripts/test_durations.py /tmp/run.xml

Several files: a later one's time wins (an everyday run after a full one). Only tests of at least
``--at-least`` seconds are kept: the order of the quick ones does not matter.
"""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ET
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tests" / "durations.json"


def node_id(case: ET.Element) -> str:
    module = case.get("classname", "").replace(".", "/")
    return f"{module}.py::{case.get('name')}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("junit", nargs="+", type=Path)
    parser.add_argument("--at-least", type=float, default=2.0)
    args = parser.parse_args()
    seconds: dict[str, float] = {}
    for path in args.junit:
        for case in ET.parse(path).getroot().iter("testcase"):
            seconds[node_id(case)] = float(case.get("time", 0))
    kept = {k: round(v, 1) for k, v in sorted(seconds.items()) if v >= args.at_least}
    OUT.write_text(json.dumps(kept, indent=0) + "\n")
    print(f"wrote {OUT}: {len(kept)} tests of at least {args.at_least:g} s")


if __name__ == "__main__":
    main()
