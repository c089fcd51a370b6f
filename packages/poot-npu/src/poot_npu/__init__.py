"""poot_npu."""
