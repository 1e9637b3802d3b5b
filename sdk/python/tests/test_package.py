"""The package as installed: the tests run against it, not the source
tree; the sync client is what scripts/gen_sync.py writes from the async
one; every public call has a docstring."""

import inspect
import os
import sys

import pytest

import cove
from cove import _attach, aio, client

HERE = os.path.dirname(os.path.abspath(__file__))


def test_installed_not_the_tree():
    if not os.environ.get("COVE_SDK_INSTALLED"):
        pytest.skip("COVE_SDK_INSTALLED unset: not run from an installed wheel")
    tree = os.path.realpath(os.path.join(HERE, "..", "src"))
    where = os.path.realpath(cove.__file__)
    assert not where.startswith(tree + os.sep), where
    assert os.sep + "site-packages" + os.sep in where, where


def test_sync_client_is_generated_from_async():
    sys.path.insert(0, os.path.join(HERE, "..", "scripts"))
    try:
        import gen_sync
    finally:
        sys.path.pop(0)
    with open(aio.__file__) as f:
        want = gen_sync.generate(f.read())
    with open(client.__file__) as f:
        assert f.read() == want, "client.py is stale: run sdk/python/scripts/gen_sync.py"


PUBLIC = [cove.Client, cove.SandboxHandle, cove.Command, cove.Files, cove.AsyncClient, cove.AsyncSandbox,
          cove.AsyncCommand, cove.AsyncFiles, cove.Retry, _attach.AsyncAttachment, _attach.SyncAttachment]


@pytest.mark.parametrize("cls", PUBLIC, ids=[c.__name__ for c in PUBLIC])
def test_every_public_call_has_a_docstring(cls):
    assert inspect.getdoc(cls)
    bare = [name for name, fn in inspect.getmembers(cls, inspect.isfunction)
            if not name.startswith("_") and not (fn.__doc__ or "").strip()]
    assert bare == []


def test_sync_and_async_have_the_same_calls():
    for s, a in [(cove.Client, cove.AsyncClient), (cove.SandboxHandle, cove.AsyncSandbox),
                 (cove.Command, cove.AsyncCommand), (cove.Files, cove.AsyncFiles)]:
        names = lambda c: {n for n, _ in inspect.getmembers(c, inspect.isfunction) if not n.startswith("_")}
        assert names(s) == names(a)


def test_installed_dependencies_are_in_the_declared_ranges():
    """What the tests run on is inside each range the package declares, so
    the ranges' lower bounds are ones the tests prove."""
    from importlib import metadata

    from packaging.requirements import Requirement

    reqs = [Requirement(r) for r in metadata.requires("cove-sdk") or []]
    assert {r.name for r in reqs} == {"httpx", "websockets", "pathspec"}
    for r in reqs:
        have = metadata.version(r.name)
        assert r.specifier.contains(have, prereleases=True), f"{r.name} {have} is outside {r.specifier}"


def test_the_wanted_dependency_versions_are_the_ones_imported():
    """Where a run asks for particular releases (the newest ones Debian
    ships, beside Debian 12's), those are what the tests import."""
    want = os.environ.get("COVE_SDK_WANT_DEPS")
    if not want:
        pytest.skip("COVE_SDK_WANT_DEPS unset: the system's releases")
    from importlib import metadata

    import httpx
    import pathspec
    import websockets

    pins = dict(pin.split("==", 1) for pin in want.split(","))
    for name, version in pins.items():
        assert metadata.version(name) == version, name
    for module in (httpx, websockets, pathspec):
        assert os.sep + "site-packages" + os.sep in module.__file__, module.__file__
    assert {"httpx", "websockets", "pathspec"} <= set(pins)
