"""Writing outputs without losing the previous ones, and refusing to write over an input.

Every file a command writes (a header, a rewritten kernel, a report, a tune cache, a bench result)
goes through ``write_files``: each is written to a temporary file beside it and renamed over it
only once every one of them is complete, so a write that fails part-way (a full disk) leaves the
previous files as they were. Imports nothing of cusyncgen but its errors, so every layer may use it.
"""

from __future__ import annotations

import itertools
import os
import stat
from pathlib import Path

from cusyncgen.errors import CusyncError

_counter = itertools.count()


def same_file(a, b) -> bool:
    """Do paths ``a`` and ``b`` name one file (through links, ``..`` or another spelling)?"""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        try:
            return os.path.realpath(a) == os.path.realpath(b)
        except (OSError, ValueError):
            return False


def refuse_overwrite(outputs, inputs) -> None:
    """A CusyncError when an output would replace an input (``cusyncgen a.dep -o a.dep``)."""
    for out in outputs:
        for inp in inputs:
            if out is not None and inp is not None and str(inp) != "-" and same_file(out, inp):
                raise CusyncError(f"the output {out} is the input {inp}: writing it would replace the input "
                                  "(choose another -o)")


def check_directory(path, option: str = "-o") -> None:
    """A CusyncError unless ``path`` is a directory one can write in, or one that can be made
    (checked before a long run, so that its results have somewhere to go)."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise CusyncError(f"{option} {path}: it is a file, not a directory")
    existing = p
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise CusyncError(f"{option} {path}: {existing} is a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise CusyncError(f"{option} {path}: cannot write in {existing}: permission denied")


def make_directory(path, option: str = "-o") -> None:
    """``path`` as a directory (made with its parents where missing), or a CusyncError."""
    check_directory(path, option)
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CusyncError(f"{option} {path}: cannot make the directory: {_why(e)}") from None


def write_files(files: dict) -> None:
    """Write ``{path: data}`` (data: str, bytes, or an iterable of str), all or nothing: each to a
    temporary file in its directory, then each renamed over its path once all are written. A
    failure removes the temporary files and is a CusyncError naming the path; the files already
    there are left as they were. A path that exists and is not a regular file (/dev/null, a pipe)
    is written directly; a link is followed (the file it names is replaced, the link kept)."""
    staged: list = []   # (temporary, final)
    try:
        for path, data in files.items():
            final = Path(os.path.realpath(path))
            try:
                mode = os.stat(final).st_mode
            except FileNotFoundError:
                mode = None
            except (OSError, ValueError) as e:
                raise CusyncError(f"cannot write {path}: {_why(e)}") from None
            if mode is not None and stat.S_ISDIR(mode):
                raise CusyncError(f"cannot write {path}: it is a directory")
            if mode is not None and not stat.S_ISREG(mode):
                _write_to(final, data, path, os.O_WRONLY | os.O_TRUNC)
                continue
            tmp = _temporary(final, path)
            staged.append((tmp, final))
            _write_to(tmp, data, path, None)
            if mode is not None:
                os.chmod(tmp, stat.S_IMODE(mode))
        for tmp, final in staged:
            os.replace(tmp, final)
        staged.clear()
    except OSError as e:
        raise CusyncError(f"cannot write {e.filename or 'a file'}: {_why(e)}") from None
    finally:
        for tmp, _ in staged:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def write_file(path, data) -> None:
    """``write_files({path: data})``."""
    write_files({path: data})


def _temporary(final: Path, shown) -> Path:
    """A new, empty file beside ``final`` (created with the umask's permissions)."""
    if not final.parent.is_dir():
        raise CusyncError(f"cannot write {shown}: no such directory {final.parent}")
    for _ in range(100):
        tmp = final.with_name(f".{final.name}.{os.getpid()}-{next(_counter)}.tmp")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return tmp
        except FileExistsError:
            continue
        except OSError as e:
            raise CusyncError(f"cannot write {shown}: {_why(e)}") from None
    raise CusyncError(f"cannot write {shown}: no free temporary name in {final.parent}")


def _write_to(target: Path, data, shown, flags) -> None:
    try:
        fd = os.open(target, flags if flags is not None else os.O_WRONLY | os.O_TRUNC)
        with os.fdopen(fd, "wb") as f:
            for chunk in _chunks(data):
                f.write(chunk)
            f.flush()
            if flags is None:
                os.fsync(f.fileno())
    except OSError as e:
        raise CusyncError(f"cannot write {shown}: {_why(e)}") from None


def _chunks(data):
    if isinstance(data, (bytes, bytearray)):
        yield bytes(data)
    elif isinstance(data, str):
        yield data.encode("utf-8")
    else:
        for c in data:
            yield c.encode("utf-8") if isinstance(c, str) else bytes(c)


def _why(e: Exception) -> str:
    return getattr(e, "strerror", None) or str(e)
