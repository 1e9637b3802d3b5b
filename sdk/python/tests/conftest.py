"""The tests run against a real cove server: COVE_URL and COVE_API_KEY name
it (make test starts one; see internal/e2e/sdks)."""

import os
import socket
import threading
from typing import Iterator, List

import pytest


@pytest.fixture(scope="session")
def server() -> "tuple[str, str]":
    url, key = os.environ.get("COVE_URL"), os.environ.get("COVE_API_KEY")
    if not url or not key:
        pytest.skip("COVE_URL and COVE_API_KEY name no server")
    return url, key


class CuttingProxy:
    """A TCP proxy on loopback whose open connections can be cut at once,
    to break a stream in the middle."""

    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(64)
        self.port = self.ls.getsockname()[1]
        self.accepted = 0
        self.conns: List[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            u = socket.create_connection(self.target)
            with self.lock:
                self.accepted += 1
                self.conns += [c, u]
            threading.Thread(target=self._pipe, args=(c, u), daemon=True).start()
            threading.Thread(target=self._pipe, args=(u, c), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while True:
                d = a.recv(65536)
                if not d:
                    break
                b.sendall(d)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        with self.lock:
            conns, self.conns = self.conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass

    def close(self) -> None:
        self.ls.close()
        self.cut()


@pytest.fixture
def proxy(server: "tuple[str, str]") -> Iterator[CuttingProxy]:
    url = server[0]
    p = CuttingProxy(url.split("://", 1)[1].rstrip("/"))
    yield p
    p.close()


def make_tree(root: str) -> None:
    """A folder with nested dirs, an executable, an internal symlink and an
    empty dir."""
    os.makedirs(os.path.join(root, "src", "pkg"))
    os.makedirs(os.path.join(root, "empty"))
    with open(os.path.join(root, "src", "pkg", "mod.py"), "w") as f:
        f.write("X = 1\n")
    with open(os.path.join(root, "run.sh"), "w") as f:
        f.write("#!/bin/sh\necho ran\n")
    os.chmod(os.path.join(root, "run.sh"), 0o755)
    with open(os.path.join(root, "data.bin"), "wb") as f:
        f.write(os.urandom(300_000))
    os.symlink("src/pkg/mod.py", os.path.join(root, "link.py"))


def tree(root: str) -> dict:
    """What a folder holds: every path with its kind, mode and content."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            if os.path.islink(full):
                out[rel] = ("link", os.readlink(full))
            elif os.path.isdir(full):
                out[rel] = ("dir", os.stat(full).st_mode & 0o777)
            else:
                with open(full, "rb") as f:
                    out[rel] = ("file", os.stat(full).st_mode & 0o777, f.read())
    return out


def busybox_oci(path: str) -> None:
    """Write at path an OCI image layout archive of one gzip layer: the
    host's static /bin/busybox, /bin/sh and a few applets linked to it,
    /etc/passwd and /etc/group, /tmp. Skips without a static busybox."""
    import gzip
    import hashlib
    import io
    import json
    import platform
    import tarfile

    if not os.path.exists("/bin/busybox"):
        pytest.skip("no static /bin/busybox (Debian's busybox-static)")

    def entry(tar: tarfile.TarFile, name: str, kind: bytes, mode: int, data: bytes = b"", link: str = "") -> None:
        ti = tarfile.TarInfo(name)
        ti.type, ti.mode, ti.mtime, ti.linkname = kind, mode, 1700000000, link
        ti.size = len(data) if kind == tarfile.REGTYPE else 0
        tar.addfile(ti, io.BytesIO(data) if kind == tarfile.REGTYPE else None)

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d, mode in (("bin", 0o755), ("etc", 0o755), ("tmp", 0o1777), ("root", 0o700)):
            entry(tar, d, tarfile.DIRTYPE, mode)
        with open("/bin/busybox", "rb") as f:
            entry(tar, "bin/busybox", tarfile.REGTYPE, 0o755, f.read())
        for applet in ("sh", "echo", "cat", "ls", "id", "env", "sleep", "true"):
            entry(tar, "bin/" + applet, tarfile.SYMTYPE, 0o777, link="busybox")
        entry(tar, "etc/passwd", tarfile.REGTYPE, 0o644, b"root:x:0:0:root:/root:/bin/sh\n")
        entry(tar, "etc/group", tarfile.REGTYPE, 0o644, b"root:x:0:\n")
    layer_tar = raw.getvalue()
    layer = gzip.compress(layer_tar, mtime=0)
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    config = json.dumps({
        "architecture": arch, "os": "linux",
        "config": {"Env": ["PATH=/bin"], "Cmd": ["/bin/sh"]},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer_tar).hexdigest()]},
    }).encode()

    def desc(media: str, b: bytes) -> dict:
        return {"mediaType": media, "digest": "sha256:" + hashlib.sha256(b).hexdigest(), "size": len(b)}

    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": desc("application/vnd.oci.image.config.v1+json", config),
        "layers": [desc("application/vnd.oci.image.layer.v1.tar+gzip", layer)],
    }).encode()
    index = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [desc("application/vnd.oci.image.manifest.v1+json", manifest)],
    }).encode()
    with tarfile.open(path, mode="w", format=tarfile.PAX_FORMAT) as tar:
        entry(tar, "oci-layout", tarfile.REGTYPE, 0o644, b'{"imageLayoutVersion":"1.0.0"}')
        entry(tar, "index.json", tarfile.REGTYPE, 0o644, index)
        entry(tar, "blobs", tarfile.DIRTYPE, 0o755)
        entry(tar, "blobs/sha256", tarfile.DIRTYPE, 0o755)
        for b in (config, manifest, layer):
            entry(tar, "blobs/sha256/" + hashlib.sha256(b).hexdigest(), tarfile.REGTYPE, 0o644, b)
