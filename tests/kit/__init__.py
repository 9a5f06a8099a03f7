"""Shared test machinery: one store factory over every backend (:mod:`tests.kit.stores`) and one
kit for child processes in crash and race tests (:mod:`tests.kit.proc`). Nothing here is a test."""
