"""Offline replay of journaled judgments against another policy or trust level."""
