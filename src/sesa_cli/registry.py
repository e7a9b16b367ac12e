"""Registries of named plug-ins, and a plug-in's settings read from its config value.

A :class:`Registry` maps a config name to the object that carries it out (a loss term, a batch filter, a sampler, a
task, ...): one list of names, read by the configs' checks and by ``--help``; registering a name twice raises, an
unknown name is a ConfigError that lists the valid ones. A plug-in module outside sesa registers the same way
(sesa_cli.plugins loads it).

Plug-ins configured as a mapping of name to settings (``algo.terms``, ``sampler.filters``) read their value with
:func:`settings_from`. Torch-free; OmegaConf checks the settings' types.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from sesa_cli.config import ConfigError

__all__ = ["Registry", "settings_from"]

T = TypeVar("T")
D = TypeVar("D")


class Registry(dict[str, T]):
    """``name -> object`` of one kind of plug-in; ``kind`` is the config key that names them (``algo.terms``)."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator adding its argument under ``name``; a name already taken raises ``ValueError``. A class with a
        ``name`` attribute (a loss term, a batch filter) gets ``name``: the config name it answers to."""

        def add(obj: T) -> T:
            self.add(name, obj)
            if isinstance(obj, type) and hasattr(obj, "name"):
                obj.name = name
            return obj

        return add

    def add(self, name: str, obj: T) -> None:
        """``self[name] = obj``, unless ``name`` is taken (``ValueError``: a plug-in may not replace another)."""
        if name in self:
            raise ValueError(f"{self.kind} {name!r} registered twice")
        self[name] = obj

    def lookup(self, name: str) -> T:
        """``self[name]``; an unknown name is a ConfigError naming the valid ones."""
        try:
            return self[name]
        except KeyError:
            raise ConfigError(f"unknown {self.kind} {name!r}; valid: {', '.join(sorted(self))}") from None


def settings_from(schema: type[D], value: Any, where: str) -> D | None:
    """The settings dataclass ``schema`` of a plug-in from its config value, or None when the value turns it off.

    A mapping sets fields by name (an unknown one is a ConfigError naming the valid ones); a bare number or string
    sets the first field (``algo.terms={found: 0.2}`` is ``{found: {coef: 0.2}}``); ``true`` or an empty mapping
    keeps every default; ``false`` and ``null`` turn the plug-in off. ``where`` names the key in messages; a settings
    dataclass's own check raises a ConfigError whose message starts with the field's name (``coef=-1 must be ...``)."""
    if value is None or value is False:
        return None
    fields = [f.name for f in dataclasses.fields(schema)]  # type: ignore[arg-type]
    if value is True:
        values: dict[str, Any] = {}
    elif isinstance(value, Mapping):
        values = {str(k): v for k, v in value.items()}
        unknown = sorted(set(values) - set(fields))
        if unknown:
            raise ConfigError(f"{where}.{unknown[0]} is not a setting; valid: {', '.join(fields)}")
    elif isinstance(value, int | float | str) and fields:
        values = {fields[0]: value}
    else:
        raise ConfigError(f"{where}={value!r} must be a mapping of settings ({', '.join(fields)}), a value of "
                          f"{fields[0] if fields else 'none'}, true or false")  # fmt: skip
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:  # OmegaConf checks and converts each value to its field's type (an int coefficient becomes a float)
        settings: D = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), values))  # type: ignore[assignment]
    except ConfigError as exc:  # the settings' own check, whose message starts with the field's name
        raise ConfigError(f"{where}.{exc}") from None
    except OmegaConfBaseException as exc:
        raise ConfigError(f"{where}: {str(exc).splitlines()[0]}") from None
    return settings
