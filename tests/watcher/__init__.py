"""watcher."""
