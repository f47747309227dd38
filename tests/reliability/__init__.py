"""Fault injection through the online loop (issue 8, reliability and security)."""
