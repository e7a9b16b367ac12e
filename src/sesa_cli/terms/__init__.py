"""Loss terms (``algo.terms``): the protocol and registry (``base``) and sesa's own terms, one file each (``follow``,
``found``; the published exploration bonuses ``outcome_ucb``, ``outcome_batch``, ``unlikeliness``). Importing the
package registers every module in it; torch-free."""

from sesa_cli.registry import import_submodules
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

import_submodules(__name__, __path__)

__all__ = ["TERMS", "Term", "TermContext", "TermRows", "TermSettings", "build_terms", "register_term", "term_settings"]
