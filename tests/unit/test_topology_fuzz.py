"""Topology files that once failed with a foreign exception or took seconds (found by the
fault suite), and the fast version of that suite (the heavy one runs ten thousand)."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from processor.errors import TopologyError
from processor.topology.loader import load_topology
from processor.topology.yaml_loader import MAX_DEPTH
from tests.heavy.fuzzing import LIMIT_S, fuzz_topologies


@pytest.mark.parametrize(
    "extra",
    [
        "[" * 20_000 + "]" * 20_000,
        "{a: " * 20_000 + "1" + "}" * 20_000,
        "".join("\n" + "  " * depth + "a:" for depth in range(2 * MAX_DEPTH)) + " 1",
    ],
    ids=["flow-sequences", "flow-mappings", "block-mappings"],
)
def test_deeply_nested_yaml_is_a_topology_error_at_once(tmp_path: Path, extra: str) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text(f"topics: [{{name: A}}]\nextra: {extra}\n")
    started = time.perf_counter()
    with pytest.raises(TopologyError) as caught:
        load_topology(path)
    assert time.perf_counter() - started < 0.5
    assert f"nested deeper than {MAX_DEPTH} levels" in str(caught.value)
    assert str(path) in str(caught.value)


def test_aliases_nesting_values_too_deeply_are_a_topology_error(tmp_path: Path) -> None:
    chain = ", ".join(["&l0 [/a]"] + [f"&l{i} [*l{i - 1}]" for i in range(1, 3000)])
    path = tmp_path / "aliases.yaml"
    path.write_text(f"topics:\n  - name: A\n    key_generator: [{chain}]\n")
    with pytest.raises(TopologyError) as caught:
        load_topology(path)
    assert "nests values too deeply" in str(caught.value)


def test_mutated_topologies_fail_only_with_topology_errors(tmp_path: Path) -> None:
    logging.disable(logging.WARNING)  # "accepted but not implemented" warnings, by the hundred
    try:
        report = fuzz_topologies(500, seed=3, directory=tmp_path)
    finally:
        logging.disable(logging.NOTSET)
    print(report.summary("topologies"))
    assert report.cases == 500
    assert report.errors > 0
    assert not report.failures, report.failures
    assert not report.slow, f"over {LIMIT_S} s: {report.slow}"
