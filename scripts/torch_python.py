"""Runs the calling script again under the torch wheel's python when the
python running it has no torch: scripts/install-torch.sh's venv (the
LibTorch wantrain is built against), so `scripts/vs_torch.py ...` works as
typed. Imported before torch by the scripts that compare against PyTorch."""
import os
import subprocess
import sys


def ensure_torch():
    try:
        import torch  # noqa: F401
        return
    except ImportError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    venv = subprocess.run([os.path.join(here, "install-torch.sh")], check=True, capture_output=True,
                          text=True).stdout.strip()
    python = os.path.join(venv, "bin", "python")
    if os.path.realpath(sys.prefix) == os.path.realpath(venv):  # its python is a link to the system's
        sys.exit(f"{sys.argv[0]}: torch does not import in {python}")
    os.execv(python, [python] + sys.argv)
