"""An HTTP front for the runner: POST a gzip tar of a batch, get its result lines back.

Nothing received is unpickled or executed: the tar is unpacked as plain files, the
manifest is JSON, data is npz without pickles, and kernels are loaded by the backend.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path, PurePosixPath

from .batch import BatchError, check_data, load_batch
from .runner import RunnerError, worker_env, ordered_results, run_batch

MAX_BODY = 512 * 1024 * 1024
UNPACK_FACTOR = 4  # cubins compress well; more than this many times the body is a bomb
_CHUNK = 1 << 20


class Refused(Exception):
    """A request the server turns down: ``status`` is the HTTP status to answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def extract_batch(archive: Path, dest: Path, max_unpacked: int) -> None:
    """Unpack a gzip tar into ``dest`` after checking every member; raises ``Refused``."""
    try:
        with tarfile.open(archive, mode="r:gz") as tar:
            members = tar.getmembers()
            total = 0
            for m in members:
                parts = PurePosixPath(m.name).parts
                if m.name.startswith(("/", "\\")) or ".." in parts or "\\" in m.name:
                    raise Refused(400, f"tar member {m.name!r} leaves the batch directory")
                if not (m.isfile() or m.isdir()):
                    raise Refused(400, f"tar member {m.name!r} is not a plain file or directory")
                total += m.size
                if total > max_unpacked:
                    raise Refused(413, f"the batch unpacks to more than {max_unpacked} bytes")
            tar.extractall(dest, members=members, filter="data")
    except (tarfile.TarError, EOFError, OSError) as e:
        raise Refused(400, f"the body is not a readable gzip tar: {e}") from None


def probe_device(backend: str) -> dict:
    """Device name and arch, asked of a fresh process so this one holds no CUDA context."""
    cmd = [sys.executable, "-m", "tensortune.device_runner", "--probe", "--backend", backend]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=worker_env())
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RunnerError(f"device probe failed (exit code {proc.returncode}): {tail}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


class BatchServer(ThreadingHTTPServer):
    """Runs one batch at a time (a lock: concurrent requests wait their turn)."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], workdir: str | None, backend: str,
                 max_body: int = MAX_BODY) -> None:
        super().__init__(address, _Handler)
        self.workdir = workdir
        self.backend = backend
        self.max_body = max_body
        self.run_lock = threading.Lock()
        self._device: dict | None = None
        self._device_lock = threading.Lock()

    def device(self) -> dict:
        with self._device_lock:
            if self._device is None:
                self._device = probe_device(self.backend)
            return self._device

    def run_upload(self, body_path: Path, tmp: Path) -> dict:
        batch_dir = tmp / "batch"
        batch_dir.mkdir()
        extract_batch(body_path, batch_dir, self.max_body * UNPACK_FACTOR)
        try:
            batch = load_batch(batch_dir)
            check_data(batch)  # inputs it cannot generate as exported: the batch's fault
        except BatchError as e:
            raise Refused(400, str(e)) from None
        # results live outside the upload: a results.jsonl inside it must not skip candidates
        out = tmp / "results.jsonl"
        with self.run_lock:
            summary = run_batch(batch_dir, backend=self.backend, out=out)
        return {"results": ordered_results(batch, out), "summary": summary}


class _Handler(BaseHTTPRequestHandler):
    server: BatchServer

    def _answer(self, status: int, doc: dict) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        if self.path.rstrip("/") != "/v1/device":
            self._answer(404, {"error": f"no such path {self.path}"})
            return
        try:
            self._answer(200, self.server.device())
        except (RunnerError, ValueError, OSError, subprocess.SubprocessError) as e:
            self._answer(500, {"error": str(e)})

    def do_POST(self) -> None:  # noqa: N802
        if self.path.rstrip("/") != "/v1/batches":
            self._answer(404, {"error": f"no such path {self.path}"})
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self.close_connection = True
            self._answer(411, {"error": "a Content-Length header is required"})
            return
        if length < 0 or length > self.server.max_body:
            # the body stays unread: close so it is not taken for the next request
            self.close_connection = True
            self._answer(413, {"error": f"the body is {length} bytes, the limit is {self.server.max_body}"})
            return
        tmp = Path(tempfile.mkdtemp(prefix="tt-batch-", dir=self.server.workdir))
        try:
            body_path = tmp / "upload.tar.gz"
            with open(body_path, "wb") as f:
                left = length
                while left > 0:
                    chunk = self.rfile.read(min(_CHUNK, left))
                    if not chunk:
                        raise Refused(400, "the body ended before Content-Length bytes")
                    f.write(chunk)
                    left -= len(chunk)
            self._answer(200, self.server.run_upload(body_path, tmp))
        except Refused as e:
            self._answer(e.status, {"error": str(e)})
        except Exception as e:  # noqa: BLE001 - always answer; RunnerError, a full disk, ...
            self._answer(500, {"error": f"{type(e).__name__}: {e}"})
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def make_server(host: str = "127.0.0.1", port: int = 8765, workdir: str | None = None,
                backend: str = "cupy", max_body: int = MAX_BODY) -> BatchServer:
    """A bound server (port 0 picks a free one: see ``server.server_address``)."""
    return BatchServer((host, port), workdir, backend, max_body)


def serve(host: str = "127.0.0.1", port: int = 8765, workdir: str | None = None,
          backend: str = "cupy", max_body: int = MAX_BODY) -> None:
    """Serve until interrupted; loopback by default (anyone who can connect can run code)."""
    server = make_server(host, port, workdir, backend, max_body)
    bound_host, bound_port = server.server_address[:2]
    print(f"tensortune device runner on http://{bound_host}:{bound_port} ({backend})", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
