"""The streaming job and the command-line interface."""
