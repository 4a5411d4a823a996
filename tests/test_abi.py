"""The host/device ABI: the ctypes Structures passed to the kernels match the layouts the kernel
headers export (read back from the PTX nvcc makes of them, no GPU needed), and a layout that
differs is refused with the struct and field named."""
import ctypes
import re
import shutil
import struct
import subprocess

import pytest

from cusyncgen.cuda import abi, build

STRUCTS = (abi.StageArgs, abi.GemmArgs, abi.ConvArgs, abi.AttnGeo, abi.SoftmaxArgs)


def _exported(st):
    """The layout of `st` as the device would export it: [sizeof, offsets...] from ctypes."""
    return [ctypes.sizeof(st)] + [off for _, off, _ in abi.layout(st)]


def test_a_matching_layout_passes():
    for s in STRUCTS + (abi.TimelineStageArgs,):
        abi.compare(s, _exported(s))


def test_a_moved_field_is_named():
    class Narrow(ctypes.Structure):  # timeout_ns as a 32-bit int: every later field moves
        _fields_ = [(n, ctypes.c_int if n == "timeout_ns" else t) for n, t in abi.StageArgs._fields_]
    with pytest.raises(abi.AbiError, match=r"StageArgs\.stage_id: at offset 44 on the host, 48 in the kernels"):
        abi.CXX_NAME[Narrow] = "StageArgs"
        try:
            abi.compare(Narrow, _exported(abi.StageArgs))
        finally:
            del abi.CXX_NAME[Narrow]


def test_a_grown_field_a_missing_field_and_the_size_are_named():
    dev = _exported(abi.GemmArgs)
    grown = dev[:5] + [dev[5] + 4] + dev[6:]   # M takes 8 bytes in the kernels' view: N moves
    with pytest.raises(abi.AbiError, match=r"GemmArgs\.N: at offset 28 on the host, 32 in the kernels"):
        abi.compare(abi.GemmArgs, grown)
    with pytest.raises(abi.AbiError, match=r"GemmArgs: the kernels' struct has 11 fields, the host's 12"):
        abi.compare(abi.GemmArgs, dev[:-1])
    with pytest.raises(abi.AbiError, match=r"GemmArgs: 72 bytes on the host, 80 in the kernels"):
        abi.compare(abi.GemmArgs, [80] + dev[1:])
    with pytest.raises(abi.AbiError, match=r"GemmArgs\.counters: 8 bytes on the host, at most 4 in the kernels"):
        abi.compare(abi.GemmArgs, [dev[-1] + 4] + dev[1:])
    with pytest.raises(abi.AbiError, match="exports no layout"):
        abi.compare(abi.GemmArgs, [])


needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None or build.cutlass_include_dir() is None,
                                reason="needs nvcc and the CUTLASS headers (pip install nvidia-cutlass)")


def _ptx_arrays(tmp_path, defines=()):
    src = tmp_path / "abi.cu"
    src.write_text("#include <kernels/attention.cuh>\n#include <kernels/conv2d.cuh>\n#include <kernels/copy.cuh>\n")
    out = tmp_path / "abi.ptx"
    cmd = ["nvcc", "-std=c++17", "-ptx", "-arch=sm_80", "--expt-relaxed-constexpr", *[f"-D{d}" for d in defines],
           f"-I{build.runtime_include_dir()}", f"-I{build.cutlass_include_dir()}", "-o", str(out), str(src)]
    subprocess.run(cmd, check=True, capture_output=True)
    ptx = out.read_text()
    out = {}  # PTX spells a constant array as its bytes, trailing zeros left out
    for m in re.finditer(r"\.b8 (cusync_abi_\w+)\[(\d+)\] = \{([^}]*)\}", ptx):
        raw = bytes(int(v) for v in m.group(3).split(",")).ljust(int(m.group(2)), b"\0")
        out[m.group(1)] = list(struct.unpack(f"<{len(raw) // 8}q", raw))
    return out


@pytest.mark.nvcc
@needs_nvcc
def test_the_kernel_headers_export_the_host_layouts(tmp_path):
    arrays = _ptx_arrays(tmp_path)
    assert set(arrays) == {abi.symbol(s) for s in STRUCTS}
    for st in STRUCTS:
        abi.compare(st, arrays[abi.symbol(st)])
    timeline = _ptx_arrays(tmp_path, ("CUSYNC_TIMELINE",))
    abi.compare(abi.TimelineStageArgs, timeline[abi.symbol(abi.StageArgs)])
    with pytest.raises(abi.AbiError, match="StageArgs: the kernels' struct has 11 fields, the host's 9"):
        abi.compare(abi.StageArgs, timeline[abi.symbol(abi.StageArgs)])
