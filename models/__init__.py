"""Language models: one loader for hub ids, local folders and the bundled SmolLM2 GGUF, and
a tiny Llama-config model trained locally (mirrors the ``model`` config group)."""
