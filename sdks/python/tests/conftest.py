"""Fixtures of the SDK tests: a real `axp serve` (the binary at $AXP_BIN, default the
workspace's target/debug/axp) on a free loopback port with a throw-away state directory and
workspace, and `CutProxy`, a loopback TCP relay in front of it that the tests use to break
connections in the middle of an event stream, as a flaky network or a restarting proxy would.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional

import pytest

from axp_sdk import Client

REPO = Path(__file__).resolve().parents[3]
SERVING = re.compile(r" on (http://127\.0\.0\.1:\d+/axp)")


def _die_with_parent() -> None:
    """Runs in the gateway's process before exec: the kernel sends it SIGTERM when the test
    process dies, so a run killed before its teardown (a timeout, ^C twice) leaves no gateway
    behind. PR_SET_PDEATHSIG is option 1 of prctl(2)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)


@dataclass
class Gateway:
    url: str
    workspace: Path
    state: Path


@pytest.fixture(scope="session")
def gateway() -> Iterator[Gateway]:
    binary = Path(os.environ.get("AXP_BIN", REPO / "target" / "debug" / "axp"))
    if not binary.is_absolute():
        binary = REPO / binary
    assert binary.exists(), f"no gateway binary at {binary} (build it or set AXP_BIN)"
    with tempfile.TemporaryDirectory(prefix="axp-sdk-py.") as tmp:
        state, ws = Path(tmp, "state"), Path(tmp, "ws")
        state.mkdir()
        ws.mkdir()
        log = Path(tmp, "axp.err")
        with open(log, "wb") as err:
            # Its own session (process group), so the teardown reaches whatever it started.
            proc = subprocess.Popen(
                [str(binary), "serve", "--listen", "127.0.0.1:0", "--state-dir", str(state),
                 "--workspace", str(ws)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
                preexec_fn=_die_with_parent)
        try:
            url = None
            deadline = time.monotonic() + 60
            while url is None:
                m = SERVING.search(log.read_text(errors="replace"))
                if m:
                    url = m.group(1)
                    break
                if proc.poll() is not None:
                    raise RuntimeError(f"the gateway exited: {log.read_text(errors='replace')}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the gateway did not start in 60 s: {log.read_text(errors='replace')}")
                time.sleep(0.05)
            yield Gateway(url=url, workspace=ws, state=state)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()


@pytest.fixture
def client(gateway: Gateway) -> Iterator[Client]:
    with Client(gateway.url) as c:
        c.open_session()
        yield c


class CutProxy:
    """A loopback TCP relay to the gateway that can break its connections.

    `cut()` closes every connection open at that moment, both ways. With `cut_after_bytes`,
    each connection is closed once it has carried that many bytes from the gateway to the
    client, wherever that falls (inside a header, inside an SSE message). `accepted` counts the
    connections clients opened.
    """

    def __init__(self, target_url: str, cut_after_bytes: Optional[int] = None):
        m = re.match(r"http://127\.0\.0\.1:(\d+)(/.*)", target_url)
        assert m, target_url
        self._target = ("127.0.0.1", int(m.group(1)))
        self._path = m.group(2)
        self._cut_after = cut_after_bytes
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._lock = threading.Lock()
        self._open: List[socket.socket] = []
        self._closed = False
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}{self._path}"

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self._listener.accept()
            except OSError:
                return
            up = socket.create_connection(self._target)
            with self._lock:
                self.accepted += 1
                self._open += [down, up]
            threading.Thread(target=self._pump, args=(down, up, None), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, down, self._cut_after), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, budget: Optional[int]) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if budget is not None:
                    data = data[:budget]
                    budget -= len(data)
                dst.sendall(data)
                if budget == 0:
                    break
        except OSError:
            pass
        self._close_pair(src, dst)

    def _close_pair(self, *socks: socket.socket) -> None:
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def cut(self) -> int:
        """Closes every open connection; returns how many sockets it closed."""
        with self._lock:
            socks, self._open = self._open, []
        self._close_pair(*socks)
        return len(socks)

    def close(self) -> None:
        self._listener.close()
        self.cut()


@pytest.fixture
def proxy_factory(gateway: Gateway) -> Iterator:
    made: List[CutProxy] = []

    def make(cut_after_bytes: Optional[int] = None) -> CutProxy:
        p = CutProxy(gateway.url, cut_after_bytes)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()
