"""A real ``chroma run`` server on a free loopback port, for tests and benchmarks (it ships with chromadb)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from docpc_retrievers.store.chroma_process import (
    chroma_command,
    free_port,
    wait_until_serving,
)

__all__ = ["ChromaServer", "chroma_server", "free_port"]


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
        if not wait_until_serving(self.host, self.port, self.proc, timeout):
            self.stop()
            raise RuntimeError(f"chroma server on port {self.port} did not start")

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
