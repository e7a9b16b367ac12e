"""The one reader of the YAML files sesa reads from a run dir or a sweep dir (config.yaml, .hydra/overrides.yaml,
multirun.yaml): safe, bounded, and one line naming the file and the key when a file cannot be read.

Imports nothing of sesa_cli but its config errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sesa_cli.config import DIGITS_LIMIT, ConfigError, first_line

MAX_YAML_NODES = 100_000
"""The most nodes a run file read by :func:`read_yaml` may expand to, aliases counted at every use (a run's
config.yaml holds a few hundred, and none of them an alias)."""


def read_yaml(path: Path, what: str = "run config") -> Any:
    """A run's YAML file (config.yaml, .hydra/overrides.yaml) as plain Python data: the one reader for every command.

    Safe loading (no Python objects), and bounded: YAML aliases are shared when parsed, but every reader that copies
    the data (OmegaConf, a deep walk) expands them, so a "billion laughs" file of nested aliases a few hundred bytes
    long would hang it; a file whose nodes, aliases expanded, exceed :data:`MAX_YAML_NODES`, or that refers to
    itself, is refused with a one-line ConfigError naming it, before anything is built from it."""
    import yaml

    try:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        sizes: dict[int, int] = {}

        def expanded(n: Any, open_: frozenset[int]) -> int:
            if id(n) in sizes:
                return sizes[id(n)]
            if id(n) in open_:
                raise ConfigError(f"{path} is not a valid {what} (an alias refers to itself)")
            children = n.value if isinstance(n.value, list) else []
            flat = [c for pair in children for c in (pair if isinstance(pair, tuple) else (pair,))]
            total = 1 + sum(expanded(c, open_ | {id(n)}) for c in flat)
            if total > MAX_YAML_NODES:
                raise ConfigError(
                    f"{path} is not a valid {what} (its aliases expand to more than {MAX_YAML_NODES:,} nodes)"
                )
            sizes[id(n)] = total
            return total

        expanded(node, frozenset())
        try:
            return loader.construct_document(node)
        except ValueError:  # an integer longer than Python reads (DIGITS_LIMIT): which key holds it
            found = long_number(node)
            if found is None:
                raise
            raise ConfigError(
                f"{path}: {found[0]} is a number of {found[1]:,} digits, longer than can be read (at most "
                f"{DIGITS_LIMIT:,})"
            ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not a valid {what} ({first_line(exc)})") from None
    except RecursionError:
        raise ConfigError(f"{path} is not a valid {what} (nested too deeply)") from None
    finally:
        loader.dispose()


def long_number(document: Any) -> tuple[str, int] | None:
    """(dotted key, digits) of the first integer of a YAML document (its text, or its composed node) longer than
    :data:`~sesa_cli.config.DIGITS_LIMIT` digits, which no YAML reader can construct; None when there is none. Walks
    the composed nodes, which hold every scalar as text: nothing is constructed."""
    import yaml

    if isinstance(document, str):
        try:
            document = yaml.compose(document, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except yaml.YAMLError:
            return None
    stack: list[tuple[str, Any]] = [("", document)] if document is not None else []
    while stack:
        where, node = stack.pop(0)
        if isinstance(node, yaml.MappingNode):
            stack += [(f"{where}.{k.value}" if where else str(k.value), v) for k, v in node.value]
        elif isinstance(node, yaml.SequenceNode):
            stack += [(f"{where}[{i}]", v) for i, v in enumerate(node.value)]
        elif isinstance(node, yaml.ScalarNode) and node.tag.endswith(":int"):
            digits = sum(c.isdigit() for c in node.value)
            if digits > DIGITS_LIMIT:
                return where or "the document", digits
    return None
