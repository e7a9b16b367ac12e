"""The command table: every ``sesa`` command, the module of its Hydra app, its one-line help and its usage line.

The dispatcher (sesa_cli.cli), the commands' help, their validation messages, shell completion and sesa_cli.api all
read it here; it imports nothing, so any of them can.
"""

from __future__ import annotations

# command -> (module under sesa_cli.commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("train", "RL training of a policy on a task; writes a run dir with metrics and checkpoints"),
    "eval": ("eval", "evaluate a checkpoint or base model: success, pass@k, coverage, distinct, entropy"),
    "revive": ("revive", "continue a (collapsed) run from a checkpoint with new settings, e.g. sampler=sequential"),
    "diversity-report": ("diversity_report", "compare runs: tables and plots of success, diversity, entropy"),
}

USAGE = "usage: sesa {" + ",".join(COMMANDS) + "} [overrides ...] [hydra flags: -m, --cfg job, --help, ...]"
USAGES: dict[str, str] = {
    "train": "sesa train [overrides ...]",
    "eval": "sesa eval [ckpt=CHECKPOINT|RUN_DIR] [overrides ...]",
    "revive": "sesa revive ckpt=RUN_DIR|CHECKPOINT [step=auto|last|N] [more_steps=N] [overrides ...]",
    "diversity-report": "sesa diversity-report runs=[RUN_DIR|MULTIRUN_DIR,...] [compare=[...]] [metrics=[...]]",
}
"""Each command's own usage line: its ``--help`` starts with it, and a missing mandatory key quotes it."""
