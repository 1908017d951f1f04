"""Where the benchmarks put their results: markdown for people, JSON for tools, one stem each."""

import json
import pathlib

DEFAULT_DIR = pathlib.Path(__file__).parent / "results"


def write(out_dir, stem: str, markdown_lines: list[str], data) -> None:
    """Write ``<out_dir>/<stem>.md`` and ``.json`` and print the markdown."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.md").write_text("\n".join(markdown_lines) + "\n")
    (out / f"{stem}.json").write_text(json.dumps(data, indent=1))
    print("\n".join(markdown_lines))
