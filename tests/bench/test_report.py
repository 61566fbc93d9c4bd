"""Text and Markdown from a results file; the README section between its markers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ticktensor.bench import Results, Row, markdown, readme_section, splice_readme, text

ROOT = Path(__file__).parents[2]


def _results() -> Results:
    results = Results(meta={"command": "ticktensor bench all --quick", "machine": {"cores": 2}})
    results.rows += [
        Row.from_rate("ticktensor", "loader", 400_000.0, 16_388, first_batch_s=0.2),
        Row.from_rate("torch_mmap_w2", "baseline", 40_000.0, 16_388),
        Row.from_rate("ticktensor_zstd_block", "loader", 30_000.0, 16_388),
        Row.from_rate("torch_zarr_w2", "baseline", 100.0, 16_388),
        Row.skipped("spdl", "peer", "not installed (pip install spdl)"),
    ]
    results.stall.append(
        {"name": "ticktensor", "step_ms": 1.0, "stall_pct": 5.0, "predicted_pct": 0.0}
    )
    return results


def test_ratios_compare_the_same_samples() -> None:
    md = markdown(_results())
    assert "| `torch_mmap_w2` | baseline | 40,000 | 0.66 |  | 10.00x |" in md
    assert "| `torch_zarr_w2` | baseline | 100 | 0.00 |  | 300.00x |" in md
    assert "| `spdl` | peer | skipped |" in md
    assert "not installed (pip install spdl)" in text(_results())


def test_splice_replaces_only_the_marked_section() -> None:
    readme = "intro\n<!-- bench:begin old.json -->\nold table\n<!-- bench:end -->\noutro\n"
    section = readme_section(_results(), "new.json")
    spliced = splice_readme(readme, section)
    assert spliced.startswith("intro\n<!-- bench:begin new.json -->")
    assert spliced.endswith("<!-- bench:end -->\noutro\n")
    assert "old table" not in spliced
    assert splice_readme(spliced, section) == spliced
    with pytest.raises(ValueError, match="markers"):
        splice_readme("no markers", section)


def test_readme_performance_section_is_generated_from_the_committed_results() -> None:
    readme = (ROOT / "README.md").read_text()
    found = re.search(r"<!-- bench:begin (\S+) -->", readme)
    assert found, "README.md has no <!-- bench:begin FILE --> marker"
    source = found.group(1)
    assert (ROOT / source).is_file(), f"README quotes {source}, which is not committed"
    image = re.search(r"!\[scaling sweeps\]\((\S+)\)", readme)
    section = readme_section(Results.read(ROOT / source), source, image.group(1) if image else None)
    assert splice_readme(readme, section) == readme, (
        f"README.md's performance section is stale: run `ticktensor bench report {source} "
        "--readme README.md`"
    )
