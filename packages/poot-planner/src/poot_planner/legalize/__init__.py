"""Legalization: rewrites of refused equations into steps a target admits, each with a derived
bound. ``rewrite`` drives it, ``rules`` holds the rules, ``steps`` the patterns they match,
``emit`` the builder they write with, ``bounds`` the bounds they derive and ``logarithm`` the
log range reduction and series."""
