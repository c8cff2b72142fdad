"""bookies."""
