#!/usr/bin/env bash
# Draws docs/images/targets.png: the library's CMake targets and their links
# as the build declares them (CMake's --graphviz), transitively reduced
# (Graphviz's tred: an edge implied by a longer path is left out), so that
# each arrow is a floor standing on the one below. Regenerate it after a
# change to the targets: scripts/draw-targets.sh (needs Graphviz:
# apt-get install graphviz; configures a scratch build directory, ~1 min).
set -euo pipefail
cd "$(dirname "$0")/.."
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# The library's own targets only: no tests, programs, generated or imported ones.
cat >"$scratch/CMakeGraphVizOptions.cmake" <<'OPTIONS'
set(GRAPHVIZ_EXTERNAL_LIBS FALSE)
set(GRAPHVIZ_EXECUTABLES FALSE)
set(GRAPHVIZ_INTERFACE_LIBS FALSE)
set(GRAPHVIZ_GENERATE_PER_TARGET FALSE)
set(GRAPHVIZ_GENERATE_DEPENDERS FALSE)
set(GRAPHVIZ_IGNORE_TARGETS "_tests$;_test$;^wantrain_(torch_pch|warnings|malloc|tensor_memory|core|fuzz|report_proto|csv)")
OPTIONS
torch=$(scripts/install-torch.sh)
cmake -S . -B "$scratch" -G Ninja -DCMAKE_BUILD_TYPE=Release -DWANTRAIN_BUILD_TESTS=OFF \
  -DCMAKE_PREFIX_PATH="$("$torch/bin/python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')" \
  --graphviz="$scratch/targets.dot" >"$scratch/configure.log" 2>&1 || { cat "$scratch/configure.log"; exit 1; }
# Node labels without the wantrain_ prefix; edges' link kinds dropped (tred keeps the graph's shape).
python3 - "$scratch/targets.dot" >"$scratch/named.dot" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
names = dict(re.findall(r'"(node\d+)" \[ label = "([^"]+)"', text))
keep = {node: name.split("\\n")[0].removeprefix("wantrain_") for node, name in names.items()
        if name.startswith("wantrain_")}
print('digraph targets {\n  rankdir=BT; node [shape=box, fontname="Helvetica", fontsize=11, style=rounded];')
for node, name in sorted(keep.items(), key=lambda item: item[1]):
    print(f'  "{name}";')
for a, b in sorted(set(re.findall(r'"(node\d+)" -> "(node\d+)"', text))):
    if a in keep and b in keep:
        print(f'  "{keep[a]}" -> "{keep[b]}";')
print("}")
PY
tred "$scratch/named.dot" | dot -Tpng -Gdpi=96 -o docs/images/targets.png
echo "wrote docs/images/targets.png"
