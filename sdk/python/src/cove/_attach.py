"""Attach: a WebSocket to a running command. Binary frames carry input and
output; text frames carry resizes in and the exit out."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any, Dict, Optional

import websockets

from .errors import error_from


def _ws_url(url: str, sandbox_id: str, command_id: str, after: int) -> str:
    from urllib.parse import quote

    base = "ws" + url[len("http"):] if url.startswith("http") else url
    return f"{base}/v1/sandboxes/{quote(sandbox_id, safe='')}/commands/{quote(command_id, safe='')}/attach?after={after}"


class AsyncAttachment:
    """``await recv()`` returns output bytes, or None once the command has
    ended (``exit`` then holds its exit code, signal and timed_out)."""

    def __init__(self, url: str, key: str, sandbox_id: str, command_id: str, after: int = 0) -> None:
        self._url = _ws_url(url, sandbox_id, command_id, after)
        self._key = key
        self._ws: Any = None
        self.exit: Optional[Dict[str, Any]] = None

    async def connect(self) -> "AsyncAttachment":
        try:
            self._ws = await websockets.connect(  # type: ignore[attr-defined]
                self._url, extra_headers={"Authorization": "Bearer " + self._key}, max_size=1 << 20,
            )
        except websockets.exceptions.InvalidStatusCode as e:  # type: ignore[attr-defined]
            raise error_from(e.status_code, b"") from None
        return self

    async def __aenter__(self) -> "AsyncAttachment":
        return await self.connect()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def send(self, data: bytes) -> None:
        await self._ws.send(bytes(data))

    async def resize(self, cols: int, rows: int) -> None:
        await self._ws.send(json.dumps({"resize": {"cols": cols, "rows": rows}}))

    async def recv(self) -> Optional[bytes]:
        while True:
            try:
                m = await self._ws.recv()
            except websockets.exceptions.ConnectionClosedOK:  # type: ignore[attr-defined]
                return None
            if isinstance(m, bytes):
                return m
            d = json.loads(m)
            if "exit" in d:
                self.exit = d["exit"]
                return None

    async def close(self) -> None:
        if self._ws is not None:
            await self._ws.close()


class SyncAttachment:
    """The blocking form of AsyncAttachment: it runs an event loop of its
    own on a thread."""

    def __init__(self, url: str, key: str, sandbox_id: str, command_id: str, after: int = 0) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._a = AsyncAttachment(url, key, sandbox_id, command_id, after)
        try:
            self._call(self._a.connect())
        except BaseException:
            self._stop()
            raise

    @property
    def exit(self) -> Optional[Dict[str, Any]]:
        return self._a.exit

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def send(self, data: bytes) -> None:
        self._call(self._a.send(data))

    def resize(self, cols: int, rows: int) -> None:
        self._call(self._a.resize(cols, rows))

    def recv(self) -> Optional[bytes]:
        return self._call(self._a.recv())

    def close(self) -> None:
        try:
            self._call(self._a.close())
        finally:
            self._stop()

    def _stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> "SyncAttachment":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
