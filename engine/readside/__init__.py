"""The read side: DTOs, pagination, timelines, explain, waits, the one follow every live stream
adapts. It never writes status."""
