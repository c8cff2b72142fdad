"""kafka."""
