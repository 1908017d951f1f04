"""Hardware facts read from a ``tvm.target.Target``: host target, instruction sets, GPU limits.

Everything is derived from the Target (and LLVM's view of the host), never from a list of CPU
names, so a new CPU or GPU works as soon as LLVM and TVM know it.
"""

from __future__ import annotations

import math
import os
import platform
import re
from dataclasses import dataclass
from typing import Any

from tvm.target import Target, codegen

from ..errors import HeronError
from .amx import request_amx_tile_state


class TargetError(HeronError, ValueError):
    """A target that cannot serve the request; the message names the fix."""


def host_target(num_cores: int | None = None) -> Target:
    """This machine as an LLVM Target: LLVM's host CPU name and the number of physical cores.

    MetaSchedule on CPU requires ``num-cores``; physical cores because hyper-threads share the
    vector units that the tuned kernels saturate.
    """
    if num_cores is None:
        num_cores = usable_cores()
    return Target(
        {"kind": "llvm", "mcpu": codegen.llvm_get_system_cpu(), "num-cores": int(num_cores)}
    )


def usable_cores(cgroup_cpu_max: str = "/sys/fs/cgroup/cpu.max") -> int:
    """The physical cores this process may run on: no more than its CPU affinity (``taskset``) and
    its container's CPU quota (cgroup v2 ``cpu.max``) allow, so ``num-cores`` threads never
    queue."""
    import psutil  # pylint: disable=import-outside-toplevel

    cores = psutil.cpu_count(logical=False) or psutil.cpu_count() or 1
    if hasattr(os, "sched_getaffinity"):
        cores = min(cores, len(os.sched_getaffinity(0)))
    try:
        with open(cgroup_cpu_max, encoding="utf-8") as limit:
            fields = limit.read().split()  # "QUOTA PERIOD" in microseconds, or "max PERIOD"
    except OSError:
        fields = []
    if len(fields) == 2 and fields[0].isdigit() and fields[1].isdigit() and int(fields[1]) > 0:
        cores = min(cores, math.ceil(int(fields[0]) / int(fields[1])))
    return max(1, cores)


def target_json(target: Target) -> dict:
    """The Target as plain JSON values; ``Target(target_json(t))`` is ``t`` again."""
    return _plain(dict(target.export()))


def _plain(value: Any) -> Any:
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (bool, int, float)) or value is None:
        return value
    if hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in value.items()}
    if hasattr(value, "__iter__"):
        return [_plain(v) for v in value]
    return str(value)


def parse_target(spec: Any) -> Target:
    """Turn a Target, a dict, a JSON string, a tag, or ``"host"`` into a Target.

    TVM 0.27 no longer parses CLI strings like ``"llvm -mcpu=znver4"``; say how to write them
    instead.
    """
    if isinstance(spec, Target):
        return spec
    if isinstance(spec, dict):
        return Target(spec)
    text = str(spec).strip()
    if text == "host":
        return host_target()
    if text.startswith("{"):
        import json  # pylint: disable=import-outside-toplevel

        try:
            return Target(json.loads(text))
        except Exception as err:  # JSON syntax, or a dict TVM refuses
            raise TargetError(
                f"target {text!r} is not a target dict ({err}); write it as JSON such as "
                '{"kind": "llvm", "mcpu": "znver4", "num-cores": 2}, or use "host"'
            ) from None
    if " -" in text or text.startswith("-"):
        raise TargetError(
            f"target {text!r} is in the old CLI form, which TVM 0.27 no longer accepts; write it "
            "as a "
            'dict or JSON, e.g. {"kind": "llvm", "mcpu": "znver4", "num-cores": 2}, or use "host"'
        )
    try:
        return Target(text)
    except Exception as err:  # TVM raises several error types for unknown kinds/tags
        raise TargetError(
            f"unknown target {text!r} ({err}); use a tag such as 'nvidia/nvidia-h100', a dict such "
            "as "
            '{"kind": "llvm", "mcpu": "znver4", "num-cores": 2}, or "host"'
        ) from err


def is_cpu(target: Target) -> bool:
    return target.kind.name == "llvm"


def is_cuda(target: Target) -> bool:
    return target.kind.name == "cuda"


def cpu_name(target: Target) -> str:
    """The CPU a Target compiles for (its ``mcpu``, or the host CPU when it names none)."""
    mcpu = target.attrs.get("mcpu")
    return str(mcpu) if mcpu else f"{codegen.llvm_get_system_cpu()} (host)"


def host_cpu_model() -> str:
    """The host CPU as ``/proc/cpuinfo`` names it, so a result file says which machine made it.

    LLVM's CPU name is a guess from the family and model numbers (a VM may report a desktop part's
    numbers for a server CPU), so the marketing name and the numbers are given beside it.
    """
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
                if not line.strip():
                    break  # the first processor is enough
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or "unknown CPU"
    numbers = (
        f"family {fields['cpu family']} model {fields['model']}, " if "model" in fields else ""
    )
    return f"{name} ({numbers}LLVM: {codegen.llvm_get_system_cpu()})"


def num_cores(target: Target) -> int:
    if "num-cores" not in target.attrs:
        raise TargetError(
            f"target {target} has no 'num-cores'; MetaSchedule needs it on CPU: add "
            '"num-cores": N to the target dict, or use ms_heron.hardware.targets.host_target()'
        )
    return int(target.attrs["num-cores"])


def has_vnni(target: Target) -> bool:
    """Whether the target's CPU has AVX-512 VNNI (``vpdpbusd``), from LLVM's feature set."""
    return is_cpu(target) and bool(codegen.target_has_features("avx512vnni", target))


def has_avx_vnni(target: Target) -> bool:
    """Whether the target's CPU has AVX-VNNI (the 256-bit VEX ``vpdpbusd`` of Alder Lake and later
    client parts, Zen 5 too), from LLVM's feature set."""
    return is_cpu(target) and bool(codegen.target_has_features("avxvnni", target))


def has_amx(target: Target) -> bool:
    """Whether AMX-INT8 tile code (``tdpbusd``) can run for ``target`` here: the target is this
    machine, LLVM lists ``amx-int8`` for its CPU, and the OS granted this process the tile state.

    Only this machine counts because the OS's grant is a property of the running system (a VM may
    report AMX in CPUID and still refuse it); elsewhere the int8 kernels use VNNI.
    """
    return (
        is_host(target)
        and bool(codegen.target_has_features("amx-int8", target))
        and request_amx_tile_state()
    )


def vector_bytes(target: Target) -> int:
    """Width of the widest vector register of the target's CPU, in bytes, from its LLVM features.

    (``codegen.llvm_get_vector_width`` answers 512 bits for any x86 mcpu in TVM 0.27.)
    """
    if not is_cpu(target):
        raise TargetError(f"vector_bytes() is a CPU fact; {target.kind.name} is not an llvm target")
    features = codegen.llvm_get_cpu_features(target)
    for feature, width in (("avx512f", 64), ("avx", 32), ("sve", 16), ("neon", 16), ("sse2", 16)):
        if feature in features:
            return width
    return 8


def vector_registers(target: Target) -> int:
    """How many vector registers the target's CPU has, from its LLVM features: 32 zmm with AVX-512
    (and on AArch64), 16 ymm/xmm with AVX or SSE only."""
    if not is_cpu(target):
        raise TargetError(
            f"vector_registers() is a CPU fact; {target.kind.name} is not an llvm target"
        )
    features = codegen.llvm_get_cpu_features(target)
    if "avx512f" in features or "neon" in features or "sve" in features:
        return 32
    return 16


#: Per-core cache sizes assumed for a CPU that is not this machine (a recent x86 server core)...
_DEFAULT_CACHES = {"L1": 48 * 1024, "L2": 2 * 1024 * 1024}
#: ...unless this environment variable gives that CPU's, as ``L1=32K,L2=1M``.
CACHES_ENV = "MS_HERON_CPU_CACHES"


def cpu_cache_bytes(target: Target) -> dict[str, int]:
    """Per-core data-cache sizes: read from the host where the target's code runs here
    (:func:`runs_here`: this CPU, or a narrower instruction set of it, whose kernels meet this
    host's caches), else from :data:`CACHES_ENV`, else typical ones. A Zen 3's AVX2 1024^3 int8
    GEMM blocked for the typical 2 MB L2 instead of its 512 KB swept 1 MB of weight per row of
    micro-tiles."""
    if not is_cpu(target):
        raise TargetError(
            f"cpu_cache_bytes() is a CPU fact; {target.kind.name} is not an llvm target"
        )
    if not runs_here(target):
        return {**_DEFAULT_CACHES, **_caches_from_env()}
    return {
        **_DEFAULT_CACHES,
        **{level: size for level, size in _host_caches().items() if level in _DEFAULT_CACHES},
    }


def largest_cache_bytes() -> int:
    """The host's largest data cache (its last level), or the largest typical one if sysfs is
    silent."""
    return max([*_host_caches().values(), *_DEFAULT_CACHES.values()])


def is_host(target: Target) -> bool:
    """Whether ``target`` is this machine's CPU, so that its facts can be read or measured here."""
    return is_cpu(target) and str(target.attrs.get("mcpu", "")) == codegen.llvm_get_system_cpu()


def runs_here(target: Target) -> bool:
    """Whether code compiled for ``target`` runs on this machine: it is this CPU, or a narrower one
    whose vector and dot-product extensions (AVX, FMA, AVX-512, VNNI, AMX) this CPU all has, as
    ``haswell`` code runs on any CPU here. Peaks, bandwidth and caches measured here are then the
    ones its kernels meet (an AVX2 kernel on a Zen 4 is held against the AVX2 peak of that Zen
    4)."""
    if is_host(target):
        return True
    if not is_cpu(target) or "x86" not in str(target.attrs.get("mtriple", "x86")):
        return False
    host = codegen.llvm_get_cpu_features(
        Target({"kind": "llvm", "mcpu": codegen.llvm_get_system_cpu()})
    )
    wanted = {f for f in codegen.llvm_get_cpu_features(target) if f.startswith(_VECTOR_EXTENSIONS)}
    return wanted <= set(host)


#: Instruction sets narrower than a host's, as the CPU LLVM compiles for (:func:`narrowed`).
ISA_MCPU = {
    "avx2": "haswell",
    "avx512bw": "skylake-avx512",
    "avxvnni": "alderlake",
    "avx512vnni": "cascadelake",
}


def narrowed(target: Target, isa: str) -> Target:
    """``target`` compiled for the instruction set ``isa`` (a key of :data:`ISA_MCPU`) instead of
    its own CPU, to measure here what a CPU with only that set gets; a TargetError where this
    machine cannot run its code."""
    if isa not in ISA_MCPU:
        raise TargetError(f"unknown instruction set {isa!r}; choose one of {', '.join(ISA_MCPU)}")
    narrow = Target({**target_json(target), "mcpu": ISA_MCPU[isa]})
    if not runs_here(narrow):
        raise TargetError(f"this CPU ({codegen.llvm_get_system_cpu()}) cannot run {isa} code")
    return narrow


#: The LLVM features whose instructions ms_heron's kernels and probes emit.
_VECTOR_EXTENSIONS = ("sse", "ssse3", "avx", "fma", "f16c", "amx")


def _host_caches() -> dict[str, int]:
    """``{"L1": bytes, "L2": ..., "L3": ...}``: the data caches sysfs lists for the first core."""
    import glob  # pylint: disable=import-outside-toplevel

    sizes = {}
    for index in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
        try:
            with (
                open(f"{index}/level") as f_level,
                open(f"{index}/type") as f_type,
                open(f"{index}/size") as f_size,
            ):
                level, kind, size = (
                    f_level.read().strip(),
                    f_type.read().strip(),
                    f_size.read().strip(),
                )
        except OSError:
            continue
        if kind in ("Data", "Unified"):
            sizes[f"L{level}"] = (
                int(size.rstrip("K")) * 1024
                if size.endswith("K")
                else int(size.rstrip("M")) * 1024 * 1024
            )
    return sizes


def _caches_from_env() -> dict[str, int]:
    text = os.environ.get(CACHES_ENV, "").strip()
    sizes = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        match = re.fullmatch(r"(L[12])=(\d+)([KM]?)", item, re.IGNORECASE)
        if not match:
            raise TargetError(
                f"{CACHES_ENV}={text!r}: write the target CPU's per-core data caches as "
                "L1=32K,L2=1M"
            )
        scale = {"": 1, "K": 1024, "M": 1024 * 1024}[match.group(3).upper()]
        sizes[match.group(1).upper()] = int(match.group(2)) * scale
    return sizes


@dataclass(kw_only=True, frozen=True)
class GpuLimits:
    """The per-block limits that bound a GPU kernel's schedule."""

    max_shared_memory_per_block: int
    max_threads_per_block: int
    warp_size: int
    arch: str

    @classmethod
    def of(cls, target: Target) -> "GpuLimits":
        if not is_cuda(target):
            raise TargetError(f"GPU limits need a cuda target, got {target.kind.name}")
        attrs = target.attrs
        missing = [
            k
            for k in ("max_shared_memory_per_block", "max_threads_per_block", "thread_warp_size")
            if k not in attrs
        ]
        if missing:
            raise TargetError(
                f"cuda target lacks {', '.join(missing)}; use a tag such as 'nvidia/nvidia-h100' "
                "or add those keys to the target dict"
            )
        return cls(
            max_shared_memory_per_block=int(attrs["max_shared_memory_per_block"]),
            max_threads_per_block=int(attrs["max_threads_per_block"]),
            warp_size=int(attrs["thread_warp_size"]),
            arch=str(attrs.get("arch", "")),
        )


__all__ = [
    "TargetError",
    "GpuLimits",
    "host_target",
    "parse_target",
    "is_cpu",
    "is_cuda",
    "cpu_name",
    "num_cores",
    "has_vnni",
    "runs_here",
    "narrowed",
    "ISA_MCPU",
    "vector_bytes",
    "vector_registers",
    "cpu_cache_bytes",
]
