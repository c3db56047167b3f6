"""The fault suite (heavy): a million fuzzed filters through compile and evaluation, and
ten thousand mutated topology files through the loader. Every failure must be a SowError
and no case may take over a second. Run with::

    python -m pytest -m heavy -s tests/heavy/test_fuzz.py

Each chunk takes a few minutes on a 2-core machine and prints its counts, the slowest case
and its wall time.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.heavy.fuzzing import LIMIT_S, Report, fuzz_expressions, fuzz_topologies

EXPRESSION_CHUNKS = 4
EXPRESSIONS_PER_CHUNK = 250_000
TOPOLOGY_CHUNKS = 2
TOPOLOGIES_PER_CHUNK = 5_000


def assert_clean(report: Report, what: str) -> None:
    """No foreign exception and no case over the limit (the summary is printed)."""
    print(report.summary(what))
    assert not report.failures, "\n".join(
        f"{case}\n  -> {error}" for case, error in report.failures
    )
    assert not report.slow, f"over {LIMIT_S} s: {report.slow}"


@pytest.mark.heavy
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("chunk", range(EXPRESSION_CHUNKS))
def test_fuzzed_filters_fail_only_with_sow_errors(chunk: int) -> None:
    report = fuzz_expressions(EXPRESSIONS_PER_CHUNK, seed=1000 + chunk)
    assert report.cases == EXPRESSIONS_PER_CHUNK
    assert_clean(report, f"filters chunk {chunk}")


@pytest.mark.heavy
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("chunk", range(TOPOLOGY_CHUNKS))
def test_mutated_topologies_fail_only_with_topology_errors(tmp_path: Path, chunk: int) -> None:
    logging.disable(logging.WARNING)  # "accepted but not implemented" warnings, by the thousand
    try:
        report = fuzz_topologies(TOPOLOGIES_PER_CHUNK, seed=2000 + chunk, directory=tmp_path)
    finally:
        logging.disable(logging.NOTSET)
    assert report.cases == TOPOLOGIES_PER_CHUNK
    assert_clean(report, f"topologies chunk {chunk}")
