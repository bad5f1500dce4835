#!/usr/bin/env python3
"""check_test_times.py on made-up runs: the per-test budget scales with the
host's speed, yet still catches one test grown against the rest.

  check_test_times_test.py tests/budget/check_test_times.py
"""
import os
import subprocess
import sys
import tempfile

SCRIPT = sys.argv[1]

# The recorded host: ten 10-second tests, a 60-second one, and a listed long one.
COSTS = {f"t{i}": 10.0 for i in range(10)} | {"slow": 60.0, "long": 100.0, "tiny": 0.5}


def write_junit(path, times):
    with open(path, "w") as f:
        f.write("<testsuite>\n")
        for name, seconds in times.items():
            f.write(f'<testcase name="{name}" time="{seconds}" status="run"/>\n')
        f.write("</testsuite>\n")


def run(times, directory, parts=1):
    """The check on `times`, written as one JUnit file or split over `parts` (ctest runs in parts)."""
    names = list(times)  # in parts of consecutive names: `slow` and `long` are in the last
    size = -(-len(names) // parts)
    junits = []
    for part in range(parts):
        junits.append(os.path.join(directory, f"times-{part}.xml"))
        write_junit(junits[-1], {name: times[name] for name in names[part * size:(part + 1) * size]})
    costs = os.path.join(directory, "costs.txt")
    with open(costs, "w") as f:
        f.writelines(f"{name} 3 {seconds}\n" for name, seconds in COSTS.items())
        f.write("---\n")
    allowed = os.path.join(directory, "long.txt")
    with open(allowed, "w") as f:
        f.write("# why\nlong 150  # a listed test\n")
    done = subprocess.run([sys.executable, SCRIPT, "--allowed", allowed, "--costs", costs] + junits,
                          capture_output=True, text=True)
    return done.returncode, done.stdout + done.stderr


def scaled(factor, **changes):
    times = {name: seconds * factor for name, seconds in COSTS.items()}
    times.update(changes)
    return times


failures = []


def expect(what, times, status, needle=None, parts=1):
    with tempfile.TemporaryDirectory() as directory:
        code, output = run(times, directory, parts)
    if code != status or (needle and needle not in output):
        failures.append(f"{what}: status {code} (expected {status}), output:\n{output}")


# The recorded host itself: every test inside its limit.
expect("same host", scaled(1.0), 0)
# 2.5x slower everywhere: slow (150 s) and long (250 s) pass at the scaled limits.
expect("slower host", scaled(2.5), 0, "2.50x")
# The same slower host with one test grown 3x against the rest: 450 s > 120 x 2.5.
expect("one grown test", scaled(2.5, slow=450.0), 1, "slow took 450 s, over 120 s")
# The listed test past its own limit at the host's speed: 400 s > 150 x 2.5.
expect("listed test over its limit", scaled(2.5, long=400.0), 1, "long took 400 s, over its limit")
# The same two verdicts when the run's times come in two files.
expect("slower host, two files", scaled(2.5), 0, "2.50x", parts=2)
expect("one grown test, two files", scaled(2.5, slow=450.0), 1, "slow took 450 s, over 120 s", parts=2)
# A faster host does not tighten the limits: 119 s passes at 0.5x.
expect("faster host", scaled(0.5, slow=119.0), 0)
# Without recorded costs the limits are the plain seconds.
with tempfile.TemporaryDirectory() as directory:
    code, output = run(scaled(2.5), directory)
    junit = os.path.join(directory, "times-0.xml")
    plain = subprocess.run([sys.executable, SCRIPT, "--allowed", os.path.join(directory, "long.txt"), junit],
                           capture_output=True, text=True)
    if plain.returncode != 1:
        failures.append(f"no costs: status {plain.returncode} (expected 1)")

for failure in failures:
    print(failure, file=sys.stderr)
print(f"check_test_times_test: {8 - len(failures)} of 8 cases as expected")
sys.exit(1 if failures else 0)
