"""Check results: the detail's list and the full-screen report of each check."""
