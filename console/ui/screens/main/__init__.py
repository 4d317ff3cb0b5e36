"""The main screen, split by reason to change: its layout and keys (`screen`), the reads its
pollers make off the UI loop (`reads`), what the looks say about the phases (`follow`), how
the panels and the detail are fed on the UI loop (`feed`) and the thread workers its keys
start (`work`)."""
