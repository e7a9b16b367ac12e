"""sesa: reinforcement learning of language-model policies with sequential sampling (SESA, arXiv 2510.15502)."""

__version__ = "0.1.0"
