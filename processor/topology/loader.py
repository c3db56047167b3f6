"""Load a topology from a file or a directory, and the checks every format shares.

:func:`load_topology` picks the format by extension: ``.yaml``/``.yml`` is the kafka-sow YAML
format (:mod:`processor.topology.yaml_loader`), ``.xml`` an AMPS configuration file
(:mod:`processor.topology.amps_xml`). A directory loads every ``*.yaml``, ``*.yml`` and
``*.xml`` file directly in it (not in subdirectories, hidden files skipped), in sorted name
order, and merges them; the merged topology must define at least one topic.

The checks every format shares live in :mod:`processor.topology.assemble`.
"""

from __future__ import annotations

from pathlib import Path

from processor.errors import TopologyError
from processor.topology.amps_xml import load_amps_config
from processor.topology.assemble import merge_topologies
from processor.topology.model import Topology
from processor.topology.yaml_loader import load_yaml

#: File extensions recognised, and the format each one selects.
EXTENSIONS: dict[str, str] = {".yaml": "yaml", ".yml": "yaml", ".xml": "amps-xml"}


def load_topology(path: str | Path) -> Topology:
    """Load a topology file (``.yaml``, ``.yml``, ``.xml``) or a directory of them."""
    target = Path(path)
    if target.is_dir():
        files = sorted(
            p
            for p in target.iterdir()
            if p.suffix.lower() in EXTENSIONS and p.is_file() and not p.name.startswith(".")
        )
        if not files:
            raise TopologyError(
                "the directory holds no topology files; expected *.yaml, *.yml or *.xml files",
                source=str(target),
            )
        topology = merge_topologies([load_file(p, alone=False) for p in files])
    elif target.exists():
        topology = load_file(target)
    else:
        raise TopologyError(
            "no such file or directory; give a topology file (.yaml, .yml, .xml) or a "
            "directory of them with --topology or SOW_TOPOLOGY (the default, topologies, is "
            "relative to the current directory)",
            source=str(target),
        )
    if not topology.topics:
        plain = " (plain topics alone are not enough)" if topology.plain_topics else ""
        raise TopologyError(
            f"the topology defines no SOW topics{plain}; define at least one", source=str(target)
        )
    return topology


def load_file(path: Path, alone: bool = True) -> Topology:
    """Load one topology file, choosing the format by its extension (``alone``: not one
    of a directory's, whose actions are checked once merged)."""
    kind = EXTENSIONS.get(path.suffix.lower())
    if kind == "yaml":
        return load_yaml(path, alone)
    if kind == "amps-xml":
        return load_amps_config(path, alone=alone)
    raise TopologyError(
        f"unknown topology file extension {path.suffix!r}; allowed: "
        ".yaml or .yml (kafka-sow YAML), .xml (AMPS configuration)",
        source=str(path),
    )
