"""Tests derived from the seeds' failure modes (R2, W3, W6, S1), end to end through the public API.

A package (unlike ``tests/conformance``) so its module names cannot clash with other test files.
"""
