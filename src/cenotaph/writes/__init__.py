"""The write path: sealing a record, writing batches of records, and the group commit that batches
transactions."""
