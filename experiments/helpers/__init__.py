"""Helpers shared by the papers' protocols: rate fits with intervals (``fits``) and figure
creation (``figures``). Method logic never lives here (it goes to ``methods/<key>/``); the
run context (``ctx.cached``) holds the config-keyed cache."""
