"""The main screen, the full-screen views and the dialogs."""
