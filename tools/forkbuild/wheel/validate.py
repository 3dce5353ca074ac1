"""Validate a built wheel the way `python -m installer --validate-record all` does,
plus a check that the file name, .dist-info and METADATA agree on the version.

pip and uv install a wheel whose RECORD is wrong without a word (pypa/pip#4705);
installer re-hashes every member against RECORD.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from installer.exceptions import InstallerError
from installer.sources import WheelFile
from packaging.utils import parse_wheel_filename

from forkbuild.errors import BuildError
from forkbuild.wheel import naming


def validate_wheel(path: Path) -> None:
    """Raise BuildError naming every problem installer finds in `path`."""
    try:
        with WheelFile.open(path) as source:
            source.validate_record(validate_contents=True)
            metadata = source.read_dist_info("METADATA")
            dist_info = source.dist_info_dir
    except (InstallerError, ValueError, zipfile.BadZipFile, KeyError) as error:
        issues = getattr(error, "issues", None) or [str(error)]
        raise BuildError(f"{path.name} failed RECORD validation:\n" + "\n".join(f"  - {issue}" for issue in issues),
                         hint="the wheel was not moved into place; rebuild it") from error
    _check_version(path, metadata=metadata, dist_info=dist_info)


def _check_version(path: Path, *, metadata: str, dist_info: str) -> None:
    name, version, _, _ = parse_wheel_filename(path.name)
    declared = next((line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Version:")), None)
    expected_dist_info = naming.dist_info_dir(name, str(version))
    if declared != str(version) or dist_info != expected_dist_info:
        raise BuildError(f"{path.name}: versions disagree: file name {version}, METADATA {declared}, "
                         f"{dist_info} (expected {expected_dist_info})")
