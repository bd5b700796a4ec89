#!/usr/bin/env python3
"""Writes the understudy-fixture wheel: the package in python/understudy_fixture
plus an existing ``understudy`` binary, for this machine's platform.

    python3 python/build_wheel.py --binary target/release/understudy --out target/wheels

Nothing is built and nothing is downloaded: a wheel is a zip of the package,
the binary and its ``*.dist-info`` (METADATA, WHEEL, entry_points.txt, RECORD),
written here with zipfile. The version is the workspace's (Cargo.toml,
[workspace.package]); the platform tag is ``sysconfig.get_platform()``'s, or
``--platform``'s. Prints the wheel's path.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import re
import sys
import sysconfig
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PACKAGE = "understudy_fixture"
NAME = "understudy-fixture"
# Zip entries get this time (or $SOURCE_DATE_EPOCH's), so one input gives one wheel.
EPOCH = (1980, 1, 1, 0, 0, 0)


def workspace_version(cargo_toml: Path) -> str:
    """``version`` of ``[workspace.package]`` in the workspace Cargo.toml."""
    section = None
    for line in cargo_toml.read_text().splitlines():
        line = line.strip()
        header = re.fullmatch(r"\[([^\]]+)\]", line)
        if header:
            section = header.group(1).strip()
        elif section == "workspace.package":
            m = re.fullmatch(r'version\s*=\s*"([^"]+)"', line)
            if m:
                return m.group(1)
    sys.exit(f"build_wheel: no version in [workspace.package] of {cargo_toml}")


def platform_tag(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", name)


def record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()


def metadata(version: str) -> str:
    return f"""Metadata-Version: 2.1
Name: {NAME}
Version: {version}
Summary: The understudy binary (a stand-in for Nacos) and pytest fixtures that start it
License: Apache-2.0
Requires-Python: >=3.8
Classifier: Framework :: Pytest
Classifier: License :: OSI Approved :: Apache Software License
Classifier: Programming Language :: Python :: 3
Description-Content-Type: text/markdown

# understudy-fixture

The `understudy` binary, a service registry that serves the Nacos HTTP
API and the Nacos 2.x gRPC API, and a pytest plugin (pytest 7 or later)
with three fixtures:

- `understudy`: one node on free ports (HTTP port P, gRPC port P + 1000),
  shared by every test of the run;
- `understudy_fresh`: a node of the test's own;
- `understudy_sim`: a multi-DC cluster (`understudy sim`).

`understudy_fixture.binary_path()` gives the binary's path
(`$UNDERSTUDY_BINARY` overrides it); `start_node()` and `start_sim()`
start processes outside pytest. See docs/python.md in the understudy
repository.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", required=True, type=Path,
                        help="the understudy binary to ship (e.g. target/release/understudy)")
    parser.add_argument("--out", required=True, type=Path, help="directory to write the wheel to")
    parser.add_argument("--platform", default=sysconfig.get_platform(),
                        help="the binary's platform, as sysconfig.get_platform() spells it "
                             "[default: this machine's, %(default)s]")
    args = parser.parse_args()

    binary = args.binary
    if not binary.is_file() or not os.access(binary, os.X_OK):
        sys.exit(f"build_wheel: {binary} is not an executable file")
    version = workspace_version(ROOT / "Cargo.toml")
    tag = f"py3-none-{platform_tag(args.platform)}"
    dist_info = f"{PACKAGE}-{version}.dist-info"
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    when = EPOCH
    if epoch:
        import time

        when = time.gmtime(max(int(epoch), 315532800))[:6]

    files: list[tuple[str, bytes, int]] = []  # (archive name, contents, mode)
    sources = sorted(p for p in (HERE / PACKAGE).rglob("*.py") if "__pycache__" not in p.parts)
    for src in sources:
        files.append((src.relative_to(HERE).as_posix(), src.read_bytes(), 0o644))
    files.append((f"{PACKAGE}/bin/understudy", binary.read_bytes(), 0o755))
    files.append((f"{dist_info}/METADATA", metadata(version).encode(), 0o644))
    files.append((
        f"{dist_info}/WHEEL",
        f"Wheel-Version: 1.0\nGenerator: understudy build_wheel.py\n"
        f"Root-Is-Purelib: false\nTag: {tag}\n".encode(),
        0o644,
    ))
    files.append((
        f"{dist_info}/entry_points.txt",
        f"[pytest11]\nunderstudy = {PACKAGE}.plugin\n".encode(),
        0o644,
    ))
    record = "".join(f"{name},{record_hash(data)},{len(data)}\n" for name, data, _ in files)
    record += f"{dist_info}/RECORD,,\n"
    files.append((f"{dist_info}/RECORD", record.encode(), 0o644))

    args.out.mkdir(parents=True, exist_ok=True)
    wheel = args.out / f"{PACKAGE}-{version}-{tag}.whl"
    partial = wheel.with_suffix(".whl.partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data, mode in files:
            info = zipfile.ZipInfo(name, date_time=when)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o100000 | mode) << 16  # a regular file and its mode
            zf.writestr(info, data)
    partial.replace(wheel)
    print(wheel)


if __name__ == "__main__":
    main()
