"""einops' layers for jtmini: ``jt.einops.layers.jittor`` (Jittor's module name)."""
