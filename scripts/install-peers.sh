#!/usr/bin/env bash
# Installs the pinned peers (scripts/peer-versions: diffusers, transformers,
# peft, ftfy) into the torch wheel's venv (scripts/install-torch.sh), once per
# machine, and prints the venv's path. They are test dependencies only: the
# tests build tiny models with them, save them as the libraries save models,
# and compare wantrain's outputs with theirs. The programs never import
# Python. torch itself stays as pinned (passed to pip with the peers).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=$("$here/install-torch.sh")
pins=$(grep -v '^#' "$here/peer-versions" | tr -s '[:space:]' ' ')

have_peers() {
  "$venv/bin/python" - $pins <<'PY' 2>/dev/null
import importlib.metadata, sys
for pin in sys.argv[1:]:
    name, version = pin.split("==")
    if importlib.metadata.version(name) != version:
        sys.exit(1)
PY
}
if have_peers; then
  echo "$venv"
  exit 0
fi
exec 9>"$venv.lock"
flock 9
if ! have_peers; then
  torch=$(tr -d '[:space:]' <"$here/torch-version")
  echo "install-peers: installing $pins into $venv (once per machine, about 60 MB)" >&2
  # shellcheck disable=SC2086
  "$venv/bin/pip" install -q --no-cache-dir --disable-pip-version-check $pins "torch==$torch" >&2
  have_peers || { echo "install-peers: $pins did not install into $venv" >&2; exit 1; }
fi
echo "$venv"
