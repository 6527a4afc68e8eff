"""Jittor's ``jittor.einops.einops``: the einops library's own ``einops`` module, whose functions
work on Vars through ``_backend`` (Jittor's tests import its reductions list from here)."""
from . import _backend  # noqa: F401  (the backend einops finds for Vars)
from einops.einops import *  # noqa: F401,F403
from einops.einops import _enumerate_directions, _reductions  # noqa: F401
