"""Storage backends. Each implements :class:`cenotaph.backends.base.Backend`; the store holds the policy."""
