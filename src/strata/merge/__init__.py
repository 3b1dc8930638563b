"""Merges of stored trees: three-way (line by line with merge3) and their tree helpers."""
