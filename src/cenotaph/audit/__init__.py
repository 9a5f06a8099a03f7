"""The audit hash chain."""
