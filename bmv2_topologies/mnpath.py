"""Make Debian's Mininet importable from the project's venv, and nothing else of Debian's.

Mininet is installed from Debian's ``mininet`` package (its ``mnexec`` helper and Python
module come together: ``apt-get install -y mininet iputils-ping bridge-utils ethtool``). Its
module lives in ``/usr/lib/python3/dist-packages``, which the venv does not see, and adding
that whole directory would mix Debian's other packages into ours. So `ensure_mininet` makes
a directory that holds only a symlink ``mininet -> /usr/lib/python3/dist-packages/mininet``
(``build/mininet-path/`` in the repository, else a temporary directory) and adds it as a site
directory of this process. Mininet imports only the standard library, so that is enough.
Nothing in the venv changes.
"""

from __future__ import annotations

import importlib
import shutil
import site
import sys
import tempfile
from pathlib import Path

DEBIAN_MININET = Path("/usr/lib/python3/dist-packages/mininet")
REPO_ROOT = Path(__file__).resolve().parent.parent
INSTALL_HINT = "apt-get install -y mininet iputils-ping bridge-utils ethtool"


class MininetMissing(ImportError):
    """Mininet (or its mnexec helper) is not installed."""


def _shim_dir() -> Path:
    for base in (REPO_ROOT / "build" / "mininet-path", Path(tempfile.gettempdir()) / "ina-mnpath"):
        try:
            base.mkdir(parents=True, exist_ok=True)
            link = base / "mininet"
            if link.is_symlink() and link.resolve() != DEBIAN_MININET.resolve():
                link.unlink()
            if not link.exists():
                link.symlink_to(DEBIAN_MININET)
            return base
        except OSError:
            continue
    raise MininetMissing(f"cannot make a directory for the mininet symlink ({REPO_ROOT}/build)")


# Tools an INA network needs besides Mininet's own (Debian's mininet package does not pull
# them in): ethtool turns checksum offload off, without which plain traffic that the switch
# copies (ping aside: TCP for gloo and torchrun, any UDP) arrives with bad checksums.
TOOLS = {"mnexec": "Mininet's mnexec", "ethtool": "ethtool"}


def ensure_mininet() -> None:
    """Import ``mininet`` from Debian's package if the interpreter cannot already; raise
    `MininetMissing`, saying what to install, if it or a tool an INA network needs is
    missing."""
    missing = [what for tool, what in TOOLS.items() if shutil.which(tool) is None]
    if missing:
        raise MininetMissing(f"{' and '.join(missing)} not on PATH: {INSTALL_HINT}")
    try:
        importlib.import_module("mininet")
        return
    except ImportError:
        pass
    if not DEBIAN_MININET.is_dir():
        raise MininetMissing(f"no Mininet Python module in {DEBIAN_MININET}: {INSTALL_HINT}")
    shim = str(_shim_dir())
    if shim not in sys.path:
        site.addsitedir(shim)
    importlib.invalidate_caches()
    try:
        importlib.import_module("mininet")
    except ImportError as e:
        raise MininetMissing(f"mininet does not import from {shim}: {e}") from None
