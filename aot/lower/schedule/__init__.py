"""How a kernel is scheduled: the tuning space (sites, configs), tile sizes,
the accumulation strategy, the float conv schedule."""
