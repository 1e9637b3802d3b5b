import asyncio
import uuid

import pytest

import cove
from conftest import make_tree, tree


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def run(coro):
    return asyncio.run(coro)


def test_async_create_run_terminate(server):
    async def main():
        async with cove.AsyncClient(*server) as c:
            async with await c.create(name=name("pya")) as sb:
                r = await sb.run("echo hi; exit 2")
                assert (r.stdout, r.exit_code) == ("hi\n", 2)
                ids = [s.id async for s in c.list(state="running")]
                assert sb.id in ids
                sid = sb.id
            assert (await c.get(sid)).info.state in ("terminating", "terminated")
            with pytest.raises(cove.NotFound):
                await c.get("sbx_doesnotexist")
    run(main())


def test_async_stream_resumes_after_cut(server, proxy):
    async def main():
        url, key = server
        async with cove.AsyncClient(url, key) as c, await c.create(name=name("pya-stream")) as sb:
            cmd = await sb.start("for i in $(seq 1 60); do echo line$i; sleep 0.02; done")
            async with cove.AsyncClient(f"http://127.0.0.1:{proxy.port}", key) as via:
                seqs, out, cut = [], b"", False
                async for ch in (await (await via.get(sb.id)).command(cmd.id)).output():
                    if ch.type == "exit":
                        break
                    seqs.append(ch.seq)
                    out += ch.data
                    if not cut:
                        proxy.cut()
                        cut = True
            assert proxy.accepted >= 2
            assert seqs == sorted(set(seqs))
            assert out.decode() == "".join(f"line{i}\n" for i in range(1, 61))
    run(main())


def test_async_stdin_files_and_attach(server):
    async def main():
        async with cove.AsyncClient(*server) as c, await c.create(name=name("pya-files")) as sb:
            cmd = await sb.start("read a; echo got $a", stdin=True, tag="reader")
            assert cmd.info.tag == "reader" and cmd.info.pid > 1, cmd.info
            await cmd.write("x\n", eof=True)
            assert (await cmd.wait()).exit_code == 0
            assert await cmd.stdout() == b"got x\n"

            p = sb.info.workdir + "/f.txt"
            v1 = await sb.files.write(p, "one\n")
            v2 = await sb.files.write(p, "two\n", if_version=v1.version)
            with pytest.raises(cove.PreconditionFailed):
                await sb.files.write(p, "lost update\n", if_version=v1.version)
            assert (await sb.files.read(p)).version == v2.version
            await sb.files.edit(p, [{"old": "two", "new": "three"}])
            assert await sb.files.read_text(p) == "three\n"

            cmd = await sb.start("read line; echo got $line", stdin=True)
            a = await cmd.attach()
            await a.send(b"hi\n")
            out = b""
            while True:
                b = await a.recv()
                if b is None:
                    break
                out += b
            await a.close()
            assert out == b"got hi\n" and a.exit["exit_code"] == 0
    run(main())


def test_async_folder_round_trip_and_events(server, tmp_path):
    src, back = str(tmp_path / "src"), str(tmp_path / "back")
    make_tree(src)

    async def main():
        async with cove.AsyncClient(*server) as c, await c.create(name=name("pya-dir")) as sb:
            dest = sb.info.workdir + "/project"
            await sb.files.upload_dir(src, dest)
            await sb.files.download_dir(dest, back)
            page = await c.events(sandbox=sb.id)
            last = page.items[-1].id
            await sb.run("true")
            seen = []
            async for ev in c.stream_events(sandbox=sb.id, after=last):
                seen.append(ev.type)
                if ev.type == "command.exited":
                    break
            assert "command.started" in seen
    run(main())
    assert tree(back) == tree(src)


def test_async_command_wakes_asleep(server):
    """A command wakes an asleep sandbox and sees its files; wake=False
    raises Conflict and leaves it asleep."""
    async def main():
        async with cove.AsyncClient(*server) as c, await c.create(name=name("pya-wake")) as sb:
            await sb.run("echo kept > /workspace/kept.txt")
            await sb.sleep()
            with pytest.raises(cove.Conflict):
                await sb.run("true", wake=False)
            with pytest.raises(cove.Conflict):
                await sb.start("true", wake=False)
            assert (await c.get(sb.id)).info.state == "asleep"
            assert (await sb.run("cat /workspace/kept.txt")).stdout == "kept\n"
            assert (await c.get(sb.id)).info.state == "running"
            await sb.sleep()
            cmd = await sb.start("cat /workspace/kept.txt")
            assert (await cmd.wait()).exit_code == 0
            assert await cmd.stdout() == b"kept\n"
    run(main())
