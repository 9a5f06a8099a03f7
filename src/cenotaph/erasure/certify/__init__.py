"""Certificates of erasure: signing and attesting what was erased."""
