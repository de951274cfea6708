"""mond: the node monitoring agent (design-monitoring-agent): collectors, cache, HTTP on 1815."""
