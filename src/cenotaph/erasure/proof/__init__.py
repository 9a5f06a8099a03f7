"""Proof of erasure: scanning the bytes for residue, verifying a forget, judging where a request
stands, and checking the ledger, the audit chain and the records."""
