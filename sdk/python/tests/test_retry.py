"""Retries, timeouts and transport failures. Most run against a scripted
server on loopback (a real one cannot be made to answer 429 on demand); the
cut create runs against the real one."""

import asyncio
import threading
import time
import uuid

import pytest

import cove
from cove import Retry
from cove._shared import Attempts, Req
from fakeserver import FakeServer, SilentServer, closed_port, error

FAST = Retry(attempts=4, total_s=10, base_s=0.01, cap_s=0.05)
TEMPLATES = (200, {}, {"items": []})
SANDBOX = (201, {}, {"id": "sbx_1", "name": "x", "state": "running"})


@pytest.fixture
def fake():
    servers = []

    def make(*args, **kw):
        s = FakeServer(*args, **kw)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.close()


def test_429_with_retry_after_is_retried_after_a_second(fake):
    s = fake([error(429, "resource_exhausted", {"Retry-After": "1"}), TEMPLATES])
    with cove.Client(s.url, "k", retry=FAST) as c:
        assert c.templates() == []
    assert len(s.seen) == 2
    assert s.seen[1].at - s.seen[0].at >= 1.0


def test_429_with_retry_after_is_retried_after_a_second_async(fake):
    s = fake([error(429, "resource_exhausted", {"Retry-After": "1"}), TEMPLATES])

    async def main():
        async with cove.AsyncClient(s.url, "k", retry=FAST) as c:
            return await c.templates()

    assert asyncio.run(main()) == []
    assert len(s.seen) == 2
    assert s.seen[1].at - s.seen[0].at >= 1.0


def test_transport_error_is_unavailable_without_status():
    url = "http://127.0.0.1:%d" % closed_port()
    with cove.Client(url, "k", retry=FAST) as c:
        with pytest.raises(cove.CoveError) as e:
            c.get("nothing")
    assert isinstance(e.value, cove.Unavailable)
    assert e.value.code == "unavailable" and e.value.status is None
    assert e.value.request_id.startswith("req_")

    async def main():
        async with cove.AsyncClient(url, "k", retry=FAST) as c:
            await c.get("nothing")

    with pytest.raises(cove.Unavailable) as e:
        asyncio.run(main())
    assert e.value.status is None


def test_call_timeout_bounds_a_call_that_gets_no_answer():
    s = SilentServer()
    try:
        with cove.Client(s.url, "k", retry=Retry(attempts=1)) as c:
            with pytest.raises(cove.Unavailable) as e:
                c.with_options(timeout=0.5).templates()
        assert e.value.status is None and "Timeout" in str(e.value)
    finally:
        s.close()


def test_503_is_retried_for_a_get_and_gives_up_after_the_bound(fake):
    s = fake([error(503, "unavailable")])
    with cove.Client(s.url, "k", retry=FAST) as c:
        with pytest.raises(cove.Unavailable) as e:
            c.templates()
    assert e.value.status == 503
    assert len(s.seen) == FAST.attempts


def test_create_gets_a_key_kept_across_retries(fake):
    s = fake([error(503, "unavailable"), error(409, "conflict", {"Retry-After": "0"}), SANDBOX])
    with cove.Client(s.url, "k", retry=FAST) as c:
        sb = c.create(name="x", keep=True)
    assert sb.id == "sbx_1"
    keys = [x.headers.get("idempotency-key") for x in s.seen]
    assert len(keys) == 3 and keys[0] and keys.count(keys[0]) == 3
    ids = [x.headers.get("x-request-id") for x in s.seen]
    assert ids[0] and ids.count(ids[0]) == 3


def test_an_error_carries_its_status_code_and_request_id(fake):
    s = fake([(404, {"X-Request-Id": "req_server"}, {"error": {"code": "not_found", "message": "no such sandbox"}}),
              error(404, "not_found")])
    with cove.Client(s.url, "k", retry=FAST) as c:
        with pytest.raises(cove.NotFound) as e:
            c.get("a")
        assert (e.value.code, e.value.status, e.value.request_id) == ("not_found", 404, "req_server")
        with pytest.raises(cove.NotFound) as e:
            c.get("b")
        assert e.value.request_id == s.seen[1].headers["x-request-id"]


def test_a_409_without_retry_after_is_not_retried(fake):
    s = fake([error(409, "conflict"), SANDBOX])
    with cove.Client(s.url, "k", retry=FAST) as c:
        with pytest.raises(cove.Conflict):
            c.create(name="x", keep=True)
    assert len(s.seen) == 1


@pytest.mark.parametrize("call", [
    lambda c: c.create_team("t"),
    lambda c: c.create_key("team_1"),
    lambda c: c.create_ticket("/v1/sandboxes/x/commands/y/attach"),
])
def test_calls_that_refuse_a_key_get_none_and_no_retry(fake, call):
    s = fake([error(503, "unavailable"), (201, {}, {})])
    with cove.Client(s.url, "k", retry=FAST) as c:
        with pytest.raises(cove.Unavailable):
            call(c)
    assert len(s.seen) == 1
    assert "idempotency-key" not in s.seen[0].headers


def test_private_preview_gets_no_key_public_one_does(fake):
    s = fake([(201, {}, {"id": "prv_1", "port": 80, "url": "u", "visibility": "x"})])
    with cove.Client(s.url, "k", retry=FAST) as c:
        sb = cove.SandboxHandle(c, cove.Sandbox.from_dict({"id": "sbx_1"}), keep=True)
        sb.preview(80, visibility="private")
        sb.preview(80, visibility="public")
    assert "idempotency-key" not in s.seen[0].headers
    assert s.seen[1].headers.get("idempotency-key")


def test_stdin_is_never_retried(fake):
    s = fake([error(503, "unavailable"), (204, {}, None)])
    with cove.Client(s.url, "k", retry=FAST) as c:
        cmd = cove.Command(c, "sbx_1", cove.CommandInfo.from_dict({"id": "cmd_1"}))
        with pytest.raises(cove.Unavailable):
            cmd.write(b"once")
    assert len(s.seen) == 1


def test_attempts_are_bounded_by_count_and_time():
    now = [0.0]
    policy = Retry(attempts=10, total_s=5, base_s=1, cap_s=1)
    a = Attempts(Req("GET", "/"), policy, None, clock=lambda: now[0], rand=lambda: 1.0)
    waits = []
    while True:
        w = a.delay(None, None)
        if w is None:
            break
        waits.append(w)
        now[0] += w
    assert waits == [1.0] * 5 and now[0] <= 5
    # A Retry-After beyond what is left of the time ends the retries.
    a = Attempts(Req("GET", "/"), policy, None, clock=lambda: 0.0, rand=lambda: 0.0)
    assert a.delay(429, {"Retry-After": "6"}) is None
    assert a.delay(429, {"Retry-After": "2"}) == 2.0
    # A call's own timeout bounds its retries too.
    a = Attempts(Req("GET", "/"), policy, 1.5, clock=lambda: 0.0, rand=lambda: 0.0)
    assert a.delay(429, {"Retry-After": "2"}) is None
    # A POST without a key, or with a streamed body, is never retried.
    assert Attempts(Req("POST", "/"), policy, None).delay(None, None) is None
    r = Req("PUT", "/", content=iter([b"x"]))
    assert Attempts(r, policy, None).delay(503, {}) is None


class DropFirstAnswer:
    """A loopback TCP proxy that passes the first connection's request to
    the server but cuts that connection as soon as the answer starts, so the
    client never sees it; later connections pass both ways."""

    def __init__(self, target_url: str) -> None:
        import socket

        host, _, port = target_url.split("://", 1)[1].rstrip("/").rpartition(":")
        self.target = (host, int(port))
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(16)
        self.url = "http://127.0.0.1:%d" % self.ls.getsockname()[1]
        self.dropped = threading.Event()
        self.socks = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket

        first = True
        while True:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            u = socket.create_connection(self.target)
            self.socks += [c, u]
            threading.Thread(target=self._pipe, args=(c, u, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(u, c, first), daemon=True).start()
            first = False

    def _pipe(self, a, b, drop: bool) -> None:
        import socket

        try:
            while True:
                d = a.recv(65536)
                if not d:
                    break
                if drop:
                    self.dropped.set()
                    break
                b.sendall(d)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self.ls.close()
        for s in self.socks:
            s.close()


def test_cut_create_with_a_key_is_retried_into_one_sandbox(server):
    url, key = server
    proxy = DropFirstAnswer(url)
    label = uuid.uuid4().hex[:12]
    try:
        with cove.Client(proxy.url, key, retry=Retry(attempts=6, base_s=0.1)) as c:
            sb = c.create(labels={"cut": label}, idempotency_key="cut-" + label, keep=True)
        assert proxy.dropped.is_set(), "the first answer was not cut"
        with cove.Client(url, key) as c:
            found = list(c.list(labels={"cut": label}))
            assert [s.id for s in found] == [sb.id]
            c.get(sb.id).terminate()
    finally:
        proxy.close()


def _project(tmp_path):
    """A folder of a few files, one of them big enough to take several
    pieces of a streamed body."""
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "main.py").write_text("print('hi')\n")
    (root / "data.bin").write_bytes(bytes(range(256)) * 12289)  # ~3 MiB
    return root


def test_cut_folder_upload_is_sent_again_in_full(server, tmp_path):
    """The answer to a folder upload is cut: the SDK packs once, sends the
    packed file again from its start, and the server (which checks the
    body's sha-256) takes it; the files are there once."""
    url, key = server
    root = _project(tmp_path)
    with cove.Client(url, key) as c, c.create(name="py-cut-upload-" + uuid.uuid4().hex[:8]) as sb:
        proxy = DropFirstAnswer(url)
        try:
            with cove.Client(proxy.url, key, retry=Retry(attempts=6, base_s=0.1)) as pc:
                result = cove.Files(pc, sb.id).upload_dir(str(root), "/tmp/project")
        finally:
            proxy.close()
        assert proxy.dropped.is_set(), "the first answer was not cut"
        assert result.path == "/tmp/project" and result.entries >= 3
        out = sb.run("sha256sum /tmp/project/data.bin && cat /tmp/project/src/main.py")
        import hashlib

        assert hashlib.sha256((root / "data.bin").read_bytes()).hexdigest() in out.stdout
        assert "print('hi')" in out.stdout


def test_cut_folder_upload_is_sent_again_in_full_async(server, tmp_path):
    url, key = server
    root = _project(tmp_path)

    async def main():
        async with cove.AsyncClient(url, key) as c:
            sb = await c.create(name="py-cut-upload-a-" + uuid.uuid4().hex[:8])
            try:
                proxy = DropFirstAnswer(url)
                try:
                    async with cove.AsyncClient(proxy.url, key, retry=Retry(attempts=6, base_s=0.1)) as pc:
                        result = await cove.AsyncFiles(pc, sb.id).upload_dir(str(root), "/tmp/project")
                finally:
                    proxy.close()
                assert proxy.dropped.is_set(), "the first answer was not cut"
                assert result.path == "/tmp/project" and result.entries >= 3
                return (await sb.run("cat /tmp/project/src/main.py")).stdout
            finally:
                await sb.terminate()

    assert "print('hi')" in asyncio.run(main())
