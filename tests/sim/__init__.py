"""Deterministic simulation of the coordination (sessions, membership, ownership, fencing)."""
