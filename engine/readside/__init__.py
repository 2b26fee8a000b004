"""The read side: DTOs, pagination, and the NOTIFY fanout. It never writes status."""
