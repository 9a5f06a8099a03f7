"""Planning a forget: which records, keys and tokens it takes, and the probes that will verify it."""
