"""The shared .coveignore vectors (sdk/testdata/coveignore.json), every
case: the folder is packed as an upload packs it, and the archive holds
exactly the files the case says are included, and every .coveignore."""

import json
import os
import tarfile

import pytest

from cove._shared import pack_dir


def vectors_path() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    return os.environ.get("COVE_SDK_TESTDATA") or os.path.join(here, "..", "..", "testdata")


with open(os.path.join(vectors_path(), "coveignore.json")) as f:
    CASES = json.load(f)["cases"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_coveignore_vectors(tmp_path, case):
    for rel, text in list(case["ignore"].items()) + [(rel, "x") for rel in case["files"]]:
        full = tmp_path / rel
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(text)
    with pack_dir(str(tmp_path)) as f, tarfile.open(fileobj=f, mode="r:gz") as tar:
        files = {ti.name for ti in tar if ti.isreg()}
    want = {rel for rel, included in case["files"].items() if included} | set(case["ignore"])
    assert files == want


def test_there_are_vectors():
    assert len(CASES) >= 8
