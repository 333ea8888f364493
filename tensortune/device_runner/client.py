"""Send a batch directory to a device server (stdlib only, so it runs anywhere)."""
from __future__ import annotations

import io
import json
import os
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

# what a batch is made of; results.jsonl stays behind (the server measures afresh)
BATCH_ENTRIES = ("manifest.json", "data", "kernels")


class RemoteError(Exception):
    """The device server could not be reached or did not answer 200."""


def pack_batch(batch_dir: str | os.PathLike) -> bytes:
    """A gzip tar of the batch with manifest.json, data/ and kernels/ at its root."""
    root = Path(batch_dir)
    if not (root / "manifest.json").is_file():
        raise FileNotFoundError(f"{root}: no manifest.json")
    buf = io.BytesIO()
    # dereference: a linked data file travels as a file (the server refuses links)
    # level 1: kernel data barely compresses, and level 9 costs seconds per 100 MB
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1, dereference=True) as tar:
        for name in BATCH_ENTRIES:
            if (root / name).exists():
                tar.add(root / name, arcname=name)
    return buf.getvalue()


def _request(url: str, data: bytes | None, timeout_s: float) -> dict:
    headers = {"Content-Type": "application/gzip"} if data is not None else {}
    req = urllib.request.Request(url, data=data, headers=headers,
                                 method="POST" if data is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            body = resp.read()
    except urllib.error.HTTPError as e:
        detail = e.read().decode(errors="replace")
        try:
            detail = json.loads(detail).get("error", detail)
        except (json.JSONDecodeError, AttributeError):
            pass
        raise RemoteError(f"{url} answered {e.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise RemoteError(f"cannot reach {url}: {reason}") from None
    try:
        return json.loads(body)
    except json.JSONDecodeError:
        raise RemoteError(f"{url} answered 200 with a body that is not JSON") from None


def device_info(url: str, timeout_s: float = 60.0) -> dict:
    """``{"device": ..., "arch": ...}`` of the server at ``url`` (e.g. http://127.0.0.1:8765)."""
    return _request(url.rstrip("/") + "/v1/device", None, timeout_s)


def run_remote(url: str, batch_dir: str | os.PathLike, timeout_s: float = 3600.0) -> list[dict]:
    """Run a batch on the server at ``url``; its result lines in manifest order."""
    doc = _request(url.rstrip("/") + "/v1/batches", pack_batch(batch_dir), timeout_s)
    results = doc.get("results") if isinstance(doc, dict) else None
    if not isinstance(results, list):
        raise RemoteError(f"{url}: the answer has no 'results' list")
    return results
