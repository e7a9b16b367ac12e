"""Policy and tokenizer loading: the tiny warm-started model (spec section 5) and local Hugging Face directories."""

from sesa_cli.models.loading import Policy, load_policy

__all__ = ["Policy", "load_policy"]
