"""poot_ir."""
