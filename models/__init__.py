"""Model code shared by papers: the Lightning trainer factory (``trainer.py``, fed by the
``trainer`` config group) and the language-model layer (``lm/``)."""
