"""The repository's scripts (scripts/*.py), imported by path for their tests: they are not part of the package."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load(name: str) -> ModuleType:
    """``scripts/<name>.py`` as the module ``sesa_scripts.<name>`` (loaded once)."""
    module_name = f"sesa_scripts.{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, SCRIPTS / f"{name}.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return sys.modules[module_name]


results = load("results")
real_model = load("real_model")
