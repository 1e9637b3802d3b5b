"""Assets: uploaded (bytes, files, streams, folders), listed, read back
checked, used as a sandbox's source, saved from a sandbox, deleted."""

import asyncio
import base64
import gzip
import hashlib
import io
import os
import tarfile
import uuid

import httpx
import pytest

import cove
from conftest import make_tree, tree


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def archive(files: dict) -> bytes:
    """A tar.gz of files (name -> text), the same bytes every time."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for n, text in sorted(files.items()):
            b = text.encode()
            ti = tarfile.TarInfo(n)
            ti.size, ti.mode, ti.mtime = len(b), 0o644, 0
            tar.addfile(ti, io.BytesIO(b))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def names_in(data: bytes) -> set:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
        return {os.path.normpath(m.name) for m in tar.getmembers()}


def test_asset_kinds_of_upload_are_one_asset(server, tmp_path):
    # Unique content per run, so that no earlier run's asset answers.
    data = archive({"hello.txt": "hello " + uuid.uuid4().hex + "\n", "dir/x.txt": "x\n"})
    path = tmp_path / "a.tar.gz"
    path.write_bytes(data)
    with cove.Client(*server) as c:
        a = c.create_asset(data, name=name("py-bytes"))
        try:
            assert a.id.startswith("ast_") and a.size == len(data)
            assert a.sha256 == hashlib.sha256(data).hexdigest()
            # The same bytes, however sent, are the same asset.
            assert c.create_asset(io.BytesIO(data)).id == a.id
            assert c.create_asset(iter([data[:7], data[7:]])).id == a.id
            assert c.create_asset_from_file(str(path)).id == a.id
            f = io.BytesIO(b"junk" + data)
            f.read(4)  # a file is sent from where it stands
            assert c.create_asset(f).id == a.id

            got = c.get_asset(a.id)
            assert (got.id, got.name, got.sha256) == (a.id, a.name, a.sha256)
            assert any(x.id == a.id for x in c.list_assets())
            page = c.list_assets_page(limit=1)
            assert len(page.items) == 1
            assert c.read_asset(a.id) == data
            dl = tmp_path / "back.tar.gz"
            c.download_asset(a.id, str(dl))
            assert dl.read_bytes() == data

            with pytest.raises(cove.InvalidArgument):
                c.create_asset("a.tar.gz")  # a path is not the bytes
            with pytest.raises(cove.CoveError) as e:
                c.create_asset(b"not an archive at all")
            assert e.value.status in (400, 422)
        finally:
            c.delete_asset(a.id)
        with pytest.raises(cove.NotFound):
            c.get_asset(a.id)
        with pytest.raises(cove.NotFound):
            c.read_asset(a.id)


def test_asset_as_source_and_saved_from_sandbox(server, tmp_path):
    src, back = str(tmp_path / "src"), str(tmp_path / "back")
    make_tree(src)
    with cove.Client(*server) as c:
        a = c.create_asset_from_dir(src, name=name("py-dir"))
        saved = None
        try:
            with c.create(name=name("py-from-asset"), source=a.source()) as sb:
                assert sb.info.raw["source"]["asset_id"] == a.id
                assert sb.run("./run.sh", cwd=sb.info.workdir).stdout == "ran\n"
                sb.files.download_dir(sb.info.workdir, back)
                assert tree(back) == tree(src)
                sb.files.write(sb.info.workdir + "/added.txt", "added\n")
                saved = sb.save_asset(sb.info.workdir, name=name("py-saved"))
            assert saved.id != a.id
            assert {"added.txt", "run.sh", "src/pkg/mod.py", "link.py"} <= names_in(c.read_asset(saved.id))
        finally:
            c.delete_asset(a.id)
            if saved is not None:
                c.delete_asset(saved.id)


def test_asset_download_with_wrong_digest_is_refused(tmp_path):
    def handler(req: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"tampered",
                              headers={"Repr-Digest": "sha-256=:" + "A" * 43 + "=:"})

    c = cove.Client("http://127.0.0.1:9", "k", transport=httpx.MockTransport(handler))
    with pytest.raises(cove.DigestMismatch):
        c.read_asset("ast_x")
    out = tmp_path / "x.tar.gz"
    with pytest.raises(cove.DigestMismatch):
        c.download_asset("ast_x", str(out))
    assert not out.exists(), "a download that failed its check left its file"


def test_async_assets(server, tmp_path):
    src = str(tmp_path / "src")
    make_tree(src)
    data = archive({"n.txt": uuid.uuid4().hex})

    async def main():
        async with cove.AsyncClient(*server) as c:
            a = await c.create_asset_from_dir(src, name=name("pya-dir"))
            b = await c.create_asset(iter([data]))
            saved = None
            try:
                assert (await c.create_asset(data)).id == b.id
                assert (await c.get_asset(a.id)).sha256 == a.sha256
                assert a.id in [x.id async for x in c.list_assets()]
                assert (await c.list_assets_page(limit=1)).items
                async with await c.create(name=name("pya-asset"), source=a.source()) as sb:
                    assert (await sb.run("cat src/pkg/mod.py", cwd=sb.info.workdir)).stdout == "X = 1\n"
                    saved = await sb.save_asset(sb.info.workdir + "/src")
                assert names_in(await c.read_asset(saved.id)) >= {"pkg/mod.py"}
                out = tmp_path / "a.tar.gz"
                await c.download_asset(a.id, str(out))
                assert hashlib.sha256(out.read_bytes()).hexdigest() == a.sha256
            finally:
                for x in (a, b, saved):
                    if x is not None:
                        await c.delete_asset(x.id)
            with pytest.raises(cove.NotFound):
                await c.get_asset(b.id)

    asyncio.run(main())


def test_uploads_carry_the_digest_of_what_they_stream(tmp_path):
    """Every archive upload (asset or folder, sync or asyncio) is streamed
    with the sha-256 of exactly the bytes sent, for the server to check."""
    seen = []

    def check(req: httpx.Request, body: bytes) -> httpx.Response:
        want = "sha-256=:" + base64.b64encode(hashlib.sha256(body).digest()).decode() + ":"
        seen.append((req.url.path, req.headers.get("Repr-Digest") == want, "content-length" not in req.headers))
        if req.url.path == "/v1/assets":
            return httpx.Response(201, json={"id": "ast_x", "size": len(body), "sha256": hashlib.sha256(body).hexdigest()})
        return httpx.Response(200, json={})

    def handler(req: httpx.Request) -> httpx.Response:
        return check(req, req.read())

    async def ahandler(req: httpx.Request) -> httpx.Response:
        return check(req, await req.aread())

    src = str(tmp_path / "src")
    make_tree(src)
    f = tmp_path / "a.tar.gz"
    f.write_bytes(archive({"a": "b"}))
    c = cove.Client("http://127.0.0.1:9", "k", transport=httpx.MockTransport(handler))
    c.create_asset_from_file(str(f))
    c.create_asset_from_dir(src)
    c.create_asset(iter([b"x" * 10, b"y" * 10]))
    cove.Files(c, "sbx_x").upload_dir(src, "/workspace/p")

    async def main():
        async with cove.AsyncClient("http://127.0.0.1:9", "k", transport=httpx.MockTransport(ahandler)) as ac:
            await ac.create_asset_from_file(str(f))
            await ac.create_asset_from_dir(src)
            await cove.AsyncFiles(ac, "sbx_x").upload_dir(src, "/workspace/p")

    asyncio.run(main())
    paths = [p for p, _, _ in seen]
    assert paths == ["/v1/assets"] * 3 + ["/v1/sandboxes/sbx_x/files/archive"] + ["/v1/assets"] * 2 + ["/v1/sandboxes/sbx_x/files/archive"]
    assert all(ok for _, ok, _ in seen), seen
    assert all(streamed for _, _, streamed in seen), "a file was sent whole, not streamed"
