"""Helpers shared by the test suites (loopback servers, span assertions)."""
