"""Attach: a WebSocket to a running command. Binary frames carry input and
output; text frames carry resizes in and the exit out."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any, Dict, Optional

from .errors import error_from

# websockets is imported where it is used, not here, so that whichever
# release is installed (or a test's stand-in for one) is the one asked.


def _connect(url: str, headers: Dict[str, str]) -> Any:
    """websockets' connect, in the form the installed release has. From 13
    on, ``websockets.asyncio.client.connect`` takes ``additional_headers``
    (and from 14 on the top-level ``connect`` is that one, whose unknown
    keywords go to the socket and fail); before, the legacy ``connect``
    takes ``extra_headers``. The range in pyproject.toml is the releases
    these two forms are tested with."""
    try:
        from websockets.asyncio.client import connect  # type: ignore[import-not-found]
    except ImportError:
        import websockets

        return websockets.connect(url, extra_headers=headers, max_size=1 << 20)  # type: ignore[attr-defined]
    return connect(url, additional_headers=headers, max_size=1 << 20)


def _refused_status(e: BaseException) -> Optional[int]:
    """The HTTP status of a refused handshake, in either release's form:
    ``InvalidStatus.response.status_code`` (13 on) or
    ``InvalidStatusCode.status_code`` (before)."""
    response = getattr(e, "response", None)
    if response is not None and isinstance(getattr(response, "status_code", None), int):
        return response.status_code
    code = getattr(e, "status_code", None)
    return code if isinstance(code, int) else None


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
        """Open the WebSocket; a refused handshake raises the CoveError of
        its status."""
        from websockets.exceptions import InvalidHandshake

        try:
            self._ws = await _connect(self._url, {"Authorization": "Bearer " + self._key})
        except InvalidHandshake as e:
            status = _refused_status(e)
            if status is None:
                raise
            raise error_from(status, b"") from None
        return self

    async def __aenter__(self) -> "AsyncAttachment":
        return await self.connect()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def send(self, data: bytes) -> None:
        """Send bytes to the command's stdin."""
        await self._ws.send(bytes(data))

    async def resize(self, cols: int, rows: int) -> None:
        """Resize the command's terminal (a pty command's)."""
        await self._ws.send(json.dumps({"resize": {"cols": cols, "rows": rows}}))

    async def recv(self) -> Optional[bytes]:
        """The next output bytes, or None once the command has ended."""
        from websockets.exceptions import ConnectionClosedOK

        while True:
            try:
                m = await self._ws.recv()
            except ConnectionClosedOK:
                return None
            if isinstance(m, bytes):
                return m
            d = json.loads(m)
            if "exit" in d:
                self.exit = d["exit"]
                return None

    async def close(self) -> None:
        """Close the WebSocket; the command runs on."""
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

    def connect(self) -> "SyncAttachment":
        """Open the WebSocket; a refused handshake raises the CoveError of
        its status."""
        try:
            self._call(self._a.connect())
        except BaseException:
            self._stop()
            raise
        return self

    @property
    def exit(self) -> Optional[Dict[str, Any]]:
        return self._a.exit

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def send(self, data: bytes) -> None:
        """Send bytes to the command's stdin."""
        self._call(self._a.send(data))

    def resize(self, cols: int, rows: int) -> None:
        """Resize the command's terminal (a pty command's)."""
        self._call(self._a.resize(cols, rows))

    def recv(self) -> Optional[bytes]:
        """The next output bytes, or None once the command has ended."""
        return self._call(self._a.recv())

    def close(self) -> None:
        """Close the WebSocket; the command runs on."""
        try:
            self._call(self._a.close())
        finally:
            self._stop()

    def _stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> "SyncAttachment":
        return self if self._a._ws is not None else self.connect()

    def __exit__(self, *exc: Any) -> None:
        self.close()
