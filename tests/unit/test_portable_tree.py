"""Nothing machine-specific is tracked: a fresh clone on another machine works as this one.

A symbolic link tracked to an absolute path (``.bench-venv`` once pointed at another
checkout) breaks ``bash bench/setup_peers.sh`` on every other machine; an absolute path to
this machine's checkout or home in code or configuration breaks it the same way. Measured
results (``bench/results/``) record the command lines they ran, which name paths: they are
records, not configuration, and are left out.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Where this machine's checkouts and homes live; none of it belongs in the tree.
MACHINE_PATH = re.compile(r"(?<![\w.])(/work/|/home/\w|/root/|/Users/\w)")
#: Kinds of file that configure or run something (what a clone executes or reads).
CONFIGURING = {".py", ".sh", ".toml", ".yaml", ".yml", ".cfg", ".ini", ".json", ".xml", ""}
#: This file names the paths it looks for.
_SELF = Path(__file__).resolve().relative_to(ROOT).as_posix()


def _tracked() -> list[tuple[str, str]]:
    """(mode, path) of every file git tracks at the repository root."""
    listing = subprocess.run(
        ["git", "ls-files", "-s", "-z"], cwd=ROOT, check=True, capture_output=True
    ).stdout.decode()
    entries = []
    for entry in filter(None, listing.split("\0")):
        meta, path = entry.split("\t", 1)
        entries.append((meta.split()[0], path))
    return entries


def test_no_tracked_symlink_leaves_the_repository() -> None:
    escaping = []
    for mode, path in _tracked():
        if mode != "120000":
            continue
        target = os.readlink(ROOT / path) if (ROOT / path).is_symlink() else ""
        resolved = (ROOT / path).parent / target
        if not target or os.path.isabs(target) or ROOT not in resolved.resolve().parents:
            escaping.append(f"{path} -> {target or '(missing)'}")
    assert not escaping, f"tracked links pointing outside the repository: {escaping}"


def test_no_tracked_file_names_a_machine_path() -> None:
    found = []
    for mode, path in _tracked():
        if mode == "120000" or path.startswith("bench/results/") or path == _SELF:
            continue
        if Path(path).suffix not in CONFIGURING or not (ROOT / path).is_file():
            continue
        text = (ROOT / path).read_text(errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            if MACHINE_PATH.search(line):
                found.append(f"{path}:{number}: {line.strip()[:100]}")
    assert not found, "absolute machine paths in tracked files:\n" + "\n".join(found)
