"""Jittor's ``jittor.einops._backends``: einops' backends, with the one for Vars under Jittor's
name ``JittorBackend``."""
from einops._backends import *  # noqa: F401,F403
from ._backend import JtminiBackend as JittorBackend  # noqa: F401
