"""``python bench/plots.py``: the benchmark pictures and docs/benchmarks.md's summary table.

The command runs on a copy of bench/results/ (plus a file it does not know and one that
is not JSON) into a temporary folder: every picture is a real PNG, and the summary table
it writes into a copy of docs/benchmarks.md leaves that copy unchanged, so the doc's
table is the one the committed JSON gives (it cannot drift from it).
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "plots.py"
DOC = ROOT / "docs" / "benchmarks.md"
PICTURES = (
    "ratios.png",
    "throughput_peers.png",
    "throughput_raw.png",
    "latency.png",
    "scaling.png",
    "endurance.png",
)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _plots(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def _png_size(path: Path) -> tuple[int, int]:
    """Width and height from the PNG's header, after checking its signature."""
    head = path.read_bytes()[:24]
    assert head[:8] == PNG_MAGIC, f"{path.name} is not a PNG"
    assert head[12:16] == b"IHDR"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def test_pictures_and_the_docs_summary_table_come_from_the_results(tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(ROOT / "bench" / "results", results)
    (results / "not_a_bench.json").write_text('{"something": ["else"]}')
    (results / "kafka" / "half_written.json").write_text('{"rows": [')
    doc = tmp_path / "benchmarks.md"
    shutil.copy(DOC, doc)
    out = tmp_path / "img"

    run = _plots("--results", results, "--out", out, "--doc", doc)

    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    for name in PICTURES:
        path = out / name
        assert f"wrote {path}" in run.stdout, run.stdout
        width, height = _png_size(path)
        assert width >= 600, (name, width)
        assert height >= 300, (name, height)
        assert 5_000 < path.stat().st_size < 150_000, (name, path.stat().st_size)
    assert "skipped not_a_bench.json" in run.stderr
    assert "skipped kafka/half_written.json: not readable as JSON" in run.stderr
    assert "is current" in run.stdout, run.stdout + run.stderr
    assert doc.read_text() == DOC.read_text(), (
        "docs/benchmarks.md's summary table is not the one bench/results/ gives: "
        "run python bench/plots.py and commit the doc"
    )


def test_the_doc_shows_a_table_and_every_picture() -> None:
    text = DOC.read_text()
    begin = text.index("<!-- summary:begin")
    table = text[begin : text.index("<!-- summary:end -->")]
    assert table.count("\n| ") >= 10, "the summary table has too few rows"
    assert "Kafka Streams" in table
    assert "raw confluent-kafka producer" in table
    shown = re.findall(r"!\[[^\]]*\]\((img/benchmarks/[\w.]+\.png)\)", text)
    assert sorted(Path(p).name for p in shown) == sorted(PICTURES)
    for picture in shown:
        path = DOC.parent / picture
        assert path.is_file(), f"{picture} is not committed"
        _png_size(path)
        assert path.stat().st_size < 150_000
    assert "(benchmarks-log.md)" in text


def test_missing_results_leave_parts_out_without_failing(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    (results / "ingest.json").write_text('{"benchmark": "ingest", "results": "none"}')
    doc = tmp_path / "doc.md"
    doc.write_text("x\n<!-- summary:begin -->\nold\n<!-- summary:end -->\n")

    run = _plots("--results", results, "--out", tmp_path / "img", "--doc", doc)

    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    assert "left out" in run.stderr
    assert "skipped ingest.json" in run.stderr
    assert "\nold\n" not in doc.read_text()
