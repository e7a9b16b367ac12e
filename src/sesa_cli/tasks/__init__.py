"""Tasks: one module per task, each registered by name (``task=<name>``).

Importing this package registers every task (the modules are cheap to import: no torch, gymnasium or
math-verify at module level). The layers, bottom up: ``base`` (the Task protocol and the registry), ``ragen``
(RAGEN's compact and chat text format and its parser), ``agent`` (multi-turn episodes) and ``grid`` (worlds moved in
by direction); the tasks themselves (``path``, ``countdown``, ``math``, ``frozenlake``, ``sokoban``, ``sudoku``)
with their helpers (``safe_arith``, ``countdown_solver``, ``math_grading``). Nothing here imports the command layer,
and sesa_cli.config imports nothing of this package: the command layer stores the task schemas in Hydra's
ConfigStore (sesa_cli.commands.schemas.register_configs).
"""

from sesa_cli.tasks import countdown, frozenlake, math, path, reasoning_gym, sokoban, sudoku  # noqa: F401  (register)
from sesa_cli.tasks.base import TASK_SCHEMAS, TASKS, Score, Task, make_task, register_task

__all__ = ["TASKS", "TASK_SCHEMAS", "Score", "Task", "make_task", "register_task"]
