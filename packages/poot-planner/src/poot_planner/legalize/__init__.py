"""Legalization: rewrites of refused equations into steps a target admits, each with a derived
bound. ``rewrite`` drives it, ``rules`` holds the rules, ``expanders`` the equations they
emit (with ``poot_planner.emit``, the builder the fp16 prelude writes with too), ``steps`` the
exact steps and patterns they share, ``bounds`` the bounds they derive (by ``intervals``, the
interval analysis) and ``logarithm`` the log range reduction and series."""
