"""``poot acceptance``: the checks a hardware owner runs once on a device (``checks``), their
region-limit programs (``regions``), the engine-level checks (``engine``) and the subcommand
(``cli``)."""
