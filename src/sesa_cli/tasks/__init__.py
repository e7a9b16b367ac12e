"""Tasks: one module per task, each registered by name (``task=<name>``).

Importing this package registers every task (the modules are cheap to import: no torch, gymnasium or
math-verify at module level).
"""

from sesa_cli.tasks import countdown, frozenlake, math, path, sokoban, sudoku  # noqa: F401  (register the tasks)
from sesa_cli.tasks.base import TASK_SCHEMAS, TASKS, Score, Task, make_task, register_task

__all__ = ["TASKS", "TASK_SCHEMAS", "Score", "Task", "make_task", "register_task"]
