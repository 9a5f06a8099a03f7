"""Purging: carrying out a forget's plan in chunks, rewriting the database's files, and the worker that
purges in the background."""
