"""A real server on loopback (``python -m tensortune serve`` in a subprocess), its token, and
small ONNX models exported from PyTorch with irregular channels and sizes."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

TOKEN = "test-token-0123456789abcdef"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One ``tensortune serve`` process over ``home``; ``kill9`` and ``start`` again resume."""

    def __init__(self, home: Path, max_upload_mb: float = 2.0, args: tuple[str, ...] = (),
                 env: dict[str, str] | None = None):
        self.home = home
        self.args = tuple(args)  # more ``serve`` options (``--devices``)
        self.env = dict(env or {})  # more TENSORTUNE_* settings
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token_file = home / "tokens"
        home.mkdir(parents=True, exist_ok=True)
        self.token_file.write_text(f"# test tokens\n{TOKEN}\n")
        self.max_upload_mb = max_upload_mb
        self.log = home / "server.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 120.0) -> "Server":
        env = dict(os.environ, TENSORTUNE_HOME=str(self.home), TENSORTUNE_MIN_REPEAT_MS="5",
                   TENSORTUNE_REPEAT="2", **self.env)
        cmd = [sys.executable, "-m", "tensortune", "serve", "--port", str(self.port),
               "--token-file", str(self.token_file), "--max-upload-mb", str(self.max_upload_mb),
               *self.args]
        self.proc = subprocess.Popen(cmd, env=env, stdout=open(self.log, "ab"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/v1/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"server did not answer in {timeout} s")

    def kill9(self) -> None:
        """``kill -9`` the server (its process group: the build and timing workers too)."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill9()


@pytest.fixture(scope="session")
def onnx_models(tmp_path_factory) -> dict[str, Path]:
    """Three small CNNs (3-channel stems; 24, 72 and 20 channels; 13x13 to 37x37 inputs)."""
    import torch
    from torch import nn

    out = tmp_path_factory.mktemp("onnx")
    torch.manual_seed(0)

    def net(c, hw, classes):
        return nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.ReLU(),
                             nn.Conv2d(c, c, 3, stride=2, padding=1), nn.ReLU(),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, classes)), hw

    models = {"small24": net(24, 13, 10), "wide72": net(72, 15, 7), "odd20": net(20, 37, 5)}
    paths = {}
    for name, (module, hw) in models.items():
        path = out / f"{name}.onnx"
        torch.onnx.export(module.eval(), (torch.randn(1, 3, hw, hw),), str(path),
                          input_names=["x"], dynamo=False)
        paths[name] = path
    return paths


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("service")).start()
    yield srv
    srv.stop()
    assert TOKEN not in srv.log.read_text()  # tokens are never logged


@pytest.fixture
def auth() -> dict:
    return {"Authorization": f"Bearer {TOKEN}"}
