"""The read side: DTOs, pagination, and the NOTIFY listener. It never writes status."""
