#!/usr/bin/env python3
"""The per-test time budget of the test command (docs/development.md, "Time budget").

Reads the JUnit file that `ctest --output-junit` wrote and fails when a test
took longer than 120 s without being listed, with its own limit, in the
allowed file (tests/budget/long-tests.txt: `name seconds  # why`), or longer
than its listed limit. Prints the slowest tests.

  check_test_times.py --allowed tests/budget/long-tests.txt build/release/test-times.xml
  check_test_times.py ... --table 20        # the markdown table of development.md
"""
import argparse
import sys
import xml.etree.ElementTree as ET

DEFAULT_LIMIT = 120.0


def read_allowed(path):
    allowed = {}
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            fields = line.split()
            if len(fields) != 2:
                sys.exit(f"{path}:{number}: expected `test-name seconds`, got {line!r}")
            try:
                allowed[fields[0]] = float(fields[1])
            except ValueError:
                sys.exit(f"{path}:{number}: seconds {fields[1]!r} is not a number")
    return allowed


def read_times(path):
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        sys.exit(f"check_test_times: cannot read {path}: {e}")
    times = {}
    for case in root.iter("testcase"):
        if case.get("status") == "notrun":
            continue
        times[case.get("name")] = float(case.get("time", "0"))
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("junit", help="the file of ctest --output-junit")
    parser.add_argument("--allowed", required=True, help="tests allowed over 120 s, with their limits")
    parser.add_argument("--slowest", type=int, default=10, help="how many of the slowest tests to print")
    parser.add_argument("--table", type=int, default=0, help="print the N slowest as a markdown table instead")
    args = parser.parse_args()

    allowed = read_allowed(args.allowed)
    times = read_times(args.junit)
    slowest = sorted(times.items(), key=lambda kv: -kv[1])

    if args.table:
        print("| test | seconds |\n| --- | ---: |")
        for name, seconds in slowest[: args.table]:
            print(f"| `{name}` | {seconds:.0f} |")
        return 0

    print(f"check_test_times: {len(times)} tests, {sum(times.values()):.0f} s in all; the slowest:")
    for name, seconds in slowest[: args.slowest]:
        print(f"  {seconds:7.1f} s  {name}")
    over = []
    for name, seconds in slowest:
        limit = allowed.get(name, DEFAULT_LIMIT)
        if seconds > limit:
            where = f"its limit in {args.allowed}" if name in allowed else \
                f"{DEFAULT_LIMIT:.0f} s, and it is not in {args.allowed}"
            over.append(f"check_test_times: {name} took {seconds:.0f} s, over {where}")
    for line in over:
        print(line, file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
