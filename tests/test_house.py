"""The layout the README promises, checked on the source: what may import what, who touches the
database files, how many modules sit at the top, and that every command takes the one tuning
path."""

import ast
import json
import pathlib
import re
import subprocess
import sys

import onnx

from ms_heron.testing import models
from ms_heron.tuning import TuningRun

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "ms_heron"
COUNTING_CLI = pathlib.Path(__file__).with_name("counting_cli.py")


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text())


def _imported(tree: ast.Module, path: str) -> set[str]:
    """Absolute names of the ms_heron modules ``tree`` (at ``path``) imports."""
    package = ["ms_heron", *path.split("/")[:-1]]
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            names |= {module, *(f"{module}.{a.name}" for a in node.names)}
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
    return {n for n in names if n.startswith("ms_heron")}


def test_product_code_never_imports_testing_and_only_hardware_runs_probes():
    for path, tree in _modules():
        imported = _imported(tree, path)
        if not path.startswith("testing/"):
            assert not any(n.startswith("ms_heron.testing") for n in imported), path
        if not path.startswith("hardware/"):
            assert not any(n.startswith("ms_heron.hardware.probes") for n in imported), path


def test_records_is_the_one_module_that_touches_the_database_files():
    for path, tree in _modules():
        if path == "records.py":
            continue
        docstrings = {
            id(n.body[0].value)
            for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef))
            and n.body
            and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            name = (
                node.id
                if isinstance(node, ast.Name)
                else node.attr
                if isinstance(node, ast.Attribute)
                else None
            )
            assert name not in ("JSONDatabase", "DATABASE_FILES", "StoreMeasured"), (
                f"{path}: {name}"
            )
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
            ):
                assert (
                    "database_tuning_record" not in node.value
                    and "database_workload" not in node.value
                ), path


def test_at_most_four_modules_sit_at_the_package_top_besides_init():
    top = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert len(top) <= 4, top


def _dataclass_keywords(node: ast.ClassDef) -> dict[str, bool] | None:
    """A class's ``@dataclass(...)`` keywords that are literally True, or None if it is no
    dataclass."""
    for deco in node.decorator_list:
        call = deco if isinstance(deco, ast.Call) else None
        name = call.func if call else deco
        if isinstance(name, ast.Name) and name.id == "dataclass":
            return {
                k.arg: getattr(k.value, "value", None) is True
                for k in (call.keywords if call else [])
            }
    return None


def test_every_dataclass_of_more_than_three_fields_is_built_by_keyword():
    """Seven positional fields are how a value lands in the wrong one unnoticed."""
    positional = []
    for path, tree in _modules():
        for node in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            keywords = _dataclass_keywords(node)
            fields = [s for s in node.body if isinstance(s, ast.AnnAssign)]
            if keywords is not None and len(fields) > 3 and not keywords.get("kw_only"):
                positional.append(f"{path}: {node.name} ({len(fields)} fields)")
    assert positional == []


def test_demo_and_both_tune_commands_take_the_one_tuning_path_and_a_model_is_lowered_once(tmp_path):
    """Each command enters ``TuningRun.tune`` once and reads each work dir's records once;
    tune-model lowers its model and extracts its tasks once (tuning, the task table, compiling and
    the untuned check all use them) and still matches ONNX Runtime. None of them, all on the CPU,
    parses an intrinsic of TVM's library but x86's."""
    model = tmp_path / "mlp.onnx"
    onnx.save(models.mlp(batch=4, features=16, hidden=32, out=8).proto, model)
    commands = {
        "demo": [
            "demo",
            "--shape",
            "64",
            "64",
            "64",
            "--trials",
            "4",
            "--dtype",
            "fp32",
            "--work-dir",
            tmp_path / "demo",
        ],
        "tune": [
            "tune",
            "gemm",
            "--shape",
            "M=32",
            "N=32",
            "K=32",
            "--dtype",
            "fp32",
            "--trials",
            "2",
            "--work-dir",
            tmp_path / "tune",
        ],
        "tune-model": [
            "tune-model",
            model,
            "--trials",
            "4",
            "--round-size",
            "2",
            "--work-dir",
            tmp_path / "model",
        ],
    }
    procs = {
        name: subprocess.Popen(
            [sys.executable, COUNTING_CLI, *map(str, args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, args in commands.items()
    }
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"{name}: {err[-3000:]}"
        counts = json.loads(err.strip().splitlines()[-1])
        assert counts["TuningRun.tune"] == 1, (name, counts)
        assert counts["lower_for_tuning"] == counts["extract_tasks"] == (name == "tune-model"), (
            name,
            counts,
        )
        assert counts["database reads"] == 1, (name, counts)
        # from the command to the stored record: few modules, each entered once (no call back up the
        # layers)
        path = [
            m
            for i, m in enumerate(counts["store path"])
            if i == 0 or counts["store path"][i - 1] != m
        ]
        assert path[-1] == "records.py" and len(path) == len(set(path)) <= 10, (name, path)
        assert counts["intrinsic modules"] == ["x86"], (name, counts)  # not CUDA's WMMA, ARM's, ...
        # tuned, checked, and compared with ONNX Runtime and the peak in the same run
        if name == "demo":
            assert "checked against numpy" in out, out
            tuned = re.search(r"\(tuned\)\s+([\d.]+) ms\s+([\d.]+)\s+([\d.]+)%", out)
            assert tuned and float(tuned.group(1)) > 0 and float(tuned.group(2)) > 0, out
            assert re.search(r"ONNX Runtime MatMul\s+[\d.]+ ms", out) and re.search(
                r"measured FMA peak of this machine: \d+ GOPS", out
            )
        if name == "tune-model":
            assert "outputs checked against ONNX Runtime on a random input: correct" in out, out


def test_python_tune_model_is_the_commands_run_locked_recorded_and_choosing_by_confirmed_times(
    tmp_path,
):
    """``tune_model`` + ``compile_model`` from Python and ``ms-heron tune-model`` on one model, seed
    and trial count: each holds its work dir's lock while it tunes, writes the run file, times each
    task's best kernels again and compiles the kernel those times choose; each lowers the model,
    extracts its tasks and reads its records once per run."""
    model = tmp_path / "mlp.onnx"
    onnx.save(models.mlp(batch=4, features=16, hidden=32, out=8).proto, model)
    python = (
        "import json, os, sys\nimport counting_cli\ncounts = counting_cli.install()\nfrom "
        "ms_heron.hardware.targets import host_target\nfrom ms_heron.relax import compile_model, "
        "from_onnx, run_model\nfrom ms_heron.tuning import RunError, RunSpec, TuningRun, "
        f"tune_model\nmodel, work_dir = {str(model)!r}, {str(tmp_path / 'python')!r}\nmod, target, "
        "refusals = from_onnx(model), host_target(), []\ndef second_process_refused(progress):  # "
        "while the run holds the lock, another tuning is refused\n    if refusals:\n        "
        "return\n    try:\n        TuningRun.open(work_dir).tune(64)\n    except RunError as "
        f"err:\n        refusals.append(f'process {{os.getpid()}}' in str(err))\ndatabase = "
        "tune_model(mod, None, target, work_dir, 4, num_trials_per_iter=2, seed=0,\n              "
        "        on_round=second_process_refused)\ntuned = dict(counts)\ncompile_model(database, "
        f"mod, None, target)\nchosen = {{str(r.workload.mod) : str(r.trace) for r in "
        f"database.get_all_tuning_records()}}\nprint(json.dumps({{'tuned': tuned, 'compiled': "
        f"dict(counts), 'refusals': refusals, 'chosen': len(chosen)}}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", python],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=COUNTING_CLI.parent,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["refusals"] and all(got["refusals"]), got
    assert {
        k: got["tuned"][k]
        for k in ("lower_for_tuning", "extract_tasks", "database reads", "TuningRun.tune")
    } == {
        "lower_for_tuning": 1,
        "extract_tasks": 1,
        "database reads": 1,
        "TuningRun.tune": 2,  # tune_model's, and the one refused
    }, got
    # compile's own
    assert got["compiled"]["lower_for_tuning"] == 2 and got["compiled"]["database reads"] == 1, got
    cli = subprocess.run(
        [
            sys.executable,
            COUNTING_CLI,
            *map(
                str,
                [
                    "tune-model",
                    model,
                    "--trials",
                    4,
                    "--round-size",
                    2,
                    "--seed",
                    0,
                    "--work-dir",
                    tmp_path / "cli",
                ],
            ),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert cli.returncode == 0, cli.stderr[-3000:]
    for work_dir in (tmp_path / "python", tmp_path / "cli"):
        run = TuningRun.open(work_dir)
        assert run.spec.seed == 0 and run.is_model and (work_dir / "ms_heron.lock").is_file()
        assert run.progress()[-1].confirmed and run.state().trials >= 4
        times = run.task_times()
        assert len(times) == got["chosen"] and all(t.confirmed for t in times), times


def test_measuring_workers_import_neither_the_search_nor_the_frontend():
    """MetaSchedule's builder and runner workers import ms_heron to unpickle their jobs; the public
    names of ``ms_heron`` and ``ms_heron.tuning`` are imported when first used, not by that."""
    heavy = (
        "ortools",
        "xgboost",
        "ms_heron.search",
        "ms_heron.space",
        "ms_heron.relax",
        "ms_heron.tuning.api",
        "ms_heron.tuning.loop",
    )
    probe = (
        "import sys\n"
        "import ms_heron.tuning.builder, ms_heron.tuning.measure\n"
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))\n"
        "from ms_heron import HeronSpace\n"
        "from ms_heron.tuning import tune_model\n"
        "print(HeronSpace.__name__, tune_model.__module__)\n"
        "try:\n"
        "    ms_heron.tuning.tune_everything\n"
        "except AttributeError as e:\n"
        "    print(e)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-3:] == [
        "[]",
        "HeronSpace ms_heron.tuning.api",
        "module 'ms_heron.tuning' has no attribute 'tune_everything'",
    ], proc.stdout
