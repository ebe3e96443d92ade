"""Analysis of study tables: queries, the paper's figures and Table 1.

Reads tables only (Parquet parts under a study's ``tables/``); never imports the
training code or torch.

>>> import analysis
>>> study = analysis.load("results/smoke")      # NAME under ./results, or a PATH / URI
>>> study.runs, study.epochs, study.heads, study.maps   # pandas DataFrames
>>> study.sql("SELECT name, best_test_acc FROM runs ORDER BY best_test_acc DESC")
"""

from analysis.io import AnalysisError, Study, load

__all__ = ["AnalysisError", "Study", "load"]
