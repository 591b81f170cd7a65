"""The inspector: its endpoints, the event list and the session rows it shows."""
