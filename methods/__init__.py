"""The algorithms: one subpackage per paper, plain numpy/torch, importable without Hydra."""
