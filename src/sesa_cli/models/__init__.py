"""Policy and tokenizer loading: the tiny warm-started model and local Hugging Face directories."""

from sesa_cli.models.loading import load_policy
from sesa_cli.models.policy import Policy

__all__ = ["Policy", "load_policy"]
