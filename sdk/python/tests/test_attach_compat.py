"""attach() on the websockets client API of releases 14 and 15, which
cannot be installed here: a stand-in module with that API's shape takes
the place of the installed websockets (Debian's 10.4, which the tests
against the real server use). The stand-in's ``connect`` has the keyword
arguments of ``websockets.asyncio.client.connect`` in 14 and 15, and like it
hands any other keyword to the socket's creation, which refuses it: passing
10.4's ``extra_headers`` fails there as it does on a real install."""

import asyncio
import json
import sys
import types

import pytest

import cove
from cove._attach import AsyncAttachment, SyncAttachment


class InvalidHandshake(Exception):
    pass


class InvalidStatus(InvalidHandshake):
    def __init__(self, response):
        super().__init__(f"server rejected WebSocket connection: HTTP {response.status_code}")
        self.response = response


class ConnectionClosedOK(Exception):
    pass


class Conn:
    def __init__(self, frames):
        self.frames = list(frames)
        self.sent = []
        self.closed = False

    async def recv(self):
        if not self.frames:
            raise ConnectionClosedOK()
        return self.frames.pop(0)

    async def send(self, m):
        self.sent.append(m)

    async def close(self):
        self.closed = True


class StandIn:
    """The modules websockets 14 and 15 would put in sys.modules, as far as
    attach() uses them."""

    def __init__(self, frames=(), status=None):
        self.calls = []
        self.conn = Conn(frames)
        standin = self

        class connect:
            def __init__(self, uri, *, origin=None, extensions=None, subprotocols=None, compression="deflate",
                         additional_headers=None, user_agent_header="Python/x websockets/15", proxy=True,
                         process_exception=None, open_timeout=10, ping_interval=20, ping_timeout=20,
                         close_timeout=10, max_size=2 ** 20, max_queue=16, write_limit=2 ** 15, logger=None,
                         create_connection=None, **kwargs):
                if kwargs:
                    # Where 14 and 15 send them: loop.create_connection.
                    raise TypeError(f"create_connection() got an unexpected keyword argument {next(iter(kwargs))!r}")
                standin.calls.append({"uri": uri, "headers": dict(additional_headers or {}), "max_size": max_size})

            def __await__(self):
                async def opened():
                    if status is not None:
                        raise InvalidStatus(types.SimpleNamespace(status_code=status))
                    return standin.conn
                return opened().__await__()

        root = types.ModuleType("websockets")
        aio = types.ModuleType("websockets.asyncio")
        client = types.ModuleType("websockets.asyncio.client")
        exc = types.ModuleType("websockets.exceptions")
        client.connect = connect
        exc.InvalidHandshake, exc.InvalidStatus, exc.ConnectionClosedOK = InvalidHandshake, InvalidStatus, ConnectionClosedOK
        root.asyncio, root.exceptions, aio.client = aio, exc, client
        root.version = "15.0.1"
        self.modules = {"websockets": root, "websockets.asyncio": aio, "websockets.asyncio.client": client,
                        "websockets.exceptions": exc}

    def install(self, monkeypatch):
        for name in [m for m in sys.modules if m == "websockets" or m.startswith("websockets.")]:
            monkeypatch.delitem(sys.modules, name)
        for name, mod in self.modules.items():
            monkeypatch.setitem(sys.modules, name, mod)


def test_standin_refuses_the_old_keyword():
    s = StandIn()
    with pytest.raises(TypeError):
        s.modules["websockets.asyncio.client"].connect("ws://x", extra_headers={"a": "b"})


def test_attach_uses_additional_headers_on_the_new_api(monkeypatch):
    exit_frame = json.dumps({"exit": {"exit_code": 3, "signal": "", "timed_out": False}})
    s = StandIn(frames=[b"hello ", b"world", exit_frame])
    s.install(monkeypatch)

    async def main():
        async with AsyncAttachment("http://127.0.0.1:1", "key1", "sbx_1", "cmd_1", 5) as a:
            await a.send(b"in")
            await a.resize(80, 24)
            out = b""
            while True:
                b = await a.recv()
                if b is None:
                    return out, a.exit
                out += b

    out, ex = asyncio.run(main())
    assert out == b"hello world" and ex["exit_code"] == 3
    assert s.calls == [{"uri": "ws://127.0.0.1:1/v1/sandboxes/sbx_1/commands/cmd_1/attach?after=5",
                        "headers": {"Authorization": "Bearer key1"}, "max_size": 1 << 20}]
    assert s.conn.sent[0] == b"in" and json.loads(s.conn.sent[1]) == {"resize": {"cols": 80, "rows": 24}}
    assert s.conn.closed


def test_sync_attach_on_the_new_api(monkeypatch):
    s = StandIn(frames=[b"x"])
    s.install(monkeypatch)
    with SyncAttachment("https://h", "k", "a", "b").connect() as a:
        assert a.recv() == b"x"
        assert a.recv() is None  # closed normally
    assert s.calls[0]["uri"].startswith("wss://h/")


def test_refused_handshake_is_the_error_of_its_status(monkeypatch):
    StandIn(status=404).install(monkeypatch)
    with pytest.raises(cove.NotFound) as e:
        asyncio.run(AsyncAttachment("http://h", "k", "a", "b").connect())
    assert e.value.status == 404
