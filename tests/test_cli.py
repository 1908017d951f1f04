"""The ``ms-heron`` command as a user runs it (subprocess)."""

import json
import re
import subprocess
import sys


def _ms_heron(*args, timeout=600):
    return subprocess.run(
        [sys.executable, "-m", "ms_heron.cli", *args], capture_output=True, text=True, timeout=timeout
    )


def test_demo_tunes_checks_and_compares(tmp_path):
    proc = _ms_heron("demo", "--shape", "64", "64", "64", "--trials", "4", "--work-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "checked bit-exact against numpy" in out
    tuned = re.search(r"\(tuned\)\s+([\d.]+) ms\s+([\d.]+)\s+([\d.]+)%", out)
    ort = re.search(r"ONNX Runtime MatMulInteger\s+([\d.]+) ms", out)
    assert tuned and ort, out
    assert float(tuned.group(1)) > 0 and float(tuned.group(2)) > 0
    assert re.search(r"measured VNNI peak of this machine: \d+ GOPS", out)
    assert (tmp_path / "database_tuning_record.json").stat().st_size > 0


def test_demo_rejects_old_target_string():
    proc = _ms_heron("demo", "--target", "llvm -mcpu=znver4")
    assert proc.returncode == 2
    assert "old CLI form" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_demo_rejects_cpu_without_vnni():
    target = json.dumps({"kind": "llvm", "mcpu": "haswell", "num-cores": 2})
    proc = _ms_heron("demo", "--target", target, "--trials", "2")
    assert proc.returncode == 2
    assert "'haswell' has none" in proc.stderr and "Traceback" not in proc.stderr


def test_demo_rejects_shape_vnni_cannot_take():
    proc = _ms_heron("demo", "--shape", "64", "60", "64")
    assert proc.returncode == 2
    assert "nearest valid N is 64" in proc.stderr
