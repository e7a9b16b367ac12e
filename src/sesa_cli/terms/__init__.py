"""Loss terms that bring their own rows (``algo.terms``): the protocol and registry (``base``) and sesa's own terms,
one file each (``follow``, ``found``). Importing the package registers them; torch-free."""

from sesa_cli.terms import follow, found  # noqa: F401  (register)
from sesa_cli.terms.base import (
    TERMS,
    Term,
    TermContext,
    TermRows,
    TermSettings,
    build_terms,
    register_term,
    term_settings,
)

__all__ = ["TERMS", "Term", "TermContext", "TermRows", "TermSettings", "build_terms", "register_term", "term_settings"]
