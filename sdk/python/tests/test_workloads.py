"""Workloads and imported images through the SDK, sync and async."""

import asyncio
import uuid

import pytest

import cove
from conftest import busybox_oci


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_workload_runs_and_its_output_follows_and_replays(server):
    with cove.Client(*server) as c:
        w = c.submit_workload("echo hi; echo err >&2; exit 3", labels={"sdk": "python"})
        assert w.id.startswith("wl_") and w.state in ("queued", "starting", "running")
        out, err, exits = b"", b"", []
        for ch in c.workload_output(w.id):
            if ch.type == "exit":
                exits.append(ch.exit_code)
            elif ch.stream == "stdout":
                out += ch.data
            elif ch.stream == "stderr":
                err += ch.data
        assert (out, err, exits) == (b"hi\n", b"err\n", [3])
        done = c.wait_workload(w.id)
        assert (done.state, done.exit_code, done.done) == ("exited", 3, True)
        # Replayed from the start, and from after the first record.
        replay = list(c.workload_output(w.id, follow=False))
        assert replay[-1].type == "exit" and replay[-1].exit_code == 3
        assert b"".join(ch.data for ch in replay if ch.stream == "stdout") == b"hi\n"
        later = list(c.workload_output(w.id, after=replay[0].seq, follow=False))
        assert [ch.seq for ch in later] == [ch.seq for ch in replay[1:]]
        assert c.workload_stdout(w.id) == b"hi\n"
        assert c.workload_stderr(w.id) == b"err\n"
        assert c.get_workload(w.id).exit_code == 3
        assert any(x.id == w.id for x in c.list_workloads(state="exited"))
        assert all(x.state == "exited" for x in c.list_workloads_page(state="exited", limit=5).items)


def test_gpu_workload_queues_and_is_cancelled(server):
    with cove.Client(*server) as c:
        w = c.submit_workload(argv=["true"], gpus=1, labels={"sdk": "python"})
        assert (w.state, w.gpus) == ("queued", 1)
        # No node here has a GPU: it waits in the queue, and says why.
        w = c.get_workload(w.id)
        assert w.state == "queued" and w.state_reason
        with pytest.raises(cove.Conflict):
            list(c.workload_output(w.id, follow=False))
        assert any(x.id == w.id for x in c.list_workloads(state="queued"))
        cancelled = c.cancel_workload(w.id)
        assert cancelled.state == "cancelled" and cancelled.done
        assert c.get_workload(w.id, wait="exited", timeout_s=5).state == "cancelled"
        # Following a workload that never ran ends with Conflict, not a hang.
        with pytest.raises(cove.Conflict):
            list(c.workload_output(w.id))
        with pytest.raises(cove.NotFound):
            c.get_workload("wl_doesnotexist")
        with pytest.raises(cove.InvalidArgument):
            c.submit_workload("true", argv=["true"])


def test_async_workload(server):
    async def main() -> None:
        async with cove.AsyncClient(*server) as c:
            w = await c.submit_workload("echo async; exit 4")
            chunks = [ch async for ch in c.workload_output(w.id)]
            assert b"".join(ch.data for ch in chunks if ch.stream == "stdout") == b"async\n"
            assert chunks[-1].type == "exit" and chunks[-1].exit_code == 4
            done = await c.wait_workload(w.id)
            assert (done.state, done.exit_code) == ("exited", 4)
            assert await c.workload_stdout(w.id) == b"async\n"
            assert await c.workload_stderr(w.id) == b""
            page = await c.list_workloads_page(limit=1000)
            assert any(x.id == w.id for x in page.items)
            q = await c.submit_workload(argv=["true"], gpus=1)
            assert (await c.cancel_workload(q.id)).state == "cancelled"
            assert (await c.get_workload(q.id)).state == "cancelled"

    asyncio.run(main())


def test_image_import_list_update_delete(server, tmp_path):
    archive = str(tmp_path / "busybox.tar")
    busybox_oci(archive)
    img_name = name("py-img")
    with cove.Client(*server) as c:
        img = c.import_image(archive, name=img_name, settings={"examples": ["echo hello"]})
        try:
            assert img.id.startswith("img_") and img.name == img_name
            assert img.digest.startswith("sha256:") and img.examples == ["echo hello"]
            assert c.get_image(img_name).id == img.id
            assert c.get_image(img.id).name == img_name
            assert any(i.id == img.id for i in c.images())
            upd = c.update_image(img.id, examples=["echo changed"])
            assert upd.examples == ["echo changed"] and upd.digest == img.digest
            with pytest.raises(cove.Conflict):
                c.import_image(archive, name=img_name)
            # A workload runs in it, by the image's name.
            w = c.submit_workload("echo from-image", image=img_name)
            assert c.wait_workload(w.id).exit_code == 0
            assert c.workload_stdout(w.id) == b"from-image\n"
        finally:
            c.delete_image(img.id)
        with pytest.raises(cove.NotFound):
            c.get_image(img.id)


def test_async_image_import(server, tmp_path):
    archive = str(tmp_path / "busybox.tar")
    busybox_oci(archive)
    img_name = name("py-aimg")

    async def main() -> None:
        async with cove.AsyncClient(*server) as c:
            with open(archive, "rb") as f:
                img = await c.import_image(f, name=img_name)
            try:
                assert (await c.get_image(img_name)).id == img.id
                assert any(i.id == img.id for i in await c.images())
                assert (await c.update_image(img.id, examples=["id"])).examples == ["id"]
            finally:
                await c.delete_image(img.id)
            with pytest.raises(cove.NotFound):
                await c.get_image(img.id)

    asyncio.run(main())
