"""One protocol module per paper (``experiments/<key>.py``) plus the runner core (``runner/``)."""
