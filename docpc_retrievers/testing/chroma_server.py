"""A real ``chroma run`` server on a free loopback port, for tests and benchmarks (it ships with chromadb)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["ChromaServer", "chroma_command", "chroma_server", "free_port"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def chroma_command() -> list[str]:
    """How to run chromadb's ``chroma`` command: its script beside this interpreter or on PATH, else this interpreter
    running the same entry point (chromadb installed with ``pip --target``, as on a GPU benchmark machine, has no
    script on PATH)."""
    beside = Path(sys.executable).with_name("chroma")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("chroma")
    if found:
        return [found]
    # What chromadb's entry point does for ``run``, without its module's imports (requests, which such a machine
    # may lack): the server is chromadb's Rust command line.
    return [sys.executable, "-c", "import sys, chromadb_rust_bindings; sys.argv[0] = 'chroma'; "
                                  "chromadb_rust_bindings.cli(sys.argv)"]


class ChromaServer:
    """One ``chroma run --path DIR --host 127.0.0.1 --port P`` process that can be stopped and started again."""

    def __init__(self, data: Path, port: int | None = None) -> None:
        self.data = Path(data)
        self.host = "127.0.0.1"
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> None:
        """Start the server and wait until it answers its heartbeat."""
        self.data.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [*chroma_command(), "run", "--path", str(self.data), "--host", self.host, "--port", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        import chromadb

        deadline = time.time() + timeout
        while True:
            try:
                chromadb.HttpClient(host=self.host, port=self.port).heartbeat()
                return
            except Exception:
                if time.time() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"chroma server on port {self.port} did not start") from None
                time.sleep(0.2)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 30 s)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self.proc = None


@contextmanager
def chroma_server(data: Path) -> Iterator[ChromaServer]:
    """A started server for the duration of a ``with`` block."""
    server = ChromaServer(data)
    server.start()
    try:
        yield server
    finally:
        server.stop()
