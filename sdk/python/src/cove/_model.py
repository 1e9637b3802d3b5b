"""What the generated models (_schema.py) stand on: a dataclass base that
decodes nested objects and enums, keeps the JSON it came from in ``raw``
(fields a newer server adds are never lost) and reads like that dict
(``obj["field"]``, ``obj.get``, ``in``), and a str-valued Enum."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, Dict, Tuple, Type, TypeVar


class StrEnum(str, Enum):
    """An enum whose members are their string values: ``state == "running"``
    holds, and str() and f-strings give the value."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


_REGISTRY: Dict[str, type] = {}


def register(cls: type, name: str = "") -> type:
    """Decode the schema ``name`` (default: the class's name) as cls, also
    where it is nested in another object."""
    _REGISTRY[name or cls.__name__] = cls
    return cls


def model_of(name: str) -> type:
    """The class the schema ``name`` decodes to."""
    return _REGISTRY[name]


def enum_value(cls: Type[Enum], v: Any) -> Any:
    """v as a member of cls; a value a newer server added stays a str."""
    try:
        return cls(v)
    except ValueError:
        return v


def _decode(kind: str, v: Any) -> Any:
    if v is None or kind == "plain":
        return v
    k, _, rest = kind.partition(":")
    if k == "model":
        return _REGISTRY[rest].from_dict(v) if isinstance(v, dict) else v
    if k == "enum":
        return enum_value(_REGISTRY[rest], v)
    if k == "list":
        return [_decode(rest, x) for x in v] if isinstance(v, list) else v
    if k == "map":
        return {key: _decode(rest, x) for key, x in v.items()} if isinstance(v, dict) else v
    return v


def _encode(v: Any) -> Any:
    if isinstance(v, Model):
        return v.to_dict()
    if isinstance(v, Enum):
        return v.value
    if isinstance(v, list):
        return [_encode(x) for x in v]
    if isinstance(v, dict):
        return {k: _encode(x) for k, x in v.items()}
    return v


M = TypeVar("M", bound="Model")


@dataclass
class Model:
    """An API object. ``_fields`` maps each attribute to its JSON name and
    how to decode it."""

    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    _fields: ClassVar[Dict[str, Tuple[str, str]]] = {}

    @classmethod
    def from_dict(cls: Type[M], d: Any) -> M:
        d = d if isinstance(d, dict) else {}
        kw = {}
        for a, (j, kind) in cls._fields.items():
            v = d.get(j)
            if v is not None:  # absent or null: the field's default
                kw[a] = _decode(kind, v)
        obj = cls(**kw)
        obj.raw = d
        return obj

    def to_dict(self) -> Dict[str, Any]:
        """The JSON object: the fields set (not None), by their JSON names,
        over what it was decoded from."""
        out = dict(self.raw)
        for a, (j, _) in self._fields.items():
            v = getattr(self, a)
            if v is not None:
                out[j] = _encode(v)
        return out

    # Read like the dict the API answered (what these calls returned
    # before they were typed).
    def _dict(self) -> Dict[str, Any]:
        return self.raw if self.raw else self.to_dict()

    def __getitem__(self, key: str) -> Any:
        return self._dict()[key]

    def __contains__(self, key: object) -> bool:
        return key in self._dict()

    def get(self, key: str, default: Any = None) -> Any:
        return self._dict().get(key, default)
