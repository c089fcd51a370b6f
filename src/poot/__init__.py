"""poot: the command line."""
