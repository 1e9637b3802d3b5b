"""The SDK's models against api/openapi.json, field by field, read as it is
now (no server needed):

- src/cove/_schema.py is what scripts/gen_models.py generates from it;
- every schema has its model (a dataclass with exactly the schema's
  fields, an enum with exactly its values), and so do the classes the SDK
  adds on top (Chunk for OutputRecord);
- every call returns the model of the schema its operation answers (no
  untyped dict where the schema has a type), sync and async;
- every call that sends a request schema takes each of its fields as a
  keyword argument (or, where it says so, a whole field as **kwargs).

Python keeps the API's names (snake_case): the rename rule is identity,
except a keyword, which gets a trailing underscore (``from`` → ``from_``).
"""

import dataclasses
import enum
import importlib.util
import inspect
import json
import os
import typing

import cove
from cove import _schema, models
from cove._model import Model, model_of

from test_contract import ASYNC, OPERATIONS

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")


def openapi():
    path = os.environ.get("COVE_OPENAPI") or os.path.join(ROOT, "..", "..", "api", "openapi.json")
    with open(path) as f:
        return json.load(f)


def schemas():
    return openapi()["components"]["schemas"]


def properties(all_schemas, s):
    if "$ref" in s:
        return properties(all_schemas, all_schemas[s["$ref"].rsplit("/", 1)[-1]])
    out = {}
    for part in s.get("allOf", []):
        out.update(properties(all_schemas, part))
    out.update(s.get("properties") or {})
    return out


def json_fields(cls):
    """A model's fields by their JSON names."""
    names = {f.name for f in dataclasses.fields(cls)} - {"raw"}
    rename = {a: j for a, (j, _) in cls._fields.items()}
    return {rename.get(a, a) for a in names}


def test_generated_models_match_the_document():
    spec = importlib.util.spec_from_file_location("gen_models", os.path.join(ROOT, "scripts", "gen_models.py"))
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    want = gen.generate(openapi())
    with open(os.path.join(ROOT, "src", "cove", "_schema.py")) as f:
        have = f.read()
    if have != want:
        diff = [f"line {i + 1}: have {a!r}, the document gives {b!r}"
                for i, (a, b) in enumerate(zip(have.splitlines(), want.splitlines())) if a != b][:20]
        raise AssertionError("src/cove/_schema.py differs from api/openapi.json: run "
                             "python3 sdk/python/scripts/gen_models.py\n" + "\n".join(diff))


def test_every_schema_has_its_model_field_by_field():
    all_schemas = schemas()
    problems = []
    for name, s in sorted(all_schemas.items()):
        if "enum" in s:
            cls = getattr(_schema, name, None)
            if not (isinstance(cls, type) and issubclass(cls, enum.Enum)):
                problems.append(f"enum schema {name} has no Enum")
            elif sorted(m.value for m in cls) != sorted(s["enum"]):
                problems.append(f"enum {name}: values {sorted(m.value for m in cls)}, schema {sorted(s['enum'])}")
            continue
        props = properties(all_schemas, s)
        if not props:
            continue
        try:
            cls = model_of(name)
        except KeyError:
            problems.append(f"schema {name} has no model")
            continue
        have, want = json_fields(cls), set(props)
        for f in sorted(want - have):
            problems.append(f"schema {name} has field {f!r}; its model {cls.__qualname__} has none")
        for f in sorted(have - want):
            problems.append(f"model {cls.__qualname__} has field {f!r}; schema {name} has none")
        for a, (j, kind) in cls._fields.items():
            p = props.get(j, {})
            if kind.startswith("enum:"):
                e = getattr(_schema, kind[5:])
                target = all_schemas.get(p.get("$ref", "").rsplit("/", 1)[-1], p)
                if sorted(m.value for m in e) != sorted(target.get("enum", [])):
                    problems.append(f"{name}.{j}: enum {e.__name__} differs from the schema's values")
            elif "enum" in p:
                problems.append(f"{name}.{j} is an enum in the schema but a {kind} in the model")
    assert not problems, "\n".join(problems)


# Classes the SDK writes itself over a schema, and the rule they follow.
SDK_MODELS = {models.Chunk: "OutputRecord"}


def test_sdk_models_have_their_schemas_fields():
    all_schemas = schemas()
    for cls, name in SDK_MODELS.items():
        have = {f.name for f in dataclasses.fields(cls)}
        want = set(properties(all_schemas, all_schemas[name]))
        assert have == want, f"{cls.__name__} vs schema {name}: missing {sorted(want - have)}, extra {sorted(have - want)}"


def test_sdk_classes_decode_nested_objects():
    sb = cove.Sandbox.from_dict({"id": "sbx_x", "state": "running", "resources": {"cpus": 2, "memory_mib": 512},
                                 "labels": {"ticket_id": "42"}, "network": {"allow": ["a.example"]}})
    assert sb.state == "running" and sb.state is _schema.SandboxState.RUNNING
    assert (sb.cpus, sb.memory_mib, sb.resources.memory_mib) == (2, 512, 512)
    assert sb.labels == {"ticket_id": "42"} and sb["labels"] == {"ticket_id": "42"}  # map keys as they came
    r = cove.CommandResult.from_dict({"command": {"id": "cmd_x", "state": "exited", "exit_code": 3}, "stdout": "x"})
    assert isinstance(r.command, cove.CommandInfo) and r.command.done and r.exit_code == 3
    assert models.Sandbox.from_dict({"state": "hibernating"}).state == "hibernating"  # a newer server's value


def _return_models(hint):
    """The model classes a return annotation names (through List, Page,
    Iterator, Optional)."""
    out = set()
    if isinstance(hint, type):
        out.add(hint)
    for a in typing.get_args(hint):
        out |= _return_models(a)
    origin = typing.get_origin(hint)
    if isinstance(origin, type):
        out.add(origin)
    return out


# Handles that carry the model of what they wrap in ``info``.
HANDLES = {
    "SandboxHandle": "Sandbox", "AsyncSandbox": "Sandbox", "Command": "Command", "AsyncCommand": "Command",
}
# The schema a list operation answers is <Item>List: the call returns
# items (a list, a Page or an iterator of them).
# Calls that answer something other than their operation's JSON schema.
OTHER_RETURNS = {
    "getOpenAPI": "the document itself: any JSON object (its schema has no fields)",
    "createCommand": "start() answers a Command handle over the Command schema; run() the CommandResult",
    "forkSandbox": "fork() answers handles of the new sandboxes, the items of ForkResult",
}


def response_schemas():
    doc = openapi()
    out = {}
    for item in doc["paths"].values():
        for verb, op in item.items():
            if verb not in ("get", "put", "post", "patch", "delete"):
                continue
            for code, r in op.get("responses", {}).items():
                if not code.startswith("2"):
                    continue
                for mt, c in (r.get("content") or {}).items():
                    ref = (c.get("schema") or {}).get("$ref")
                    if mt in ("application/json", "application/x-ndjson") and ref:
                        out[op["operationId"]] = ref.rsplit("/", 1)[-1]
    return out


def test_every_call_returns_its_schemas_model():
    all_schemas = schemas()
    problems = []
    for op, name in sorted(response_schemas().items()):
        if op in OTHER_RETURNS or op not in OPERATIONS:
            continue
        props = properties(all_schemas, all_schemas[name])
        item = props.get("items", {}).get("items", {}).get("$ref", "").rsplit("/", 1)[-1]
        want = item if name.endswith("List") and item and set(props) == {"items", "next_cursor"} else name
        if want == "OutputRecord":
            wanted = {models.Chunk}
        else:
            wanted = {model_of(want)}
        cls_name, meth = OPERATIONS[op]
        for c in (cls_name, ASYNC[cls_name]):
            cls = getattr(cove, c)
            fn = getattr(cls, meth)
            hint = typing.get_type_hints(fn, vars(inspect.getmodule(cls))).get("return")
            got = _return_models(hint)
            if c in HANDLES and HANDLES[c] == want:
                continue
            handle = {getattr(cove, h) for h, s in HANDLES.items() if s == want}
            if not (got & (wanted | handle)):
                problems.append(f"{op}: {c}.{meth} returns {hint}, not the {want} model {sorted(w.__name__ for w in wanted)}")
    assert not problems, "\n".join(problems)


# Calls that send a request schema: (class, method) -> (schema, the
# keyword arguments that fill a field of a nested schema, the arguments
# only the SDK has, the schema's fields taken as **kwargs).
REQUESTS = {
    "createSandbox": ("Client", "create", "CreateSandboxRequest",
                      {"cpus": "resources", "memory_mib": "resources", "disk_mib": "resources"},
                      {"wait", "keep", "idempotency_key", "extra"}, ()),
    "submitWorkload": ("Client", "submit_workload", "CreateWorkloadRequest",
                       {"cpus": "resources", "memory_mib": "resources", "disk_mib": "resources", "gpus": "resources",
                        "gpu_type": "resources"},
                       {"idempotency_key", "extra"}, ()),
    "createCommand": ("SandboxHandle", "start", "CreateCommandRequest", {}, {"wake"}, ()),
    "createPreview": ("SandboxHandle", "preview", "CreatePreviewRequest", {}, set(), ()),
    "createWebhook": ("Client", "create_webhook", "CreateWebhookRequest", {}, set(), ()),
    "saveAsset": ("SandboxHandle", "save_asset", "SaveAssetRequest", {}, set(), ()),
    "moveFile": ("Files", "move", "MoveRequest", {"src": "from", "dst": "to"}, set(), ()),
    "createTicket": ("Client", "create_ticket", "CreateTicketRequest", {}, set(), ()),
    "createTeam": ("Client", "create_team", "CreateTeamRequest", {}, set(), ()),
    "putSecret": ("Client", "put_secret", "PutSecretRequest", {}, {"name"}, ()),
    "updateSandbox": ("SandboxHandle", "update", "UpdateSandboxRequest", {}, set(), ("fields",)),
    "updateTeam": ("Client", "update_team", "UpdateTeamRequest", {}, {"team_id"}, ("fields",)),
    "updateImage": ("Client", "update_image", "ImageSettings", {}, {"ref"}, ("settings",)),
}


def test_every_request_field_is_an_argument():
    all_schemas = schemas()
    problems = []
    for op, (cls_name, meth, name, nested, sdk_only, kwargs) in sorted(REQUESTS.items()):
        props = properties(all_schemas, all_schemas[name])
        for c in (cls_name, ASYNC[cls_name]):
            sig = inspect.signature(getattr(getattr(cove, c), meth))
            params = {p.name: p for p in sig.parameters.values() if p.name != "self"}
            var_kw = [p.name for p in params.values() if p.kind is inspect.Parameter.VAR_KEYWORD]
            if kwargs:
                if var_kw != list(kwargs):
                    problems.append(f"{op}: {c}.{meth} should take the {name} fields as **{kwargs[0]}")
                continue
            taken = set()
            for p in params:
                if p in sdk_only:
                    continue
                if p in nested:
                    target = nested[p]
                    if target in props:  # a field renamed (src → from)
                        taken.add(target)
                        continue
                    sub = properties(all_schemas, props.get(target, {}))
                    if p not in sub:
                        problems.append(f"{op}: {c}.{meth}({p}=) is no field of {name}.{target}")
                    taken.add(target)
                    continue
                if p.rstrip("_") not in props:
                    problems.append(f"{op}: {c}.{meth}({p}=) is no field of {name}")
                taken.add(p.rstrip("_"))
            for f in sorted(set(props) - taken):
                problems.append(f"{op}: {name} has field {f!r}; {c}.{meth} takes no argument for it")
    assert not problems, "\n".join(problems)


def test_models_read_like_the_dicts_they_were():
    p = cove.Preview.from_dict({"id": "prv_x", "url": "http://8000-sbx.localhost", "port": 8000})
    assert p["id"] == "prv_x" and p.get("token") is None and "token" not in p and "url" in p
    assert p.id == "prv_x" and p.port == 8000
    assert isinstance(p, Model)
