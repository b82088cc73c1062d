"""Adapters between py_wire frames and RL frameworks' own batch objects."""
