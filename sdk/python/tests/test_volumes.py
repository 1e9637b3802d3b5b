"""Volumes through the SDK, sync and async: what the calls send and how
their answers and errors come back (against a scripted server on
loopback), and a volume shared by two sandboxes of a real server."""

import asyncio
import contextlib
import json
import uuid

import pytest

import cove
from cove import Retry
from fakeserver import FakeServer, error

FAST = Retry(attempts=3, total_s=10, base_s=0.01, cap_s=0.05)

VOLUME = {"id": "vol_1", "team_id": "team_1", "name": "cache", "size_mib": 64, "used_bytes": 4096,
          "sandboxes": ["sbx_1"], "created_at": "2026-12-03T11:00:00Z"}
SANDBOX = {"id": "sbx_1", "name": "x", "state": "running",
           "volumes": [{"name": "cache", "path": "/cache", "read_only": True, "volume_id": "vol_1"}]}


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


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


def test_create_volume_posts_name_and_size_with_a_key_and_decodes_the_volume(fake):
    s = fake([error(503, "unavailable"), (201, {}, VOLUME)])
    with cove.Client(s.url, "k", retry=FAST) as c:
        v = c.create_volume("cache", 64)
    assert isinstance(v, cove.Volume)
    assert (v.id, v.name, v.size_mib, v.used_bytes, v.sandboxes) == ("vol_1", "cache", 64, 4096, ["sbx_1"])
    assert [(x.method, x.path) for x in s.seen] == [("POST", "/v1/volumes")] * 2
    assert s.seen[0].json() == {"name": "cache", "size_mib": 64}
    # Retried after the 503 with the same key: the server does it once.
    key = s.seen[0].headers.get("idempotency-key")
    assert key and s.seen[1].headers.get("idempotency-key") == key


def test_get_and_delete_volume_escape_the_ref(fake):
    s = fake([(200, {}, VOLUME), (204, {}, None)])
    with cove.Client(s.url, "k") as c:
        assert c.get_volume("cache").id == "vol_1"
        assert c.delete_volume("vol/1") is None
    assert [(x.method, x.path) for x in s.seen] == [("GET", "/v1/volumes/cache"), ("DELETE", "/v1/volumes/vol%2F1")]


def test_list_volumes_follows_the_cursor(fake):
    pages = [(200, {}, {"items": [VOLUME], "next_cursor": "c1"}),
             (200, {}, {"items": [dict(VOLUME, id="vol_2", name="data")], "next_cursor": ""})]
    s = fake(pages)
    with cove.Client(s.url, "k") as c:
        assert [v.id for v in c.list_volumes(limit=1)] == ["vol_1", "vol_2"]
    assert [x.path for x in s.seen] == ["/v1/volumes?limit=1", "/v1/volumes?limit=1&cursor=c1"]
    s = fake(pages)
    with cove.Client(s.url, "k") as c:
        page = c.list_volumes_page(limit=1)
    assert ([v.name for v in page.items], page.next_cursor) == (["cache"], "c1")


def test_delete_volume_in_use_raises_conflict_with_its_details(fake):
    body = {"error": {"code": "conflict", "message": "volume vol_1 is mounted by sbx_1",
                      "details": {"sandboxes": ["sbx_1"]}}}
    s = fake([(409, {}, body)])
    with cove.Client(s.url, "k", retry=FAST) as c:
        with pytest.raises(cove.Conflict) as e:
            c.delete_volume("cache")
    assert e.value.status == 409 and e.value.details == {"sandboxes": ["sbx_1"]}
    assert "sbx_1" in str(e.value)


def test_create_sends_volumes_and_the_sandbox_shows_them(fake):
    s = fake([(201, {}, SANDBOX)])
    with cove.Client(s.url, "k") as c:
        sb = c.create(volumes=[{"name": "cache", "path": "/cache", "read_only": True},
                               cove.VolumeMount(name="data", path="/data")], keep=True)
    assert s.seen[0].json()["volumes"] == [{"name": "cache", "path": "/cache", "read_only": True},
                                           {"name": "data", "path": "/data"}]
    m = sb.info.volumes[0]
    assert isinstance(m, cove.VolumeMount)
    assert (m.name, m.path, m.read_only, m.volume_id) == ("cache", "/cache", True, "vol_1")


def test_create_without_volumes_sends_none(fake):
    s = fake([(201, {}, dict(SANDBOX, volumes=None))])
    with cove.Client(s.url, "k") as c:
        sb = c.create(keep=True)
    assert "volumes" not in s.seen[0].json()
    assert sb.info.volumes == []


def test_volumes_async(fake):
    s = fake([(201, {}, VOLUME), (200, {}, {"items": [VOLUME], "next_cursor": ""}), (200, {}, VOLUME), (204, {}, None)])

    async def main():
        async with cove.AsyncClient(s.url, "k") as c:
            v = await c.create_volume("cache", 64)
            listed = [x.id async for x in c.list_volumes()]
            got = await c.get_volume(v.id)
            await c.delete_volume(v.id)
            return v, listed, got

    v, listed, got = asyncio.run(main())
    assert (v.id, listed, got.name) == ("vol_1", ["vol_1"], "cache")
    assert [(x.method, x.path) for x in s.seen] == [
        ("POST", "/v1/volumes"), ("GET", "/v1/volumes?limit=100"), ("GET", "/v1/volumes/vol_1"), ("DELETE", "/v1/volumes/vol_1")]


# Against the real server.

def test_a_volume_is_shared_by_two_sandboxes_and_outlives_them(server):
    with cove.Client(*server) as c:
        vol = c.create_volume(name("vol"), 64)
        try:
            assert vol.id.startswith("vol_") and vol.size_mib == 64 and vol.sandboxes == []
            with pytest.raises(cove.Conflict):
                c.create_volume(vol.name, 64)
            with c.create(volumes=[{"name": vol.name, "path": "/shared"}]) as a, \
                    c.create(volumes=[cove.VolumeMount(name=vol.id, path="/ro", read_only=True)]) as b:
                assert [(m.name, m.path, m.read_only, m.volume_id) for m in a.info.volumes] == \
                    [(vol.name, "/shared", False, vol.id)]
                assert b.info.volumes[0].read_only and b.info.volumes[0].volume_id == vol.id
                assert a.run("echo from-a > /shared/note").exit_code == 0
                assert b.run("cat /ro/note").stdout == "from-a\n"
                assert b.run("touch /ro/other").exit_code != 0
                assert sorted(c.get_volume(vol.name).sandboxes) == sorted([a.id, b.id])
                assert any(v.id == vol.id for v in c.list_volumes())
                # Mounted: not deleted, and the answer names who mounts it.
                with pytest.raises(cove.Conflict) as e:
                    c.delete_volume(vol.id)
                said = str(e.value) + json.dumps(e.value.details)
                assert a.id in said and b.id in said
            # Both gone: the files stay, for the next sandbox.
            for x in (a, b):
                assert x.wait("terminated").state == "terminated"
            with c.create(volumes=[{"name": vol.name, "path": "/again"}]) as d:
                assert d.run("cat /again/note").stdout == "from-a\n"
            d.wait("terminated")
            c.delete_volume(vol.id)
        finally:
            with contextlib.suppress(cove.NotFound):
                c.delete_volume(vol.id)
        with pytest.raises(cove.NotFound):
            c.get_volume(vol.id)
        with pytest.raises(cove.NotFound):
            c.create(volumes=[{"name": vol.name, "path": "/gone"}])


def test_volume_bad_input_is_invalid_argument(server):
    with cove.Client(*server) as c:
        with pytest.raises(cove.InvalidArgument):
            c.create_volume("Not A Name", 64)
        with pytest.raises(cove.InvalidArgument):
            c.create_volume(name("vol"), 1)


def test_volumes_async_real(server):
    async def main():
        async with cove.AsyncClient(*server) as c:
            vol = await c.create_volume(name("vol"), 32)
            try:
                got = await c.get_volume(vol.name)
                listed = [v.id async for v in c.list_volumes()]
            finally:
                await c.delete_volume(vol.id)
            return vol, got, listed

    vol, got, listed = asyncio.run(main())
    assert got.id == vol.id and vol.id in listed
