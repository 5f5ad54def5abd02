"""Side-by-side benchmarks: gradlog against the hand-written numpy floor and PyTorch CPU."""
