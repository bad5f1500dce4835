#!/usr/bin/python3
"""Runs the shell blocks of a documentation page as a user would type them.

The convention (docs/development.md, "Docs are tests"):

* A command a user may copy is a fenced block tagged ``sh`` (or ``python``
  for a Python snippet); what a program prints is a fenced block tagged
  ``text`` (files: ``ini``, ``json``, ``cmake``, ``cpp``). Indented code
  blocks of commands are refused, so nothing runnable hides from this script.
* Every ``sh`` and ``python`` block is preceded by a marker comment, either
  ``<!-- test -->`` (run it) or ``<!-- skip: why -->`` (not run here, and
  why). A test marker may hold lines of ``key: value``:

    expect: REGEX        the block's output must match (re.search, MULTILINE)
    figure: REGEX in A..B   the first group of REGEX, a number, lies in [A, B]
                         (checked whenever the block runs as written: not
                         in a shortened run of a block with fast: lines)
    status: N            the exit status the block must end with (default 0)
    fast: OLD => NEW     unless DOCS_FULL=1, the text OLD of the block is
                         replaced by NEW (e.g. fewer steps); OLD must occur
    timeout: SECONDS     the block's limit (default 900)

Blocks run in order with bash in a scratch directory laid out like a clone
(``build/release`` is the build under test, ``data/`` a copy of the
repository's, ``scripts/`` and the like linked), with the built tools on PATH
and Open MPI's root and oversubscription settings in the environment. A page
whose first marker is ``<!-- docs-page: after OTHER.md -->`` runs in OTHER's
scratch directory, after it, so it can use what OTHER made.

Usage: run_doc_blocks.py --source DIR --build DIR --scratch DIR [--lint] PAGE...
With --lint the pages are only checked (markers, no indented code blocks).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import time

RUNNABLE = ("sh", "python")
PYTHON = sys.executable  # the tests' python: the torch wheel's venv, which also sees Debian's h5py and numpy
FENCE = re.compile(r"^(```+|~~~+)\s*([\w-]*)\s*$")
MARKER = re.compile(r"^<!--\s*(test|skip:|docs-page:)(.*?)(-->)?\s*$")
COMMAND_WORDS = ("build/", "mpirun", "srun", "sbatch", "wantrain", "wandata", "wansample", "wanbench", "csvfit",
                 "scripts/", "cmake", "ctest", "module", "python3", "mpi/", "slurm/", "export ", "tensorboard")


class PageError(Exception):
    pass


class Block:
    def __init__(self, page, line, text):
        self.page, self.line, self.text = page, line, text
        self.skip = None
        self.expect, self.figures, self.fast = [], [], []
        self.status, self.timeout = 0, 900
        self.language = "sh"

    def where(self):
        return f"{self.page}:{self.line}"


def parse_marker(page, line_no, lines, start):
    """The marker comment that starts at lines[start]: (kind, body, next index)."""
    first = lines[start].strip()
    m = MARKER.match(first)
    kind, rest, closed = m.group(1), m.group(2), m.group(3)
    body = [rest.strip()] if rest.strip() else []
    i = start + 1
    while not closed:
        if i >= len(lines):
            raise PageError(f"{page}:{line_no}: marker comment never closed with -->")
        text = lines[i].rstrip("\n")
        if text.strip().endswith("-->"):
            text = text.strip()[:-3]
            closed = True
        if text.strip():
            body.append(text.strip())
        i += 1
    return kind, body, i


def apply_marker(block, kind, body):
    if kind == "skip:":
        reason = " ".join(body).strip()
        if not reason:
            raise PageError(f"{block.where()}: <!-- skip: --> needs the reason")
        block.skip = reason
        return
    for entry in body:
        key, _, value = entry.partition(":")
        key, value = key.strip(), value.strip()
        if key == "expect":
            block.expect.append(value)
        elif key == "figure":
            m = re.match(r"^(.*) in (-?[\d.e+-]+)\.\.(-?[\d.e+-]+)$", value)
            if not m:
                raise PageError(f"{block.where()}: figure must read 'REGEX in LOW..HIGH', got {value!r}")
            block.figures.append((m.group(1), float(m.group(2)), float(m.group(3))))
        elif key == "status":
            block.status = int(value)
        elif key == "timeout":
            block.timeout = int(value)
        elif key == "fast":
            old, sep, new = value.partition(" => ")
            if not sep:
                raise PageError(f"{block.where()}: fast must read 'OLD => NEW', got {value!r}")
            block.fast.append((old, new))
        else:
            raise PageError(f"{block.where()}: unknown marker key {key!r}")


def parse_page(path, name):
    """The page's sh blocks with their markers, and the page it runs after."""
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    blocks, after, pending = [], None, None
    i, in_fence, prev_blank = 0, None, True
    while i < len(lines):
        raw = lines[i].rstrip("\n")
        stripped = raw.strip()
        if in_fence:
            if stripped.startswith(in_fence[0]) and FENCE.match(stripped):
                if in_fence[1] in RUNNABLE:
                    block = Block(name, in_fence[2], "".join(in_fence[3]))
                    block.language = in_fence[1]
                    if pending is None:
                        raise PageError(f"{block.where()}: a {block.language} block without a <!-- test --> or "
                                        "<!-- skip: why --> marker before it")
                    apply_marker(block, *pending)
                    for old, _ in block.fast:
                        if old not in block.text:
                            raise PageError(f"{block.where()}: fast: {old!r} is not in the block")
                    blocks.append(block)
                    pending = None
                in_fence = None
            else:
                in_fence[3].append(lines[i])
            i += 1
            continue
        m = FENCE.match(stripped)
        if m:  # at any indentation: a fence in a list item is indented with it
            lang = m.group(2)
            if lang not in RUNNABLE + ("text", "ini", "json", "cmake", "cpp"):
                raise PageError(f"{name}:{i + 1}: tag a fenced block sh or python (a command: marked) or text, ini, "
                                f"json, cmake, cpp (not run), not {lang or 'untagged'!r}")
            if lang not in RUNNABLE and pending is not None:
                raise PageError(f"{name}:{i + 1}: a marker before a {lang} block; only sh and python blocks run")
            in_fence = (m.group(1), lang, i + 2, [])
            i += 1
            continue
        if MARKER.match(stripped):
            kind, body, nxt = parse_marker(name, i + 1, lines, i)
            if kind == "docs-page:":
                m2 = re.match(r"^after\s+(\S+)$", " ".join(body))
                if not m2:
                    raise PageError(f"{name}:{i + 1}: docs-page must read 'after PAGE'")
                after = m2.group(1)
            else:
                pending = (kind, body)
            i = nxt
            continue
        if raw.startswith("    ") and stripped and prev_blank and not re.match(r"^\s*([-*+]|\d+\.)\s", raw):
            # An indented code block (not a list's continuation, which follows a list item).
            if stripped.startswith(COMMAND_WORDS) or stripped.startswith("$ "):
                raise PageError(f"{name}:{i + 1}: an indented code block; fence it as ```sh (with a marker) "
                                "or ```text")
        if stripped and not MARKER.match(stripped):
            if pending is not None and not stripped.startswith("<!--"):
                raise PageError(f"{name}:{i + 1}: a marker must come right before its ```sh block")
        prev_blank = not stripped
        i += 1
    if in_fence:
        raise PageError(f"{name}: a fenced block is never closed")
    if pending is not None:
        raise PageError(f"{name}: a marker at the end of the page has no block")
    return blocks, after


def prepare_scratch(source, build, scratch):
    if os.path.exists(scratch):
        shutil.rmtree(scratch)
    os.makedirs(os.path.join(scratch, "build"))
    os.symlink(os.path.abspath(build), os.path.join(scratch, "build", "release"))
    # data/: the repository's configurations and small files, not datasets made in the checkout.
    src_data = os.path.join(source, "data")
    for root, dirs, files in os.walk(src_data):
        rel = os.path.relpath(root, src_data)
        dirs[:] = [d for d in dirs if not any(os.path.exists(os.path.join(root, d, probe))
                                              for probe in ("shard-00000.h5",)) and not d.startswith("synth")]
        os.makedirs(os.path.join(scratch, "data", rel), exist_ok=True)
        for f in files:
            if not f.endswith(".h5"):
                shutil.copy2(os.path.join(root, f), os.path.join(scratch, "data", rel, f))
    for name in ("scripts", "slurm", "mpi", "tests", "docs", "cmake", "CMakeLists.txt", "CMakePresets.json", "lib",
                 "apps"):
        if os.path.exists(os.path.join(source, name)):
            os.symlink(os.path.join(source, name), os.path.join(scratch, name))


def environment(build):
    env = dict(os.environ)
    tools = [os.path.join(os.path.abspath(build), "apps", t) for t in
             ("wantrain", "wandata", "wansample", "wanbench", "csvfit")]
    env["PATH"] = os.pathsep.join(tools + [env.get("PATH", "")])
    env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                "OMPI_MCA_rmaps_base_oversubscribe": "1", "NO_COLOR": "1"})
    return env


def run_block(block, scratch, env, fast, log_dir):
    text = block.text
    if fast:
        for old, new in block.fast:
            if old not in text:
                raise PageError(f"{block.where()}: fast: {old!r} is not in the block")
            text = text.replace(old, new)
    if block.language == "python":
        command = [PYTHON, "-c", text]
    else:
        command = ["bash", "-c", "set -o pipefail\n" + (text if block.status != 0 else "set -e\n" + text)]
    start = time.monotonic()
    try:
        done = subprocess.run(command, cwd=scratch, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=block.timeout)
        output, status = done.stdout.decode("utf-8", "replace"), done.returncode
    except subprocess.TimeoutExpired as e:
        output = (e.stdout or b"").decode("utf-8", "replace")
        status = None
    seconds = time.monotonic() - start
    log = os.path.join(log_dir, f"{block.page.replace('/', '_')}-{block.line}.log")
    with open(log, "w", encoding="utf-8") as f:
        f.write(f"$ {text}\n{output}")
    problems = []
    if status is None:
        problems.append(f"did not finish within {block.timeout} s")
    elif status != block.status:
        problems.append(f"exit status {status}, the docs say {block.status}")
    for pattern in block.expect:
        if not re.search(pattern, output, re.MULTILINE):
            problems.append(f"no line matches {pattern!r}")
    # Figures hold for the runs as documented: a shortened block's figures are not checked. A block whose
    # figures depend on what a shortened block made must itself carry a fast: line.
    shortened = fast and bool(block.fast)
    for pattern, low, high in ([] if shortened else block.figures):
        m = re.search(pattern, output, re.MULTILINE)
        if not m:
            problems.append(f"no figure matches {pattern!r}")
            continue
        value = float(m.group(1))
        if not low <= value <= high:
            problems.append(f"figure {value} of {pattern!r} is outside the documented {low}..{high}")
    print(f"== {block.where()} ({seconds:.1f} s): {'ok' if not problems else 'FAILED'}")
    for line in text.strip().splitlines():
        print(f"   $ {line}")
    if problems:
        tail = output.strip().splitlines()[-40:]
        print("\n".join("   | " + line for line in tail))
        for p in problems:
            print(f"   FAILED: {p}")
    sys.stdout.flush()
    return not problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", required=True)
    parser.add_argument("--build")
    parser.add_argument("--scratch")
    parser.add_argument("--lint", action="store_true")
    parser.add_argument("pages", nargs="+")
    args = parser.parse_args()
    # Shortened by default (a new user's `ctest` is quick); DOCS_FULL=1 runs every block as written.
    fast = os.environ.get("DOCS_FULL", "") in ("", "0")
    failed = 0
    for page in args.pages:
        try:
            blocks, after = parse_page(os.path.join(args.source, page), page)
        except PageError as e:
            print(f"docs: {e}")
            failed += 1
            continue
        if args.lint:
            run, skipped = sum(b.skip is None for b in blocks), sum(b.skip is not None for b in blocks)
            print(f"docs: {page}: {run} blocks to run, {skipped} skipped")
            continue
        chain = (after or page).replace("/", "_").replace(".md", "")
        scratch = os.path.join(os.path.abspath(args.scratch), chain)
        if after is None:
            prepare_scratch(args.source, args.build, scratch)
        elif not os.path.isdir(scratch):
            print(f"docs: {page} runs after {after}, which has not run (no {scratch})")
            failed += 1
            continue
        log_dir = os.path.join(scratch, ".docs-logs")
        os.makedirs(log_dir, exist_ok=True)
        env = environment(args.build)
        print(f"docs: {page} in {scratch}{' (shortened; DOCS_FULL=1 runs it as written)' if fast else ' (DOCS_FULL)'}")
        for block in blocks:
            if block.skip is not None:
                print(f"== {block.where()}: skipped: {block.skip}")
                continue
            try:
                if not run_block(block, scratch, env, fast, log_dir):
                    failed += 1
                    break  # later blocks build on this one
            except PageError as e:
                print(f"docs: {e}")
                failed += 1
                break
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
