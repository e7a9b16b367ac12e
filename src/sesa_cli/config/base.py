"""The machinery of the config schemas: the user-facing error, the checks every section's ``__post_init__`` uses, and
the conversion of a composed config into its typed dataclass (unknown keys and non-finite numbers refused first)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

__all__ = [
    "DEVICES",
    "DIGITS_LIMIT",
    "LONGEST_SHOWN",
    "SEED_MAX",
    "ConfigError",
    "at_least",
    "conf_dir",
    "cut",
    "device_form",
    "first_line",
    "nonfinite_values",
    "one_of",
    "positive",
    "raise_if",
    "seed_problem",
    "subset_of",
    "thread_count",
    "to_object",
    "unknown_keys",
]


class ConfigError(ValueError):
    """A user-facing configuration problem; the CLI prints it as one line and exits 2."""


def first_line(exc: BaseException, limit: int = 200) -> str:
    """The first line of an exception's message (its type name if it has none), cut to its first sentence when
    longer than ``limit``, and its long values cut (:func:`cut`): what a one-line error quotes, never cut
    mid-sentence."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    if len(line) > limit:
        line = line.split(". ", 1)[0]
    return cut(line)


LONGEST_SHOWN = 160
"""The most characters of one value (a word without spaces) a one-line message shows (:func:`cut`)."""


def cut(text: str, limit: int = LONGEST_SHOWN) -> str:
    """``text`` with every word (a run of characters without whitespace) longer than ``limit`` cut to its first and
    last characters around ``…(N characters)…``: a long value stays recognisable, the line stays readable."""
    if len(text) <= limit:
        return text
    words = text.split(" ")
    head, tail = limit * 2 // 3, limit // 6
    return " ".join(f"{w[:head]}…({len(w):,} characters)…{w[-tail:]}" if len(w) > limit else w for w in words)


def one_of(value: str, field_name: str, choices: tuple[str, ...]) -> None:
    """A ConfigError unless ``value`` is one of ``choices`` (a setting with a fixed set of values, not a registry)."""
    if value not in choices:
        raise ConfigError(f"{field_name}={value!r} is not valid; choose one of: {', '.join(choices)}")


def at_least(obj: Any, prefix: str, minimum: float, *names: str) -> list[str]:
    """A problem per field of ``names`` below ``minimum`` (counts and sizes: a 0 must never reach the engine)."""
    return [f"{prefix}.{n}={getattr(obj, n)} must be >= {minimum}" for n in names if getattr(obj, n) < minimum]


def positive(obj: Any, prefix: str, *names: str) -> list[str]:
    """A problem per field of ``names`` that is not > 0 (rates and norms)."""
    return [f"{prefix}.{n}={getattr(obj, n)} must be > 0" for n in names if not getattr(obj, n) > 0]


def subset_of(obj: Any, prefix: str, allowed: str, *names: str) -> list[str]:
    """A problem per field of ``names`` that is not a non-empty string of characters from ``allowed`` (the operators
    an arithmetic task may use)."""
    wrong = [n for n in names if not getattr(obj, n) or set(getattr(obj, n)) - set(allowed)]
    return [f"{prefix}.{n}={getattr(obj, n)!r} must be a non-empty subset of {allowed!r}" for n in wrong]


DIGITS_LIMIT = 4300
"""The longest integer Python reads from text (``sys.get_int_max_str_digits``'s default): a longer number in an
override, a config file or a run's files is refused with one line naming where it is."""

SEED_MAX = 2**32 - 1
"""The largest ``seed``: numpy's global generator (seeded with the run's seed, sesa_cli.commands.common) takes
0..2**32 - 1, and a seed outside that range failed with numpy's traceback after the model had loaded."""


def seed_problem(seed: int, name: str = "seed") -> str | None:
    """Why ``seed`` cannot seed a run (None when it can): every generator the run seeds takes it (:data:`SEED_MAX`)."""
    if 0 <= seed <= SEED_MAX:
        return None
    return f"{name}={seed} must be in [0, {SEED_MAX}] (2**32 - 1: the seeds numpy's generator takes)"


def thread_count(threads: str) -> int | None:
    """The ``threads`` key as a count, or None for ``auto``; a ConfigError for anything else."""
    value = str(threads).strip()
    if value == "auto":
        return None
    if value.isdigit() and int(value) > 0:
        return int(value)
    hint = " (0 meant auto before: write threads=auto)" if value == "0" else ""
    raise ConfigError(f"threads={threads} must be a thread count >= 1 or auto{hint}")


DEVICES = "auto, cpu, cuda or cuda:N"
"""The ``device`` values, in words."""


def device_form(device: str) -> tuple[str, int | None]:
    """(kind, index) of a ``device`` value: ``("auto", None)``, ``("cpu", None)``, ``("cuda", None)`` or ``("cuda",
    N)`` for ``cuda:N``; a ConfigError for anything else. Only the form: whether this machine has that device is
    sesa_cli.devices.device_problem's to say (it needs torch)."""
    kind, colon, index = str(device).strip().partition(":")
    if kind in ("auto", "cpu") and not colon:
        return kind, None
    if kind == "cuda" and (not colon or index.isdigit()):
        return kind, int(index) if colon else None
    raise ConfigError(f"device={device} is not a device; choose {DEVICES}")


def raise_if(problems: list[str]) -> None:
    """One ConfigError naming every wrong key found (so a user fixes them all in one go)."""
    if problems:
        raise ConfigError("; ".join(problems))


def nonfinite_values(cfg: Any) -> list[str]:
    """``key=value`` of every float setting of a composed config (DictConfig) that is NaN or +-inf, in schema order.

    One check for every float field of every schema (and any float in an untyped field): no range check of a
    ``__post_init__`` can see a NaN (every comparison with it is false), and an infinite rate or coefficient passes
    ``> 0``. A config that does not resolve yields no problem here: :func:`to_object` reports it."""
    from omegaconf import OmegaConf

    try:
        plain = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
    except Exception:  # noqa: BLE001  (an interpolation error: OmegaConf.to_object says which key)
        return []
    found: list[str] = []

    def walk(node: Any, prefix: str) -> None:
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for name, value in items:
            where = f"{prefix}[{name}]" if isinstance(node, list) else f"{prefix}.{name}" if prefix else str(name)
            if isinstance(value, float) and not math.isfinite(value):
                found.append(f"{where}={value}")
            walk(value, where)

    walk(plain, "")
    return found


def unknown_keys(cfg: Any, prefix: str = "") -> list[str]:
    """A one-line problem per key of a composed config (DictConfig) that its schema dataclass has no field for.

    Hydra's ``+key=`` and ``++key=`` add a key to a structured config even where the schema has none, and
    ``OmegaConf.to_object`` then sets it as a stray attribute: ``+optim.lrr=0.1`` would run with the typo recorded
    and ignored. Keys under a dict-typed field (``task.options`` of reasoning_gym) are the schema's to add."""
    import dataclasses

    from omegaconf import DictConfig, OmegaConf

    found: list[str] = []
    schema = OmegaConf.get_type(cfg)
    names = {f.name for f in dataclasses.fields(schema)} if dataclasses.is_dataclass(schema) else None
    for name in cfg:
        where = f"{prefix}.{name}" if prefix else str(name)
        if names is not None and name not in names:
            under = f"under {prefix!r}" if prefix else "at the top level"
            found.append(f"unknown key {where!r}; valid keys {under}: {', '.join(sorted(names))}")
            continue
        child = cfg._get_node(name)
        if isinstance(child, DictConfig) and not child._is_missing() and not child._is_none():
            found += unknown_keys(child, where)
    return found


def to_object(cfg: Any) -> Any:
    """DictConfig -> typed dataclass, turning schema validation errors into ``ConfigError``; a key the schema does
    not have (:func:`unknown_keys`) and a NaN or infinite float setting (:func:`nonfinite_values`) are refused
    first."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    raise_if(unknown_keys(cfg) or [f"{item} must be a finite number" for item in nonfinite_values(cfg)])
    try:
        return OmegaConf.to_object(cfg)
    except OmegaConfBaseException as exc:
        raise ConfigError(str(exc).splitlines()[0]) from None


def conf_dir() -> Path:
    """The Hydra config directory: ``sesa_cli/conf`` inside a wheel, the repository's ``conf/`` in a checkout."""
    package = Path(__file__).resolve().parents[1]  # sesa_cli/
    for candidate in (package / "conf", package.parents[1] / "conf"):
        if (candidate / "train.yaml").is_file():
            return candidate
    raise ConfigError(f"cannot find sesa's conf/ directory next to {package}")
