"""The scope tree every conformance test uses (one definition, imported by each test module)."""

from __future__ import annotations

T = "tenant:t"
U = "tenant:t/user:u"
S1 = "tenant:t/user:u/session:s1"
S2 = "tenant:t/user:u/session:s2"
V = "tenant:t/user:v"
MODES = ("compliance", "operational")
