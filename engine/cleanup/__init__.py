"""Releasing what tasks leave behind (seed 001): cleanup jobs, their worker, runtime rows, local
process groups."""
