"""The paper's theory made executable: Theorem 1 (a convolution as attention) and the locality
measure's reference values."""
