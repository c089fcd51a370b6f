"""poot_engine."""
