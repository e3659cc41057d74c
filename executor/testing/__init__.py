"""Test helpers shipped with the executor: fakes for pure logic and the backend conformance suite.

Nothing in ``executor`` imports this package.
"""

from executor.testing.conformance import BackendConformance

__all__ = ["BackendConformance"]
