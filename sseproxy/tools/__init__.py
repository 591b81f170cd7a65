"""Offline commands on the core and capture: replay, mock, demo, report.

Imported by the CLI only.
"""
