"""Connectors: everything that talks to something outside (ZooKeeper, Kafka, bookies, Delta)."""
