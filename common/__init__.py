"""The bottom layer: what every other layer (data/, models/, methods/, experiments/) may
import, and which imports none of them: the user-facing error type and the atomic cache."""
