"""Where the benchmarks put their results: markdown for people, JSON for tools, one stem each.

Every file names the host CPU it was measured on, because the machine changes between sessions,
and the commit of the code that measured it (with "+ changes" when the checkout was not clean).
"""

import json
import math
import pathlib
import subprocess

from ms_heron.hardware.targets import host_cpu_model

DEFAULT_DIR = pathlib.Path(__file__).parent / "results"


def write(out_dir, stem: str, markdown_lines: list[str], data) -> None:
    """Write ``<out_dir>/<stem>.md`` and ``.json`` (``{"host_cpu", "data"}``) and print the
    markdown."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cpu, commit = host_cpu_model(), code_commit()
    markdown_lines = [
        *markdown_lines[:1],
        "",
        f"Host CPU: {cpu}. Code: commit {commit}.",
        *markdown_lines[1:],
    ]
    (out / f"{stem}.md").write_text("\n".join(markdown_lines) + "\n")
    (out / f"{stem}.json").write_text(
        json.dumps({"host_cpu": cpu, "commit": commit, "data": data}, indent=1)
    )
    print("\n".join(markdown_lines))


def code_commit() -> str:
    """The commit of the checkout these benchmarks run from ("unknown" outside a git checkout)."""
    here = pathlib.Path(__file__).parent

    def git(*args):
        return subprocess.run(
            ["git", *args], cwd=here, capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        # result files an earlier benchmark of this checkout wrote are not code
        dirty = git(
            "status", "--porcelain", "--untracked-files=no", "--", "..", ":(exclude)results"
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{commit} + changes" if dirty else commit


def geomean(values) -> float:
    """The geometric mean of speed-up ratios (nan for none): the one summary of ratios the results
    quote."""
    values = list(values)
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")
