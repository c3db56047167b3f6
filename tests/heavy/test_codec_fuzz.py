"""The codec fault suite (heavy, issue 31 point 10): 200,000 mutated payloads of every
message type through decode and every serving path (tests/heavy/codec_fuzzing.py). Each
must be refused with a DecodeError or be servable, within a second (and two more per
megabyte; 25 for avro, whose recursive schemas are read by fastavro's Python reader
past 1,000 bytes). Run with::

    python -m pytest -m heavy -s tests/heavy/test_codec_fuzz.py

Each chunk prints its counts, the slowest case, its wall time and the growth of the
process's peak RSS.
"""

from __future__ import annotations

import pytest

from tests.heavy.codec_fuzzing import TYPES, fuzz

CASES = 200_000
CHUNKS = 4


@pytest.mark.heavy
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("chunk", range(CHUNKS))
@pytest.mark.parametrize("name", TYPES)
def test_fuzzed_payloads_are_refused_or_servable(name: str, chunk: int) -> None:
    report = fuzz(name, CASES // CHUNKS, seed=3000 + chunk)
    print(report.summary(f"{name} chunk {chunk}"))
    assert report.cases == CASES // CHUNKS
    assert not report.failures, "\n".join(
        f"{case}\n  -> {error}" for case, error in report.failures
    )
    assert not report.slow, report.slow
    assert report.rss_growth_mb < 2048, "the decoded values are not bounded"
