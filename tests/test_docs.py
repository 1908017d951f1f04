"""Every Python block of README.md and docs/ runs as written (trial counts and budgets made tiny),
so the documentation cannot go stale; every relative link in them points at a file that exists."""

import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Trial counts and budgets in the blocks, cut to what a test affords.
TINY = [
    (r"\b(max_trials_global|max_trials|total_trials)=\d+", r"\1=4"),
    (r"\bmax_trials_per_task=\d+", "max_trials_per_task=2"),
    (r"\bstatic_shape_tuning_pipeline\((\d+),", "static_shape_tuning_pipeline(4,"),
    (r"\btime_budget_s=\d+", "time_budget_s=60"),
]


def _blocks():
    for page in PAGES:
        text = page.read_text()
        for index, match in enumerate(
            re.finditer(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
        ):
            yield pytest.param(match.group(1), id=f"{page.relative_to(ROOT)}#{index}")


def _tiny(code: str) -> str:
    for pattern, replacement in TINY:
        code = re.sub(pattern, replacement, code)
    return code


def test_every_page_has_its_python_blocks_found():
    # README: quick start, models, pipeline; docs: models, rules, constraints
    assert sum(1 for _ in _blocks()) >= 6


@pytest.mark.parametrize("code", list(_blocks()))
def test_python_block_runs_as_written(code, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", _tiny(code)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_relative_links_point_at_files():
    for page in PAGES:
        # code is not linked
        prose = re.sub(r"^```.*?^```|`[^`]*`", "", page.read_text(), flags=re.S | re.M)
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", prose):
            assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} links {target}"
