"""The language-model layer shared by the LM papers.

- ``loader``: the one loader for hub ids, local folders, the packaged SmolLM2 and tiny-lm;
- ``tiny``: a small Llama-config model trained locally on a task, cached by config + code;
- ``training``: causal-LM training through the one Lightning trainer factory;
- ``prompting``: prompts as token ids (chat templates) and teacher-forced evaluation.
LM task definitions (prompts, references, answer extraction) live in ``data/lm_tasks.py``.
"""
