"""Erasure: forget planning, the purge pipeline, the residue scanner, certificates and the audit chain."""
