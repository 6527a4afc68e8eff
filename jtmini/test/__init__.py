"""Runnable end-to-end checks, as in Jittor: ``python -m jtmini.test.test_resnet``."""
