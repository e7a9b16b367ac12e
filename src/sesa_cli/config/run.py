"""The run's sections and the command schemas: the training loop (``train.*``), the evaluation protocol (``eval.*``),
the collapse monitor (``collapse.*``), the trackers (``logger_options.*``), the hyperparameter search (``sweep.*``),
and the config of each command (:class:`TrainConfig`, :class:`ReviveConfig`, :class:`EvalConfig`,
:class:`DiversityReportConfig`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import MISSING

from sesa_cli.config.base import ConfigError, at_least, device_form, one_of, raise_if, seed_problem, thread_count
from sesa_cli.config.method import AlgoConfig, OptimConfig, SamplerConfig
from sesa_cli.config.model import ModelConfig, TaskConfig

__all__ = [
    "SWEEP_DIRECTIONS",
    "CollapseConfig",
    "DiversityReportConfig",
    "EvalConfig",
    "EvalProtocolConfig",
    "LoggerOptions",
    "PolicyRunConfig",
    "ReviveConfig",
    "SweepConfig",
    "TrainConfig",
    "TrainLoopConfig",
]


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
    walked (sesa_cli.rollout.episode_tree) have them at evaluations only. Scoring all 512 leaves of the
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
        one_of(self.resume, "train.resume", ("auto", "never"))
        raise_if([
            *at_least(self, "train", 1, "steps", "batch_size", "max_nonfinite"),
            *at_least(self, "train", 0, "checkpoint_every", "eval_every", "sample_every", "log_every", "policy_every"),
        ])  # fmt: skip


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

    walk_min_prob: float = 1e-4
    """An agent task's exact walk (``policy/*`` on FrozenLake and Sokoban) expands no branch less probable than this;
    the mass it cuts is ``policy/pruned_mass``."""
    walk_branches: int = 32
    """At most this many branches of the walk live at once, the most probable (0 = no cap); the rest is pruned. The
    walk's cost is its rows: branches x the columns of a turn's feedback (sesa_cli.exact.ExactPolicy)."""

    def __post_init__(self) -> None:
        problems = at_least(self, "eval", 1, "samples")
        problems += at_least(self, "eval", 0, "walk_branches")
        if not 0 <= self.walk_min_prob < 1:
            problems.append(f"eval.walk_min_prob={self.walk_min_prob} must be in [0, 1)")
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

        one_of(self.direction, "sweep.direction", SWEEP_DIRECTIONS)
        if find(self.objective) is None:
            raise ConfigError(f"sweep.objective={self.objective!r} is not a metric key (docs/metrics.md lists them)")


@dataclass
class PolicyRunConfig:
    """The sections of every command that runs a policy: the policy, its task, and how its answers are drawn."""

    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = MISSING
    sampler: SamplerConfig = field(default_factory=SamplerConfig)


@dataclass
class TrainConfig(PolicyRunConfig):
    """``sesa train``: RL training of a policy on a task."""

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
    plugins: list[str] = field(default_factory=list)
    """Python modules imported before the config is checked, each registering what it defines (a loss term, an
    advantage, a policy loss, a batch filter, a sampler or a task: docs/extending.md), e.g.
    ``plugins=[mypkg.myterm]``; they must be importable (an installed package, or ``PYTHONPATH``). The modules named by
    the ``sesa.plugins`` entry points of installed packages are always imported. A run records the list, so ``sesa
    eval`` and ``sesa revive`` of it import them again."""
    sweep: SweepConfig = field(default_factory=SweepConfig)

    def __post_init__(self) -> None:
        raise_if([p for p in [seed_problem(self.seed)] if p])
        thread_count(self.threads)
        device_form(self.device)
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
class EvalConfig(PolicyRunConfig):
    """``sesa eval``: evaluate a checkpoint, a run's last checkpoint, or the base model of ``model``."""

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
    plugins: list[str] = field(default_factory=list)
    """Plug-in modules imported before the config is checked, as ``sesa train``'s ``plugins``
    (sesa_cli.config.TrainConfig); with ``ckpt=`` the run's own are imported too."""
    device: str = "cpu"
    """Where the policy runs: ``cpu``, ``cuda``, ``cuda:N`` or ``auto``, as for ``sesa train`` (TrainConfig's
    ``device``)."""
    threads: str = "1"
    """Torch intra-op threads (CPU): a count, or ``auto``; one thread by default whatever the machine's load, as for
    ``sesa train`` (sesa_cli.config.TrainConfig's ``threads`` says why and what ``auto`` does)."""

    def __post_init__(self) -> None:
        raise_if([p for p in [seed_problem(self.seed)] if p])
        thread_count(self.threads)
        device_form(self.device)


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
