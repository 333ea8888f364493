"""A request body limit (ASGI middleware): ``413`` before an oversize upload is buffered.

A declared ``Content-Length`` over the limit is refused before a byte is read; a chunked body
is counted as it arrives and refused once it passes the limit, whatever the application was
about to answer (its form parser sees the body cut short).
"""
from __future__ import annotations

import json


class _TooLarge(Exception):
    pass


class BodyLimit:
    def __init__(self, app, max_bytes: int, paths: tuple[str, ...] = ()):
        self.app = app
        self.max_bytes = max_bytes
        self.paths = paths

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or (self.paths and scope["path"] not in self.paths):
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None:
            try:
                too_big = int(declared) > self.max_bytes
            except ValueError:
                too_big = False  # the server answers a malformed header itself
            if too_big:
                return await self._refuse(send)
        seen, over, started = 0, False, False

        async def counted():
            nonlocal seen, over
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    over = True
                    raise _TooLarge()
            return message

        async def guarded(message):
            nonlocal started
            if over:
                return  # the answer is the 413 below
            started = True
            await send(message)

        try:
            await self.app(scope, counted, guarded)
        except Exception:  # _TooLarge, perhaps wrapped by the application's error handling
            if not over:
                raise
        if over and not started:
            await self._refuse(send)

    async def _refuse(self, send):
        body = json.dumps({"detail": f"the request is over this server's upload limit "
                                     f"({self.max_bytes / 2**20:.0f} MiB)"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})
