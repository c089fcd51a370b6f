"""poot_codegen."""
