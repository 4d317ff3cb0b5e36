"""The phase list and its title: the checklist an operator moves through."""
