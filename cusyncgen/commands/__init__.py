"""The GPU path's commands, above the workloads: ``cusyncgen bench`` and ``tune`` (bench, tune),
``python -m cusyncgen.commands.prebuild`` (every module compiled ahead of time), ``.timeline``
(per-block timelines), ``.selfcheck`` (one MLP checked once per configuration), ``.conv_costs``
(what synchronization costs a Conv2D), ``.sm90`` (the Hopper library built, its path printed), and
the probes (``.decode_trace``, ``.fmha_layout``, ``.swap_slope``, ``.prompt_gemms``: where a kernel's time
goes).

Layers, top to bottom: commands -> cusyncgen.workloads (one protocol, one registry) -> the
mechanism (cusyncgen.cuda: build, driver, abi, chain, the sm90 library) -> runtime_cuda. A command
may import a workload; nothing below imports a command (tests/test_layers.py checks it).
"""


def missing_sm90(prog: str, *modules: str) -> bool:
    """The probes' guard before their first GPU call: True, after one line on stderr naming what is
    missing, where torch, one of `modules` (importable names) or an sm_90 GPU that torch sees is not
    here; False where all are."""
    import importlib
    import sys
    for name in ("torch", *modules):
        try:
            importlib.import_module(name)
        except ImportError as exc:
            print(f"{prog}: needs {name} ({exc})", file=sys.stderr)
            return True
    import torch
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print(f"{prog}: needs an sm_90 GPU", file=sys.stderr)
        return True
    return False
