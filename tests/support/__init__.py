"""Helpers the tests and benches share that are not harnesses of their own."""
