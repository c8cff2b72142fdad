"""Scrutiny: continuous durability checking for Apache BookKeeper and Pulsar clusters."""

__version__ = "0.1.0"
