"""Command-line front ends: one module per command group, thin (parse, call, print)."""
