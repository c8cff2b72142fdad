"""zookeeper."""
