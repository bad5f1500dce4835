#!/usr/bin/env python3
"""The library's layering, checked on every build (ctest -L layering).

  check_layers.py includes SOURCE_DIR
      Every lib/<layer>/ file includes only its own layer and the layers
      below it (docs/development.md, "Layout rules"); inside lib/wan, every
      lib/wan/<floor>/ file includes only its own floor and the floors below
      it (WAN_FLOORS, acyclic), and lib/wan/CMakeLists.txt has one target
      per floor that builds exactly that folder's sources and links only
      the floors below it; and no library file
      below app prints: no spdlog, iostream or stdio output outside util/log,
      util/fatal and util/progress (the library reports through
      util/reporter.hpp).

  check_layers.py links CSVFIT BUILD_DIR
      csvfit links no Wan code: its link line (Makefiles' link.txt or
      build.ninja) names no libwantrain_wan_*.a, and the binary holds no
      symbol of namespace wt::wan.

One line per violation and exit status 1; "ok: ..." and 0 otherwise.
"""
import pathlib
import re
import subprocess
import sys

# Each layer and the layers it may include, besides itself. Lowest first;
# the same table as docs/development.md's diagram.
ALLOWED = {
    "util": set(),
    "io": {"util"},
    "media": {"util"},
    "report": {"util"},
    "distributed": {"util"},
    "nn": {"util"},
    "data": {"io", "util"},
    "ckpt": {"io", "util"},
    "train": {"ckpt", "data", "nn", "distributed", "report", "media", "io", "util"},
    "wan": {"train", "ckpt", "data", "nn", "distributed", "report", "media", "io", "util"},
    # The app layer (main(), the shared training options) serves csvfit too:
    # it stays off wan, and the Wan tools link wan themselves.
    "app": {"train", "ckpt", "data", "nn", "distributed", "report", "media", "io", "util"},
}
# lib/wan's floors and the floors each may include directly, besides itself
# (and what those may, transitively). The same table as lib/wan/CMakeLists.txt
# and docs/development.md's diagram.
WAN_FLOORS = {
    "model": set(),
    "vae": {"model"},
    "encoders": {"model"},
    "plan": {"vae", "model"},
    "sample": {"plan", "encoders", "vae", "model"},
    "objective": {"model"},
    "run": {"objective", "sample", "plan", "model"},
    "encode": {"sample", "encoders", "vae", "model"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"wantrain/([a-z_]+)/')
WAN_INCLUDE = re.compile(r'^\s*#\s*include\s+"wantrain/wan/([a-z_]+)/')
# Printing, in code (comments are stripped first): the library reports instead.
PRINTING = re.compile(r"#\s*include\s*<(spdlog/|iostream>)|#\s*include\s+\"wantrain/util/log\.hpp\"|"
                      r"std::(cout|cerr|clog)\b|\bfmt::print\s*\(|\b(f|v|vf)?printf\s*\(|\bf?puts\s*\(|\bfputc\s*\(")
# The log itself, the fatal line before MPI_Abort, and the progress bar, which
# draws on the stream its owner passes (TrainLogOptions::stream).
MAY_PRINT = {"util/log.hpp", "util/log.cpp", "util/fatal.hpp", "util/fatal.cpp", "util/progress.hpp",
             "util/progress.cpp"}


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda block: "\n" * block.group(0).count("\n"), text, flags=re.S)
    return "\n".join(line.split("//", 1)[0] if '"' not in line.split("//", 1)[0] else line for line in text.split("\n"))


def wan_floors_below():
    """Each floor's transitive floors below; ValueError on a cycle in the table."""
    below, visiting = {}, set()

    def visit(floor):
        if floor in below:
            return below[floor]
        if floor in visiting:
            raise ValueError(f"WAN_FLOORS has a cycle through {floor}")
        visiting.add(floor)
        reach = set()
        for lower in WAN_FLOORS[floor]:
            reach |= {lower} | visit(lower)
        visiting.discard(floor)
        below[floor] = reach
        return reach

    for floor in WAN_FLOORS:
        visit(floor)
    return below


def check_wan_targets(lib, below):
    """lib/wan/CMakeLists.txt: one static target per floor, building that folder's sources, linking floors below."""
    problems = []
    cmake = (lib / "wan" / "CMakeLists.txt").read_text()
    cmake = "\n".join(line.split("#", 1)[0] for line in cmake.split("\n"))
    for floor in WAN_FLOORS:
        target = f"wantrain_wan_{floor}"
        library = re.search(rf"add_library\({target}\s+STATIC\s+([^)]*)\)", cmake)
        if not library:
            problems.append(f"lib/wan/CMakeLists.txt: no static target {target} for the floor lib/wan/{floor}")
            continue
        sources = set(library.group(1).split())
        folder = {f"{floor}/{p.name}" for p in (lib / "wan" / floor).glob("*.cpp")}
        problems += [f"lib/wan/CMakeLists.txt: {target} builds {s}, outside lib/wan/{floor}" for s in sorted(sources - folder)]
        problems += [f"lib/wan/CMakeLists.txt: lib/wan/{s} is in no target (the floor's is {target})"
                     for s in sorted(folder - sources)]
        links = re.search(rf"target_link_libraries\({target}\s+([^)]*)\)", cmake)
        for other in re.findall(r"wantrain::wan_([a-z_]+)", links.group(1) if links else ""):
            if other != floor and other not in below[floor]:
                problems.append(f"lib/wan/CMakeLists.txt: {target} links wantrain::wan_{other}, a floor above it or beside it")
    for folder in sorted(p.name for p in (lib / "wan").iterdir() if p.is_dir()):
        if folder not in WAN_FLOORS:
            problems.append(f"lib/wan/{folder}: a folder that is not a floor of WAN_FLOORS in {__file__}")
    return problems


def check_includes(source):
    lib = pathlib.Path(source) / "lib"
    problems, files = [], 0
    layers = sorted(p.name for p in lib.iterdir() if p.is_dir())
    try:
        below = wan_floors_below()
    except ValueError as cycle:
        return [str(cycle)], ""
    problems += check_wan_targets(lib, below)
    for layer in layers:
        if layer not in ALLOWED:
            problems.append(f"lib/{layer}: a folder that is not a layer of the table in {__file__}")
            continue
        for path in sorted((lib / layer).rglob("*")):
            if path.suffix not in (".hpp", ".cpp", ".h", ".cu"):
                continue
            files += 1
            rel = path.relative_to(lib).as_posix()
            floor = rel.split("/")[1] if layer == "wan" and rel.count("/") >= 2 else None
            text = path.read_text()
            for number, line in enumerate(text.split("\n"), 1):
                match = INCLUDE.match(line)
                if match and match.group(1) != layer and match.group(1) not in ALLOWED[layer]:
                    problems.append(f"lib/{rel}:{number}: {layer} includes {match.group(1)}, a layer above it or beside it: "
                                    f"{line.strip()}")
                inner = WAN_INCLUDE.match(line)
                if inner and floor in WAN_FLOORS and inner.group(1) != floor and inner.group(1) not in below[floor]:
                    problems.append(f"lib/{rel}:{number}: wan/{floor} includes wan/{inner.group(1)}, a floor above it or "
                                    f"beside it: {line.strip()}")
            if layer != "app" and rel not in MAY_PRINT:
                for number, line in enumerate(strip_comments(text).split("\n"), 1):
                    if PRINTING.search(line):
                        problems.append(f"lib/{rel}:{number}: library code prints (report through util/reporter.hpp): "
                                        f"{line.strip()}")
    return problems, (f"{files} library files in {len(layers)} layers (lib/wan in {len(WAN_FLOORS)} floors, a target each) "
                      "include only downwards and print nothing")


def link_line(build):
    build = pathlib.Path(build)
    link_txt = build / "apps/csvfit/CMakeFiles/csvfit.dir/link.txt"
    if link_txt.exists():
        return link_txt, link_txt.read_text()
    ninja = build / "build.ninja"
    if ninja.exists():
        statement = re.search(r"^build apps/csvfit/csvfit:.*?(?=^\S|\Z)", ninja.read_text(), re.M | re.S)
        if statement:
            return ninja, statement.group(0)
    return None, None


def check_links(binary, build):
    problems = []
    where, line = link_line(build)
    if line is None:
        problems.append(f"{build}: no link line of csvfit found (link.txt or build.ninja)")
    elif "libwantrain_wan.a" in line or "wantrain_wan" in line:
        problems.append(f"{where}: csvfit's link line names the Wan library")
    elif "libwantrain_train.a" not in line:
        problems.append(f"{where}: csvfit's link line names no libwantrain_train.a: not the line this check is about")
    symbols = subprocess.run(["nm", "-C", binary], capture_output=True, text=True, check=True).stdout
    wan = sorted({s.split(" ", 2)[-1] for s in symbols.splitlines() if "wt::wan::" in s})
    if wan:
        problems.append(f"{binary}: {len(wan)} symbols of wt::wan, e.g. {wan[0]}")
    if not re.search(r"wt::train::fit\(", symbols):
        problems.append(f"{binary}: no wt::train::fit: not the csvfit this check is about")
    return problems, "csvfit links the engine (wt::train::fit) and no Wan code"


# LibTorch's CUDA backend and what it brings: loaded at run time where a CUDA
# driver is (lib/distributed/cuda_libraries.hpp), never a program's own need.
CUDA_LIBRARIES = re.compile(r"lib(torch_cuda|c10_cuda|cudart|nccl|cublas|cublasLt|cudnn)\.so")


def check_needed(binaries):
    problems = []
    for binary in binaries:
        dynamic = subprocess.run(["readelf", "-d", binary], capture_output=True, text=True, check=True).stdout
        needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic)
        if not any(name.startswith("libtorch_cpu.so") for name in needed):
            problems.append(f"{binary}: needs no libtorch_cpu.so: not a program this check is about")
        problems += [f"{binary}: needs {name}" for name in needed if CUDA_LIBRARIES.match(name)]
    return problems, f"{len(binaries)} programs need LibTorch's CPU library and no CUDA library"


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "includes":
        problems, ok = check_includes(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "links":
        problems, ok = check_links(sys.argv[2], sys.argv[3])
    elif len(sys.argv) >= 3 and sys.argv[1] == "needed":
        problems, ok = check_needed(sys.argv[2:])
    else:
        print(__doc__)
        return 2
    for problem in problems:
        print(problem)
    if not problems:
        print("ok:", ok)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
