"""The trust boundary: the one sensitivity predicate and its scrub, hostile text, manifest rules."""
