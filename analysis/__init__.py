"""Analysis of study tables: queries, the paper's figures and Table 1.

Reads tables only; never imports the training code or torch.  Usage: docs/results.md, "Queries".
"""

from analysis.io import AnalysisError, Study, load

__all__ = ["AnalysisError", "Study", "load"]
