#!/usr/bin/env python3
"""The per-test time budget of the test command (docs/development.md, "Time budget").

Reads the JUnit file that `ctest --output-junit` wrote and fails when a test
took longer than 120 s without being listed, with its own limit, in the
allowed file (tests/budget/long-tests.txt: `name seconds  # why`), or longer
than its listed limit. Prints the slowest tests.

The limits are seconds on the host that measured tests/budget/ctest-costs.txt.
Given that file (--costs), the limits scale with this host's speed: the median,
over the tests that took at least 2 s there, of this run's time over the
recorded one (never below 1). A host 1.5x slower on every test then passes,
while one test grown against the rest still fails.

  check_test_times.py --allowed tests/budget/long-tests.txt \
      --costs tests/budget/ctest-costs.txt build/release/test-times.xml [more.xml]
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


def read_costs(path):
    """CTest's cost file: `name runs average-seconds` lines, then `---` and the failed tests."""
    costs = {}
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("---"):
                    break
                fields = line.split()
                if len(fields) == 3:
                    costs[fields[0]] = float(fields[2])
    except (OSError, ValueError) as e:
        sys.exit(f"check_test_times: cannot read {path}: {e}")
    return costs


def host_factor(times, costs, least=2.0):
    """How much slower this host ran the tests than the one that recorded `costs`."""
    ratios = sorted(times[name] / cost for name, cost in costs.items()
                    if cost >= least and times.get(name, 0) > 0)
    if not ratios:
        return 1.0, 0
    middle = len(ratios) // 2
    median = ratios[middle] if len(ratios) % 2 else (ratios[middle - 1] + ratios[middle]) / 2
    return max(1.0, median), len(ratios)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("junit", nargs="+", help="the files of ctest --output-junit (one run's parts)")
    parser.add_argument("--allowed", required=True, help="tests allowed over 120 s, with their limits")
    parser.add_argument("--costs", help="the recorded costs the limits were set against (ctest-costs.txt)")
    parser.add_argument("--slowest", type=int, default=10, help="how many of the slowest tests to print")
    parser.add_argument("--table", type=int, default=0, help="print the N slowest as a markdown table instead")
    args = parser.parse_args()

    allowed = read_allowed(args.allowed)
    times = {}
    for junit in args.junit:
        times.update(read_times(junit))
    slowest = sorted(times.items(), key=lambda kv: -kv[1])

    if args.table:
        print("| test | seconds |\n| --- | ---: |")
        for name, seconds in slowest[: args.table]:
            print(f"| `{name}` | {seconds:.0f} |")
        return 0

    print(f"check_test_times: {len(times)} tests, {sum(times.values()):.0f} s in all; the slowest:")
    for name, seconds in slowest[: args.slowest]:
        print(f"  {seconds:7.1f} s  {name}")
    factor, compared = host_factor(times, read_costs(args.costs)) if args.costs else (1.0, 0)
    if compared:
        print(f"check_test_times: this host ran {compared} tests at {factor:.2f}x their times in "
              f"{args.costs} (the median; never below 1): the limits are scaled by it")
    over = []
    for name, seconds in slowest:
        limit = allowed.get(name, DEFAULT_LIMIT) * factor
        if seconds > limit:
            where = f"its limit in {args.allowed}" if name in allowed else \
                f"{DEFAULT_LIMIT:.0f} s, and it is not in {args.allowed}"
            scaled = f" ({limit:.0f} s at this host's speed)" if factor > 1 else ""
            over.append(f"check_test_times: {name} took {seconds:.0f} s, over {where}{scaled}")
    for line in over:
        print(line, file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
