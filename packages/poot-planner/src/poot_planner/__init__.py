"""poot_planner."""
