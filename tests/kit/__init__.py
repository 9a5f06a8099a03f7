"""Shared test machinery: one store factory over every backend (:mod:`tests.kit.stores`), one
kit for child processes in crash and race tests (:mod:`tests.kit.proc`), and a clock the test
moves for TTLs (:mod:`tests.kit.clock`). Nothing here is a test."""
