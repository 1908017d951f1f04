"""Where the benchmarks put their results: markdown for people, JSON for tools, one stem each.

Every file names the host CPU it was measured on, because the machine changes between sessions.
"""

import json
import pathlib

from ms_heron.targets import host_cpu_model

DEFAULT_DIR = pathlib.Path(__file__).parent / "results"


def write(out_dir, stem: str, markdown_lines: list[str], data) -> None:
    """Write ``<out_dir>/<stem>.md`` and ``.json`` (``{"host_cpu", "data"}``) and print the markdown."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cpu = host_cpu_model()
    markdown_lines = [*markdown_lines[:1], "", f"Host CPU: {cpu}.", *markdown_lines[1:]]
    (out / f"{stem}.md").write_text("\n".join(markdown_lines) + "\n")
    (out / f"{stem}.json").write_text(json.dumps({"host_cpu": cpu, "data": data}, indent=1))
    print("\n".join(markdown_lines))
