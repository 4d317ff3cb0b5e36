"""The console's themes, shipped inside the package so a wheel install has them."""
