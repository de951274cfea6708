"""maintd: the maintenance daemon turning node self-diagnoses into safe, tracked repairs."""
