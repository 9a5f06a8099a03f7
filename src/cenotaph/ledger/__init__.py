"""The forget ledger: the key provider's journal of forget plans, the authority over what the database
only caches. Below both the write path and erasure, which import it; it imports neither."""
