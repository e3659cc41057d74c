"""Integrations with agent and evaluation frameworks (surfaces layer): :mod:`executor.integrations.inspect`."""
