"""Real PARSEC 3.0 / SPLASH-2x programs traced here and committed as data (``traces/``):
their manifests (:mod:`.manifest`) and how they are recorded (:mod:`.record`)."""
