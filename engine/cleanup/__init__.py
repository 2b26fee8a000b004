"""Releasing what tasks leave behind (seed 001): cleanup jobs, runtime rows, local process
groups; rows and actions only (the worker that runs the jobs is engine/maintenance's)."""
