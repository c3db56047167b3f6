"""SOW topology: the model and its loaders (YAML and AMPS XML configuration)."""

from processor.topology.loader import load_topology
from processor.topology.message_types import MESSAGE_TYPES
from processor.topology.model import (
    Durability,
    HashIndexSpec,
    History,
    KeyGeneratorSpec,
    RecoveryKind,
    RecoveryPoint,
    SowTopic,
    Topology,
)
from processor.topology.unserved import refuse_unserved

__all__ = [
    "MESSAGE_TYPES",
    "Durability",
    "HashIndexSpec",
    "History",
    "KeyGeneratorSpec",
    "RecoveryKind",
    "RecoveryPoint",
    "SowTopic",
    "Topology",
    "load_topology",
    "refuse_unserved",
]
