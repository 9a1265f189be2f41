"""Checks for the labs in labs/: one module per lab (lab01_flops, ...)."""
