"""The deployment task engine: the only writer of task status."""
