"""``dataclasses.replace`` for frozen dataclasses with slots, at about a third of its cost.

:func:`dataclasses.replace` looks up the class's fields, reads each one into a dict of keyword arguments and calls
``__init__``, which sets every field through ``object.__setattr__`` (the class is frozen): about 9 µs for a ledger's
18-field state, twice a check on the checker's busiest path. :func:`replace` calls a copier written once per class,
as :mod:`dataclasses` writes ``__init__``: one keyword-only parameter a field, each slot set by its own setter. It
does what :func:`dataclasses.replace` does for a class without ``__post_init__``, ``InitVar`` or ``init=False``
fields (an unknown field name raises ``TypeError``); any other class is handed to :func:`dataclasses.replace`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: Per class: its copier, or None when :func:`dataclasses.replace` must do the copy.
_COPIERS: dict[type, Callable[..., Any] | None] = {}
_UNSEEN: Any = object()


def replace(obj: T, /, **changes: Any) -> T:
    """A copy of ``obj`` with ``changes`` (field name -> value), as :func:`dataclasses.replace` makes it."""
    cls = type(obj)
    copier = _COPIERS.get(cls, _UNSEEN)
    if copier is _UNSEEN:
        copier = _COPIERS[cls] = _copier_of(cls)
    if copier is None:
        return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    result: T = copier(obj, **changes)
    return result


def _copier_of(cls: type) -> Callable[..., Any] | None:
    """``copy(obj, *, field=..., ...)`` for a frozen slotted dataclass whose ``__init__`` only sets its fields."""
    if not dataclasses.is_dataclass(cls) or "__slots__" not in cls.__dict__ or hasattr(cls, "__post_init__"):
        return None
    fields = dataclasses.fields(cls)
    if len(cls.__dataclass_fields__) != len(fields) or not all(f.init for f in fields):  # InitVar, ClassVar
        return None
    if not all(hasattr(cls.__dict__.get(f.name), "__set__") for f in fields):
        return None
    names = [f.name for f in fields]  # identifiers: a dataclass's fields are
    scope: dict[str, Any] = {"_new": object.__new__, "_cls": cls, "_keep": _UNSEEN}
    scope.update({f"_set_{name}": cls.__dict__[name].__set__ for name in names})
    lines = [f"def copy(obj, *, {', '.join(f'{name}=_keep' for name in names)}):", "    new = _new(_cls)"]
    lines += [f"    _set_{name}(new, obj.{name} if {name} is _keep else {name})" for name in names]
    lines.append("    return new")
    exec("\n".join(lines), scope)  # the source holds the field names alone
    copier: Callable[..., Any] = scope["copy"]
    return copier
