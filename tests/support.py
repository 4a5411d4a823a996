"""Helpers shared by test modules (pytest puts this folder on sys.path)."""

from __future__ import annotations

import contextlib
import io
import sys

from cusyncgen import cli


def run_cli(argv, stdin="") -> tuple:
    """cli.main in-process: (exit status, stdout, stderr); ``stdin`` text, or a file object (e.g.
    one already closed)."""
    out, err = io.StringIO(), io.StringIO()
    old_in = sys.stdin
    sys.stdin = io.StringIO(stdin) if isinstance(stdin, str) else stdin
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main(list(argv))
    finally:
        sys.stdin = old_in
    return rc, out.getvalue(), err.getvalue()


def sm90_gpu() -> tuple:
    """(available, why not): torch with CUDA on an sm_90 GPU, what the sm90 GPU tests need."""
    try:
        import torch
    except ImportError:
        return False, "torch is not installed"
    ok = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
    return ok, "" if ok else "no sm_90 GPU (torch sees none)"


def sm90_cuda() -> tuple:
    """(available, why not): CuPy and the driver on an sm_90 GPU, what the CuPy-based sm90 GPU tests
    need."""
    from cusyncgen.cuda import available
    ok, why = available()
    if ok:
        from cusyncgen.cuda import driver
        if driver.arch() != "sm_90a":
            ok, why = False, f"not an sm_90 GPU ({driver.arch()})"
    return ok, why
