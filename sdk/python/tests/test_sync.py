import os
import uuid

import pytest

import cove
from conftest import make_tree, tree


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_create_run_terminate(server):
    url, key = server
    with cove.Client(url, key) as c:
        with c.create(name=name("py"), labels={"sdk": "python"}) as sb:
            assert sb.info.state == "running"
            r = sb.run("echo hi; echo err >&2; exit 3")
            assert (r.stdout, r.stderr, r.exit_code) == ("hi\n", "err\n", 3)
            r = sb.run(argv=["python3", "-c", "print(6*7)"])
            assert r.stdout == "42\n"
            assert c.get(sb.id).id == sb.id
            assert any(s.id == sb.id for s in c.list(labels={"sdk": "python"}))
            sid = sb.id
        assert c.get(sid).info.state in ("terminating", "terminated")


def test_errors(server):
    with cove.Client(*server) as c:
        with pytest.raises(cove.NotFound) as e:
            c.get("sbx_doesnotexist")
        assert e.value.status == 404 and e.value.message
    with pytest.raises(cove.Unauthenticated):
        cove.Client(server[0], "cove_nosuchkey").get("x")


def test_stream_resumes_after_cut(server, proxy):
    url, key = server
    with cove.Client(url, key) as c, c.create(name=name("py-stream")) as sb:
        cmd = sb.start("for i in $(seq 1 60); do echo line$i; sleep 0.02; done")
        via = cove.Client(f"http://127.0.0.1:{proxy.port}", key)
        seqs, out, cut = [], b"", False
        for ch in via.get(sb.id).command(cmd.id).output():
            if ch.type == "exit":
                assert ch.exit_code == 0
                break
            seqs.append(ch.seq)
            out += ch.data
            if not cut:
                proxy.cut()  # the stream breaks after its first chunk
                cut = True
        via.close()
        assert proxy.accepted >= 2, "the stream was never reconnected"
        assert seqs == sorted(set(seqs)), "a chunk came twice or out of order"
        assert out.decode() == "".join(f"line{i}\n" for i in range(1, 61))


def test_stdin(server):
    with cove.Client(*server) as c, c.create(name=name("py-stdin")) as sb:
        cmd = sb.start("read a; read b; echo $a-$b", stdin=True)
        cmd.write("x\n")
        cmd.write(b"y\n", eof=True)
        info = cmd.wait()
        assert info.exit_code == 0
        assert cmd.stdout() == b"x-y\n"


def test_files_versions_and_edit(server):
    with cove.Client(*server) as c, c.create(name=name("py-files")) as sb:
        p = sb.info.workdir + "/notes.txt"
        v1 = sb.files.write(p, "one\n", if_version="none")
        with pytest.raises(cove.PreconditionFailed):
            sb.files.write(p, "again\n", if_version="none")
        v2 = sb.files.write(p, "two\n", if_version=v1.version)
        with pytest.raises(cove.PreconditionFailed):
            sb.files.write(p, "lost update\n", if_version=v1.version)
        got = sb.files.read(p)
        assert (got.text, got.version) == ("two\n", v2.version)
        v3 = sb.files.edit(p, [{"old": "two", "new": "three"}], if_version=v2.version)
        with pytest.raises(cove.Conflict):
            sb.files.edit(p, [{"old": "absent", "new": "x"}])
        assert sb.files.read_text(p) == "three\n"
        assert sb.files.stat(p).version == v3.version
        sb.files.mkdir(sb.info.workdir + "/d")
        sb.files.move(p, sb.info.workdir + "/d/n.txt")
        assert [e.name for e in sb.files.list(sb.info.workdir + "/d")] == ["n.txt"]
        sb.files.remove(sb.info.workdir + "/d", recursive=True)
        assert not sb.files.exists(sb.info.workdir + "/d")


def test_folder_round_trip(server, tmp_path):
    src, back = str(tmp_path / "src"), str(tmp_path / "back")
    make_tree(src)
    with cove.Client(*server) as c, c.create(name=name("py-dir")) as sb:
        dest = sb.info.workdir + "/project"
        sb.files.upload_dir(src, dest)
        assert sb.run("./run.sh", cwd=dest).stdout == "ran\n"
        sb.files.download_dir(dest, back)
    assert tree(back) == tree(src)


def test_events(server):
    with cove.Client(*server) as c, c.create(name=name("py-events")) as sb:
        page = c.events(sandbox=sb.id)
        types = [e.type for e in page.items]
        assert "sandbox.running" in types
        last = page.items[-1].id
        sb.run("true")
        seen = []
        for ev in c.stream_events(sandbox=sb.id, after=last):
            seen.append(ev.type)
            if ev.type == "command.exited":
                break
        assert seen.index("command.started") < seen.index("command.exited")


def test_attach(server):
    with cove.Client(*server) as c, c.create(name=name("py-attach")) as sb:
        cmd = sb.start("read line; echo got $line", stdin=True)
        with cmd.attach() as a:
            a.send(b"hello\n")
            out = b""
            while True:
                b = a.recv()
                if b is None:
                    break
                out += b
            assert out == b"got hello\n"
            assert a.exit is not None and a.exit["exit_code"] == 0


def test_secrets(server):
    with cove.Client(*server) as c:
        sname = name("tok").replace("-", "_")
        c.put_secret(sname, "s3cr3t-value-for-tests")
        assert any(x["name"] == sname for x in c.list_secrets())
        assert "value" not in c.get_secret(sname)
        with c.create(name=name("py-secret"), secrets={"TOKEN": sname}) as sb:
            r = sb.run("echo $TOKEN")
            assert r.stdout == f"[secret:{sname}]\n"
        c.delete_secret(sname)
        with pytest.raises(cove.NotFound):
            c.get_secret(sname)


def test_command_wakes_asleep(server):
    """A command wakes an asleep sandbox and sees its files; wake=False
    raises Conflict and leaves it asleep."""
    with cove.Client(*server) as c, c.create(name=name("py-wake")) as sb:
        sb.run("echo kept > /workspace/kept.txt")
        sb.sleep()
        with pytest.raises(cove.Conflict):
            sb.run("true", wake=False)
        with pytest.raises(cove.Conflict):
            sb.start("true", wake=False)
        assert c.get(sb.id).info.state == "asleep"
        assert sb.run("cat /workspace/kept.txt").stdout == "kept\n"
        assert c.get(sb.id).info.state == "running"
        sb.sleep()
        cmd = sb.start("cat /workspace/kept.txt")
        assert cmd.wait().exit_code == 0
        assert cmd.stdout() == b"kept\n"


def test_files_watch_and_resume(server):
    import threading

    with cove.Client(*server) as c, c.create(name=name("py-watch")) as sb:
        d = sb.info.workdir + "/watched"
        sb.files.mkdir(d)
        stop = threading.Event()

        def writer():
            # The watch is in place once the server answers; until the
            # test has seen a record, keep making new folders with a file.
            i = 0
            while not stop.is_set() and i < 100:
                sb.run(f"mkdir -p {d}/n{i} && echo hi > {d}/n{i}/f.txt")
                i += 1
                stop.wait(0.2)

        t = threading.Thread(target=writer)
        t.start()
        try:
            w = sb.files.watch(d, recursive=True)
            first = None
            for ev in w:
                if ev.type == "write" and ev.path.endswith("/f.txt") and ev.entry and ev.entry.size == 3:
                    first = ev
                    break
            w.close()
        finally:
            stop.set()
            t.join()
        assert first is not None and first.path.startswith(d + "/n")
        # Away: one more file; back with after=, nothing is lost.
        sb.files.write(d + "/later.txt", "later")
        seqs = []
        for ev in sb.files.watch(d, recursive=True, after=first.seq):
            assert ev.type != "dropped", ev
            seqs.append(ev.seq)
            if ev.path == d + "/later.txt" and ev.type == "create":
                break
        assert seqs == list(range(first.seq + 1, first.seq + 1 + len(seqs))), seqs
        with pytest.raises(cove.NotFound):
            next(iter(sb.files.watch(sb.info.workdir + "/missing")))
