"""A client of the service's HTTP API (httpx): submit, list, poll, cancel, fetch."""
from __future__ import annotations

import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx


class ServiceError(RuntimeError):
    """The server refused a request: its status and what it said."""

    def __init__(self, status: int, detail: str):
        super().__init__(f"HTTP {status}: {detail}")
        self.status, self.detail = status, detail


class ServiceClient:
    def __init__(self, url: str, token: str, timeout: float = 60.0):
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, timeout=timeout,
                                  headers={"Authorization": f"Bearer {token}"})

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "ServiceClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, method: str, path: str, **kwargs):
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as err:
            raise ServiceError(0, f"cannot reach {self.url}: {err}") from None
        if response.status_code >= 400:
            try:
                detail = response.json().get("detail", response.text)
            except ValueError:
                detail = response.text
            raise ServiceError(response.status_code, str(detail))
        return response

    def health(self) -> dict:
        return self._call("GET", "/v1/health").json()

    def submit(self, model: str | Path, sla_ms: float | None = None, trials: int | None = None,
               target: str = "host", hardware_free: bool = False) -> dict:
        """Upload ``model`` (an .onnx file); returns ``{"id", "state", "name"}``."""
        fields = {"target": target, "hardware_free": str(hardware_free).lower()}
        if sla_ms is not None:
            fields["sla_ms"] = str(sla_ms)
        if trials is not None:
            fields["trials"] = str(trials)
        with open(model, "rb") as f:
            files = {"model": (Path(model).name, f, "application/octet-stream")}
            return self._call("POST", "/v1/jobs", data=fields, files=files).json()

    def jobs(self) -> list[dict]:
        return self._call("GET", "/v1/jobs").json()

    def job(self, job_id: str) -> dict:
        return self._call("GET", f"/v1/jobs/{job_id}").json()

    def cluster(self) -> dict:
        """Where jobs run: nodes, devices (busy, taken out, busy fraction), the build CPU."""
        return self._call("GET", "/v1/cluster").json()

    def events(self, job_id: str) -> list[dict]:
        """The job's events, oldest first (``{"t", "kind", "data"}``)."""
        return self._call("GET", f"/v1/jobs/{job_id}/events").json()

    def cancel(self, job_id: str) -> dict:
        return self._call("DELETE", f"/v1/jobs/{job_id}").json()

    def wait(self, job_id: str, poll_s: float = 1.0, timeout_s: float | None = None,
             on_poll: Callable[[dict], None] | None = None) -> dict:
        """Poll until the job is done, failed or cancelled; returns its last view."""
        start = time.monotonic()
        while True:
            job = self.job(job_id)
            if on_poll:
                on_poll(job)
            if job["state"] in ("done", "failed", "cancelled"):
                return job
            if timeout_s is not None and time.monotonic() - start > timeout_s:
                raise TimeoutError(f"job {job_id} still {job['state']} after {timeout_s:.0f} s")
            time.sleep(poll_s)

    def fetch(self, job_id: str, out: str | Path) -> Path:
        """Download the job's artifact and unpack it into ``out`` (module/, metaschedule/,
        run.json); the archive is kept beside them."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        archive = out / f"tensortune-{job_id}.tar.gz"
        tmp = archive.with_name(archive.name + ".part")
        with self._http.stream("GET", f"/v1/jobs/{job_id}/artifact") as response:
            if response.status_code >= 400:
                response.read()
                raise ServiceError(response.status_code,
                                   response.json().get("detail", response.text))
            with open(tmp, "wb") as f:
                for chunk in response.iter_bytes():
                    f.write(chunk)
        tmp.replace(archive)
        with tarfile.open(archive) as tar:
            tar.extractall(out, filter="data")  # no absolute paths, links out, devices
        return out
