"""Registries of named plug-ins: every kind of method is one pattern.

A :class:`Registry` maps a config name to the object that carries it out: an advantage estimator, a policy loss, a
loss term, a batch filter, a sampler, a task, ... One list of names, read by the configs' checks and by ``--help``;
registering a name twice raises, an unknown name is a ConfigError that lists the valid ones. A plug-in module outside
sesa registers the same way (sesa_cli.plugins loads it).

A method is a :class:`Plugin`: one class in one file, registered with its registry's decorator, that declares on
itself

* its settings, a dataclass ``Settings`` whose fields are documented beside their definition (units, range) and
  checked in its ``__post_init__`` (a ConfigError whose message starts with the field's name);
* its properties, class variables its kind defines (a policy loss that is zero at advantage 0, an advantage that
  takes the format penalties apart, ...);
* its metrics, ``metrics``: the :class:`~sesa_cli.metric_keys.MetricKey` entries it writes, declared by its
  registration (:func:`sesa_cli.metric_keys.declare`), so a plug-in's metrics are declared like sesa's own.

Its settings come from its config value with :func:`settings_from`: under its own key, ``algo.terms.<name>.*`` for a
mapping of plug-ins, ``algo.advantage.*`` beside ``name`` for a choice of one (:func:`named_settings`). A package of
plug-ins registers every module it holds with :func:`import_submodules`, so adding a method is adding its file.
Torch-free; OmegaConf checks the settings' types.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

from sesa_cli.config import ConfigError
from sesa_cli.metric_keys import MetricKey, declare

__all__ = ["NoSettings", "Plugin", "Registry", "import_submodules", "named_settings", "settings_from"]

T = TypeVar("T")
D = TypeVar("D")


@dataclasses.dataclass
class NoSettings:
    """The settings of a method that has none."""


class Plugin:
    """A method of any kind: subclassed by each kind's base class (``Advantage``, ``PolicyLoss``, ``Term``,
    ``BatchFilter``), whose subclasses are registered under their config names."""

    name: ClassVar[str] = ""
    """Its config name, set by :meth:`Registry.register`."""
    Settings: ClassVar[type[Any]] = NoSettings
    """Its settings schema, a dataclass (fields documented beside them)."""
    metrics: ClassVar[tuple[MetricKey, ...]] = ()
    """The metric keys it writes (declared when it is registered; sesa_cli.metric_keys)."""


class Registry(dict[str, T]):
    """``name -> object`` of one kind of plug-in; ``kind`` is the config key that names them (``algo.terms``)."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator adding its argument under ``name``; a name already taken raises ``ValueError``. A class with a
        ``name`` attribute (a :class:`Plugin`) gets ``name``, the config name it answers to, and its ``metrics`` are
        declared (sesa_cli.metric_keys)."""

        def add(obj: T) -> T:
            self.add(name, obj)
            if isinstance(obj, type) and hasattr(obj, "name"):
                obj.name = name
            if isinstance(obj, type) and issubclass(obj, Plugin):
                declare(obj.metrics, f"{self.kind} {name!r}")
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


def import_submodules(package: str, path: list[str] | Any) -> None:
    """Import every module of the package ``package`` (its ``__path__``, ``path``), each registering what it defines:
    a method's file is all that adding it takes."""
    for module in sorted(pkgutil.iter_modules(path), key=lambda m: m.name):
        if module.name != "base" and not module.name.startswith("_"):
            importlib.import_module(f"{package}.{module.name}")


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
            valid = ", ".join(fields) or "none (it has no settings)"
            raise ConfigError(f"{where}.{unknown[0]} is not a setting; valid: {valid}")
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


def named_settings(registry: Registry[Any], value: Mapping[str, Any] | str, where: str) -> tuple[type[Plugin], Any]:
    """(the class, its settings) of a choice of one plug-in configured as ``{name: <registered name>, <its
    settings>...}`` (``algo.advantage``, ``algo.loss``); a ConfigError names an unknown name, or an unknown setting
    with the chosen one's valid settings. A bare name (a Python caller's ``AlgoConfig(loss="clip_cov")``) is the
    plug-in at its defaults."""
    if isinstance(value, str):
        value = {"name": value}
    if not isinstance(value, Mapping) or "name" not in value:
        raise ConfigError(f"{where} must name one of {', '.join(sorted(registry))} ({where}.name)")
    cls = registry.lookup(str(value["name"]))
    settings = settings_from(cls.Settings, {k: v for k, v in value.items() if k != "name"}, where)
    return cls, settings
