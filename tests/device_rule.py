"""The device rule, checked on a CPU: every tensor sesa's own code creates names the device it lives on.

On a GPU a tensor made with ``torch.tensor(rows)`` and no ``device=`` lives on the CPU, and the first operation that
meets the model's tensors fails (``Expected all tensors to be on the same device``), or silently copies it over on
every step. A CPU-only test cannot see that happen: every tensor is on the CPU there. What it can see is the cause.
:class:`DeviceRule` is a torch function mode that watches every tensor factory (``torch.tensor``, ``zeros``,
``arange``, ...) while it is on, and records each call made from sesa's source files without a ``device=``, as
``file:line function``. Host data (numbers a caller reads) names ``device="cpu"``; everything that meets the model
names the model's device. A factory called by torch or transformers on sesa's behalf is theirs, and not recorded: the
check is sesa's own code, line by line, over whatever a test runs under it.

Why not ``torch.set_default_device("meta")``: an unnamed tensor would then fail where it meets the model's CPU
tensors, or at ``.tolist()``, a traceback far from the line that made it, and transformers' own unnamed tensors
(a tokenizer's ``return_tensors="pt"``) would fail too. The mode names the line, and only sesa's.

What the mode cannot see: a generator on the wrong device (``torch.Generator()`` is no torch function; the engine
moves its callers' generators itself, sesa_cli.rollout.engine.on_device) and a device named wrongly (``device="cpu"``
on a tensor that meets the model): the CUDA tests (``-m cuda``) run those paths for real.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

import sesa_cli

SESA_SOURCE = Path(sesa_cli.__file__).resolve().parent
TORCH_SOURCE = str(Path(torch.__file__).resolve().parent)

FACTORIES: frozenset[Callable[..., Any]] = frozenset(
    {
        torch.tensor,
        torch.as_tensor,
        torch.asarray,
        torch.scalar_tensor,
        torch.zeros,
        torch.ones,
        torch.full,
        torch.empty,
        torch.empty_strided,
        torch.arange,
        torch.eye,
        torch.linspace,
        torch.logspace,
        torch.rand,
        torch.randn,
        torch.randint,
        torch.randperm,
        torch.tril_indices,
        torch.triu_indices,
        torch.from_numpy,  # no device argument at all: always the CPU (torch.as_tensor(array, device=...) instead)
    }
)
"""The torch functions that make a new tensor on the default device unless told otherwise (the ``*_like`` and
``Tensor.new_*`` ones take their input's device, and are not here)."""


class DeviceRule(TorchFunctionMode):
    """While on, records every tensor factory called from a file under ``roots`` without a ``device=`` (a tensor
    passed to ``torch.as_tensor``/``asarray`` keeps its own device and is not recorded). :attr:`found` holds
    ``"path:line function"`` per call site, paths relative to the root that holds them, each site once."""

    def __init__(self, roots: Sequence[Path] = (SESA_SOURCE,)) -> None:
        super().__init__()
        self.roots = [Path(r).resolve() for r in roots]
        self.found: list[str] = []

    def __torch_function__(
        self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        if func in FACTORIES and kwargs.get("device") is None and not _keeps_device(func, args):
            site = self._site()
            if site is not None and site not in self.found:
                self.found.append(site)
        return func(*args, **kwargs)

    def _site(self) -> str | None:
        """``path:line function`` of the first caller outside torch and this module, when it is under a root."""
        frame = sys._getframe(2)  # 0: _site, 1: __torch_function__
        while frame is not None and (
            frame.f_code.co_filename.startswith(TORCH_SOURCE) or frame.f_code.co_filename == __file__
        ):
            frame = frame.f_back  # type: ignore[assignment]
        if frame is None:
            return None
        path = Path(frame.f_code.co_filename).resolve()
        for root in self.roots:
            if path.is_relative_to(root):
                return f"{path.relative_to(root).as_posix()}:{frame.f_lineno} {frame.f_code.co_name}"
        return None


def _keeps_device(func: Any, args: Sequence[Any]) -> bool:
    return func in (torch.as_tensor, torch.asarray) and bool(args) and isinstance(args[0], torch.Tensor)


@contextmanager
def device_rule(roots: Sequence[Path] = (SESA_SOURCE,)) -> Iterator[DeviceRule]:
    """``with device_rule() as rule: ...``, then ``rule.found`` lists the unnamed factories the block ran."""
    rule = DeviceRule(roots)
    with rule:
        yield rule


def explain(found: Sequence[str]) -> str:
    """The assertion message of a test that found unnamed factories: one call site a line."""
    return "tensors created without a device (name it: the model's, or 'cpu' for host data):\n  " + "\n  ".join(found)
