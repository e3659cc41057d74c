"""Test helpers shipped with the executor: fakes for pure logic, the backend conformance suite, the injection corpus.

Nothing in ``executor`` imports this package.
"""

from executor.testing.conformance import BackendConformance
from executor.testing.fake_session import FakeExecutor, FakeSession
from executor.testing.injection import INJECTION_CORPUS, InjectionCase

__all__ = ["INJECTION_CORPUS", "BackendConformance", "FakeExecutor", "FakeSession", "InjectionCase"]
