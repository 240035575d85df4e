"""Benchmarks (`make bench`): DESIGN §9 figures, written as JSON under bench/results/."""
