"""Analysis of study tables: queries, the paper's figures and Table 1."""
