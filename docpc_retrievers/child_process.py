"""A fresh Python interpreter as a helper process, with a pipe each way: render workers and the encoding process.

Started as ``python -c`` rather than by multiprocessing's spawn, so a user's script without a ``__main__`` guard
is never imported (and run) again in the child, and the child inherits nothing but two pipe ends and the
environment (the package's own folder first on its path, so a checkout runs without being installed).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from multiprocessing.connection import Connection
from pathlib import Path

__all__ = ["describe_exit", "start_child"]


def start_child(module: str, function: str, *, env: Mapping[str, str] | None = None,
                wide_pipe: bool = False) -> tuple[subprocess.Popen[bytes], Connection, Connection]:
    """Run ``module.function(read_fd, write_fd)`` in a fresh interpreter: ``(process, to_child, from_child)``.

    ``env``: variables set for the child on top of this process's; ``wide_pipe``: ask Linux for a 1 MiB pipe from
    the child (results that travel through the pipe cost a switch per 64 KiB otherwise). Its standard output is
    discarded and its standard error is this process's.
    """
    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    child_env = {**os.environ, **(env or {})}
    root = str(Path(__file__).resolve().parents[1])
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in (root, child_env.get("PYTHONPATH")) if p)
    code = f"from {module} import {function}; {function}({to_child_r}, {from_child_w})"
    try:
        process = subprocess.Popen([sys.executable, "-c", code], pass_fds=(to_child_r, from_child_w), env=child_env,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    except BaseException:
        for fd in (to_child_w, from_child_r):
            os.close(fd)
        raise
    finally:
        os.close(to_child_r)
        os.close(from_child_w)
    if wide_pipe:
        _widen_pipe(from_child_r)
    return process, Connection(to_child_w, readable=False), Connection(from_child_r, writable=False)


def describe_exit(process: subprocess.Popen[bytes], wait: float = 1.0) -> str:
    """How a child ended, for messages: ``signal SIGKILL``, ``exit code 1`` or ``no exit yet``."""
    try:
        code = process.wait(timeout=wait)
    except subprocess.TimeoutExpired:
        return "no exit yet"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _widen_pipe(fd: int) -> None:
    """Ask Linux for a 1 MiB pipe buffer (elsewhere the default stays)."""
    try:
        import fcntl

        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
    except (ImportError, OSError):
        pass
