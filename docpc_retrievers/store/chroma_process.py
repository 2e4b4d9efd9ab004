"""An embedded store's Chroma served from a child process: ``chroma run`` on the store's own folder, on a loopback
port, for as long as the store is open.

Why: Chroma's embedded client holds Python's lock for the whole of each write (a commit of eight grids keeps every
other thread of the process waiting about 100 ms), so in an indexing run the threads that feed the encoder wait on
the store. Behind a child server the write is that process's work; this one only sends it.

The child is a small watcher (this interpreter) that starts ``chroma run`` and stops it when its standard input
closes, which happens when the store closes and also when this process dies in any way: no server outlives its
store. The store's writer lock, manifest and cache stay this process's, as in embedded mode.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

from docpc_retrievers.errors import StoreError

__all__ = ["ChromaProcess", "chroma_command", "free_port", "wait_until_serving"]

#: The watcher the child runs: ``chroma run`` as its own child, stopped (SIGTERM, then SIGKILL after 30 s) when the
#: watcher's standard input reaches its end; the watcher ends with the server's exit status when the server ends first.
_WATCHER = """
import os, subprocess, sys, threading
server = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL)
threading.Thread(target=lambda: os._exit(server.wait()), daemon=True).start()
sys.stdin.buffer.read()
server.terminate()
try:
    server.wait(30)
except subprocess.TimeoutExpired:
    server.kill()
    server.wait()
os._exit(0)
"""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def chroma_command() -> list[str]:
    """How to run chromadb's ``chroma`` command: this interpreter calling its Rust command line, which is all the
    ``chroma`` script does for ``run``, without the script's import of chromadb's Python package (a server answers
    in about 0.3 s instead of 1.5 s) and with no need for the script on PATH (chromadb installed with
    ``pip --target`` has none)."""
    return [sys.executable, "-c", ("import sys, chromadb_rust_bindings; sys.argv[0] = 'chroma'; "
                                   "chromadb_rust_bindings.cli(sys.argv)")]


def wait_until_serving(host: str, port: int, proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """Wait until the Chroma server at ``host:port`` answers its heartbeat: False when ``proc`` ended first or
    ``timeout`` seconds passed."""
    import chromadb

    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        try:
            chromadb.HttpClient(host=host, port=port).heartbeat()
            return True
        except Exception:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
    return False


class ChromaProcess:
    """``chroma run`` serving the Chroma folder ``data`` on a free loopback port, from :meth:`start` to :meth:`stop`.

    ``start_timeout``: seconds to wait for its first answer (a large store's first start reads its write log).
    A port taken between choosing it and the server's bind is retried with another.
    """

    def __init__(self, data: Path, *, start_timeout: float = 120.0) -> None:
        self.data = Path(data)
        self.host = "127.0.0.1"
        self.port = 0
        self.start_timeout = start_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, attempts: int = 3) -> None:
        """Start the server and wait until it answers; StoreError naming the folder and the server's last words
        when it does not."""
        self.data.mkdir(parents=True, exist_ok=True)
        said = ""
        for _ in range(attempts):
            self.port = free_port()
            self._log = tempfile.TemporaryFile(prefix="docpc-chroma-")
            env = {**os.environ, "RUST_LOG": os.environ.get("DOCPC_CHROMA_LOG", "error")}
            command = [*chroma_command(), "run", "--path", str(self.data), "--host", self.host,
                       "--port", str(self.port)]
            self._proc = subprocess.Popen([sys.executable, "-c", _WATCHER, *command], stdin=subprocess.PIPE,
                                          stdout=self._log, stderr=subprocess.STDOUT, env=env)
            if wait_until_serving(self.host, self.port, self._proc, self.start_timeout):
                return
            said = self._last_words()
            self.stop()
        raise StoreError(f"Chroma could not be served from {self.data} by a child `chroma run`: {said or 'no answer'}")

    def stop(self, timeout: float = 60.0) -> None:
        """Stop the server (its watcher's input closed) and wait for it; killed after ``timeout`` seconds."""
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                if proc.stdin is not None:
                    proc.stdin.close()
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def _last_words(self, limit: int = 600) -> str:
        """The end of what the server printed, on one line (why it did not start)."""
        if self._log is None:
            return ""
        self._log.seek(0)
        text = self._log.read().decode("utf-8", "replace")
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        return " ".join(lines)[-limit:]
