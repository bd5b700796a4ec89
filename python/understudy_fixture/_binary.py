"""Where the ``understudy`` binary is."""

from __future__ import annotations

import os
import stat
from pathlib import Path

#: The environment variable that names another ``understudy`` binary to run
#: instead of the one in the wheel (a local build, say).
BINARY_ENV = "UNDERSTUDY_BINARY"

_BUNDLED = Path(__file__).resolve().parent / "bin" / "understudy"


def binary_path() -> str:
    """The absolute path of the ``understudy`` binary to run.

    ``$UNDERSTUDY_BINARY`` when set, else the binary inside this package, made
    executable here if unpacking the wheel lost its executable bit.
    """
    override = os.environ.get(BINARY_ENV)
    if override:
        path = Path(override).expanduser().resolve()
        if not path.is_file():
            raise FileNotFoundError(f"{BINARY_ENV}={override}: no such file")
        if not os.access(path, os.X_OK):
            raise PermissionError(f"{BINARY_ENV}={override}: not executable")
        return str(path)
    if not _BUNDLED.is_file():
        raise FileNotFoundError(
            f"no understudy binary at {_BUNDLED}: this copy of understudy_fixture "
            f"was not installed from a wheel built by python/build_wheel.py; "
            f"set {BINARY_ENV} to an understudy binary"
        )
    if not os.access(_BUNDLED, os.X_OK):
        mode = _BUNDLED.stat().st_mode
        try:
            _BUNDLED.chmod(mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        except OSError as e:
            raise PermissionError(
                f"{_BUNDLED} is not executable and cannot be made so ({e}); "
                f"set {BINARY_ENV} to an executable copy"
            ) from e
    return str(_BUNDLED)
