"""What running AMX tile code takes beyond the CPU: the OS's grant, and the tile configuration.

Both the probe kernels and the tensor intrinsics (:mod:`ms_heron.intrinsics.amx`) load the same
configuration: eight tiles of 16 rows by 64 bytes, the shape ``tdpbusd`` multiplies in full.
"""

from __future__ import annotations

import functools
import platform
import sys

from tvm.script import tirx as T

#: ``ldtilecfg``'s 64-byte configuration as eight little-endian u64 words: palette 1; eight tiles
#: of 16 rows by 64 bytes (the column widths at bytes 16-31, the row counts at bytes 48-55).
TILE_CONFIG = (1, 0, 0x0040_0040_0040_0040, 0x0040_0040_0040_0040, 0, 0, 0x1010_1010_1010_1010, 0)


def tile_instruction(name: str, *args):
    """A call of the AMX instruction ``llvm.x86.<name>`` (tile registers named by immediates)."""
    return T.call_llvm_intrin("void", f"llvm.x86.{name}", *args)


@T.macro
def load_tile_config():
    """TVMScript that loads :data:`TILE_CONFIG` into the running thread's tile registers."""
    config = T.alloc_buffer((8,), "uint64", scope="local")
    for w in range(8):
        config[w] = T.uint64(0)
    config[0] = T.uint64(TILE_CONFIG[0])
    config[2] = T.uint64(TILE_CONFIG[2])
    config[3] = T.uint64(TILE_CONFIG[3])
    config[6] = T.uint64(TILE_CONFIG[6])
    T.evaluate(tile_instruction("ldtilecfg", T.address_of(config[0])))


#: The Linux system call that grants a process the AMX tile state: ``arch_prctl`` (syscall 158 on
#: x86-64) with ``ARCH_REQ_XCOMP_PERM`` (0x1023) for ``XFEATURE_XTILEDATA`` (18).
TILE_STATE_REQUEST = (158, 0x1023, 18)


@functools.cache
def request_amx_tile_state() -> bool:
    """Ask Linux for this process's permission to use AMX tile data (``arch_prctl`` with
    ``ARCH_REQ_XCOMP_PERM``; without it the first tile instruction kills the process). True when
    granted. The grant holds for the whole process, so every thread of TVM's pool may use tiles."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return False
    import ctypes  # pylint: disable=import-outside-toplevel

    try:
        return ctypes.CDLL(None, use_errno=True).syscall(*TILE_STATE_REQUEST) == 0
    except (OSError, AttributeError):
        return False
