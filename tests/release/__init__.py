"""The release as users get it: the sdist and wheel installed into a clean venv, and the docs site."""
